#!/usr/bin/python3
"""test_ctr_torch.py - the CTR generator's binding (tessera.ctr_samples, ctr_holdout, ctr_auc,
ctr_logloss, ctr_optimum; python/tessera/ctr.c) and python/examples/ctr_torch.py, the DLRM-style
model through tessera.torch.EmbeddingBag (docs/embeddings.md, "python/examples/ctr_torch.py";
issue 46).

Checked: ctr_samples is deterministic, in range (ids below rows, labels 0/1, p_true in (0, 1)),
and overlapping ranges drawn by separate calls agree sample for sample, also written into
`out` arrays; another seed draws other samples; ctr_holdout is 2^62 + j; ctr_auc equals a
brute-force pairwise AUC on random data with many ties (and the all-tied and one-class cases),
ctr_logloss a NumPy computation with clamping, and ctr_optimum the AUC and log-loss of the
samples' own p_true; every bad argument raises tessera.InvalidArgument naming it. The example,
run locally (master "local"), reaches a held-out AUC within 0.05 of the planted optimum, float
and exact; it draws the samples `tessera train --model ctr` draws (the same table rows and the
same planted optimum on the held-out samples); --torch-only trains the same model with PyTorch
alone to a sane AUC. On clusters, exact, each ending on the params_sha256 and row count of the
same run in one process: a shard killed, with copies and without (ShardKilled), and an elastic
job of 3 ranks under `tessera run --respawn` with a rank killed and started again
(ElasticKilled).

Environment (ctest sets it): PYTHONPATH with build/python and build/gen/python, TESSERA_BIN,
TESSERA_SRC.
"""
import json
import os
import signal
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

import numpy as np  # noqa: E402
import tessera  # noqa: E402

EXAMPLE = os.path.join(tl.SRC, "python", "examples", "ctr_torch.py")
# Small enough for a few seconds a run on 2 loaded cores.
SMALL = ["--steps", "300", "--batch", "128", "--micro", "32", "--eval-samples", "5000",
         "--rows", "20000"]


def brute_auc(score, label):
    pos, neg = score[label > 0.5], score[label <= 0.5]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def run_example(args, timeout=120):
    env = dict(os.environ, TESSERA_LOG=os.environ.get("TESSERA_LOG", "warn"))
    for k in ("TESSERA_MASTER", "TESSERA_RANK", "TESSERA_WORKERS", "TESSERA_JOB"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, EXAMPLE] + args + ["--json"], capture_output=True,
                       text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if p.returncode:
        raise AssertionError("ctr_torch.py %s exited %d:\n%s%s"
                             % (" ".join(args), p.returncode, p.stdout, p.stderr[-3000:]))
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


