#!/usr/bin/python3
"""table_tiers.py - rows per second of a sparse step when a table does not fit in the shards'
memory (issue 48; docs/embeddings.md, "Tables bigger than memory").

Why: issue 48 asks that with 10% of a table in memory and prefetch on, the sparse step run at
0.7x the rows/s of the same step with the table all in memory, and with 1% within 2x of what
the disk's random reads allow. This measures those in one run.

Each configuration is a `tessera up --shards 2 --replicas 1 --master-port 0` of its own (its
default mutual TLS), with --table-dir under a temporary directory and --table-mem the given
share of the table's bytes per shard; the baseline ("memory") has no --table-dir and memory
for all. Two workers (this script again, with the hidden --worker flag) register one table of
--rows rows of dim --dim (adagrad), first push every row once (each rank half of them, in
steps of at most 65536 ids: "populate", untimed) so that the table has all its rows, then run
--warmup untimed and --steps timed sparse steps: pull the batch's rows (version s), push one
gradient row per id. A batch is --batch ids per worker, Zipf (a = 1.05) over the rows, spread
by a multiplicative hash (as bench/embeddings.py). With prefetch, each worker announces step
s + 1's and s + 2's ids (Client.prefetch_rows, the CTR trainer's default depth) after its
pull of step s. A step's time runs from the last worker's start of it to the last worker's end
of it; rows/s = 2 x 2 x batch / the median step time. Hit rates: hits / (hits + disk reads)
of the timed steps, from `tessera status --json` before and after them.

The disk's limit: fio, random 4 KiB reads with O_DIRECT (psync, queue depth 1, 10 s) of a
1 GiB file in the same temporary directory, beside each run's rows read from disk a second
(a row not in the page cache costs at least one such read).

Beside the time: the CPU the cluster (`tessera up`, its master and shards) used a timed step
("cpu ms"; the machine's other load does not inflate it as it does times), and the seconds
the populate took ("made s": rows created past the memory tier).

Results: a table on stdout and bench/results/table_tiers.json with the headline
{"ours": rows/s at 10% in memory with prefetch, "baseline": rows/s all in memory, unit,
ratio}. Progress goes to stderr. --only runs some configurations (and the baseline) and
writes no results file.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
POPULATE = 65536

sys.path.insert(0, HERE)
from embeddings import ZIPF_A, batches  # noqa: E402  (the same Zipf batches as embeddings.py)


def worker(a):
    """One rank: populate, wait for the parent's go, then the steps; one JSON line of times."""
    import numpy as np
    try:
        import tessera
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "build", "python"))
        import tessera
    c = tessera.Client(master=a.master, job="tiers", rank=a.rank, workers=2, batch=1,
                       optimizer="sgd:lr=0.05", timeout_ms=600000)
    t = c.register_table("emb", a.dim, a.rows - 1, optimizer="adagrad:lr=0.05")
    mine = np.arange(a.rank, a.rows, 2, dtype=np.int64)
    nfill = (mine.size + POPULATE - 1) // POPULATE
    step = 0
    one = np.empty((1, a.dim), np.float32)
    for k in range(nfill):
        ids = mine[k * POPULATE:(k + 1) * POPULATE]
        c.push_rows(t, step, ids, np.full((ids.size, a.dim), 1e-3, np.float32))
        step += 1
        c.pull_rows(t, step, mine[:1], one)   # BSP: the next push waits for this step
    print(json.dumps({"populated": step}), flush=True)
    if not sys.stdin.readline():
        return 1
    total = a.warmup + a.steps
    ids = batches(a.rank, total + 2, a.batch, a.seed, rows=a.rows)
    out = np.empty((a.batch, a.dim), np.float32)
    grads = np.full((a.batch, a.dim), 1e-3, np.float32)
    start, end = [], []
    for s in range(total):
        if s == a.warmup:   # the timed part starts: the parent reads the status now
            print(json.dumps({"warm": s}), flush=True)
            if not sys.stdin.readline():
                return 1
        t0 = time.perf_counter()
        c.pull_rows(t, step + s, ids[s], out)
        if a.prefetch:
            for d in ((1, 2) if s == 0 else (2,)):
                c.prefetch_rows(t, ids[s + d])
        c.push_rows(t, step + s, ids[s], grads)
        start.append(t0)
        end.append(time.perf_counter())
    c.pull_rows(t, step + total, ids[0][:1], out[:1])   # the last step applied
    print(json.dumps({"rank": a.rank, "start": start[a.warmup:], "end": end[a.warmup:]}),
          flush=True)
    sys.stdin.readline()   # the job (and its tables) stays until the parent read the status
    c.close()
    return 0


