"""tessera._overlap - communication hidden behind compute, for tessera.torch (overlap=True).

Backward produces the gradients of the last layers first. An AccumulateGrad hook on every
parameter (the node autograd runs once p.grad holds the parameter's whole gradient: DDP's way
in torch 1.13, which has no register_post_accumulate_grad_hook) counts the parameters of its
bucket; a full bucket (parameters in reverse registration order, closed once it holds
bucket_bytes, as DDP groups them) is handed to a communication thread while backward goes on. Then, by
``overlap``:
  - "bucket" (what True means): the bucket's push and the pull of its next version go in one
    exchange (tessera_step_some), so each partition's pull follows its push and both
    directions of a link carry data at once; ``ps.step()`` pushes what no hook did
    (parameters without a gradient, a step with no armed backward) and waits for the rest.
  - "forward": the bucket is pushed alone (tessera_push_some); ``ps.step()`` waits for the
    pushes' acknowledgements and queues the pulls bucket by bucket in forward order (the
    first layers first, as BytePS schedules them), and returns at once. A forward pre-hook
    on each module that owns parameters waits for their bucket's pull before the module
    runs, so the pulls of the later layers overlap the forward pass of the first ones, and the
    wait for the slowest worker overlaps whatever the trainer does before its next forward.

The thread makes every SDK call of the handle while steps are in flight (an SDK handle is
used by one thread at a time; the binding's lock serialises the trainer's own calls with it).
A call that fails stops the calls queued after it (their gradient sums are still made); the
failure is raised in the trainer's thread, as the same tessera exception, by the next wait:
step() for a push (and "bucket"'s pulls), the next forward pass, ps.wait(), step() or close()
for "forward"'s pulls. Nothing is left queued when it is raised.

Bits: a bucket's push carries exactly what step() would have pushed for those parameters
(accumulate()'s int64 or float sum with the last micro-batch added the same way, or p.grad), so
the shards see the same sums and the parameters are the same bits as without overlap.
"""
import contextlib
import queue
import threading

import numpy as np
import torch

import tessera

#: What overlap=True means: "forward" (pulls queued by step() in forward order, each waited
#: for by the forward pre-hook of its module) or "bucket" (each bucket's pull in the same
#: exchange as its push, during backward). Measured with bench/torch_overlap.py.
DEFAULT_OVERLAP = "bucket"

#: Bytes of gradients per bucket (float32 bytes of the parameters): smaller buckets start
#: pushing sooner, but each is one more exchange and, in BSP, one more wait for the slowest
#: worker. 1 MiB, DDP's own first bucket (not tuned: docs/python.md, "Overlap").
DEFAULT_BUCKET_BYTES = 1 << 20


class _Comm:
    """A thread running queued jobs in order. A job is fn(send): it makes its sums whatever
    happens, and its SDK call only while send is True (no earlier job failed)."""

    def __init__(self):
        self._q = queue.SimpleQueue()
        self.error = None
        self._t = threading.Thread(target=self._run, name="tessera-comm", daemon=True)
        self._t.start()

    def submit(self, fn):
        ev = threading.Event()
        self._q.put((fn, ev))
        return ev

    def _run(self):
        while True:
            job = self._q.get()
            if job is None:
                return
            fn, ev = job
            try:
                fn(self.error is None)
            except BaseException as e:   # raised in the trainer's thread by the next wait
                if self.error is None:
                    self.error = e
            ev.set()

    def stop(self):
        self._q.put(None)
        self._t.join()


