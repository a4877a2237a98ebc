#!/usr/bin/python3
"""A user's own training script, as tests/integration/test_run.py and tests/deploy run it: a
small PyTorch model (not Tessera's built-in MLP) on a synthetic classification task, trained
through tessera.torch in exact mode.

It names no rank, worker count, master or job: tessera.torch.attach takes them from the
launcher's environment (tessera run, srun, a Kubernetes indexed Job, torchrun; by hand with
none of them: one process, master "local"). Each rank computes the share of every global
batch of each slot ps.slots() names (its own rank's; with --elastic, also a dead rank's
until it comes back), so the parameters are the same bits for any number of ranks and
whoever dies (exact mode); rank 0 prints them as `params_sha256 HEX` at the end, and one JSON
line with --json.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tessera
import tessera.torch

FEATURES, CLASSES = 24, 4


def data(seed, n):
    """n samples of CLASSES Gaussian blobs in FEATURES dimensions, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=g) * 0.4
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = centres[y] + torch.randn(n, FEATURES, generator=g)
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 32),
                                  nn.Tanh())
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.head(self.body(x))


def env_rank():
    """This process's rank as the launcher said (before attach, which reads the same)."""
    return tessera.launch_env()["rank"] or 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=48, help="global batch")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds to sleep in each step (to watch a job while it runs)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--metrics-port", type=int, default=None,
                    help="rank R serves its /metrics on this port + R (0: free ones)")
    ap.add_argument("--elastic", action="store_true",
                    help="the job outlives a dead rank (tessera run --respawn starts it again)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    model = Net()
    x, y = data(a.seed, 4096)
    ps = tessera.torch.attach(model, optimizer="momentum:lr=0.05,momentum=0.9",
                              batch=a.batch, exact=True, micro_batch=a.batch // 12,
                              elastic=a.elastic, metrics_port=None if a.metrics_port is None
                              else a.metrics_port and a.metrics_port + env_rank(),
                              # an elastic job starts from Tessera's initializers (he, zeros)
                              init=True if a.elastic else None)
    rank, workers = ps.rank, ps.workers
    if a.batch % (12 * workers):
        sys.exit("--batch %d: a multiple of 12 x the %d workers expected" % (a.batch, workers))
    share, micro = a.batch // workers, a.batch // 12
    t0 = time.monotonic()
    with ps:
        while ps.version <= a.steps:
            step = ps.version - 1
            total, slots = 0.0, ps.slots()
            # Each slot's micro-batches, summed in fixed point: the bits do not depend on the
            # split, nor on which rank computes a slot.
            for slot in slots:
                base = (step * a.batch) % (len(x) - a.batch) + slot * share
                for m in range(0, share, micro):
                    xb, yb = x[base + m:base + m + micro], y[base + m:base + m + micro]
                    loss = F.cross_entropy(model(xb), yb)
                    model.zero_grad()
                    loss.backward()
                    ps.accumulate(slot=slot)
                    total += loss.item() * len(yb)
            if a.step_sleep:
                time.sleep(a.step_sleep)
            try:
                ps.step(loss=total / (share * len(slots)))
            except tessera.Slots:   # a rank died or came back: ps.version's values, again
                continue
            if rank == 0 and ps.version % 20 == 1:
                with torch.no_grad():
                    acc = (model(x[:512]).argmax(1) == y[:512]).float().mean().item()
                ps.report(accuracy=acc)
                print("step %d loss %.4f accuracy %.3f" % (ps.version - 1, total / share, acc),
                      flush=True)
        fp = ps.params_sha256()
    if rank == 0:
        print("params_sha256 %s" % fp, flush=True)
        if a.json:
            print(json.dumps({"params_sha256": fp, "steps": a.steps, "workers": workers,
                              "seconds": round(time.monotonic() - t0, 3)}), flush=True)


if __name__ == "__main__":
    main()
