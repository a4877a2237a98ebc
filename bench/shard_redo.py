#!/usr/bin/python3
"""shard_redo.py - bench/shard_redo: what does a shard's redo log (--redo-dir) cost training?

With --redo-dir a shard logs the rows each step of its tables changed and the image of each
dense partition it heads after each update, and answers a pull of the next version only once
that is synced (services/shard/durable.h; docs/embeddings.md,
"Restarting from its own disk"). Each round here runs the same exact CTR job (`tessera train
--model ctr`, 8 tables, 2 workers) on two fresh `tessera up --shards S --replicas 1` clusters,
alternating: without the log (the baseline) and with it (in a directory under --dir, by
default /var/tmp: a real disk, not a tmpfs). Both must end on the --local run's params_sha256.
After each run with the log, `tessera-shard --replay` reads every shard's log and its tables
must be the trained ones (their step, their fingerprints as the trainer reported them; with
one shard, the dense tensors' fingerprint too); its time and the logs' size are reported.

Output: a table, and bench/results/shard_redo.json whose headline is {"ours": median samples/s
with the log, "baseline": without, "unit", "ratio"}, each run beside it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fault"))
import clusterlib as cl  # noqa: E402
from clusterlib import Cluster, result, train  # noqa: E402

CTR = ["--model", "ctr", "--batch", "128", "--micro", "32"]


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def one_run(a, want, redo_root):
    """The job on a fresh cluster (with the log when redo_root is set): its samples/s and,
    with the log, the replay's check, time and the logs' bytes."""
    binary = os.path.join(a.bin, "tessera")
    with tempfile.TemporaryDirectory(prefix="tessera-sredo.") as d:
        extra = ["--redo-dir", redo_root] if redo_root else []
        c = Cluster(binary, os.path.join(d, "up"), shards=a.shards, replicas=1,
                    extra=extra)
        try:
            t0 = time.monotonic()
            # --keep: a job that ended is released and its tables leave the log with it
            got = result(train(binary, c.master, a.steps, "sr", extra=CTR + ["--keep"]),
                         "tessera train")
            wall = time.monotonic() - t0
        finally:
            c.stop()
        if got["params_sha256"] != want:
            raise RuntimeError("params_sha256 %s, --local's %s" % (got["params_sha256"], want))
        out = {"samples_s": got["samples_per_s"], "seconds": wall}
        if not redo_root:
            return out
        t0 = time.monotonic()
        tables, dense = {}, []
        for k in range(a.shards):
            r = subprocess.run([os.path.join(a.bin, "tessera-shard"), "--replay",
                                os.path.join(redo_root, "shard-%d" % k), "--json"],
                               capture_output=True, text=True, timeout=600, check=True)
            doc = json.loads(r.stdout)
            for t in doc["tables"]:
                tables.setdefault(t["table"], []).append(t)
            dense += [j.get("dense_sha256") for j in doc["jobs"]]
        if a.shards == 1 and dense != [got["dense_sha256"]]:
            raise RuntimeError("the dense tensors in the log: %s; trained: %s" %
                               (dense, got["dense_sha256"]))
        out["replay_s"] = time.monotonic() - t0
        out["log_bytes"] = du(redo_root)
        for name, hexd in got["table_sha256"].items():
            held = tables.get(name, [])
            if a.shards == 1 and (len(held) != 1 or held[0]["sha256"] != hexd or
                                  held[0]["step"] != a.steps):
                raise RuntimeError("table %s in the log: %s; trained: %s at step %d" %
                                   (name, held, hexd, a.steps))
            if any(t["step"] != a.steps for t in held):
                raise RuntimeError("table %s in the log at steps %s, not %d" %
                                   (name, [t["step"] for t in held], a.steps))
        shutil.rmtree(redo_root)
        return out


def main():
    ap = argparse.ArgumentParser(
        prog="shard_redo.py", description="The cost of the shards' redo log (--redo-dir) to "
        "an exact CTR job, against the same job without it.")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="directory of tessera and its services (default build/bin)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each a run without and "
                    "one with the log (default 3)")
    ap.add_argument("--steps", type=int, default=300, help="steps of each job (default 300)")
    ap.add_argument("--shards", type=int, default=1, help="shards (default 1)")
    ap.add_argument("--dir", default="/var/tmp", help="where the logs go (default /var/tmp)")
    ap.add_argument("--out", default="bench/results/shard_redo.json")
    ap.add_argument("--quick", action="store_true", help="1 round of 60 steps")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps = 1, 60
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    cl.exit_on_sigterm()
    want = result(train(binary, None, a.steps, extra=CTR),
                  "tessera train --local")["params_sha256"]
    base, logged = [], []
    with tempfile.TemporaryDirectory(prefix="tessera-sredo-logs.", dir=a.dir) as logs:
        for r in range(a.rounds):
            base.append(one_run(a, want, None))
            logged.append(one_run(a, want, os.path.join(logs, "r%d" % r)))
            w = logged[-1]
            print("round %d: %.0f samples/s without the log, %.0f with it; %.1f MB logged, "
                  "replayed in %.2f s to the trained tables" %
                  (r, base[-1]["samples_s"], w["samples_s"], w["log_bytes"] / 1e6,
                   w["replay_s"]), flush=True)
    b = statistics.median(t["samples_s"] for t in base)
    o = statistics.median(t["samples_s"] for t in logged)
    print("\nbench_shard_redo: the CTR trainer, %d exact steps, 2 workers, %d shard(s), "
          "logs in %s" % (a.steps, a.shards, a.dir))
    print("%-40s %12s %12s" % ("", "median", "min"))
    print("%-40s %12.0f %12.0f" % ("samples/s, no log (baseline)", b,
                                   min(t["samples_s"] for t in base)))
    print("%-40s %12.0f %12.0f" % ("samples/s, --redo-dir", o,
                                   min(t["samples_s"] for t in logged)))
    print("%-40s %12.1f" % ("MB logged a run",
                            statistics.median(t["log_bytes"] for t in logged) / 1e6))
    print("%-40s %12.2f" % ("s to replay the logs",
                            statistics.median(t["replay_s"] for t in logged)))
    print("ratio with / without the log: %.3fx; every run on --local's params_sha256" % (o / b))
    doc = {"bench": "shard_redo", "steps": a.steps, "shards": a.shards, "dir": a.dir,
           "headline": {"ours": o, "baseline": b,
                        "unit": "samples/s of %d exact CTR steps (2 workers) with the shards' "
                                "redo log (ours) against without" % a.steps,
                        "ratio": o / b},
           "without": base, "with_log": logged}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
