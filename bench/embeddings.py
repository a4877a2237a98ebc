#!/usr/bin/python3
"""embeddings.py - rows per second of a sparse embedding step on the shards (issue 46).

Why: issue 46 asks whether a table on the shards (docs/embeddings.md, "Tables in a job") can
serve a sparse step at half the speed of torch doing the same step on a table held in the
trainer's own memory (goal: ratio >= 0.5). This measures both in one run.

Ours. One `tessera up --shards 2 --replicas 1 --master-port 0` started here (stopped by
SIGTERM at the end, on errors and on Ctrl-C too), with its default mutual TLS (the workers get
its TESSERA_TLS_DIR). A second one with `--replicas 2` runs the "copies" row: the first
transport, float, dim 64, each row also held by the other shard, which takes every push's
copy before the push is acknowledged (docs/embeddings.md, "Copies of rows"); --no-copies
skips it.
For each (transport, mode, dim) a job of 2 workers, each a process of its own (this script
re-run with the hidden --worker flag), `tessera.Client(transport=T, exact=...)`, one table of
10^7 rows (`register_table(name, dim, 10**7 - 1, optimizer="adagrad:lr=0.05")`). Each step
each worker pulls its batch's rows (`pull_rows(table, step, ids, out)`: version `step`, which
waits until both ranks pushed step - 1) and pushes one gradient row per id
(`push_rows(table, step, ids, grads)`). A batch is 4096 ids per worker drawn Zipf (numpy's
zipf, a = 1.05, draws past 10^7 rejected) and spread over the table by a multiplicative hash
((k - 1) * 2654435761 mod 10^7, a bijection). --warmup steps untimed, then --steps timed; a
step's time runs from the last worker's start of it (its pull) to the last worker's end of it
(its push): BSP's period; the figure is the median over steps.

rows/s = rows moved per step / step time, where rows moved per step = ids pulled + ids pushed
over both workers = 2 x 2 x 4096 = 16384 (repeats counted: the ids are Zipf, so a batch has
fewer unique rows; the table prints the median unique rows per 8192-id step).

Baselines, measured in this process in the same run:
  torch   torch.nn.EmbeddingBag(R, dim, mode="sum", sparse=True) + torch.optim.Adagrad
          (lr 0.05, sparse gradients) on the same batches: both workers' 8192 ids as bags of
          1, forward, sum().backward(), optimizer step, zero_grad; same row count per step.
          R = 10^7 rows, except where the table and Adagrad's dense state (2 x R x dim x 4
          bytes) would not fit in --torch-mem-gib: then R = 10^6 and ids are taken mod R
          (printed in the table).
  memcpy  the bytes-moved limit: a numpy copy of the step's row bytes (8192 x dim x 4 for
          the pull plus as many for the push) between two preallocated arrays.
Extra rows, for where the time goes: "zeros", the 2x2 shm float job at dim 64 with the table's
init "zeros" instead of the default "normal:0.01" (a row is made when first pushed, and a pull
of a row not made yet draws its initial values: with Zipf ids over 10^7 about half of a step's
unique rows are new for a long time); "local", master "local": one process pulling and
pushing both ranks' ids of each step into the shards' code in process (no wire, no shards).
The configurations (worker jobs and torch tables alike) take turns: a warm-up turn, then
--rounds turns of --steps / --rounds timed steps each, reversed every other round, so that a
change in the machine's load hits them alike. Progress goes to stderr.

Medians are printed as a table and written to bench/results/embeddings.json with the headline
{"ours": shm float rows/s at dim 64, "baseline": torch rows/s at dim 64, unit, ratio}.
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
ROWS = 10 ** 7
HASH = 2654435761          # prime, so coprime with 10^7 and 10^6: a bijection mod either
ZIPF_A = 1.05
LR = 0.05
INIT = "normal:0.01"       # the tables' default (docs/embeddings.md)


def batches(rank, steps, batch, seed, rows=ROWS):
    """The ids of `steps` batches of rank `rank`: Zipf ranks 1..rows, hashed over the table
    (bench/table_tiers.py draws its batches here too)."""
    import numpy as np
    rng = np.random.default_rng([seed, rank])
    out = []
    for _ in range(steps):
        got = np.empty(0, np.int64)
        while got.size < batch:
            k = rng.zipf(ZIPF_A, batch)
            got = np.concatenate([got, k[k <= rows]])
        out.append(((got[:batch] - 1) * HASH) % rows)
    return out


# ---------------------------------------------------------------------------- worker mode

def worker(a):
    """One rank: pull and push its batches; prints one JSON line of per-step times."""
    import numpy as np
    try:
        import tessera
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "build", "python"))
        import tessera
    total = a.warmup + a.steps
    stops = {int(x) for x in a.stops.split(",") if x}
    if a.master == "local":   # one process doing both ranks' batches: no wire, no shards
        b0, b1 = batches(0, total, a.batch, a.seed), batches(1, total, a.batch, a.seed)
        ids = [np.concatenate([x, y]) for x, y in zip(b0, b1)]
        workers = 1
    else:
        ids = batches(a.rank, total, a.batch, a.seed)
        workers = 2
    c = tessera.Client(master=a.master, job=a.job, rank=a.rank, workers=workers, batch=1,
                       exact=a.exact, optimizer="sgd:lr=0.05", timeout_ms=120000,
                       transport=None if a.master == "local" else a.transport)
    t = c.register_table("emb", a.dim, ROWS - 1, init=a.init, optimizer=f"adagrad:lr={LR}")
    n = ids[0].size
    out = np.empty((n, a.dim), np.float32)
    grads = np.full((n, a.dim), 1e-3, np.float32)
    start, mid, end = [], [], []
    for s in range(total):
        t0 = time.perf_counter()     # CLOCK_MONOTONIC: comparable across the workers
        c.pull_rows(t, s, ids[s], out)
        t1 = time.perf_counter()
        c.push_rows(t, s, ids[s], grads)
        t2 = time.perf_counter()
        start.append(t0)
        mid.append(t1)
        end.append(t2)
        if s + 1 in stops:
            # taking turns: wait for the parent's go (one line on stdin) between turns
            print(json.dumps({"turn": s + 1}), flush=True)
            if not sys.stdin.readline():
                return 1
    c.pull_rows(t, total, ids[0][:1], out[:1])   # the last step applied
    w = a.warmup
    r = {"rank": a.rank, "start": start[w:], "mid": mid[w:], "end": end[w:],
         "transport": c.transport, "rows": c.table_rows(t, total)}
    c.close()
    print(json.dumps(r), flush=True)
    return 0


# ---------------------------------------------------------------------------- parent side

def turns_of(a):
    """Steps per turn: the warm-up, then the timed steps in --rounds turns."""
    per = max(1, a.steps // a.rounds)
    return [a.warmup] + [per] * (a.rounds - 1) + [a.steps - per * (a.rounds - 1)]


class Job:
    """One configuration: its 2 worker processes, driven a turn at a time."""

    def __init__(self, script, master, tls, transport, exact, dim, a, tag, init=INIT,
                 copies=False):
        self.transport, self.exact, self.dim, self.init = transport, exact, dim, init
        self.copies = copies
        self.local = master == "local"
        self.name = f"{'local' if self.local else transport} {'exact' if exact else 'float'} d{dim}"
        self.turns = turns_of(a)
        job = f"emb-{tag}-{transport}-{int(exact)}-{dim}-{init.split(':')[0]}-{int(copies)}"
        # `tessera up` runs mutual TLS (docs/security.md): its certificates for the clients
        env = dict(os.environ, TESSERA_LOG="warn", TESSERA_TLS_DIR=tls)
        self.procs = []
        for rank in range(1 if self.local else 2):
            cmd = [sys.executable, script, "--worker", "--rank", str(rank), "--master", master,
                   "--job", job, "--transport", transport, "--dim", str(dim),
                   "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps", str(a.steps),
                   "--seed", str(a.seed), "--init", init] + (["--exact"] if exact else [])
            # pauses at the end of each turn: the turn lengths are given as cumulative stops
            stops = []
            acc = 0
            for n in self.turns[:-1]:
                acc += n
                stops.append(acc)
            cmd += ["--stops", ",".join(map(str, stops))]
            self.procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, env=env, text=True,
                                               start_new_session=True))
        self.turn = 0
        self.result = None

    def run_turn(self):
        """Let both workers run their next turn; wait until both are through it."""
        if self.turn > 0:
            for p in self.procs:
                p.stdin.write("go\n")
                p.stdin.flush()
        lines = []
        for p in self.procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name}: a worker exited {p.wait()}")
            lines.append(json.loads(line))
        self.turn += 1
        if self.turn == len(self.turns):
            codes = [p.wait() for p in self.procs]
            if any(codes):
                raise RuntimeError(f"{self.name}: workers exited {codes}")
            self.result = sorted(lines, key=lambda r: r["rank"])

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()


class TorchJob:
    """The baseline, in this process: torch.nn.EmbeddingBag + Adagrad on the same batches
    (both ranks' ids of a step as one batch of bags of 1), taking turns like the jobs."""

    def __init__(self, dim, rows, step_ids, warmup, turns):
        import torch
        self.torch, self.dim, self.rows, self.warmup = torch, dim, rows, warmup
        self.name = f"torch d{dim}"
        torch.manual_seed(0)
        self.emb = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
        self.opt = torch.optim.Adagrad(self.emb.parameters(), lr=LR)
        self.ids = [torch.from_numpy(x % rows) for x in step_ids]
        self.offsets = torch.arange(self.ids[0].numel(), dtype=torch.int64)
        self.turns, self.turn, self.step, self.times = turns, 0, 0, []

    def run_turn(self):
        for _ in range(self.turns[self.turn]):
            t0 = time.perf_counter()
            out = self.emb(self.ids[self.step], self.offsets)
            out.sum().backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            if self.step >= self.warmup:
                self.times.append(time.perf_counter() - t0)
            self.step += 1
        self.turn += 1

    def stop(self):
        self.emb = self.opt = self.ids = None   # 10^7 x dim x 2 floats: freed at once


def memcpy_limit(nbytes, reps=20):
    """Seconds for a numpy copy of nbytes (median of reps)."""
    import numpy as np
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    ts = []
    for _ in range(reps + 2):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[2:])


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    return 0.0


