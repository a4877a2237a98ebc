#!/usr/bin/python3
"""test_data_checksums.py - a worker whose data differ is refused, named; snapshots keep the map.

A copy of Fashion-MNIST with one pixel of training image 12345 changed (a valid gzip file, so
only the checksums can tell) stands for a host with other data. With rank 0 on the real data,
rank 1 on the altered copy must stop before training, naming the partition and the file. A
snapshot of a good run records the data-checksum map; `tessera verify data` passes the real
data and fails the altered copy, naming the partition; a cluster restored from the snapshot
refuses a worker on the altered copy, citing the snapshot.
"""
import gzip
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from test_snapshot import Cell, cli  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
IMAGE = 12345
WORKER = ["--exact", "--seed", "2", "--batch", "64", "--micro", "16", "--steps", "6",
          "--partition-kb", "64"]


def worker(cell, rank, data, job):
    return cell.c.spawn([os.path.join(tl.BIN, "tessera-worker"), "--master", cell.master.addr,
                         "--job", job, "--rank", str(rank), "--workers", "2", "--data", data, "--keep"] +
                        WORKER, "worker-%s-%d" % (job, rank))


class DataChecksums(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-data.")
        cls.bad = os.path.join(cls.tmp, "altered")
        shutil.copytree(DATA, cls.bad)
        path = os.path.join(cls.bad, "train-images-idx3-ubyte.gz")
        with gzip.open(path, "rb") as f:
            raw = bytearray(f.read())
        raw[16 + IMAGE * 784 + 400] ^= 0x40
        with gzip.open(path, "wb") as f:
            f.write(bytes(raw))
        cls.store = os.path.join(cls.tmp, "store")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_altered_worker_refused_then_snapshot_map(self):
        cell = Cell(self.store, 2)
        failed = True
        try:
            good = worker(cell, 0, DATA, "d1")
            tl.wait_until(lambda: "partitions checked" in good.log_text(), 30,
                          "rank 0's data check")
            bad = worker(cell, 1, self.bad, "d1")
            self.assertNotEqual(bad.wait(60), 0)
            msg = bad.log_text()
            self.assertIn("train-images[12000:13000)", msg)
            self.assertIn("train-images-idx3-ubyte.gz", msg)
            self.assertIn("rank 0", msg)
            good.signal(9)
            # A good run, then a snapshot that records its map.
            for rank in (0, 1):
                worker(cell, rank, DATA, "d2")
            w0 = [p for p in cell.c.procs if p.name == "worker-d2-0"][0]
            w1 = [p for p in cell.c.procs if p.name == "worker-d2-1"][0]
            self.assertEqual(w0.wait(120), 0, w0.log_text())
            self.assertEqual(w1.wait(120), 0, w1.log_text())
            made = json.loads(cli(["snapshot", "create", "--master", cell.master.addr,
                                   "--job", "d2", "--tag", "good", "--json"]).stdout)
            self.assertEqual(made["step"], 6)
            failed = False
        finally:
            cell.close(failed)

        r = cli(["verify", "data", DATA, "good", "--store", self.store])
        self.assertIn("PASS", r.stdout)
        r = cli(["verify", "data", self.bad, "good", "--store", self.store, "--json"], ok=False)
        self.assertEqual(r.returncode, 1)
        rep = json.loads(r.stdout)
        self.assertFalse(rep["pass"])
        self.assertEqual([x["partition"] for x in rep["mismatches"]],
                         ["train-images[12000:13000)"])
        self.assertEqual(rep["mismatches"][0]["file"], "train-images-idx3-ubyte.gz")

        # Restored, the snapshot's map is the reference: the altered copy is refused.
        cell = Cell(self.store, 1, restore="good")
        failed = True
        try:
            w = cell.c.spawn([os.path.join(tl.BIN, "tessera-worker"), "--master",
                              cell.master.addr, "--job", "d3", "--rank", "0", "--workers", "1",
                              "--data", self.bad] + WORKER[:-4] +
                             ["--steps", "8", "--partition-kb", "64"], "w-restore")
            self.assertNotEqual(w.wait(60), 0)
            self.assertIn("train-images[12000:13000)", w.log_text())
            self.assertIn("snapshot", w.log_text())
            failed = False
        finally:
            cell.close(failed)


if __name__ == "__main__":
    tl.main()
