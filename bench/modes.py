#!/usr/bin/python3
"""modes.py - bench/modes: what do the sync modes and gradient compression buy when one worker
is slow and the links are limited?

Why: BSP waits for the slowest rank every step and sends fp32 gradients; SSP, ASP and
reduce-only change who waits, and fp16/bf16/int8/top-k shrink the pushes, and with
--compress-pull the pulls (docs/modes.md, docs/compression.md "Pulls"). The
reduction-server design document reports 1.41x for async and 1.67x for async + compression
over its baseline on an 8-node A100 cluster. This script measures the analogue with the
built-in trainer (tessera-worker: MLP 784-256-128-10 on Fashion-MNIST, 235,146 floats, 0.94 MB
of gradient per push), 2 workers x 2 shards, under two conditions at once:

  - a slow worker: rank 1 sleeps --slow-ms before each step (tessera-worker --slow-ms);
    the balance rows (docs/scheduler.md) instead make rank 1 compute --slow-factor times
    slower (tessera-worker --slow-factor: a sleep in proportion to its slots' compute, which
    a schedule can act on; a fixed sleep per step is the same whatever the worker's share),
    or, in the drift rows, rank 1 for the first half of the steps and rank 0 for the second;
  - limited links: each process runs on its own emulated host (network namespace) whose veth
    to a bridge is shaped with `tbf rate R burst 256kb latency 50ms` at both ends
    (bench/README.md, "Emulated hosts": netem is not available), and every data-plane send
    of a worker first sleeps --delay-ms (tessera-worker --delay-ms, the fault transport).

Layout: namespace <tag>-sw holds bridge br0; hosts master, shard0, shard1, worker0, worker1 are
namespaces <tag>-<host> with eth0 at 10.77.0.1 .. 10.77.0.5/24. Shards and workers use
`--transport tcp` (shared memory would bypass the links: the namespaces share /dev/shm), and
workers `--partition-kb 256`: with the default 4 MiB partitions fc1.weight (0.8 MB) is one
partition, so one shard would carry 99% of the bytes; in 4 pieces the split is 71/29. One
cluster (master + 2 shards) serves every configuration, each under a fresh job id; after a
failed configuration the cluster is restarted. Every process is started in its own process
group and stopped by it (SIGTERM, then SIGKILL); every namespace this script made goes at the
end (bench/emuhosts.py kills its holder by pid), also on errors and Ctrl-C. --no-netns (or no permission to
create namespaces) runs the same configurations on 127.0.0.1 in one namespace, slow worker
only (no rate limit, no send delay).

Epoch time is the job's: rank 0's `seconds` (its training loop, epoch-end accuracy passes
included, no start-up) plus how much later than rank 0's loop rank 1 exited. Under BSP the
ranks finish together; under ASP the fast rank 0 ends early while rank 1 still has its half of
the epoch's micro-batches to do, and rank 0's own figure is shown beside it ("rank0 s").
Output: a table and bench/results/modes.json with every run and the headline
{"ours": best configuration's s/epoch, "baseline": BSP-fp32's, "unit": "s/epoch",
 "ratio": baseline / ours, "config": name}.
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emuhosts import Net, Procs, interrupt_on_signals, require_bins  # noqa: E402
NPARAMS = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10  # the MLP: 235,146 floats
PULL_BYTES = NPARAMS * 4                                    # a pull in float32
TRAIN_N = 60000
# The reduction-server design doc, 8 x A100 nodes: async 1.41x, async + compression 1.67x.
PAPER = {"ASP": 1.41, "ASP-topk0.01": 1.67, "ASP-dynamic": 1.41, "ASP-dyn-topk0.01": 1.67,
         "ASP-dyn-int8": 1.67, "ASP-dyn int8/int8": 1.67, "ASP-overlap": 1.41,
         "ASP-dyn-overlap": 1.41, "ASP-dyn-ov int8/int8": 1.67}

# (key for --configs, name in the table, tessera-worker flags, how rank 1 is slow: "ms"
# --slow-ms, "none", "x" --slow-factor, "drift" --slow-factor moving from rank 1 to rank 0
# half-way). "noslow" is a reference, not a contender: BSP-fp32 with rank 1 at full speed, to
# show what the slow worker costs. "--balance" rows run --batch / --micro slots (the width).
CONFIGS = [
    ("bsp", "BSP-fp32", [], "ms"),
    ("ssp", "SSP(2)", ["--mode", "ssp", "--staleness", "2"], "ms"),
    ("asp", "ASP", ["--mode", "asp"], "ms"),
    ("reduce", "reduce", ["--mode", "reduce"], "ms"),
    ("fp16", "BSP-fp16", ["--compress", "fp16"], "ms"),
    ("bf16", "BSP-bf16", ["--compress", "bf16"], "ms"),
    ("int8", "BSP-int8", ["--compress", "int8"], "ms"),
    ("topk", "BSP-topk0.01", ["--compress", "topk:0.01"], "ms"),
    ("asp-topk", "ASP-topk0.01", ["--mode", "asp", "--compress", "topk:0.01"], "ms"),
    ("asp-dyn", "ASP-dynamic", ["--mode", "asp", "--dynamic"], "ms"),
    ("ssp-dyn", "SSP(2)-dynamic", ["--mode", "ssp", "--staleness", "2", "--dynamic"], "ms"),
    ("asp-dyn-topk", "ASP-dyn-topk0.01", ["--mode", "asp", "--dynamic", "--compress",
                                          "topk:0.01"], "ms"),
    ("asp-dyn-int8", "ASP-dyn-int8", ["--mode", "asp", "--dynamic", "--compress", "int8"],
     "ms"),
    ("amp", "AMP", ["--compress", "fp16", "--loss-scale", "dynamic"], "ms"),
    # Compression both ways: pushes with --compress, pulls as deltas against each worker's copy
    # with --compress-pull (docs/compression.md, "Pulls").
    ("fp16-both", "BSP-fp16/fp16", ["--compress", "fp16", "--compress-pull", "fp16"], "ms"),
    ("int8-both", "BSP-int8/int8", ["--compress", "int8", "--compress-pull", "int8"], "ms"),
    ("asp-int8-both", "ASP-int8/int8", ["--mode", "asp", "--compress", "int8",
                                        "--compress-pull", "int8"], "ms"),
    ("asp-topk-both", "ASP-topk/topk", ["--mode", "asp", "--compress", "topk:0.01",
                                        "--compress-pull", "topk:0.01"], "ms"),
    ("asp-dyn-int8-both", "ASP-dyn int8/int8", ["--mode", "asp", "--dynamic", "--compress",
                                                "int8", "--compress-pull", "int8"], "ms"),
    # Overlap (ASP only): each worker exchanges a step while it computes the next, on the
    # values from before it (docs/modes.md, "Overlap in ASP").
    ("asp-ov", "ASP-overlap", ["--mode", "asp", "--overlap"], "ms"),
    ("asp-dyn-ov", "ASP-dyn-overlap", ["--mode", "asp", "--dynamic", "--overlap"], "ms"),
    ("asp-dyn-int8-both-ov", "ASP-dyn-ov int8/int8", ["--mode", "asp", "--dynamic",
                                                      "--overlap", "--compress", "int8",
                                                      "--compress-pull", "int8"], "ms"),
    ("noslow", "BSP-fp32-noslow", [], "none"),
    ("x-bsp", "xN BSP-fp32", [], "x"),
    ("x-exact", "xN BSP-exact", ["--exact"], "x"),
    ("x-bal", "xN balanced", ["--balance"], "x"),
    ("x-bal-exact", "xN bal-exact", ["--balance", "--exact"], "x"),
    ("x-bal-slot", "xN bal per slot", ["--balance"], "x"),
    ("x-bal-exact-slot", "xN bal-ex per slot", ["--balance", "--exact"], "x"),
    ("x-asp", "xN ASP", ["--mode", "asp"], "x"),
    ("x-asp-dyn", "xN ASP-dynamic", ["--mode", "asp", "--dynamic"], "x"),
    ("d-bsp", "drift BSP-fp32", [], "drift"),
    ("d-bal", "drift balanced", ["--balance"], "drift"),
    ("d-bal-exact", "drift bal-exact", ["--balance", "--exact"], "drift"),
    ("d-asp", "drift ASP", ["--mode", "asp"], "drift"),
    ("d-asp-dyn", "drift ASP-dynamic", ["--mode", "asp", "--dynamic"], "drift"),
]
# Rows whose workers push every slot alone (TESSERA_COMBINE_SLOTS=off); the others combine
# them (the default, docs/scheduler.md): the balanced rows before and after in one run
# (docs/scheduler.md, "Costs").
PER_SLOT = {"x-bal-slot", "x-bal-exact-slot"}
# The baseline of each kind of slowness: speedups are over BSP-fp32 under the same one.
BASE = {"ms": "bsp", "none": "bsp", "x": "x-bsp", "drift": "d-bsp"}
HOSTS = ["master", "shard0", "shard1", "worker0", "worker1"]  # 10.77.0.1 .. 10.77.0.5


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Cluster:
    """tessera-master on host master, tessera-shard on shard0 and shard1."""

    def __init__(self, a, net, procs, logs):
        self.a, self.net, self.procs, self.logs = a, net, procs, logs
        self.procs_here, self.master, self.n = [], None, 0

    def bin(self, name):
        return os.path.join(self.a.bin, name)

    def start(self):
        self.n += 1
        d = os.path.join(self.logs, f"cluster{self.n}")
        os.makedirs(d)
        pf = os.path.join(d, "master.port")
        self.spawn("master", [self.bin("tessera-master"), "--listen",
                              f"{self.net.addr('master')}:0", "--port-file", pf], d)
        port = wait_file(pf, 15, self.procs_here[0])
        self.master = f"{self.net.addr('master')}:{port}"
        for k in (0, 1):
            host = f"shard{k}"
            self.spawn(host, [self.bin("tessera-shard"), "--master", self.master, "--listen",
                              f"{self.net.addr(host)}:0", "--transport", self.a.transport,
                              "--port-file", os.path.join(d, f"{host}.port")], d)
        self.wait_alive(2, 30)

    def spawn(self, host, cmd, d):
        err = open(os.path.join(d, f"{host}.log"), "w")
        p = self.procs.start(self.net.wrap(host, cmd), subprocess.DEVNULL, err)
        err.close()
        self.procs_here.append(p)

    def wait_alive(self, want, secs):
        cmd = self.net.wrap("master", [self.bin("tessera"), "status", "--master", self.master,
                                       "--json"])
        deadline, last = time.monotonic() + secs, ""
        while time.monotonic() < deadline:
            for p in self.procs_here:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[-1] if p.args else 'a process'} of the cluster "
                                       f"exited {p.returncode} (logs in {self.logs})")
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0:
                try:
                    st = json.loads(r.stdout)
                    if sum(s.get("state") == "alive" for s in st.get("shards", [])) >= want:
                        return
                except ValueError:
                    pass
            last = r.stderr.strip()
            time.sleep(0.3)
        raise RuntimeError(f"{want} shards not alive after {secs} s ({last}; logs in "
                           f"{self.logs})")

    def stop(self):
        self.procs.stop(self.procs_here)
        self.procs_here = []


def wait_file(path, secs, proc):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                s = f.read().strip()
            if s:
                return int(s)
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited {proc.returncode} before writing {path}")
        time.sleep(0.05)
    raise RuntimeError(f"no port in {path} after {secs} s")


def read_lines(pipe, out):
    """Collects (monotonic time, line) of rank 0's stdout; echoes epoch lines as progress."""
    for line in pipe:
        out.append((time.monotonic(), line.rstrip("\n")))
        if line.startswith("epoch "):
            log(f"      rank 0: {line.strip()}")


