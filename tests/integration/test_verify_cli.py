#!/usr/bin/python3
"""test_verify_cli.py - `tessera verify compare` on files and on snapshots of real runs.

Files: two .npy arrays that differ in one element are reported with that index and both
values, exit 1; identical ones pass, exit 0; a float64 file or an unknown name is a usage/I/O
error, exit 2. Snapshots: two exact-mode jobs with 2 and 1 workers on one cluster are
bit-identical (exit 0, every level passes); a job whose updates were perturbed (another
learning rate) fails, with cosine below 1 and the KS/PSI/JS figures of its outputs reported.
Live: a kept CTR job's snapshot against `live` (a snapshot taken through the master) has the
job's tables, compared row by row.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
import numpy as np  # noqa: E402
from test_snapshot import Cell, cli  # noqa: E402
from test_ctr import train_json  # noqa: E402

TRAIN = ["--exact", "--seed", "5", "--batch", "64", "--micro", "16", "--steps", "16",
         "--partition-kb", "64", "--json"]


def verify(args):
    r = tl.run_cli(["verify", "compare"] + args, timeout=120)
    return r.returncode, r.stdout, r.stderr


class Files(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-verify.")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_one_element_differs(self):
        rng = np.random.default_rng(1)
        a = rng.standard_normal(50000).astype("<f4")
        b = a.copy()
        b[12345] = np.nextafter(b[12345], np.float32(np.inf))   # one ULP away
        np.save(self.path("a.npy"), a)
        np.save(self.path("b.npy"), b)
        rc, out, err = verify([self.path("a.npy"), self.path("b.npy"), "--json"])
        self.assertEqual(rc, 1, err)
        rep = json.loads(out)
        t = rep["tensors"][0]
        self.assertEqual((t["differing"], t["first_index"], t["max_ulp"]), (1, 12345, 1))
        self.assertEqual(np.float32(t["first_a"]), a[12345])
        self.assertEqual(np.float32(t["first_b"]), b[12345])
        self.assertFalse(rep["pass_bits"])
        rc, out, _ = verify([self.path("a.npy"), self.path("a.npy"), "--level", "bits"])
        self.assertEqual(rc, 0)
        self.assertIn("bit-identical", out)
        # dist of the values: a one-ULP change moves nothing measurable
        rc, out, _ = verify([self.path("a.npy"), self.path("b.npy"), "--level", "dist",
                             "--json"])
        self.assertEqual(rc, 0)
        self.assertEqual(json.loads(out)["dist"]["psi"], 0.0)

    def test_usage_and_io_errors(self):
        np.save(self.path("d.npy"), np.zeros(4, dtype="<f8"))
        np.save(self.path("f.npy"), np.zeros(4, dtype="<f4"))
        rc, _, err = verify([self.path("d.npy"), self.path("f.npy")])
        self.assertEqual(rc, 2)
        self.assertIn("float32", err)
        rc, _, err = verify([self.path("f.npy"), self.path("nothere.npy")])
        self.assertEqual(rc, 2)
        self.assertIn("nothere.npy", err)
        rc, _, _ = verify([self.path("f.npy"), self.path("f.npy"), "--level", "nope"])
        self.assertEqual(rc, 2)


class Snapshots(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-verify-snap.")
        cls.store = os.path.join(cls.tmp, "store")
        cell = Cell(cls.store, 2)
        try:
            for job, workers, opt in (("w2", 2, None), ("w1", 1, None),
                                      ("lr", 2, "momentum:lr=0.025")):
                extra = ["--optimizer", opt] if opt else []
                cli(["train", "--master", cell.master.addr, "--workers", str(workers),
                     "--job", job, "--keep"] + TRAIN + extra, timeout=240)
                cli(["snapshot", "create", "--master", cell.master.addr, "--job", job,
                     "--tag", job])
        except BaseException:
            cell.close(failed=True)
            raise
        cell.close()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_worker_counts_are_bit_identical(self):
        rc, out, err = verify(["--store", self.store, "w2", "w1", "--json"])
        self.assertEqual(rc, 0, out + err)
        rep = json.loads(out)
        self.assertTrue(rep["pass"] and rep["pass_bits"] and rep["pass_cosine"])
        self.assertEqual(len(rep["tensors"]), 6)
        self.assertTrue(all(t["differing"] == 0 for t in rep["tensors"]))
        self.assertEqual(rep["layer_cosine"]["logits"], 1.0)
        self.assertEqual(rep["dist"]["ks_statistic"], 0.0)
        self.assertEqual(rep["dist"]["accuracy_a"], rep["dist"]["accuracy_b"])

    def test_perturbed_run_reported(self):
        rc, out, err = verify(["--store", self.store, "w2", "lr", "--json"])
        self.assertEqual(rc, 1, out + err)
        rep = json.loads(out)
        self.assertFalse(rep["pass_bits"])
        self.assertFalse(rep["pass_cosine"])
        for t in rep["tensors"]:
            self.assertGreater(t["differing"], 0, t["name"])
            self.assertLess(t["cosine"], 1.0, t["name"])
        d = rep["dist"]
        for key in ("ks_statistic", "ks_pvalue", "psi", "js_distance", "mean_a", "std_a",
                    "accuracy_a", "hist_a", "hist_edges"):
            self.assertIn(key, d)
        self.assertGreater(d["ks_statistic"], 0.0)
        self.assertLess(rep["layer_cosine"]["logits"], 1.0)
        rc, out, _ = verify(["--store", self.store, "w2", "lr"])
        self.assertIn("audit:  FAIL", out)
        self.assertIn("first difference at", out)

    def test_unknown_ref(self):
        rc, _, err = verify(["--store", self.store, "w2", "nope"])
        self.assertEqual(rc, 2)
        self.assertIn("'nope'", err)


class LiveTables(tl.ClusterCase, unittest.TestCase):
    """`tessera verify compare SNAP live` on a job with tables: 4 exact steps of the CTR
    trainer (8 tables) on 2 shards, kept, snapshotted; `live` takes another snapshot through
    the master and its tables are compared with the first's, row by row: the same ids, the
    same bits, every row sampled."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()

    def test_snapshot_against_live(self):
        c = self.c
        store = os.path.join(c.dir, "store")
        _, addr = c.tessera_up(["--shards", "2", "--replicas", "1", "--store", store])
        got = train_json(["--master", addr, "--workers", "1", "--job", "lv", "--keep",
                          "--model", "ctr", "--steps", "4", "--batch", "64", "--micro", "32",
                          "--exact", "--json"], timeout=120)
        self.assertGreater(got["table_rows"], 0)
        with c.admin_env():
            r = tl.run_cli(["snapshot", "create", "--master", addr, "--job", "lv", "--json"],
                           timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            snap = json.loads(r.stdout)
            rc, out, err = verify([snap["id"], "live", "--master", addr, "--level", "bits",
                                   "--json"])
        self.assertEqual(rc, 0, out + err)
        rep = json.loads(out)
        tables = [t for t in rep["tensors"] if t["name"].startswith("table:")]
        self.assertEqual(len(tables), 8, [t["name"] for t in rep["tensors"]])
        self.assertGreater(len(rep["tensors"]), 8)   # the dense part's tensors too
        for t in tables:
            self.assertFalse(t["rows_differ"] or t["only_a"] or t["only_b"], t)
            self.assertEqual(t["differing"], 0, t["name"])
            self.assertGreater(t["rows"]["common"], 0, t["name"])
            self.assertEqual(t["rows"]["sampled"], t["rows"]["common"], t["name"])
            self.assertEqual(t["rows"]["cosine"], 1.0, t["name"])
        # Every row of the job is in the live side's tables, and compared.
        self.assertEqual(sum(t["rows"]["common"] for t in tables), got["table_rows"])
        self.assertNotEqual(rep["b"], rep["a"])   # another snapshot: the live one


if __name__ == "__main__":
    tl.main()
