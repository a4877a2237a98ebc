#!/usr/bin/python3
"""test_snapshot_fault.py - kill -9 during snapshots; nothing reported as written is lost.

Each trial runs a cluster that snapshots every few steps (so that a snapshot is almost always
in progress), trains, and at a random moment kills -9 the master, a shard, or both, then
kills the rest. After the crash the store must hold only whole snapshots: fsck is clean (no
damaged chunk or manifest, every ref reaches a manifest whose chunks all exist), every
snapshot the master logged as written is still there, and the branch's tip restores into a
fresh cluster that continues training from its step.

TESSERA_FAULT_TRIALS sets the number of trials (make test: 2; make test-fault: 24);
TESSERA_FAULT_SEED makes the kill points reproducible (printed on every run).
"""
import json
import os
import random
import re
import signal
import sys
import tempfile
import shutil
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from test_snapshot import Cell, cli, snapshots  # noqa: E402

TRIALS = int(os.environ.get("TESSERA_FAULT_TRIALS", "2"))
SEED = int(os.environ.get("TESSERA_FAULT_SEED", str(int(time.time()))))
EVERY = 3
TRAIN = ["--exact", "--seed", "3", "--batch", "64", "--micro", "16", "--partition-kb", "64",
         "--json"]


class KillDuringSnapshot(unittest.TestCase):
    def trial(self, rng, n):
        tmp = tempfile.mkdtemp(prefix="tessera-fault.")
        store = os.path.join(tmp, "store")
        victim = rng.choice(["master", "shard", "both"])
        delay = rng.uniform(0.0, 1.0)
        cell = Cell(store, 2, every=EVERY)
        failed = True
        try:
            trainer = cell.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                                    cell.master.addr, "--workers", "2", "--steps", "3000"] +
                                   TRAIN, "train")
            tl.wait_until(lambda: "snapshot " in cell.master.log_text(), 30,
                          "the first snapshot")
            time.sleep(delay)
            shards = [p for p in cell.c.procs if p.name.startswith("shard")]
            targets = {"master": [cell.master], "shard": [rng.choice(shards)],
                       "both": [cell.master, rng.choice(shards)]}[victim]
            for p in targets:
                p.signal(signal.SIGKILL)
            written = re.findall(r"snapshot ([0-9a-f]{12}): job \S+ step (\d+)",
                                 cell.master.log_text())
            trainer.signal(signal.SIGKILL)
            cell.close()
            tl.log("trial %d: kill -9 %s after %.2f s; %d snapshots written"
                   % (n, victim, delay, len(written)))

            fsck = cli(["snapshot", "fsck", "--store", store], ok=False)
            self.assertEqual(fsck.returncode, 0, "trial %d: fsck:\n%s" % (n, fsck.stdout))
            listed = {s["id"][:12]: s["step"] for s in snapshots(store)}
            for short, step in written:     # reported as written: still there
                self.assertEqual(listed.get(short), int(step), "trial %d lost %s" % (n, short))
            if not listed:
                failed = False
                return
            tip = max(listed.values())
            cell = Cell(store, 2, restore="HEAD")
            r = cli(["train", "--master", cell.master.addr, "--workers", "1", "--steps",
                     str(tip + 2)] + TRAIN, timeout=120)
            out = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual(out["start_step"], tip, "trial %d" % n)
            self.assertEqual(out["steps"], tip + 2)
            failed = False
        finally:
            cell.close(failed)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_kill_during_snapshots(self):
        tl.log("%d trials, TESSERA_FAULT_SEED=%d" % (TRIALS, SEED))
        rng = random.Random(SEED)
        for n in range(TRIALS):
            self.trial(rng, n)


if __name__ == "__main__":
    tl.main()
