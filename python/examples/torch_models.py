#!/usr/bin/python3
"""torch_models.py - a user's own PyTorch models trained through Tessera or through DDP.

Three models, each as its author wrote it (torch's initialisation, torch's mean losses,
BatchNorm buffers, torch.optim's hyperparameters), one rank per process:

  cnn          a small CNN with BatchNorm on Fashion-MNIST (Debian's dataset-fashion-mnist);
               reports the test accuracy
  resnet18     torchvision's ResNet-18 (10 classes) on CIFAR-shaped synthetic images: noise
               around a per-class pattern, so the loss can fall
  transformer  a 2-layer causal transformer language model over the bytes of the GPL-3 text
               that Debian ships (/usr/share/common-licenses/GPL-3)

    # Tessera: a cluster (tessera up), then one process per rank
    torch_models.py --model cnn --master HOST:PORT --rank R --workers W --epochs 2
    # DDP on gloo: the same samples and start, torch.optim
    torch_models.py --model cnn --ddp HOST:PORT --rank R --workers W --epochs 2

Both ways start from the same weights (torch.manual_seed(--seed), then the model; attach
makes rank 0's the job's) and see the same samples: step k's global batch is split into
equal shares, rank r's the r-th. Every rank prints one JSON line at the end: its loss at step
0 and the mean of its first and last 10 steps (half the steps when fewer than 20), the test
accuracy (cnn), rank's median step time, the params_sha256 and a hash of the buffers.
"""
import argparse
import gzip
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import tessera
except ImportError:  # run from a source tree after `make`: use build/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "python"))
    import tessera

import numpy as np
import tessera.torch
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
TEXT = "/usr/share/common-licenses/GPL-3"


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(x.flatten(1))


class CharLM(nn.Module):
    """A causal transformer over bytes: embedding + learned positions, 2 encoder layers."""

    def __init__(self, seq=64, d=64):
        super().__init__()
        self.emb, self.pos = nn.Embedding(256, d), nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.out = nn.Linear(d, 256)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, x):
        return self.out(self.enc(self.emb(x) + self.pos[:x.shape[1]], mask=self.mask))


# ---- data: step k's global batch, and rank r's share of it ----

def fashion(train):
    stem = "train" if train else "t10k"
    try:
        with gzip.open(os.path.join(DATA, stem + "-images-idx3-ubyte.gz")) as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16)
        with gzip.open(os.path.join(DATA, stem + "-labels-idx1-ubyte.gz")) as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)
    except FileNotFoundError as e:
        raise SystemExit("%s: install Debian's dataset-fashion-mnist (make deps does)" % e)
    x = torch.from_numpy(x.reshape(-1, 1, 28, 28).astype(np.float32) / 255)
    return (x - 0.2860) / 0.3530, torch.from_numpy(y.astype(np.int64))


class Data:
    def __init__(self, a):
        self.a = a
        if a.model == "cnn":
            self.x, self.y = fashion(True)
            self.steps_per_epoch = len(self.x) // a.batch
        elif a.model == "resnet18":
            g = torch.Generator().manual_seed(1234)
            self.patterns = torch.randn(10, 3, 32, 32, generator=g)
            self.steps_per_epoch = 1 << 30
        else:
            with open(TEXT, "rb") as f:
                self.text = torch.from_numpy(np.frombuffer(f.read(), np.uint8).astype(np.int64))
            self.steps_per_epoch = 1 << 30

    def share(self, k, rank, workers):
        """Rank's samples of global step k: the rank-th of `workers` equal parts."""
        a, n = self.a, self.a.batch // workers
        lo, hi = rank * n, (rank + 1) * n
        if a.model == "cnn":
            e, s = divmod(k, self.steps_per_epoch)
            if getattr(self, "epoch", None) != e:   # the epoch's order, the same on every rank
                g = torch.Generator().manual_seed(a.seed + e)
                self.epoch, self.perm = e, torch.randperm(len(self.x), generator=g)
            idx = self.perm[s * a.batch:(s + 1) * a.batch][lo:hi]
            return self.x[idx], self.y[idx]
        g = torch.Generator().manual_seed(a.seed * 100003 + k)
        if a.model == "resnet18":
            y = torch.randint(0, 10, (a.batch,), generator=g)
            x = self.patterns[y] + 2.0 * torch.randn(a.batch, 3, 32, 32, generator=g)
            return x[lo:hi], y[lo:hi]
        at = torch.randint(0, len(self.text) - 65, (a.batch,), generator=g)
        seqs = torch.stack([self.text[i:i + 65] for i in at.tolist()])
        return seqs[lo:hi, :-1], seqs[lo:hi, 1:]


def model_of(a):
    torch.manual_seed(a.seed)
    if a.model == "cnn":
        return CNN()
    if a.model == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    return CharLM()


