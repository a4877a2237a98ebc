#!/usr/bin/python3
"""test_torch_snapshot.py - snapshots and torch files, both ways (python/tessera/snapshot.py,
lib/snapshot/whole.c; docs/python.md, "Snapshots and torch files").

Exact mode, a BatchNorm CNN, 2 workers, momentum and AdamW: a job trained 3 steps is
snapshotted by the cluster; `python3 -m tessera.snapshot export` writes it as a torch file
that equals the job's own ps.state_dict() bit for bit (values, optimizer state, update
counts) and loads into a plain torch model;
`import` makes it a snapshot in another store, `tessera up --restore` starts a job from it,
and 3 more steps end on the params_sha256 of 6 uninterrupted steps. Refusals: an unknown
store or ref (NOT_FOUND), a tensor without elements, a tag taken, an optimizer whose state
does not fit (said, and the optimizer starts fresh), a file that would run code on load.

Environment (ctest sets it): PYTHONPATH with build/python and build/gen/python.
"""
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
import test_torch_state as tts  # noqa: E402  (its helpers and TLS; none of its tests)

import tessera  # noqa: E402
import tessera.snapshot  # noqa: E402
import torch  # noqa: E402


def snap_cli(*args, check=True):
    """`python3 -m tessera.snapshot ARGS`; CompletedProcess (text)."""
    r = subprocess.run([sys.executable, "-m", "tessera.snapshot"] + list(args),
                       capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("tessera.snapshot %s exited %d:\n%s" % (" ".join(args),
                                                                     r.returncode, r.stderr))
    return r


def tensors_equal(a, b):
    """Same keys, same float32 bits, shapes equal up to a scalar stored as (1,)."""
    return set(a) == set(b) and all(
        torch.equal(torch.as_tensor(a[k]).float().reshape(-1),
                    torch.as_tensor(b[k]).float().reshape(-1)) for k in a)


class SnapshotFiles(unittest.TestCase):
    STEPS, MICRO, PER_STEP = 3, 2, 4
    train = tts.ExactFingerprint.train   # exact training of tts.net(0), 2 workers

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-torch-snapshot.")
        cls.store = os.path.join(cls.tmp, "store")
        cls.c = tl.Cluster()
        _, cls.addr = cls.c.tessera_up(["--shards", "2", "--tls-dir", tts.TLS,
                                        "--store", cls.store])
        cls.restored = []

    @classmethod
    def tearDownClass(cls):
        for c in [cls.c] + cls.restored:
            c.stop()
        subprocess.run(["rm", "-rf", cls.tmp])

    def test_export_import_resume_exact(self):
        """Snapshot at step 4 -> torch file -> snapshot in a new store -> restored job: the
        file is the job's state_dict, and the resumed run ends on the uninterrupted bits,
        with momentum's state and with AdamW's (whose update count, Adam's t, goes along)."""
        for opt in ("momentum:lr=0.1", "adamw:lr=0.01"):
            with self.subTest(optimizer=opt):
                self.round_trip(opt, opt.partition(":")[0])

    def round_trip(self, opt, tag):
        _, want = self.train(self.addr, tag + "-whole", 2, steps=6, optimizer=opt)
        made = []

        def snapshot(rank):   # while the job is attached: it goes when its workers leave
            if rank == 0:
                with self.c.admin_env():
                    made.append(tl.run_cli(["snapshot", "create", "--master", self.addr,
                                            "--job", tag + "-half", "--tag", tag],
                                           timeout=60))
        half, _ = self.train(self.addr, tag + "-half", 2, steps=3, optimizer=opt,
                             at_end=snapshot)
        r = made[0]
        self.assertEqual(r.returncode, 0, r.stderr)

        f = os.path.join(self.tmp, tag + ".pt")
        out = snap_cli("export", "--store", self.store, tag, f)
        self.assertIn("snapshot %s at step 4" % r.stdout.strip()[:12], out.stdout)
        sd = torch.load(f, weights_only=True)
        self.assertEqual(sd["tessera"]["version"], 4)
        self.assertEqual(sd["tessera"]["job"], tag + "-half")
        self.assertEqual(sd["tessera"]["optimizer"]["spec"], opt)
        self.assertTrue(tensors_equal(sd["model"], half["model"]))
        # The parameters' optimizer state and update counts as ps.state_dict() read them; the
        # buffers' (assigned every step, never updated) is zeros.
        state, counts = sd["tessera"]["optimizer"]["state"], sd["tessera"]["optimizer"]["updates"]
        mine = half["tessera"]["optimizer"]["state"]
        self.assertTrue(tensors_equal({k: state[k] for k in mine}, mine))
        self.assertEqual({k: counts[k] for k in mine}, half["tessera"]["optimizer"]["updates"])
        self.assertEqual(set(state) - set(mine), {"bn.running_mean", "bn.running_var",
                                                  "bn.num_batches_tracked"})
        self.assertTrue(all(not state[k].any() for k in set(state) - set(mine)))
        plain = tts.net(7)                   # a plain torch model takes the weights
        plain.load_state_dict(sd["model"])
        self.assertTrue(tensors_equal(plain.state_dict(), half["model"]))
        self.assertEqual(plain.bn.num_batches_tracked.dtype, torch.int64)

        store2 = os.path.join(self.tmp, "store-" + tag)
        sid = snap_cli("import", "--store", store2, f, "--job", tag + "-resumed", "--batch",
                       str(self.MICRO * self.PER_STEP), "--exact", "--micro-batch",
                       str(self.MICRO), "--tag", "start").stdout.strip()
        self.assertRegex(sid, r"^[0-9a-f]{64}$")
        back = tessera.snapshot.read(store2, "start")
        self.assertEqual((back.step, back.job["id"], back.job["workers"], back.job["exact"]),
                         (4, tag + "-resumed", 2, True))
        self.assertTrue(tensors_equal(back.values, half["model"]))
        self.assertEqual(back.updates, counts)

        c = tl.Cluster()
        self.restored.append(c)
        _, addr2 = c.tessera_up(["--shards", "3", "--tls-dir", tts.TLS, "--store", store2,
                                 "--restore", "start"])
        _, resumed = self.train(addr2, tag + "-resumed", 2, steps=3, optimizer=opt)
        self.assertEqual(resumed, want)

    def test_a_models_embedding_becomes_a_table(self):
        """A plain torch model's nn.EmbeddingBag weight, imported with --table, is a sparse
        table of the restored job: tessera.torch.EmbeddingBag over it gives torch's forward
        bit for bit, and a training step on it (Adagrad rows, SGD head) moves the rows and
        the head as torch's own optimizers move the plain model's."""
        torch.manual_seed(3)
        ref = torch.nn.ModuleDict({"emb": torch.nn.EmbeddingBag(1000, 8, mode="sum"),
                                   "head": torch.nn.Linear(8, 1)})
        f = os.path.join(self.tmp, "embedding.pt")
        torch.save(ref.state_dict(), f)
        store = os.path.join(self.tmp, "store-embedding")
        sid = snap_cli("import", "--store", store, f, "--job", "emb", "--batch", "4",
                       "--optimizer", "sgd:lr=0.1", "--table", "items=emb.weight",
                       "--table-optimizer", "adagrad:lr=0.05").stdout.strip()
        back = tessera.snapshot.read(store, sid)
        self.assertEqual(set(back.values), {"head.weight", "head.bias"})
        self.assertEqual(back.table_specs["items"], {
            "dim": 8, "max_id": 999, "init": "normal:0.01", "seed": 0,
            "optimizer": "adagrad:lr=0.05", "ttl_steps": 0, "ttl_seconds": 0})
        self.assertEqual(back.tables["items"][1].tobytes(), ref["emb"].weight.detach().numpy()
                         .tobytes())
        c = tl.Cluster()
        self.restored.append(c)
        _, addr = c.tessera_up(["--shards", "2", "--tls-dir", tts.TLS, "--store", store,
                                "--restore", sid])

        class Net(torch.nn.Module):
            def __init__(self, client):
                super().__init__()
                self.emb = tessera.torch.EmbeddingBag(client, "items", 1000, 8, mode="sum",
                                                      optimizer="adagrad:lr=0.05",
                                                      local_batch=4)
                self.head = torch.nn.Linear(8, 1)

            def forward(self, ids, offsets):
                return self.head(self.emb(ids, offsets))

        ids = torch.tensor([1, 5, 5, 999, 42, 7, 0, 3])
        offsets = torch.tensor([0, 3, 4, 6])
        y = torch.tensor([1.0, 0.0, 1.0, 0.0])
        with tessera.Client(master=addr, job="emb", rank=0, workers=1, batch=4,
                            optimizer="sgd:lr=0.1") as client:
            net = Net(client)
            ps = tessera.torch.ParameterServer(net, client, batch=4, optimizer="sgd:lr=0.1")
            self.assertEqual((ps.version, client.table_version(net.emb.table)), (1, 1))
            net.emb.step = ps.version
            out = net(ids, offsets)
            self.assertTrue(torch.equal(out, ref["head"](ref["emb"](ids, offsets))))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(out.squeeze(1), y)
            net.zero_grad()
            loss.backward()
            net.emb.push()
            ps.step()
            touched = torch.unique(ids)
            rows = net.emb.weight_rows(touched)
            head = [p.detach().clone() for p in net.head.parameters()]
        rows_opt = torch.optim.Adagrad([ref["emb"].weight], lr=0.05)
        head_opt = torch.optim.SGD(ref["head"].parameters(), lr=0.1)
        torch.nn.functional.binary_cross_entropy_with_logits(
            ref["head"](ref["emb"](ids, offsets)).squeeze(1), y).backward()
        rows_opt.step()
        head_opt.step()
        want = ref["emb"].weight.detach()[touched]
        self.assertFalse(torch.equal(want, torch.from_numpy(back.tables["items"][1][touched])))
        torch.testing.assert_close(rows, want, rtol=1e-6, atol=1e-7)
        for got, p in zip(head, ref["head"].parameters()):
            torch.testing.assert_close(got, p.detach(), rtol=1e-6, atol=1e-7)

    def test_model_only_and_refusals(self):
        """--model-only writes the bare state dict; bad stores, refs, tensors, tags and files
        are refused by name, and nothing is written for them."""
        store = os.path.join(self.tmp, "refusals")
        model = tts.net(1).state_dict()
        first = tessera.snapshot.import_state_dict(store, model, "j", 8,
                                                   optimizer="momentum:lr=0.1", tag="t")
        f = os.path.join(self.tmp, "bare.pt")
        snap_cli("export", "--store", store, "--model-only", "t", f)
        bare = torch.load(f, weights_only=True)
        self.assertEqual(set(bare), set(model))
        self.assertTrue(tensors_equal(bare, model))

        with self.assertRaises(tessera.Error) as e:
            tessera.snapshot.read(os.path.join(self.tmp, "nowhere"))
        self.assertEqual(e.exception.code, "NOT_FOUND")
        self.assertIn("is not a directory", e.exception.message)
        with self.assertRaises(tessera.Error) as e:
            tessera.snapshot.read(store, "nosuchtag")
        self.assertEqual(e.exception.code, "NOT_FOUND")
        r = snap_cli("export", "--store", store, "nosuchtag", f, check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nosuchtag", r.stderr)

        empty = dict(model, hole=torch.zeros(0))
        with self.assertRaisesRegex(tessera.InvalidArgument, "'hole' has no elements"):
            tessera.snapshot.import_state_dict(store, empty, "j", 8, optimizer="sgd")
        big = dict(model, count=torch.tensor([1 << 25]))
        with self.assertRaisesRegex(tessera.InvalidArgument, "'count': integers of 2.24"):
            tessera.snapshot.import_state_dict(store, big, "j", 8, optimizer="sgd")
        with self.assertRaisesRegex(tessera.InvalidArgument, "'extra': a dict, not a tensor"):
            tessera.snapshot.import_state_dict(store, dict(model, extra={}), "j", 8,
                                               optimizer="sgd")
        flags = tessera.snapshot.import_state_dict(     # bool buffers travel as 0.0 / 1.0
            store, dict(model, flags=torch.tensor([True, False])), "j", 8, optimizer="sgd")
        self.assertEqual(tessera.snapshot.read(store, flags).values["flags"].tolist(), [1, 0])
        first = flags
        # Tables of a model's embedding weight: a key it lacks, a weight that is not 2-D, and
        # a spec a shard would refuse.
        with self.assertRaisesRegex(tessera.InvalidArgument, "'items' names 'nope'"):
            tessera.snapshot.import_state_dict(store, model, "j", 8, optimizer="sgd",
                                               tables={"items": "nope"})
        key1d = next(k for k, v in model.items() if v.dim() == 1)
        with self.assertRaisesRegex(tessera.InvalidArgument, "an embedding weight is"):
            tessera.snapshot.import_state_dict(store, model, "j", 8, optimizer="sgd",
                                               tables={"items": key1d})
        emb = dict(model, emb=torch.ones(10, 4))
        with self.assertRaisesRegex(tessera.InvalidArgument,
                                    r"tables\[0\]: table.optimizer: 'momentum:lr=0.1': rows "
                                    "take sgd, adagrad or adam"):
            tessera.snapshot.import_state_dict(store, emb, "j", 8, optimizer="momentum:lr=0.1",
                                               tables={"items": "emb"})
        with self.assertRaisesRegex(tessera.Error, "optimizer: required"):
            tessera.snapshot.import_state_dict(store, model, "j", 8)
        with self.assertRaisesRegex(tessera.Error, "tag: 't' exists"):
            tessera.snapshot.import_state_dict(store, model, "j", 8, optimizer="sgd", tag="t")
        with self.assertRaisesRegex(tessera.Error, "job.id"):
            tessera.snapshot.import_state_dict(store, model, "no spaces", 8, optimizer="sgd")
        self.assertEqual(tessera.snapshot.read(store, "main").id, first)   # nothing moved

        # Adam's moments do not fit momentum's velocity: said, and the optimizer starts fresh.
        sd = {"model": model, "tessera": {"version": 3, "workers": 1, "optimizer": {
            "spec": "adam:lr=0.01",
            "state": {k: torch.ones((2,) + tuple(v.shape)) for k, v in model.items()}}}}
        sid = tessera.snapshot.import_state_dict(store, sd, "j", 8,
                                                 optimizer="momentum:lr=0.1")
        back = tessera.snapshot.read(store, sid)
        self.assertEqual(back.step, 3)
        self.assertTrue(all(not s.any() for s in back.state.values()))

        class Evil:
            def __reduce__(self):
                return (os.system, ("true",))
        evil = os.path.join(self.tmp, "evil.pt")
        torch.save({"w": torch.ones(2), "x": Evil()}, evil, pickle_module=pickle)
        r = snap_cli("import", "--store", store, evil, "--job", "j", "--batch", "8",
                     "--optimizer", "sgd", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("tessera.snapshot import:", r.stderr)
        self.assertEqual(tessera.snapshot.read(store, "main").id, sid)


if __name__ == "__main__":
    tl.main()
