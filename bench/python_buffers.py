#!/usr/bin/python3
"""python_buffers.py - what Client.buffers saves a Python trainer (issue 19, item 3).

Why: before Client.buffers, a Python push was copied into the shm ring and a pull copied out
of the shard's mapped pages; tessera_buffers removes both copies for C (bench/pushpull). This
measures the same from Python, in one run, against `tessera up --shards 2 --replicas 1`
started here (stopped by SIGTERM at the end, on errors and on Ctrl-C too):

1. push + pull loop: one worker steps a tensor of --mib MiB (4 MiB partitions, so that both
   shards hold some) with Client.step, float and exact:
     copies   the gradient array the trainer has (pushed as it is) and a private params array;
     buffers  the gradient written into the grad buffer first (np.copyto: the pass
              tessera.torch makes; exact: to_fixed into it, as both ways do) and the read-only
              params array from buffers() as the pull's output;
     buffers, in place (float): the same without the copy, for a trainer that computes its
              gradient straight into the buffer (what bench/pushpull's C worker does).
   Each configuration is a job of its own; they take turns, --steps steps at a time, for
   --reps rounds, in reverse order every other round, so that a change in the machine's load
   hits them alike. Per step: wall time and
   this process's CPU time (time.process_time: the worker side of the copies).
2. the example: python/examples/fashion_mnist_torch.py, 2 workers on the cluster, --example-steps
   steps, with tessera.torch's buffers (--buffers) and without, alternating (again reversed every
   other round), --reps rounds; its `step_ms_median` (rank 0's median step: samples,
   forward, backward, push and pull), `step_cpu_ms_median` (that process's CPU time per step,
   which another load on the machine sways less) and `epoch_seconds`. --no-example skips it.

Medians are printed as a table and written to bench/results/python_buffers.json, with the
headline {"ours": buffers ms/step, "baseline": copies ms/step, unit, ratio} for the float
push + pull loop.
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
sys.path.insert(0, HERE)
from train import Cluster  # noqa: E402  (`tessera up` as a child, shared with bench/train.py)
EXAMPLE = os.path.join(REPO, "python", "examples", "fashion_mnist_torch.py")
MIB = 1 << 20

try:
    import numpy as np
    try:
        import tessera
    except ImportError:  # run from a source tree after `make`: use build/python
        sys.path.insert(0, os.path.join(REPO, "build", "python"))
        import tessera
except ImportError as e:
    sys.exit(f"python_buffers: {e}: build first (make), or put the binding on PYTHONPATH")


class Loop:
    """One configuration of part 1: a client, its tensor, and the arrays it steps with."""

    def __init__(self, master, exact, buffers, mib, tag, in_place=False):
        n = mib * MIB // 4
        self.exact, self.buffers, self.in_place, self.step = exact, buffers, in_place, 0
        self.c = tessera.Client(master=master,
                                job=f"pybuf-{tag}-{exact:d}{buffers:d}{in_place:d}",
                                batch=1, exact=exact, optimizer="sgd:lr=1e-6",
                                timeout_ms=60000)
        self.id = self.c.register("w", n, init="normal:0.1", seed=1)
        # The trainer's gradient, as autograd would hand it over.
        self.src = np.random.default_rng(1).standard_normal(n).astype(np.float32) * 1e-3
        if buffers:
            self.params, self.grad = self.c.buffers(self.id)
            if not exact:   # "in place" pushes this, computed straight into the buffer
                np.copyto(self.grad, self.src)
        else:
            self.params = np.empty(n, np.float32)
            self.grad = np.empty(n, np.int64) if exact else self.src
        self.c.pull(self.id, 0, self.params)
        self.wall, self.cpu = [], []

    def run(self, steps):
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            if self.exact:
                tessera.to_fixed(self.src, self.grad)
            elif self.buffers and not self.in_place:
                np.copyto(self.grad, self.src)
            self.c.step(self.step, [self.grad], [self.params])
            self.wall.append(time.perf_counter() - t0)
            self.cpu.append(time.process_time() - c0)
            self.step += 1

    def close(self):
        self.params = self.grad = None   # the buffers' arrays go before the client
        self.c.close()


def example(master, job, buffers, steps):
    """Both ranks of the example on the cluster; rank 0's JSON result."""
    common = ["--master", master, "--job", job, "--workers", "2", "--steps", str(steps),
              "--json"] + (["--buffers"] if buffers else [])
    env = dict(os.environ, TESSERA_LOG="warn")
    procs = [subprocess.Popen([sys.executable, EXAMPLE, "--rank", str(r)] + common,
                              stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                              env=env, text=True) for r in range(2)]
    out = procs[0].communicate()[0]
    codes = [p.wait() for p in procs]
    if codes != [0, 0]:
        raise RuntimeError(f"the example exited {codes}")
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]


def med_ms(xs):
    return round(statistics.median(xs) * 1e3, 2)