class Overlap:
    """The overlap half of tessera.torch.ParameterServer (which provides client, params, ids,
    version, exact, _fixed, _acc, _pending, _grad_bufs, _views, _invalid, _grad_array, _share,
    _dummy, _bufs, _buf_ids, _arm_buffers, _outs, _updated and _lr_changes)."""

    def _start_overlap(self, how, bucket_bytes):
        if how is True:
            how = DEFAULT_OVERLAP
        if how not in ("forward", "bucket"):
            raise self._invalid("overlap: False, True, \"forward\" or \"bucket\" expected, "
                                "got %r" % (how,))
        self._pull_with_push = how == "bucket"
        self._share(None, micro=self._micro is not None)   # a batch that does not split: now
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or \
                bucket_bytes < 0:
            raise self._invalid("bucket_bytes: an int >= 0 (bytes of gradients per bucket) "
                                "expected, got %r" % (bucket_bytes,))
        # Buckets in push order: the parameters in reverse registration order, a bucket closed
        # once it holds bucket_bytes or more (DDP's rule: a big parameter takes the small ones
        # before it along, rather than leaving them a bucket, and an exchange, of their own).
        self._buckets, cur, size = [], [], 0
        for i in reversed(range(len(self.params))):
            cur.append(i)
            size += self.params[i].numel() * 4
            if size >= bucket_bytes:
                self._buckets.append(cur)
                cur, size = [], 0
        if cur:
            self._buckets.append(cur)
        self._bucket_of = {i: b for b, bucket in enumerate(self._buckets) for i in bucket}
        self._bucket_ids = [sorted(self.ids[i] for i in bucket) for bucket in self._buckets]
        self._armed = True
        self._pushes = [None] * len(self._buckets)   # this step's push of each bucket (Event)
        self._pulls = [None] * len(self._buckets)    # the queued pull of each bucket (Event)
        self._fired = [set() for _ in self._buckets]
        self._step_pending = False   # _pending when this step's first bucket went
        self._hooks, self._nodes = [], []
        with torch.enable_grad():
            for i, p in enumerate(self.params):
                if not p.requires_grad:
                    continue
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                self._nodes.append(node)   # the hook lives as long as the node
                self._hooks.append(node.register_hook(self._hook_of(i)))
        index = {id(p): i for i, p in enumerate(self.params)}
        for m in self.module.modules():   # each module that owns parameters waits for them
            mine = {self._bucket_of[index[id(p)]] for p in m.parameters(recurse=False)
                    if id(p) in index}
            if mine:
                self._hooks.append(m.register_forward_pre_hook(
                    self._pre_hook_of(sorted(mine, reverse=True))))
        self._comm = _Comm()

    @property
    def overlap(self):
        """attach's overlap: False, "forward" or "bucket"."""
        return self._comm is not None and ("bucket" if self._pull_with_push else "forward")

    @contextlib.contextmanager
    def no_sync(self):
        """With overlap: backward passes inside push nothing (DDP's no_sync). Run every
        micro-batch's backward but the last inside it, each followed by ps.accumulate(); the
        last micro-batch's backward, outside, pushes the sums as its gradients come."""
        armed, self._armed = self._armed, False
        try:
            yield
        finally:
            self._armed = armed

    def _hook_of(self, i):
        def hook(grad_inputs, grad_outputs):
            if self._comm is None or not self._armed:
                return
            b = self._bucket_of[i]
            if self._pushes[b] is not None:
                raise self._invalid(
                    "overlap: a second backward pass before ps.step() (%r was pushed already):"
                    " run every micro-batch's backward but the last inside ps.no_sync(), each "
                    "followed by ps.accumulate()" % self.names[i])
            self._fired[b].add(i)
            if len(self._fired[b]) == len(self._buckets[b]):
                self._push_bucket(b, self._share(None, micro=self._pending))
        return hook

    def _pre_hook_of(self, buckets):
        def pre_hook(module, inputs):
            for b in buckets:
                ev = self._pulls[b]
                if ev is not None:
                    ev.wait()
                    self._pulls[b] = None
            self._raise_failure()
        return pre_hook

    def _push_bucket(self, b, local_batch):
        """Queues bucket b's push for this step: its gradients as they are now (p.grad is
        read here, in the trainer's thread), summed the way step() would in the thread."""
        if not any(e is not None for e in self._pushes):   # the step's first bucket
            self._step_pending = self._pending
            if self._fixed and self._acc is None:
                self._acc = [np.empty(p.numel(), np.int64) for p in self.params]
        pending = self._step_pending
        use_acc = self._fixed or pending or self._grad_bufs
        if use_acc:
            self._pending = True   # the sums now hold this step's whole gradient
        idx = sorted(self._buckets[b], key=lambda i: self.ids[i])
        grads = [self._grad_array(i, local_batch) for i in idx]
        frozen = [self.ids[i] for i in idx if not self._updated(i)]
        lrs = self._lr_changes(idx)
        step, params = self.version, self._params_out()

        def job(send):
            out = []
            for i in frozen:   # pushed as assignments without values: they stay as they are
                self.client.assign(i)
            for change in lrs:
                self.client.set_lr(*change)
            for i, g in zip(idx, grads):
                if not self._updated(i):
                    out.append(self._dummy(self.params[i].numel()))
                elif not use_acc:
                    out.append(g)
                    continue
                acc = self._acc[i]
                if self._fixed:
                    (tessera.fixed_add_f32 if pending else tessera.to_fixed)(
                        *((acc, g) if pending else (g, acc)))
                elif pending:
                    acc += g
                else:
                    np.copyto(acc, g)
                out.append(acc)
            if send and self._pull_with_push:
                self.client.step_some(step, self._bucket_ids[b], out, params)
            elif send:
                self.client.push_some(step, self._bucket_ids[b], out, params)
        self._pushes[b] = self._comm.submit(job)

    def _buffers_job(self, step):
        """The step's exchange of the module's buffers (attach's broadcast_buffers): armed and
        pushed from the communication thread, pulled in the same exchange."""
        ids, outs = self._buf_ids, self._outs()
        values = [b.values() for b in self._bufs] if self.rank == 0 else [None] * len(ids)
        dummies = [self._dummy(b.tensor.numel()) for b in self._bufs]

        def job(send):
            if not send:
                return
            for i, v in zip(ids, values):
                self.client.assign(i, v)
            self.client.step_some(step, ids, dummies, outs)
            for b in self._bufs:
                b.landed()
        return job

    def _params_out(self):
        return self._outs()

    def _step_overlap(self, local_batch):
        self.wait()   # the last step's pulls (a parameter no forward used)
        pushed = any(e is not None for e in self._pushes)
        if local_batch is not None and (pushed or self._pending):
            raise self._invalid("local_batch: give it to accumulate() (with overlap, backward "
                                "pushed this step's gradients already)" if pushed else
                                "local_batch: give it to accumulate(), which already summed "
                                "this step's gradients")
        for b, ev in enumerate(self._pushes):
            if ev is None:
                self._push_bucket(b, self._share(local_batch, micro=self._pending))
        if self._bufs:   # rank 0's buffers, assigned and pulled in an exchange of their own
            self._pushes.append(self._comm.submit(self._buffers_job(self.version)))
        for ev in self._pushes:
            ev.wait()
        self._pushes = [None] * len(self._buckets)
        self._fired = [set() for _ in self._buckets]
        self._raise_failure()
        self._pending = False
        self.version += 1
        version, params = self.version, self._params_out()
        if self._pull_with_push:
            return self.version   # the pulls came with the pushes
        for b in reversed(range(len(self._buckets))):   # the first layers first
            def job(send, ids=self._bucket_ids[b]):
                if send:
                    self.client.pull_some(version, ids, params)
            self._pulls[b] = self._comm.submit(job)
        return self.version

    def wait(self):
        """With overlap: waits for the pulls step() queued (the next forward pass does, for
        the parameters it uses): call it before reading parameters outside a forward pass
        (state_dict, a hash). Raises what a pull raised. Without overlap: nothing to do."""
        if self._comm is None:
            return
        for b, ev in enumerate(self._pulls):
            if ev is not None:
                ev.wait()
                self._pulls[b] = None
        self._raise_failure()

    def _raise_failure(self):
        """The communication thread's failure, raised once in this thread, after every queued
        job ended; a rollback sets version to the step the module now holds."""
        err = self._comm.error if self._comm is not None else None
        if err is None:
            return
        for evs in (self._pushes, self._pulls):
            for b, ev in enumerate(evs):
                if ev is not None:
                    ev.wait()
                    evs[b] = None
        self._fired = [set() for _ in self._buckets]
        self._comm.error = None
        if isinstance(err, tessera.Rollback):
            self._pending = False
            self.version = self.client.resume_step
        raise err

    def _stop_overlap(self):
        """Waits for what is queued, stops the thread and removes the hooks."""
        if self._comm is None:
            return
        try:
            self.wait()
        finally:
            for evs in (self._pushes, self._pulls):
                for ev in evs:
                    if ev is not None:
                        ev.wait()
            self._comm.stop()
            self._comm = None
            for h in self._hooks:
                h.remove()
            self._hooks, self._nodes = [], []
