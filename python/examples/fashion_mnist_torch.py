#!/usr/bin/python3
"""fashion_mnist_torch.py - a PyTorch MLP on Fashion-MNIST, through Tessera or through DDP.

The model is the built-in trainer's (lib/model/mlp.c): 784-256-128-10 with ReLU, softmax
cross-entropy, SGD with momentum over the mean gradient of a global batch. Both ways of
training see the same samples at every step and start from the same weights:

  - the schedule is lib/data's: epoch e is a Fisher-Yates permutation of the 60,000 training
    images drawn from (seed, e) with splitmix64; step k takes perm[k*B:(k+1)*B), cut into
    micro-batches of M, micro-batch j computed by rank j % W (docs/training.md);
  - the initial weights are the Tessera shards' ("he", "he", "xavier", zeros for biases, from
    the seed), which DDP gets from tessera.torch.initialize (no cluster needed).

Tessera (--local, or --master ADDR --rank R --workers W, one process per rank): each rank
pushes the gradient SUM of its micro-batches (loss_reduction="sum") and the shards divide by B
and apply the optimizer. In --exact mode every micro-batch's gradient is turned into int64 fixed point and
summed as integers, so the parameters are the same bits for any W and shard count.
DDP (--ddp --workers W): torch.distributed on gloo, W processes spawned here, each rank's loss
scaled by W/B so that DDP's averaging gives the same mean gradient, torch.optim.SGD.
--compare starts a Tessera cluster (tessera up), runs both, and prints a table; with --exact it
also runs the single-process exact run and checks that the parameter hashes are equal.

    PYTHONPATH=build/python python3 python/examples/fashion_mnist_torch.py --compare --exact

Every run prints the test accuracy after each epoch and, at the end, params_sha256: SHA-256 of
the parameters in named_parameters() order, in lib/tensor/fingerprint.c's format.
"""
import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

try:
    import tessera
except ImportError:  # run from a source tree after `make`: use build/python
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    import tessera

import numpy as np
import tessera.torch
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
# The built-in MLP's initializers (lib/model/mlp.c): he for fc1 and fc2 (ReLU follows),
# xavier for fc3, zeros for the biases (tessera.torch's default for 1-d parameters).
INIT = {"fc1.weight": "he", "fc2.weight": "he", "fc3.weight": "xavier"}
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


