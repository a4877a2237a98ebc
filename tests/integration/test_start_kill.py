#!/usr/bin/python3
"""test_start_kill.py - a worker killed while it starts, before it joined its job, does not end
the job (docs/elastic.md, "A worker killed while it starts").

Real processes: `tessera up --shards 2` and `tessera train --workers 3 --exact` without
--respawn. Rank 2's tessera-worker is killed with SIGKILL the moment it exists, long before it
reads its data set and registers. Checked: `tessera train` says the worker was killed before
it joined and starts it again, and ends by itself with the params_sha256 of `tessera train
--local`. Before, it said "the others take over its share", but the master had never given the
slot to anyone, so the others waited for it 120 s and the job failed.
"""
import json
import os
import signal
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 120


class StartKill(tl.UpCase, unittest.TestCase):
    def test_a_worker_killed_before_it_joined(self):
        want = tl.local_fingerprint(STEPS)
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                              "--workers", "3", "--exact", "--steps", str(STEPS), "--json",
                              "--job", "startkill"], "train", stdout_pipe=True)
        os.kill(tl.worker_of(train, 2), signal.SIGKILL)
        self.assertEqual(train.wait(240), 0, train.log_text()[-3000:])
        self.assertEqual(json.loads(train.p.stdout.read().decode())["params_sha256"], want)
        self.assertIn("worker 2 was killed (signal 9) before it joined the job: no one holds "
                      "its share, so it starts again", train.log_text())
        tl.log("rank 2 killed as it started: started again, params_sha256 %s... as --local"
               % want[:12])


if __name__ == "__main__":
    tl.main()
