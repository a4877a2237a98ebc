#!/usr/bin/python3
"""test_table_full.py - a table's disk tier on a disk that fills up: the calls that would push
rows out to it are refused saying so, nothing acknowledged is lost, and once there is room the
job goes on to the fingerprint of a run that never ran short (issue 48; docs/embeddings.md,
"A full disk").

The shard's --table-dir lies on a 4 MiB tmpfs in a private mount namespace (`unshare -m`;
mounting needs root), its --table-mem is 1 MiB, and one exact worker pushes and pulls 40 steps
of 4096 rows of dimension 64 (Adagrad: 544 bytes a record), each step overlapping the last so
that rows come back from the disk. The tier's files soon need more than the tmpfs holds (their
segments are reserved with posix_fallocate, which fails with ENOSPC): each call that needs room in memory is refused with RESOURCE_EXHAUSTED naming the
directory and "no space left on the device", and the table's row count is unchanged. The test
then makes the tmpfs 512 MiB and sends the refused call again until it goes through; the run
must end on the table's fingerprint and row count of the same calls made in one process
(master "local"), so a row lost or an update dropped while the disk was full shows. Where the
mount is not allowed the test prints why and exits 77 (ctest: skipped); the unit test
t_full_disk_refuses_and_loses_nothing (tests/unit/test_table_tier.c) checks the same with
failed writes injected.
"""
import os
import sys
import time
import unittest

import numpy as np

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
import tessera  # noqa: E402

DIM = 64
STEPS = 40
WIDTH = 4096        # ids a step
STRIDE = 3072       # step s pushes ids [s * STRIDE, s * STRIDE + WIDTH)
OPT = "adagrad:lr=0.05"


def grads(s):
    return np.random.default_rng(100 + s).standard_normal((WIDTH, DIM)).astype(np.float32)


class Run:
    """One exact worker's calls; call() sends one again while the disk refuses it, after
    on_full (the first refusal) made room."""

    def __init__(self, master, on_full=None):
        self.c = tessera.Client(master=master, job="full", rank=0, workers=1, batch=1,
                                exact=True, optimizer="sgd:lr=0.1")
        self.t = self.c.register_table("emb", DIM, 1 << 40, init="normal:0.05", seed=3,
                                       optimizer=OPT)
        self.on_full = on_full
        self.refusals = []   # (the call's name, the message)
        self.rows = 0

    def call(self, name, fn, *args):
        deadline = time.monotonic() + 120
        while True:
            try:
                return fn(*args)
            except tessera.Error as e:
                if e.code != "RESOURCE_EXHAUSTED" or "no space left on the device" not in str(e):
                    raise
                self.refusals.append((name, str(e)))
                if len(self.refusals) == 1:
                    self.on_full(self, str(e))
                if time.monotonic() > deadline:
                    raise AssertionError("still refused 120 s after the disk had room: %s" % e)
                time.sleep(0.2)   # the tier's writer tries its batch again every 500 ms

    def train(self):
        out = np.empty((WIDTH, DIM), np.float32)
        for s in range(STEPS):
            ids = np.arange(s * STRIDE, s * STRIDE + WIDTH, dtype=np.int64)
            self.call("pull", self.c.pull_rows, self.t, s, ids, out)
            self.call("push", self.c.push_rows, self.t, s, ids, grads(s))
            self.rows = s * STRIDE + WIDTH   # acknowledged: rows 0 .. the step's last id
        return (self.call("fingerprint", self.c.table_sha256, self.t, STEPS),
                self.call("rows", self.c.table_rows, self.t, STEPS))


class FullTier(unittest.TestCase):
    mnt = None   # the tmpfs, mounted by tl.main_on_tmpfs

    def test_refused_while_full_then_the_same_fingerprint(self):
        local = Run("local")
        expect = local.train()
        local.c.close()
        c = tl.Cluster()
        failed = True
        tier = os.path.join(self.mnt, "tier")   # under a long temporary directory
        try:
            master = c.start_master()
            c.start_shard(master.addr, extra=["--table-mem", "1M", "--table-dir", tier])
            tl.wait_until(lambda: tl.cluster_status(c.channel(master.addr)).shards, 30,
                          "the shard alive")
            seen = {}

            def on_full(run, msg):
                # Refused, not lost: the shard counts the rows acknowledged so far (a count
                # that needs no room in memory, unlike Client.table_rows, a scan).
                seen["rows"] = sum(t["rows"] for sh in tl.status_json(master.addr)["shards"]
                                   for t in sh.get("table_list", []) if t["job"] == "full")
                seen["expect_rows"] = run.rows
                tl.log("refused while full: %s" % msg)
                why = tl.mount_tmpfs(self.mnt, "512m", remount=True)
                self.assertIsNone(why)

            with tl.environ(TESSERA_INSECURE="1"):
                run = Run(master.addr, on_full)
                try:
                    got = run.train()
                finally:
                    run.c.close()
            self.assertTrue(run.refusals, "the 4 MiB disk never filled up")
            for name, msg in run.refusals:
                self.assertIn("/mnt/tier cannot take rows", msg)   # the path's end
                self.assertIn("nothing of the call was taken", msg)
            self.assertEqual(seen["rows"], seen["expect_rows"])
            tl.log("%d calls refused while the disk was full (%s); then the run went on"
                   % (len(run.refusals), sorted({n for n, _ in run.refusals})))
            self.assertEqual(got, expect)
            failed = False
        finally:
            if failed:
                c.dump_logs()
            c.stop()


if __name__ == "__main__":
    tl.main_on_tmpfs(__file__, "4m", FullTier)