class MLP(nn.Module):
    """784-H-H/2-10 with ReLU; H = 256 (the default) is the built-in MLP."""

    def __init__(self, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden // 2)
        self.fc3 = nn.Linear(hidden // 2, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


# ---- data and schedule (lib/data) ----

def load_idx(path, magic, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if int.from_bytes(raw[:4], "big") != magic:
        raise SystemExit("%s: not an IDX file (magic %d)" % (path, int.from_bytes(raw[:4], "big")))
    return np.frombuffer(raw, np.uint8, offset=header)


def load(data_dir, train):
    """(images as float32 [n, 784] = byte / 255, labels as int64 [n]) of one split."""
    stem = "train" if train else "t10k"
    try:
        x = load_idx(os.path.join(data_dir, stem + "-images-idx3-ubyte.gz"), 2051, 16)
        y = load_idx(os.path.join(data_dir, stem + "-labels-idx1-ubyte.gz"), 2049, 8)
    except FileNotFoundError as e:
        raise SystemExit("%s: install Debian's dataset-fashion-mnist (make deps does)" % e)
    x = x.reshape(-1, 784).astype(np.float32) / np.float32(255)
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def permutation(seed, epoch, n):
    """lib/data/schedule.c's ts_schedule_perm: Fisher-Yates on splitmix64, Lemire's bounded
    draws with rejection. The same bits as the C code, so `tessera train` sees these samples."""
    st = mix64((seed ^ mix64((epoch + GOLDEN) & MASK)) & MASK)
    perm = list(range(n))
    for i in range(n, 1, -1):
        st = (st + GOLDEN) & MASK
        m = (mix64(st) >> 32) * i
        low = m & 0xFFFFFFFF
        if low < i:
            reject = (1 << 32) % i
            while low < reject:
                st = (st + GOLDEN) & MASK
                m = (mix64(st) >> 32) * i
                low = m & 0xFFFFFFFF
        j = m >> 32
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return torch.tensor(perm, dtype=torch.int64)


def my_micro_batches(perm, k, a, rank, workers):
    """The sample indices of each micro-batch of step k that rank computes (j % W == rank)."""
    base = k * a.batch
    return [perm[base + j * a.micro: base + (j + 1) * a.micro]
            for j in range(rank, a.batch // a.micro, workers)]


def accuracy(model, x, y):
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum())
                      for i in range(0, len(x), 2000))
    return correct / len(x)


# ---- one training process ----

def train(a, rank, workers, step_fn, model, sync=None):
    """The loop both ways share: step_fn(micro_batches) computes and applies one step and
    returns the summed loss of this rank's samples; sync() (if any) makes the parameters
    current before they are hashed. Rank 0 reports; returns its result."""
    xtr, ytr = load(a.data, True)
    xte, yte = load(a.data, False) if rank == 0 else (None, None)
    spe = len(xtr) // a.batch
    total = a.steps or a.epochs * spe
    epoch_times, step_times, step_cpu, loss_sum, seen, t_epoch = [], [], [], 0.0, 0, 0.0
    perm = None
    for s in range(total):
        k = s % spe
        if k == 0:
            perm = permutation(a.seed, s // spe, len(xtr))
        t0, c0 = time.perf_counter(), time.process_time()
        mbs = [(xtr[i], ytr[i]) for i in my_micro_batches(perm, k, a, rank, workers)]
        loss_sum += step_fn(mbs)
        step_times.append(time.perf_counter() - t0)
        step_cpu.append(time.process_time() - c0)
        t_epoch += step_times[-1]
        seen += sum(len(y) for _, y in mbs)
        if k == spe - 1 or s + 1 == total:
            epoch_times.append(t_epoch * spe / (k + 1))   # a partial epoch: scaled up
            if rank == 0:
                print("epoch %d step %d/%d: loss %.4f, test accuracy %.4f, %.1f s/epoch"
                      % (s // spe + 1, s + 1, total, loss_sum / max(seen, 1),
                         accuracy(model, xte, yte), epoch_times[-1]), flush=True)
            loss_sum, seen, t_epoch = 0.0, 0, 0.0
    if sync:
        sync()
    if rank != 0:
        return None
    return {"test_accuracy": accuracy(model, xte, yte),
            "params_sha256": tessera.torch.params_sha256(model), "steps": total,
            "epoch_seconds": sum(epoch_times) / len(epoch_times), "workers": workers,
            # The median step and its CPU time in this process, less swayed than the mean
            # by another load on the machine.
            "step_ms_median": sorted(step_times)[len(step_times) // 2] * 1e3,
            "step_cpu_ms_median": sorted(step_cpu)[len(step_cpu) // 2] * 1e3}


def run_tessera(a):
    """One Tessera worker (or the whole job with --local)."""
    torch.manual_seed(a.seed)
    model = MLP(a.hidden)
    rank, workers = (0, 1) if a.local else (a.rank, a.workers)
    ps = tessera.torch.attach(model, master="local" if a.local else a.master, job=a.job,
                              rank=rank, workers=workers, exact=a.exact, batch=a.batch,
                              optimizer="momentum:lr=%r,momentum=%r" % (a.lr, a.momentum),
                              seed=a.seed, init=INIT, data_seed=a.seed, micro_batch=a.micro,
                              loss_reduction="sum",   # the losses below are sums
                              partition_bytes=a.partition_kb * 1024, buffers=a.buffers,
                              overlap={None: False, "on": True}.get(a.overlap, a.overlap),
                              bucket_bytes=a.bucket_kb * 1024
                              if a.bucket_kb >= 0 else None)

    def step(mbs):
        total = 0.0
        model.zero_grad(set_to_none=True)
        if a.exact:   # each micro-batch's gradient into fixed point, summed as integers
            for j, (x, y) in enumerate(mbs):
                model.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x), y, reduction="sum")
                if a.overlap and j == len(mbs) - 1:
                    loss.backward()   # the last micro-batch's backward pushes the sums
                else:
                    with ps.no_sync() if a.overlap else contextlib.nullcontext():
                        loss.backward()
                    ps.accumulate()
                total += float(loss)
        elif mbs:     # float: one pass over this rank's share, the gradient SUM
            x, y = torch.cat([m[0] for m in mbs]), torch.cat([m[1] for m in mbs])
            loss = F.cross_entropy(model(x), y, reduction="sum")
            loss.backward()
            total = float(loss)
        ps.step()
        return total

    with ps:
        out = train(a, rank, workers, step, model, sync=ps.wait)
        if out:
            out.update(mode="tessera", exact=a.exact, transport=ps.transport,
                       zero_copy=list(ps.zero_copy), overlap=a.overlap, hidden=a.hidden)
    return out


class TesseraSGD:
    """lib/tensor/optim.c's momentum in torch ops: v = mu * v + g; p -= lr * v, every product
    rounded before the sum. torch.optim.SGD has the same formula but computes p + (-lr) * v as
    one fused multiply-add (torch 1.13's AVX2 kernels), which rounds once: the two differ in the
    last bit of some updates, and then drift apart as any two float runs do."""

    def __init__(self, params, lr, momentum):
        self.params, self.lr, self.mu = list(params), lr, momentum
        self.bufs = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p, v in zip(self.params, self.bufs):
            v.mul_(self.mu).add_(p.grad)
            p.sub_(v * self.lr)


def run_ddp_rank(a):
    """One DDP rank: gloo, the same micro-batches as Tessera's rank, torch.optim.SGD."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, workers = a.ddp_rank, a.workers
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (a.ddp_addr, a.ddp_port),
                            rank=rank, world_size=workers)
    model = tessera.torch.initialize(MLP(a.hidden), seed=a.seed, init=INIT)
    ddp = DDP(model)
    if a.ddp_sgd == "torch":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    else:
        opt = TesseraSGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    scale = workers / a.batch   # DDP averages over ranks: this gives the global-batch mean

    def step(mbs):
        opt.zero_grad(set_to_none=True)
        if mbs:
            x, y = torch.cat([m[0] for m in mbs]), torch.cat([m[1] for m in mbs])
        else:         # a rank without a micro-batch still joins the allreduce, with zeros
            x, y = torch.zeros(0, 784), torch.zeros(0, dtype=torch.int64)
        loss = F.cross_entropy(ddp(x), y, reduction="sum")
        (loss * scale).backward()
        opt.step()
        return float(loss)

    out = train(a, rank, workers, step, model)
    dist.destroy_process_group()
    if out:
        out.update(mode="ddp", exact=False, transport="gloo", hidden=a.hidden)
    return out


# ---- launching processes ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def common_args(a):
    return ["--epochs", str(a.epochs), "--steps", str(a.steps), "--batch", str(a.batch),
            "--micro", str(a.micro), "--lr", repr(a.lr), "--momentum", repr(a.momentum),
            "--seed", str(a.seed), "--data", a.data, "--threads", str(a.threads),
            "--partition-kb", str(a.partition_kb), "--ddp-sgd", a.ddp_sgd,
            "--hidden", str(a.hidden), "--bucket-kb", str(a.bucket_kb)] + \
        (["--buffers"] if a.buffers else [])


def run_ranks(argvs, label):
    """Runs one process per argv; relays rank 0's progress, returns its JSON result."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
               TESSERA_LOG=os.environ.get("TESSERA_LOG", "warn"))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv + ["--json"],
                              stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, env=env, text=True)
             for i, argv in enumerate(argvs)]
    result = None
    try:
        for line in procs[0].stdout:
            if line.startswith("{"):
                result = json.loads(line)
            elif line.startswith("epoch"):
                print("  %s: %s" % (label, line.rstrip()), flush=True)
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(codes) or result is None:
        raise SystemExit("%s: ranks exited %s" % (label, codes))
    return result


def run_ddp(a):
    port = free_port()
    return run_ranks([common_args(a) + ["--ddp", "--workers", str(a.workers), "--ddp-rank",
                                        str(r), "--ddp-port", str(port)]
                      for r in range(a.workers)], "ddp")


class Cluster:
    """`tessera up` on a free port: a master and shards, stopped with SIGTERM."""

    def __init__(self, bin_dir, shards):
        self.dir = tempfile.mkdtemp(prefix="fmnist-torch.")
        exe = os.path.join(bin_dir, "tessera")
        if not os.access(exe, os.X_OK):
            raise SystemExit("%s: not found; build first (make), or give --tessera-bin" % exe)
        self.p = subprocess.Popen([exe, "up", "--shards", str(shards), "--master-port", "0",
                                   "--dir", self.dir], stdout=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addr = None
        for line in self.p.stdout:
            m = re.match(r"master (\S+)", line)
            self.addr = m.group(1) if m else self.addr
            if "shards alive" in line:
                break
        if not self.addr or self.p.poll() is not None:
            self.stop(keep_logs=True)
            raise SystemExit("tessera up did not start (logs in %s)" % self.dir)

    def stop(self, keep_logs=False):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.p.stdout.close()
        if keep_logs:
            print("cluster logs kept in %s" % self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def run_cluster_job(a, cluster, job, overlap):
    return run_ranks([common_args(a) + ["--master", cluster.addr, "--job", job, "--rank",
                                        str(r), "--workers", str(a.workers)] +
                      (["--exact"] if a.exact else []) +
                      (["--overlap", overlap] if overlap else [])
                      for r in range(a.workers)],
                     "tessera" + (" overlap " + overlap if overlap else ""))


def compare(a):
    rows = []
    cluster, ok = Cluster(a.tessera_bin, a.shards), False
    try:
        print("cluster: %s, %d shards" % (cluster.addr, a.shards), flush=True)
        mode = "exact" if a.exact else "float"
        for overlap in [None] + a.compare_overlap:   # the same cluster, one job each
            rows.append(("tessera %s%s, %d shards" % (mode, " ov. " + overlap if overlap else "",
                                                     a.shards),
                         run_cluster_job(a, cluster, "fmnist-torch-%d-%s%s" % (
                             os.getpid(), mode, "-" + overlap if overlap else ""), overlap)))
        ok = True
    finally:
        cluster.stop(keep_logs=not ok)
    rows.append(("torch DDP (gloo)", run_ddp(a)))
    if a.exact:
        rows.append(("tessera exact, local", run_ranks([common_args(a) + ["--local",
                                                                          "--exact"]], "local")))
    print("\n%-34s %7s %9s %9s %8s  %s" % ("run", "workers", "test acc", "s/epoch", "ms/step",
                                          "params_sha256"))
    for name, r in rows:
        print("%-34s %7d %9.4f %9.2f %8.2f  %s" % (name, r["workers"], r["test_accuracy"],
                                                   r["epoch_seconds"], r["step_ms_median"],
                                                   r["params_sha256"][:16]))
    nov = len(a.compare_overlap)
    plain, overs, ddp = rows[0][1], dict(zip(a.compare_overlap, (r for _, r in rows[1:]))), \
        rows[1 + nov][1]
    default = tessera.torch.DEFAULT_OVERLAP
    over = overs.get(default) or plain
    diff = plain["test_accuracy"] - ddp["test_accuracy"]
    print("accuracy, tessera - ddp: %+.4f%s" % (
        diff, "; the same parameter bits" if plain["params_sha256"] == ddp["params_sha256"]
        else ""))
    # Overlap changes when bytes move, not what they are: the same bits, float or exact.
    same_overlap = all(plain["params_sha256"] == o["params_sha256"] for o in overs.values())
    for m, o in overs.items():
        print("overlap %s: %s parameters as without; median step %.2f ms against %.2f ms "
              "without and DDP's %.2f ms (%.2fx DDP's)" % (
                  m, "the same" if o["params_sha256"] == plain["params_sha256"] else
                  "DIFFERENT", o["step_ms_median"], plain["step_ms_median"],
                  ddp["step_ms_median"], o["step_ms_median"] / ddp["step_ms_median"]))
    ratio = over["step_ms_median"] / ddp["step_ms_median"]
    summary = {"tessera": plain, "tessera_overlap": overs, "ddp": ddp, "accuracy_diff": diff,
               "overlap_equal": same_overlap,
               "headline": {"ours": round(over["step_ms_median"], 3),
                            "baseline": round(ddp["step_ms_median"], 3),
                            "unit": "ms per step (rank 0's median), Tessera with overlap=True "
                                    "(%s) against DDP on gloo, %d workers" % (
                                        default if default in overs else "off", a.workers),
                            "ratio": round(ratio, 3)}}
    if a.exact:
        local = rows[2 + nov][1]
        summary["local"] = local
        same = plain["params_sha256"] == local["params_sha256"]
        print("exact: %d workers x %d shards %s the single-process run, bit for bit"
              % (a.workers, a.shards, "EQUALS" if same else "DIFFERS FROM"))
        summary["exact_equal"] = same
    if a.json:
        print(json.dumps(summary))
    if not same_overlap or (a.exact and not summary["exact_equal"]):
        sys.exit(1)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="The MLP 784-256-128-10 on Fashion-MNIST with PyTorch, trained through "
                    "Tessera or through torch.distributed DDP (same samples per step, same "
                    "initial weights).",
        epilog="examples:  --local   |   --master 127.0.0.1:7070 --rank 0 --workers 2   |   "
               "--ddp --workers 2   |   --compare [--exact]")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--local", action="store_true", help="Tessera in this process, 1 worker")
    how.add_argument("--master", metavar="ADDR", help="Tessera master host:port (this process "
                     "is one worker: give --rank and --workers, start every rank)")
    how.add_argument("--ddp", action="store_true", help="torch.distributed DDP on gloo: spawns "
                     "--workers processes")
    how.add_argument("--compare", action="store_true", help="start a cluster (tessera up), run "
                     "Tessera and DDP with --workers each, print a table")
    p.add_argument("--rank", type=int, default=0, help="this worker's rank (with --master)")
    p.add_argument("--workers", type=int, default=2, help="workers / DDP ranks (default 2)")
    p.add_argument("--exact", action="store_true", help="Tessera exact mode (fixed-point sums)"
                   "; with --compare also a single-process exact run, hashes checked equal")
    p.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps instead")
    p.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    p.add_argument("--micro", type=int, default=16, help="micro-batch (default 16)")
    p.add_argument("--lr", type=float, default=0.03, help="learning rate over the mean gradient "
                   "of the global batch (default 0.03)")
    p.add_argument("--momentum", type=float, default=0.9, help="momentum (default 0.9)")
    p.add_argument("--seed", type=int, default=1, help="schedule and initial weights (default 1)")
    p.add_argument("--job", default="fmnist-torch", help="Tessera job id (with --master)")
    p.add_argument("--shards", type=int, default=2, help="shards --compare starts (default 2)")
    p.add_argument("--partition-kb", type=int, default=0,
                   help="Tessera partition size in KiB (default 0: the SDK's 4 MiB)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default "
                   "1: deterministic gradients, and W processes share the cores)")
    p.add_argument("--data", default=DATA, help="Fashion-MNIST directory (default %s)" % DATA)
    p.add_argument("--tessera-bin", default=os.environ.get("TESSERA_BIN") or
                   os.path.join(REPO, "build", "bin"), help="where `tessera` is (--compare)")
    p.add_argument("--ddp-sgd", choices=("torch", "tessera"), default="torch",
                   help="DDP's optimizer: torch.optim.SGD (default), or the same momentum "
                   "update rounded as Tessera's shards round it (then 2 DDP ranks and 2 Tessera "
                   "workers give the same bits in float mode)")
    p.add_argument("--buffers", action="store_true",
                   help="Tessera: parameters and gradients in the SDK's zero-copy buffers "
                   "(tessera.torch's buffers=True; parameters become read-only) instead of "
                   "private arrays copied by each push and pull")
    p.add_argument("--overlap", nargs="?", const="on", choices=("on", "forward", "bucket"),
                   help="Tessera: push each bucket of gradients during backward (tessera.torch's "
                   "overlap): 'forward' pulls in forward order during the next forward, "
                   "'bucket' pulls each bucket with its push, 'on' (alone) is overlap=True")
    p.add_argument("--compare-overlap", default="forward,bucket",
                   help="--compare: the overlap modes run besides Tessera without overlap, "
                   "comma-separated (default forward,bucket; 'none': none)")
    p.add_argument("--bucket-kb", type=int, default=-1,
                   help="overlap: KiB of gradients per bucket (default -1: tessera.torch's "
                   "DEFAULT_BUCKET_BYTES; 0: one bucket per parameter)")
    p.add_argument("--hidden", type=int, default=256,
                   help="the MLP's first hidden width H: 784-H-H/2-10 (default 256, the "
                   "built-in MLP; wider makes the step's compute and bytes bigger)")
    p.add_argument("--json", action="store_true", help="print the result as a JSON line last")
    p.add_argument("--ddp-addr", default="127.0.0.1",
                   help="DDP: the address rank 0 listens on for the others (default 127.0.0.1)")
    p.add_argument("--ddp-rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--ddp-port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.batch % a.micro:
        p.error("--batch %d is not a multiple of --micro %d" % (a.batch, a.micro))
    if a.workers < 1 or (a.master and not 0 <= a.rank < a.workers):
        p.error("--rank must be in 0..--workers-1")
    a.compare_overlap = [] if a.compare_overlap == "none" else a.compare_overlap.split(",")
    for m in a.compare_overlap:
        if m not in ("forward", "bucket"):
            p.error("--compare-overlap: 'forward', 'bucket' or 'none' expected, got %r" % m)
    if a.hidden < 2:
        p.error("--hidden %d: want at least 2 (the second layer is H/2 wide)" % a.hidden)
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.compare:
        return compare(a)
    if a.ddp and a.ddp_rank < 0:
        out = run_ddp(a)
    elif a.ddp:
        out = run_ddp_rank(a)
    else:
        out = run_tessera(a)
    if out:
        print("done: %d steps, test accuracy %.4f, %.2f s/epoch\nparams_sha256 %s"
              % (out["steps"], out["test_accuracy"], out["epoch_seconds"],
                 out["params_sha256"]), flush=True)
        if a.json:
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
