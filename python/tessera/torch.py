"""tessera.torch - train a torch.nn.Module through a Tessera cluster.

A DDP training loop changes by about three lines: attach the model, drop the optimizer, and
call ``ps.step()`` after the backward pass::

    ps = tessera.torch.attach(model, master="127.0.0.1:7070", job="mnist", rank=r, workers=W,
                              optimizer="momentum:lr=0.03", batch=64)
    for x, y in my_share_of_each_global_batch:        # batch / W samples on each rank
        loss = F.cross_entropy(model(x), y)            # torch's default: the mean
        model.zero_grad()
        loss.backward()
        ps.step()          # push every p.grad, pull the new parameters into p

The model's state is the starting point, as with DDP's broadcast at wrap time: ``attach``
registers every parameter (and, by default, every buffer: BatchNorm's running statistics) and
makes the job's first step an assignment of rank 0's current values (lib/ps/part.h,
"Assignments"), which every rank then pulls. So a model loaded with ``load_state_dict`` before
attach, a pretrained one, or a seeded torch initialisation is what trains, and every rank
starts from the same bits (rank 0's). The fresh job is then at ``ps.version`` 1. ``init=``
asks for Tessera's own initializers instead ("he", "xavier", "normal:0.01", ..., see
``initialize``); a job restored from a snapshot continues at its version, pulling its values.

The loss: ``loss_reduction="mean"`` (the default, torch's convention) takes the gradient of a
loss averaged over this rank's samples and multiplies it by the rank's share of the global
batch (``batch / workers``, or ``step(local_batch=n)``) before pushing, so that the shards'
division by ``batch`` gives the mean over the global batch, DDP's gradient. A loss summed
over the samples needs ``loss_reduction="sum"``: the gradient is pushed as it is (the SDK's
contract). A sum pushed under "mean" would multiply the learning rate by the share: the
module cannot tell the two apart, so the choice is the trainer's to state.

Parameters with ``requires_grad=False`` are registered and assigned like the others but never
updated: each step pushes them as an assignment without values, so weight decay and momentum
do not move them (bitwise unchanged). Buffers (``broadcast_buffers=True``, DDP's default):
each step, rank 0's buffers are assigned and every rank pulls them, so all ranks hold rank
0's running statistics after every step (DDP broadcasts them before each forward); integer
buffers (``num_batches_tracked``) travel as float32, exact below 2^24.

Load and save: ``ps.load_state_dict(sd)`` (and the model's own ``load_state_dict``, and every
submodule's, which attach wraps) writes new values to the shards as one assignment step that
every rank takes part in and then pulls; rank 0's ``sd`` is the one used. ``ps.state_dict()``
returns ``{"model": model.state_dict(), "tessera": {...}}`` for ``torch.save``, the shards'
optimizer state and its update count (Adam's step) included, which ``ps.load_state_dict``
assigns back: a resume after ``attach`` continues on the same bits (SGD, momentum, Nesterov,
Adam, AdamW).

Exact mode (``exact=True``): gradients travel as int64 fixed point, so the parameters are the
same bits for any worker and shard count. Compute the rank's share in micro-batches and call
``ps.accumulate()`` after each micro-batch's backward (it adds fixed(p.grad) into an int64 sum:
the order of the micro-batches no longer matters), then ``ps.step()``. With
``loss_reduction="mean"`` each micro-batch's gradient is multiplied by its size:
``accumulate(local_batch=m)``, or ``micro_batch=m`` at attach. ``accumulate`` works in float
mode too (a float sum, like not zeroing .grad between backward passes). With one backward a
step, ``exact_push="float"`` pushes p.grad as it is and the shards round it (the same bits,
half the bytes, no conversion here); a second ``accumulate()`` in a step is then refused.

Clipping by global norm: ``ps.clip_grad_norm_(max_norm)`` between backward and
``ps.step()`` clips the step's averaged gradient, as ``torch.nn.utils.clip_grad_norm_`` clips
DDP's; the norm is computed on the shards during the step and lands in ``ps.grad_norm``. torch's
own clip_grad_norm_ on p.grad would clip this rank's share only, not the average.

Loss scaling (``loss_scale="caller"``, with fp16 compression): multiply the loss by
``ps.loss_scale`` before backward; the shards skip a step that overflowed and the SDK halves
the scale. ``loss_scale="sdk"`` has the SDK scale the pushed gradients instead.

Zero copy (``buffers=True``; off by default, because of the rule below): each parameter becomes
a view of the SDK's parameter buffer for its tensor (tessera.Client.buffers), so a pull writes
nothing more and, on one host with shared memory, forward reads the shard's own pages;
gradients go into the SDK's gradient buffers in one pass. Those pages are read-only: an
in-place write to a parameter by anything but Tessera (a torch optimizer, torch.nn.init)
faults on one host and is overwritten by the next pull anywhere; ``load_state_dict`` is
wrapped, so it is safe. ``ps.close()`` gives every parameter a private copy of its values
before the client goes, so the module outlives the cluster. ``buffers=False`` (the default)
keeps private parameters that the pulls copy into.

Overlap (``overlap=True``, "forward" or "bucket"; off by default): backward pushes each
bucket of gradients (``bucket_bytes``, the last layers first) as soon as autograd has made
it, from a communication thread that owns the SDK calls (tessera._overlap; docs/python.md,
"Overlap"). The bits are those of ps.step() without it. Micro-batches: run every backward but
the last inside ``ps.no_sync()``, each followed by ``ps.accumulate()``; the last one's backward
pushes. Read parameters outside a forward pass only after ``ps.wait()``.

Rules: parameters must be float32, on the CPU and contiguous (checked at attach); call
``ps.step()`` after backward, never between a forward pass and its backward (the values change
in place, under autograd). ``attach``, ``step`` and ``load_state_dict`` are collective: every
rank calls them, in the same order. Threads: a ParameterServer is used by one thread at a time.
"""
import hashlib
import struct
import warnings

