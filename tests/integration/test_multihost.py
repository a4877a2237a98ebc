#!/usr/bin/python3
"""test_multihost.py - bench/multihost.py runs, and leaves nothing behind, even when killed -9.

The benchmark (bench/README.md, "multihost") makes 10 network namespaces (9 emulated hosts and
a switch, bench/emuhosts.py), a master, 4 shards, 4 workers and 4 gloo ranks in them. Checked:
- a --quick run (4 MiB, 1 Gbit/s, 2 steps) exits 0 and writes JSON with the Tessera, gloo and
  limit rows and a headline {ours, baseline, unit, ratio}; once it has exited, no process it
  started is left, and no process is in any namespace it made (a network namespace lives only
  while something is in it: emuhosts holds them with processes, never with mounts);
- SIGKILL of the benchmark's own process once the shards are up and the workers stepping: it
  cleans nothing up then, yet within a few seconds every child it started and every namespace
  it made are gone (each child has PR_SET_PDEATHSIG = SIGKILL, emuhosts' holders included).
What it started is found by its environment: the benchmark puts TESSERA_BENCH_TAG=<--tag> in
every child's, and the tag is unique to the run; the namespaces are those such processes were
seen in while the benchmark ran, other than ours.
Skipped, with the reason printed, where network namespaces cannot be made (as test_hosts: not
root, no `unshare`, `nsenter` or `ip`, or a chroot that refuses them) or without python3-torch
(the gloo baseline).
"""
import importlib.util
import json
import os
import select
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

sys.path.insert(0, os.path.join(tl.SRC, "bench"))
from emuhosts import Net  # noqa: E402

BENCH = os.path.join(tl.SRC, "bench", "multihost.py")
RUN_TIMEOUT = 120        # a --quick run takes about 10 s here
GONE_WITHIN = 5.0        # seconds for the kernel to deliver the death signals and reap
OUR_NS = os.readlink("/proc/self/ns/net")


def tagged(tag):
    """{pid: its net namespace} of every live process whose environment carries tag. A zombie
    has neither environment nor namespace left, so it does not count."""
    want = b"TESSERA_BENCH_TAG=" + tag.encode()
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            found[int(d)] = os.readlink("/proc/%s/ns/net" % d)
        except OSError:
            continue      # gone meanwhile, or a zombie
    return found


def in_namespaces(nss):
    """pid: namespace of every live process in one of nss."""
    found = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ns = os.readlink("/proc/%s/ns/net" % d)
            except OSError:
                continue
            if ns in nss:
                found[int(d)] = ns
    return found


