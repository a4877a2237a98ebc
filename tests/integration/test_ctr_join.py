#!/usr/bin/python3
"""A shard that joins while `tessera train --model ctr` runs (docs/embeddings.md, "When a
shard joins"): the tables' rows move to the map with it from a snapshot taken with them held,
no step redone, the --local fingerprint. The CTR trainer's helpers and its other cases are
test_ctr.py's; these run in make test under the sanitizer build only
(asan/integration/test_ctr_join) and with TESSERA_LONG=1.

- A third shard started while 2 train without copies: no rollback, rows of every table on
  the new shard, one move on /metrics.
- The master killed in the middle of the move and started again on its state: it makes the
  move, no rollback.
- A fourth shard started before the third's move, or registering in its middle: no
  rollback.
- A shard killed in the move: one rollback without copies, none with --replicas 2."""
import json
import os
import subprocess
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
import test_ctr as ctr  # noqa: E402


@unittest.skipUnless(tl.SANITIZED or tl.LONG, ctr.IN_ASAN_JOIN)
class Joins(tl.ClusterCase, unittest.TestCase):
    """A shard started while the CTR trainer runs on 2 shards without copies joins: the
    tables' rows move to the map with it from a snapshot taken with them held at its step
    (docs/embeddings.md, "When a shard joins"), no step is redone, and the run ends on the
    --local fingerprint with the new shard serving rows of every table. (With copies, and a
    shard that died first: ShardKilled.test_a_respawned_shard_joins.) A master killed in the
    middle of the move makes it when it is started again; a fourth shard that starts while
    the third's move waits, or registers in its middle, joins too with no rollback."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()

    ARGS = [a if a != "30" else "160" for a in ctr.EXACT]   # the join well before the end

    def start(self, master_argv, store, env=None, first_shard_env=None):
        """A master of master_argv (started under env; its --replicas says whether the rows
        have copies) and 2 shards over store (the first under first_shard_env), alive;
        returns the master's Proc and the shards'."""
        c = self.c
        with tl.environ(**(env or {})):
            master = c.start_server("tessera-master", "%s-master" % self.job, master_argv)
        shards = []
        for i in range(2):
            with tl.environ(**((first_shard_env or {}) if i == 0 else {})):
                shards.append(c.start_shard(master.addr, name="%s-shard%d" % (self.job, i),
                                            extra=["--store", store]))
        tl.wait_until(lambda: sum(1 for s in tl.status_json(master.addr)["shards"]
                                  if s["state"] == "alive") == 2, 30, "2 shards alive")
        return master, shards

    def train_with_a_join(self, master, store, shards, meanwhile=lambda: None):
        """The CTR trainer (ARGS, 2 workers) on master; a third shard started once a shard is
        past step 30 (appended to shards), then meanwhile() while the job runs. Checks that
        the job ends on the --local fingerprint and returns its JSON, its stderr and
        --local's JSON."""
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "train", "--master",
                              master.addr, "--workers", "2", "--job", self.job, "--slow",
                              "0:60", "--keep"] + self.ARGS, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            tl.shard_once_past(master.addr, 30, which=0)
            tl.log("starting a third shard")
            shards.append(self.c.start_shard(master.addr, name="%s-new" % self.job,
                                             extra=["--store", store]))
            meanwhile()
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        tl.scan_for_sanitizer("tessera train", err)
        self.assertEqual(p.returncode, 0, err[-3000:])
        got, want = json.loads(out), ctr.train_json(["--local"] + self.ARGS)
        self.assertEqual(got["params_sha256"], want["params_sha256"], err[-3000:])
        self.assertEqual(got["table_rows"], want["table_rows"])
        return got, err, want

    def test_rows_move_to_a_shard_that_joins(self):
        self.job = "j"
        store = os.path.join(self.c.dir, "store")
        mport = tl.free_port()
        master, shards = self.start(["--listen", "127.0.0.1:0", "--replicas", "1", "--store",
                                     store, "--snapshot-every", "10", "--metrics-port",
                                     str(mport)], store)
        got, err, want = self.train_with_a_join(master, store, shards)
        self.assertEqual(got["rollbacks"], 0, err[-3000:])
        ctr.assert_rows_moved(self, store, err)
        self.assertIn("tables moved to the shards of epoch", master.log_text())
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as r:
            metrics = r.read().decode()
        self.assertIn('tessera_table_moves_total{result="moved"} 1\n', metrics)
        self.assertRegex(metrics, r"tessera_table_move_held_seconds_count 1\n")
        status = tl.status_json(master.addr)
        alive = [s for s in status["shards"] if s["state"] == "alive"]
        self.assertEqual(len(alive), 3, status["shards"])
        new = max(alive, key=lambda s: s["id"])
        self.assertEqual(new["tables"], 8, new)
        self.assertGreater(new["table_rows"], 0, new)
        self.assertEqual(sum(s["table_rows"] for s in alive), want["table_rows"], alive)

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_master_killed_mid_move(self):
        """The master kills itself (TESSERA_TEST_MASTER_DIE_MOVING) once one shard moved the
        tables to the map with the new shard, the others' still held at the join's step, and
        is started again on its port and state directory. The move is in its state file: it
        asks every shard again, the one that moved says so, the others move, and the job goes
        on with no rollback to the --local fingerprint."""
        self.job = "m"
        store = os.path.join(self.c.dir, "store-m")
        argv = ["--listen", "127.0.0.1:%d" % tl.free_port(), "--state-dir",
                os.path.join(self.c.dir, "m-state"), "--replicas", "1", "--store", store,
                "--snapshot-every", "10"]
        master, shards = self.start(argv, store, {"TESSERA_TEST_MASTER_DIE_MOVING": "1"})
        again = []

        def master_dies_and_comes_back():
            self.assertIsNotNone(master.wait(120), "the master did not die in the move")
            self.assertIn("TESSERA_TEST_MASTER_DIE_MOVING: killed after 1 shards",
                          master.log_text())
            tl.log("the master died in the move; starting it again")
            again.append(self.c.start_server("tessera-master", "m-master-2", argv))

        got, err, _ = self.train_with_a_join(master, store, shards, master_dies_and_comes_back)
        self.assertEqual(got["rollbacks"], 0, err[-3000:])
        log = again[0].log_text()
        self.assertIn("which the master was making when it stopped, is made now", log)
        self.assertIn("tables moved to the shards of epoch", log)
        told = [s for s in shards if "moved from snapshot" in s.log_text() and
                "here already" in s.log_text()]
        self.assertEqual(len(told), 1, "one shard had moved the tables before the master died")

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_second_shard_joins_before_the_move(self):
        """A third shard joins, and a fourth starts after the join's snapshot, before its
        move (TESSERA_TEST_MASTER_MOVE_AFTER_JOIN holds the move until it is joining): the
        move waited for no shard joining while the fourth's join waited for the master's
        loop, which ran nothing but the waiting move; 30 s, then the move was given up. Now
        the fourth's join takes its snapshot over the move's (the tables held at the same
        step) and one move places the rows on the map with both: no rollback, the --local
        fingerprint, 4 shards serving rows."""
        log = self.a_fourth_shard_joins("jj", "TESSERA_TEST_MASTER_MOVE_AFTER_JOIN",
                                        "the join's move waits for a shard joining", "join")
        self.assertIn("a shard joins; the move goes on", log)
        self.assertNotIn("within 30 s of its snapshot", log)
        self.assertIn("tables moved to the shards of epoch", log)

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_shard_registers_in_the_move(self):
        """A fourth shard registers while the third's join is being moved: one shard has
        moved the tables when the map moves on (TESSERA_TEST_MASTER_MOVE_PAUSE holds the
        move there until it does). The ring is the same (the fourth is only joining), so
        the shards left move on the newer map; before, they refused the move's epoch as
        stale, the move was given up half made, and 90 s later the job went back to a
        snapshot. Then the fourth joins with a move of its own: no rollback, the --local
        fingerprint, 4 shards serving rows."""
        log = self.a_fourth_shard_joins("jr", "TESSERA_TEST_MASTER_MOVE_PAUSE",
                                        "MOVE_PAUSE: one shard moved")
        self.assertNotIn("the move of its tables failed", log)
        self.assertEqual(log.count("tables moved to the shards of epoch"), 2, log)

    def a_fourth_shard_joins(self, job, hook, line, value="1"):
        """A join (train_with_a_join, without copies) under the master's test hook; a fourth
        shard started once the master logs line. Checks no rollback and 4 shards serving
        every row; returns the master's log."""
        self.job = job
        store = os.path.join(self.c.dir, "store-" + job)
        master, shards = self.start(["--listen", "127.0.0.1:0", "--replicas", "1", "--store",
                                     store, "--snapshot-every", "10"], store, {hook: value})

        def a_fourth_shard():
            tl.wait_until(lambda: line in master.log_text(), 60, "'%s' in the master's log"
                          % line)
            tl.log("starting a fourth shard")
            shards.append(self.c.start_shard(master.addr, name="%s-fourth" % job,
                                             extra=["--store", store]))

        got, err, want = self.train_with_a_join(master, store, shards, a_fourth_shard)
        self.assertEqual(got["rollbacks"], 0, err[-3000:])
        alive = [s for s in tl.status_json(master.addr)["shards"] if s["state"] == "alive"]
        self.assertEqual(len(alive), 4, alive)
        self.assertTrue(all(s["table_rows"] > 0 for s in alive), alive)
        self.assertEqual(sum(s["table_rows"] for s in alive), want["table_rows"], alive)
        return master.log_text()

    def killed_in_the_move(self, job, replicas):
        """A join (train_with_a_join) on 2 shards with `replicas`, the first of which kills
        itself when the master's MoveTables comes to it (TESSERA_TEST_KILL_AT=move:1), before
        it moves anything; returns the master, the shards and the job's JSON and stderr."""
        self.job = job
        store = os.path.join(self.c.dir, "store-" + job)
        master, shards = self.start(["--listen", "127.0.0.1:0", "--replicas", str(replicas),
                                     "--store", store, "--snapshot-every", "10"], store,
                                    first_shard_env={"TESSERA_TEST_KILL_AT": "move:1"})
        got, err, _ = self.train_with_a_join(master, store, shards)
        self.assertIn("TESSERA_TEST_KILL_AT: killed at move", shards[0].log_text())
        self.assertIsNotNone(shards[0].wait(0), "the shard did not die")
        return master, shards, got, err

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_shard_killed_in_the_move(self):
        """A shard of the two without copies kills itself when the master's MoveTables comes
        to it (TESSERA_TEST_KILL_AT=move:1), before it moves anything: its rows and
        partitions had no other copy, so the job goes back to the join's snapshot on the
        two shards left and ends on the --local fingerprint; never on a half-moved table."""
        master, shards, got, err = self.killed_in_the_move("k", 1)
        self.assertGreaterEqual(got["rollbacks"], 1, err[-3000:])
        tl.log("%d rollback(s)" % got["rollbacks"])

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_shard_with_copies_killed_in_the_move(self):
        """The same with --replicas 2: each row is on both old shards. The one killed in the
        move leaves the join's move failed and every table still held at its step; the other
        serves the copy of the dead shard's rows, the master copies the rows anew from a
        snapshot of that step, and the job goes on with no rollback to the --local
        fingerprint. (Before: the survivor left the copy unserved while its tables were held,
        the snapshot missed the dead shard's rows, and the job ended 'done' without them.)"""
        master, shards, got, err = self.killed_in_the_move("c", 2)
        self.assertIn("this shard serves the copy of its rows", shards[1].log_text())
        log = master.log_text()
        self.assertIn("the move of its tables failed", log)
        self.assertRegex(log[log.index("the move of its tables failed"):],
                         "tables moved to the shards of epoch")
        self.assertEqual(got["rollbacks"], 0, err[-3000:])


if __name__ == "__main__":
    tl.main()
