#!/usr/bin/python3
"""ctr_torch.py - a DLRM-style CTR model in PyTorch whose embedding tables are Tessera tables.

The model and the data are those of the built-in CTR trainer (`tessera train --model ctr`,
services/worker/ctr.c; docs/embeddings.md, "The CTR trainer"):

  - F categorical features (--features, default 8), each through a tessera.torch.EmbeddingBag
    of --rows ids (default 10^5) and --dim floats (default 16), mode "sum" with bags of one id
    (offsets = arange), initialised normal:0.01 with the job's seed and updated on the shards
    by --table-optimizer (default adagrad:lr=0.05); the tables are emb0, emb1, ... as the C
    trainer names them;
  - the generator's 4 dense features beside the F x dim embedding values, into an MLP
    (F x dim + 4)-64-32-1 with ReLU (fc1, fc2, out, initialised he, he, xavier and zero biases
    from the seed, as lib/model/dlrm.c's) whose parameters go through
    tessera.torch.ParameterServer with --optimizer (default `tessera train`'s
    momentum:lr=0.02,momentum=0.9);
  - the loss is BCE with logits;
  - the data is lib/data/ctr.h's click log with a planted truth, drawn by tessera.ctr_samples
    with the same (seed, features, rows): the same samples as the C trainer.

The schedule is the C trainer's: step k is samples k*B .. k*B + B - 1, cut into micro-batches
of --micro; micro-batch j is computed by rank j % W. Every step each rank runs forward and
loss.backward() over its share (float: one pass, the loss averaged over its n samples; exact:
one pass per micro-batch, each micro-batch's dense gradient turned into int64 fixed point by
ps.accumulate), then every EmbeddingBag's push(local_batch=...) and ps.step(...). In exact mode
(--exact) the result does not depend on the worker or shard count.

--elastic (with a master; `tessera run --respawn` starts a killed rank again): the job
outlives a dead rank. Slot r is rank r's share of each step; a rank computes every slot
ps.slots() names (a dead rank's too, until it is back), each slot's passes followed by every
EmbeddingBag's push(slot=...), then ps.step(). A step that meets the slots changing hands
(tessera.Slots, from a table's pull or push or from ps.step()) is computed again from the step
ps.recover() names. The job has no assignment step (it starts from the initializers), so its
versions are the data steps; in exact mode it ends on the bits of a run where nothing died.

At the end rank 0 scores --eval-samples held-out samples (tessera.ctr_holdout(j)) and prints
their AUC and log-loss beside the planted model's own on the same samples
(tessera.ctr_optimum), the samples/s of the training loop, and params_sha256 in the C
trainer's format: SHA-256 of the lines "dense HEX" (tessera.torch.params_sha256 of the MLP)
and "table embF HEX" (each table's fingerprint).

--torch-only trains the identical model in this process with PyTorch alone:
torch.nn.EmbeddingBag(sparse=True) with torch.optim.Adagrad (or SGD) for the tables,
torch.optim.SGD with momentum for the MLP (the same initial MLP weights), the same samples
and steps, the whole global batch in one pass: the baseline of issue 46's speed goal.

    PYTHONPATH=build/python python3 python/examples/ctr_torch.py --steps 2000   # master local
    tessera up --shards 1 --replicas 1      # then, per rank:
    python3 python/examples/ctr_torch.py --master ADDR --rank 0 --workers 1 --steps 2000
    python3 python/examples/ctr_torch.py --torch-only --steps 2000
"""
import argparse
import hashlib
import json
import os
import sys
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

# lib/model/dlrm.c's initializers (biases: zeros, tessera.torch's default for 1-d tensors).
INIT = {"fc1.weight": "he", "fc2.weight": "he", "out.weight": "xavier"}
EVAL_CHUNK = 4096


class MLP(nn.Module):
    """(F x dim + D)-64-32-1 with ReLU: lib/model/dlrm.c's tensors, names and order."""

    def __init__(self, inputs):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 64)
        self.fc2 = nn.Linear(64, 32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x))))).squeeze(1)


