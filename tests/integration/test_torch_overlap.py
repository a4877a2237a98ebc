#!/usr/bin/python3
"""test_torch_overlap.py - tessera.torch with overlap=True (python/tessera/_overlap.py).

A master and two shards run as processes (`tessera up`, mutual TLS); two ranks train a small module from two threads of
this process (each with its own module and client), with and without overlap, float and exact
(exact with two micro-batches per rank: the first under ps.no_sync() and accumulate(), the
last pushing from backward). Checked: every step's gradients and the final parameters are the
same bits with overlap as without (the test fails if a bucket pushed anything else than the
non-overlapped step would, e.g. p.grad without the accumulated sum), and the pushes really are
queued during backward (the last layer's bucket before backward reaches the input) and in
reverse order, the pulls in forward order; a push the shard refuses raises the shard's error
from step(), a pull that times out raises DEADLINE_EXCEEDED from the next forward pass
("forward") or from step() ("bucket"), with nothing left queued, and close() stops the
communication thread; misuse (accumulate after an armed backward, two backward passes, a bad
bucket_bytes or mode) raises InvalidArgument. Both modes: "forward" (pulls queued by step()
in forward order) and "bucket" (each bucket's pull in the exchange of its push).

Environment (ctest sets it): PYTHONPATH with build/python (the binding) and build/gen/python.
"""
import contextlib
import os
import sys
import threading
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

try:
    import numpy as np
    import tessera
    import tessera.torch
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.stderr.write("test_torch_overlap: %s: build the binding and put build/python on "
                     "PYTHONPATH; torch is Debian's python3-torch\n" % e)
    sys.exit(1)

PART = 16384   # bytes per partition: the first layer's weight spreads over both shards
STEPS = 4


_SEEDED = threading.Lock()   # ranks run as threads: torch's generator is the process's


def model():
    """The same weights every time (attach starts from rank 0's)."""
    with _SEEDED:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(),
                                   torch.nn.Linear(96, 48), torch.nn.ReLU(),
                                   torch.nn.Linear(48, 4))


def data(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 64, generator=g), torch.randint(0, 4, (8,), generator=g)


class Recorder:
    """Stands in for ps.client, noting the order of push_some and pull_some calls."""

    def __init__(self, client):
        self.client, self.calls = client, []

    def push_some(self, step, ids, grads, params=None):
        self.calls.append(("push", tuple(ids)))
        return self.client.push_some(step, ids, grads, params)

    def step_some(self, step, ids, grads, params):
        self.calls.append(("step", tuple(ids)))
        return self.client.step_some(step, ids, grads, params)

    def pull_some(self, version, ids, params):
        self.calls.append(("pull", tuple(ids)))
        return self.client.pull_some(version, ids, params)

    def __getattr__(self, name):
        return getattr(self.client, name)