import numpy as np
import torch

import tessera
from tessera._elastic import Elastic
from tessera._embedding import EmbeddingBag
from tessera._progress import Progress
from tessera._overlap import DEFAULT_BUCKET_BYTES, DEFAULT_OVERLAP, Overlap
from tessera._state import (STATE_LEN, Optimizer, _buffers_of, _error, _flat, _invalid,
                            _optimizer_defaults, _RoutedLoad)

__all__ = ["attach", "initialize", "params_sha256", "default_init", "ParameterServer",
           "Optimizer", "DEFAULT_OVERLAP", "DEFAULT_BUCKET_BYTES", "EmbeddingBag"]



def default_init(name, param):
    """The initializer ``initialize`` (and attach's ``init=``) gives a parameter that ``init``
    does not name: ("he", fan_in, fan_out) for 2+ dimensions (fan_in = shape[1] * receptive
    field, as torch.nn.init computes it), "zeros" for biases and other 1-d or 0-d ones."""
    if param.dim() < 2:
        return ("zeros", 0, 0)
    receptive = 1
    for s in param.shape[2:]:
        receptive *= int(s)
    return ("he", int(param.shape[1]) * receptive, int(param.shape[0]) * receptive)


def _spec(init, name, param):
    """(initializer, fan_in, fan_out) of one parameter under ``init``."""
    dflt = default_init(name, param)
    if init is None or init is True:
        s = dflt
    elif callable(init):
        s = init(name, param)
    elif isinstance(init, dict):
        s = init.get(name, dflt)
    else:
        s = init
    if isinstance(s, str):
        # A 1-d parameter given "he" or "xavier" takes its length as its fans.
        s = (s, dflt[1] or int(param.numel()), dflt[2] or int(param.numel()))
    if not (isinstance(s, tuple) and len(s) == 3 and isinstance(s[0], str)) or \
            s[0] == "assigned":
        raise _error("INVALID_ARGUMENT", "init for %r: a str or (str, fan_in, fan_out) "
                     "naming a Tessera initializer expected, got %r" % (name, s))
    return s


