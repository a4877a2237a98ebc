#!/usr/bin/python3
"""test_ctr_elastic.py - the CTR trainer's sparse tables in an elastic job: workers that die
or come back do not change the bits (docs/embeddings.md, "Elastic jobs with tables").

Real processes: one `tessera up --shards 2` (mutual TLS), and `tessera train --model ctr
--workers 3 --exact` runs (8 tables of 10^5 rows, batch 96 in micro-batches of 16), each
compared with the same run of `tessera train --local`:
- Killed: SIGKILL of rank 1 or 2 at a random step of the first third. `tessera train` says
  the others take over its share and exits 0; the final params_sha256 (tensors and every
  table) and the row count equal --local's; the job is finished with the slot taken over.
  The same with --row-ttl 4 (rows no step updated in 4 steps dropped every 4 steps).
- Killed between two tables (a test hook, TESSERA_TEST_DIE_IN_ROWS: the sanitizer build):
  rank 2 dies after pushing its rows of step 7 to 4 of the 8 tables. Those tables apply step
  7 (every slot pushed) while the others wait for slot 2; its new owner computes slot 2 of
  step 7 again from the rows as step 7 found them, which the shards that applied it keep
  (lib/table/table.h, "Elastic jobs"). Same fingerprint. Without the kept rows the
  recomputed gradients differ and so does the fingerprint (checked by hand when this was
  built). Then the same with --row-ttl 4: those 4 tables also swept rows after step 7, and
  keep the dropped rows as step 7 found them with the rest (without, the dense partitions
  refuse the recomputed push as differing from the one counted: checked by hand).
- Respawned: `--respawn`, SIGKILL of rank 1: a new rank 1 joins the running job
  (tessera_join), gets its slot back and trains to the end; same fingerprint.
- Rank 0 killed: rank 0 alone scores and reports, so `tessera train` prints the job's
  fingerprint as the other workers told the master (every rank computes it): --local's.
"""
import json
import os
import random
import signal
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

# Long enough that the kill, at a step in its first third found by polling `tessera status`
# (a CLI call each time, slow under make test's load), lands while the job runs: 300 steps
# once ended (2.6 s) before the kill at step 161 came.
STEPS = 60 if tl.SANITIZED else 900
CTR = ["--model", "ctr", "--batch", "96", "--micro", "16", "--exact", "--json"]
TTL = ["--row-ttl", "4"]
SEED = int(os.environ.get("TESSERA_ELASTIC_SEED", "0")) or random.randrange(1, 1 << 30)


