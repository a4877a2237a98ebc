#!/usr/bin/python3
"""test_master_pause.py - a master paused longer than the leases (SIGSTOP: a frozen VM, a long
stall) does not kill the job it wakes up to (docs/membership.md, "A paused master").

Real processes: `tessera up --shards 2` (leases of 3 s) and `tessera train --workers 2
--exact`, rank 0 slowed so that the run lasts well past the pause. At step 40 the master is
stopped with SIGSTOP for 6.5 s (two leases) and continued. Checked:
- the training ends by itself with the params_sha256 of `tessera train --local`;
- no member was declared dead: no shard failure, every shard alive in the same epoch-free
  way, both workers left (finished), and the job finished, not abandoned;
- the master's log says it did not run for about the pause and gave its members a lease of
  grace.
Before the fix the master, resuming, compared every member's silence with its lease at once,
declared all of them dead within milliseconds and abandoned the job; the workers failed after
waiting 120 s for a rollback that never came.
"""
import json
import os
import re
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 400
PAUSE_S = 6.5


class MasterPause(tl.UpCase, unittest.TestCase):
    def test_a_paused_master_wakes_to_a_live_job(self):
        want = tl.local_fingerprint(STEPS)
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                              "--workers", "2", "--exact", "--steps", str(STEPS), "--json",
                              "--job", "pause", "--slow", "0:30"], "train", stdout_pipe=True)

        def at_step_40():
            st = tl.status_json(self.addr)
            clocks = [w["clock"] for w in st["workers"] if w.get("job") == "pause"]
            return len(clocks) == 2 and min(clocks) >= 40 and st
        st = tl.wait_until(at_step_40, 120, "both workers at step 40")
        master = st["master_pid"]
        os.kill(master, signal.SIGSTOP)
        try:
            time.sleep(PAUSE_S)
        finally:
            os.kill(master, signal.SIGCONT)
        self.assertTrue(train.running(), "the training ended during the pause")
        self.assertEqual(train.wait(300), 0, train.log_text()[-3000:])
        out = train.p.stdout.read().decode()
        self.assertEqual(json.loads(out)["params_sha256"], want)
        st = tl.status_json(self.addr)
        self.assertEqual(st["shard_failures"], 0, st)
        self.assertEqual([s["state"] for s in st["shards"]], ["alive", "alive"])
        job = [j for j in st["jobs"] if j["id"] == "pause"][0]
        self.assertEqual((job["state"], job["params_sha256"]), ("finished", want), job)
        with open(os.path.join(self.c.dir, "up", "master.log")) as f:
            log = f.read()
        m = re.search(r"the master did not run for (\d+) ms", log)
        self.assertIsNotNone(m, log[-2000:])
        self.assertGreater(int(m.group(1)), PAUSE_S * 1000 - 500)
        self.assertNotIn(": dead", log)
        tl.log("master stopped %.1f s at step 40 of %d: no member declared dead, the job "
               "finished on --local's params_sha256 %s..." % (PAUSE_S, STEPS, want[:12]))


if __name__ == "__main__":
    tl.main()
