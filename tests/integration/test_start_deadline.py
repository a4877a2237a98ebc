#!/usr/bin/python3
"""test_start_deadline.py - a rank of an elastic job lost before it registered is replaced at
the master's start deadline (docs/elastic.md, "A rank that never came").

Real processes: `tessera up --shards 2 --start-deadline-ms 3000`.

- `tessera run --workers 3` of a user's own program (tests/integration/user_train.py,
  --elastic) whose rank 2 exits before it registers, as a rank a launcher loses may: nobody
  starts it again. Ranks 0 and 1 wait for slot 2 until the deadline, then take it over: the
  job finishes on the fingerprint of the script run by hand, in seconds, and the master says
  "rank 2 never registered within 3000 ms". Before, slot 2 had no owner and the others waited
  for its push until their 120 s timeout, and the job failed.
- `tessera train --workers 3 --exact` whose rank 2 is stopped (SIGSTOP) the moment it exists,
  past the deadline, then killed: `tessera train` says the others took over its share at the
  start deadline (it does not start it again, as it would a rank whose slot nobody holds), and
  ends on the fingerprint of `tessera train --local`.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

DEADLINE_MS = 3000
STEPS = 120


class StartDeadline(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2", "--start-deadline-ms", str(DEADLINE_MS))

    def master_log(self):
        with open(os.path.join(self.c.dir, "up", "master.log"), errors="replace") as f:
            return f.read()

    def job(self, job):
        return [j for j in tl.status_json(self.addr)["jobs"] if j["id"] == job][0]

    def test_a_launched_rank_that_never_registers(self):
        args = ["--steps", "60", "--batch", "36", "--elastic"]
        want = tl.script_by_hand(*args)
        job = "never-%d" % os.getpid()
        program = 'if [ "$RANK" = 2 ]; then exit 0; fi; exec /usr/bin/python3 %s %s' % (
            tl.USER_SCRIPT, " ".join(args))
        t0 = time.monotonic()
        r = subprocess.run([os.path.join(tl.BIN, "tessera"), "run", "--master", self.addr,
                            "--workers", "3", "--job", job, "--json", "--", "sh", "-c",
                            program], capture_output=True, text=True, timeout=150,
                           stdin=subprocess.DEVNULL,
                           env=tl.unlaunched_env(TESSERA_TLS_DIR=os.environ["TESSERA_TLS_DIR"],
                                                 TESSERA_LOG="warn"))
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        doc = json.loads(r.stdout)
        self.assertEqual([k["exit_code"] for k in doc["ranks"]], [0, 0, 0])
        self.assertEqual(doc["state"], "finished", doc)
        self.assertEqual(doc["params_sha256"], want)
        self.assertLess(took, 60, "the others waited for rank 2 (%.1f s)" % took)
        self.assertEqual(self.job(job)["adopted"], 1)
        m = re.search(r"job %s: rank 2 never registered within %d ms: slot 2 goes to worker "
                      r"\d+ \(rank 0\)" % (job, DEADLINE_MS), self.master_log())
        self.assertTrue(m, self.master_log()[-3000:])
        tl.log("rank 2 of 3 exited before it registered: ranks 0 and 1 took slot 2 at the "
               "%d ms deadline; params_sha256 %s... as by hand, in %.1f s"
               % (DEADLINE_MS, want[:12], took))

    def test_a_worker_stopped_past_the_deadline_then_killed(self):
        want = tl.local_fingerprint(STEPS)
        job = "stopped-%d" % os.getpid()
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                              "--workers", "3", "--exact", "--steps", str(STEPS), "--json",
                              "--job", job], "train", stdout_pipe=True)
        rank2 = tl.worker_of(train, 2)
        os.kill(rank2, signal.SIGSTOP)
        tl.wait_until(lambda: self.job(job)["adopted"] == 1, 60,
                      "slot 2 of %s taken over at the start deadline" % job, interval=0.2)
        os.kill(rank2, signal.SIGKILL)
        self.assertEqual(train.wait(240), 0, train.log_text()[-3000:])
        self.assertEqual(json.loads(train.p.stdout.read().decode())["params_sha256"], want)
        self.assertIn("worker 2 was killed (signal 9) before it joined the job; the others "
                      "took over its share at the master's start deadline", train.log_text())
        self.assertNotIn("starting worker 2 again", train.log_text())
        tl.log("rank 2 stopped as it started, past the deadline, then killed: the others held "
               "its share; params_sha256 %s... as --local" % want[:12])


if __name__ == "__main__":
    tl.main()
