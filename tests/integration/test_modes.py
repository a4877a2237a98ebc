#!/usr/bin/python3
"""test_modes.py - BSP, SSP, ASP and reduce-only, compression, sync periods and loss scaling,
through real services (docs/modes.md).

- SSP(2) with one worker slowed on purpose: the fast one is never more than 2 steps ahead,
  read from the versions (clocks) the shards recorded; under ASP with the same slow worker it
  runs further ahead, so the bound is what holds it.
- Reduce-only gives the same parameters, bit for bit, as PS mode, with SGD and with momentum
  (exact mode, 2 workers on 2 shards, against the --local PS run).
- Sync periods: in exact mode a tensor summed over 4 steps still gives the same bits for 1 and
  2 workers.
- --amp: fp16 gradients scaled by 2^16 overflow at first; the shards skip those steps, the
  workers back off their scale, and training goes on.
- Accuracy: BSP, SSP(2), ASP, reduce-only and top-k with error feedback each reach 0.84 test
  accuracy in 3 epochs (TESSERA_MODES_ACCURACY=0 skips these slower runs).
- Snapshots: bsp and asp jobs (with a sync period too) are snapshotted; reduce is refused by
  name.
- Bad options are refused by name before anything trains.
"""
import json
import os
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import shard_pb2 as S  # noqa: E402

EXACT = ["--exact", "--steps", "24", "--seed", "7", "--batch", "64", "--micro", "16",
         "--partition-kb", "64", "--json"]


def train(args, timeout=240.0, ok=True):
    r = tl.run_cli(["train"] + args, timeout=timeout)
    if ok and r.returncode != 0:
        raise AssertionError("tessera train %s exited %d:\n%s\n%s" % (" ".join(args),
                                                                     r.returncode, r.stdout,
                                                                     r.stderr))
    if not ok:
        return r
    return json.loads(r.stdout.strip().splitlines()[-1])


