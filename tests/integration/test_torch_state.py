#!/usr/bin/python3
"""test_torch_state.py - tessera.torch keeps a user's own model right: its weights, buffers,
frozen parameters, the loss it writes, and its checkpoints (python/tessera/torch.py;
docs/python.md, "A model's own state").

In-process (master "local"): a frozen parameter is bitwise unchanged after 100 steps with weight
decay; load_state_dict checks keys, shapes (and update counts) as torch does, before anything
is sent; the mean
loss (the default) gives torch's gradient, and a batch that does not split evenly is refused by
name; a module attached cannot be pickled whole.
Against a `tessera up` (processes, mutual TLS), ranks as threads of this process: attach starts
from rank 0's weights on every rank; BatchNorm buffers equal on both ranks after every step,
rank 0's; load_state_dict mid-run, with zero-copy buffers and without, every rank holding the
new values; fine-tuning from torch.save / torch.load continues from the saved weights (the
loss at step 0 is the saved model's).
Exact mode: attaching a seeded torch model and training with 1 and 2 workers on 1 and 3 shards
and in-process ends on one params_sha256, and a resume from ps.state_dict() ends on the
uninterrupted run's (momentum, Adam and AdamW: the state dict carries Adam's update count).

Environment (ctest sets it): PYTHONPATH with build/python and build/gen/python.
"""
import atexit
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

import tessera  # noqa: E402
import tessera.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

_SEEDED = threading.Lock()   # ranks run as threads: torch's generator is the process's
# One set of certificates for every cluster here: a process has one TLS identity (lib/rpc/tls.c).
TLS = tempfile.mkdtemp(prefix="tessera-torch-state-tls.")
atexit.register(shutil.rmtree, TLS, True)