class ParameterServer(Overlap, Elastic, Progress):
    """A module's parameters (and buffers) held by Tessera shards. Made by attach(); see the
    module doc."""

    _invalid = staticmethod(_invalid)
    #: Where this rank serves /metrics (attach's metrics_port), or None.
    metrics_port = None

    def __init__(self, module, client, seed=0, init=None, partition_bytes=0, buffers=False,
                 overlap=False, bucket_bytes=None, rank=0, workers=1, batch=None,
                 broadcast_buffers=True, loss_reduction="mean", micro_batch=None,
                 param_groups=None, optimizer="momentum", mode="bsp", elastic=False):
        self.module = module
        self._comm = None       # overlap: the thread that makes the SDK calls (_Comm)
        self.client = client
        self.rank, self.workers, self.batch = rank, workers, batch
        #: An elastic job (tessera._elastic): this rank computes the slots slots() names.
        self.elastic = bool(elastic)
        self._slot_sums = {}    # elastic: slot -> (its sums, pending), as _acc and _pending
        if loss_reduction not in ("mean", "sum"):
            raise _invalid("loss_reduction: \"mean\" (the loss is averaged over this rank's "
                           "samples, torch's default) or \"sum\" expected, got %r"
                           % (loss_reduction,))
        self.loss_reduction = loss_reduction
        self._micro = micro_batch or None
        named = list(module.named_parameters())
        if not named:
            raise _invalid("module: it has no parameters")
        for name, p in named:
            if p.device.type != "cpu" or p.dtype != torch.float32 or not p.is_contiguous():
                raise _invalid("parameter %r: a contiguous float32 CPU tensor expected, got %s "
                               "on %s%s (Tessera writes parameters in place)"
                               % (name, p.dtype, p.device,
                                  "" if p.is_contiguous() else ", not contiguous"))
        #: Whether steps can be assignments (mode bsp): the model's own weights, frozen
        #: parameters and kept buffers need them.
        self.assigns = (mode or "bsp") == "bsp" and not self.elastic
        if self.elastic and init is None:
            raise _invalid("elastic: an elastic job cannot start from the model's own weights "
                           "yet (the step that assigns them needs fixed ranks): pass init= "
                           "(True: Tessera's default initializers, the same bits on every "
                           "rank; docs/python.md, \"Elastic jobs\")")
        if not self.assigns and not self.elastic:
            warnings.warn("tessera.torch: mode %s: the job starts from Tessera's initializers "
                          "(init=, default_init), not the model's weights; buffers are each "
                          "rank's own and frozen parameters move with weight decay and momentum: "
                          "assignments are bsp only" % mode, stacklevel=3)
            broadcast_buffers = False
        elif self.assigns and init is not None:   # Tessera's initializers, the same bits
            initialize(module, seed, init)          # on every rank
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        defaults = _optimizer_defaults(optimizer)
        self._job_decay = defaults["weight_decay"]
        self._spec = optimizer or "momentum"
        self._state_len = STATE_LEN.get(self._spec.partition(":")[0], 0)
        #: The job's optimizer as torch sees one (Optimizer): param_groups, lr schedulers.
        self.optimizer = Optimizer(self, self.params if param_groups is None else param_groups,
                                   defaults)
        self._group_of = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
        self._lr_sent = {}      # tensor id -> (lr, weight decay on) its pushes carry
        self._bufs = _buffers_of(module) if broadcast_buffers else []
        self._check_elastic(overlap, buffers)
        self.ids = []
        for name, t in named + [(b.name, b.tensor) for b in self._bufs]:
            kind, fan_in, fan_out = ("assigned", 0, 0) if self.assigns else _spec(init, name, t)
            self.ids.append(client.register(name, tuple(t.shape) or (1,), init=kind, seed=seed,
                                            fan_in=fan_in, fan_out=fan_out,
                                            partition_bytes=partition_bytes))
        self._buf_ids = self.ids[len(self.params):]
        del self.ids[len(self.params):]
        # An elastic job may be mid-step (a rank started again): _start joins its newest step.
        versions = {0} if self.elastic else {client.version(i) for i in self.ids + self._buf_ids}
        if len(versions) != 1:
            raise _error("FAILED_PRECONDITION", "the shards hold tensors at versions %s: "
                         "restart the cluster" % sorted(versions))
        #: The step the next ps.step() pushes (and the version the module holds).
        self.version = versions.pop()
        self.exact = client.exact
        # Pushes are int64 fixed-point sums (exact mode, exact_push="fixed"); with
        # exact_push="float" they are float32 gradients the shards round, as in float mode.
        self._fixed = client.exact and client.exact_push == "fixed"
        self._acc = None        # accumulate()'s sums: int64 (exact) or float32 arrays
        self._pending = False   # _acc holds this step's sum
        self._clip = None       # clip_grad_norm_'s max_norm for the next step
        #: The global norm of the last clipped step's averaged gradient, before clipping.
        self.grad_norm = None
        self._start_progress()
        self._zeros = {}        # numel -> zeros, for parameters without .grad
        self._dummies = {}      # numel -> what an assigned tensor's grads entry holds
        self._views = None      # buffers: each parameter's params array (read-only, the SDK's)
        self._grad_bufs = False  # buffers: _acc is the SDK's gradient buffers
        self._wrapped = []      # modules whose load_state_dict is ours
        if buffers:
            self._use_buffers()
        try:
            self._start()
        except BaseException:
            self._private()   # the module must not hold the client attach() now closes
            raise
        if overlap is not False:
            try:
                self._start_overlap(overlap, DEFAULT_BUCKET_BYTES if bucket_bytes is None
                                    else bucket_bytes)
            except BaseException:
                self._private()
                raise
        self._wrap_load()

    def _start(self):
        """A fresh job: the assignment of rank 0's values as step 0, pulled by every rank; a
        job under way (restored), or one without assignments: its version pulled. With
        buffers, each parameter's storage then becomes the SDK's buffer."""
        with torch.no_grad():
            if self.elastic:
                self._join()
            elif self.version == 0 and self.assigns:
                self._assign_step({i: _flat(p) for i, p in enumerate(self.params)},
                                  {k: b.values() for k, b in enumerate(self._bufs)})
            else:
                outs = self._outs()
                for i, o in zip(self.ids + self._buf_ids, outs):
                    self.client.pull(i, self.version, o)
                for b in self._bufs:
                    b.landed()
            for p, v in zip(self.params, self._views or []):
                with warnings.catch_warnings():
                    # "not writable": Python may not write it; the SDK's pulls do.
                    warnings.simplefilter("ignore", UserWarning)
                    p.data = torch.from_numpy(v).reshape(p.shape)

    def _outs(self):
        """Where a pull of every registered tensor lands, by id: the parameters (their SDK
        buffers with zero copy), then the buffers."""
        return (self._views or [p.detach().numpy().reshape(-1) for p in self.params]) + \
            [b.out() for b in self._bufs]

    def _dummy(self, n):
        """What an assigned tensor's entry of grads holds: never read (tessera_assign)."""
        d = self._dummies.get(n)
        if d is None:
            d = self._dummies[n] = np.zeros(n, np.int64 if self._fixed else np.float32)
        return d

    def _arm_buffers(self):
        """Every buffer's assignment for the step: rank 0's values, the others none."""
        for i, b in zip(self._buf_ids, self._bufs):
            self.client.assign(i, b.values() if self.rank == 0 else None)

    def _assign_step(self, params, bufs, states=None, updates=None):
        """One step that assigns every tensor: rank 0 gives params[i] (parameter i), with
        the optimizer's states[i] where given, and bufs[k] (buffer k) where present, the
        tensors without keep their values; every rank pulls the result. The collective of
        attach and load_state_dict; updates[i]: the update count of states[i], if known."""
        states = states or {}
        counts = {t: (updates or {}).get(k) for k, t in enumerate(self.ids)}   # by tensor id
        everything = list(zip(self.ids, [params.get(i) for i in range(len(self.params))],
                              [states.get(i) for i in range(len(self.params))])) + \
            list(zip(self._buf_ids, [bufs.get(k) for k in range(len(self._bufs))],
                     [None] * len(self._bufs)))
        for i, v, s in everything:
            if self.rank == 0 and s is not None and v is not None:
                self.client.assign(i, v, state=s, updates=counts.get(i))
            else:
                self.client.assign(i, v if self.rank == 0 else None)
        grads = [self._dummy(self.client.numel(i)) for i, _, _ in everything]
        self.client.step(self.version, grads, self._outs())
        for b in self._bufs:
            b.landed()
        self.version += 1

    def _use_buffers(self):
        """The SDK's buffers of every tensor: params always; gradients in exact mode, where
        they are the fixed-point sums, and in float mode only where the shards read them in
        place (shm): elsewhere the SDK copies a push anyway, so filling a buffer would be one
        pass more than pushing p.grad as it is."""
        grads = self._fixed or self.client.transport == "shm"
        pairs = [self.client.buffers(i, grad=grads) for i in self.ids]
        self._views = [v for v, _ in pairs]
        if grads:
            self._acc = [g for _, g in pairs]
            self._grad_bufs = True

    @property
    def zero_copy(self):
        """(parameters, gradients): whether each goes through the SDK's buffers."""
        return (self._views is not None, self._grad_bufs)

    def _updated(self, i):
        """Whether the step updates parameter i: it requires grad and is in one of the
        optimizer's param groups (torch leaves the others alone); without assignments,
        every parameter is (module doc)."""
        p = self.params[i]
        return not self.assigns or (p.requires_grad and id(p) in self._group_of)

    @property
    def frozen(self):
        """The names of the parameters the next step leaves as they are (requires_grad False,
        or in no param group)."""
        return [n for i, n in enumerate(self.names) if not self._updated(i)]

    def _lr_changes(self, idx):
        """(tensor id, lr, weight decay on) for the parameters idx whose group's settings
        differ from what their pushes carry (and now notes them as carried)."""
        out = []
        for i in idx:
            g = self._group_of.get(id(self.params[i]))
            if g is None:
                continue
            wd = float(g.get("weight_decay", self._job_decay))
            if wd not in (0.0, self._job_decay):
                raise _invalid("param_groups: weight_decay %r; a group takes the optimizer's "
                               "(%r) or 0" % (wd, self._job_decay))
            want = (float(g["lr"]), wd != 0.0)
            if self._lr_sent.get(self.ids[i]) != want:
                self._lr_sent[self.ids[i]] = want
                out.append((self.ids[i],) + want)
        return out

    def _share(self, local_batch, micro=False):
        """What this rank's gradient is multiplied by before it is pushed: local_batch if
        given; under loss_reduction "mean" this rank's share of the global batch (micro: a
        micro-batch's size, from attach's micro_batch); None: as it is."""
        if local_batch is not None or self.loss_reduction == "sum":
            return local_batch
        if micro:
            if self._micro is None:
                raise _invalid("accumulate: loss_reduction='mean' multiplies each micro-batch's "
                               "mean gradient by its size: pass accumulate(local_batch=m), or "
                               "attach with micro_batch=m (or loss_reduction='sum')")
            return self._micro
        share = self.batch / self.workers if self.batch else None
        if share is None or share != int(share):
            raise _invalid("step: loss_reduction='mean' multiplies this rank's mean gradient by "
                           "its share of the global batch, and batch %r does not split evenly "
                           "over %d workers: pass step(local_batch=n), the samples this rank "
                           "averaged over, or attach with loss_reduction='sum'"
                           % (self.batch, self.workers))
        return int(share)

    def _grad_array(self, i, local_batch):
        """Parameter i's gradient as a float32 array (a view of .grad where possible)."""
        p = self.params[i]
        g = p.grad
        if g is None:
            z = self._zeros.get(p.numel())
            if z is None:
                z = self._zeros[p.numel()] = np.zeros(p.numel(), np.float32)
            return z
        g = g.detach()
        if not g.is_contiguous():
            g = g.contiguous()
        a = g.numpy().reshape(-1)
        if local_batch is not None:
            a = a * np.float32(local_batch)
        return a

    def _grads(self, local_batch):
        """Each parameter's gradient as a float32 array (a view of .grad where possible)."""
        return [self._grad_array(i, local_batch) for i in range(len(self.params))]

    def _check_local_batch(self, local_batch):
        if local_batch is not None and (isinstance(local_batch, bool) or
                                        not isinstance(local_batch, int) or local_batch < 0):
            raise _invalid("local_batch: the number of samples the loss was averaged over "
                           "(an int >= 0) expected, got %r" % (local_batch,))

    def accumulate(self, local_batch=None, slot=None):
        """Adds the current p.grad of every parameter to this step's sum (int64 fixed point in
        exact mode). Call it after each micro-batch's backward; local_batch: the loss was a
        mean over that many samples (the gradient is multiplied by it; under
        loss_reduction="mean" it defaults to attach's micro_batch). slot: the slot the
        micro-batch belongs to, one of slots() (elastic jobs; default this rank's)."""
        self._check_local_batch(local_batch)
        if self.elastic:
            return self._accumulate_slot(self.rank if slot is None else slot,
                                         self._share(local_batch, micro=True))
        if slot is not None and slot != self.rank:
            raise _invalid("slot %r: this job is not elastic; its one slot is rank %d's "
                           "(attach with elastic=True)" % (slot, self.rank))
        if self._comm is not None and any(e is not None for e in self._pushes):
            raise _invalid("accumulate: with overlap, this step's backward pushed its gradients"
                           " already: run the earlier micro-batches' backward inside "
                           "ps.no_sync(), each followed by accumulate(), and the last outside, "
                           "without accumulate()")
        if self.exact and not self._fixed and (self._pending or self._comm is not None):
            raise _invalid("accumulate: exact_push='float' pushes one float gradient per step, "
                           "and a float sum of several micro-batches would not be exact: "
                           "attach with exact_push='fixed' to sum micro-batches")
        self._accumulate(self._share(local_batch, micro=True))

    def _accumulate(self, factor):
        first = not self._pending
        if not self._fixed and first:
            # One pass into the sums, the scaling included (a * lb, rounded as before).
            grads = self._grads(None)
            if self._acc is None:
                self._acc = [np.empty(g.size, np.float32) for g in grads]
            for acc, g in zip(self._acc, grads):
                if factor is None:
                    np.copyto(acc, g)
                else:
                    np.multiply(g, np.float32(factor), out=acc)
            self._pending = True
            return
        grads = self._grads(factor)
        if self._acc is None:
            self._acc = [np.empty(g.size, np.int64) for g in grads]
        for acc, g in zip(self._acc, grads):
            if not self._fixed:
                acc += g
            elif first:
                tessera.to_fixed(g, acc)
            else:
                tessera.fixed_add_f32(acc, g)
        self._pending = True

    def clip_grad_norm_(self, max_norm):
        """Clips the next ps.step()'s averaged gradient to global norm ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`` clips DDP's (every
        rank calls it before the same step, with the same max_norm). The averaged gradient
        exists only on the shards, so the norm is computed there during the step
        (tessera_step_clip; docs/training.md, "Clipping by global norm"): it is not known yet
        here, and ps.step() sets ``ps.grad_norm`` to it. Calling torch's own clip_grad_norm_
        on p.grad instead would clip each rank's local gradient, not the average. Not with
        overlap (its buckets leave during backward, before this call)."""
        max_norm = float(max_norm)
        if not (0 < max_norm < float("inf")):
            raise _invalid("max_norm: %r; clipping takes a finite norm > 0" % max_norm)
        if self._comm is not None:
            raise _error("UNIMPLEMENTED", "clip_grad_norm_: not with overlap, whose buckets "
                         "are pushed during backward; attach with overlap=False to clip")
        self._clip = max_norm

    def step(self, local_batch=None, loss=None):
        """Pushes this rank's gradient sum for step ``self.version`` (what accumulate() summed,
        else every p.grad, scaled as loss_reduction says), frozen parameters and buffers as
        assignments, then pulls the new values into the module, in place. Returns the new
        version. ``loss``: this step's loss for the progress reports (``report``). Raises
        tessera.Rollback when the cluster took the job back to its last snapshot: the module
        then holds that step's values and ``self.version`` is it; train on from there (the
        data of that step)."""
        self.report(loss)
        version = self._step_elastic(local_batch) if self.elastic else self._step(local_batch)
        self._progress()
        return version

    def _step(self, local_batch):
        self._check_local_batch(local_batch)
        if self._comm is not None:
            return self._step_overlap(local_batch)
        if self._pending:
            if local_batch is not None:
                raise _invalid("local_batch: give it to accumulate(), which already summed "
                               "this step's gradients")
            grads = self._acc
        elif self._fixed or self.zero_copy[1]:
            self._accumulate(self._share(local_batch))   # into the gradient buffers, if any
            # A float step that fails reads p.grad again next time, as without buffers.
            self._pending = self._fixed
            grads = self._acc
        else:
            grads = self._grads(self._share(local_batch))
        grads = list(grads)
        for i, p in enumerate(self.params):
            if not self._updated(i):
                self.client.assign(self.ids[i])
                grads[i] = self._dummy(p.numel())
        for change in self._lr_changes(range(len(self.params))):
            self.client.set_lr(*change)
        self._arm_buffers()
        grads += [self._dummy(b.tensor.numel()) for b in self._bufs]
        clip, self._clip = self._clip, None
        try:
            norm = self.client.step(self.version, grads, self._outs(), clip_norm=clip)
        except tessera.Rollback:
            # The module holds the snapshot's values: go on from its step.
            self._pending = False
            self.version = self.client.resume_step
            for b in self._bufs:
                b.landed()
            raise
        for b in self._bufs:
            b.landed()
        self._pending = False
        if clip is not None:
            self.grad_norm = norm
        self.version += 1
        return self.version

    def rolled_back(self):
        """After tessera.Rollback raised by another call on this client (a sparse table's
        ``pull_rows`` or ``push_rows``, as tessera.torch.EmbeddingBag makes them): the cluster
        took the job back to ``client.resume_step``. Pulls the module's values and buffers of
        that step, drops what this step summed, and returns the version to train on from
        (``self.version``). A Rollback raised by ``step()`` needs none of this."""
        if self.elastic or self._comm is not None:
            raise _invalid("rolled_back: not for an elastic job or with overlap (tables take "
                           "neither)")
        while True:   # a pull raising Rollback: another came meanwhile, pull at its step
            v = self.client.resume_step
            try:
                with torch.no_grad():
                    for i, o in zip(self.ids + self._buf_ids, self._outs()):
                        self.client.pull(i, v, o)
                break
            except tessera.Rollback:
                continue
        with torch.no_grad():
            for b in self._bufs:
                b.landed()
        self._pending = False
        self.version = v
        return v

    def discard(self):
        """Drops what accumulate() summed for this step (a step the trainer abandons)."""
        self._pending = False
        self._slot_sums = {}

    # ---- load and save ----

    def state_dict(self):
        """The model's state (``model.state_dict()``, private copies where parameters are the
        SDK's pages) and Tessera's: ``{"model": ..., "tessera": {"version", "rank",
        "workers", "optimizer": {"spec", "state": {name: [state floats per element, *shape]},
        "updates": {name: int}}}}`` (the shards' optimizer state of every parameter and the
        updates it was accumulated over, Adam's step, read at this version), for
        torch.save. ``ps.load_state_dict`` takes it back, optimizer state included, and the
        model's own ``load_state_dict`` after attach; ``sd["model"]`` loads into a plain
        torch model. Between steps, as torch's."""
        self.wait()
        self._between_steps("state_dict")
        sd = self.module.state_dict()
        if self._views is not None:
            sd = type(sd)((k, v.clone()) for k, v in sd.items())
        state, updates = {}, {}
        for i, (name, p) in enumerate(zip(self.names, self.params)):
            if self._state_len and self.assigns:
                a = np.empty(self._state_len * p.numel(), np.float32)
                _, updates[name] = self.client.pull_state(self.ids[i], self.version, a,
                                                          return_updates=True)
                state[name] = torch.from_numpy(a).reshape((self._state_len,) + tuple(p.shape))
        return {"model": sd, "tessera": {"version": self.version, "rank": self.rank,
                                         "workers": self.workers,
                                         "optimizer": {"spec": self._spec, "state": state,
                                                       "updates": updates}}}

    def _between_steps(self, what):
        if self._pending or (self._comm is not None and
                             any(e is not None for e in self._pushes)):
            raise _invalid("%s: this step's gradients were summed or pushed already; call it "
                           "between steps (after ps.step(), or discard())" % what)

    def load_state_dict(self, state_dict, strict=True):
        """Loads a model state (``model.state_dict()``, or what ``ps.state_dict()`` returned)
        into the job: every registered tensor it holds is assigned in one step that every rank
        takes, rank 0's values winning, then pulled; the others keep their values; what is not
        registered (buffers with broadcast_buffers=False) is copied in locally. Collective: every
        rank calls it at the same step. Checks like torch's (missing and unexpected keys under
        strict, shapes) come before anything is sent. Returns torch's (missing_keys,
        unexpected_keys)."""
        return self._load(state_dict, strict, "")

    def _load(self, sd, strict, prefix):
        opt = None
        if isinstance(sd, dict) and set(sd) == {"model", "tessera"}:
            opt = sd["tessera"].get("optimizer") if prefix == "" else None
            sd = sd["model"]
        if not self.assigns:
            raise _error("FAILED_PRECONDITION", "load_state_dict: loading is an assignment "
                         "step, and this job's mode has none (bsp only); load before attach "
                         "with init=, or train in mode bsp")
        self.wait()
        self._between_steps("load_state_dict")
        own = {k: v for k, v in self.module.state_dict(keep_vars=True).items()
               if k.startswith(prefix)}
        given = {prefix + k: v for k, v in sd.items()}
        missing = [k[len(prefix):] for k in own if k not in given]
        unexpected = [k[len(prefix):] for k in given if k not in own]
        errors = []
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: %s. "
                          % ", ".join('"%s"' % k for k in unexpected))
        if strict and missing:
            errors.append("Missing key(s) in state_dict: %s. "
                          % ", ".join('"%s"' % k for k in missing))
        for k, v in given.items():
            if k in own and tuple(own[k].shape) != tuple(torch.as_tensor(v).shape):
                errors.append("size mismatch for %s: copying a param with shape %s from "
                              "checkpoint, the shape in current model is %s."
                              % (k[len(prefix):], tuple(torch.as_tensor(v).shape),
                                 tuple(own[k].shape)))
        states = self._optimizer_state(opt, errors)
        counts = {}   # each state's update count (none saved: the job's own count goes on)
        for i, n in enumerate(self.names):
            c = (opt.get("updates") or {}).get(n) if i in states else None
            if c is not None and not (isinstance(c, (int, np.integer)) and 0 <= c < 1 << 64):
                errors.append("optimizer update count of %s: %r, want an int >= 0" % (n, c))
            elif c is not None:
                counts[i] = int(c)
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s"
                               % (type(self.module).__name__, "\n\t".join(errors)))
        params = {i: _flat(torch.as_tensor(given[n])) for i, n in enumerate(self.names)
                  if n in given}
        bufs = {}
        for k, b in enumerate(self._bufs):
            if b.name in given:
                with torch.no_grad():
                    b.tensor.copy_(torch.as_tensor(given[b.name]))
                bufs[k] = b.values()
        registered = set(self.names) | {b.name for b in self._bufs}
        with torch.no_grad():   # state Tessera does not hold: this rank's own copy
            for k, v in given.items():
                if k in own and k not in registered:
                    own[k].copy_(torch.as_tensor(v))
            self._assign_step(params, bufs, states, counts)
        return torch.nn.modules.module._IncompatibleKeys(missing, unexpected)

    def _optimizer_state(self, opt, errors):
        """{parameter index: flat state} from a state_dict()'s "optimizer" entry, for an
        optimizer that keeps the same state (momentum's into nesterov's, adam's into adamw's);
        problems go to errors."""
        if not opt or not opt.get("state") or not self._state_len:
            return {}
        if STATE_LEN.get(str(opt.get("spec", "")).partition(":")[0]) != self._state_len:
            errors.append("optimizer state of %r does not fit this job's optimizer %r"
                          % (opt.get("spec"), self._spec))
            return {}
        out = {}
        for i, (name, p) in enumerate(zip(self.names, self.params)):
            s = opt["state"].get(name)
            if s is None:
                continue
            s = torch.as_tensor(s)
            if tuple(s.shape) != (self._state_len,) + tuple(p.shape):
                errors.append("optimizer state of %s: shape %s, want %s" % (
                    name, tuple(s.shape), (self._state_len,) + tuple(p.shape)))
                continue
            out[i] = _flat(s)
        return out

    def _wrap_load(self):
        """Routes the model's load_state_dict, and each submodule's, to _load: a plain copy_
        into parameters would be undone by the next pull, and with zero copy fault."""
        for prefix, m in self.module.named_modules():
            m.load_state_dict = _RoutedLoad(self, prefix + "." if prefix else "")
            self._wrapped.append(m)

    def _unwrap_load(self):
        for m in self._wrapped:
            m.__dict__.pop("load_state_dict", None)
        self._wrapped = []

    @property
    def loss_scale(self):
        """The factor to multiply the loss by with loss_scale="caller" (1.0 without)."""
        return self.client.loss_scale

    @property
    def transport(self):
        return self.client.transport

    def stats(self):
        return self.client.stats()

    def verify(self):
        """Audits the module's parameters (and kept buffers) against the shards' copy at
        self.version, bit for bit (tessera.Client.verify_local)."""
        self.wait()
        return self.client.verify_local(self._outs(), self.version)

    def params_sha256(self):
        self.wait()
        return params_sha256(self.module)

    def close(self, failed=None):
        """Leaves the cluster. The master records how this rank's part ended: the module's
        params_sha256, or ``failed`` (a reason; leaving a with-block on an exception gives
        the exception). With buffers, every parameter first gets a private copy of its values
        (the SDK's pages go with the client); its Parameter object stays the same. With
        overlap, first waits for the queued pulls (raising what one raised, after the rest of
        close()) and stops the communication thread."""
        try:
            self._stop_overlap()
            if not self.client.closed:
                self.client.set_result(failed is not None, str(failed) if failed is not None
                                       else params_sha256(self.module))
        finally:
            self._unwrap_load()
            self._private()
            self.client.close()

    def _private(self):
        """Gives every parameter that is a view of the SDK's buffers a private copy of its
        values, and drops the buffers."""
        if self._views is not None:
            with torch.no_grad():
                for p, v in zip(self.params, self._views):
                    if p.data_ptr() == v.__array_interface__["data"][0]:
                        p.data = p.data.clone()
            self._views = self._acc = None
            self._grad_bufs = self._pending = False

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close(None if kind is None else "%s: %s" % (kind.__name__, value))
        return False


