#!/usr/bin/python3
"""test_docs_map.py - the map of the code in the docs matches the code.

A reader finds the code through README.md's layout, docs/architecture.md's module table,
docs/rpc.md, docs/testing.md and README's list of commands; each drifts when code is added and
the map is not. This test reads the tree and fails, naming what is missing where, when:
- a module of lib/ is not in docs/architecture.md's module table or README.md's layout;
- an RPC of proto/tessera/v1/*.proto is not named in docs/rpc.md or README.md;
- a tests/integration/test_* script or program is not named in docs/testing.md;
- a `tessera` command (cli/main.c's table) is not in README.md;
- a file of lib/M includes a header of a module that is not below M in docs/architecture.md's
  layer order, or that M's row does not list among what it uses;
- a row of lib/util/knobs.c's table of environment variables is missing from the table in
  docs/operations.md, "Environment variables", or that table names a variable neither the C
  table nor the launch protocol (the names lib/client/sdk_launch.c reads) has, or leaves one of
  the launch protocol's out;
- a file of lib/, services/, cli/ or python/tessera calls getenv("TESSERA_...") other than
  lib/util/knobs.c (the table's reader) and lib/client/sdk_launch.c (the launch protocol,
  docs/launch.md); the test hooks are read through util/hook.h's ts_hook(NAME), not getenv.
It reads files only: no build, no process; well under a second.

Environment: TESSERA_SRC (the source tree; default: two directories up from here).
"""
import os
import re
import sys
import unittest

SRC = os.environ.get("TESSERA_SRC") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "..")


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def lib_modules():
    lib = os.path.join(SRC, "lib")
    return sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d)))


def module_table():
    """{module: (layer, set of what it uses)} from docs/architecture.md's table."""
    rows = {}
    for m in re.finditer(r"^\| (\d+) \| (\w+) \| .* \| ([^|]*) \|$", read("docs/architecture.md"),
                         re.M):
        # each item's first word: "snapshot (tessera_snapshot_*)" is snapshot
        uses = {u.split()[0] for u in m.group(3).split(",") if u.split()}
        rows[m.group(2)] = (int(m.group(1)), uses)
    return rows


def rpcs():
    """[(proto file, service, rpc)] of every proto file."""
    out = []
    pdir = os.path.join(SRC, "proto", "tessera", "v1")
    for name in sorted(os.listdir(pdir)):
        if not name.endswith(".proto"):
            continue
        text = read(os.path.join("proto", "tessera", "v1", name))
        for svc in re.finditer(r"^service (\w+) \{(.*?)^\}", text, re.M | re.S):
            for r in re.finditer(r"^\s*rpc (\w+)\s*\(", svc.group(2), re.M):
                out.append((name, svc.group(1), r.group(1)))
    return out


def integration_tests():
    d = os.path.join(SRC, "tests", "integration")
    return sorted(n for n in os.listdir(d)
                  if n.startswith("test_") and n.endswith((".py", ".c")))


def commands():
    text = read("cli/main.c")
    table = re.search(r"commands\[\] = \{(.*?)\n\};", text, re.S).group(1)
    return re.findall(r'\{ "(\w[\w-]*)", cmd_', table)


def below(table, m):
    """The modules m may include: those its row says it uses, what they use, and so on."""
    seen, todo = set(), [u for u in table[m][1] if u in table]
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo += [v for v in table[u][1] if v in table]
    return seen | ({"util"} if m != "util" else set())


def includes(path):
    with open(path, encoding="utf-8") as f:
        return re.findall(r'^#\s*include "([\w.-]+)/[^"]+"', f.read(), re.M)


def knob_names():
    """The variables of lib/util/knobs.c's table, in its order."""
    return re.findall(r'^\s*\[TS_KNOB_\w+\]\s*=\s*\w+\(\s*"(TESSERA_\w+)"',
                      read("lib/util/knobs.c"), re.M)


def launch_names():
    """The variables of the launch protocol: every name lib/client/sdk_launch.c spells."""
    return set(re.findall(r'"([A-Z][A-Z0-9_]*)"', read("lib/client/sdk_launch.c")))