class Net(torch.nn.Module):
    """A small CNN with BatchNorm: parameters, float buffers and num_batches_tracked."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def net(seed=0):
    with _SEEDED:
        torch.manual_seed(seed)
        return Net()


def batch(step, rank, n=4):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def state_equal(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def on_ranks(workers, fn):
    """fn(rank) on each rank, as threads; their results by rank; the first failure raised."""
    out, errors = {}, []

    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as e:   # raised below, in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=run, args=(r,)) for r in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    if errors:
        raise errors[0]
    return out


class Local(unittest.TestCase):
    """master "local": the shards' code in this process."""

    def test_frozen_parameter_is_unchanged(self):
        m = net()
        m.conv.weight.requires_grad_(False)
        frozen = m.conv.weight.detach().clone()
        with tessera.torch.attach(m, batch=4, optimizer="momentum:lr=0.1,weight_decay=0.5") \
                as ps:
            self.assertEqual(ps.frozen, ["conv.weight"])
            moved = m.fc.weight.detach().clone()
            for s in range(100):
                x, y = batch(s, 0)
                m.zero_grad()
                F.cross_entropy(m(x), y).backward()
                ps.step()
            self.assertTrue(torch.equal(m.conv.weight, frozen), "frozen: bitwise unchanged")
            self.assertFalse(torch.equal(m.fc.weight, moved), "the others train")
            self.assertEqual(ps.verify()["differing"], 0)

    def test_load_state_dict_checks_first(self):
        m = net()
        with tessera.torch.attach(m, batch=4) as ps:
            sd = net(1).state_dict()
            bad = dict(sd)
            del bad["fc.bias"]
            bad["extra"] = torch.zeros(1)
            with self.assertRaisesRegex(RuntimeError, 'Missing key.*"fc.bias"') as cm:
                m.load_state_dict(bad)
            self.assertIn('Unexpected key(s) in state_dict: "extra"', str(cm.exception))
            wrong = dict(sd, **{"fc.weight": torch.zeros(2, 2)})
            with self.assertRaisesRegex(RuntimeError, "size mismatch for fc.weight"):
                ps.load_state_dict(wrong)
            counted = ps.state_dict()
            counted["tessera"]["optimizer"]["updates"]["fc.bias"] = -1
            with self.assertRaisesRegex(RuntimeError, "optimizer update count of fc.bias: -1"):
                ps.load_state_dict(counted)
            self.assertEqual(ps.version, 1, "nothing was sent")
            r = m.load_state_dict(bad, strict=False)   # torch's non-strict: what is there
            self.assertEqual((r.missing_keys, r.unexpected_keys), (["fc.bias"], ["extra"]))
            self.assertEqual(ps.version, 2)
            self.assertTrue(torch.equal(m.fc.weight, sd["fc.weight"]))
            m.fc.load_state_dict({"weight": sd["fc.weight"] * 2, "bias": sd["fc.bias"]})
            self.assertTrue(torch.equal(m.fc.weight, sd["fc.weight"] * 2), "a submodule's too")
            self.assertEqual(ps.verify()["differing"], 0)

    def test_mean_loss_is_torchs_gradient(self):
        """The default: a mean loss over this rank's batch / workers samples, scaled by that
        share, divided by batch on the shard: torch's SGD on the same mean gradient."""
        m, ref = net(), net()
        opt = torch.optim.SGD(ref.parameters(), lr=0.5)
        with tessera.torch.attach(m, batch=4, optimizer="sgd:lr=0.5") as ps:
            for s in range(3):
                x, y = batch(s, 0)
                for mod in (m, ref):
                    mod.zero_grad()
                    F.cross_entropy(mod(x), y).backward()
                opt.step()
                ps.step()
            for (k, a), b in zip(m.state_dict().items(), ref.state_dict().values()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=k)
        with tessera.torch.attach(net(), batch=5, workers=1) as ps:
            pass   # 5 samples over 1 worker split evenly
        c = tessera.torch.attach(net(), batch=5)
        with c:
            F.cross_entropy(c.module(batch(0, 0, 5)[0]), batch(0, 0, 5)[1]).backward()
            c.workers = 2   # what a rank of two sees (two ranks in-process would wait)
            with self.assertRaisesRegex(tessera.InvalidArgument, "local_batch"):
                c.step()
            c.workers = 1
        with tessera.torch.attach(net(), batch=4, exact=True) as ps:
            with self.assertRaisesRegex(tessera.InvalidArgument, "micro_batch"):
                ps.accumulate()

    def test_adamw_scheduler_and_groups_match_torch(self):
        """AdamW with a StepLR schedule and two param groups (the biases without weight
        decay, the last layer at a tenth of the lr), through ps.optimizer, against
        torch.optim.AdamW on one process: equal within float rounding; a parameter in no group
        is not updated, as torch would leave it."""
        def groups(m):
            return [{"params": [m.conv.weight, m.fc.weight], "lr": 0.01},
                    {"params": [m.fc.bias], "lr": 0.001, "weight_decay": 0.0}]
        m, ref = net(), net()
        opt = torch.optim.AdamW(groups(ref), lr=0.01, weight_decay=0.05)
        sch = torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)
        untouched = m.conv.bias.detach().clone()
        with tessera.torch.attach(m, batch=4, optimizer="adamw:lr=0.01,weight_decay=0.05",
                                  param_groups=groups(m)) as ps:
            psch = torch.optim.lr_scheduler.StepLR(ps.optimizer, 3, gamma=0.5)
            self.assertEqual(ps.frozen, ["conv.bias", "bn.weight", "bn.bias"])
            for s in range(8):
                x, y = batch(s, 0)
                for mod, o, sc in ((m, ps.optimizer, psch), (ref, opt, sch)):
                    o.zero_grad()
                    F.cross_entropy(mod(x), y).backward()
                    o.step()
                    sc.step()
            self.assertEqual(ps.optimizer.param_groups[0]["lr"], 0.0025)
            self.assertTrue(torch.equal(m.conv.bias, untouched))
            for name in ("conv.weight", "fc.weight", "fc.bias"):
                torch.testing.assert_close(m.get_parameter(name), ref.get_parameter(name),
                                           rtol=1e-5, atol=1e-6, msg=name)
            ps.optimizer.param_groups[1]["weight_decay"] = 0.3
            with self.assertRaisesRegex(tessera.InvalidArgument, "weight_decay"):
                ps.step()

    def test_modes_without_assignments(self):
        """asp has no assignments: attach says so (Tessera's initializers, buffers per rank),
        trains, and refuses load_state_dict by name, nothing changed."""
        m = net()
        with self.assertWarnsRegex(UserWarning, "mode asp: the job starts from Tessera's"):
            ps = tessera.torch.attach(m, batch=4, mode="asp")
        with ps:
            x, y = batch(0, 0)
            F.cross_entropy(m(x), y).backward()
            self.assertEqual(ps.step(), 1)
            before = {k: v.clone() for k, v in m.state_dict().items()}
            with self.assertRaisesRegex(tessera.Error, "bsp only"):
                m.load_state_dict(net(3).state_dict())
            self.assertTrue(state_equal(m.state_dict(), before))

    def test_not_picklable_while_attached(self):
        m = net()
        with tessera.torch.attach(m, batch=4):
            with self.assertRaisesRegex(TypeError, "state_dict"):
                pickle.dumps(m)
        pickle.dumps(m)   # after close: a plain module again


