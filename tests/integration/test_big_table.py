#!/usr/bin/python3
"""test_big_table.py - a CTR model whose tables hold many times the memory their shards are
given learns to the planted optimum (`make test-big`: several minutes and a few GB of disk,
so not in `make test`; issue 48, docs/embeddings.md, "Learning with most rows on disk").

`tessera up --shards 2 --table-mem 64M --table-dir DIR` (128 MiB of rows in memory in all)
and `tessera train --model ctr` by 2 workers on 8 tables of BIG_ROWS rows of dimension 64
with Adagrad (a row is some 600 bytes in memory), long enough to create well over a GiB of
rows. Checked: the rows made are at least 8 times the memory given (counted from each
table's bytes a row in memory), every table's rows were evicted and read back from disk, the
held-out AUC is within 0.01 of the planted optimum and the log-loss within 0.01 of its own,
and the tiers' files on disk hold what the memory could not. TESSERA_BIG_TABLE_STEPS and
TESSERA_BIG_TABLE_ROWS override the run's length and the tables' rows.

`tessera up`, its master and its shards run in a memory cgroup of CAGE bytes (1 GiB;
TESSERA_BIG_TABLE_CAGE, 0 for none): the page cache of the tiers' files is charged to it, so
the rows, more than twice that, cannot all sit in the machine's memory (23 GiB where this was
written) and the disk tier reads from the disk. Checked too: the rows made are more than
twice the cage, the shards read more than the cage's bytes from the device (/proc/PID/io),
and the kernel killed nothing. Where no memory cgroup can be made (not root, no memory
controller) the run is not bounded, says why, and those checks are left out.

Environment: PYTHONPATH with build/python and build/gen/python (the Makefile target sets it).
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_cage import MemoryCage  # noqa: E402

STEPS = int(os.environ.get("TESSERA_BIG_TABLE_STEPS", "4000"))
BIG_ROWS = int(os.environ.get("TESSERA_BIG_TABLE_ROWS", "1000000"))
MEM = 64 << 20          # --table-mem of each of the two shards
CAGE = int(os.environ.get("TESSERA_BIG_TABLE_CAGE", str(1 << 30)))


class BigTable(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.cage = MemoryCage(CAGE, "tessera-big") if CAGE else None
        if cls.cage and cls.cage.why_not:
            tl.log("not bounded in memory (the tiers' files may stay in the page cache): %s"
                   % cls.cage.why_not)
        cls.tier = os.path.join(cls.c.dir, "tier")
        _, cls.addr = cls.c.tessera_up(["--shards", "2", "--table-mem", "64M", "--table-dir",
                                        cls.tier], prefix=cls.cage.prefix() if cls.cage else ())

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        if cls.cage:
            cls.cage.close()

    def test_learns_with_most_rows_on_disk(self):
        argv = [os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr, "--workers",
                "2", "--job", "big", "--keep", "--model", "ctr", "--ctr-rows", str(BIG_ROWS),
                "--ctr-dim", "64", "--steps", str(STEPS), "--batch", "1024", "--micro", "256",
                "--json"]
        t0 = time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-3000:])
        caged = self.cage and self.cage.path
        if caged:   # first: a shard killed for the limit fails what follows less clearly
            self.assertEqual(self.cage.oom_kills(), 0, "the kernel killed a process of the "
                             "memory cgroup: raise TESSERA_BIG_TABLE_CAGE")
        got = json.loads(r.stdout)
        tables = tl.job_tables(self.addr, "big")
        self.assertEqual(len(tables), 16)
        s = tl.tier_summary(tables)
        tl.log("%d steps in %.0f s: held-out AUC %.4f (optimum %.4f), log-loss %.4f (optimum "
               "%.4f); %d rows, %.2f GB were they all in memory, %.1f times the %d MiB given; "
               "%.2f GB reserved on disk; %d disk reads, %d evictions, %.0f samples/s" % (
                   got["steps"], took, got["auc"], got["optimum_auc"], got["logloss"],
                   got["optimum_logloss"], got["table_rows"], s["whole"] / 1e9,
                   s["whole"] / (2 * MEM), 2 * MEM >> 20, s["disk"] / 1e9, s["misses"],
                   s["evictions"], got["samples_per_s"]))
        self.assertGreater(s["whole"], 8 * 2 * MEM)
        if caged:
            read = self.cage.read_bytes("tessera-shard")
            tl.log("in a memory cgroup of %d MiB (peak %d MiB): the rows are %.1f times it; "
                   "the shards read %.2f GB from the device" % (
                       CAGE >> 20, (self.cage.peak() or 0) >> 20, s["whole"] / CAGE,
                       read / 1e9))
            self.assertGreater(s["whole"], 2 * CAGE)
            self.assertGreater(read, CAGE)
        self.assertGreater(s["disk"], s["whole"] / 2)
        tl.assert_rows_went_through_disk(self, tables)
        self.assertGreater(got["auc"], got["optimum_auc"] - 0.01)
        self.assertLess(got["logloss"], got["optimum_logloss"] + 0.01)


if __name__ == "__main__":
    tl.main()
