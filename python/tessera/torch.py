"""tessera.torch - train a torch.nn.Module through a Tessera cluster.

A training loop changes by about three lines: attach the model, drop the optimizer, and call
``ps.step()`` after the backward pass::

    ps = tessera.torch.attach(model, master="127.0.0.1:7070", job="mnist", rank=r, workers=W,
                              optimizer="momentum:lr=0.03", batch=64)
    for x, y in my_share_of_each_global_batch:
        loss = F.cross_entropy(model(x), y, reduction="sum")
        model.zero_grad()
        loss.backward()
        ps.step()          # push every p.grad, pull the new parameters into p (zero copy)

The contract is the SDK's: each rank pushes the gradient SUM over its share of the global batch
and the shards divide the total by ``batch``, then apply the optimizer (lib/tensor/optim.c:
SGD, momentum and Adam as torch.optim defines them). A loss averaged over the n local samples
is fine too: ``ps.step(local_batch=n)`` multiplies the gradients by n before pushing.

Initial values. Tessera shards initialise every tensor themselves, from (initializer, seed,
name), identically whatever the placement; a trainer cannot upload its own. So ``attach``
registers each parameter with an SDK initializer and pulls version 0 INTO the module,
replacing torch's own random initial weights: "he" (normal, std sqrt(2 / fan_in)) for
parameters of two or more dimensions, "zeros" for the others, which is what the built-in MLP
uses (lib/model/mlp.c; it also gives its last layer "xavier"). ``init`` overrides that: one
initializer for all, a dict {parameter name: initializer}, or a callable (name, parameter) ->
initializer; an initializer is a str ("he", "xavier", "normal:0.01", "zeros", ...) or a tuple
(str, fan_in, fan_out). ``initialize(model, seed, init)`` gives a model the same values with no
cluster at all (a local in-process Tessera), e.g. for a torch.distributed baseline.

Exact mode (``exact=True``): gradients travel as int64 fixed point, so the parameters are the
same bits for any worker and shard count. Compute the rank's share in micro-batches and call
``ps.accumulate()`` after each micro-batch's backward (it adds fixed(p.grad) into an int64 sum:
the order of the micro-batches no longer matters), then ``ps.step()``. ``accumulate`` works in
float mode too (a float sum, like not zeroing .grad between backward passes). With one backward
a step, ``exact_push="float"`` pushes p.grad as it is and the shards round it (the same bits,
half the bytes, no conversion here); a second ``accumulate()`` in a step is then refused.

Loss scaling (``loss_scale="caller"``, with fp16 compression): multiply the loss by
``ps.loss_scale`` before backward; the shards skip a step that overflowed and the SDK halves
the scale. ``loss_scale="sdk"`` has the SDK scale the pushed gradients instead.

Zero copy (``buffers=True``; off by default, because of the rule below): each parameter becomes a view of the SDK's
parameter buffer for its tensor (tessera.Client.buffers), so a pull writes nothing more and,
on one host with shared memory, forward reads the shard's own pages; gradients go into the
SDK's gradient buffers in one pass (exact mode sums straight into them; float mode copies
p.grad into them where shards on this host read them in place, "shm", and elsewhere pushes
p.grad as it is). Those pages are read-only: an in-place write to a parameter (a torch
optimizer, load_state_dict, torch.nn.init) faults on one host and is overwritten by the next
pull anywhere, which is why it is asked for, not the default. ``ps.close()`` gives every
parameter a private copy of its values before the
client goes, so the module outlives the cluster. ``buffers=False`` (the default) keeps
private parameters that the pulls copy into, and pushes p.grad as it is.

Overlap (``overlap=True``, "forward" or "bucket"; off by default): backward pushes each
bucket of gradients (``bucket_bytes``, the last layers first) as soon as autograd has made
it, from a communication thread that owns the SDK calls; "forward" then pulls the next version
in forward order, each module's forward pre-hook waiting for its own parameters, "bucket"
pulls each bucket in the exchange of its push (tessera._overlap; docs/python.md, "Overlap").
The bits are those of ps.step() without it. Micro-batches: run every backward but the last
inside ``ps.no_sync()``, each followed by ``ps.accumulate()``; the last one's backward pushes.
Read parameters outside a forward pass only after ``ps.wait()``.

Rules: parameters must be float32, on the CPU and contiguous (checked at attach); call
``ps.step()`` after backward, never between a forward pass and its backward (the values change
in place, under autograd); do not write parameters in place (see Zero copy). Threads: a
ParameterServer is used by one thread at a time.
"""
import hashlib
import struct
import warnings