class OnCluster(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2", "--tls-dir", TLS)

    def attach(self, m, job, rank, workers, **kw):
        opts = dict(master=self.addr, job=job, rank=rank, workers=workers, batch=4 * workers,
                    optimizer="momentum:lr=0.05", timeout_ms=30000)
        opts.update(kw)
        return tessera.torch.attach(m, **opts)

    def test_attach_starts_from_rank0_and_buffers_follow(self):
        want = net(0).state_dict()

        def rank(r):
            m = net(r)   # rank 1's own weights differ: rank 0's win
            with self.attach(m, "bn", r, 2) as ps:
                first = {k: v.clone() for k, v in m.state_dict().items()}
                states = []
                for s in range(4):
                    x, y = batch(s, r)   # different data: different running statistics
                    m.zero_grad()
                    F.cross_entropy(m(x), y).backward()
                    ps.step()
                    states.append({k: v.clone() for k, v in m.state_dict().items()})
                return first, states
        out = on_ranks(2, rank)
        self.assertTrue(state_equal(out[0][0], want))
        self.assertTrue(state_equal(out[1][0], want), "rank 1 starts from rank 0's values")
        for s in range(4):
            self.assertTrue(state_equal(out[0][1][s], out[1][1][s]), "step %d" % s)
        self.assertEqual(int(out[1][1][-1]["bn.num_batches_tracked"]), 4)
        self.assertFalse(torch.equal(out[0][1][-1]["bn.running_mean"], want["bn.running_mean"]))

    def test_load_state_dict_mid_run(self):
        new = net(7).state_dict()
        for zero_copy in (False, True):
            def rank(r):
                m = net(r)
                with self.attach(m, "load-%d" % zero_copy, r, 2, buffers=zero_copy) as ps:
                    for s in range(2):
                        x, y = batch(s, r)
                        m.zero_grad()
                        F.cross_entropy(m(x), y).backward()
                        ps.step()
                    # Every rank loads (rank 0's copy is the one used), by the model's own
                    # load_state_dict: with zero copy a plain copy_ would fault.
                    m.load_state_dict(new if r == 0 else net(9).state_dict())
                    loaded = {k: v.clone() for k, v in m.state_dict().items()}
                    x, y = batch(5, r)
                    m.zero_grad()
                    F.cross_entropy(m(x), y).backward()
                    ps.step()
                    self.assertEqual(ps.verify()["differing"], 0)
                    return loaded, ps.version
            with self.subTest(buffers=zero_copy):
                out = on_ranks(2, rank)
                self.assertTrue(state_equal(out[0][0], new))
                self.assertTrue(state_equal(out[1][0], new))
                self.assertEqual(out[0][1], 5)   # attach 1, two steps, the load, one step

    def test_fine_tune_from_torch_save(self):
        def first(r):
            m = net(r)
            with self.attach(m, "pretrain", r, 2) as ps:
                for s in range(3):
                    x, y = batch(s, r)
                    m.zero_grad()
                    F.cross_entropy(m(x), y).backward()
                    ps.step()
                return ps.state_dict()
        saved = on_ranks(2, first)[0]
        f = io.BytesIO()
        torch.save(saved, f)
        x0, y0 = batch(50, 0)
        ref = net(3)
        ref.load_state_dict(torch.load(io.BytesIO(f.getvalue()))["model"])
        with torch.no_grad():
            want = F.cross_entropy(ref.eval()(x0), y0).item()

        def second(r):
            m = net(3)
            m.load_state_dict(torch.load(io.BytesIO(f.getvalue()))["model"])
            with self.attach(m, "finetune", r, 2, optimizer="adam:lr=0.001") as ps:
                self.assertTrue(state_equal(m.state_dict(), saved["model"]))
                with torch.no_grad():
                    loss0 = F.cross_entropy(m.eval()(x0), y0).item()
                m.train()
                x, y = batch(60, r)
                m.zero_grad()
                F.cross_entropy(m(x), y).backward()
                ps.step()
                return loss0
        out = on_ranks(2, second)
        self.assertEqual(out[0], want)
        self.assertEqual(out[1], want)


# One rank of a job of two, as a process: attaches, says so, then steps (rank 0) or sleeps.
RANK = r'''
import sys, time, torch, tessera.torch
torch.manual_seed(0)
m = torch.nn.Linear(4, 2)
ps = tessera.torch.attach(m, master=sys.argv[1], job=sys.argv[3], rank=int(sys.argv[2]),
                          workers=2, batch=2)
print("attached", flush=True)
with ps:
    if int(sys.argv[2]) == 1:
        time.sleep(120)
    m(torch.ones(1, 4)).sum().backward()
    ps.step()
'''


class Interrupt(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "1", "--tls-dir", TLS)

    def test_ctrl_c_ends_a_blocked_step(self):
        """Rank 1 stops stepping: rank 0's step waits, says for whom, and Ctrl-C ends the
        process within 2 s with KeyboardInterrupt, leaving the job as a failed worker would."""
        self.ctrl_c("ctrl-c", {})

    def test_ctrl_c_ends_a_pipelined_step(self):
        """The same with the exchange in sdk_pipe.c's threads (across hosts, forced here):
        the caller's thread sees Ctrl-C and cuts the connections, which ends them."""
        self.ctrl_c("ctrl-c-pipe", {"TESSERA_PIPELINE": "on"})

    def ctrl_c(self, job, extra):
        env = dict(os.environ, TESSERA_LOG="warn", **extra)
        ranks = [subprocess.Popen([sys.executable, "-c", RANK, self.addr, str(r), job], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in (1, 0)]
        try:
            for p in ranks:
                self.assertEqual(p.stdout.readline().strip(), "attached")
            time.sleep(6.5)   # past the 5 s after which a wait is logged
            self.assertIsNone(ranks[1].poll(), "rank 0's step waits for rank 1")
            t0 = time.monotonic()
            ranks[1].send_signal(signal.SIGINT)
            _, err = ranks[1].communicate(timeout=10)
            took = time.monotonic() - t0
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertLess(took, 2.0, err)
        self.assertIn("KeyboardInterrupt", err)
        self.assertRegex(err, r"step 1: waiting \d+ s for rank 1 \(worker \d+ on .* last at "
                              r"step 1\)")


class ExactFingerprint(unittest.TestCase):
    """One fingerprint for 1 and 2 workers on 1 and 3 shards and in-process, from a seeded
    torch model; a resume from ps.state_dict() ends on the same."""
    STEPS, MICRO, PER_STEP = 6, 2, 4   # 4 micro-batches of 2 a step, split over the ranks

    @classmethod
    def setUpClass(cls):
        cls.clusters = []
        for shards in (1, 3):
            c = tl.Cluster()
            _, addr = c.tessera_up(["--shards", str(shards), "--tls-dir", TLS])
            cls.clusters.append((c, addr))

    @classmethod
    def tearDownClass(cls):
        for c, _ in cls.clusters:
            c.stop()

    def train(self, master, job, workers, steps=None, start=None,
              optimizer="momentum:lr=0.1", schedule=False, at_end=None):
        """Exact training of net(0) (or start: a state dict) from step 0 (or start's), mean
        losses over micro-batches (schedule: lr halved every 2 steps, through StepLR);
        rank 0's state_dict and params_sha256 at the end. at_end(rank) runs on each rank
        after the last step, still attached."""
        steps = steps if steps is not None else self.STEPS

        def rank(r):
            m = net(0)
            if start:
                m.load_state_dict(start["model"])
            ps = tessera.torch.attach(m, master=master, job=job, rank=r, workers=workers,
                                      batch=self.MICRO * self.PER_STEP, exact=True,
                                      optimizer=optimizer, micro_batch=self.MICRO,
                                      timeout_ms=30000)
            sch = torch.optim.lr_scheduler.StepLR(ps.optimizer, 2, 0.5) if schedule else None
            if start:   # the optimizer's state too: one assignment step on every rank
                ps.load_state_dict(start)
            with ps:
                first = start["tessera"]["version"] if start else ps.version
                for v in range(first, first + steps):
                    for j in range(r, self.PER_STEP, workers):
                        x, y = batch(v * 100 + j, 0, self.MICRO)
                        m.zero_grad()
                        F.cross_entropy(m(x), y).backward()
                        ps.accumulate()
                    ps.optimizer.step()
                    if sch:
                        sch.step()
                if at_end:
                    at_end(r)
                return ps.state_dict(), ps.params_sha256()
        return on_ranks(workers, rank)[0]

    def test_one_fingerprint(self):
        local_sd, want = self.train("local", "x", 1)
        got = {}
        for shards, (c, addr) in zip((1, 3), self.clusters):
            for workers in (1, 2):
                got[(shards, workers)] = self.train(addr, "x%d" % workers, workers)[1]
        self.assertEqual(set(got.values()), {want}, got)

        # A resume: 3 steps, ps.state_dict() (momentum's state included) through torch.save,
        # 3 more in a new job.
        c, addr = self.clusters[1]
        half, _ = self.train(addr, "half", 2, steps=3)
        f = io.BytesIO()
        torch.save(half, f)
        back = torch.load(io.BytesIO(f.getvalue()))
        self.assertEqual(back["tessera"]["version"], 4)
        self.assertEqual(set(back["tessera"]["optimizer"]["state"]), set(net().state_dict()) -
                         {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"})
        _, resumed = self.train(addr, "resumed", 2, steps=3, start=back)
        self.assertEqual(resumed, want)

    def test_adam_resumes_exactly(self):
        """Adam and AdamW: a resume from ps.state_dict() in a new job ends on the uninterrupted
        run's params_sha256, on 2 workers and 3 shards and in-process: the state dict carries
        each parameter's update count with m and v, and the resume assigns it back, so the
        bias correction goes on at t = 4 (a new job's own count would give t = 1). A state
        dict from before counts were saved loads as before: t restarts, other bits."""
        c, addr = self.clusters[1]
        for opt in ("adam:lr=0.01", "adamw:lr=0.01"):
            with self.subTest(optimizer=opt):
                tag = opt.partition(":")[0]
                want = self.train("local", tag, 1, optimizer=opt)[1]
                half, _ = self.train(addr, tag + "-half", 2, steps=3, optimizer=opt)
                f = io.BytesIO()
                torch.save(half, f)
                back = torch.load(io.BytesIO(f.getvalue()))
                saved = back["tessera"]["optimizer"]
                self.assertEqual(saved["updates"], {n: 3 for n in saved["state"]})
                _, resumed = self.train(addr, tag + "-resumed", 2, steps=3, start=back,
                                        optimizer=opt)
                self.assertEqual(resumed, want)
                self.assertEqual(self.train("local", tag + "-l", 1, steps=3, start=back,
                                            optimizer=opt)[1], want)
                del saved["updates"]
                self.assertNotEqual(self.train(addr, tag + "-old", 2, steps=3, start=back,
                                               optimizer=opt)[1], want)

    def test_schedule_is_exact(self):
        """AdamW under a StepLR schedule: the learning rate travels with the pushes, so 2
        workers on 3 shards end on the in-process bits."""
        opts = dict(optimizer="adamw:lr=0.01", schedule=True)
        want = self.train("local", "s", 1, **opts)[1]
        self.assertEqual(self.train(self.clusters[1][1], "s2", 2, **opts)[1], want)


if __name__ == "__main__":
    tl.main()
