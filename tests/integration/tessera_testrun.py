"""tessera_testrun.py - how an integration test script runs (tessera_testlib.py re-exports it).

- Paths: TESSERA_BIN, the binaries; PYTHONPATH, build/gen/python; TESSERA_SRC, the source tree
  (ctest sets them). Run by hand from the source tree, the defaults point at build/.
- The interpreter: python3-grpcio is Debian's, so a script started by another python3 is run
  again under /usr/bin/python3.
- A temp dir per script (TMPDIR of every process it starts), removed at exit; SIGTERM exits
  through sys.exit so the atexit handlers stop what the script started.
- TESSERA_SANITIZED=1 (TESSERA_BIN is then an ASan/UBSan build): every sanitizer report of
  every process a test starts fails the script in main(), whatever the tests asserted, and is
  printed. ASan and LSan write theirs to files (log_path); gcc's UBSan ignores log_path and
  writes to stderr, so the processes' logs and the CLI's output are searched too.
- TEST_HOOKS: whether the binaries have the test hooks; long_case: cases make test skips.
- main(): unittest's, with the wall time and the five slowest tests.
"""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SRC = os.environ.get("TESSERA_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("TESSERA_BIN") or os.path.join(SRC, "build", "bin")
GEN = os.path.join(SRC, "build", "gen", "python")
if not os.environ.get("PYTHONPATH") and GEN not in sys.path:
    sys.path.insert(0, GEN)

try:
    import grpc  # noqa: E402
    import google.protobuf  # noqa: E402,F401
    grpc.insecure_channel  # build/gen/python/grpc alone is a namespace package without it
except (ImportError, AttributeError):
    # python3-grpcio is Debian's: only /usr/bin/python3 has it, not a python3 earlier on PATH.
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.stderr.write("tessera tests need python3-grpcio and python3-protobuf: "
                     "run them with /usr/bin/python3 (apt-get install python3-grpcio "
                     "python3-protobuf)\n")
    sys.exit(1)

# Every process a test starts gets TMPDIR here, removed when the test script exits: a run that
# fails on purpose (or is killed) keeps its logs under TMPDIR (tessera train does), and they
# must not outlive the test.
_OUTER_TMPDIR = os.environ.get("TMPDIR")
TEST_TMP = tempfile.mkdtemp(prefix="tessera-tests.")
os.environ["TMPDIR"] = TEST_TMP


def _remove_test_tmp():
    shutil.rmtree(TEST_TMP, ignore_errors=True)


def exec_again(path, argv, env):
    """os.execve(path, argv, env) for a script that runs itself again (in another namespace,
    say): no atexit handler runs across an exec, so the temp dir is removed first and the copy
    gets the TMPDIR this script was started with, and makes its own. Does not return."""
    _remove_test_tmp()
    env = dict(env)
    env.pop("TMPDIR", None)
    if _OUTER_TMPDIR is not None:
        env["TMPDIR"] = _OUTER_TMPDIR
    os.execve(path, argv, env)


atexit.register(_remove_test_tmp)


def _exit_on_sigterm(signum, frame):
    """SIGTERM (a killed ctest, `kill` of the test's process group) ends the test through
    sys.exit, so that the atexit handlers stop the clusters it started: each service runs in a
    session of its own (Proc), out of reach of a signal to the test's group."""
    sys.exit(128 + signum)


if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _exit_on_sigterm)

# Sanitizer reports of every process the test starts, directly or through `tessera up` and
# `tessera train` (the environment is inherited): log_path makes each one a file,
# PREFIX.EXE.PID (log_exe_name: a leak's allocation stack can end in a library without frame
# pointers, libcrypto's, and then the binary's name is what says whose it was).
SANITIZED = os.environ.get("TESSERA_SANITIZED") == "1"


