#!/usr/bin/python3
"""test_clip.py - clipping by global norm (tessera_step_clip, Client.step(clip_norm=),
tessera.torch's ps.clip_grad_norm_; docs/training.md, "Clipping by global norm"), on a master
and three shards as processes.

Checked: two float ranks clipping every step end where torch's clip_grad_norm_ of the averaged
gradient followed by SGD ends (within float tolerance), with the norm torch reports, and a
max_norm above the norm leaves the update unclipped; in exact mode two ranks on three shards
and one local rank give the same bits and the same norm; tessera.torch's ps.clip_grad_norm_
matches torch on one process with BatchNorm buffers in the step (assigned, not clipped); the
refusals (max_norm, ssp or asp) name what is wrong; reduce mode clips on the workers with
PS mode's bits; with --replicas 2, a shard
killed while two exact ranks clip every step does not change the bits.

Environment (ctest sets it): PYTHONPATH with build/python (the binding) and build/gen/python.
"""
import sys
import threading
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from test_replication import start_cluster  # noqa: E402

import numpy as np  # noqa: E402
import tessera  # noqa: E402
import torch  # noqa: E402
import tessera.torch  # noqa: E402,F401

N, PART = 5000, 4096     # "w": 5 partitions of 1024 floats, spread over the shards
LR, BATCH = 0.5, 4
MAX_NORM = 0.75          # well below the averaged gradient's norm: every step clips


def grads(seed, steps, ranks):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(N).astype(np.float32),
              rng.standard_normal(10).astype(np.float32)) for _ in range(ranks)]
            for _ in range(steps)]


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def in_threads(rank, n, timeout):
    """rank(r) for r in 0..n-1, each in a thread (a pull waits for the other ranks' pushes):
    the exceptions they raised."""
    errors = []

    def run(r):
        try:
            rank(r)
        except Exception as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors


def local_exact(g, clips, optimizer):
    """One local exact rank pushing the int64 sum of every rank's g[step]: (params, norms)."""
    with tessera.Client(batch=BATCH, optimizer=optimizer, exact=True) as lc:
        Clip.register(lc)
        params = [np.empty(N, np.float32), np.empty(10, np.float32)]
        norms = []
        for s, step in enumerate(g):
            sums = []
            for k in range(2):
                acc = tessera.to_fixed(step[-1][k], np.empty(step[-1][k].size, np.int64))
                for r in range(len(step) - 1):
                    tessera.fixed_add_f32(acc, step[r][k])
                sums.append(acc)
            norms.append(lc.step(s, sums, params, clip_norm=clips[s]))
    return params, norms


