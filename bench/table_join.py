#!/usr/bin/python3
"""table_join.py - bench/table_join: what does a shard joining cost a job with sparse tables?

A join moves the tables' rows to the map with the new shard from a snapshot taken with the
tables held at one step (docs/embeddings.md, "When a shard joins"). Each round here runs the
same exact CTR job (`tessera train --model ctr`, 2 workers, --slow to give the join time to
happen mid-run) twice on `tessera up --shards 2 --store S --snapshot-every 10` clusters,
alternating: once as it is (the baseline), once with a third shard started when the job is
past --join-at. Both must end on the params_sha256 of `tessera train --local`, the joined run
with no rollback. Reported: the job's wall seconds with the join against without (the
headline), and from the master's log the move's own time and how long the tables' pushes
were held (the snapshot of the held step, the switch, the move).

Output: a table, and bench/results/table_join.json whose headline is {"ours": median seconds
of the job with the join, "baseline": without, "unit", "ratio"}, each round beside it.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fault"))
import clusterlib as cl  # noqa: E402
from clusterlib import Cluster, result, train  # noqa: E402

MOVED = re.compile(r"job (\S+): (\d+) tables moved to the shards of epoch \d+ from snapshot "
                   r"\S+ at step (\d+) in (\d+) ms \((\d+) rows; their pushes held (\d+) ms")


def ctr_args(a):
    return ["--model", "ctr", "--batch", "128", "--micro", "32", "--slow",
            "0:%d" % a.slow_ms]


def one_run(a, binary, want, join):
    """The job on a fresh 2-shard cluster; with join, a third shard started once it is past
    --join-at. Its wall seconds, rollbacks and (with join) the master's move line."""
    with tempfile.TemporaryDirectory(prefix="tessera-tjoin.") as d:
        c = Cluster(binary, os.path.join(d, "up"), shards=2, replicas=a.replicas,
                    lease_ms=a.lease_ms, extra=["--store", os.path.join(d, "store"),
                                                "--snapshot-every", "10"])
        extra = None
        try:
            t0 = time.monotonic()
            p = train(binary, c.master, a.steps, "tj", extra=ctr_args(a))
            if join:
                cl.wait_version(c, "tj", list(c.shards), a.join_at, p, 120)
                log = open(os.path.join(d, "shard-joined.log"), "w")
                extra = c.start_shard(a.bin, "joined", log, ["--lease-ms", str(a.lease_ms),
                                                             "--store", os.path.join(d, "store")])
            got = result(p, "tessera train")
            wall = time.monotonic() - t0
            if got["params_sha256"] != want:
                raise RuntimeError("params_sha256 %s, --local's %s" % (got["params_sha256"],
                                                                        want))
            out = {"seconds": wall, "rollbacks": got["rollbacks"],
                   "table_rows": got["table_rows"]}
            if join:
                with open(os.path.join(d, "up", "master.log"), errors="replace") as f:
                    text = f.read()
                if not (m := MOVED.search(text)):
                    with open(os.path.join(d, "shard-joined.log"), errors="replace") as f:
                        raise RuntimeError("the join did not move the tables; the master's "
                                           "log:\n%s\nthe joining shard's:\n%s" %
                                           (text[-2000:], f.read()[-2000:]))
                if got["rollbacks"]:
                    raise RuntimeError("the join's run had %d rollbacks" % got["rollbacks"])
                out.update(tables=int(m.group(2)), step=int(m.group(3)),
                           move_ms=int(m.group(4)), rows=int(m.group(5)),
                           held_ms=int(m.group(6)))
            return out
        finally:
            if extra:
                cl.stop_group(extra)
            c.stop()


def main():
    ap = argparse.ArgumentParser(
        prog="table_join.py", description="The cost of a shard joining a CTR job with sparse "
        "tables (its rows move from a snapshot taken with them held), against the same job "
        "without the join (docs/embeddings.md, \"When a shard joins\").")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="directory of tessera and its services (default build/bin)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each a run without and "
                    "one with the join (default 3)")
    ap.add_argument("--steps", type=int, default=300, help="steps of each job (default 300)")
    ap.add_argument("--join-at", type=int, default=40, help="the step after which the third "
                    "shard starts (default 40)")
    ap.add_argument("--slow-ms", type=int, default=30, help="rank 0 sleeps this long a step "
                    "(--slow 0:MS; default 30), so that the join lands mid-run")
    ap.add_argument("--replicas", type=int, default=1, help="copies of each row (default 1)")
    ap.add_argument("--lease-ms", type=int, default=3000, help="member lease (default 3000)")
    ap.add_argument("--out", default="bench/results/table_join.json")
    ap.add_argument("--quick", action="store_true", help="1 round of 200 steps")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps = 1, 200
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    cl.exit_on_sigterm()
    want = result(train(binary, None, a.steps, extra=ctr_args(a)),
                  "tessera train --local")["params_sha256"]
    base, joined = [], []
    for r in range(a.rounds):
        base.append(one_run(a, binary, want, False))
        joined.append(one_run(a, binary, want, True))
        j = joined[-1]
        print("round %d: %.2f s without a join, %.2f s with one; %d tables (%d rows) moved "
              "at step %d in %d ms, pushes held %d ms; params_sha256 equal to --local" %
              (r, base[-1]["seconds"], j["seconds"], j["tables"], j["rows"], j["step"],
               j["move_ms"], j["held_ms"]), flush=True)
    b = statistics.median(t["seconds"] for t in base)
    o = statistics.median(t["seconds"] for t in joined)
    held = [t["held_ms"] for t in joined]
    moved = [t["move_ms"] for t in joined]
    print("\nbench_table_join: the CTR trainer, %d exact steps, 2 workers, 2 shards -> 3 "
          "(--replicas %d), one host" % (a.steps, a.replicas))
    print("%-44s %10s %10s" % ("", "median", "max"))
    print("%-44s %9.2fs %9.2fs" % ("the job, no join (baseline)", b,
                                   max(t["seconds"] for t in base)))
    print("%-44s %9.2fs %9.2fs" % ("the job, a shard joining at step %d" % a.join_at, o,
                                   max(t["seconds"] for t in joined)))
    print("%-44s %8dms %8dms" % ("  its tables' pushes held", statistics.median(held),
                                 max(held)))
    print("%-44s %8dms %8dms" % ("  the move (every shard's load)", statistics.median(moved),
                                 max(moved)))
    print("ratio with / without the join: %.3fx; no rollback in any run" % (o / b))
    doc = {"bench": "table_join", "steps": a.steps, "join_at": a.join_at,
           "replicas": a.replicas, "slow_ms": a.slow_ms,
           "headline": {"ours": o, "baseline": b,
                        "unit": "s for %d exact CTR steps (2 workers) with a shard joining "
                                "(ours) against without" % a.steps,
                        "ratio": o / b},
           "held_ms_median": statistics.median(held), "move_ms_median": statistics.median(moved),
           "without": base, "with_join": joined}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
