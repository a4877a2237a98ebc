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
``--optimizer``. Sparse tables go both ways: ``export`` writes each with its spec and its rows'
optimizer state in ``["tessera"]["tables"]``, ``import`` takes them back, and ``--table
NAME=KEY`` makes table NAME of a model's own embedding weight KEY (row i is id i).
``tessera up --store DIR --restore main`` then starts the job there, and
``tessera.torch.attach`` to it continues from those values (its ``ps.version`` is the step).
Files are read with ``torch.load(..., weights_only=True)``: tensors, numbers, strings and
dicts only, no code run; ``--trust-pickle`` lifts that for a file you made yourself.

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
#: A table's spec, as snapshot_read gives it and import takes it (ttl_seconds may be left
#: out: 0, as before it existed).
_SPEC_KEYS = ("dim", "max_id", "init", "seed", "optimizer", "ttl_steps")
_SPEC_OPTIONAL = {"ttl_seconds": 0}


class Snapshot:
    """One snapshot read whole: ``id``, ``step``, ``job`` (dict: id, workers, exact,
    optimizer, batch, micro_batch), ``message``, ``values`` {name: float32 array of its
    shape}, ``state`` {name: float32 array (state floats per element, *shape)}, empty for an
    optimizer without state or when read without it, ``updates`` {name: the optimizer's
    update count of that state, Adam's t so far}, for the tensors whose count it records, and
    ``tables`` {name: (ids, rows)} for its sparse tables: the ids of the rows it has (int64,
    ascending) and their values (float32, one row of the table's dimension per id), in the
    order of their table ids; ``table_specs`` {name: {"dim", "max_id", "init", "seed",
    "optimizer", "ttl_steps"}}, the spec the job registered each with; and, read with state,
    ``table_state`` {name: {"state": float32 (rows, state floats per value, dim) or None for
    sgd, "updates": each row's update count (int64; Adam's t), "steps": the step each row
    was last updated at (int64; a row lifetime counts from it)}}."""

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
        self.tables, self.table_specs, self.table_state = {}, {}, {}
        for t in raw.get("tables", ()):
            ids = np.frombuffer(t["ids"], np.uint64).astype(np.int64)   # ids < 2^63
            self.tables[t["name"]] = (ids, np.frombuffer(t["values"], np.float32).reshape(
                (len(ids), t["dim"])))
            self.table_specs[t["name"]] = {k: t[k] for k in _SPEC_KEYS + tuple(_SPEC_OPTIONAL)}
            if t["updates"] is not None:
                self.table_state[t["name"]] = {
                    "state": None if t["state"] is None else np.frombuffer(
                        t["state"], np.float32).reshape((len(ids), t["state_len"], t["dim"])),
                    "updates": np.frombuffer(t["updates"], np.int64),
                    "steps": np.frombuffer(t["steps"], np.int64)}

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
    tensor (ids, dim), "spec": {"dim", "max_id", "init", "seed", "optimizer", "ttl_steps"},
    "state": float32 tensor (ids, state floats per value, dim), absent for sgd, "updates"
    and "steps": int64 tensors (ids)}}, in table id order, which import takes back; or the
    model's state dict alone with ``model_only``, which a snapshot with tables refuses (a
    model's state dict has no place for them)."""
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
    tables = {}
    for name, (ids, rows) in snap.tables.items():
        e = {"ids": torch.from_numpy(ids.copy()), "rows": torch.from_numpy(rows.copy()),
             "spec": dict(snap.table_specs[name])}
        for k, v in snap.table_state.get(name, {}).items():
            if v is not None:
                e[k] = torch.from_numpy(v.copy())
        tables[name] = e
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


def _int64(what, t, n):
    """t (a tensor or array) as n int64s >= 0."""
    import torch
    a = torch.as_tensor(t).detach().cpu().to(torch.int64).contiguous().numpy().reshape(-1)
    if a.size != n or (n and int(a.min()) < 0):
        raise _tessera.InvalidArgument("%s: want %d integers >= 0, got %d%s" % (
            what, n, a.size, " with a negative one" if a.size == n else ""))
    return a


def _table(name, spec, ids, rows, state=None, updates=None, steps=None):
    """One table of an import, as _tessera.snapshot_import takes it."""
    missing = [k for k in _SPEC_KEYS if k not in spec]
    if missing:
        raise _tessera.InvalidArgument("table %r: its spec lacks %s" % (name, ", ".join(missing)))
    rows = _float32("table %s rows" % name, rows)
    if rows.ndim != 2 or rows.shape[1] != spec["dim"]:
        raise _tessera.InvalidArgument("table %r: rows of shape %s, want (ids, %d)" % (
            name, tuple(rows.shape), spec["dim"]))
    n = rows.shape[0]
    out = dict((k, spec[k]) for k in _SPEC_KEYS)
    out.update((k, spec.get(k, v)) for k, v in _SPEC_OPTIONAL.items())
    out.update(name=name, ids=_int64("table %s ids" % name, ids, n), values=rows,
               state=None if state is None else _float32("table %s state" % name, state),
               updates=None if updates is None else _int64("table %s updates" % name,
                                                           updates, n),
               steps=None if steps is None else _int64("table %s steps" % name, steps, n))
    return out