class Clip(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_cluster(cls, 3, replicas=1)

    def client(self, job, **kw):
        opts = dict(master=self.master.addr, job=job, batch=BATCH,
                    optimizer="sgd:lr=%g" % LR, timeout_ms=20000)
        opts.update(kw)
        return tessera.Client(**opts)

    @staticmethod
    def register(c):
        return (c.register("w", (N,), init="normal:1", seed=3, partition_bytes=PART),
                c.register("b", 10, init="uniform:0.5", seed=3))

    def ranks(self, job, g, clips, **kw):
        """Every rank of job in a thread, stepping with g[step][rank] clipped to clips[step]:
        {rank: (params, [norm per step])}."""
        results = {}

        def rank(r):
            with self.client(job, rank=r, workers=len(g[0]), **kw) as c:
                self.register(c)
                params = [np.empty(N, np.float32), np.empty(10, np.float32)]
                norms = [c.step(s, list(g[s][r]), params, clip_norm=clips[s])
                         for s in range(len(g))]
                results[r] = (params, norms)

        errors = in_threads(rank, len(g[0]), 120)
        self.assertFalse(errors, errors)
        return results

    def test_float_matches_torch(self):
        """Two float ranks, every step clipped (the last with a max_norm above the norm, which
        must not change the update): torch's clip_grad_norm_ of the averaged gradient, then
        SGD, from the same start, ends on the same values within float tolerance, with the
        norms torch returned. Both ranks see the same norm bits, and a reduce job (the workers
        clip) the same bits as the bsp one."""
        g = grads(7, 4, 2)
        clips = [MAX_NORM, MAX_NORM, MAX_NORM, 1e6]
        with self.client("clip-start") as c:   # the start values, as the shards draw them
            self.register(c)
            start = [c.pull(0, 0, np.empty(N, np.float32)), c.pull(1, 0, np.empty(10, np.float32))]
        got = self.ranks("clip-float", g, clips)
        for k in range(2):
            np.testing.assert_array_equal(bits(got[0][0][k]), bits(got[1][0][k]))
        self.assertEqual(got[0][1], got[1][1])
        # Reduce mode: the workers clip the averaged gradient they pull, summing its squares
        # as the shards do, so the bits are PS mode's.
        red = self.ranks("clip-reduce", g, clips, mode="reduce")
        for r in range(2):
            self.assertEqual(red[r][1], got[0][1])
            for k in range(2):
                np.testing.assert_array_equal(bits(red[r][0][k]), bits(got[0][0][k]))
        ps = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in start]
        opt = torch.optim.SGD(ps, lr=LR)
        inv = np.float32(1.0 / BATCH)
        for s, step in enumerate(g):
            for k, p in enumerate(ps):   # the shards' average: (sum) * float32(1 / batch)
                p.grad = torch.from_numpy((step[0][k] + step[1][k]) * inv)
            norm = float(torch.nn.utils.clip_grad_norm_(ps, clips[s]))
            self.assertAlmostEqual(got[0][1][s] / norm, 1.0, delta=1e-5, msg="step %d" % s)
            opt.step()
        self.assertGreater(got[0][1][0], 2 * MAX_NORM)   # the first steps did clip
        for k, p in enumerate(ps):
            np.testing.assert_allclose(got[0][0][k], p.detach().numpy(), rtol=1e-5, atol=1e-6)
        # An unclipped run ends elsewhere: clipping did something.
        self.assertFalse(np.allclose(got[0][0][0], start[0] - LR * inv * sum(
            st[0][0] + st[1][0] for st in g), rtol=1e-3))

    def test_exact_same_bits_for_any_workers_and_shards(self):
        """Exact mode: two ranks on three shards (float pushes the shards round) and one local
        rank pushing the int64 sum end on the same bits, with the same norm bits."""
        g = grads(11, 3, 2)
        clips = [MAX_NORM] * 3
        got = self.ranks("clip-exact", g, clips, exact=True, exact_push="float")
        params, norms = local_exact(g, clips, "sgd:lr=%g" % LR)
        for r in range(2):
            self.assertEqual(got[r][1], norms)
            for k in range(2):
                np.testing.assert_array_equal(bits(got[r][0][k]), bits(params[k]))
        self.assertGreater(norms[0], MAX_NORM)

    def test_torch_clip_grad_norm(self):
        """tessera.torch: ps.clip_grad_norm_ before ps.step(), with BatchNorm buffers assigned in
        the same step, matches torch's clip_grad_norm_ + SGD on one process (float tolerance);
        ps.grad_norm is torch's norm."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.BatchNorm1d(16),
                                    torch.nn.ReLU(), torch.nn.Linear(16, 3))
        ref = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.BatchNorm1d(16),
                                  torch.nn.ReLU(), torch.nn.Linear(16, 3))
        ref.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = torch.randn(32, 20), torch.randint(0, 3, (32,))
        ps = tessera.torch.attach(model, master=self.master.addr, job="clip-torch", batch=32,
                                  optimizer="sgd:lr=0.1")
        try:
            for _ in range(3):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                ps.clip_grad_norm_(0.05)
                ps.step()
                model.zero_grad()
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ref(x), y).backward()
                norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05))
                opt.step()
                self.assertAlmostEqual(ps.grad_norm / norm, 1.0, delta=1e-5)
            self.assertGreater(ps.grad_norm, 0.05)
            for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
            with self.assertRaises(tessera.InvalidArgument) as cm:
                ps.clip_grad_norm_(0)
            self.assertIn("max_norm", cm.exception.message)
        finally:
            ps.close()

    def test_refusals(self):
        """max_norm 0, negative, NaN: InvalidArgument naming it, nothing pushed (the step then
        goes through unclipped); asp: UNIMPLEMENTED naming bsp."""
        with self.client("clip-bad") as c:
            self.register(c)
            params = [np.empty(N, np.float32), np.empty(10, np.float32)]
            gs = [np.ones(N, np.float32), np.ones(10, np.float32)]
            for bad in (0.0, -1.0, float("nan")):
                with self.assertRaises(tessera.InvalidArgument) as cm:
                    c.step(0, gs, params, clip_norm=bad)
                self.assertIn("max_norm", cm.exception.message)
            self.assertIsNone(c.step(0, gs, params))   # nothing was held: steps go on
            self.assertIsNone(c.step(1, gs, params))
            self.assertGreater(c.step(2, gs, params, clip_norm=1.0), 1.0)
        with self.client("clip-asp", mode="asp") as c:
            self.register(c)
            with self.assertRaises(tessera.Error) as cm:
                c.step(0, gs, params, clip_norm=1.0)
            self.assertEqual(cm.exception.code, "UNIMPLEMENTED")
            self.assertIn("bsp", cm.exception.message)


class ClipFailover(tl.ClusterCase, unittest.TestCase):
    """A master with --replicas 2 and three shards; one killed (SIGKILL) while two exact
    ranks clip every step: the step in flight goes again on the new heads (a held sum is not
    replicated), and the run ends on the bits of a local run with the same gradients."""
    @classmethod
    def setUpClass(cls):
        start_cluster(cls, 3, replicas=2)

    def test_shard_killed_mid_training(self):
        steps, kill_at = 40, 12
        g = grads(13, steps, 2)
        results = {}

        def rank(r):
            with tessera.Client(master=self.master.addr, job="clip-kill", rank=r, workers=2,
                                batch=BATCH, optimizer="momentum:lr=0.1", exact=True,
                                exact_push="float", timeout_ms=60000) as c:
                Clip.register(c)
                params = [np.empty(N, np.float32), np.empty(10, np.float32)]
                norms = []
                for s in range(steps):
                    if r == 0 and s == kill_at:
                        self.shards[1].signal(9)
                    norms.append(c.step(s, list(g[s][r]), params, clip_norm=MAX_NORM))
                results[r] = (params, norms)

        errors = in_threads(rank, 2, 180)
        self.assertFalse(errors, errors)
        self.assertFalse(self.shards[1].running())
        params, norms = local_exact(g, [MAX_NORM] * steps, "momentum:lr=0.1")
        for r in range(2):
            self.assertEqual(results[r][1], norms)
            for k in range(2):
                np.testing.assert_array_equal(bits(results[r][0][k]), bits(params[k]))


if __name__ == "__main__":
    tl.main()