class Samples(unittest.TestCase):
    def test_deterministic_and_in_range(self):
        a = tessera.ctr_samples(1000, 3000, seed=7, features=5, rows=1000)
        b = tessera.ctr_samples(1000, 3000, seed=7, features=5, rows=1000)
        self.assertEqual(sorted(a), ["dense", "ids", "label", "p_true"])
        self.assertEqual((a["ids"].shape, a["ids"].dtype), ((3000, 5), np.int64))
        self.assertEqual((a["dense"].shape, a["dense"].dtype), ((3000, 4), np.float32))
        self.assertEqual((a["label"].shape, a["label"].dtype), ((3000,), np.float32))
        self.assertEqual((a["p_true"].shape, a["p_true"].dtype), ((3000,), np.float64))
        for k in a:
            self.assertTrue(np.array_equal(a[k], b[k]), k)
        self.assertTrue(((a["ids"] >= 0) & (a["ids"] < 1000)).all())
        self.assertTrue(set(np.unique(a["label"])) <= {0.0, 1.0})
        self.assertTrue(((a["p_true"] > 0) & (a["p_true"] < 1)).all())
        self.assertTrue(np.isfinite(a["dense"]).all())
        # the defaults' base CTR, 0.25, within sampling noise
        self.assertLess(abs(a["p_true"].mean() - 0.25), 0.03)
        # Zipf: the most popular id of a feature is drawn far more than 1/1000 of the time
        self.assertGreater(np.bincount(a["ids"][:, 0]).max(), 30)
        other = tessera.ctr_samples(1000, 3000, seed=8, features=5, rows=1000)
        self.assertFalse(np.array_equal(a["ids"], other["ids"]))

    def test_overlapping_ranges_agree(self):
        a = tessera.ctr_samples(0, 500)
        b = tessera.ctr_samples(300, 500)
        for k in a:
            self.assertTrue(np.array_equal(a[k][300:], b[k][:200]), k)
        # written into the caller's arrays, keys left out made
        out = {"ids": np.zeros((200, 8), np.int64), "label": np.zeros(200, np.float32)}
        r = tessera.ctr_samples(400, 200, out=out)
        self.assertIs(r, out)
        for k in a:
            self.assertTrue(np.array_equal(r[k], b[k][100:300]), k)
        self.assertEqual(len(tessera.ctr_samples(5, 0)["label"]), 0)
        self.assertEqual(tessera.ctr_holdout(0), 1 << 62)
        self.assertEqual(tessera.ctr_holdout(12345), (1 << 62) + 12345)
        h = tessera.ctr_samples(tessera.ctr_holdout(0), 10)
        self.assertFalse(np.array_equal(h["ids"], a["ids"][:10]))

    def test_metrics(self):
        rng = np.random.default_rng(3)
        score = rng.integers(0, 20, 2000).astype(np.float32)      # many ties
        label = (rng.random(2000) < 0.3).astype(np.float32)
        self.assertAlmostEqual(tessera.ctr_auc(score, label), brute_auc(score, label), 12)
        score = rng.random(1500).astype(np.float32)
        label = (rng.random(1500) < score).astype(np.float32)
        self.assertAlmostEqual(tessera.ctr_auc(score, label), brute_auc(score, label), 12)
        self.assertEqual(tessera.ctr_auc(np.ones(10, np.float32), label[:10]), 0.5)
        self.assertTrue(np.isnan(tessera.ctr_auc(score[:5], np.zeros(5, np.float32))))
        p = np.array([0.0, 0.2, 0.9, 1.0], np.float32)
        y = np.array([0, 1, 1, 1], np.float32)
        q = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
        want = -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))
        self.assertAlmostEqual(tessera.ctr_logloss(p, y), want, 6)
        s = tessera.ctr_samples(tessera.ctr_holdout(0), 4000, rows=5000)
        pt = s["p_true"].astype(np.float32)
        auc, ll = tessera.ctr_optimum(tessera.ctr_holdout(0), 4000, rows=5000)
        self.assertAlmostEqual(auc, tessera.ctr_auc(pt, s["label"]), 9)
        self.assertAlmostEqual(ll, tessera.ctr_logloss(pt, s["label"]), 6)
        self.assertTrue(0.7 < auc < 1)

    def test_bad_arguments(self):
        f32, i64 = np.zeros(4, np.float32), np.zeros(4, np.int64)
        cases = [
            ("first", lambda: tessera.ctr_samples(-1, 1)),
            ("first", lambda: tessera.ctr_samples("0", 1)),
            ("n", lambda: tessera.ctr_samples(0, -1)),
            ("n", lambda: tessera.ctr_samples(0, 10**7 + 1)),
            ("n", lambda: tessera.ctr_samples(2**64 - 1, 2)),
            ("seed", lambda: tessera.ctr_samples(0, 1, seed=-1)),
            ("seed", lambda: tessera.ctr_samples(0, 1, seed=1.5)),
            ("features", lambda: tessera.ctr_samples(0, 1, features=0)),
            ("features", lambda: tessera.ctr_samples(0, 1, features=65)),
            ("rows", lambda: tessera.ctr_samples(0, 1, rows=1)),
            ("rows", lambda: tessera.ctr_samples(0, 1, rows=2**40 + 1)),
            ("out", lambda: tessera.ctr_samples(0, 1, out=[])),
            ("out['ids']", lambda: tessera.ctr_samples(0, 4, out={"ids": i64})),
            ("out['p_true']", lambda: tessera.ctr_samples(0, 4, out={"p_true": f32})),
            ("j", lambda: tessera.ctr_holdout(-1)),
            ("j", lambda: tessera.ctr_holdout(1 << 62)),
            ("score", lambda: tessera.ctr_auc(i64, f32)),
            ("label", lambda: tessera.ctr_auc(f32, f32[:3])),
            ("p", lambda: tessera.ctr_logloss([0.5], f32)),
            ("label", lambda: tessera.ctr_logloss(f32, i64)),
            ("n", lambda: tessera.ctr_optimum(0, 0)),
            ("rows", lambda: tessera.ctr_optimum(0, 10, rows=0)),
            ("features", lambda: tessera.ctr_optimum(0, 10, features=100)),
        ]
        for name, call in cases:
            with self.assertRaises(tessera.InvalidArgument, msg=name) as cm:
                call()
            self.assertIn(name + ":", str(cm.exception), name)


