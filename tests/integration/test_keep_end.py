#!/usr/bin/python3
"""test_keep_end.py - a kept job (`tessera train --keep`) stays kept when the end of its run
meets a kill (issue 44 item 5; docs/operations.md, "How jobs end").

Real processes: `tessera up --shards 2` (mutual TLS, leases of 3 s) and `tessera train --exact
--keep`.

- A worker killed after another finished: 2 workers; the moment the master lists one of them
  as left (it deregistered, finished), the other, still at the end of its run (rank 0
  evaluates the final values before it leaves), gets SIGKILL. The job is idle with the
  params_sha256 of `tessera train --local`, and a later `tessera train --job` trains on from
  it to the bits of one run. Before, the master abandoned the job and the shards freed it:
  the last worker had died, though the training was over.
- The master killed right after a Deregister: 1 worker; the moment the master lists the job
  idle, the master gets SIGKILL, and `tessera up` starts it again with its state. The job is
  still idle, its worker left, and a later run trains on from it. Before, the state file
  (written every 100 ms) lacked the Deregister the master had acknowledged: the restarted
  master took the departed worker for alive, found its lease run out 13 s later and
  abandoned the job.
If the second worker of the first test finishes before the kill reaches it, the run proves
nothing and is tried again with another job, at most three times.
"""
import json
import os
import signal
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 60
RUNNING = tl.master_pb2.JOB_STATE_RUNNING
IDLE = tl.master_pb2.JOB_STATE_IDLE


class KeepEnd(tl.UpCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ch = cls.c.channel(cls.addr)   # a poll takes a millisecond: no CLI per look

    def job(self, job_id):
        return next((j for j in tl.cluster_status(self.ch).jobs if j.id == job_id), None)

    def ended(self, job_id):
        """The job once it no longer runs (the master settled it)."""
        return tl.wait_until(lambda: (lambda j: j if j and j.state != RUNNING else None)(
            self.job(job_id)), 30, "job %s to end its run" % job_id, interval=0.05)

    def train(self, job, workers, *extra):
        return self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                             "--workers", str(workers), "--exact", "--steps", str(STEPS),
                             "--json", "--job", job, "--keep"] + list(extra), "train-" + job,
                            stdout_pipe=True)

    def trains_on(self, job, workers):
        """A later run of job (its shards hold it for that many workers), to twice STEPS: it
        starts at STEPS and ends on the bits of one run of twice STEPS."""
        r = tl.run_cli(["train", "--master", self.addr, "--workers", str(workers), "--exact",
                        "--steps", str(2 * STEPS), "--json", "--job", job], timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        out = json.loads(r.stdout)
        self.assertEqual(out["start_step"], STEPS, out)
        self.assertEqual(out["params_sha256"], tl.local_fingerprint(2 * STEPS))

    def test_a_worker_killed_after_another_finished(self):
        want = tl.local_fingerprint(STEPS)
        for attempt in range(3):
            job = "keep-end-%d" % attempt
            train = self.train(job, 2)
            pids = {tl.worker_of(train, r) for r in (0, 1)}

            def first_left():
                if not train.running():
                    return ["exited"]
                return [w.pid for w in tl.cluster_status(self.ch).workers
                        if w.job == job and w.state == tl.LEFT] or None
            left = tl.wait_until(first_left, 120, "a worker of %s to finish" % job,
                                 interval=0.002)
            if len(left) == 1 and left[0] in pids:
                os.kill((pids - set(left)).pop(), signal.SIGKILL)
            # tessera train reports the killed rank and exits 1: its last worker failed.
            self.assertIsNotNone(train.wait(60), "tessera train did not end")
            j = self.ended(job)
            if j.finished == 1:   # the kill came before the other's Deregister
                break
            tl.log("attempt %d: both workers finished before the kill; again" % attempt)
        else:
            self.fail("three times, both workers finished before the kill reached one")
        self.assertEqual((j.state, j.fingerprint, j.alive, j.released), (IDLE, want, 0, False),
                         j)
        self.trains_on(job, 2)
        tl.log("a worker killed after the other finished: %s idle on --local's params_sha256 "
               "%s..., trained on from step %d" % (job, want[:12], STEPS))

    def test_b_master_killed_right_after_a_deregister(self):
        want = tl.local_fingerprint(STEPS)
        job = "keep-restart"
        first = tl.cluster_status(self.ch).master_pid
        train = self.train(job, 1)
        tl.wait_until(lambda: (lambda j: j and j.state == IDLE)(self.job(job)), 120,
                      "job %s idle" % job, interval=0.002)
        os.kill(first, signal.SIGKILL)
        # A Deregister the kill cut off is asked again of the restarted master.
        self.assertEqual(train.wait(60), 0, train.log_text()[-3000:])
        st = tl.wait_until(lambda: (lambda d: d if d["master_pid"] != first else None)(
            tl.status_json(self.addr)), 30, "the master started again", interval=0.1)
        self.assertTrue(st["restored"], st)
        j = self.ended(job)
        self.assertEqual((j.state, j.fingerprint, j.alive, j.finished, j.released),
                         (IDLE, want, 0, 1, False), j)
        self.assertEqual([w.state for w in tl.cluster_status(self.ch).workers if w.job == job],
                         [tl.LEFT])
        self.trains_on(job, 1)
        tl.log("the master killed right after the Deregister: %s idle after its restart, "
               "trained on from step %d" % (job, STEPS))


if __name__ == "__main__":
    tl.main()