def attach(module, master=None, job=None, rank=None, workers=None, optimizer="momentum",
           batch=None, exact=False, seed=0, init=None, partition_bytes=0, buffers=False,
           overlap=False, bucket_bytes=None, broadcast_buffers=True, loss_reduction="mean",
           param_groups=None, elastic=False, metrics_port=None, metrics_host=None,
           **options):
    """Connects to a cluster (tessera.Client(master, job, rank, workers, exact, optimizer,
    batch, **options): mode, compress, sync_every, loss_scale, transport, timeout_ms,
    micro_batch, ...), registers every parameter of ``module`` (named_parameters() order) and,
    with ``broadcast_buffers``, every buffer, and starts the job from rank 0's values (``init``:
    Tessera's initializers instead, see ``initialize``); see the module doc. ``buffers``: the
    SDK's zero-copy buffers (module doc, "Zero copy"); False: copies. ``overlap``: push during
    backward and pull during forward, in buckets of ``bucket_bytes`` (None:
    DEFAULT_BUCKET_BYTES). ``loss_reduction``: "mean" or "sum", what the loss behind p.grad
    is over this rank's samples. ``param_groups``: torch's list of {"params": [...], "lr",
    "weight_decay"} (None: every parameter in one group of the optimizer's settings);
    parameters in no group are not updated; ``ps.optimizer`` holds them for lr schedulers.
    ``master``, ``job``, ``rank`` and ``workers`` left out (None) come from the launcher's
    environment (``tessera.launch_env()``: ``tessera run``, torchrun, srun, a Kubernetes
    indexed Job; docs/launch.md), else "local", "default", 0 and 1, as for tessera.Client.
    ``elastic``: the job outlives a dead rank, whose slots the live ranks compute
    (tessera._elastic). ``metrics_port``: serve this rank's figures for Prometheus there (0: a
    free one; ``ps.metrics_port`` says which) on ``metrics_host`` (None: 127.0.0.1). Returns the ParameterServer. Collective: every rank attaches the same
    model the same way (rank 0's values win)."""
    client = tessera.Client(master=master, job=job, rank=rank, workers=workers, exact=exact,
                            optimizer=optimizer, batch=batch, elastic=elastic, **options)
    try:
        port = None if metrics_port is None else client.serve_metrics(metrics_port,
                                                                      metrics_host)
        ps = ParameterServer(module, client, seed=seed, init=init,
                               partition_bytes=partition_bytes, buffers=buffers,
                               overlap=overlap, bucket_bytes=bucket_bytes,
                               rank=client.rank, workers=client.workers, batch=batch,
                               broadcast_buffers=broadcast_buffers,
                               loss_reduction=loss_reduction,
                               micro_batch=options.get("micro_batch"),
                               param_groups=param_groups, optimizer=optimizer,
                               mode=options.get("mode"), elastic=elastic)
        ps.metrics_port = port
        return ps
    except BaseException:
        client.close()
        raise