def loss_of(a, model, x, y):
    out = model(x)
    if a.model == "transformer":
        return F.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
    return F.cross_entropy(out, y)


def optimizer_spec(a):
    """The job's optimizer, as Tessera names it and as torch.optim makes it."""
    if a.model == "transformer":
        return ("adamw:lr=%r,weight_decay=0.01" % a.lr,
                lambda ps: torch.optim.AdamW(ps, lr=a.lr, weight_decay=0.01))
    return ("momentum:lr=%r,momentum=0.9" % a.lr,
            lambda ps: torch.optim.SGD(ps, lr=a.lr, momentum=0.9))


def accuracy(model):
    x, y = fashion(False)
    model.eval()
    with torch.no_grad():
        right = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                    for i in range(0, len(x), 1000))
    model.train()
    return right / len(x)


def buffers_sha256(model):
    h = hashlib.sha256()
    for name, b in model.named_buffers():
        h.update(name.encode() + b"\0" + b.detach().numpy().tobytes())
    return h.hexdigest()


def run(a):
    torch.set_num_threads(a.threads)
    data, model = Data(a), model_of(a)
    spec, make_opt = optimizer_spec(a)
    total = a.steps or a.epochs * data.steps_per_epoch
    if a.ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        host, port = a.ddp.rsplit(":", 1)
        dist.init_process_group("gloo", init_method="tcp://%s:%s" % (host, port),
                                rank=a.rank, world_size=a.workers)
        net = DDP(model)
        opt = make_opt(model.parameters())
        first_weights = None
    else:
        before = {k: v.clone() for k, v in model.state_dict().items()}
        ps = tessera.torch.attach(model, master=a.master, job=a.job, rank=a.rank,
                                  workers=a.workers, optimizer=spec, batch=a.batch,
                                  overlap=a.overlap, timeout_ms=600000)
        first_weights = all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        net, opt = model, ps.optimizer
    losses, times, opt_times = [], [], []
    for k in range(total):
        x, y = data.share(k, a.rank, a.workers)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(a, net, x, y)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
        opt_times.append(time.perf_counter() - t1)
        losses.append(float(loss))
        if a.progress and a.rank == 0 and (k + 1) % a.progress == 0:
            print("step %d/%d: loss %.4f, %.1f ms/step"
                  % (k + 1, total, np.mean(losses[-a.progress:]),
                     1e3 * np.median(times[-a.progress:])), file=sys.stderr, flush=True)
    if not a.ddp:
        ps.wait()
    w = max(1, min(10, total // 2))   # the windows of the first and last losses
    out = {"model": a.model, "mode": "ddp" if a.ddp else "tessera", "rank": a.rank,
           "workers": a.workers, "steps": total, "loss_0": losses[0],
           "loss_first": float(np.mean(losses[:w])),
           "loss_last": float(np.mean(losses[-w:])),
           "step_ms_median": 1e3 * float(np.median(times[len(times) // 5:])),
           # opt.step() alone: Tessera's push and pull; DDP's all-reduce is in backward.
           "opt_step_ms_median": 1e3 * float(np.median(opt_times[len(opt_times) // 5:])),
           "params_sha256": tessera.torch.params_sha256(model),
           "buffers_sha256": buffers_sha256(model), "starts_from_own_weights": first_weights}
    if a.model == "cnn" and a.rank == 0:
        out["test_accuracy"] = accuracy(model)
    if a.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()
    else:
        ps.close()
    print(json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="One rank per process; see the module doc.")
    p.add_argument("--model", choices=("cnn", "resnet18", "transformer"), default="cnn")
    p.add_argument("--master", help="a Tessera cluster's master (HOST:PORT)")
    p.add_argument("--ddp", metavar="HOST:PORT", help="train with DDP on gloo instead; rank 0 "
                   "listens here")
    p.add_argument("--job", default="models", help="the Tessera job id (default models)")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="the global batch (default 64)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="steps instead of epochs")
    p.add_argument("--lr", type=float, default=None,
                   help="default: 0.02 (cnn, resnet18), 0.003 (transformer)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--overlap", choices=("off", "bucket", "forward"), default="off",
                   help="tessera.torch's overlap (default off)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--progress", type=int, default=0, metavar="N",
                   help="rank 0 logs the loss every N steps")
    a = p.parse_args()
    if bool(a.master) == bool(a.ddp):
        p.error("give --master (Tessera) or --ddp (DDP on gloo)")
    if a.batch % a.workers:
        p.error("--batch %d does not split evenly over %d workers" % (a.batch, a.workers))
    if a.lr is None:
        a.lr = {"cnn": 0.02, "resnet18": 0.02, "transformer": 0.003}[a.model]
    a.overlap = False if a.overlap == "off" else a.overlap
    run(a)


if __name__ == "__main__":
    main()