class CtrElastic(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2")

    @classmethod
    def setUpClass(cls):
        tl.log("seed %d (TESSERA_ELASTIC_SEED=%d repeats this run)" % (SEED, SEED))
        cls.rng = random.Random(SEED)
        cls.local = {}
        super().setUpClass()

    def want(self, steps, extra=()):
        """--local's report of the run (params_sha256, table_rows)."""
        key = (steps,) + tuple(extra)
        if key not in self.local:
            r = tl.run_cli(["train", "--local", "--steps", str(steps)] + CTR + list(extra),
                           timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            self.local[key] = json.loads(r.stdout)
        return self.local[key]

    def train(self, job, steps=STEPS, extra=(), env=None):
        with tl.environ(**(env or {})):
            return self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                                 self.addr, "--workers", "3", "--job", job, "--steps",
                                 str(steps)] + CTR + list(extra), "train-" + job,
                                stdout_pipe=True)

    def at_step(self, step):
        def reached():
            st = tl.status_json(self.addr)
            return any(w["clock"] >= step for w in st["workers"] if w["state"] == "alive")
        tl.wait_until(reached, 120, "a worker at step %d" % step, interval=0.01)

    def kill_at(self, train, rank, step):
        """SIGKILL of rank's worker once a worker reports step; it must still be running."""
        pid = tl.worker_of(train, rank)
        self.at_step(step)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.fail("rank %d (pid %d) ended before the kill at step %d: the job outran the "
                      "status polling; lower the step or raise STEPS" % (rank, pid, step))

    def finish(self, train, steps=STEPS, extra=()):
        rc = train.wait(300)
        out = train.p.stdout.read().decode()
        err = train.log_text()
        self.assertEqual(rc, 0, "tessera train exited %r:\n%s\n%s" % (rc, out, err[-3000:]))
        got, want = json.loads(out), self.want(steps, extra)
        self.assertEqual(got["params_sha256"], want["params_sha256"], err[-3000:])
        self.assertEqual(got["table_rows"], want["table_rows"])
        return got, err

    def job(self, job_id):
        return tl.wait_until(lambda: next((j for j in tl.status_json(self.addr)["jobs"]
                                           if j["id"] == job_id and j["state"] == "finished"),
                                          None), 30, "job %s finished" % job_id)

    def killed(self, job, extra=()):
        rank, step = self.rng.randrange(1, 3), self.rng.randrange(5, STEPS // 3)
        tl.log("killing rank %d at step %d" % (rank, step))
        train = self.train(job, extra=extra)
        self.kill_at(train, rank, step)
        _, err = self.finish(train, extra=extra)
        self.assertIn("worker %d was killed (signal 9); the others take over its share" % rank,
                      err)
        j = self.job(job)
        self.assertGreaterEqual(j["adopted"], 1, j)
        self.assertGreaterEqual(j["roster"], 1, j)

    def test_killed(self):
        self.killed("killed")

    def test_killed_with_row_ttl(self):
        """--row-ttl 4: every 4 steps the rows no step updated in the last 4 are dropped;
        the job is elastic all the same (a store keeps the rows its sweep dropped, as the
        step found them, with those the step changed)."""
        self.killed("killed-ttl", extra=TTL)

    def test_rank0_killed(self):
        """Rank 0, the one that scores the held-out samples and reports, killed: the others
        finish the job, and tessera train prints the job's fingerprint as its workers told
        the master (every rank computes it), --local's."""
        step = self.rng.randrange(5, STEPS // 3)
        tl.log("killing rank 0 at step %d" % step)
        train = self.train("rank0")
        self.kill_at(train, 0, step)
        rc = train.wait(300)
        out = train.p.stdout.read().decode()
        err = train.log_text()
        self.assertEqual(rc, 0, "tessera train exited %r:\n%s\n%s" % (rc, out, err[-3000:]))
        got = json.loads(out)
        self.assertEqual(got["params_sha256"], self.want(STEPS)["params_sha256"], err[-3000:])
        self.assertIn("worker 0 was killed (signal 9); the others take over its share", err)
        self.assertEqual(self.job("rank0")["params_sha256"], got["params_sha256"])

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_killed_between_two_tables(self):
        """Rank 2 dies after its rows of step 7 reached 4 of the 8 tables; then the same
        with --row-ttl 4, so the 4 tables that applied step 7 also swept their rows after it
        before slot 2 of step 7 is computed again from them."""
        for job, extra in (("between", ()), ("between-ttl", TTL)):
            with self.subTest(job=job):
                train = self.train(job, steps=40, extra=extra,
                                   env={"TESSERA_TEST_DIE_IN_ROWS": "2:7:4"})
                got, err = self.finish(train, steps=40, extra=extra)
                self.assertIn("worker 2 was killed (signal 9); the others take over its share",
                              err)
                self.assertGreaterEqual(got["reslots"], 1, err[-3000:])

    def test_respawned(self):
        step = self.rng.randrange(5, STEPS // 3)
        tl.log("killing rank 1 at step %d; --respawn starts it again" % step)
        train = self.train("respawned", extra=["--respawn"])
        self.kill_at(train, 1, step)
        self.finish(train)
        j = self.job("respawned")
        self.assertGreaterEqual(j["roster"], 2, j)   # away, and back


if __name__ == "__main__":
    tl.main()
