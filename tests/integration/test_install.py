"""test_install.py - the SDK as users install it (docs/install.md), outside the source tree.

Checked:
- `cmake --install` of the build into a fresh prefix gives bin/ (tessera and its services),
  include/tessera.h, lib/libtessera.so with the soname libtessera.so.0, lib/libtessera.a,
  lib/pkgconfig/tessera.pc and lib/cmake/Tessera; `nm -D` of libtessera.so lists exactly the
  functions include/tessera.h declares (no internal symbol leaks), and no installed binary or
  library holds a test hook (lib/util/hook.h: no TESSERA_TEST_* name in their bytes);
- examples/c/sgd_steps.c, copied out of the tree, builds four ways: pkg-config with the
  shared library and with the static one, CMake's find_package(Tessera) with
  Tessera::tessera and Tessera::tessera_static; the static ones load no libtessera.so;
- the installed `tessera up` starts a cluster (mutual TLS, its default), and each of the four
  programs trains its own job on it, with the certificates of $TESSERA_TLS_DIR, to the same
  checksum as an in-process (`local`) run (exact mode);
- the Python package: `pip install --no-build-isolation --no-index` of a copy of python/
  into a virtualenv made with --system-site-packages, against the installed SDK (found
  through PKG_CONFIG_PATH); with neither PYTHONPATH nor LD_LIBRARY_PATH, `import tessera,
  tessera.torch` works and a Client trains on the cluster, every value exactly the sum of
  its steps; tessera.snapshot writes them as a snapshot and reads them back (the installed
  SDK's tessera_snapshot_*).
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

BUILD = os.path.dirname(os.path.abspath(tl.BIN))

PY_TRAIN = """
import numpy as np
import tessera, tessera.torch
c = tessera.Client(master=%r, job="install-py", optimizer="sgd:lr=0.5", batch=1, keep=True)
w = c.register("w", 4096, partition_bytes=4096)
p = np.zeros(4096, np.float32)
for s in range(20):
    c.step(s, [np.full(4096, s %% 3 + 1, np.float32)], [p])
c.close()
want = -0.5 * sum(k %% 3 + 1 for k in range(20))
import tempfile, tessera.snapshot
d = tempfile.mkdtemp()
sid = tessera.snapshot.import_state_dict(d, {"w": p.reshape(64, 64)}, "j", 1, optimizer="sgd")
back = tessera.snapshot.read(d, sid).values["w"]
print("snapshot", int(np.count_nonzero(back.reshape(-1) != p)))
print("wrong", int(np.count_nonzero(p != np.float32(want))), "file", tessera.__file__)
"""


def run(argv, env=None, cwd=None, timeout=300):
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(argv), r.returncode, r.stdout,
                                                      r.stderr))
    return r.stdout


def clean_env(**extra):
    """The environment without the tree's paths: no PYTHONPATH, no LD_LIBRARY_PATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "TESSERA_BIN", "TESSERA_SRC")}
    env.update(extra)
    return env


def header_functions():
    with open(os.path.join(tl.SRC, "include", "tessera.h")) as f:
        return set(re.findall(r"\b(tessera_[a-z0-9_]+)\(", f.read()))