def tier_totals(binary, master):
    """The tier's counters summed over both shards' table; a shard too busy to answer within
    `tessera status`'s deadline is asked again."""
    for _ in range(20):
        r = subprocess.run([binary, "status", "--master", master, "--json"],
                           capture_output=True, text=True, timeout=60)
        tables = [t for s in json.loads(r.stdout).get("shards", [])
                  for t in s.get("table_list", [])]
        if len(tables) == 2:
            break
        time.sleep(0.5)
    else:
        raise RuntimeError("tessera status did not show both shards' table")
    tot = {"hits": 0, "misses": 0, "prefetch_used": 0, "evictions": 0, "mem_rows": 0}
    for t in tables:
        for k in tot:
            tot[k] += t.get("disk_tier", {}).get(k, 0)
    return tot


def fio_iops(directory):
    """Random 4 KiB reads a second of a 1 GiB file in directory (O_DIRECT, depth 1)."""
    if not shutil.which("fio"):
        return None
    r = subprocess.run(["fio", "--name=randread", f"--directory={directory}", "--size=1g",
                        "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync",
                        "--runtime=10", "--time_based", "--output-format=json"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        print(f"table_tiers: fio failed: {r.stderr.strip()[:300]}", file=sys.stderr)
        return None
    return json.loads(r.stdout)["jobs"][0]["read"]["iops"]


def run_config(a, binary, script, name, mem, tier, prefetch, work):
    sys.path.insert(0, HERE)
    from train import Cluster  # noqa: E402
    args = ["--table-mem", mem] + (["--table-dir", os.path.join(work, "tier")] if tier else [])
    cluster = Cluster(binary, os.path.join(work, "up"), env={"TESSERA_LOG": "warn"},
                      args=args)
    procs = []
    try:
        env = dict(os.environ, TESSERA_LOG="warn")
        for rank in range(2):
            cmd = [sys.executable, script, "--worker", "--rank", str(rank), "--master",
                   cluster.master, "--rows", str(a.rows), "--dim", str(a.dim), "--batch",
                   str(a.batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
                   "--seed", str(a.seed)] + (["--prefetch"] if prefetch else [])
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          env=env, text=True, start_new_session=True))

        def wait_line():
            lines = []
            for p in procs:
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{name}: a worker exited {p.wait()}")
                lines.append(json.loads(line))
            return lines

        t0 = time.monotonic()
        wait_line()
        made_s = time.monotonic() - t0
        print(f"  {name}: {a.rows} rows made in {made_s:.0f} s", file=sys.stderr)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        wait_line()
        before = tier_totals(binary, cluster.master)
        cpu0 = cluster.cpu_s()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        rs = sorted(wait_line(), key=lambda r: r["rank"])
        cpu = cluster.cpu_s() - cpu0
        after = tier_totals(binary, cluster.master)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        if any(p.wait() for p in procs):
            raise RuntimeError(f"{name}: workers failed")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        cluster.stop()
    step = [max(r["end"][i] for r in rs) - max(r["start"][i] for r in rs)
            for i in range(len(rs[0]["end"]))]
    d = {k: after[k] - before[k] for k in after}
    looked = d["hits"] + d["misses"]
    med = statistics.median(step)
    return {"config": name, "table_mem": mem, "tier": tier, "prefetch": prefetch,
            "step_ms": round(med * 1e3, 3), "rows_per_s": round(4 * a.batch / med),
            "shard_cpu_ms_per_step": round(cpu * 1e3 / len(step), 3),
            "populate_s": round(made_s, 1),
            "hit_rate": round(d["hits"] / looked, 4) if looked else None,
            "disk_reads_per_s": round(d["misses"] / sum(step)) if step else 0,
            "prefetch_used": d["prefetch_used"], "evictions": d["evictions"]}


def main():
    ap = argparse.ArgumentParser(
        description="Rows/s of a sparse step (2 workers x 2 shards) with 100%%, 10%% and 1%% "
                    "of a table in memory over the disk tier, prefetch on and off, beside the "
                    "table all in memory and the disk's random 4 KiB read rate (fio), same "
                    "run.")
    ap.add_argument("--rows", type=int, default=1000000, help="table rows (default 10^6)")
    ap.add_argument("--dim", type=int, default=64, help="floats a row (default 64)")
    ap.add_argument("--batch", type=int, default=4096, help="ids per worker a step (4096)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps (default 200)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="10^5 rows, 10 steps, no 100%% and no fio: a smoke run")
    ap.add_argument("--only", action="append", metavar="CONFIG",
                    help="run only this configuration (its name as in the table, e.g. "
                         "'10%%, prefetch'; repeatable; 'memory' always runs: it is the "
                         "baseline)")
    ap.add_argument("--bin", default=os.environ.get("TESSERA_BIN") or
                    os.path.join(REPO, "build", "bin"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "table_tiers.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--prefetch", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.quick:
        a.rows, a.steps, a.warmup = 100000, 10, 3
    binary = os.path.join(a.bin, "tessera")
    if not os.access(binary, os.X_OK):
        sys.exit(f"table_tiers: no executable {binary}: build first (make) or pass --bin")
    # A row's bytes on a shard: the record (32-byte header, dim values, dim Adagrad floats)
    # and its 2 map slots (table.h); half the rows on each of the 2 shards.
    per_shard = a.rows // 2 * (32 + 8 * a.dim + 32)
    share = {f: f"{max(1, int(per_shard * f) >> 10)}K" for f in (1.0, 0.1, 0.01)}
    configs = [("memory", f"{2 * per_shard >> 20 or 1}M", False, False)]
    if not a.quick:
        configs.append(("100% in memory", f"{(per_shard * 5 // 4) >> 10}K", True, False))
    configs += [("10%, no prefetch", share[0.1], True, False),
                ("10%, prefetch", share[0.1], True, True),
                ("1%, no prefetch", share[0.01], True, False),
                ("1%, prefetch", share[0.01], True, True)]
    if a.only:
        names = {c[0] for c in configs}
        unknown = [n for n in a.only if n not in names]
        if unknown:
            sys.exit(f"table_tiers: no configuration {unknown[0]!r}; they are: "
                     + ", ".join(repr(c[0]) for c in configs))
        configs = [c for c in configs if c[0] == "memory" or c[0] in a.only]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    work = tempfile.mkdtemp(prefix="bench-tiers-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    script = os.path.abspath(__file__)
    out = []
    try:
        for name, mem, tier, prefetch in configs:
            d = os.path.join(work, str(len(out)))
            os.makedirs(d)
            out.append(run_config(a, binary, script, name, mem, tier, prefetch, d))
            shutil.rmtree(os.path.join(d, "tier"), ignore_errors=True)
            print(f"  {name}: {out[-1]['rows_per_s']} rows/s", file=sys.stderr)
        # Last: fio lays out a 1 GiB file whose write-back, run first, slowed the baseline
        # that followed it (step times 4.0 to 6.9 ms over three runs, 3.6 without fio).
        iops = None if a.quick else fio_iops(work)
        print(f"table_tiers: fio random 4 KiB reads: {iops or 'not measured'} /s",
              file=sys.stderr)
    except (RuntimeError, KeyboardInterrupt, OSError) as e:
        sys.exit(f"table_tiers: {str(e) or 'interrupted'} (logs kept in {work})")
    shutil.rmtree(work, ignore_errors=True)
    base = out[0]["rows_per_s"]
    print(f"\nsparse step, 2 workers x 2 shards, {a.rows} rows of dim {a.dim}, batch {a.batch} "
          f"ids a worker, Zipf {ZIPF_A}; medians of {a.steps} steps")
    print(f"{'config':<18} {'table-mem':>10} {'step ms':>8} {'rows/s':>10} {'x memory':>8} "
          f"{'hit rate':>8} {'disk rd/s':>9} {'pf used':>8} {'cpu ms':>7} {'made s':>6}")
    for r in out:
        hr = "-" if r["hit_rate"] is None else f"{100 * r['hit_rate']:.1f}%"
        print(f"{r['config']:<18} {r['table_mem']:>10} {r['step_ms']:>8.1f} "
              f"{r['rows_per_s']:>10} {r['rows_per_s'] / base:>8.2f} {hr:>8} "
              f"{r['disk_reads_per_s']:>9} {r['prefetch_used']:>8} "
              f"{r['shard_cpu_ms_per_step']:>7.1f} {r['populate_s']:>6.0f}")
    if iops:
        print(f"disk: {iops:.0f} random 4 KiB reads/s (fio, O_DIRECT, depth 1)")
    ours = next((r["rows_per_s"] for r in out if r["config"] == "10%, prefetch"), None)
    if ours is None or a.only:
        return 0   # a partial run (--only) writes no results: the kept file is a whole run
    doc = {"bench": "table_tiers", "rows": a.rows, "dim": a.dim, "batch": a.batch,
           "steps": a.steps, "fio_randread_iops": iops, "configs": out,
           "headline": {"ours": ours, "baseline": base, "unit": "rows/s",
                        "ratio": round(ours / base, 3)}}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