def import_state_dict(store, sd, job, batch, optimizer=None, workers=None, exact=False,
                      step=None, micro_batch=0, branch="main", tag=None, message=None,
                      tables=None, table_optimizer=None, table_init="normal:0.01",
                      table_seed=0):
    """Makes a snapshot of the state dict ``sd`` (a model's, or ps.state_dict()'s) in the
    store directory (created if missing) on ``branch``; returns its id. ``optimizer`` and
    ``workers`` default to the file's (ps.state_dict()'s "tessera" entry), else are required
    and 1; ``step`` to its version, else 1. The file's optimizer state is kept when it is of
    the same kind as ``optimizer`` (momentum's fits nesterov, adam's adamw); otherwise the
    optimizer starts fresh, which is said on stderr.

    Sparse tables: those of an exported file (``["tessera"]["tables"]``) come back with their
    spec, rows and row optimizer state. ``tables`` {table name: state dict key} makes tables
    of a model's own embedding weights (an ``nn.Embedding``/``nn.EmbeddingBag`` weight of
    shape (rows, dim): row i is id i, max_id rows - 1), taken out of the tensors, registered
    as ``tessera.torch.EmbeddingBag`` registers them: initializer ``table_init``, seed
    ``table_seed``, optimizer ``table_optimizer`` (None: the job's), a fresh optimizer state.
    A job's table handles are the order of registration: the file's tables come first, then
    ``tables``' in their order; register them in that order."""
    meta = {}
    if isinstance(sd, dict) and set(sd) == {"model", "tessera"}:
        meta, sd = sd["tessera"], sd["model"]
    specs = []
    for name, e in (meta.get("tables") or {}).items():
        if "spec" not in e:
            raise _tessera.InvalidArgument(
                "table %r: the file has its ids and rows but not its spec (it was exported "
                "before tables could be imported): export the snapshot again" % name)
        specs.append(_table(name, e["spec"], e["ids"], e["rows"], e.get("state"),
                            e.get("updates"), e.get("steps")))
    taken = set()
    for name, key in (tables or {}).items():
        if key not in sd:
            raise _tessera.InvalidArgument("tables: %r names %r, which the state dict does not "
                                           "hold" % (name, key))
        w = _float32(key, sd[key])
        if w.ndim != 2:
            raise _tessera.InvalidArgument("tables: %r is of shape %s; an embedding weight is "
                                           "(rows, dim)" % (key, tuple(w.shape)))
        specs.append(_table(name, {"dim": w.shape[1], "max_id": w.shape[0] - 1,
                                   "init": table_init, "seed": int(table_seed),
                                   "optimizer": table_optimizer, "ttl_steps": 0},
                            np.arange(w.shape[0]), w))
        taken.add(key)
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
        if name in taken:
            continue
        v = _float32(name, t)
        s = state.get(name)
        if s is not None:
            s = _float32(name + " (optimizer state)", s)   # the count is checked in C
        n = counts.get(name)
        tensors.append((name, v.shape, v, s, None if n is None else int(n)))
    if not tensors and not specs:
        raise _tessera.InvalidArgument("the state dict holds no tensors")
    return _tessera.snapshot_import(str(store), tensors, job=job, workers=int(workers),
                                    optimizer=optimizer, batch=float(batch), exact=bool(exact),
                                    step=int(step), micro_batch=int(micro_batch), branch=branch,
                                    tag=tag, message=message, tables=specs)


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
    i.add_argument("--table", action="append", default=[], metavar="NAME=KEY",
                   help="make table NAME of the model's embedding weight KEY (rows, dim): row "
                        "i is id i; repeat for more tables, in the order the job registers "
                        "them")
    i.add_argument("--table-optimizer", help="those tables' row optimizer, as the job "
                                             "registers them (default: the job's)")
    i.add_argument("--table-init", default="normal:0.01",
                   help="those tables' initializer (default normal:0.01, "
                        "tessera.torch.EmbeddingBag's)")
    i.add_argument("--table-seed", type=int, default=0, help="those tables' seed (default 0)")
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
            tables = {}
            for t in a.table:
                name, eq, key = t.partition("=")
                if not eq or not name or not key:
                    p.error("--table %s: want NAME=KEY (a table name and a state dict key)" % t)
                if name in tables:
                    p.error("--table %s: table %s is named twice" % (t, name))
                tables[name] = key
            sid = import_file(a.store, a.file, a.job, a.batch, a.trust_pickle,
                              optimizer=a.optimizer, workers=a.workers, exact=a.exact,
                              step=a.step, micro_batch=a.micro_batch, branch=a.branch,
                              tag=a.tag, message=a.message, tables=tables,
                              table_optimizer=a.table_optimizer, table_init=a.table_init,
                              table_seed=a.table_seed)
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