class Cell:
    """A master and S shards, fresh."""

    def __init__(self, shards=2, store=None):
        self.c = tl.Cluster()
        extra = ["--store", store] if store else []
        self.master = self.c.start_master(extra=extra)
        self.shards = [self.c.start_shard(self.master.addr, name="shard%d" % i, extra=extra)
                       for i in range(shards)]
        ch = self.c.channel(self.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(ch).shards
                                  if s.state == tl.common_pb2.MEMBER_STATE_ALIVE) == shards,
                      15, "%d shards alive" % shards)

    def shard_jobs(self, job):
        """The JobStatus of `job` on every shard."""
        out = []
        for s in tl.cluster_status(self.c.channel(self.master.addr)).shards:
            st = tl.Stub(self.c.channel(s.addr), S, "Shard").ShardStatus(
                S.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
            out += [j for j in st.jobs if j.id == job]
        return out

    def close(self, failed):
        if failed:
            self.c.dump_logs()
        self.c.stop()


class Case(unittest.TestCase):
    def setUp(self):
        self.cells = []

    def cell(self, shards=2, store=None):
        c = Cell(shards, store)
        self.cells.append(c)
        return c

    def tearDown(self):
        failed = not getattr(self._outcome, "success", True)
        for c in self.cells:
            c.close(failed)


class Staleness(Case):
    def lead(self, mode, extra):
        cell = self.cell()
        job = "stale-" + mode
        # --keep: the shards keep the finished job, whose rank statistics are read below.
        out = train(["--master", cell.master.addr, "--workers", "2", "--mode", mode,
                     "--steps", "40", "--slow", "1:25", "--job", job, "--keep", "--json"] +
                    extra)
        jobs = cell.shard_jobs(job)
        self.assertTrue(jobs, "no shard holds job %s" % job)
        lead = {}
        for j in jobs:
            self.assertEqual(len(j.ranks), 2, j)
            for r in j.ranks:
                self.assertEqual(r.clock, 40, "rank %d pushed every step" % r.rank)
                lead[r.rank] = max(lead.get(r.rank, 0), r.staleness_max)
        tl.log("%s: most steps ahead of the slowest, per rank: %s (worker saw %d)" %
               (mode, lead, out["staleness_max"]))
        return lead, out

    def test_ssp_bounds_the_fast_worker(self):
        lead, out = self.lead("ssp", ["--staleness", "2"])
        self.assertLessEqual(lead[0], 2, "the fast worker ran more than 2 steps ahead")
        self.assertGreaterEqual(lead[0], 1, "the slow worker did not hold anyone back")
        # The slow one can be ahead too (at the start, before the other begins), never by more.
        self.assertLessEqual(lead[1], 2)
        self.assertLessEqual(out["staleness_max"], 2)

    def test_asp_has_no_bound(self):
        lead, _ = self.lead("asp", [])
        # Whichever rank got going first (under load rank 0, which also loads the test set,
        # can start a second late): asp let it run more than SSP's bound ahead.
        self.assertGreater(max(lead.values()), 2, "asp should let a worker run ahead")


class ReduceEqualsPs(Case):
    def test_reduce_gives_the_ps_bits(self):
        # Under the sanitizers one optimizer (the same service paths at four times the time).
        opts = ("sgd:lr=0.05", "momentum:lr=0.02,momentum=0.9")
        for opt in opts[1:] if tl.SANITIZED else opts:
            ref = train(["--local", "--optimizer", opt] + EXACT)
            cell = self.cell()
            red = train(["--master", cell.master.addr, "--workers", "2", "--mode", "reduce",
                         "--optimizer", opt] + EXACT)
            loc = train(["--local", "--mode", "reduce", "--optimizer", opt] + EXACT)
            tl.log("%s: ps %s reduce %s" % (opt, ref["params_sha256"][:16],
                                            red["params_sha256"][:16]))
            self.assertEqual(red["params_sha256"], ref["params_sha256"], opt)
            self.assertEqual(loc["params_sha256"], ref["params_sha256"], opt)

    def test_float_reduce_with_one_worker_equals_ps(self):
        args = ["--steps", "20", "--optimizer", "sgd:lr=0.05", "--json"]
        cell = self.cell(1)
        ps = train(["--master", cell.master.addr, "--workers", "1"] + args)
        red = train(["--master", cell.master.addr, "--workers", "1", "--mode", "reduce"] + args)
        self.assertEqual(ps["params_sha256"], red["params_sha256"])


class SyncEvery(Case):
    def test_layered_sync_is_exact_for_any_worker_count(self):
        sync = ["--sync-every", "fc1.weight=4,fc2.weight=2"]
        ref = train(["--local"] + sync + EXACT)
        plain = train(["--local"] + EXACT)
        self.assertNotEqual(ref["params_sha256"], plain["params_sha256"],
                            "a sync period must change the training")
        cell = self.cell()
        two = train(["--master", cell.master.addr, "--workers", "2"] + sync + EXACT)
        self.assertEqual(two["params_sha256"], ref["params_sha256"])


@unittest.skipIf(tl.SANITIZED, "the SDK's loss scaling, the same service paths as the others: "
                 "the plain build runs it")
class LossScaling(Case):
    def test_amp_backs_off_and_trains(self):
        cell = self.cell()
        out = train(["--master", cell.master.addr, "--workers", "2", "--amp", "--steps", "300",
                     "--json"])
        tl.log("amp: %d steps skipped, final scale %g, accuracy %.4f, %d of %d bytes" %
               (out["steps_skipped"], out["loss_scale"], out["test_accuracy"],
                out["bytes_pushed"], out["bytes_raw"]))
        self.assertGreaterEqual(out["steps_skipped"], 1, "2^16 should overflow fp16 at first")
        self.assertLess(out["loss_scale"], 65536)
        self.assertEqual(out["bytes_pushed"] * 2, out["bytes_raw"])
        self.assertGreater(out["test_accuracy"], 0.70)


@unittest.skipIf(os.environ.get("TESSERA_MODES_ACCURACY") == "0", "TESSERA_MODES_ACCURACY=0")
@tl.long_case
class Accuracy(Case):
    def test_each_mode_reaches_084(self):
        cell = self.cell()
        runs = [("bsp", []), ("ssp2", ["--mode", "ssp", "--staleness", "2"]),
                ("asp", ["--mode", "asp"]), ("reduce", ["--mode", "reduce"]),
                ("topk", ["--compress", "topk:0.1"])]
        for name, extra in runs:
            out = train(["--master", cell.master.addr, "--workers", "2", "--epochs", "3",
                         "--json"] + extra, timeout=600)
            tl.log("%s: test accuracy %.4f in %.1f s" % (name, out["test_accuracy"],
                                                         out["seconds"]))
            self.assertGreaterEqual(out["test_accuracy"], 0.84, name)


@unittest.skipIf(tl.SANITIZED, "snapshots of every mode: asan/integration/test_snapshot runs the "
                 "snapshot paths under the sanitizers, the plain build this one")
class Snapshots(Case):
    def test_jobs_with_parameters_on_the_shards_are_snapshotted(self):
        """bsp and asp (with sync periods too: at a multiple of every one) jobs are snapshotted
        (test_rollback.py rolls ssp, asp and a sync period back); reduce (the parameters live
        on the workers) is refused by name."""
        store = os.path.join(os.environ.get("TMPDIR", "/tmp"), "modes-store")
        cell = self.cell(1, store)
        for job, args, ok in (("snap-reduce", ["--mode", "reduce"], False),
                              ("snap-sync", ["--sync-every", "fc1.weight=2"], True),
                              ("snap-asp", ["--mode", "asp"], True),
                              ("snap-asp-sync", ["--mode", "asp", "--sync-every",
                                                 "fc1.weight=2"], True),
                              ("snap-bsp", [], True)):
            train(["--master", cell.master.addr, "--workers", "1", "--steps", "4", "--job", job,
                   "--keep", "--json"] + args)
            r = tl.run_cli(["snapshot", "create", "--master", cell.master.addr, "--job", job],
                           timeout=60)
            if ok:
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("snapshot of step 4", r.stderr, job)
            else:
                self.assertNotEqual(r.returncode, 0, r.stdout)
                self.assertIn("snapshots need", r.stderr, job)


class BadOptions(Case):
    def test_refused_by_name(self):
        cases = [
            (["--mode", "asp", "--exact"], "job.mode"),
            (["--mode", "bulk"], "mode: 'bulk'"),
            (["--staleness", "3"], "job.staleness"),
            (["--compress", "fp16", "--exact"], "compress"),
            (["--compress", "zip"], "compress"),
            (["--compress", "topk:2"], "compress"),
            (["--sync-every", "fc9.weight=2"], "no tensor 'fc9.weight'"),
            (["--sync-every", "fc1.weight=0"], "sync_every"),
        ]
        for args, says in cases:
            r = train(["--local", "--steps", "2"] + args, ok=False)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(says, r.stderr + r.stdout, args)


if __name__ == "__main__":
    tl.main()
