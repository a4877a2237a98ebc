"""tessera.snapshot - snapshots and torch files, both ways, with no cluster running.

A snapshot (docs/snapshots.md) is the cluster's checkpoint: every tensor of a job at one step
and the shards' optimizer state, in a content-addressed store. This module reads one out as a
torch state dict and writes a torch state dict in as one::

    python3 -m tessera.snapshot export --store DIR main model.pt
    python3 -m tessera.snapshot import --store DIR model.pt --job mnist --batch 64

``export`` writes what ``ps.state_dict()`` returns (tessera.torch): ``{"model": {name:
tensor}, "tessera": {"version", "rank", "workers", "optimizer": {"spec", "state", "updates"},
"snapshot", "job"}}``, so ``model.load_state_dict(torch.load(f)["model"])`` loads the weights
into a plain torch model and ``ps.load_state_dict(torch.load(f))`` resumes a job with the
optimizer state too. ``--model-only`` writes the bare model state dict. Every tensor is
float32 in the snapshot and in the file (an integer buffer such as BatchNorm's
``num_batches_tracked`` comes back as a float32 of shape (1,); torch's load_state_dict copies
it into the model's int64 scalar).

``import`` makes a snapshot of a torch file, either a model's state dict or what
``ps.state_dict()`` (or ``export``) wrote, on a branch (default main, after its tip): every
tensor with initializer "assigned" at step ``--step`` (default: the file's version, else 1),
with the file's optimizer state (and its update counts, Adam's t) when it fits
``--optimizer``. ``tessera up --store DIR
--restore main`` then starts the job there, and ``tessera.torch.attach`` to it continues from
those values (its ``ps.version`` is the step). Files are read with ``torch.load(...,
weights_only=True)``: tensors, numbers, strings and dicts only, no code run; ``--trust-pickle``
lifts that for a file you made yourself.

The functions: ``read`` (NumPy, no torch needed), ``state_dict``, ``export``,
``import_state_dict`` and ``import_file``. Errors are tessera.Error (NOT_FOUND for an unknown
store or ref, INVALID_ARGUMENT naming the tensor or field, DATA_LOSS for a chunk that fails its
check).
"""
import argparse
import pickle
import sys

import numpy as np

from tessera import _tessera

#: Integers above this are not exact in float32.
_EXACT_INT = 1 << 24


class Snapshot:
    """One snapshot read whole: ``id``, ``step``, ``job`` (dict: id, workers, exact,
    optimizer, batch, micro_batch), ``message``, ``values`` {name: float32 array of its
    shape}, ``state`` {name: float32 array (state floats per element, *shape)}, empty for an
    optimizer without state or when read without it, ``updates`` {name: the optimizer's
    update count of that state, Adam's t so far}, for the tensors whose count it records, and
    ``tables`` {name: (ids, rows)} for its sparse tables: the ids of the rows it has (int64,
    ascending) and their values (float32, one row of the table's dimension per id)."""

    def __init__(self, raw):
        self.id, self.step, self.job = raw["id"], raw["step"], raw["job"]
        self.message = raw["message"]
        self.values, self.state, self.updates = {}, {}, {}
        for t in raw["tensors"]:
            shape = tuple(t["shape"])
            if t["updates"] is not None:
                self.updates[t["name"]] = t["updates"]
            self.values[t["name"]] = np.frombuffer(t["values"], np.float32).reshape(shape)
            if t["state"] is not None:
                self.state[t["name"]] = np.frombuffer(t["state"], np.float32).reshape(
                    (raw["state_len"],) + shape)
        self.tables = {}
        for t in raw.get("tables", ()):
            ids = np.frombuffer(t["ids"], np.uint64).astype(np.int64)   # ids < 2^63
            self.tables[t["name"]] = (ids, np.frombuffer(t["values"], np.float32).reshape(
                (len(ids), t["dim"])))

    def __repr__(self):
        return "<tessera snapshot %.12s: job %s step %d, %d tensors, %d tables>" % (
            self.id, self.job["id"], self.step, len(self.values), len(self.tables))


def read(store, ref="HEAD", state=True):
    """The snapshot ``ref`` (a branch, tag, id, unique id prefix or HEAD, with ``~N``) of the
    store directory ``store``, read whole and checked (tessera.Error otherwise)."""
    return Snapshot(_tessera.snapshot_read(str(store), str(ref), state))