class Overlap(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        # A default `tessera up` (mutual TLS): the binding reads $TESSERA_TLS_DIR.
        _, cls.addr = cls.c.tessera_up(["--shards", "2"])
        os.environ.setdefault("TESSERA_LOG", "warn")

    def attach(self, m, job, **kw):
        opts = dict(master=self.addr, job=job, batch=16, seed=3,
                    optimizer="momentum:lr=0.05", partition_bytes=PART, timeout_ms=20000,
                    loss_reduction="sum")
        opts.update(kw)
        return tessera.torch.attach(m, **opts)

    def train(self, job, exact, overlap, rank, workers, out, bucket_bytes=2048, micro=2, **kw):
        """One rank's STEPS steps (exact: micro backward passes a step); out[rank] = (gradients
        of each step, params_sha256, whether the first bucket was queued during backward, the
        client's calls). kw: more attach() options."""
        m = model()
        ps = self.attach(m, job, rank=rank, workers=workers, exact=exact, overlap=overlap,
                         bucket_bytes=bucket_bytes, **kw)
        rec = ps.client = Recorder(ps.client)
        grads, early = [], []
        with ps:
            for step in range(STEPS):
                x, y = data(step, rank)
                halves = [(x[:4], y[:4]), (x[4:], y[4:])] if exact and micro == 2 else [(x, y)]
                for k, (xb, yb) in enumerate(halves):
                    last = k == len(halves) - 1
                    m.zero_grad(set_to_none=True)
                    xb = xb.clone().requires_grad_()
                    # Runs once backward reaches the input: after every parameter's hook.
                    xb.register_hook(lambda g: early.append(
                        ps.overlap and ps._pushes[0] is not None))
                    loss = F.cross_entropy(m(xb), yb, reduction="sum")
                    if overlap and not last:
                        with ps.no_sync():
                            loss.backward()
                        ps.accumulate()
                    else:
                        loss.backward()
                        if exact and not overlap and micro == 2:
                            ps.accumulate()
                grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]).clone())
                ps.step()
            digest = ps.params_sha256()
            self.assertEqual(ps.verify()["differing"], 0)
            thread = ps._comm._t if overlap else None
            nb = len(ps._buckets) if overlap else 0
        if thread is not None:
            self.assertFalse(thread.is_alive(), "close() stops the communication thread")
        out[rank] = (grads, digest, early, rec.calls, nb)

    def two_ranks(self, job, exact, overlap, **kw):
        out, errors = {}, []

        def run(r):
            try:
                self.train(job, exact, overlap, r, 2, out, **kw)
            except Exception as e:   # reported by the main thread
                errors.append(e)
        threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(errors, errors)
        return out

    def test_same_bits_as_without_overlap(self):
        for exact, mode in ((False, "forward"), (True, "forward"), (False, "bucket"),
                            (True, "bucket")):
            with self.subTest(exact=exact, mode=mode):
                plain = self.two_ranks("plain-%d-%s" % (exact, mode), exact, False)
                over = self.two_ranks("over-%d-%s" % (exact, mode), exact, mode)
                for r in range(2):
                    for s in range(STEPS):
                        self.assertTrue(torch.equal(plain[r][0][s], over[r][0][s]),
                                        "rank %d step %d: gradients differ" % (r, s))
                    self.assertEqual(plain[r][1], over[r][1], "rank %d: parameters" % r)
                self.assertEqual(over[0][1], over[1][1])
                # Overlap did happen: the last layer's bucket was queued before backward
                # reached the input, at every backward that pushes.
                self.assertTrue(over[0][2][-1])
                self.assertFalse(any(plain[0][2]))
                calls, nb = over[0][3], over[0][4]   # the first step's calls
                pushes = [ids for kind, ids in calls if kind != "pull"][:nb]
                pulls = [ids for kind, ids in calls if kind == "pull"][:nb]
                self.assertGreater(len(pushes), 1, "several buckets")
                self.assertEqual(pushes, sorted(pushes, reverse=True), "last layers first")
                self.assertEqual(pushes[0][-1], 5)   # the last bias first
                if mode == "forward":
                    self.assertEqual(pulls, sorted(pulls), "first layers first")
                    self.assertEqual({k for k, _ in calls}, {"push", "pull"})
                else:   # each bucket's pull with its push
                    self.assertEqual({k for k, _ in calls}, {"step"})

    def test_push_refused_raises_from_step(self):
        m = model()
        ps = self.attach(m, "refused", overlap=True)
        thread = ps._comm._t
        # This rank's push of step 1 (attach took step 0) for tensor 0 goes first: the
        # overlapped one repeats it.
        ps.client.push(0, 1, np.zeros(m[0].weight.numel(), np.float32))
        x, y = data(0, 0)
        F.cross_entropy(m(x), y).backward()
        with self.assertRaises(tessera.Error) as cm:
            ps.step()
        # The shard's refusal of a push of a counted slot and step with other bytes (lib/ps/
        # part.h, "Duplicates"): PERMISSION_DENIED since pushes are compared.
        self.assertEqual(cm.exception.code, "PERMISSION_DENIED", cm.exception.message)
        self.assertIn("differs from the one counted", cm.exception.message)
        self.assertEqual(ps.version, 1)
        self.assertTrue(all(e is None for e in ps._pushes + ps._pulls), "nothing queued")
        self.assertIsNone(ps._comm.error, "raised once")
        ps.close()
        self.assertFalse(thread.is_alive())

    def test_pull_timeout_raises_in_the_trainers_thread(self):
        for mode in ("forward", "bucket"):
            with self.subTest(mode=mode):
                m = model()
                # Two workers; rank 1 attaches (attach's first step is collective) and then
                # never steps: rank 0's pull of version 2 times out.
                other = {}
                t = threading.Thread(target=lambda: other.update(ps=self.attach(
                    model(), "timeout-" + mode, rank=1, workers=2, timeout_ms=20000)))
                t.start()
                ps = self.attach(m, "timeout-" + mode, rank=0, workers=2, overlap=mode,
                                 timeout_ms=1500)
                t.join()
                thread = ps._comm._t
                x, y = data(0, 0)
                F.cross_entropy(m(x), y).backward()
                with self.assertRaises(tessera.Error) as cm:
                    if mode == "forward":
                        self.assertEqual(ps.step(), 2)   # pushed; the pulls are queued
                        m(x)                             # waits for fc1's pull
                    else:
                        ps.step()                        # the pulls came with the pushes
                self.assertEqual(cm.exception.code, "DEADLINE_EXCEEDED")
                self.assertTrue(all(e is None for e in ps._pushes + ps._pulls),
                                "nothing queued")
                ps.close()
                other["ps"].close()
                self.assertFalse(thread.is_alive())

    def test_exact_float_pushes(self):
        """exact_push="float" (one backward a step, p.grad pushed as it is and rounded by the
        shards) ends on the bits of int64 pushes, with and without overlap and zero-copy
        buffers; summing micro-batches is refused by name, since a float sum is not exact."""
        want = self.two_ranks("xf-fixed", True, False, micro=1)[0][1]
        for overlap, buffers in ((False, False), (False, True), ("bucket", False),
                                 ("forward", True)):
            with self.subTest(overlap=overlap, buffers=buffers):
                got = self.two_ranks("xf-%s-%d" % (overlap, buffers), True, overlap, micro=1,
                                     exact_push="float", buffers=buffers)
                self.assertEqual(got[0][1], want)
                self.assertEqual(got[1][1], want)
        for overlap in (False, True):
            m = model()
            with tessera.torch.attach(m, batch=8, exact=True, exact_push="float",
                                      overlap=overlap, loss_reduction="sum") as ps:
                x, y = data(0, 0)
                with ps.no_sync() if overlap else contextlib.nullcontext():
                    F.cross_entropy(m(x), y).backward()
                if not overlap:
                    ps.accumulate()
                with self.assertRaisesRegex(tessera.InvalidArgument, "exact_push"):
                    ps.accumulate()

    def test_misuse(self):
        m = model()
        with tessera.torch.attach(m, batch=8, overlap=True) as ps:
            x, y = data(0, 0)
            F.cross_entropy(m(x), y).backward()
            with self.assertRaisesRegex(tessera.InvalidArgument, "no_sync"):
                ps.accumulate()
            with self.assertRaisesRegex(tessera.InvalidArgument, "local_batch"):
                ps.step(local_batch=8)
            with self.assertRaisesRegex(tessera.InvalidArgument, "second backward"):
                F.cross_entropy(m(x), y).backward()
            ps.step()
            self.assertEqual(ps.version, 2)
        with self.assertRaisesRegex(tessera.InvalidArgument, "bucket_bytes"):
            tessera.torch.attach(model(), batch=8, overlap=True, bucket_bytes=-1)
        with self.assertRaisesRegex(tessera.InvalidArgument, "overlap"):
            tessera.torch.attach(model(), batch=8, overlap="sideways")


if __name__ == "__main__":
    unittest.main()