def initialize(module, seed=0, init=None):
    """Gives module's parameters Tessera's initial values, with no cluster: each from its
    initializer (``init``: one for all, a dict {name: initializer}, or a callable (name,
    parameter) -> initializer; an initializer is a str such as "he", "xavier",
    "normal:0.01", "zeros", or a tuple (str, fan_in, fan_out); default_init for the others)
    and (seed, name), computed by the shards' own code in this process, the same bits on
    every host. Returns module."""
    with tessera.Client(master="local", rank=0, workers=1, batch=1) as c, torch.no_grad():
        for name, p in module.named_parameters():
            kind, fan_in, fan_out = _spec(init, name, p)
            i = c.register(name, tuple(p.shape) or (1,), init=kind, seed=seed, fan_in=fan_in,
                           fan_out=fan_out)
            v = np.empty(p.numel(), np.float32)
            c.pull(i, 0, v)
            p.copy_(torch.from_numpy(v).reshape(p.shape))
    return module


def params_sha256(module):
    """SHA-256 of the module's parameters, in named_parameters() order, in the format of
    lib/tensor/fingerprint.c (name, NUL, element count as 8 bytes little-endian, float32
    values little-endian): equal hashes mean the same bits."""
    h = hashlib.sha256()
    for name, p in module.named_parameters():
        a = p.detach().numpy().astype("<f4", copy=False).reshape(-1)
        h.update(name.encode() + b"\0" + struct.pack("<Q", a.size))
        h.update(a.tobytes())
    return h.hexdigest()