def _test_hooks():
    """Whether the binaries in BIN have the test hooks compiled in (lib/util/hook.h: the
    sanitizer build does, build/ does not): their --help says so."""
    try:
        out = subprocess.run([os.path.join(BIN, "tessera-shard"), "--help"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "test hooks compiled in" in out


# A test that arms a hook skips where there is none: unittest.skipUnless(TEST_HOOKS, NO_HOOKS).
TEST_HOOKS = _test_hooks()
NO_HOOKS = ("needs the test hooks (TESSERA_TEST_*), which only the sanitizer build has "
            "(lib/util/hook.h): its asan/ entry in make test runs it")
# A case that repeats what a shorter one checks, over another variant (a mode, a hung peer
# instead of a dead one, a disk tier), and costs a make test of 2 cores tens of seconds:
# @tl.long_case skips it unless TESSERA_LONG=1, which `make test-long` sets (docs/testing.md,
# "Long cases"), so that make test stays within its 20 minutes.
LONG = os.environ.get("TESSERA_LONG") == "1"
long_case = unittest.skipUnless(LONG, "a long case: `make test-long` runs it (TESSERA_LONG=1)")
SAN_DIR = os.path.join(TEST_TMP, "sanitizer")
if SANITIZED:
    os.mkdir(SAN_DIR)
    _supp = os.path.join(SRC, "tests", "lsan.supp")
    os.environ["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=1:log_exe_name=1:"
                                  "log_path=%s/asan" % SAN_DIR)
    os.environ["UBSAN_OPTIONS"] = ("print_stacktrace=1:halt_on_error=1:log_path=%s/ubsan"
                                   % SAN_DIR)
    # exitcode=0: a leak found at exit does not change the process's exit status (with
    # abort_on_error, it would abort it); its report fails the test all the same, through
    # sanitizer_reports(), which alone judges it (openssl_exit_leak below).
    os.environ["LSAN_OPTIONS"] = "suppressions=%s:exitcode=0" % _supp


_SAN_MARKERS = ("runtime error:", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer")
_san_found = []
_san_scanned = set()   # logs already searched (a kept cluster dir is walked twice)


def scan_for_sanitizer(where, text):
    """Keeps the part of text (a log, a process's output) from the first sanitizer report
    on, if it holds one; sanitizer_reports() returns it. A no-op when not sanitized."""
    if not SANITIZED or not text:
        return
    at = [text.find(m) for m in _SAN_MARKERS if m in text]
    if at:
        start = text.rfind("\n", 0, min(at)) + 1
        _san_found.append("---- %s ----\n%s" % (where, text[start:start + 8000]))


def scan_logs(top):
    """scan_for_sanitizer on every *.log under top."""
    for root, _, names in os.walk(top):
        for name in names:
            path = os.path.join(root, name)
            if name.endswith(".log") and path not in _san_scanned:
                _san_scanned.add(path)
                with open(path, errors="replace") as f:
                    scan_for_sanitizer(path, f.read())


def sanitizer_reports():
    """Every sanitizer report seen so far, one string each: the report files, and what
    scan_for_sanitizer kept (empty when the binaries are not sanitized)."""
    out = list(_san_found)
    if SANITIZED:
        for name in sorted(os.listdir(SAN_DIR)):
            with open(os.path.join(SAN_DIR, name), errors="replace") as f:
                out.append("---- %s ----\n%s" % (name, f.read()))
    return out


# A LeakSanitizer report that names nothing past OpenSSL's allocator, small in all: objects
# that OpenSSL allocated for gRPC's threads (per-thread error queues, TLS sessions) that were
# still being torn down when the process ended. Seen twice in make test here, once in a
# service (3 error queues, 2 712 bytes) and once in the CLI (10 144 bytes), each time in one
# process of hundreds.
# OpenSSL is built without frame pointers, so LeakSanitizer's stack of such an object stops at
# CRYPTO_zalloc or the like and cannot say whose it is (tests/lsan-openssl-threads.supp says
# more). Such a report is printed and does not fail the test: our own uses of OpenSSL
# (lib/sec's certificates, the data plane's keys and MACs) are leak-checked with no allowance
# by their unit tests in the sanitizer build (asan/test_certs, asan/test_transport,
# asan/test_frame), and a leak that grows passes OPENSSL_EXIT_LEAK_MAX.
OPENSSL_EXIT_LEAK_MAX = 64 << 10
_LEAK = re.compile(r"^(?:Direct|Indirect) leak of (\d+) byte\(s\) in \d+ object\(s\) "
                   r"allocated from:\n((?:[ \t]+#\d+ [^\n]*\n?)+)", re.M)


def openssl_exit_leak(report):
    """Whether report (one process's sanitizer output) is only such a leak (above)."""
    if "ERROR: LeakSanitizer" not in report or "ERROR: AddressSanitizer" in report or \
            "runtime error:" in report:
        return False
    leaks = _LEAK.findall(report)
    if not leaks or len(leaks) != len(re.findall(r"^(?:Direct|Indirect) leak of ", report,
                                                 re.M)):
        return False
    for _, stack in leaks:
        frames = stack.strip().split("\n")
        if len(frames) > 2 or "in __interceptor_" not in frames[0] or \
                (len(frames) == 2 and "libcrypto.so" not in frames[1]):
            return False
    return sum(int(n) for n, _ in leaks) <= OPENSSL_EXIT_LEAK_MAX


class _TimedResult(unittest.TextTestResult):
    """A TextTestResult that keeps each test's wall time (its class's setUpClass not
    included), for main's list of the slowest: what to look at when the suite grows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.durations = []
        self._t0 = None

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        self.durations.append(("%s.%s" % (type(test).__name__, test._testMethodName),
                               time.monotonic() - self._t0))


class _TimedRunner(unittest.TextTestRunner):
    resultclass = _TimedResult


def main():
    """unittest.main that exits non-zero on failure, prints the wall time and the five
    slowest tests."""
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2, testRunner=_TimedRunner)
    ok = prog.result.wasSuccessful()
    slowest = sorted(prog.result.durations, key=lambda d: -d[1])[:5]
    if slowest:
        sys.stderr.write("slowest: %s\n" % ", ".join(
            "%s %.1f s" % (name, secs) for name, secs in slowest))
    if SANITIZED:
        scan_logs(TEST_TMP)  # what is left: logs kept by failed runs, clusters not stopped
    reports = sanitizer_reports()
    allowed = [r for r in reports if openssl_exit_leak(r)]
    reports = [r for r in reports if not openssl_exit_leak(r)]
    if allowed:
        sys.stderr.write("OpenSSL's own objects of gRPC's threads at exit, not a failure "
                         "(tessera_testrun.py, openssl_exit_leak) (%d):\n%s\n"
                         % (len(allowed), "\n".join(allowed)))
    if reports:
        sys.stderr.write("sanitizer reports from the services (%d):\n%s\n"
                         % (len(reports), "\n".join(reports)))
        ok = False
    sys.stderr.write("%s in %.2f s\n" % ("OK" if ok else "FAILED", time.monotonic() - t0))
    sys.exit(0 if ok else 1)