class Installed(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.prefix = os.path.join(cls.c.dir, "prefix")
        cls.work = os.path.join(cls.c.dir, "outside")
        run(["cmake", "--install", BUILD, "--prefix", cls.prefix])
        shutil.copytree(os.path.join(tl.SRC, "examples", "c"), cls.work)
        # The installed `tessera up` runs mutual TLS, its default: the programs and the
        # Python package find its certificates in $TESSERA_TLS_DIR (tessera_up exports it
        # before clean_env copies the environment).
        _, cls.master = cls.c.tessera_up(["--shards", "2"],
                                         tessera=os.path.join(cls.prefix, "bin", "tessera"))
        cls.env = clean_env(PKG_CONFIG_PATH=os.path.join(cls.prefix, "lib", "pkgconfig"))

    def test_a_layout_and_exported_symbols(self):
        for rel in ("bin/tessera", "bin/tessera-master", "bin/tessera-shard",
                    "bin/tessera-worker", "bin/tessera-verify", "include/tessera.h",
                    "lib/libtessera.a", "lib/pkgconfig/tessera.pc",
                    "lib/cmake/Tessera/TesseraConfig.cmake",
                    "lib/cmake/Tessera/TesseraConfigVersion.cmake"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, rel)), rel)
        so = os.path.join(self.prefix, "lib", "libtessera.so")
        self.assertIn("Library soname: [libtessera.so.0]", run(["readelf", "-d", so]))
        syms = {line.split()[-1].split("@")[0]
                for line in run(["nm", "-D", "--defined-only", so]).splitlines()}
        syms.discard("TESSERA_0")   # the version node of tessera.map
        self.assertEqual(syms, header_functions())
        with open(os.path.join(tl.SRC, "CMakeLists.txt"), encoding="utf-8") as f:
            version = re.search(r"project\(tessera VERSION (\S+)", f.read()).group(1)
        self.assertEqual(run(["pkg-config", "--modversion", "tessera"], env=self.env).strip(),
                         version)

    def test_a_no_test_hook_is_installed(self):
        """What is installed has no test hook (lib/util/hook.h): no TESSERA_TEST_* variable is
        read, no code behind one is left, and --help does not say hooks are compiled in (as
        `strings | grep` would look). The sanitizer build, which has them, is never
        installed."""
        files = [os.path.join(self.prefix, "bin", b) for b in
                 ("tessera", "tessera-master", "tessera-shard", "tessera-worker",
                  "tessera-verify")]
        files += [os.path.join(self.prefix, "lib", f) for f in ("libtessera.so", "libtessera.a")]
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            for marker in (b"TESSERA_TEST_", b"test hooks compiled in"):
                self.assertFalse(marker in data, "%s holds %r" % (f, marker))
        out = run([os.path.join(self.prefix, "bin", "tessera-shard"), "--help"])
        self.assertNotIn("test hooks", out)

    def build_all(self):
        """sgd_steps built the four ways; returns {how: path}."""
        pc = lambda *a: run(["pkg-config", *a, "tessera"], env=self.env).split()  # noqa: E731
        src = os.path.join(self.work, "sgd_steps.c")
        out = {}
        out["pkg-config shared"] = os.path.join(self.work, "sgd_shared")
        run(["cc", "-Wall", "-Werror", src, *pc("--cflags"), *pc("--libs"), "-Wl,-rpath," +
             pc("--variable=libdir")[0], "-o", out["pkg-config shared"]], env=self.env)
        out["pkg-config static"] = os.path.join(self.work, "sgd_static")
        run(["cc", "-Wall", "-Werror", src, *pc("--cflags"), "-Wl,-Bstatic", "-ltessera",
             "-Wl,-Bdynamic", *pc("--static", "--libs"), "-o", out["pkg-config static"]],
            env=self.env)
        for how, static in (("cmake shared", "OFF"), ("cmake static", "ON")):
            b = os.path.join(self.work, "cmake-" + static)
            run(["cmake", "-S", self.work, "-B", b, "-DCMAKE_PREFIX_PATH=" + self.prefix,
                 "-DTESSERA_STATIC=" + static], env=self.env)
            run(["cmake", "--build", b], env=self.env)
            out[how] = os.path.join(b, "sgd_steps")
        return out

    def test_b_c_programs_build_four_ways_and_train(self):
        exes = self.build_all()
        want = run([exes["pkg-config shared"], "local", "ref"], env=self.env)
        self.assertIn("20 steps, checksum", want)
        for i, (how, exe) in enumerate(sorted(exes.items())):
            deps = re.findall(r"libtessera\S* => (\S+)", run(["ldd", exe], env=self.env))
            self.assertEqual([os.path.realpath(d) for d in deps],
                             [] if "static" in how else [os.path.realpath(os.path.join(
                                 self.prefix, "lib", "libtessera.so.0"))], how)
            got = run([exe, self.master, "install-c%d" % i], env=self.env)
            self.assertEqual(got, want, how)
            tl.log("%s: %s" % (how, got.strip()))

    def test_c_python_package_installs_with_pip(self):
        venv = os.path.join(self.c.dir, "venv")
        pkg = os.path.join(self.c.dir, "python-src")
        shutil.copytree(os.path.join(tl.SRC, "python"), pkg,
                        ignore=shutil.ignore_patterns("build", "*.egg-info"))
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
        py = os.path.join(venv, "bin", "python")
        run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
             "--quiet", pkg], env=self.env, cwd=self.c.dir)
        got = run([py, "-c", PY_TRAIN % self.master], env=clean_env(), cwd=self.c.dir)
        self.assertIn("wrong 0 ", got)
        self.assertIn("snapshot 0\n", got, "a snapshot written and read back through the SDK")
        self.assertIn(venv, got, "tessera imported from the virtualenv")
        tl.log("pip-installed tessera trained: %s" % got.strip())


if __name__ == "__main__":
    tl.main()