import numpy as np
import torch

import tessera
from tessera._overlap import DEFAULT_BUCKET_BYTES, DEFAULT_OVERLAP, Overlap

__all__ = ["attach", "initialize", "params_sha256", "default_init", "ParameterServer",
           "DEFAULT_OVERLAP", "DEFAULT_BUCKET_BYTES"]


def default_init(name, param):
    """The initializer attach() registers a parameter with when ``init`` does not name one:
    ("he", fan_in, fan_out) for 2+ dimensions (fan_in = shape[1] * receptive field, as
    torch.nn.init computes it), "zeros" for biases and other 1-d or 0-d parameters."""
    if param.dim() < 2:
        return ("zeros", 0, 0)
    receptive = 1
    for s in param.shape[2:]:
        receptive *= int(s)
    return ("he", int(param.shape[1]) * receptive, int(param.shape[0]) * receptive)


def _spec(init, name, param):
    """(initializer, fan_in, fan_out) of one parameter under attach()'s ``init``."""
    dflt = default_init(name, param)
    if init is None:
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
    if not (isinstance(s, tuple) and len(s) == 3 and isinstance(s[0], str)):
        raise _error("INVALID_ARGUMENT", "init for %r: a str or (str, fan_in, fan_out) "
                     "expected, got %r" % (name, s))
    return s


def _error(code, msg):
    """A tessera.Error raised here, shaped like the binding's (TESSERA_EINVAL, ESTATE)."""
    grpc, tcode = {"INVALID_ARGUMENT": (3, 1), "FAILED_PRECONDITION": (9, 4)}[code]
    e = (tessera.InvalidArgument if grpc == 3 else tessera.Error)("%s: %s" % (code, msg))
    e.code, e.grpc_code, e.message, e.tessera_code = code, grpc, msg, tcode
    return e


def _invalid(msg):
    return _error("INVALID_ARGUMENT", msg)