def env_table():
    """The variables named in the first column of docs/operations.md's environment table."""
    text = read("docs/operations.md")
    m = re.search(r"^## Environment variables\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        return None
    names = set()
    for row in re.findall(r"^\| ([^|]*) \|", m.group(1), re.M):
        names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", row))
    return names


# Who may read a TESSERA_* variable with getenv: the table's reader and the launch protocol.
GETENV_ALLOWED = {"lib/util/knobs.c", "lib/client/sdk_launch.c"}
GETENV_TREES = ("lib", "services", "cli", os.path.join("python", "tessera"))


def tessera_getenvs():
    """[(file, line)] of every getenv("TESSERA_...") outside GETENV_ALLOWED."""
    out = []
    for tree in GETENV_TREES:
        for root, _, files in os.walk(os.path.join(SRC, tree)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(root, name), SRC)
                if rel in GETENV_ALLOWED:
                    continue
                # Comments may speak of getenv; blank them, keeping the line numbers.
                text = re.sub(r"/\*.*?\*/|//[^\n]*",
                              lambda c: "\n" * c.group(0).count("\n"), read(rel), flags=re.S)
                for m in re.finditer(r'\bgetenv\s*\(\s*"TESSERA_', text):
                    out.append((rel, text.count("\n", 0, m.start()) + 1))
    return sorted(out)


def words(text, word):
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(word), text) is not None


class DocsMap(unittest.TestCase):
    def test_every_module_is_on_the_map(self):
        table, readme = module_table(), read("README.md")
        missing = ["lib/%s: not in docs/architecture.md's module table" % m
                   for m in lib_modules() if m not in table]
        missing += ["lib/%s: not in README.md's layout" % m for m in lib_modules()
                    if "`lib/%s/`" % m not in readme]
        missing += ["docs/architecture.md lists module %s, which lib/ does not have" % m
                    for m in table if m not in lib_modules()]
        self.assertEqual(missing, [], "\n".join(missing))

    def test_every_rpc_is_documented(self):
        rpc_md, readme = read("docs/rpc.md"), read("README.md")
        missing = []
        for proto, svc, name in rpcs():
            for doc, text in (("docs/rpc.md", rpc_md), ("README.md", readme)):
                if not words(text, name):
                    missing.append("%s.%s (%s): not named in %s" % (svc, name, proto, doc))
        self.assertEqual(missing, [], "\n".join(missing))

    def test_every_integration_test_is_in_testing_md(self):
        text = read("docs/testing.md")
        missing = ["tests/integration/%s: not named in docs/testing.md" % t
                   for t in integration_tests() if not words(text, os.path.splitext(t)[0])]
        self.assertEqual(missing, [], "\n".join(missing))

    def test_every_command_is_in_the_readme(self):
        readme = read("README.md")
        missing = ["`tessera %s`: not in README.md" % c for c in commands()
                   if not re.search(r"tessera %s\b" % re.escape(c), readme)]
        self.assertEqual(missing, [], "\n".join(missing))

    def test_includes_follow_the_layers(self):
        table, mods = module_table(), set(lib_modules())
        bad = []
        for m in sorted(mods & set(table)):
            layer, uses = table[m][0], below(table, m)
            d = os.path.join(SRC, "lib", m)
            for name in sorted(os.listdir(d)):
                if not name.endswith((".c", ".h")):
                    continue
                for inc in sorted(set(includes(os.path.join(d, name)))):
                    if inc == m or inc not in mods:
                        continue
                    if inc not in table:
                        continue   # reported by test_every_module_is_on_the_map
                    if table[inc][0] >= layer:
                        bad.append("lib/%s/%s includes %s/ (layer %d), not below %s (layer %d)"
                                   % (m, name, inc, table[inc][0], m, layer))
                    elif inc not in uses:
                        bad.append("lib/%s/%s includes %s/, which docs/architecture.md does "
                                   "not list among what %s uses, or what they use" % (
                                       m, name, inc, m))
        self.assertEqual(bad, [], "\n".join(bad))

    def test_every_knob_is_in_operations_md(self):
        knobs, launch, doc = knob_names(), launch_names(), env_table()
        self.assertIsNotNone(doc, "docs/operations.md: no section \"Environment variables\"")
        self.assertTrue(knobs, "lib/util/knobs.c: no rows found in its table")
        bad = ["%s (lib/util/knobs.c): not in docs/operations.md's table of environment "
               "variables" % k for k in knobs if k not in doc]
        bad += ["%s (launch protocol, lib/client/sdk_launch.c): not in docs/operations.md's "
                "table of environment variables" % v for v in sorted(launch - doc)]
        bad += ["docs/operations.md's table of environment variables names %s, which neither "
                "lib/util/knobs.c's table nor lib/client/sdk_launch.c has" % v
                for v in sorted(doc - set(knobs) - launch)]
        self.assertEqual(bad, [], "\n".join(bad))

    def test_tessera_variables_are_read_through_knobs(self):
        bad = ["%s:%d: getenv(\"TESSERA_...\"); add a row to lib/util/knobs.c and read it with "
               "ts_knob_*() (docs/operations.md, \"Environment variables\")" % f
               for f in tessera_getenvs()]
        self.assertEqual(bad, [], "\n".join(bad))


if __name__ == "__main__":
    unittest.main(verbosity=2)
