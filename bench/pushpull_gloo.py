#!/usr/bin/python3
"""pushpull_gloo.py - the baseline half of bench/pushpull: gloo all_reduce between processes.

Why: a data-parallel step either goes through a parameter server (push the gradient, pull the
parameters: what bench_pushpull times) or through an all-reduce of the gradient. The all-reduce
most people would reach for on CPUs is PyTorch's torch.distributed with the gloo backend, so its
figure on the same machine is the context in which ours make sense.

By default (what bench_pushpull runs) 2 ranks, each its own process (multiprocessing "spawn",
so no state is shared with this parent), meet through init_method tcp://127.0.0.1:PORT on
loopback (GLOO_SOCKET_IFNAME=lo); --world N and --addr/--ifname change the rank count and
where they meet. With --rank R this process is rank R alone (of --world N, meeting at
tcp://ADDR:PORT, --port required): bench/multihost.py starts one per emulated host, each in
its own network namespace, and rank 0's host holds the rendezvous at its address.
For each size S: a float32 tensor of S bytes, 2 warm-up all_reduce calls, then N timed ones.
Each iteration's time is the slowest rank's (the times are max-reduced at the end), the figure
is the median of those, and algbw = S / time in GB/s (1e9 B/s), the figure nccl-tests calls
algbw. One JSON line per size on stdout (rank 0's alone with --rank), keys in a fixed order,
compact separators:
    {"size_mib":64,"iters":10,"median_s":0.0412,"min_s":...,"max_s":...,"algbw_gbs":1.63}
With --rank, rank 0 also prints "ready SIZE_MIB" just before each size's timed calls (so the
caller can read the machine's CPU clocks there), and each result line goes on with
"cpu_s", the CPU seconds of every rank's process over the timed calls, summed (gloo's threads
included). Run with Debian's /usr/bin/python3 (python3-torch).
"""

import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    sys.exit(f"pushpull_gloo: {e}: install python3-torch (Debian) and run /usr/bin/python3")

MIB = 1 << 20


def free_port():
    """A port the kernel just handed out; rank 0 binds it again at once (a race we accept)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent(parent):
    """PR_SET_PDEATHSIG: bench_pushpull stops this script by pid; its ranks must follow."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(1)


def median(s):
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def run_rank(rank, parent, port, sizes, warmup, iters, queue, world=2, addr="127.0.0.1",
             ifname="lo", alone=False):
    """One rank: every size in turn; rank 0 puts one result dict per size on the queue (spawned
    ranks), or prints it (alone: this process is the rank, started by someone else)."""
    if not alone:
        die_with_parent(parent)
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world)
    try:
        for size_mib in sizes:
            x = torch.full((size_mib * MIB // 4,), 1e-3, dtype=torch.float32)
            for _ in range(warmup):
                dist.all_reduce(x)
            dist.barrier()
            if alone and rank == 0:
                print(f"ready {size_mib}", flush=True)
            ns, cpu0 = [], time.process_time()
            for _ in range(iters):
                t0 = time.perf_counter_ns()
                dist.all_reduce(x)
                ns.append(time.perf_counter_ns() - t0)
            cpu = time.process_time() - cpu0
            # Each iteration ends when the slowest rank's does: keep the largest of the times.
            t = torch.tensor(ns, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            c = torch.tensor([cpu], dtype=torch.float64)
            if alone:
                dist.all_reduce(c)
            if rank == 0:
                s = sorted(t.tolist())
                med = median(s)
                r = {"size_mib": size_mib, "iters": iters, "median_s": med / 1e9,
                     "min_s": s[0] / 1e9, "max_s": s[-1] / 1e9,
                     "algbw_gbs": size_mib * MIB / med}
                if alone:
                    r["cpu_s"] = c.item()
                    print(json.dumps(r, separators=(",", ":")), flush=True)
                else:
                    queue.put(r)
            del x
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="gloo all_reduce algbw: 2 ranks on loopback by "
                                             "default, or one rank of --world N (--rank)")
    ap.add_argument("--sizes", default="4,64,256", help="tensor sizes in MiB (default 4,64,256)")
    ap.add_argument("--iters", type=int, default=10, help="timed all_reduce calls (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    ap.add_argument("--world", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--addr", default="127.0.0.1",
                    help="rank 0's address, where the ranks meet (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0,
                    help="the rendezvous port (default: a free one; required with --rank)")
    ap.add_argument("--ifname", default="lo",
                    help="GLOO_SOCKET_IFNAME: the interface gloo's connections use (default lo)")
    ap.add_argument("--rank", type=int, default=-1,
                    help="run this rank alone in this process (another process runs each "
                         "other rank, with the same --world, --addr and --port)")
    a = ap.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        sys.exit(f"pushpull_gloo: --sizes {a.sizes!r}: want MiB, comma-separated (4,64,256)")
    if a.iters < 1 or a.warmup < 0 or not sizes or min(sizes) < 1:
        sys.exit("pushpull_gloo: --iters must be >= 1, --warmup >= 0, sizes >= 1 MiB")
    if a.world < 2 or a.rank >= a.world or (a.rank >= 0 and not 0 < a.port < 65536):
        sys.exit("pushpull_gloo: --world must be >= 2, --rank below it, and --rank needs "
                 "--port")

    if a.rank >= 0:
        run_rank(a.rank, 0, a.port, sizes, a.warmup, a.iters, None, a.world, a.addr, a.ifname,
                 alone=True)
        return
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = a.port or free_port()
    procs = [ctx.Process(target=run_rank,
                         args=(r, os.getpid(), port, sizes, a.warmup, a.iters, queue, a.world,
                               a.addr, a.ifname))
             for r in range(a.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        sys.exit(f"pushpull_gloo: a rank failed (exit codes {[p.exitcode for p in procs]}); "
                 "its traceback is above")
    for _ in sizes:
        print(json.dumps(queue.get(), separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
