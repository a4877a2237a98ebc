#!/usr/bin/python3
"""test_python_binding.py - the Python binding (python/tessera) against a real cluster.

A master and two shards run as processes; tensors are cut into small partitions so that each
spreads over both shards. Checked: push/pull round trips with NumPy arrays and torch tensors
(bit-exact against the optimizer's float32 arithmetic), zero copy (a pull into a tensor's
.numpy() view changes the tensor), the local mode, exact mode and the fixed-point helpers,
two ranks stepping from two Python threads (the GIL is released while a pull waits), and bad
input: every wrong dtype, strided view, length, id, step or option value raises
tessera.InvalidArgument (code INVALID_ARGUMENT) naming the argument, before anything is sent,
so the shards' state is unchanged afterwards and the next valid step works.
Client.buffers (the SDK's zero-copy buffers): the same memory at every call, pulls and pushes
through it (on shm the parameters are the shard's own pages and the shard reads the gradient
where it lies), the same bits as private arrays in exact mode and through tessera.torch, bad
ids and closed clients refused, and arrays that outlive close() still safe to touch.
The master's schedule through the binding (claim_work, tasks): test_python_schedule.py.

Environment (ctest sets it): PYTHONPATH with build/python (the binding) and build/gen/python.
"""
import gc
import os
import signal
import sys
import threading
import time
import unittest
import warnings

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

try:
    import numpy as np
    import tessera
    import tessera.torch
    import torch
except ImportError as e:
    sys.stderr.write("test_python_binding: %s: build the binding (cmake --build build) and "
                     "put build/python on PYTHONPATH; torch is Debian's python3-torch\n" % e)
    sys.exit(1)

N = 5000              # elements of "w": 5 partitions of 1024 floats (PART bytes)
PART = 4096
LR, BATCH = 0.5, 4    # sgd: p -= 0.5 * (sum / 4), exact scalings, one rounding
BIG = 32768           # elements of a tensor the shards keep in a region (>= 64 KiB) ...
BIG_PART = 16384      # ... cut into 8 page-multiple partitions, so that they can be mapped


def expected_sgd(p, *grad_sums):
    """Tessera's float sgd step in float32: p - lr * (sum * (1 / batch))."""
    s = grad_sums[0].copy()
    for g in grad_sums[1:]:
        s = s + g
    return p - np.float32(LR) * (s * np.float32(1.0 / BATCH))


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def addr(a):
    return a.__array_interface__["data"][0]


def memfd_at(pid, name, where=None):
    """Whether process pid maps the memfd `name` (at address where, if given): the SDK's and
    the shards' regions (lib/transport/region.c names them)."""
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == "/memfd:%s" % name:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if where is None or lo <= where < hi:
                    return True
    return False


class BindingCase(tl.ClusterCase):
    """A master and two shards for the class, a client of a job on them, and the check of an
    InvalidArgument; test_python_schedule.py's tests use them too."""
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.master = cls.c.start_master()
        cls.shards = [cls.c.start_shard(cls.master.addr, name="shard%d" % i) for i in range(2)]
        ch = cls.c.channel(cls.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(ch).shards
                                  if s.state == tl.ALIVE) == 2, 15, "2 shards alive")
        # The SDK in this process: warnings only (the servers started above log at info).
        os.environ.setdefault("TESSERA_LOG", "warn")


    def client(self, job_id, **kw):
        opts = dict(master=self.master.addr, job=job_id, batch=BATCH,
                    optimizer="sgd:lr=%g" % LR, timeout_ms=20000)
        opts.update(kw)
        return tessera.Client(**opts)

    def register(self, c):
        w = c.register("w", (N,), init="normal:1", seed=3, partition_bytes=PART)
        b = c.register("b", 10, init="uniform:0.5", seed=3)
        return w, b

    def assert_invalid(self, fn, *needles):
        with self.assertRaises(tessera.InvalidArgument) as cm:
            fn()
        e = cm.exception
        self.assertIsInstance(e, tessera.Error)
        self.assertIsInstance(e, ValueError)
        self.assertEqual((e.code, e.grpc_code), ("INVALID_ARGUMENT", 3))
        for n in needles:
            self.assertIn(n, e.message)
        return e