class MultiHost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        net = Net(["probe"], tag="tsmt%d" % os.getpid(), subnet="10.79.9")
        ok, why = net.probe()
        if not ok:
            raise unittest.SkipTest("cannot make network namespaces here (%s): the emulated "
                                    "hosts need root and iproute2" % why)
        if not importlib.util.find_spec("torch"):
            raise unittest.SkipTest("no python3-torch: the benchmark's gloo baseline needs it")
        for b in ("bench_pushpull", "tessera-master", "tessera-shard", "tessera"):
            if not os.access(os.path.join(tl.BIN, b), os.X_OK):
                raise unittest.SkipTest("no %s in %s: build everything first" % (b, tl.BIN))

    def start(self, tag, args, stderr):
        return subprocess.Popen([sys.executable, BENCH, "--bin", tl.BIN, "--quick", "--tag",
                                 tag] + args, stdout=subprocess.PIPE, stderr=stderr,
                                stdin=subprocess.DEVNULL)

    def watch(self, tag, seen):
        """Adds the namespaces of the run's processes, other than ours, to seen."""
        seen.update(ns for ns in tagged(tag).values() if ns != OUR_NS)

    def assert_all_gone(self, tag, seen, pids=()):
        """Within GONE_WITHIN s: no process of the run, none of pids, nothing in seen."""
        until, left = time.monotonic() + GONE_WITHIN, None
        while time.monotonic() < until:
            alive = [p for p in pids if os.path.exists("/proc/%d/ns/net" % p)
                     and self.not_zombie(p)]
            left = (tagged(tag), in_namespaces(seen), alive)
            if not any(left):
                return
            time.sleep(0.05)
        self.fail("left after %.0f s: processes of the run %s, processes in its namespaces "
                  "%s, pids seen before %s" % (GONE_WITHIN, left[0], left[1], left[2]))

    @staticmethod
    def not_zombie(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def test_0_bad_options_are_refused_naming_the_option(self):
        """Before any namespace is made: a partition size of 0 or larger than the tensor, a
        salt that is not one, each exit 2 naming the option."""
        for args, needle in ((["--partition-kib", "0"], "--partition-kib: '0'"),
                             (["--partition-kib", "8192", "--sizes", "4"],
                              "larger than the 4 MiB tensor"),
                             (["--salt", "-1"], "--salt: '-1'")):
            r = subprocess.run([sys.executable, BENCH, "--bin", tl.BIN] + args,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(needle, r.stderr, args)

    def test_a_quick_run_writes_its_rows_and_leaves_nothing(self):
        tag, out = "mt%da" % os.getpid(), os.path.join(tl.TEST_TMP, "multihost.json")
        with open(os.path.join(tl.TEST_TMP, "multihost-a.err"), "w+") as errf:
            p, seen = self.start(tag, ["--out", out], errf), set()
            until = time.monotonic() + RUN_TIMEOUT
            while p.poll() is None and time.monotonic() < until:
                self.watch(tag, seen)
                time.sleep(0.1)
            if p.poll() is None:
                p.kill()
            stdout = p.communicate()[0].decode()
            errf.seek(0)
            self.assertEqual(p.returncode, 0, stdout[-3000:] + errf.read()[-3000:])
        with open(out) as f:
            doc = json.load(f)
        have = {(r["system"], r.get("size_mib"), r["rate"]) for r in doc["rows"]}
        self.assertLessEqual({("tessera", 4, "1gbit"), ("gloo", 4, "1gbit"),
                              ("limit", None, "1gbit")}, have)
        for r in doc["rows"]:
            self.assertGreater(r["algbw_gbs"], 0, r)
        h = doc["headline"]
        self.assertEqual({"ours", "baseline", "unit", "ratio"}, {"ours", "baseline", "unit",
                                                                "ratio"} & set(h))
        self.assertGreater(h["ours"], 0)
        self.assertGreater(h["baseline"], 0)
        self.assertTrue(doc["ok"])
        self.assertIn("tessera 4 MiB", stdout)
        # 9 hosts and a switch, each a namespace its holder kept while the run went on
        self.assertGreaterEqual(len(seen), 10, seen)
        self.assert_all_gone(tag, seen)
        tl.log("a quick run: %d namespaces, Tessera %.4f GB/s against gloo %.4f at 4 MiB; "
               "nothing left" % (len(seen), h["ours"], h["baseline"]))

    def test_b_sigkill_of_the_bench_takes_every_child_and_namespace_with_it(self):
        tag = "mt%db" % os.getpid()
        p, seen = self.start(tag, ["--out", os.path.join(tl.TEST_TMP, "killed.json"),
                                   "--iters", "1000"], subprocess.PIPE), set()
        try:
            # "shards up", then the workers' line; soon after they are stepping
            buf, until = b"", time.monotonic() + RUN_TIMEOUT
            while b"tessera push+pull" not in buf and time.monotonic() < until:
                self.watch(tag, seen)
                if select.select([p.stderr], [], [], 0.1)[0]:
                    chunk = os.read(p.stderr.fileno(), 65536)
                    self.assertTrue(chunk, "the bench ended early: %s" % buf.decode()[-3000:])
                    buf += chunk
            self.assertIn(b"shards up", buf, buf.decode()[-3000:])
            # every worker started (on a loaded host one came later than half a second)
            until = time.monotonic() + 10
            while True:
                time.sleep(0.5)
                self.watch(tag, seen)
                before = tagged(tag)
                if len(before) >= 19 or time.monotonic() > until:
                    break
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
        self.assertGreaterEqual(len(seen), 10, seen)
        # the master, 4 shards, 4 workers and 10 holders at least
        self.assertGreaterEqual(len(before), 19, before)
        self.assert_all_gone(tag, seen, before)
        tl.log("SIGKILL of the bench with %d processes of its own running in %d namespaces: "
               "all gone within %.0f s" % (len(before), len(seen), GONE_WITHIN))


if __name__ == "__main__":
    tl.main()