class ParameterServer(Overlap):
    """A module's parameters held by Tessera shards. Made by attach(); see the module doc."""

    _invalid = staticmethod(_invalid)

    def __init__(self, module, client, seed=0, init=None, partition_bytes=0, buffers=False,
                 overlap=False, bucket_bytes=None):
        self.module = module
        self._comm = None       # overlap: the thread that makes the SDK calls (_Comm)
        self.client = client
        named = list(module.named_parameters())
        if not named:
            raise _invalid("module: it has no parameters")
        for name, p in named:
            if p.device.type != "cpu" or p.dtype != torch.float32 or not p.is_contiguous():
                raise _invalid("parameter %r: a contiguous float32 CPU tensor expected, got %s "
                               "on %s%s (Tessera writes parameters in place)"
                               % (name, p.dtype, p.device,
                                  "" if p.is_contiguous() else ", not contiguous"))
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.ids = []
        for name, p in named:
            kind, fan_in, fan_out = _spec(init, name, p)
            self.ids.append(client.register(name, tuple(p.shape) or (1,), init=kind, seed=seed,
                                            fan_in=fan_in, fan_out=fan_out,
                                            partition_bytes=partition_bytes))
        versions = {client.version(i) for i in self.ids}
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
        self._zeros = {}        # numel -> zeros, for parameters without .grad
        self._views = None      # buffers: each parameter's params array (read-only, the SDK's)
        self._grad_bufs = False  # buffers: _acc is the SDK's gradient buffers
        if buffers:
            self._use_buffers()
        try:
            with torch.no_grad():
                for i, p, v in zip(self.ids, self.params,
                                   self._views or [None] * len(self.ids)):
                    client.pull(i, self.version, p.detach().numpy() if v is None else v)
                    if v is not None:   # the parameter's storage becomes the SDK's buffer
                        with warnings.catch_warnings():
                            # "not writable": Python may not write it; the SDK's pulls do.
                            warnings.simplefilter("ignore", UserWarning)
                            p.data = torch.from_numpy(v).reshape(p.shape)
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

    def accumulate(self, local_batch=None):
        """Adds the current p.grad of every parameter to this step's sum (int64 fixed point in
        exact mode). Call it after each micro-batch's backward; local_batch: the loss was a
        mean over that many samples (the gradient is multiplied by it)."""
        self._check_local_batch(local_batch)
        if self._comm is not None and any(e is not None for e in self._pushes):
            raise _invalid("accumulate: with overlap, this step's backward pushed its gradients"
                           " already: run the earlier micro-batches' backward inside "
                           "ps.no_sync(), each followed by accumulate(), and the last outside, "
                           "without accumulate()")
        if self.exact and not self._fixed and (self._pending or self._comm is not None):
            raise _invalid("accumulate: exact_push='float' pushes one float gradient per step, "
                           "and a float sum of several micro-batches would not be exact: "
                           "attach with exact_push='fixed' to sum micro-batches")
        first = not self._pending
        if not self._fixed and first:
            # One pass into the sums, the scaling included (a * lb, rounded as before).
            grads = self._grads(None)
            if self._acc is None:
                self._acc = [np.empty(g.size, np.float32) for g in grads]
            for acc, g in zip(self._acc, grads):
                if local_batch is None:
                    np.copyto(acc, g)
                else:
                    np.multiply(g, np.float32(local_batch), out=acc)
            self._pending = True
            return
        grads = self._grads(local_batch)
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

    def step(self, local_batch=None):
        """Pushes this rank's gradient sum for step ``self.version`` (what accumulate() summed,
        else every p.grad), then pulls the new parameters into the module, in place. Returns
        the new version. Raises tessera.Rollback when the cluster took the job back to its
        last snapshot: the module then holds that step's values and ``self.version`` is it;
        train on from there (the data of that step)."""
        self._check_local_batch(local_batch)
        if self._comm is not None:
            return self._step_overlap(local_batch)
        if self._pending:
            if local_batch is not None:
                raise _invalid("local_batch: give it to accumulate(), which already summed "
                               "this step's gradients")
            grads = self._acc
        elif self._fixed or self.zero_copy[1]:
            self.accumulate(local_batch)   # into the gradient buffers, where there are some
            # A float step that fails reads p.grad again next time, as without buffers.
            self._pending = self._fixed
            grads = self._acc
        else:
            grads = self._grads(local_batch)
        params = self._views or [p.detach().numpy() for p in self.params]
        try:
            self.client.step(self.version, grads, params)
        except tessera.Rollback:
            # The module holds the snapshot's values: go on from its step.
            self._pending = False
            self.version = self.client.resume_step
            raise
        self._pending = False
        self.version += 1
        return self.version

    def discard(self):
        """Drops what accumulate() summed for this step (a step the trainer abandons)."""
        self._pending = False

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
        """Audits the module's parameters against the shards' copy at self.version, bit for
        bit (tessera.Client.verify_local)."""
        self.wait()
        return self.client.verify_local([p.detach().numpy() for p in self.params],
                                        self.version)

    def params_sha256(self):
        self.wait()
        return params_sha256(self.module)

    def close(self):
        """Leaves the cluster. With buffers, every parameter first gets a private copy of its
        values (the SDK's pages go with the client); its Parameter object stays the same.
        With overlap, first waits for the queued pulls (raising what one raised, after the
        rest of close()) and stops the communication thread."""
        try:
            self._stop_overlap()
        finally:
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

    def __exit__(self, *exc):
        self.close()
        return False


def attach(module, master="local", job="default", rank=0, workers=1, optimizer="momentum",
           batch=None, exact=False, seed=0, init=None, partition_bytes=0, buffers=False,
           overlap=False, bucket_bytes=None, **options):
    """Connects to a cluster (tessera.Client(master, job, rank, workers, exact, optimizer,
    batch, **options): mode, compress, sync_every, loss_scale, transport, timeout_ms, ...),
    registers every parameter of ``module`` (named_parameters() order, initializer from
    ``init`` and ``seed``, see the module doc) and pulls their current version into it.
    ``buffers``: the SDK's zero-copy buffers (module doc, "Zero copy"); False: copies.
    ``overlap``: push during backward and pull during forward (module doc, "Overlap"), in
    buckets of ``bucket_bytes`` (None: DEFAULT_BUCKET_BYTES). Returns the ParameterServer;
    every rank must attach the same model the same way."""
    client = tessera.Client(master=master, job=job, rank=rank, workers=workers, exact=exact,
                            optimizer=optimizer, batch=batch, **options)
    try:
        return ParameterServer(module, client, seed=seed, init=init,
                               partition_bytes=partition_bytes, buffers=buffers,
                               overlap=overlap, bucket_bytes=bucket_bytes)
    except BaseException:
        client.close()
        raise


def initialize(module, seed=0, init=None):
    """Gives module the initial values attach() would, with no cluster: the shards' own code
    runs in this process (master "local")."""
    attach(module, master="local", batch=1, seed=seed, init=init).close()
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