def slowness(a, how):
    """tessera-worker flags that slow rank 0 and rank 1, for CONFIGS' `how`."""
    if how == "ms":
        return [], ["--slow-ms", str(a.slow_ms)]
    if how == "none":
        return [], []
    x = ["--slow-factor", str(a.slow_factor)]
    c = ["--compute-ms", str(a.compute_ms)] if a.compute_ms else []
    if how == "x":
        return c, c + x
    total = a.steps or a.epochs * (TRAIN_N // a.batch)
    return (c + x + ["--slow-steps", f"{total // 2}:{total}"],
            c + x + ["--slow-steps", f"0:{total // 2}"])


def run_config(a, net, procs, cluster, key, name, flags, how, rep, logs):
    """Both ranks of one job; returns rank 0's JSON plus the job's time, or raises."""
    job = f"modes-{key}-{rep}-{os.getpid()}"
    width = ["--workers", "2"]
    if "--balance" in flags:   # the slots are the micro-batches; 2 workers start the job
        width = ["--workers", str(a.batch // a.micro), "--start-workers", "2"]
    env = ["env", "TESSERA_COMBINE_SLOTS=" + ("off" if key in PER_SLOT else "on")]
    base = env + [os.path.join(a.bin, "tessera-worker"), "--master", cluster.master, "--job", job,
            "--transport", a.transport, "--json", "--batch", str(a.batch), "--micro",
            str(a.micro)] + width
    base += ["--steps", str(a.steps)] if a.steps else ["--epochs", str(a.epochs)]
    if a.partition_kb:
        base += ["--partition-kb", str(a.partition_kb)]
    if net.netns and a.delay_ms:
        base += ["--delay-ms", str(a.delay_ms)]
    d = os.path.join(logs, job)
    os.makedirs(d)
    files = [open(os.path.join(d, f), "w") for f in ("rank0.err", "rank1.out", "rank1.err")]
    lines = []
    try:
        slow0, slow1 = slowness(a, how)
        w1 = procs.start(net.wrap("worker1", base + ["--rank", "1"] + slow1 + flags), files[1],
                         files[2])
        w0 = procs.start(net.wrap("worker0", base + ["--rank", "0"] + slow0 + flags),
                         subprocess.PIPE, files[0])
    finally:
        for f in files:
            f.close()
    reader = threading.Thread(target=read_lines, args=(w0.stdout, lines), daemon=True)
    reader.start()
    deadline, ends = time.monotonic() + a.timeout, {}
    while len(ends) < 2 and time.monotonic() < deadline:
        for r, p in ((0, w0), (1, w1)):
            if r not in ends and p.poll() is not None:
                ends[r] = time.monotonic()
        time.sleep(0.01)
    if len(ends) < 2:
        procs.stop([w0, w1], grace=5)
        raise RuntimeError(f"{name}: not done after {a.timeout} s (logs in {d})")
    reader.join(timeout=5)
    w0.stdout.close()
    procs.stop([w0, w1], grace=1)  # both exited: this only reaps them and empties the groups
    if w0.returncode or w1.returncode:
        raise RuntimeError(f"{name}: rank 0 exited {w0.returncode}, rank 1 {w1.returncode} "
                           f"(logs in {d})")
    js = [l for _, l in lines if l.startswith("{")]
    if not js:
        raise RuntimeError(f"{name}: rank 0 printed no JSON line (logs in {d})")
    r = json.loads(js[-1])
    # The end of rank 0's loop: its last progress line, printed just before `seconds` is taken.
    ep = [t for t, l in lines if l.startswith("epoch ")]
    end0 = ep[-1] if ep else ends[0]
    r["rank0_seconds"] = r["seconds"]
    r["rank1_after_s"] = round(max(0.0, ends[1] - end0), 3)
    r["job_seconds"] = round(r["seconds"] + r["rank1_after_s"], 3)
    return r


def summarize(runs, batch):
    spe = TRAIN_N // batch
    rows = []
    for key, name, flags, how in CONFIGS:
        rs = runs.get(key)
        if rs is None:
            continue
        ok = [r for r in rs if "error" not in r]
        row = {"key": key, "config": name, "flags": flags, "slow": how, "runs": rs,
               "ok": len(ok) == len(rs)}
        if ok:
            steps = ok[0]["steps"] - ok[0]["start_step"]
            per_epoch = spe / steps if steps else 0
            med = lambda f: statistics.median(f(r) for r in ok)
            row.update({
                "epoch_s": round(med(lambda r: r["job_seconds"]) * per_epoch, 3),
                "rank0_epoch_s": round(med(lambda r: r["rank0_seconds"]) * per_epoch, 3),
                "test_accuracy": med(lambda r: r["test_accuracy"]),
                "push_bytes_per_step": round(med(lambda r: r["bytes_pushed"] / steps)),
                # Workers before --compress-pull printed no bytes_pulled: float32 pulls.
                "pull_bytes_per_step": round(med(lambda r: r.get("bytes_pulled",
                                                                 PULL_BYTES * steps) / steps)),
                "wire_bytes_per_step": round(med(lambda r: (r["bytes_pushed"] + r.get(
                    "bytes_pulled", PULL_BYTES * steps)) / steps)),
                "staleness_max": max(r["staleness_max"] for r in ok),
                "steps_skipped": max(r["steps_skipped"] for r in ok),
                "steps": steps})
        rows.append(row)
    done = {r["key"]: r for r in rows if "epoch_s" in r}
    for r in rows:
        b = done.get(BASE[r["slow"]])
        if b and "epoch_s" in r and r["epoch_s"] > 0:
            r["speedup"] = round(b["epoch_s"] / r["epoch_s"], 3)
    return rows, done.get("bsp")


def report(a, rows, base, net_desc, wall):
    print(f"\nbench/modes.py: {os.cpu_count()} cpus; MLP 784-256-128-10 on Fashion-MNIST, "
          f"2 workers x 2 shards over {a.transport}, {net_desc}; batch {a.batch}, "
          f"micro-batch {a.micro};\nrank 1 sleeps {a.slow_ms} ms before each step (xN and "
          f"drift rows: computes {a.slow_factor}x slower, micro-batches +{a.compute_ms} ms; "
          "drift: rank 1 the first half, rank 0 the second; their speedup is over the xN / "
          f"drift BSP-fp32 row; balanced: {a.batch // a.micro} slots); "
          f"{a.steps or a.epochs} {'steps' if a.steps else 'epoch(s)'}, median of "
          f"{a.repeats} run(s); epoch s = the job's (until both ranks are done), rank0 s = "
          "rank 0's own;\nwire KB/step = one worker's push + its pull (as the worker counted "
          f"them; a float32 pull is {PULL_BYTES / 1e3:.0f} KB)\n")
    hdr = (f"{'config':18} | {'epoch s':>7} | {'speedup':>7} | {'rank0 s':>7} | {'test acc':>8} "
           f"| {'push KB/step':>12} | {'pull KB/step':>12} | {'wire KB/step':>12} | "
           f"{'max stale':>9} | "
           f"{'skipped':>7} | paper")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        paper = f"{PAPER[r['config']]:.2f}x" if r["config"] in PAPER else ""
        if "epoch_s" not in r:
            err = next(x["error"] for x in r["runs"] if "error" in x)
            print(f"{r['config']:18} | FAILED: {err}")
            continue
        sp = f"{r['speedup']:6.2f}x" if "speedup" in r else f"{'-':>7}"
        print(f"{r['config']:18} | {r['epoch_s']:7.2f} | {sp} | {r['rank0_epoch_s']:7.2f} | "
              f"{r['test_accuracy']:8.4f} | {r['push_bytes_per_step'] / 1e3:12.1f} | "
              f"{r['pull_bytes_per_step'] / 1e3:12.1f} | "
              f"{r['wire_bytes_per_step'] / 1e3:12.1f} | {r['staleness_max']:9d} | "
              f"{r['steps_skipped']:7d} | {paper}")
    best = min((r for r in rows if "epoch_s" in r and r["slow"] == "ms" and r["key"] != "bsp"),
               key=lambda r: r["epoch_s"], default=None)
    headline = None
    if base and best:
        headline = {"ours": best["epoch_s"], "baseline": base["epoch_s"], "unit": "s/epoch",
                    "ratio": round(base["epoch_s"] / best["epoch_s"], 3),
                    "config": best["config"]}
        print(f"\nheadline: {best['config']} {best['epoch_s']:.2f} s/epoch against BSP-fp32 "
              f"{base['epoch_s']:.2f}: {headline['ratio']:.2f}x (reduction-server design doc, "
              "8 x A100: async 1.41x, async + compression 1.67x)")
    done = {r["key"]: r for r in rows if "epoch_s" in r}
    if "x-bsp" in done and "x-bal-exact" in done:
        b, o = done["x-bsp"], done["x-bal-exact"]
        print(f"balance: {o['config']} {o['epoch_s']:.2f} s/epoch against {b['config']} "
              f"{b['epoch_s']:.2f}: {b['epoch_s'] / o['epoch_s']:.2f}x with rank 1 "
              f"{a.slow_factor}x slower (goal 1.3x, at unchanged bits)")
        if not headline:   # a run of the balance rows only: their figure is the headline
            headline = {"ours": o["epoch_s"], "baseline": b["epoch_s"], "unit": "s/epoch",
                        "ratio": round(b["epoch_s"] / o["epoch_s"], 3), "config": o["config"]}
    print(f"runtime {wall:.0f} s")
    return headline


def parse():
    keys = [k for k, _, _, _ in CONFIGS]
    ap = argparse.ArgumentParser(
        description="Epoch time and accuracy of BSP, SSP, ASP, reduce-only and gradient "
                    "compression, 2 workers x 2 shards, with one slow worker and rate-limited "
                    "emulated links (network namespaces + tc tbf).")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="where tessera, tessera-master, -shard, -worker are (default build/bin)")
    ap.add_argument("--out", default="bench/results/modes.json",
                    help="results (default bench/results/modes.json)")
    modes = [k for k, _, _, how in CONFIGS if how in ("ms", "none")]
    ap.add_argument("--configs", default=",".join(modes),
                    help=f"comma-separated subset of {','.join(keys)} (bsp, the baseline, is "
                         f"always run; default the modes and codecs, {','.join(modes)}; the "
                         "balance rows x-* and d-* are meant for --no-netns --compute-ms N: "
                         "bench/README.md, \"Balanced BSP\")")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run (default 1)")
    ap.add_argument("--steps", type=int, default=0,
                    help="train exactly K steps instead of --epochs (quicker; the time is "
                         "scaled to an epoch of 937 steps)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each configuration, median reported (default 1)")
    ap.add_argument("--rate", default="400mbit",
                    help="tbf rate of every link, both directions (default 400mbit)")
    ap.add_argument("--delay-ms", type=int, default=1,
                    help="sleep before each data-plane send of a worker (default 1)")
    ap.add_argument("--slow-ms", type=int, default=15,
                    help="rank 1 sleeps this long before each step (default 15)")
    ap.add_argument("--slow-factor", type=float, default=2.0,
                    help="xN and drift rows: the slow rank computes this many times slower "
                         "(default 2)")
    ap.add_argument("--compute-ms", type=int, default=0,
                    help="xN and drift rows: every micro-batch of both workers also takes this "
                         "many ms (tessera-worker --compute-ms: a sleep, an accelerator's time "
                         "that does not load the CPUs; default 0)")
    ap.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    ap.add_argument("--micro", type=int, default=16,
                    help="micro-batch (default 16); the balanced rows have --batch / --micro "
                         "slots")
    ap.add_argument("--partition-kb", type=int, default=256,
                    help="partition size (default 256: fc1.weight, 0.8 MB, is cut in 4 and "
                         "spread over both shards; 0 = the worker's default, 4096, which puts "
                         "it whole on one shard)")
    ap.add_argument("--transport", default="tcp", choices=("tcp", "shm"),
                    help="the workers' data plane (default tcp; shm only with --no-netns: "
                         "the emulated links would not carry it)")
    ap.add_argument("--no-netns", action="store_true",
                    help="one namespace, 127.0.0.1, no rate limit or delay: slow worker only")
    ap.add_argument("--timeout", type=int, default=0,
                    help="seconds one run may take before it is killed (default 300 per "
                         "epoch)")
    a = ap.parse_args()
    want = [k.strip() for k in a.configs.split(",") if k.strip()]
    bad = [k for k in want if k not in keys]
    if bad:
        ap.error(f"--configs: unknown {','.join(bad)}; choose from {','.join(keys)}")
    a.configs = ["bsp"] + [k for k in keys if k in want and k != "bsp"]
    a.timeout = a.timeout or 300 * max(1, a.epochs if not a.steps else -(-a.steps // 937))
    if a.epochs < 1 or a.steps < 0 or a.repeats < 1 or a.slow_ms < 0 or a.delay_ms < 0:
        ap.error("--epochs and --repeats must be >= 1, --steps, --slow-ms, --delay-ms >= 0")
    if a.transport == "shm" and not a.no_netns:
        ap.error("--transport shm bypasses the emulated links: add --no-netns")
    if not 1 < a.slow_factor <= 100:
        ap.error("--slow-factor: above 1, at most 100")
    if a.micro < 1 or a.batch % a.micro or not 2 < a.batch // a.micro <= 64:
        ap.error("--micro must divide --batch into 3..64 micro-batches (the balanced rows' "
                 "slots, more than the 2 workers)")
    require_bins(ap, a.bin, ("tessera", "tessera-master", "tessera-shard", "tessera-worker"))
    return a


def main():
    a = parse()
    t_start = time.monotonic()
    interrupt_on_signals()   # -> KeyboardInterrupt -> finally
    net = Net(HOSTS, not a.no_netns, a.rate, f"tsm{os.getpid()}")
    procs, logs = Procs("modes.py", text=True), tempfile.mkdtemp(prefix="ts-bench-modes-")
    cluster, runs, failed, notes = None, {}, False, []
    try:
        if net.netns:
            ok, why = net.probe()
            if not ok:
                msg = f"cannot create network namespaces ({why}); fell back to --no-netns " \
                      "(loopback, slow worker only)"
                log(f"modes.py: {msg}")
                notes.append(msg)
                net.netns = False
        net_desc = (f"emulated hosts, tbf {a.rate} per link, {a.delay_ms} ms per worker send"
                    if net.netns else "loopback in one namespace (no link limits)")
        net.up()
        cluster = Cluster(a, net, procs, logs)
        cluster.start()
        log(f"cluster: master {cluster.master}, {net_desc}; {len(a.configs)} configs x "
            f"{a.repeats} run(s); logs in {logs}")
        names = {k: (n, f, h) for k, n, f, h in CONFIGS}
        for rep in range(a.repeats):
            for key in a.configs:
                name, flags, how = names[key]
                what = " ".join(flags) or "bsp, fp32"
                what += {"none": ", rank 1 not slowed", "x": ", rank 1 slower per slot",
                         "drift": ", the slow worker changes half-way"}.get(how, "")
                log(f"  [{rep + 1}/{a.repeats}] {name} ({what})...")
                try:
                    r = run_config(a, net, procs, cluster, key, name, flags, how, rep, logs)
                    log(f"    {name}: {r['job_seconds']:.2f} s (rank 0 {r['rank0_seconds']:.2f} "
                        f"s), test accuracy {r['test_accuracy']:.4f}")
                except RuntimeError as e:
                    failed = True
                    r = {"error": str(e)}
                    log(f"    {name}: FAILED: {e}; restarting the cluster")
                    cluster.stop()
                    cluster.start()
                runs.setdefault(key, []).append(r)
    except (RuntimeError, KeyboardInterrupt) as e:
        log(f"modes.py: {str(e) or 'interrupted'} (logs in {logs})")
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # let the cleanup finish
            signal.signal(sig, signal.SIG_IGN)
        procs.stop()
        net.down()
    rows, base = summarize(runs, a.batch)
    headline = report(a, rows, base, net_desc, time.monotonic() - t_start)
    for n in notes:
        print(f"NOTE: {n}")
    result = {"name": "modes", "machine": f"{os.cpu_count()} cpus", "ok": not failed,
              "netns": net.netns, "rate": a.rate if net.netns else None,
              "delay_ms": a.delay_ms if net.netns else 0, "slow_ms": a.slow_ms,
              "slow_factor": a.slow_factor, "batch": a.batch, "micro": a.micro,
              "transport": a.transport, "compute_ms": a.compute_ms,
              "epochs": a.epochs, "steps": a.steps, "repeats": a.repeats, "workers": 2,
              "shards": 2, "pull_bytes_per_step": PULL_BYTES, "rows": rows,
              "paper": {"source": "reduction-server design document, 8-node A100 cluster",
                        "async": 1.41, "async_compression": 1.67},
              "notes": notes, "headline": headline}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}")
    if not failed:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
