#!/usr/bin/python3
"""test_train.py - training through real services: the reproducibility matrix and accuracy.

Exact mode promises the same parameters, bit for bit, for any worker and shard count, equal to
a single-process run. Each cell of the matrix is a fresh cluster (a master and S shards, real
processes on loopback) trained by `tessera train --workers W --exact --steps K --json`; every
cell's params_sha256 must equal the --local run's. Partitions are small (64 KiB) so that every
tensor is cut into several partitions spread over the shards. Rows are repeated over each data
plane transport, and once over tcp as between hosts (loopback taken for another host:
hashed frames) with push and pull pipelined (lib/client/sdk_pipe.c), which on one host runs
only when asked. A 1-epoch run must reach a test accuracy of 0.80.
"""
import json
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 24
COMMON = ["--exact", "--steps", str(STEPS), "--seed", "7", "--batch", "64", "--micro", "16",
          "--partition-kb", "64", "--json"]


def train(args, timeout=240.0):
    r = tl.run_cli(["train"] + args, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("tessera train %s exited %d:\n%s\n%s" % (" ".join(args),
                                                                     r.returncode, r.stdout,
                                                                     r.stderr))
    last = r.stdout.strip().splitlines()[-1]
    return json.loads(last)


class Cell:
    """A fresh cluster of S shards for one run."""

    def __init__(self, shards):
        self.c = tl.Cluster()
        self.master = self.c.start_master()
        for i in range(shards):
            self.c.start_shard(self.master.addr, name="shard%d" % i)
        ch = self.c.channel(self.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(ch).shards
                                  if s.state == tl.common_pb2.MEMBER_STATE_ALIVE) == shards,
                      15, "%d shards alive" % shards)

    def close(self, failed):
        if failed:
            self.c.dump_logs()
        self.c.stop()


class Reproducibility(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref = train(["--local"] + COMMON)
        tl.log("local reference: %s" % cls.ref["params_sha256"])

    def run_cell(self, shards, workers, transport=None):
        cell = Cell(shards)
        ok = False
        try:
            args = ["--master", cell.master.addr, "--workers", str(workers)] + COMMON
            if transport:
                args += ["--transport", transport]
            out = train(args)
            ok = True
            return out
        finally:
            cell.close(not ok)

    def test_matrix_matches_local(self):
        # The sanitizer run looks for memory errors on the same paths: its diagonal is enough.
        cells = ([(1, 1), (2, 2), (3, 4)] if tl.SANITIZED else
                 [(s, w) for s in (1, 2, 3) for w in (1, 2, 4)])
        for shards, workers in cells:
            with self.subTest(shards=shards, workers=workers):
                out = self.run_cell(shards, workers)
                tl.log("S=%d W=%d %s over %s" % (shards, workers, out["params_sha256"],
                                                 out["transport"]))
                self.assertEqual(out["steps"], STEPS)
                self.assertEqual(out["params_sha256"], self.ref["params_sha256"],
                                 "S=%d W=%d differs from --local" % (shards, workers))

    def test_each_transport(self):
        for transport in ("tcp", "shm"):
            with self.subTest(transport=transport):
                out = self.run_cell(2, 2, transport)
                self.assertEqual(out["transport"], transport)
                self.assertEqual(out["params_sha256"], self.ref["params_sha256"])

    def test_pipelined_as_between_hosts(self):
        with tl.environ(TESSERA_TCP_LOOPBACK="remote", TESSERA_PIPELINE="on"):
            out = self.run_cell(2, 3, "tcp")
        self.assertEqual(out["transport"], "tcp")
        self.assertEqual(out["params_sha256"], self.ref["params_sha256"])

    def test_another_seed_differs(self):
        other = train(["--local"] + COMMON[:3] + ["--seed", "8"] + COMMON[5:])
        self.assertNotEqual(other["params_sha256"], self.ref["params_sha256"])


@unittest.skipIf(tl.SANITIZED, "the sanitizer run leaves the 1-epoch accuracy to the plain one")
class Accuracy(unittest.TestCase):
    def test_one_epoch_reaches_080(self):
        cell = Cell(2)
        ok = False
        try:
            out = train(["--master", cell.master.addr, "--workers", "2", "--epochs", "1",
                         "--exact", "--json"], timeout=600)
            tl.log("1 epoch: test accuracy %.4f, %.0f samples/s"
                   % (out["test_accuracy"], out["samples_per_s"]))
            self.assertGreaterEqual(out["test_accuracy"], 0.80)
            self.assertEqual(out["steps"], 60000 // 64)
            ok = True
        finally:
            cell.close(not ok)


if __name__ == "__main__":
    tl.main()
