#!/usr/bin/python3
"""test_call_graph.py - no call cycle among the files of a layered folder.

A folder reads bottom up only while no file calls back into one that calls it: a cycle
(state.c storing the work queue while workq.c stores itself through state.c) means neither
file can be read, tested or moved without the other (issue 45). This test builds the
file-level call graph from the object files of the build, one node per source file, an edge
A -> B where A's object leaves undefined a global symbol (a function or a variable) that B's
object defines, and fails on any cycle among the files of services/master (tessera-master's
objects) or of lib/client (libtessera's objects), naming each cycle and the symbols of each
of its edges. lib/client's files are also held to the layers that lib/client/sdk_internal.h
lists at its top, bottom up: every file is listed, and each calls only files listed before it.
A cycle is elementary (no file twice) and written from its smallest file name,
"a.c -> b.c -> a.c". Static functions and calls within a file are not edges.

It reads the build (nm on the objects; no process is started); well under a second.
Environment: TESSERA_BUILD (the build directory; default: the parent of TESSERA_BIN, else
build/ in the source tree), or the build directory as the first argument.
"""
import glob
import os
import re
import subprocess
import sys
import unittest

SRC = os.environ.get("TESSERA_SRC") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "..")


# (name, the target's object folder under CMakeFiles, the source folder inside it)
GROUPS = {
    "services/master": ("tessera-master.dir", "services/master"),
    "lib/client": ("tessera_sdk.dir", "lib/client"),
}


def build_dir():
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        return sys.argv.pop(1)
    if os.environ.get("TESSERA_BUILD"):
        return os.environ["TESSERA_BUILD"]
    if os.environ.get("TESSERA_BIN"):
        return os.path.dirname(os.path.abspath(os.environ["TESSERA_BIN"]))
    return os.path.join(SRC, "build")


BUILD = None


def objects(group):
    target, folder = GROUPS[group]
    d = os.path.join(BUILD, "CMakeFiles", target, folder)
    return sorted(glob.glob(os.path.join(d, "**", "*.c.o"), recursive=True)), d


def symbols(obj):
    """(defined, undefined): the global symbols obj defines and those it leaves to others."""
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        if f[1] == "U":
            undefined.add(f[0])
        elif f[1].isupper() or f[1] in ("u", "v", "w"):   # global (or weak) definitions
            defined.add(f[0])
    return defined, undefined


def graph(group):
    """{file: {callee file: sorted symbols}} among the group's files, names relative to the
    folder ("jobs.c", "state/workq.c")."""
    objs, d = objects(group)
    syms = {}
    for o in objs:
        syms[os.path.relpath(o, d)[:-len(".o")]] = symbols(o)
    owner = {}
    for f, (defined, _) in syms.items():
        for s in defined:
            owner[s] = f
    g = {f: {} for f in syms}
    for f, (_, undefined) in syms.items():
        for s in undefined:
            to = owner.get(s)
            if to and to != f:
                g[f].setdefault(to, []).append(s)
    for f in g:
        for to in g[f]:
            g[f][to].sort()
    return g


def sccs(g):
    """Strongly connected components of g (Tarjan), each a sorted list."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def cycles(g):
    """Every elementary cycle of g, each a tuple of files starting at its smallest, without
    the first repeated at the end. Each cycle is found from its smallest file only, within its
    strongly connected component (the folders are small: a plain search suffices)."""
    found = set()
    for comp in sccs(g):
        if len(comp) < 2:
            continue
        members = set(comp)
        for start in comp:
            path = [start]

            def walk(v):
                for w in sorted(g[v]):
                    if w not in members or w < start:
                        continue
                    if w == start:
                        found.add(tuple(path))
                    elif w not in path:
                        path.append(w)
                        walk(w)
                        path.pop()

            walk(start)
    return sorted(found, key=lambda c: (len(c), c))


def client_order():
    """lib/client's files in the order sdk_internal.h's list of layers names them, bottom up:
    each file's first mention between "The files in layers" and "The declarations below"."""
    with open(os.path.join(SRC, "lib", "client", "sdk_internal.h"), encoding="utf-8") as f:
        text = f.read()
    text = text[text.index("The files in layers"):text.index("The declarations below")]
    order = []
    for name in re.findall(r"\b\w+\.c\b", text):
        if name not in order:
            order.append(name)
    return order


def spell(c):
    return " -> ".join(c + (c[0],))


def explain(g, c):
    """A cycle with the symbols each edge stands for (the first three)."""
    lines = [spell(c)]
    for a, b in zip(c, c[1:] + (c[0],)):
        s = g[a][b]
        lines.append("    %s -> %s: %s%s" % (a, b, ", ".join(s[:3]),
                                              " (+%d)" % (len(s) - 3) if len(s) > 3 else ""))
    return "\n".join(lines)


class CallGraph(unittest.TestCase):
    def need(self, group):
        objs, d = objects(group)
        if not objs:
            self.fail("%s: no object files under %s; build first (make build), or set "
                      "TESSERA_BUILD to the build directory" % (group, d))

    def no_cycle(self, group):
        self.need(group)
        g = graph(group)
        found = cycles(g)
        if found:
            self.fail("%s: %d call cycle(s) among its files; each file must call only files "
                      "below it:\n%s" % (group, len(found),
                                         "\n".join(explain(g, c) for c in found)))

    def test_services_master_has_no_cycle(self):
        self.no_cycle("services/master")

    def test_lib_client_has_no_cycle(self):
        self.no_cycle("lib/client")

    def test_lib_client_calls_only_down(self):
        self.need("lib/client")
        g = graph("lib/client")
        order = client_order()
        where = {f: k for k, f in enumerate(order)}
        msgs = ["%s: not in sdk_internal.h's list of layers; add it to its layer" % f
                for f in sorted(g) if f not in where]
        for a in sorted(g):
            for b in sorted(g[a]):
                if a in where and b in where and where[b] > where[a]:
                    msgs.append("%s calls %s (%s), listed after it in sdk_internal.h's layers: "
                                "a call goes up" % (a, b, ", ".join(g[a][b][:3])))
        if msgs:
            self.fail("lib/client:\n" + "\n".join(msgs))


if __name__ == "__main__":
    BUILD = build_dir()
    if len(sys.argv) > 1 and sys.argv[1] == "--list":
        for grp in GROUPS:
            gr = graph(grp)
            for cyc in cycles(gr):
                print("%s: %s" % (grp, explain(gr, cyc)))
        sys.exit(0)
    unittest.main(verbosity=2)