class Example(unittest.TestCase):
    def test_local_runs(self):
        float_run = run_example(SMALL)
        self.assertEqual(float_run["workers"], 1)
        self.assertGreater(float_run["auc"], float_run["optimum_auc"] - 0.05, float_run)
        self.assertLess(float_run["logloss"], float_run["optimum_logloss"] + 0.05, float_run)
        # (that an exact run's bits are its own on every run, and on any cluster, the
        # cluster cases below check against a run of this example in one process)
        one = run_example(SMALL + ["--exact"])
        self.assertGreater(one["auc"], one["optimum_auc"] - 0.05, one)
        self.assertAlmostEqual(one["auc"], float_run["auc"], 2)

    def test_same_samples_as_the_c_trainer(self):
        tessera_bin = os.path.join(tl.BIN, "tessera")
        if not os.access(tessera_bin, os.X_OK):
            self.skipTest("%s not built" % tessera_bin)
        args = ["--steps", "50", "--batch", "128", "--micro", "32", "--eval-samples", "3000",
                "--ctr-rows", "20000"]
        p = subprocess.run([tessera_bin, "train", "--local", "--model", "ctr", "--json"] + args,
                           capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        c = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
        py = run_example([x.replace("--ctr-rows", "--rows") for x in args])
        # the same ids touched per step: the same rows created in the tables
        self.assertEqual(py["table_rows"], c["table_rows"])
        self.assertEqual(py["optimum_auc"], c["optimum_auc"])
        self.assertEqual(py["optimum_logloss"], c["optimum_logloss"])

    @tl.long_case
    def test_torch_only(self):
        r = run_example(SMALL + ["--torch-only"])
        self.assertEqual(r["mode"], "torch")
        self.assertGreater(r["auc"], r["optimum_auc"] - 0.05, r)


class ShardKilled(tl.ClusterCase, unittest.TestCase):
    """The example, exact, on `tessera up --shards 3 --snapshot-every 10`, a shard killed with
    SIGKILL after step 25. With `--replicas 2` the copies of its rows take over and the table
    calls fail over inside the Client: no rollback. With `--replicas 1` its rows are gone: the
    tables' calls raise tessera.Rollback, the example puts its EmbeddingBags and
    ParameterServer back at client.resume_step (rolled_back()) and trains on. Both end on the
    local run's params_sha256."""
    ARGS = ["--steps", "60", "--batch", "128", "--micro", "32", "--eval-samples", "2000",
            "--rows", "20000", "--exact"]

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.want = run_example(cls.ARGS)

    def kill_one(self, replicas, job):
        up, addr = self.c.tessera_up(["--shards", "3", "--replicas", str(replicas), "--store",
                                      os.path.join(self.c.dir, "store-" + job),
                                      "--snapshot-every", "10"], name="up-" + job)
        env = dict(os.environ, TESSERA_LOG="warn")
        p = subprocess.Popen([sys.executable, EXAMPLE, "--master", addr, "--job", job,
                              "--sleep-ms", "60", "--json"] + self.ARGS, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env,
                             stdin=subprocess.DEVNULL)
        try:
            victim = tl.shard_once_past(addr, 25, timeout=90)
            os.kill(victim["pid"], signal.SIGKILL)
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        up.stop()
        self.assertEqual(p.returncode, 0, err[-3000:])
        got = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
        self.assertEqual(got["params_sha256"], self.want["params_sha256"], err[-3000:])
        self.assertEqual(got["table_rows"], self.want["table_rows"])
        return got, err

    def test_copies_take_over(self):
        got, err = self.kill_one(2, "py-copies")
        self.assertEqual(got["rollbacks"], 0, err[-3000:])
        self.assertIn("failing over", err)

    def test_rollback_through_embeddingbag(self):
        got, err = self.kill_one(1, "py-rollback")
        self.assertGreaterEqual(got["rollbacks"], 1, err[-3000:])


class ElasticKilled(tl.ClusterCase, unittest.TestCase):
    """--elastic: 3 ranks of the example under `tessera run --respawn` on `tessera up --shards
    2`, exact; rank 1 killed with SIGKILL past step 20 and started again. The live ranks compute
    its slot meanwhile (its rows pushed as slot 1 by whoever owns it; a table's pull or push
    that meets the slots changing hands raises tessera.Slots, and the step ps.recover() names
    is computed again), then it joins the job where it is and takes its slot back. The job
    ends on the local run's params_sha256 and row count."""
    ARGS = ["--steps", "100", "--batch", "128", "--micro", "32", "--eval-samples", "2000",
            "--rows", "20000", "--exact"]

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.want = run_example(cls.ARGS)
        cls.up, cls.addr = cls.c.tessera_up(["--shards", "2"], name="up-elastic")

    def test_rank_killed_and_started_again(self):
        job = "py-elastic"
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "run", "--master", self.addr,
                              "--workers", "3", "--job", job, "--respawn", "--",
                              sys.executable, EXAMPLE, "--elastic", "--sleep-ms", "30",
                              "--json"] + self.ARGS, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TESSERA_LOG="warn"),
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            os.kill(tl.rank_pid_past(self.addr, job, 1, 20), signal.SIGKILL)
            out, err = p.communicate(timeout=240)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("rank 1 was killed by signal 9", err)
        self.assertIn("starting rank 1 again (restart 1)", err)
        got = json.loads([ln for ln in out.splitlines() if ln.startswith("[rank 0] {")][-1]
                         [len("[rank 0] "):])
        self.assertEqual(got["workers"], 3)
        self.assertEqual(got["params_sha256"], self.want["params_sha256"], err[-3000:])
        self.assertEqual(got["table_rows"], self.want["table_rows"])
        self.assertGreaterEqual(got["reslots"], 1, err[-3000:])


if __name__ == "__main__":
    tl.main()
