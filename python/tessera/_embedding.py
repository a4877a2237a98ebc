"""tessera._embedding - tessera.torch.EmbeddingBag: torch.nn.EmbeddingBag over the rows of a
Tessera sparse table (docs/embeddings.md, "tessera.torch.EmbeddingBag"; issue 46).

The table's rows live on the shards; a forward pass pulls only the unique ids of its batch at
version ``self.step`` and builds the bags with torch's own ``F.embedding_bag``, so the forward
math is torch's. The gradient goes back as one row per input position (what
``client.push_rows`` wants: the SDK merges repeats itself, in int64 fixed point in exact mode,
so the bits do not depend on how samples are split over workers; a float sum made here would).

How the per-position gradient is made: the forward pass gathers the pulled rows into a leaf
tensor of one row per used input position (``rows.index_select(0, inverse)``, requiring grad)
and runs ``F.embedding_bag`` over it with the input renumbered 0..P-1 (padding and positions
outside every bag point at one extra zero row that is torch's ``padding_idx``). Each leaf row is
read by exactly one position, so torch's own backward leaves in ``leaf.grad[j]`` the gradient of
the row as position j used it: the bag's gradient, times the per-sample weight (sum) or divided
by the bag's count (mean), exactly as torch computes ``weight.grad``'s contributions. No
hand-written backward can drift from torch's; ``per_sample_weights`` that require grad get
theirs from torch too.

Why an explicit ``push()`` and not a push from inside backward: a table takes exactly one push
per rank per step, and a step may run several forward/backward passes (micro-batches, the module
used twice in one model) or none (a batch without this feature); ``push()`` sends what every
backward of the step left, or zero ids, once, with the ``local_batch`` of that step, and a
refused push raises from a call the trainer made rather than from inside autograd's engine. It
is called where ``ps.step()`` (or ``optimizer.step()``) is: after ``loss.backward()``, every
step, on every rank.

Elastic jobs (``Client(elastic=True)``; docs/embeddings.md, "Elastic jobs with tables"): a rank
computes every slot ``client.slots()`` names, and pushes each as that slot, the rows of that
slot's samples alone: ``push(slot=s)`` after slot s's forward and backward passes, before the
next slot's. The step is the ParameterServer's, not counted here: a rank may compute no slot
in a step (one started again waits for its slot while the job goes on), so the trainer sets
``step = ps.version`` before each step it computes. A table call that meets slots changing
hands (a rank died or came back) raises tessera.Slots with nothing of the step kept; the
trainer then asks its ParameterServer for the step to compute (``ps.recover()``) and computes
it again with the slots ``ps.slots()`` names.
"""
import numpy as np
import torch
import torch.nn.functional as F

import tessera
from tessera._state import _invalid

__all__ = ["EmbeddingBag"]


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


class EmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag whose weight is a Tessera table (``client.register_table``).

    ``EmbeddingBag(client, name, num_embeddings, embedding_dim, mode="mean", padding_idx=None,
    init="normal:0.01", seed=0, optimizer=None, include_last_offset=False, step=0,
    loss_reduction="mean", local_batch=None, ttl_steps=0, ttl_seconds=0)``: the table
    ``name`` of ids 0..num_embeddings-1 and rows of ``embedding_dim`` floats, initialised on
    the shards (``init``, ``seed``) and updated there by ``optimizer`` (None: the job's).
    ``ttl_steps`` or ``ttl_seconds``: the rows' lifetime (docs/embeddings.md, "Row lifetime";
    0: none): a row not updated in that many steps, or seconds (a job that is not exact), is
    dropped, and made again from ``init`` when touched. ``mode``: "sum" or "mean" ("max" is not
    supported). ``step``: the step to start from (0, or a resumed job's). ``loss_reduction``
    and ``local_batch``: what the loss behind the gradient is, as for tessera.torch's
    ParameterServer: "mean" (over ``local_batch`` samples of this rank, multiplied back before
    the push) or "sum" (pushed as it is).

    Training, every step on every rank::

        out = emb(ids, offsets)          # pulls the batch's unique rows at version emb.step
        loss = f(out, ...); loss.backward()
        emb.push()                       # one gradient row per input position; emb.step += 1

    In eval mode or under torch.no_grad(), forward pulls version ``emb.step`` and records
    nothing; ``push()`` is not called for such passes.
    """

    def __init__(self, client, name, num_embeddings, embedding_dim, mode="mean",
                 padding_idx=None, init="normal:0.01", seed=0, optimizer=None,
                 include_last_offset=False, step=0, loss_reduction="mean", local_batch=None,
                 ttl_steps=0, ttl_seconds=0):
        super().__init__()
        if not _is_int(num_embeddings) or num_embeddings < 1:
            raise _invalid("num_embeddings: an int >= 1 (the ids are 0..num_embeddings-1) "
                           "expected, got %r" % (num_embeddings,))
        if not _is_int(embedding_dim) or embedding_dim < 1:
            raise _invalid("embedding_dim: an int >= 1 expected, got %r" % (embedding_dim,))
        if mode == "max":
            raise _invalid("mode: 'max' is not supported by tessera.torch.EmbeddingBag (its "
                           "gradient goes to one row per bag, picked by value); use 'sum' or "
                           "'mean'")
        if mode not in ("sum", "mean"):
            raise _invalid("mode: one of 'sum' or 'mean' expected (torch's sum, mean or max; "
                           "max is not supported), got %r" % (mode,))
        if padding_idx is not None:
            if not _is_int(padding_idx) or not -num_embeddings <= padding_idx < num_embeddings:
                raise _invalid("padding_idx: must be within num_embeddings (an int in %d..%d, "
                               "or None), got %r" % (-num_embeddings, num_embeddings - 1,
                                                     padding_idx))
            padding_idx = int(padding_idx) % int(num_embeddings)
        if not isinstance(include_last_offset, bool):
            raise _invalid("include_last_offset: a bool expected, got %r"
                           % (include_last_offset,))
        if not _is_int(step) or step < 0:
            raise _invalid("step: the step to start from (an int >= 0) expected, got %r"
                           % (step,))
        if loss_reduction not in ("mean", "sum"):
            raise _invalid("loss_reduction: \"mean\" (the loss is averaged over this rank's "
                           "samples, torch's default) or \"sum\" expected, got %r"
                           % (loss_reduction,))
        self._check_local_batch(local_batch)
        self.client = client
        self.name = name
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.mode = mode
        self.padding_idx = padding_idx
        self.include_last_offset = include_last_offset
        self.loss_reduction = loss_reduction
        self.local_batch = local_batch
        #: The next step to compute: forward pulls this version, push() pushes this step.
        self.step = int(step)
        #: The table's handle (client.register_table).
        self.table = client.register_table(name, self.embedding_dim, self.num_embeddings - 1,
                                           init=init, seed=seed, optimizer=optimizer,
                                           ttl_steps=ttl_steps, ttl_seconds=ttl_seconds)
        self._pending = []      # this step's training passes: (ids per position, leaf rows)
        self._elastic = bool(getattr(client, "elastic", False))

    def extra_repr(self):
        s = "%r, %d, %d, mode=%r, step=%d" % (self.name, self.num_embeddings,
                                              self.embedding_dim, self.mode, self.step)
        if self.padding_idx is not None:
            s += ", padding_idx=%d" % self.padding_idx
        if self.include_last_offset:
            s += ", include_last_offset=True"
        return s

    # ---- forward ----

    def _bags(self, input, offsets):
        """(ids as one int64 row, bag offsets as torch takes them, the end of the last bag)
        from forward's input and offsets, checked as torch checks them."""
        if not isinstance(input, torch.Tensor):
            raise _invalid("input: a torch tensor of ids expected, got %s" % type(input).__name__)
        if input.dtype not in (torch.int64, torch.int32):
            raise _invalid("input: int64 or int32 ids expected, got %s" % input.dtype)
        if input.dim() == 2:
            if offsets is not None:
                raise _invalid("offsets: with 2-D input (bags of fixed length, one per row) "
                               "offsets has to be None, got %s" % type(offsets).__name__)
            b, n = input.shape
            ids = input.reshape(-1).to(torch.int64)
            # torch's own 2-D path: one offset per row (then include_last_offset as given).
            offsets = torch.arange(0, b * n, n) if n else torch.zeros(b, dtype=torch.int64)
        elif input.dim() == 1:
            if offsets is None:
                raise _invalid("offsets: with 1-D input a 1-D tensor of bag starts is needed, "
                               "got None")
            if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1 or \
                    offsets.dtype not in (torch.int64, torch.int32):
                raise _invalid("offsets: a 1-D int64 or int32 tensor expected, got %s"
                               % ("%s of shape %s" % (offsets.dtype, tuple(offsets.shape))
                                  if isinstance(offsets, torch.Tensor)
                                  else type(offsets).__name__))
            ids = input.to(torch.int64)
            offsets = offsets.to(torch.int64)
        else:
            raise _invalid("input: a 1-D (with offsets) or 2-D tensor expected, got %d-D"
                           % input.dim())
        ids, offsets = ids.cpu().contiguous(), offsets.cpu().contiguous()
        n = ids.numel()
        if self.include_last_offset and offsets.numel() == 0:
            raise _invalid("offsets: include_last_offset needs at least one offset (the end)")
        if offsets.numel():
            if int(offsets[0]) != 0:
                raise _invalid("offsets: offsets[0] has to be 0 (the first bag starts at "
                               "position 0), got %d" % int(offsets[0]))
            if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
                raise _invalid("offsets: bag starts must not decrease")
            if int(offsets[-1]) > n:
                raise _invalid("offsets: offsets[-1] can not be greater than input's length "
                               "%d, got %d" % (n, int(offsets[-1])))
        end = int(offsets[-1]) if self.include_last_offset else n
        head = ids[:end]
        bad = (head < 0) | (head >= self.num_embeddings)
        if bool(bad.any()):
            j = int(bad.nonzero()[0, 0])
            raise _invalid("input: id %d at position %d is outside 0..%d"
                           % (int(head[j]), j, self.num_embeddings - 1))
        return ids, offsets, end

    def _weights(self, per_sample_weights, input):
        if per_sample_weights is None:
            return None
        if self.mode != "sum":
            raise _invalid("per_sample_weights: only supported for mode='sum' (got mode=%r)"
                           % self.mode)
        if not isinstance(per_sample_weights, torch.Tensor) or \
                not per_sample_weights.is_floating_point():
            raise _invalid("per_sample_weights: a float tensor of input's shape expected, got "
                           "%s" % (per_sample_weights.dtype if isinstance(
                               per_sample_weights, torch.Tensor)
                               else type(per_sample_weights).__name__))
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise _invalid("per_sample_weights: shape %s, want input's %s"
                           % (tuple(per_sample_weights.shape), tuple(input.shape)))
        return per_sample_weights.reshape(-1).to(torch.float32)

    def forward(self, input, offsets=None, per_sample_weights=None):
        """torch.nn.EmbeddingBag's forward: 2-D input (bags of fixed length) or 1-D input and
        offsets (include_last_offset as constructed), per_sample_weights (mode sum), empty
        bags giving zeros, padding_idx excluded from its bag and from mean's count. Pulls the
        unique ids of the batch (padding and ids outside every bag left out) at version
        ``self.step``. Training with grad enabled: the result is differentiable and its
        backward leaves this pass's gradient for ``push()``."""
        ids, offsets, end = self._bags(input, offsets)
        psw = self._weights(per_sample_weights, input)
        n = ids.numel()
        used = torch.arange(n) < end
        if self.padding_idx is not None:
            used &= ids != self.padding_idx
        pos_ids = ids[used]
        uniq, inverse = torch.unique(pos_ids, sorted=True, return_inverse=True)
        rows = torch.empty((uniq.numel(), self.embedding_dim), dtype=torch.float32)
        if uniq.numel():
            self._call(self.client.pull_rows, self.table, self.step, uniq.numpy(),
                       rows.numpy())
        zero = torch.zeros((1, self.embedding_dim), dtype=torch.float32)
        train = self.training and torch.is_grad_enabled()
        local = torch.empty(n, dtype=torch.int64)
        if train:
            # One leaf row per used position: its .grad is that position's gradient.
            leaf = rows.index_select(0, inverse).requires_grad_(True)
            weight = torch.cat([leaf, zero])
            local.fill_(leaf.shape[0])
            local[used] = torch.arange(leaf.shape[0])
            self._pending.append((pos_ids.numpy(), leaf))
        else:
            weight = torch.cat([rows, zero])
            local.fill_(rows.shape[0])
            local[used] = inverse
        if self.include_last_offset:
            # The same bags without it: torch 1.13 gets it wrong in mode mean (the last bag
            # divided by the positions up to the input's end) and in backward (garbage
            # gradients for positions after the last offset).
            offsets, local = offsets[:-1], local[:end]
            psw = None if psw is None else psw[:end]
        if offsets.numel() == 0:
            return torch.zeros((0, self.embedding_dim), dtype=torch.float32)
        return F.embedding_bag(local, weight, offsets, mode=self.mode,
                               per_sample_weights=psw, padding_idx=weight.shape[0] - 1)

    def prefetch(self, input):
        """A hint for a batch to come (the data loader's next one): its ids (any shape, int
        tensor or array; padding_idx and repeats left out) are announced to the shards,
        which read those of their rows that are only on their disk tier into memory while
        this step computes (docs/embeddings.md, "Prefetch"). Returns at once; changes no row
        and no step."""
        ids = torch.as_tensor(input).reshape(-1).to(torch.int64)
        if self.padding_idx is not None:
            ids = ids[ids != self.padding_idx]
        ids = torch.unique(ids)
        if ids.numel():
            self.client.prefetch_rows(self.table, ids.numpy())

    # ---- the step ----

    @staticmethod
    def _check_local_batch(local_batch):
        if local_batch is not None and (not _is_int(local_batch) or local_batch < 0):
            raise _invalid("local_batch: the number of samples the loss was averaged over "
                           "(an int >= 0) expected, got %r" % (local_batch,))

    def _factor(self, local_batch):
        """What the gradient is multiplied by before the push (None: as it is), as
        ParameterServer's local_batch: the loss was a mean over that many samples."""
        self._check_local_batch(local_batch)
        if local_batch is not None:
            return local_batch
        if self.loss_reduction == "sum":
            return None
        if self.local_batch is None:
            raise _invalid("local_batch: loss_reduction='mean' multiplies this rank's mean "
                           "gradient by the samples it averaged over: pass push(local_batch=n) "
                           "or EmbeddingBag(..., local_batch=n), or loss_reduction='sum'")
        return self.local_batch

    def push(self, local_batch=None, slot=None):
        """Pushes step ``self.step``: one gradient row per input position of every training
        forward pass since the last push whose result was backpropagated (multiplied by
        ``local_batch``, or the constructor's, under loss_reduction "mean"), or zero ids when
        there was none: every rank calls it every step. Then ``self.step`` goes up by one,
        which it returns. A push that raises leaves the step and what it would push as they
        were.

        ``slot`` (elastic jobs): the passes since the last push are slot ``slot``'s (one of
        ``client.slots()``; default this rank's), pushed as that slot; ``self.step`` stays
        (the trainer sets it to ``ps.version`` before each step: module doc). Outside elastic
        jobs a slot other than the rank is refused."""
        factor = self._factor(local_batch)
        elastic = self._elastic
        if slot is not None and (not _is_int(slot) or not 0 <= slot < self.client.workers):
            raise _invalid("slot: a rank 0..%d expected, got %r"
                           % (self.client.workers - 1, slot))
        if slot is not None and not elastic and slot != self.client.rank:
            raise _invalid("slot: %d: this job is not elastic; its one slot is rank %d's "
                           "(connect with elastic=True)" % (slot, self.client.rank))
        if elastic and slot is None:
            slot = self.client.rank
        ids, grads = [], []
        for pos_ids, leaf in self._pending:
            if leaf.grad is None:    # a forward whose loss was not backpropagated
                continue
            g = leaf.grad.detach().contiguous().numpy().reshape(-1)
            if factor is not None:
                g = g * np.float32(factor)
            ids.append(pos_ids)
            grads.append(g)
        ids = np.ascontiguousarray(np.concatenate(ids) if ids else np.empty(0, np.int64),
                                   dtype=np.int64)
        grads = np.ascontiguousarray(np.concatenate(grads) if grads
                                     else np.empty(0, np.float32), dtype=np.float32)
        if elastic:
            self._call(self.client.push_rows, self.table, self.step, ids, grads, slot)
        else:
            self._call(self.client.push_rows, self.table, self.step, ids, grads)
        self._pending = []
        if not elastic:
            self.step += 1
        return self.step

    def _call(self, fn, *args):
        """A table call of the client. tessera.Rollback (a shard holding rows went, and the
        cluster took the job back to its last snapshot; docs/embeddings.md, "When a shard
        goes"): the module goes back to ``client.resume_step`` with nothing of this step kept,
        and the error goes on to the trainer, which calls its ParameterServer's
        ``rolled_back()`` and trains on from that step. tessera.Slots (an elastic job's slots
        changed hands): nothing of this step kept; the trainer computes again the step its
        ParameterServer's ``recover()`` returns."""
        try:
            return fn(*args)
        except tessera.Rollback:
            self.step = self.client.resume_step
            self.discard()
            raise
        except tessera.Slots:
            self.discard()
            raise

    def discard(self):
        """Drops what this step's forward and backward passes left (a step the trainer
        abandons, or computes again)."""
        self._pending = []

    def weight_rows(self, ids):
        """The rows of ``ids`` (any order, repeats allowed) at version ``self.step``, as a
        float32 tensor of shape (len(ids), embedding_dim): for evaluation and checks."""
        a = np.ascontiguousarray(torch.as_tensor(ids).reshape(-1).cpu().numpy())
        if a.dtype.kind not in "iu":
            raise _invalid("ids: integer ids expected, got %s" % a.dtype)
        a = a.astype(np.int64, copy=False)
        bad = (a < 0) | (a >= self.num_embeddings)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise _invalid("ids: id %d at position %d is outside 0..%d"
                           % (int(a[j]), j, self.num_embeddings - 1))
        out = np.empty((a.size, self.embedding_dim), np.float32)
        if a.size:
            self.client.pull_rows(self.table, self.step, a, out)
        return torch.from_numpy(out)