class Binding(BindingCase, unittest.TestCase):

    # ---- success paths ----

    def test_round_trip_numpy_and_torch(self):
        with self.client("rt") as c:
            w, b = self.register(c)
            self.assertIn(c.transport, ("shm", "tcp"))
            self.assertEqual((c.numel(w), c.numel(b)), (N, 10))
            self.assertEqual((c.version(w), c.version(b)), (0, 0))
            # w's size as given; b's left to the SDK: every shard is on this host, so 4 MiB
            self.assertEqual((c.partition_bytes(w), c.partition_bytes(b)), (PART, 4 << 20))
            self.assertEqual(c.tensors, ("w", "b"))
            p0 = np.empty(N, np.float32)
            self.assertIs(c.pull(w, 0, p0), p0)
            self.assertTrue(np.isfinite(p0).all() and p0.std() > 0.5)
            g = np.random.default_rng(1).standard_normal(N).astype(np.float32)
            c.push(w, 0, g)
            b0 = np.empty(10, np.float32)
            c.pull(b, 0, b0)
            c.push(b, 0, np.ones(10, np.float32))
            p1 = np.empty(N, np.float32)
            c.pull(w, 1, p1)
            np.testing.assert_array_equal(bits(p1), bits(expected_sgd(p0, g)))

            # torch tensors, through step(): parameters change in place, zero copy.
            tw, tb = torch.from_numpy(p1.copy()), torch.zeros(10)
            c.pull(b, 1, tb)
            gw = torch.from_numpy(g)
            gb = torch.ones(10)
            c.step(1, [gw, gb], [tw, tb])
            np.testing.assert_array_equal(bits(tw.numpy()), bits(expected_sgd(p1, g)))
            self.assertEqual(c.stats()["steps"], 1)

            # A pull into a tensor's .numpy() view changes the tensor itself.
            t = torch.zeros(N)
            c.pull(w, 2, t.numpy())
            np.testing.assert_array_equal(bits(t.numpy()), bits(tw.numpy()))
            t2 = torch.zeros(2, N)
            c.pull(w, 2, t2[1])          # a contiguous row of a bigger tensor
            np.testing.assert_array_equal(bits(t2[1].numpy()), bits(tw.numpy()))
            self.assertEqual(float(t2[0].abs().sum()), 0.0)
            self.assertEqual(c.loss_scale, 1.0)
            self.assertTrue(c.verify_local([tw, tb], 2)["differing"] == 0)
        self.assertTrue(c.closed)
        with self.assertRaises(tessera.Error) as cm:
            c.pull(w, 2, t)
        self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")

    def test_local_mode_matches_cluster(self):
        """master 'local' runs the shards' code in-process: same initial bits, same steps."""
        with tessera.Client(batch=BATCH, optimizer="sgd:lr=%g" % LR) as lc, \
                self.client("local-vs-cluster") as rc:
            self.assertEqual(lc.transport, "local")
            ids = [self.register(x) for x in (lc, rc)]
            g = np.linspace(-1, 1, N, dtype=np.float32)
            out = [[np.empty(N, np.float32), np.empty(10, np.float32)] for _ in range(2)]
            for x, (w, b), o in zip((lc, rc), ids, out):
                x.pull(w, 0, o[0])
                x.pull(b, 0, o[1])
            for k in range(2):
                np.testing.assert_array_equal(bits(out[0][k]), bits(out[1][k]))
            for x, o in zip((lc, rc), out):
                x.step(0, [g, np.zeros(10, np.float32)], o)
            np.testing.assert_array_equal(bits(out[0][0]), bits(out[1][0]))

    def test_exact_mode_two_ranks_in_threads(self):
        """Two ranks in two threads of one process: each pull waits for the other rank's push,
        which only works if the binding releases the GIL. Their int64 sums give the same bits
        as one local rank pushing the whole sum."""
        rng = np.random.default_rng(2)
        g = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
        gb = [np.full(10, 0.25 * (i + 1), np.float32) for i in range(4)]

        def fixed_sum(parts):
            acc = tessera.to_fixed(parts[0], np.empty(parts[0].size, np.int64))
            for p in parts[1:]:
                tessera.fixed_add_f32(acc, p)
            return acc

        results, errors = {}, []

        def rank(r):
            try:
                with self.client("exact", exact=True, rank=r, workers=2) as c:
                    w, b = self.register(c)
                    params = [np.empty(N, np.float32), np.empty(10, np.float32)]
                    for step in range(2):   # rank r has micro-batches r and r + 2
                        c.step(step, [fixed_sum([g[r], g[r + 2]]),
                                      fixed_sum([gb[r], gb[r + 2]])], params)
                    results[r] = params
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(errors, errors)
        with tessera.Client(batch=BATCH, optimizer="sgd:lr=%g" % LR, exact=True) as lc:
            self.assertTrue(lc.exact)
            w, b = self.register(lc)
            params = [np.empty(N, np.float32), np.empty(10, np.float32)]
            for step in range(2):
                # Another grouping of the same four terms: integer sums do not care.
                acc = tessera.fixed_add(fixed_sum([g[3], g[0]]), fixed_sum([g[2], g[1]]))
                lc.step(step, [acc, fixed_sum(gb[::-1])], params)
        for r in range(2):
            for k in range(2):
                np.testing.assert_array_equal(bits(results[r][k]), bits(params[k]))

    def test_exact_float_pushes(self):
        """exact_push="float": each rank pushes its float gradient and the shards round it to
        fixed point: 2 ranks over shared memory (the SDK's float32 gradient buffers; a shard
        pairs the two pushes) and 3 over tcp (a shard sums them as exact doubles) give the bits
        of one local rank pushing the int64 sum. A NaN, an Inf or a value of 2^31 fails the
        push in the SDK, naming tensor and element, before anything is sent: the step then
        completes with good gradients."""
        rng = np.random.default_rng(5)
        g = [[rng.standard_normal(BIG).astype(np.float32) for _ in range(3)] for _ in range(3)]
        bad_at = BIG_PART // 4 + 3   # in the second partition
        for transport, ranks in (("shm", 2), ("tcp", 3)):
            with tessera.Client(batch=BATCH, optimizer="sgd:lr=%g" % LR, exact=True) as lc:
                lc.register("big", BIG, init="normal:0.5", seed=6, partition_bytes=BIG_PART)
                want = np.empty(BIG, np.float32)
                for step in range(3):
                    acc = tessera.to_fixed(g[step][ranks - 1], np.empty(BIG, np.int64))
                    for r in range(ranks - 1):
                        tessera.fixed_add_f32(acc, g[step][r])
                    lc.step(step, [acc], [want])
            results, errors = {}, []

            def rank(r):
                try:
                    with self.client("xf-" + transport, exact=True, rank=r, workers=ranks,
                                     exact_push="float", transport=transport) as c:
                        self.assertEqual(c.exact_push, "float")
                        big = c.register("big", BIG, init="normal:0.5", seed=6,
                                         partition_bytes=BIG_PART)
                        params, grad = c.buffers(big)
                        self.assertEqual(grad.dtype, np.float32)
                        for step in range(3):
                            if r == 0 and step == 1:
                                for bad in (np.nan, np.inf, 2.0 ** 31):
                                    grad[:] = g[step][r]
                                    grad[bad_at] = bad
                                    self.assert_invalid(lambda: c.step(step, [grad], [params]),
                                                        "tensor 'big'", "element %d " % bad_at)
                            grad[:] = g[step][r]
                            c.step(step, [grad], [params])
                        results[r] = params.copy()
                except Exception as e:  # reported by the main thread
                    errors.append(e)

            threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertFalse(errors, errors)
            for r in range(ranks):
                np.testing.assert_array_equal(bits(results[r]), bits(want), transport)

    def test_fixed_point_helpers(self):
        out = tessera.to_fixed(np.array([1.0, -0.5, 0.0, 2.0 ** -33], np.float32),
                               np.empty(4, np.int64))
        self.assertEqual(out.tolist(), [1 << 32, -(1 << 31), 0, 0])   # 2^-33: a tie, to even
        acc = np.array([1, 2, 3, 4], np.int64)
        tessera.fixed_add(acc, np.array([10, 20, 30, 40], np.int64))
        tessera.fixed_add_f32(acc, np.array([1.0, 0, 0, 0], np.float32))
        self.assertEqual(acc.tolist(), [11 + (1 << 32), 22, 33, 44])
        self.assertEqual(tessera.FIXED_ONE, 1 << 32)
        before = acc.copy()
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.fixed_add_f32(acc, np.array([0, 0, np.inf, 0], np.float32))
        self.assertIn("inf", cm.exception.message)
        np.testing.assert_array_equal(acc, before)   # refused whole: nothing added
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.to_fixed(np.ones(4, np.float32), np.empty(3, np.int64))
        self.assertIn("to_fixed: out", cm.exception.message)
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.fixed_add(acc, np.ones(4, np.int32))
        self.assertIn("int64", cm.exception.message)
        self.assertIn("int32", cm.exception.message)

    def test_sdk_errors_keep_their_code(self):
        """A refusal decided by a shard comes back as tessera.Error with the gRPC name."""
        # A rollback is an Error of its own kind, with the step to go on from on the client.
        self.assertTrue(issubclass(tessera.Rollback, tessera.Error))
        self.assertFalse(issubclass(tessera.Rollback, tessera.InvalidArgument))
        with self.client("dup") as c:
            self.assertEqual(c.resume_step, 0)
            w, _ = self.register(c)
            g = np.ones(N, np.float32)
            c.push(w, 0, g)
            with self.assertRaises(tessera.Error) as cm:
                c.push(w, 0, g)      # a second push of step 0 by the same rank
            e = cm.exception
            self.assertNotIsInstance(e, tessera.InvalidArgument)
            self.assertEqual((e.code, e.grpc_code), ("FAILED_PRECONDITION", 9))
            self.assertIn("step", e.message)
            self.assertTrue(str(e).startswith("FAILED_PRECONDITION: "))
        with self.client("late", timeout_ms=300) as c:
            w, _ = self.register(c)
            with self.assertRaises(tessera.Error) as cm:
                c.pull(w, 5, np.empty(N, np.float32))   # no one will ever push steps 0..4
            self.assertEqual((cm.exception.code, cm.exception.grpc_code),
                             ("DEADLINE_EXCEEDED", 4))

    # ---- Client.buffers: the SDK's own memory ----

    def test_buffers_are_the_sdks_memory(self):
        """The same arrays at every call; a pull into the read-only params array is accepted
        and writes nothing new; on shm its pages are the shard's, which show the next version
        without a pull, and the shards map the gradient buffer."""
        with self.client("buf") as c:
            w, b = self.register(c)
            big = c.register("big", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
            p, g = c.buffers(big)
            self.assertEqual((p.dtype, g.dtype, p.shape, g.shape),
                             (np.float32, np.float32, (BIG,), (BIG,)))
            self.assertFalse(p.flags.writeable)
            self.assertTrue(g.flags.writeable)
            with self.assertRaises(ValueError):
                p[0] = 1.0
            with self.assertRaises(ValueError):
                p.setflags(write=True)
            p2, g2 = c.buffers(big)
            self.assertEqual((addr(p2), addr(g2)), (addr(p), addr(g)))
            self.assertIsNone(c.buffers(b, grad=False)[1])
            self.assertIsNone(c.buffers(b, params=False)[0])
            ref = np.empty(BIG, np.float32)
            c.pull(big, 0, ref)
            self.assertIs(c.pull(big, 0, p), p)
            np.testing.assert_array_equal(bits(p), bits(ref))
            shm = c.transport == "shm"
            if shm:
                self.assertTrue(memfd_at(os.getpid(), "tessera-params", addr(p)))
                self.assertTrue(memfd_at(os.getpid(), "tessera-grad", addr(g)))
                self.assertTrue(all(memfd_at(s.pid, "tessera-grad") for s in self.shards))
            g[:] = np.linspace(-1, 1, BIG, dtype=np.float32)
            c.step(0, [np.zeros(N, np.float32), np.zeros(10, np.float32), g],
                   [np.empty(N, np.float32), np.empty(10, np.float32), p])
            want = expected_sgd(ref, g)
            np.testing.assert_array_equal(bits(p), bits(want))
            # Step 1 from a private copy of the gradient, pulled into private memory: on shm
            # the params array is the shard's pages and shows version 2 all the same.
            c.push(big, 1, g.copy())
            out = np.empty(BIG, np.float32)
            c.pull(big, 2, out)
            np.testing.assert_array_equal(bits(out), bits(expected_sgd(want, g)))
            np.testing.assert_array_equal(bits(p), bits(out if shm else want))
            self.assertEqual(addr(c.buffers(big)[0]), addr(p))
            del p, g, p2, g2      # or close() warns that it waits for them

    def test_buffers_grad_read_in_place(self):
        """On shm the shards read a push from the gradient buffer where it lies, when they get
        to it: with both shards stopped, a push of 1s is sent, the buffer then overwritten
        with 2s (which the API forbids, to see who reads when), and the shards, resumed,
        apply 2s. A copy would have carried the 1s of the moment the push was called."""
        with self.client("inplace") as c:
            big = c.register("big", BIG, init="normal:1", seed=5, partition_bytes=BIG_PART)
            if c.transport != "shm":
                self.skipTest("transport %s: shards read in place on shm only" % c.transport)
            p, g = c.buffers(big)
            p0 = np.empty(BIG, np.float32)
            c.pull(big, 0, p0)
            g[:] = 1.0
            calling, errors = threading.Event(), []

            def push():
                calling.set()
                try:
                    c.push(big, 0, g)
                except Exception as e:  # reported by the main thread
                    errors.append(e)

            for s in self.shards:
                s.signal(signal.SIGSTOP)
            try:
                t = threading.Thread(target=push)
                t.start()
                calling.wait(10)
                time.sleep(0.5)    # the push is sent; the stopped shards have not read it
                g[:] = 2.0
            finally:
                for s in self.shards:
                    s.signal(signal.SIGCONT)
            t.join(30)
            self.assertFalse(errors, errors)
            out = np.empty(BIG, np.float32)
            c.pull(big, 1, out)
            np.testing.assert_array_equal(bits(out), bits(expected_sgd(p0, g)))
            self.assertEqual(float(g[0]), 2.0)
            del p, g

    def test_buffers_exact_same_bits_as_copies(self):
        """Exact mode: fixed-point sums written straight into the int64 buffers give the bits
        of private arrays, step after step (the fingerprints cannot move)."""
        rng = np.random.default_rng(7)
        gs = [rng.standard_normal(BIG).astype(np.float32) for _ in range(3)]
        finals = []
        for use in (False, True):
            with self.client("exact-buf-%d" % use, exact=True) as c:
                w, b = self.register(c)
                big = c.register("big", BIG, init="normal:0.5", seed=6,
                                 partition_bytes=BIG_PART)
                params = [np.empty(N, np.float32), np.empty(10, np.float32),
                          np.empty(BIG, np.float32)]
                grads = [np.zeros(N, np.int64), np.zeros(10, np.int64),
                         np.empty(BIG, np.int64)]
                if use:
                    params[2], grads[2] = c.buffers(big)
                    self.assertEqual(grads[2].dtype, np.int64)
                for k in range(3):
                    tessera.to_fixed(gs[k], grads[2])
                    tessera.fixed_add_f32(grads[2], gs[(k + 1) % 3])
                    c.step(k, grads, params)
                finals.append(params[2].copy())
                del params, grads
        np.testing.assert_array_equal(bits(finals[1]), bits(finals[0]))

    def test_buffers_bad_input(self):
        with self.client("buf-bad") as c, self.client("buf-bad-2") as other:
            big = c.register("big", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
            big2 = c.register("big2", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
            oid = other.register("big", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
            ai = self.assert_invalid
            ai(lambda: c.buffers(2), "id: ", "tensor id 2 is not registered")
            ai(lambda: c.buffers("big"), "id: ", "str")
            p, g = c.buffers(big)
            # Read-only everywhere but where it is the SDK's own params of that tensor.
            ai(lambda: c.pull(big2, 0, p), "out: ", "read-only")
            ai(lambda: other.pull(oid, 0, p), "out: ", "read-only")
            ai(lambda: c.step(0, [g, g], [c.buffers(big2)[0], p]), "params[0] (big)",
               "read-only")
            ai(lambda: c.push(big, 0, p.view(np.int32)), "grad: ", "int32")
            del p, g
        with self.assertRaises(tessera.Error) as cm:
            c.buffers(big)
        self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
        self.assertIn("closed", cm.exception.message)

    def test_buffers_outlive_close_safely(self):
        """Arrays alive at close() keep the SDK's pages mapped until the last one goes: the
        client refuses every call at once, the arrays stay readable and writable, and the
        handle closes (the pages unmapped) when they are freed, not before."""
        c = self.client("buf-close")
        big = c.register("big", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
        p, g = c.buffers(big)
        view = p[10:20]                        # a NumPy view keeps them alive too
        c.pull(big, 0, p)
        before = p.copy()
        where = addr(g)
        with self.assertWarns(ResourceWarning):
            c.close()
        self.assertTrue(c.closed)
        for call in (lambda: c.push(big, 0, g), lambda: c.pull(big, 0, p),
                     lambda: c.buffers(big)):
            with self.assertRaises(tessera.Error) as cm:
                call()
            self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
        del c                                  # the arrays hold the client
        gc.collect()
        self.assertTrue(memfd_at(os.getpid(), "tessera-grad", where))
        np.testing.assert_array_equal(bits(p), bits(before))
        g[:] = 3.0
        self.assertEqual(float(g.sum()), 3.0 * BIG)
        del p, g
        gc.collect()
        self.assertTrue(memfd_at(os.getpid(), "tessera-grad", where))   # view still holds
        self.assertEqual(view.size, 10)
        del view
        gc.collect()
        self.assertFalse(memfd_at(os.getpid(), "tessera-grad", where))
        # Without arrays alive, close() is immediate and silent.
        with self.client("buf-close-2") as c2:
            big = c2.register("big", BIG, init="normal:1", seed=4, partition_bytes=BIG_PART)
            where = addr(c2.buffers(big)[1])
        self.assertFalse(memfd_at(os.getpid(), "tessera-grad", where))

    def test_torch_buffers_same_bits(self):
        """tessera.torch with buffers (parameters that are the SDK's pages, gradients summed
        into its buffers) ends on the bits of the copying path, float and exact, and leaves
        the module its values at close."""
        xs = [torch.linspace(-1, 1, 8 * 256).reshape(8, 256) * (k + 1) for k in range(3)]

        def train(exact, buffers):
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 4))
            ps = tessera.torch.attach(m, master=self.master.addr, batch=8, exact=exact,
                                      job="torch-buf-%d-%d" % (exact, buffers), seed=3,
                                      optimizer="momentum:lr=0.05", partition_bytes=BIG_PART,
                                      buffers=buffers, loss_reduction="sum")
            with warnings.catch_warnings():
                warnings.simplefilter("error", ResourceWarning)   # close() is not deferred
                with ps:
                    self.assertEqual(ps.zero_copy, (buffers, buffers and (
                        exact or ps.transport == "shm")))
                    w = m[0].weight
                    ptr = w.data_ptr()
                    if buffers:
                        self.assertEqual(ptr, addr(ps.client.buffers(0)[0]))
                    for k, x in enumerate(xs):
                        if exact:   # two micro-batches
                            for half in (x[:4], x[4:]):
                                m.zero_grad(set_to_none=True)
                                m(half).pow(2).sum().backward()
                                ps.accumulate()
                            ps.step()
                            continue
                        m.zero_grad(set_to_none=True)
                        m(x).pow(2).mean().backward()
                        if k == 1:   # once through accumulate()
                            ps.accumulate(local_batch=8)
                            ps.step()
                        else:
                            ps.step(local_batch=8)
                    self.assertIs(m[0].weight, w)
                    self.assertEqual(w.data_ptr(), ptr)          # pulled in place
                    self.assertEqual(ps.verify()["differing"], 0)
                    digest = tessera.torch.params_sha256(m)
            self.assertEqual(tessera.torch.params_sha256(m), digest)   # kept after close
            return digest

        for exact in (True, False):
            self.assertEqual(train(exact, True), train(exact, False), "exact=%s" % exact)

    # ---- bad input: refused before anything is sent ----

    def test_bad_arrays_change_nothing(self):
        with self.client("bad") as c:
            w, b = self.register(c)
            p0 = [np.empty(N, np.float32), np.empty(10, np.float32)]
            c.pull(w, 0, p0[0])
            c.pull(b, 0, p0[1])
            good = [np.full(N, 0.5, np.float32), np.ones(10, np.float32)]
            out = [np.empty(N, np.float32), np.empty(10, np.float32)]
            ai = self.assert_invalid
            e = ai(lambda: c.push(w, 0, np.ones(N)), "grad: ", "float32 array of %d elements "
                   "expected, got float64" % N)
            self.assertTrue(str(e).startswith("INVALID_ARGUMENT: grad: "))
            ai(lambda: c.push(w, 0, np.ones(N, np.int64)), "grad: ", "int64")
            ai(lambda: c.push(w, 0, np.ones(2 * N, np.float32)[::2]), "grad: ",
               "non-contiguous")
            ai(lambda: c.push(w, 0, torch.ones(N, 2)[:, 0]), "grad: ", "non-contiguous")
            ai(lambda: c.push(w, 0, torch.ones(N, dtype=torch.float64)), "grad: ", "float64")
            ai(lambda: c.push(w, 0, np.ones(N - 1, np.float32)), "grad: ",
               "of %d elements expected, got float32 array of %d elements" % (N, N - 1))
            ai(lambda: c.push(w, 0, [0.5] * N), "grad: ", "list")
            ai(lambda: c.push(w, 0, None), "grad: ")
            ai(lambda: c.push(2, 0, good[0]), "id: ", "not registered")
            ai(lambda: c.push(-1, 0, good[0]), "id: ", "not registered")
            ai(lambda: c.push("w", 0, good[0]), "id: ")
            ai(lambda: c.push(w, -1, good[0]), "step: ")
            ai(lambda: c.pull(w, 0, np.empty(N, np.float64)), "out: ", "float64")
            ro = np.empty(N, np.float32)
            ro.flags.writeable = False
            ai(lambda: c.pull(w, 0, ro), "out: ", "read-only")
            ai(lambda: c.pull(w, 0, torch.empty(N, 2)[:, 1]), "out: ", "non-contiguous")
            # step(): every array is checked before the first push goes out.
            ai(lambda: c.step(0, good[:1], out), "grads: ", "2 arrays")
            ai(lambda: c.step(0, [good[0], np.ones(9, np.float32)], out), "grads[1] (b)")
            ai(lambda: c.step(0, good, [out[0], np.empty(10, np.float64)]), "params[1] (b)")
            ai(lambda: c.step(0, good, [out[0], ro]), "params[1] (b)")
            ai(lambda: c.step(0, good, None), "params: ")
            ai(lambda: c.verify_local([out[0]], 0), "params: ")
            ai(lambda: c.register("x", []), "shape")
            ai(lambda: c.register("x", [4, -1]), "shape[1]")
            ai(lambda: c.register(None, [4]), "name")
            ai(lambda: c.numel(7), "id: ")

            # Nothing reached the shards: version 0 is intact, step 0 still open.
            now = [np.empty(N, np.float32), np.empty(10, np.float32)]
            c.pull(w, 0, now[0])
            c.pull(b, 0, now[1])
            for k in range(2):
                np.testing.assert_array_equal(bits(now[k]), bits(p0[k]))
            c.step(0, good, out)
            np.testing.assert_array_equal(bits(out[0]), bits(expected_sgd(p0[0], good[0])))

    def test_state_arrays_are_sized(self):
        """assign(state=) and pull_state(out) take exactly the optimizer's state length times
        numel (Adam: 2): a short array would be read or written past its end by the SDK."""
        ai = self.assert_invalid
        with self.client("slen", master="local", optimizer="adam:lr=0.1") as c:
            w = c.register("w", (N,), init="zeros")
            ai(lambda: c.assign(w, np.ones(N, np.float32), state=np.zeros(N, np.float32)),
               "state: ", "float32 array of %d elements expected" % (2 * N))
            ai(lambda: c.pull_state(w, 0, np.empty(N, np.float32)), "out: ",
               "float32 array of %d elements expected" % (2 * N))
            got = c.pull_state(w, 0, np.full(2 * N, 7, np.float32))
            self.assertFalse(got.any())   # a fresh Adam: m and v are zeros
        with self.client("slen-sgd", master="local") as c:
            w = c.register("w", (N,), init="zeros")
            ai(lambda: c.pull_state(w, 0, np.empty(1, np.float32)), "out: ",
               "float32 array of 0 elements expected")

    def test_options_schema(self):
        """tessera.options() is Client's keywords, in the order positional arguments take
        (the SDK's schema), each documented in docs/python.md's signature; every keyword is
        taken and bad ones are refused naming themselves."""
        rows = tessera.options()
        names = [r["keyword"] for r in rows]
        self.assertEqual(names[:4], ["master", "job", "rank", "workers"])
        self.assertIn("compress_pull", names)
        self.assertEqual(len(set(names)), len(names))
        with open(os.path.join(tl.SRC, "docs", "python.md"), encoding="utf-8") as f:
            doc = f.read()
        sig = doc[doc.index("c = tessera.Client("):]
        sig = sig[:sig.index(")")]
        self.assertEqual([w.split("=")[0].strip() for w in sig[len("c = tessera.Client("):]
                          .split(",")], names)
        for r in rows:
            self.assertTrue(r["help"], r)
            if r["type"] == "choice":
                with tessera.Client(master="local", batch=4, **{r["keyword"]: r["choices"][0]}):
                    pass
            if r["type"] == "int" and r["keyword"] not in ("rank", "workers"):
                self.assert_invalid(lambda: tessera.Client(master="local", batch=4,
                                                           **{r["keyword"]: r["max"] + 1}),
                                    r["keyword"])
        with self.assertRaises(TypeError):
            tessera.Client(batch=4, no_such_option=1)
        with self.assertRaises(TypeError):
            tessera.Client("local", batch=4, master="local")

    def test_bad_options(self):
        ai = self.assert_invalid
        ai(lambda: self.client("opt", batch=0), "batch")
        ai(lambda: self.client("opt", batch=None), "batch")
        ai(lambda: self.client("opt", workers=0), "workers")
        ai(lambda: self.client("opt", rank=-1), "rank")
        ai(lambda: self.client("opt", rank=2, workers=2), "rank")
        ai(lambda: self.client("opt", optimizer="sgdx"), "optimizer")
        ai(lambda: self.client("opt", optimizer="sgd:lr=-1"), "optimizer", "lr")
        ai(lambda: self.client("opt", job="no spaces"), "job")
        ai(lambda: self.client("opt", job=7), "job")
        ai(lambda: self.client("opt", timeout_ms=-5), "timeout_ms")
        ai(lambda: self.client("opt", loss_scale="bogus"), "loss_scale")
        ai(lambda: self.client("opt", compress=5), "compress")
        ai(lambda: self.client("opt", sync_every=[1]), "sync_every")
        ai(lambda: self.client("opt", mode="bogus"), "mode")
        ai(lambda: self.client("opt", master="127.0.0.1:1\0x"), "master")
        # A dict becomes "NAME=VALUE,...", checked by the SDK like the string.
        ai(lambda: self.client("opt", sync_every={"w": 0}), "sync_every")
        ai(lambda: self.client("opt", compress={"w": "bogus"}), "compress")
        ai(lambda: self.client("opt", transport="carrier-pigeon"), "transport")
        ai(lambda: self.client("opt", exact=True, exact_push="int8"), "exact_push")
        ai(lambda: self.client("opt", exact=True, exact_push=2), "exact_push")
        ai(lambda: self.client("opt", exact_push="float"), "exact_push", "exact mode")
        ai(lambda: self.client("opt", exact=True, exact_push="float", sync_every={"w": 2}),
           "exact_push", "sync_every")
        ai(lambda: self.client("opt", mode="asp", dynamic="yes"), "dynamic", "bool", "str")
        ai(lambda: self.client("opt", dynamic=True), "dynamic", "bsp")   # the SDK's check
        with self.client("opt-xf", exact=True, exact_push="float") as c:
            w, _ = self.register(c)
            self.assert_invalid(lambda: c.push(w, 0, np.ones(N, np.int64)), "grad: ",
                                "float32 array", "int64")

    def test_loss_scale(self):
        """loss_scale="caller" with fp16 pushes: a step whose gradient overflows fp16 is
        skipped and the scale halves (GradScaler's rule), seen through the binding."""
        with tessera.Client(batch=BATCH, compress="fp16", loss_scale="caller") as c:
            w = c.register("w", 8)
            self.assertEqual(c.loss_scale, 65536.0)
            p = np.empty(8, np.float32)
            c.pull(w, 0, p)
            c.step(0, [np.full(8, c.loss_scale, np.float32)], [p])   # 65536: inf in fp16
            st = c.stats()
            self.assertEqual((st["steps"], st["steps_skipped"]), (1, 1))
            self.assertEqual((c.loss_scale, st["loss_scale"]), (32768.0, 32768.0))
            self.assertEqual(p.tolist(), [0.0] * 8)

    # ---- the master's schedule: dynamic assignment and priority tasks (work.c) ----

class TorchAttach(unittest.TestCase):
    """tessera.torch on a small module, in-process (master 'local')."""

    def linear(self):
        torch.manual_seed(0)
        return torch.nn.Linear(4, 3)

    def test_attach_keeps_the_model_and_steps_in_place(self):
        """The model's own weights are the job's step 0 (version 1 after attach); the mean
        loss's gradient times the share, divided by the batch, is torch's mean gradient."""
        m = self.linear()
        w0 = m.weight.detach().numpy().ravel().copy()
        b0 = m.bias.detach().numpy().copy()
        ps = tessera.torch.attach(m, batch=2, optimizer="sgd:lr=0.5", seed=5)
        with ps:
            np.testing.assert_array_equal(bits(m.weight.detach().numpy().ravel()), bits(w0))
            np.testing.assert_array_equal(bits(m.bias.detach().numpy()), bits(b0))
            self.assertEqual((ps.version, ps.names, ps.loss_scale), (1, ["weight", "bias"],
                                                                     1.0))
            weight = m.weight            # the same Parameter object is updated in place
            x = torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8
            m(x).pow(2).mean().backward()
            g = m.weight.grad.numpy().ravel().copy()
            self.assertEqual(ps.step(), 2)
            self.assertIs(m.weight, weight)
            np.testing.assert_array_equal(   # (g * 2) / 2 is g, exactly
                bits(m.weight.detach().numpy().ravel()), bits(w0 - np.float32(0.5) * g))
            self.assertEqual(ps.verify()["differing"], 0)

    def test_init_gives_the_sdk_initial_values(self):
        m = self.linear()
        ps = tessera.torch.attach(m, batch=2, optimizer="sgd:lr=0.5", seed=5, init="he",
                                  loss_reduction="sum")
        with ps, tessera.Client(batch=2) as ref:
            w = ref.register("weight", (3, 4), init="he", seed=5, fan_in=4, fan_out=3)
            w0 = np.empty(12, np.float32)
            ref.pull(w, 0, w0)
            np.testing.assert_array_equal(bits(m.weight.detach().numpy().ravel()), bits(w0))
            self.assertEqual(ps.version, 1)
            weight = m.weight            # the same Parameter object is updated in place
            x = torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8
            m(x).pow(2).sum().backward()
            g = m.weight.grad.numpy().ravel().copy()
            self.assertEqual(ps.step(), 2)
            np.testing.assert_array_equal(
                bits(m.weight.detach().numpy().ravel()),
                bits(w0 - np.float32(0.5) * (g * np.float32(0.5))))

    def test_exact_accumulate_is_order_free(self):
        xs = [torch.full((2, 4), v) for v in (0.1, -0.3, 0.7)]
        digests = []
        for order in ((0, 1, 2), (2, 0, 1)):
            m = self.linear()
            with tessera.torch.attach(m, batch=6, exact=True, seed=1,
                                      loss_reduction="sum") as ps:
                for _ in range(2):
                    for i in order:
                        m.zero_grad(set_to_none=True)
                        m(xs[i]).pow(2).sum().backward()
                        ps.accumulate()
                    ps.step()
            digests.append(tessera.torch.params_sha256(m))
        self.assertEqual(digests[0], digests[1])

    def test_bad_modules_and_arguments(self):
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.torch.attach(self.linear().double(), batch=2)
        self.assertIn("parameter 'weight'", cm.exception.message)
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.torch.attach(self.linear(), batch=2, init={"weight": 7})
        self.assertIn("init", cm.exception.message)
        with tessera.torch.attach(self.linear(), batch=2) as ps:
            with self.assertRaises(tessera.InvalidArgument) as cm:
                ps.step(local_batch=-1)
            self.assertIn("local_batch", cm.exception.message)
            self.assertEqual(ps.version, 1)

    def test_failed_attach_leaves_the_module_private(self):
        """A first step that fails in attach leaves no parameter on the SDK's buffers, so the
        client closes at once instead of waiting for the module to go."""
        class FailingStep:
            def __init__(self, c):
                self.c = c

            def __getattr__(self, name):
                return getattr(self.c, name)

            def step(self, *args):
                raise tessera.Error("injected")

        m = self.linear()
        c = tessera.Client(batch=2)
        with self.assertRaises(tessera.Error):
            tessera.torch.ParameterServer(m, FailingStep(c), buffers=True)
        w = c.buffers(0)[0]
        self.assertNotEqual(m.weight.data_ptr(), addr(w))   # pulled, then given back
        del w
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            c.close()

    def test_params_sha256_format(self):
        """lib/tensor/fingerprint.c's layout: name, NUL, count (8 bytes LE), float32 LE."""
        import hashlib
        import struct
        m = self.linear()
        h = hashlib.sha256()
        for name, p in m.named_parameters():
            a = p.detach().numpy().ravel()
            h.update(name.encode() + b"\0" + struct.pack("<Q", a.size) + a.astype("<f4").tobytes())
        self.assertEqual(tessera.torch.params_sha256(m), h.hexdigest())


if __name__ == "__main__":
    tl.main()