class DLRM(nn.Module):
    """One EmbeddingBag per feature (bags of one id), concatenated with the dense features."""

    def __init__(self, embs, mlp):
        super().__init__()
        self.embs = nn.ModuleList(embs)
        self.mlp = mlp

    def forward(self, ids, dense):
        """ids: (n, F) int64 tensor; dense: (n, D) float32 tensor. Returns n logits."""
        n = ids.shape[0]
        offsets = torch.arange(n, dtype=torch.int64)
        cols = [emb(ids[:, f].contiguous(), offsets) for f, emb in enumerate(self.embs)]
        return self.mlp(torch.cat(cols + [dense], 1))


def draw(a, first, n):
    """Samples first .. first + n - 1 as tensors (ids, dense, label)."""
    s = tessera.ctr_samples(first, n, seed=a.seed, features=a.features, rows=a.rows)
    return (torch.from_numpy(s["ids"]), torch.from_numpy(s["dense"]),
            torch.from_numpy(s["label"]))


def my_micro_batches(a, k, rank, workers):
    """The first sample of each micro-batch of step k that rank computes (j % W == rank)."""
    return [k * a.batch + j * a.micro for j in range(rank, a.batch // a.micro, workers)]


def evaluate(a, model):
    """Held-out AUC and log-loss of model, and the planted optimum on the same samples."""
    p, y = [], []
    with torch.no_grad():
        for s in range(0, a.eval_samples, EVAL_CHUNK):
            ids, dense, label = draw(a, tessera.ctr_holdout(s),
                                     min(EVAL_CHUNK, a.eval_samples - s))
            p.append(torch.sigmoid(model(ids, dense)).numpy())
            y.append(label.numpy())
    p, y = np.ascontiguousarray(np.concatenate(p)), np.ascontiguousarray(np.concatenate(y))
    best = tessera.ctr_optimum(tessera.ctr_holdout(0), a.eval_samples, seed=a.seed,
                               features=a.features, rows=a.rows)
    return tessera.ctr_auc(p, y), tessera.ctr_logloss(p, y), best


def progress(rank, k, steps, loss):
    if rank == 0 and ((k + 1) % 100 == 0 or k + 1 == steps):
        print("step %d/%d: loss %.4f (rank 0's samples)" % (k + 1, steps, loss),
              file=sys.stderr, flush=True)


def train_step(a, k, rank, workers, model, mlp, embs, ps):
    """Step k of this rank: forward, backward, every table's push and the dense step.
    Returns (the summed loss, the samples)."""
    starts = my_micro_batches(a, k, rank, workers)
    loss_sum, n = 0.0, len(starts) * a.micro
    if a.exact:   # each micro-batch's gradient into fixed point, summed as integers
        for first in starts:
            ids, dense, label = draw(a, first, a.micro)
            mlp.zero_grad(set_to_none=True)
            loss = F.binary_cross_entropy_with_logits(model(ids, dense), label)
            loss.backward()
            ps.accumulate(local_batch=a.micro)
            loss_sum += float(loss) * a.micro
        for emb in embs:
            emb.push(local_batch=a.micro)
        ps.step()
    else:         # one pass over this rank's share
        if starts:
            parts = [draw(a, first, a.micro) for first in starts]
            ids, dense, label = (torch.cat([p[i] for p in parts]) for i in range(3))
            mlp.zero_grad(set_to_none=True)
            loss = F.binary_cross_entropy_with_logits(model(ids, dense), label)
            loss.backward()
            loss_sum = float(loss) * n
        for emb in embs:
            emb.push(local_batch=n)
        ps.step(local_batch=n)
    return loss_sum, n


def train_step_elastic(a, k, workers, model, mlp, embs, ps):
    """Step k of an elastic job: each slot this rank computes, its passes then its rows
    pushed as that slot, then the dense step of those slots. Returns (the summed loss, the
    samples)."""
    loss_sum, n = 0.0, 0
    for emb in embs:   # the step is the ParameterServer's (a rank may compute no slot)
        emb.step = k
    for slot in ps.slots():
        starts = my_micro_batches(a, k, slot, workers)
        passes = [[first] for first in starts] if a.exact else [starts] if starts else []
        for firsts in passes:   # exact: one pass per micro-batch; float: one for the slot
            parts = [draw(a, first, a.micro) for first in firsts]
            ids, dense, label = (torch.cat([p[i] for p in parts]) for i in range(3))
            mlp.zero_grad(set_to_none=True)
            loss = F.binary_cross_entropy_with_logits(model(ids, dense), label)
            loss.backward()
            ps.accumulate(local_batch=len(label), slot=slot)
            loss_sum += float(loss) * len(label)
            n += len(label)
        for emb in embs:
            emb.push(local_batch=a.micro if a.exact else len(starts) * a.micro, slot=slot)
    ps.step()
    return loss_sum, n


def run_tessera(a):
    """One rank of a Tessera job (the whole job with master "local")."""
    client = tessera.Client(master=a.master, job=a.job, rank=a.rank, workers=a.workers,
                            exact=a.exact, optimizer=a.optimizer, batch=a.batch,
                            elastic=a.elastic)
    rank, workers = client.rank, client.workers
    if a.batch // a.micro < workers:
        client.close()
        raise SystemExit("--batch %d / --micro %d gives %d micro-batches for %d workers"
                         % (a.batch, a.micro, a.batch // a.micro, workers))
    try:
        embs = [tessera.torch.EmbeddingBag(client, "emb%d" % f, a.rows, a.dim, mode="sum",
                                           init="normal:0.01", seed=a.seed,
                                           optimizer=a.table_optimizer)
                for f in range(a.features)]
        mlp = MLP(a.features * a.dim + 4)
        ps = tessera.torch.ParameterServer(mlp, client, seed=a.seed, init=INIT, rank=rank,
                                           workers=workers, batch=a.batch,
                                           optimizer=a.optimizer, elastic=a.elastic)
    except BaseException:
        client.close()
        raise
    model = DLRM(embs, mlp)
    rollbacks = reslots = 0
    with ps:
        if a.elastic:
            # No assignment step: version k is data step k's. A rank started again joins the
            # job at its newest step (the ParameterServer's join); each step sets the tables'.
            first = 0
        else:
            # The ParameterServer's first version (1) is the assignment of the MLP's weights:
            # the tables take an empty step with it, so that one version names the state of
            # both (a snapshot, a rollback's resume_step). Data step k is then version k + 1's.
            first = 1
            for emb in embs:
                while emb.step < ps.version:
                    emb.push(local_batch=0)   # nothing to push: no ids
        t0 = time.perf_counter()
        v = ps.version
        while v - first < a.steps:
            if a.sleep_ms:
                time.sleep(a.sleep_ms / 1000.0)
            try:
                if a.elastic:
                    loss_sum, n = train_step_elastic(a, v, workers, model, mlp, embs, ps)
                else:
                    loss_sum, n = train_step(a, v - 1, rank, workers, model, mlp, embs, ps)
            except tessera.Slots:
                # A rank died or came back (docs/embeddings.md, "Elastic jobs with tables"):
                # the step ps.recover() names, with the slots as they are now.
                v = ps.recover()
                for emb in embs:
                    emb.discard()
                reslots += 1
                continue
            except tessera.Rollback as e:
                # A shard went: the job is back at its last snapshot (docs/embeddings.md,
                # "When a shard goes"). Every table and the dense part go back with it.
                v = client.resume_step
                for emb in embs:
                    emb.step = v
                    emb.discard()
                ps.rolled_back()
                rollbacks += 1
                if rank == 0:
                    print("rollback: %s" % e, file=sys.stderr)
                continue
            progress(rank, v - first, a.steps, loss_sum / max(n, 1))
            v = ps.version if a.elastic else v + 1
        secs = time.perf_counter() - t0
        ps.wait()
        for emb in embs:   # elastic: the last step computed; the tables are one past it
            emb.step = ps.version
        if rank != 0:
            return None
        model.eval()
        auc, logloss, best = evaluate(a, model)
        h = hashlib.sha256(("dense %s\n" % tessera.torch.params_sha256(mlp)).encode())
        rows = 0
        for f, emb in enumerate(embs):
            h.update(("table emb%d %s\n" % (f, client.table_sha256(emb.table, emb.step)))
                     .encode())
            rows += client.table_rows(emb.table, emb.step)
        return {"mode": "tessera", "exact": a.exact, "workers": workers, "auc": auc,
                "logloss": logloss, "optimum_auc": best[0], "optimum_logloss": best[1],
                "table_rows": rows, "params_sha256": h.hexdigest(), "rollbacks": rollbacks,
                "reslots": reslots,
                "dense_sha256": tessera.torch.params_sha256(mlp), "transport": ps.transport}, \
            secs


def parse_opt(spec, what, kinds):
    """"name:k=v,..." -> (name, {k: float}); name one of kinds."""
    name, _, rest = spec.partition(":")
    opts = {}
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            raise SystemExit("%s %r: k=v options expected" % (what, spec))
        opts[k] = float(v)
    if name not in kinds:
        raise SystemExit("%s %r: --torch-only knows %s" % (what, spec, ", ".join(kinds)))
    return name, opts


def run_torch(a):
    """The same model, samples and steps with PyTorch alone, in this process."""
    torch.manual_seed(a.seed)
    embs = [nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True) for _ in range(a.features)]
    with torch.no_grad():
        for e in embs:
            e.weight.normal_(0, 0.01)
    mlp = tessera.torch.initialize(MLP(a.features * a.dim + 4), seed=a.seed, init=INIT)
    model = DLRM(embs, mlp)
    tname, topt = parse_opt(a.table_optimizer, "--table-optimizer", ("adagrad", "sgd"))
    dname, dopt = parse_opt(a.optimizer, "--optimizer", ("momentum", "sgd"))
    tparams = [e.weight for e in embs]
    if tname == "adagrad":
        topt_ = torch.optim.Adagrad(tparams, lr=topt.get("lr", 0.01), eps=topt.get("eps", 1e-10))
    else:
        topt_ = torch.optim.SGD(tparams, lr=topt.get("lr", 0.01))
    dopt_ = torch.optim.SGD(mlp.parameters(), lr=dopt.get("lr", 0.01),
                            momentum=dopt.get("momentum", 0.9 if dname == "momentum" else 0))
    t0 = time.perf_counter()
    for k in range(a.steps):
        ids, dense, label = draw(a, k * a.batch, a.batch)
        topt_.zero_grad(set_to_none=True)
        dopt_.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(model(ids, dense), label)
        loss.backward()
        topt_.step()
        dopt_.step()
        progress(0, k, a.steps, float(loss))
    secs = time.perf_counter() - t0
    model.eval()
    auc, logloss, best = evaluate(a, model)
    return {"mode": "torch", "exact": False, "workers": 1, "auc": auc, "logloss": logloss,
            "optimum_auc": best[0], "optimum_logloss": best[1],
            "dense_sha256": tessera.torch.params_sha256(mlp)}, secs


def parse_args(argv):
    env = tessera.launch_env()
    p = argparse.ArgumentParser(
        description="The built-in CTR trainer's DLRM-style model in PyTorch: one "
                    "tessera.torch.EmbeddingBag per feature, the MLP through "
                    "tessera.torch.ParameterServer, trained on lib/data/ctr.h's click log "
                    "(tessera.ctr_samples) with the C trainer's schedule; or with PyTorch "
                    "alone (--torch-only).",
        epilog="examples:  (no flags: master local)   |   --master 127.0.0.1:7070 --rank 0 "
               "--workers 2   |   --torch-only")
    p.add_argument("--master", default=env.get("master") or "local",
                   help="Tessera master host:port, or 'local' (the shards in this process); "
                   "default: the launcher's environment, else local (%(default)s)")
    p.add_argument("--job", default=env.get("job") or "ctr-torch",
                   help="job id (default %(default)s)")
    p.add_argument("--rank", type=int, default=env.get("rank") or 0,
                   help="this worker's rank (default %(default)s)")
    p.add_argument("--workers", type=int, default=env.get("workers") or 1,
                   help="workers, one process each (default %(default)s)")
    p.add_argument("--steps", type=int, default=1000, help="steps (default 1000)")
    p.add_argument("--batch", type=int, default=256, help="global batch (default 256)")
    p.add_argument("--micro", type=int, default=64, help="micro-batch; micro-batch j of a "
                   "step is rank j %% W's (default 64)")
    p.add_argument("--features", type=int, default=8, help="categorical features F, 1..64 "
                   "(default 8)")
    p.add_argument("--rows", type=int, default=100000, help="ids of each feature (default "
                   "100000)")
    p.add_argument("--dim", type=int, default=16, help="embedding dimension (default 16)")
    p.add_argument("--seed", type=int, default=1, help="data, tables and MLP seed (default 1)")
    p.add_argument("--table-optimizer", default="adagrad:lr=0.05",
                   help="the tables' optimizer (default %(default)s)")
    p.add_argument("--optimizer", default="momentum:lr=0.02,momentum=0.9",
                   help="the MLP's optimizer (default %(default)s, tessera train's)")
    p.add_argument("--exact", action="store_true", help="exact mode: fixed-point sums, the "
                   "same bits for any worker and shard count")
    p.add_argument("--eval-samples", type=int, default=20000,
                   help="held-out samples rank 0 scores at the end (default 20000)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the "
                   "C trainer)")
    p.add_argument("--torch-only", action="store_true", help="PyTorch alone in this process: "
                   "torch.nn.EmbeddingBag(sparse=True), Adagrad and SGD with momentum")
    p.add_argument("--elastic", action="store_true", help="the job outlives a dead rank: the "
                   "live ranks compute its slots until it is back (with a master)")
    p.add_argument("--json", action="store_true", help="print the result as a JSON line last")
    p.add_argument("--sleep-ms", type=int, default=0, help="testing: sleep MS before each "
                   "step (a slow worker, to kill a shard mid-run)")
    a = p.parse_args(argv)
    if a.batch < 1 or a.micro < 1 or a.batch % a.micro:
        p.error("--batch %d is not a positive multiple of --micro %d" % (a.batch, a.micro))
    if a.steps < 1 or a.dim < 1 or a.eval_samples < 2:
        p.error("--steps and --dim must be at least 1, --eval-samples at least 2")
    if not 1 <= a.features <= 64 or a.rows < 2:
        p.error("--features must be in 1..64, --rows at least 2")
    if a.workers < 1 or not 0 <= a.rank < a.workers:
        p.error("--rank must be in 0..--workers-1")
    if a.elastic and (a.master == "local" or a.torch_only):
        p.error("--elastic needs a master (--master, or tessera run's environment)")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    res = run_torch(a) if a.torch_only else run_tessera(a)
    if res is None:
        return
    out, secs = res
    out.update(steps=a.steps, batch=a.batch, micro=a.micro, eval_samples=a.eval_samples,
               seconds=secs, samples_per_s=a.steps * a.batch / secs if secs > 0 else 0.0)
    print("done: %d steps, held-out AUC %.4f (planted optimum %.4f), log-loss %.4f (optimum "
          "%.4f) on %d samples, %.0f samples/s, %s" % (
              a.steps, out["auc"], out["optimum_auc"], out["logloss"], out["optimum_logloss"],
              a.eval_samples, out["samples_per_s"],
              "torch only" if a.torch_only else "%s over %s" % (
                  "exact" if a.exact else "float", out["transport"])), flush=True)
    if not a.torch_only:
        print("table rows %d over %d tables\nparams_sha256 %s"
              % (out["table_rows"], a.features, out["params_sha256"]), flush=True)
    else:
        print("dense_sha256 %s" % out["dense_sha256"], flush=True)
    if a.json:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
