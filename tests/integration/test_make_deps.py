#!/usr/bin/python3
"""test_make_deps.py - `make demo` installs what the build and the demo need, and no test tool.

The README's first command on a fresh Debian 12 machine is `make demo`; it must not pull in
Slurm, Chromium, Prometheus, clang, torch, Node.js or the npm packages, which only the tests
read. Each goal installs the Makefile's lists that DEPS_<goal> names, in one recipe
(deps-needed). `make -n GOAL` prints that recipe with its package list expanded, and the
Makefile names Node.js, kubectl and `npm ci` in it only when the goal wants them, so the dry
run shows everything a goal may install without installing or building anything.

Checked, for `make`, `make build`, `make demo` and `make install`: the dry run installs the
build's packages (a few of them named here), runs what the goal runs (the demo: bin/tessera
demo), and names none of the test-only packages below and no npm. For `make test`, the
same dry run names every one of them and runs `npm ci`, so that the patterns above can
see what they look for.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

SRC = os.environ.get("TESSERA_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))

# Read only by the tests, the fuzz build or the deployment tests; never by the build or the demo.
TEST_ONLY = ("slurmctld", "slurmd", "slurm-client", "munge", "chromium", "prometheus", "clang",
             "libclang-rt-14-dev", "nodejs", "npm", "kubernetes-client", "python3-torch",
             "python3-torchvision", "python3-scipy", "python3-grpcio", "python3-pip",
             "python3-venv", "python3-yaml")
# Some of what the build and the demo read (the Makefile's DEB_BUILD has them all).
BUILD_SOME = ("build-essential", "cmake", "libgrpc-dev", "python3-dev", "dataset-fashion-mnist")
INSTALL_LIST = re.compile(r"\bfor p in ([^;]*); do dpkg-query")


def word(name):
    """name as a whole word of a command line: python3-torch is not in python3-torchvision."""
    return re.compile(r"(?<![\w.+-])%s(?![\w.+-])" % re.escape(name))


def dry_run(*goals):
    """What `make -n GOALS` in the source tree would run, with a build directory that does
    not exist so the whole chain is shown. The environment's make variables (make test's
    own, when ctest runs under it) are dropped: a dry run of the goals as a user types them."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["make", "-n", "-C", SRC, "BUILD=" + os.path.join(d, "build")] +
                           list(goals), env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("make -n %s exited %d:\n%s%s" % (" ".join(goals), r.returncode,
                                                            r.stdout, r.stderr))
    return r.stdout


class Demo(unittest.TestCase):
    def check_build_only(self, goals, runs):
        out = dry_run(*goals)
        what = " ".join(["make -n"] + goals)
        lists = INSTALL_LIST.findall(out)
        self.assertEqual(len(lists), 1, "%s: one apt_install, not %d:\n%s" % (what, len(lists),
                                                                            out))
        for p in BUILD_SOME:
            self.assertIn(p, lists[0].split(), "%s does not install %s" % (what, p))
        self.assertRegex(out, runs, "%s does not run what it should:\n%s" % (what, out))
        for p in TEST_ONLY:
            if word(p).search(out):
                self.fail("%s names %s:\n%s" % (what, p, out))
        self.assertNotIn("deps-node", out)

    def test_demo(self):
        self.check_build_only(["demo"], r"(?m)/bin/tessera demo$")

    def test_install(self):
        self.check_build_only(["install"], r"(?m)^cmake --install ")

    def test_build(self):
        self.check_build_only([], r"(?m)^cmake --build ")
        self.check_build_only(["build"], r"(?m)^cmake --build ")

    def test_make_test_installs_them(self):
        """The control: the patterns do find the test tools where they are installed."""
        out = dry_run("test")
        for p in TEST_ONLY:
            if not word(p).search(out):
                self.fail("make -n test does not name %s:\n%s" % (p, out))
        self.assertRegex(out, r"(?m)^\s*npm ci --prefix tests/node ")


if __name__ == "__main__":
    unittest.main()
