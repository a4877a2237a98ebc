#!/usr/bin/python3
"""run.py - `make test-deploy`: every deployment test, then what ran, what was skipped and why.

Runs, one after the other (each starts engines of its own): the emulated hosts
(tests/integration/test_hosts.py), the Kubernetes manifests (test_deploy_kubernetes.py), the
systemd units (tests/deploy/test_systemd.py), Slurm (test_slurm.py) and the container image
(test_container.py). Each prints its own progress; at the end a table gives each test's
result, time and skip reasons. Exits 1 if any failed. --only NAME,... runs a subset.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
SUITE = [
    ("hosts", os.path.join(TESTS, "integration", "test_hosts.py")),
    ("kubernetes", os.path.join(TESTS, "integration", "test_deploy_kubernetes.py")),
    ("systemd", os.path.join(HERE, "test_systemd.py")),
    ("slurm", os.path.join(HERE, "test_slurm.py")),
    ("container", os.path.join(HERE, "test_container.py")),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated subset of: " +
                    ", ".join(n for n, _ in SUITE))
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    rows, failed = [], False
    for name, path in SUITE:
        if only and name not in only:
            continue
        if not os.path.exists(path):
            rows.append((name, "MISSING", 0.0, [path]))
            failed = True
            continue
        print("==== %s: %s" % (name, os.path.relpath(path, os.path.dirname(TESTS))),
              flush=True)
        t0 = time.monotonic()
        p = subprocess.run(["/usr/bin/python3", path, "-v"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        took = time.monotonic() - t0
        sys.stdout.write(p.stdout)
        skips = sorted(set(re.findall(r"skipped '([^']*)'", p.stdout)))
        if p.returncode != 0:
            result, failed = "FAILED", True
        elif skips and not re.search(r"\.\.\. ok$", p.stdout, re.M):
            result = "SKIPPED"
        else:
            result = "passed" + (" (some skipped)" if skips else "")
        rows.append((name, result, took, skips))
    print("\n%-11s %-22s %8s  %s" % ("deployment", "result", "seconds", "skipped because"))
    for name, result, took, skips in rows:
        print("%-11s %-22s %8.1f  %s" % (name, result, took, "; ".join(skips) or "-"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
