#!/usr/bin/python3
"""failed_tails.py - the end of each failed test's output, printed after ctest's summary.

`make test` runs ctest with --output-on-failure, which prints a failed test's output where
the test ended, in the middle of a long log; a CI page that keeps the log's head and tail
then shows which tests failed but not why. This reads ctest's own record of the run
(Testing/Temporary/LastTest.log, and LastTestsFailed.log beside it: a test that could not
run is "Test Passed." in the first) and prints, for each test that failed, the last --lines
lines of its output, so that the reason is at the end of the log too.

Usage: failed_tails.py [--lines N] LASTTEST_LOG
"""
import argparse
import os
import re
import sys


def failed_outputs(text, failed=None):
    """(name, output lines) of each test in a LastTest.log that did not pass (failed: the
    names that failed, from LastTestsFailed.log, where known)."""
    out = []
    for block in re.split(r"\n(?=\d+/\d+ Testing: )", text):
        m = re.match(r"\d+/\d+ Testing: (\S+)", block)
        if not m:
            continue
        body = block.split("Output:\n", 1)[-1]
        output, _, rest = body.partition("<end of output>")
        if (m.group(1) not in failed) if failed is not None else "Test Passed." in rest:
            continue
        lines = output.splitlines()
        if lines and set(lines[0]) == {"-"}:
            lines = lines[1:]
        out.append((m.group(1), lines))
    return out


def failed_names(log):
    """The names in LastTestsFailed.log beside log ("N:name" lines), or None."""
    try:
        with open(os.path.join(os.path.dirname(log), "LastTestsFailed.log")) as f:
            return {ln.split(":", 1)[1].strip() for ln in f if ":" in ln}
    except OSError:
        return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=40, metavar="N",
                    help="lines of each failed test's output (default 40)")
    ap.add_argument("log", help="ctest's Testing/Temporary/LastTest.log")
    a = ap.parse_args(argv)
    try:
        with open(a.log, errors="replace") as f:
            text = f.read()
    except OSError as e:
        print("failed_tails.py: %s" % e, file=sys.stderr)
        return 2
    for name, lines in failed_outputs(text, failed_names(a.log)):
        print("==== %s: the last %d of %d lines of its output ====%s" %
              (name, min(a.lines, len(lines)), len(lines),
               "" if lines else " (no output: it may not have run)"))
        print("\n".join(lines[-a.lines:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