def state_dict(store, ref="HEAD", model_only=False):
    """The snapshot as torch tensors: ps.state_dict()'s layout (see the module's doc), its
    sparse tables in ``["tessera"]["tables"]`` {name: {"ids": int64 tensor, "rows": float32
    tensor (ids, dim)}}; or the model's state dict alone with ``model_only``, which a snapshot
    with tables refuses (a model's state dict has no place for them)."""
    import collections
    import torch
    snap = read(store, ref, state=not model_only)
    model = collections.OrderedDict(
        (k, torch.from_numpy(v.copy())) for k, v in snap.values.items())
    if model_only and snap.tables:
        raise _tessera.InvalidArgument(
            "snapshot %.12s has sparse tables (%s), which a model's state dict cannot hold: "
            "export it without model_only (--model-only); they go in ['tessera']['tables'] "
            "as ids and rows" % (snap.id, ", ".join(sorted(snap.tables))))
    if model_only:
        return model
    tables = {name: {"ids": torch.from_numpy(ids.copy()), "rows": torch.from_numpy(rows.copy())}
              for name, (ids, rows) in snap.tables.items()}
    return {"model": model,
            "tessera": {"version": snap.step, "rank": 0, "workers": snap.job["workers"],
                        "optimizer": {"spec": snap.job["optimizer"],
                                      "state": {k: torch.from_numpy(v.copy())
                                                for k, v in snap.state.items()},
                                      "updates": dict(snap.updates)},
                        "snapshot": snap.id, "job": snap.job["id"], "tables": tables}}


def export(store, ref, path, model_only=False):
    """Writes snapshot ``ref`` to ``path`` with torch.save (see state_dict); returns what it
    wrote."""
    import torch
    sd = state_dict(store, ref, model_only)
    torch.save(sd, path)
    return sd


def _float32(name, t):
    """t (a torch tensor or array) as a contiguous float32 NumPy array, its shape kept (a
    scalar becomes (1,)); an integer one must be exact in float32."""
    import torch
    if not isinstance(t, (torch.Tensor, np.ndarray)):
        raise _tessera.InvalidArgument("%r: a %s, not a tensor; a snapshot holds tensors "
                                       "(leave it out of the state dict)"
                                       % (name, type(t).__name__))
    t = torch.as_tensor(t).detach().cpu()
    if t.is_complex():
        raise _tessera.InvalidArgument("tensor %r: complex values; a snapshot holds float32"
                                       % name)
    if t.numel() == 0:
        raise _tessera.InvalidArgument("tensor %r has no elements; a snapshot cannot hold it "
                                       "(leave it out of the state dict)" % name)
    if not t.is_floating_point() and int(t.to(torch.int64).abs().max()) >= _EXACT_INT:
        raise _tessera.InvalidArgument("tensor %r: integers of 2^24 or more are not exact in "
                                       "float32" % name)
    a = t.to(torch.float32).contiguous().numpy()
    return a.reshape(a.shape or (1,))


def import_state_dict(store, sd, job, batch, optimizer=None, workers=None, exact=False,
                      step=None, micro_batch=0, branch="main", tag=None, message=None):
    """Makes a snapshot of the state dict ``sd`` (a model's, or ps.state_dict()'s) in the
    store directory (created if missing) on ``branch``; returns its id. ``optimizer`` and
    ``workers`` default to the file's (ps.state_dict()'s "tessera" entry), else are required
    and 1; ``step`` to its version, else 1. The file's optimizer state is kept when it is of
    the same kind as ``optimizer`` (momentum's fits nesterov, adam's adamw); otherwise the
    optimizer starts fresh, which is said on stderr."""
    meta = {}
    if isinstance(sd, dict) and set(sd) == {"model", "tessera"}:
        meta, sd = sd["tessera"], sd["model"]
    if meta.get("tables"):
        raise _tessera.InvalidArgument(
            "the file holds sparse tables (%s): importing tables is not built; a snapshot "
            "made from its tensors alone would lose them" % ", ".join(sorted(meta["tables"])))
    opt = meta.get("optimizer") or {}
    optimizer = optimizer or opt.get("spec")
    if not optimizer:
        raise _tessera.InvalidArgument("optimizer: required (the file does not say which: a "
                                       "model's state dict), e.g. 'momentum:lr=0.05'")
    workers = workers or meta.get("workers") or 1
    step = step if step is not None else meta.get("version") or 1
    from tessera._state import STATE_LEN   # the rule ps.load_state_dict applies
    state, counts = opt.get("state") or {}, opt.get("updates") or {}
    if state and STATE_LEN.get(str(opt.get("spec", "")).partition(":")[0]) != \
            STATE_LEN.get(optimizer.partition(":")[0]):
        print("tessera.snapshot: the file's optimizer state is %r's, which %r cannot use: the "
              "optimizer starts fresh" % (opt.get("spec"), optimizer), file=sys.stderr)
        state, counts = {}, {}
    tensors = []
    for name, t in sd.items():
        v = _float32(name, t)
        s = state.get(name)
        if s is not None:
            s = _float32(name + " (optimizer state)", s)   # the count is checked in C
        n = counts.get(name)
        tensors.append((name, v.shape, v, s, None if n is None else int(n)))
    if not tensors:
        raise _tessera.InvalidArgument("the state dict holds no tensors")
    return _tessera.snapshot_import(str(store), tensors, job=job, workers=int(workers),
                                    optimizer=optimizer, batch=float(batch), exact=bool(exact),
                                    step=int(step), micro_batch=int(micro_batch), branch=branch,
                                    tag=tag, message=message)