def main():
    ap = argparse.ArgumentParser(description="Client.buffers against private arrays: a push + "
                                 "pull loop from Python and the PyTorch example, same run.")
    ap.add_argument("--mib", type=int, default=64, help="tensor size in MiB (default 64)")
    ap.add_argument("--steps", type=int, default=10, help="steps per turn (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of turns (default 3)")
    ap.add_argument("--example-steps", type=int, default=300,
                    help="steps of each example run (default 300)")
    ap.add_argument("--no-example", action="store_true", help="skip part 2")
    ap.add_argument("--bin", default=os.environ.get("TESSERA_BIN") or
                    os.path.join(REPO, "build", "bin"), help="where `tessera` is")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "python_buffers.json"))
    a = ap.parse_args()
    binary = os.path.join(a.bin, "tessera")
    if not os.access(binary, os.X_OK):
        sys.exit(f"python_buffers: no executable {binary}: build first (make) or pass --bin")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    logs = tempfile.mkdtemp(prefix="ts-bench-pybuf-")
    cluster, loops, ex = None, {}, {True: [], False: []}
    try:
        cluster = Cluster(binary, logs, env={"TESSERA_LOG": "warn"})
        tag = str(os.getpid())
        for exact in (False, True):
            for buffers in (False, True):
                loops[exact, buffers, False] = Loop(cluster.master, exact, buffers, a.mib, tag)
        loops[False, True, True] = Loop(cluster.master, False, True, a.mib, tag, in_place=True)
        for loop in loops.values():
            loop.run(1)                                   # warm-up, not kept
            loop.wall, loop.cpu = [], []
        for rep in range(a.reps):
            order = 1 if rep % 2 == 0 else -1
            for loop in list(loops.values())[::order]:
                loop.run(a.steps)
            if not a.no_example:
                for buffers in (False, True)[::order]:
                    r = example(cluster.master, f"pybuf-ex-{tag}-{rep}-{buffers:d}", buffers,
                                a.example_steps)
                    ex[buffers].append(r)
            print(f"  round {rep + 1}/{a.reps} done", file=sys.stderr)
        transport = loops[False, True, False].c.transport
        for loop in loops.values():
            loop.close()
    except (RuntimeError, KeyboardInterrupt, tessera.Error) as e:
        sys.exit(f"python_buffers: {str(e) or 'interrupted'} (cluster logs in {logs})")
    finally:
        if cluster:
            cluster.stop()
    shutil.rmtree(logs, ignore_errors=True)

    rows = []
    print(f"\nbench/python_buffers.py: {os.cpu_count()} cpus; {a.mib} MiB, 1 worker x 2 shards "
          f"(transport {transport}); median of {a.reps} x {a.steps} steps each, taking turns\n")
    print(f"{'push + pull':24} | {'ms/step':>8} | {'worker CPU ms':>13} | {'GB/s':>6}")
    print("-" * 25 + "+" + "-" * 10 + "+" + "-" * 15 + "+" + "-" * 7)
    for (exact, buffers, in_place), loop in loops.items():
        name = f"{'exact' if exact else 'float'}, {'buffers' if buffers else 'copies'}" + \
            (", in place" if in_place else "")
        r = {"exact": exact, "buffers": buffers, "in_place": in_place,
             "median_ms": med_ms(loop.wall),
             "worker_cpu_ms": med_ms(loop.cpu), "steps": len(loop.wall),
             "gbs": round(a.mib * MIB / statistics.median(loop.wall) / 1e9, 3)}
        rows.append(r)
        print(f"{name:24} | {r['median_ms']:8.2f} | {r['worker_cpu_ms']:13.2f} | "
              f"{r['gbs']:6.2f}")
    by = {(r["exact"], r["buffers"], r["in_place"]): r for r in rows}
    for exact in (False, True):
        print(f"{'exact' if exact else 'float'}: buffers / copies = "
              f"{by[exact, True, False]['median_ms'] / by[exact, False, False]['median_ms']:.2f}"
              "x step time")
    result = {"name": "python_buffers", "machine": f"{os.cpu_count()} cpus", "mib": a.mib,
              "steps": a.steps, "reps": a.reps, "transport": transport, "loop": rows}
    if not a.no_example:
        print(f"\nexample (fashion_mnist_torch.py, 2 workers x 2 shards, {a.example_steps} "
              "steps), rank 0's median step, median over runs:")
        exr = {}
        for buffers in (False, True):
            runs = [r["step_ms_median"] for r in ex[buffers]]
            cpu = [r["step_cpu_ms_median"] for r in ex[buffers]]
            exr["buffers" if buffers else "copies"] = {
                "step_ms_median": round(statistics.median(runs), 2),
                "step_cpu_ms_median": round(statistics.median(cpu), 2),
                "runs_step_ms": [round(x, 2) for x in runs],
                "runs_step_cpu_ms": [round(x, 2) for x in cpu],
                "runs_epoch_s": [round(r["epoch_seconds"], 2) for r in ex[buffers]],
                "params_sha256": sorted({r["params_sha256"] for r in ex[buffers]}),
                "zero_copy": ex[buffers][0]["zero_copy"]}
            print(f"  {'buffers' if buffers else 'copies (default)':22} "
                  f"{statistics.median(runs):6.2f} ms, CPU {statistics.median(cpu):5.2f} ms  "
                  f"(runs {', '.join(f'{x:.2f}' for x in runs)})")
        b, c = exr["buffers"], exr["copies"]
        exr["ratio"] = round(b["step_ms_median"] / c["step_ms_median"], 3)
        exr["cpu_ratio"] = round(b["step_cpu_ms_median"] / c["step_cpu_ms_median"], 3)
        print(f"  buffers / copies = {exr['ratio']:.2f}x step time, {exr['cpu_ratio']:.2f}x CPU")
        result["example"] = exr
    f, c = by[False, True, False], by[False, False, False]
    result["headline"] = {"ours": f["median_ms"], "baseline": c["median_ms"],
                          "unit": f"ms per step (Client.step of {a.mib} MiB from Python, float, "
                                  f"1 worker x 2 shards, {transport}; baseline: private arrays)",
                          "ratio": round(f["median_ms"] / c["median_ms"], 3)}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(result, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