def main():
    ap = argparse.ArgumentParser(
        description="Rows/s of a sparse embedding step (pull_rows + push_rows, 2 workers x 2 "
                    "shards, Zipf ids over 10^7 rows, adagrad) against torch.nn.EmbeddingBag "
                    "+ Adagrad in process and a memcpy of the same bytes, same run.")
    ap.add_argument("--steps", type=int, default=60, help="timed steps per config (default 60)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="turns per config, reversed every other round (default 3)")
    ap.add_argument("--dims", default="16,64,256", help="row dimensions (default 16,64,256)")
    ap.add_argument("--transports", default="shm,tcp", help="default shm,tcp")
    ap.add_argument("--modes", default="float,exact",
                    help="float and/or exact (default both; exact runs on shm only unless "
                         "--exact-all)")
    ap.add_argument("--exact-all", action="store_true", help="exact on every transport too")
    ap.add_argument("--batch", type=int, default=4096, help="ids per worker per step (4096)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--torch-mem-gib", type=float, default=None,
                    help="memory the torch table + Adagrad state may take (default: half of "
                         "MemAvailable); bigger ones run with 10^6 rows")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads (default: torch's own)")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch baseline")
    ap.add_argument("--no-zeros", action="store_true",
                    help="skip the extra row at dim 64, float, init \"zeros\" (the cost of "
                         "drawing new rows' normal values)")
    ap.add_argument("--no-local", action="store_true",
                    help="skip the reference rows of master \"local\" (one process, both "
                         "ranks' ids, the shards' code in process: no wire)")
    ap.add_argument("--no-copies", action="store_true",
                    help="skip the row on `--replicas 2` (every row copied to the other shard)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: dim 64, shm and tcp, float, 10 steps, 2 rounds")
    ap.add_argument("--bin", default=os.environ.get("TESSERA_BIN") or
                    os.path.join(REPO, "build", "bin"), help="where `tessera` is")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "embeddings.json"))
    # worker mode (this script run by itself)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--transport", help=argparse.SUPPRESS)
    ap.add_argument("--dim", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--exact", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stops", default="", help=argparse.SUPPRESS)
    ap.add_argument("--init", default=INIT, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.quick:
        a.steps, a.warmup, a.rounds, a.dims, a.modes = 10, 3, 2, "64", "float"
    dims = [int(d) for d in a.dims.split(",") if d]
    transports = [t for t in a.transports.split(",") if t]
    modes = [m for m in a.modes.split(",") if m]
    if a.rounds < 1 or a.steps < a.rounds:
        sys.exit("embeddings: --steps must be at least --rounds (>= 1)")
    for t in transports:
        if t not in ("shm", "tcp"):
            sys.exit(f"embeddings: --transports: {t!r} is not shm or tcp")
    for m in modes:
        if m not in ("float", "exact"):
            sys.exit(f"embeddings: --modes: {m!r} is not float or exact")
    binary = os.path.join(a.bin, "tessera")
    if not os.access(binary, os.X_OK):
        sys.exit(f"embeddings: no executable {binary}: build first (make) or pass --bin")
    sys.path.insert(0, HERE)
    from train import Cluster  # noqa: E402  (`tessera up` as a child, shared with train.py)
    import numpy as np

    configs = [(t, m == "exact", d) for m in modes for t in transports for d in dims
               if m == "float" or a.exact_all or t == transports[0]]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    logs = tempfile.mkdtemp(prefix="bench-emb-")
    cluster, copies, jobs = None, None, []
    script = os.path.abspath(__file__)
    tag = str(os.getpid())
    total = a.warmup + a.steps
    t_start = time.monotonic()
    try:
        # The batches, as the workers draw them: both ranks' ids of each step, for torch and
        # for the unique-row count.
        per_rank = [batches(r, total, a.batch, a.seed) for r in range(2)]
        step_ids = [np.concatenate([per_rank[0][s], per_rank[1][s]]) for s in range(total)]
        uniq_batch = statistics.median(np.unique(b).size for r in per_rank for b in r)
        uniq_step = statistics.median(np.unique(s).size for s in step_ids)
        cluster = Cluster(binary, logs, env={"TESSERA_LOG": "warn"})
        tls = os.path.join(logs, "tls")
        print(f"embeddings: cluster up at {cluster.master}; {len(configs)} configs, "
              f"{a.warmup} + {a.steps} steps each", file=sys.stderr)
        jobs = [Job(script, cluster.master, tls, t, e, d, a, tag) for t, e, d in configs]
        if not a.no_zeros and 64 in dims and "float" in modes:
            # what drawing new rows' normal values costs: the same with init "zeros"
            jobs.append(Job(script, cluster.master, tls, transports[0], False, 64, a, tag,
                            init="zeros"))
        if not a.no_copies and 64 in dims and "float" in modes:
            # what copying every row to the next shard of its chain costs
            copies = Cluster(binary, os.path.join(logs, "copies"), env={"TESSERA_LOG": "warn"},
                             replicas=2)
            jobs.append(Job(script, copies.master, os.path.join(logs, "copies", "tls"),
                            transports[0], False, 64, a, tag, copies=True))
        if not a.no_local:
            jobs += [Job(script, "local", tls, "local", False, d, a, tag) for d in dims]
        if not a.no_torch:
            # torch preallocates the table, and Adagrad a dense state as large: 10^6 rows for
            # the largest dims where all of them would not fit in the budget
            budget = a.torch_mem_gib if a.torch_mem_gib is not None else mem_available_gib() / 2
            rows = {d: ROWS for d in dims}
            for d in sorted(dims, reverse=True):
                if sum(2 * r * k * 4 for k, r in rows.items()) / (1 << 30) > budget:
                    rows[d] = 10 ** 6
            for d in dims:
                t0 = time.monotonic()
                jobs.append(TorchJob(d, rows[d], step_ids, a.warmup, turns_of(a)))
                print(f"  torch dim {d}: {rows[d]} rows allocated in "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
        for rnd in range(a.rounds + 1):       # turn 0: the warm-up steps
            order = jobs if rnd % 2 == 0 else jobs[::-1]
            for j in order:
                j.run_turn()
            print(f"  round {rnd}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)",
                  file=sys.stderr)
    except (RuntimeError, KeyboardInterrupt, OSError) as e:
        for j in jobs:
            j.stop()
        for c in (cluster, copies):
            if c:
                c.stop()
        cluster = copies = None
        sys.exit(f"embeddings: {str(e) or 'interrupted'} (cluster logs in {logs})")
    finally:
        for j in jobs:
            j.stop()
        for c in (cluster, copies):
            if c:
                c.stop()
    shutil.rmtree(logs, ignore_errors=True)

    moved = 2 * 2 * a.batch          # ids pulled + ids pushed, both workers
    limit = {d: memcpy_limit(moved * d * 4) for d in dims}
    med = statistics.median
    torch_r = {j.dim: {"rows": j.rows, "step_s": med(j.times)}
               for j in jobs if isinstance(j, TorchJob)}
    torch_threads = None
    if torch_r:
        import torch
        torch_threads = torch.get_num_threads()
    rows_out = []
    for j in jobs:
        if isinstance(j, TorchJob):
            continue
        rs = j.result
        # A step of the job: from the last worker's start of it (its previous step's end, but
        # after a pause between turns) to the last worker's end of it: BSP's period.
        step = [max(r["end"][i] for r in rs) - max(r["start"][i] for r in rs)
                for i in range(len(rs[0]["end"]))]
        pull = [r["mid"][i] - r["start"][i] for r in rs for i in range(len(r["end"]))]
        push = [r["end"][i] - r["mid"][i] for r in rs for i in range(len(r["end"]))]
        rec = {"config": "local" if j.local else "2x2 copies" if j.copies else "2x2",
               "init": j.init,
               "transport": rs[0]["transport"],
               "mode": "exact" if j.exact else "float", "dim": j.dim,
               "step_ms": round(med(step) * 1e3, 3),
               "pull_ms": round(med(pull) * 1e3, 3), "push_ms": round(med(push) * 1e3, 3),
               "pull_ms_by_rank": [round(med(r["mid"][i] - r["start"][i]
                                             for i in range(len(r["end"]))) * 1e3, 3)
                                   for r in rs],
               "push_ms_by_rank": [round(med(r["end"][i] - r["mid"][i]
                                             for i in range(len(r["end"]))) * 1e3, 3)
                                   for r in rs],
               "rows_s": round(moved / med(step)), "table_rows": rs[0]["rows"],
               "steps": len(step)}
        if j.dim in torch_r:
            rec["ratio_torch"] = round(rec["rows_s"] / (moved / torch_r[j.dim]["step_s"]), 3)
        rows_out.append(rec)

    print(f"\nbench/embeddings.py: {os.cpu_count()} cpus; 2 workers x 2 shards, {a.batch} "
          f"Zipf({ZIPF_A}) ids per worker per step over 10^7 rows (median {uniq_batch:.0f} "
          f"unique per batch, {uniq_step:.0f} per step of both); adagrad; median of "
          f"{a.steps} steps in {a.rounds} turns after {a.warmup}; rows/s = {moved} rows "
          f"pulled + pushed per step / step time")
    print("pull, push: median per call over both ranks (a pull waits for the step before "
          "it); local: master \"local\", one process pulling and pushing both ranks' ids\n")
    hdr = f"{'config':30} | {'dim':>4} | {'transport':>9} | {'rows/s':>9} | " \
          f"{'step ms':>8} | {'pull ms':>7} | {'push ms':>7} | {'/ torch':>7}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows_out:
        ratio = f"{r['ratio_torch']:7.3f}" if "ratio_torch" in r else f"{'-':>7}"
        name = "tessera " + r["config"] + " " + r["mode"] + \
            (" zeros" if r["init"] == "zeros" else "")
        print(f"{name:30} | {r['dim']:4d} | {r['transport']:>9} | "
              f"{r['rows_s'] / 1e6:8.3f}M | {r['step_ms']:8.2f} | {r['pull_ms']:7.2f} | "
              f"{r['push_ms']:7.2f} | {ratio}")
    for d, t in torch_r.items():
        name = f"torch Adagrad {torch_threads}t" + (" (10^6 rows)" if t["rows"] != ROWS else "")
        print(f"{name:30} | {d:4d} | {'in-proc':>9} | {moved / t['step_s'] / 1e6:8.3f}M | "
              f"{t['step_s'] * 1e3:8.2f} | {'':7} | {'':7} | {1:7.3f}")
    for d in dims:
        print(f"{'memcpy of the row bytes':30} | {d:4d} | {'in-proc':>9} | "
              f"{moved / limit[d] / 1e6:8.1f}M | {limit[d] * 1e3:8.3f} | {'':7} | {'':7} | "
              f"{'-':>7}")
    small = [d for d, t in torch_r.items() if t["rows"] != ROWS]
    if small:
        print(f"\ntorch at dim {', '.join(map(str, small))}: a table of 10^6 rows (ids mod "
              f"10^6): 10^7 rows and Adagrad's dense state would pass --torch-mem-gib")
    if a.no_torch:
        print("\ntorch baseline skipped (--no-torch)")

    result = {"name": "embeddings", "machine": f"{os.cpu_count()} cpus",
              "workers": 2, "shards": 2, "batch": a.batch, "rows": ROWS, "zipf_a": ZIPF_A,
              "optimizer": f"adagrad:lr={LR}", "steps": a.steps, "warmup": a.warmup,
              "rounds": a.rounds, "rows_moved_per_step": moved,
              "unique_per_batch_median": uniq_batch, "unique_per_step_median": uniq_step,
              "tessera": rows_out,
              "torch": [{"dim": d, "rows": t["rows"], "step_ms": round(t["step_s"] * 1e3, 3),
                         "rows_s": round(moved / t["step_s"]), "threads": torch_threads}
                        for d, t in torch_r.items()],
              "memcpy": [{"dim": d, "ms": round(limit[d] * 1e3, 4),
                          "rows_s": round(moved / limit[d])} for d in dims]}
    head = [r for r in rows_out if r["config"] == "2x2" and r["transport"] == "shm" and
            r["init"] == INIT and
            r["mode"] == "float" and r["dim"] == 64]
    if head and 64 in torch_r:
        ours, base = head[0]["rows_s"], moved / torch_r[64]["step_s"]
        result["headline"] = {"ours": round(ours), "baseline": round(base),
                              "unit": "rows/s (pull_rows + push_rows, dim 64, float, adagrad, "
                                      "2 workers x 2 shards, shm; baseline: "
                                      "torch.nn.EmbeddingBag + Adagrad in process)",
                              "ratio": round(ours / base, 3)}
        print(f"\nheadline: shm dim 64 {ours:.3g} rows/s, torch {base:.3g} rows/s, "
              f"ratio {ours / base:.3f} (goal >= 0.5)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(result, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