def import_file(store, path, job, batch, trust_pickle=False, **kw):
    """import_state_dict of ``torch.load(path)``, with weights_only unless trust_pickle."""
    import torch
    sd = torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    kw.setdefault("message", "imported from %s" % path)
    return import_state_dict(store, sd, job, batch, **kw)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m tessera.snapshot",
        description="Snapshots and torch files, both ways (docs/python.md, \"Snapshots and "
                    "torch files\"). No cluster needed: these read and write the store's "
                    "directory.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{export,import}")
    e = sub.add_parser("export", help="a snapshot as a torch file (torch.save)",
                       description="Writes snapshot REF as ps.state_dict()'s layout: "
                                   "torch.load(FILE)['model'] loads into the model.")
    e.add_argument("ref", metavar="REF", help="branch, tag, id (or a prefix of 4+ hex "
                                              "digits) or HEAD, with ~N for N back")
    e.add_argument("file", metavar="FILE", help="the torch file to write")
    e.add_argument("--store", required=True, help="the snapshot store (tessera up --store)")
    e.add_argument("--model-only", action="store_true",
                   help="the model's state dict alone, no optimizer state")
    i = sub.add_parser("import", help="a torch file as a snapshot",
                       description="Makes a snapshot of a torch file (a model's state dict, "
                                   "or ps.state_dict()'s); restore it with tessera up "
                                   "--store DIR --restore BRANCH.")
    i.add_argument("file", metavar="FILE", help="the torch file to read")
    i.add_argument("--store", required=True, help="the snapshot store (created if missing)")
    i.add_argument("--job", required=True, help="the job the snapshot restores")
    i.add_argument("--batch", required=True, type=float, help="the job's global batch")
    i.add_argument("--optimizer", help="the job's optimizer, e.g. 'adamw:lr=0.001' "
                                       "(default: the file's)")
    i.add_argument("--workers", type=int, help="the job's workers (default: the file's, "
                                               "else 1)")
    i.add_argument("--exact", action="store_true", help="an exact-mode job")
    i.add_argument("--step", type=int, help="the step the job goes on from (default: the "
                                            "file's version, else 1)")
    i.add_argument("--micro-batch", type=int, default=0, help="the schedule's micro-batch")
    i.add_argument("--branch", default="main", help="the branch (default main)")
    i.add_argument("--tag", help="also tag the snapshot")
    i.add_argument("-m", dest="message", help="a message kept with the snapshot")
    i.add_argument("--trust-pickle", action="store_true",
                   help="UNSAFE: unpickle anything the file holds (runs its code); only for "
                        "a file you made")
    a = p.parse_args(argv)
    try:
        if a.cmd == "export":
            sd = export(a.store, a.ref, a.file, a.model_only)
            model = sd if a.model_only else sd["model"]
            tables = {} if a.model_only else sd["tessera"]["tables"]
            print("%s: %d tensors, %.1f MB%s%s" % (
                a.file, len(model), sum(t.numel() for t in model.values()) * 4 / 1e6,
                "".join(", table %s: %d rows" % (k, len(v["ids"]))
                        for k, v in sorted(tables.items())),
                "" if a.model_only else ", snapshot %.12s at step %d" % (
                    sd["tessera"]["snapshot"], sd["tessera"]["version"])))
        else:
            if a.trust_pickle:
                print("tessera.snapshot: --trust-pickle: %s may run code as it loads" % a.file,
                      file=sys.stderr)
            sid = import_file(a.store, a.file, a.job, a.batch, a.trust_pickle,
                              optimizer=a.optimizer, workers=a.workers, exact=a.exact,
                              step=a.step, micro_batch=a.micro_batch, branch=a.branch,
                              tag=a.tag, message=a.message)
            print(sid)
            print("restore it: tessera up --store %s --restore %s" % (a.store, sid[:12]),
                  file=sys.stderr)
    except _tessera.Error as err:
        print("tessera.snapshot %s: %s" % (a.cmd, err.message or err), file=sys.stderr)
        return 1
    except pickle.UnpicklingError as err:   # torch.load's weights_only refused something
        print("tessera.snapshot %s: %s holds more than tensors, numbers, strings and dicts "
              "(%s); import a plain state dict, or pass --trust-pickle for a file you made"
              % (a.cmd, a.file, str(err).splitlines()[0] if str(err) else "refused"),
              file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as err:   # torch.load / torch.save
        print("tessera.snapshot %s: %s" % (a.cmd, err), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
