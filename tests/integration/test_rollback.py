"""test_rollback.py - a job whose partition lost every copy goes back to its last snapshot by
itself (docs/replication.md, "Rollback").

Real processes: a master and shards sharing a snapshot store, `tessera train` with 2 exact
workers. Checked:
- R = 1, --snapshot-every 50, two jobs training at once (each snapshotted in turn; the second
  with fc1.weight syncing every other step): a shard heading partitions is killed with
  SIGKILL mid-run; both jobs roll back, and both end at the `--local` bits of their settings. Its
  partitions have no other copy; the shard that heads them now reports the loss, the master
  fences the job on every shard, loads its last snapshot everywhere and reopens it; the
  workers reconnect, pull the snapshot's values and train on from its step. The training ends
  by itself (exit 0) with the params_sha256 of `tessera train --local` and "rollbacks": 1;
  ClusterStatus and `tessera status` show the rollback, its step (a multiple of 50, not past
  the kill), and `tessera status --json` the same; a shard that joins after the rollback
  takes its partitions' images (of the rollback's generation) and heads them;
- a shard that joins after the rollback but before the workers pull the snapshot's values
  (they hold there: TESSERA_TEST_HOLD_ROLLBACK_PULL): the shards it took partitions from
  refuse the pull under the new map, the workers fail over to it, and the job ends exact;
- an ASP job of one worker (fc1.weight syncing every other step) and an SSP job of two
  (float), on a cluster of their own: the same kill, both roll back by themselves; the ASP
  job ends at the params_sha256 of the float --local run of the same sync period (one worker
  applies its pushes in one order), the SSP job as well trained; a
  Python worker beside them sees tessera.Rollback, trains on from Client.resume_step, and
  ends with every value exactly what its steps add up to (none lost, none twice);
- without a snapshot store: the same kill ends the training (exit 1) with a message naming
  what was lost and both ways to survive it (--replicas, --store with --snapshot-every), and
  the job is marked lost;
- a reduce job without a snapshot store (R = 1): the same kill, and the training ends by
  itself with the params_sha256 of `tessera train --local --mode reduce`, no rollback: the
  shards that now head the lost partitions make fresh ones that the workers seed with what
  they pulled last (docs/replication.md, "Reduce jobs that lose every copy"), counted in
  ShardStatus.partitions_reseeded and `tessera status`;
- R = 2 on 4 shards (with TESSERA_ROLLBACK_LONG=1, `make test-fault`): two shards killed at
  once, so some chain loses both members: the same rollback, the same fingerprint.
The lease is 10 s, longer than any of this may take: every dead shard is found by a report.
"""
import json
import os
import signal
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import shard_pb2  # noqa: E402

STEPS = 400 if tl.SANITIZED else 900
EVERY = 50
LEASE_MS = 10000
EXACT = ["--workers", "2", "--exact"]
SYNC = ["--sync-every", "fc1.weight=2"]   # rb2's largest tensor syncs every other step


# A worker of the Python binding: one tensor of 64 Ki floats in 16 partitions (so that every
# shard heads some), SGD with lr 0.5 and batch 1, and at step s the gradient s % 7 + 1 in
# every element, a millisecond apart: all exact in binary, so the final value must be -0.5
# times the sum over every step of its gradient, whatever rollbacks came between (a step lost
# or applied twice shows).
# On tessera.Rollback it trains on from Client.resume_step, and stops 200 steps after it (or
# at the step count given, which a run without a rollback reaches). Prints its findings.
PY_WORKER = ["/usr/bin/python3", "-c", """
import json, sys, time
import numpy as np
import tessera
master, job, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = tessera.Client(master=master, job=job, optimizer="sgd:lr=0.5", batch=1, keep=True)
w = c.register("w", 65536, partition_bytes=16384)
p, backs, s = np.zeros(65536, np.float32), [], 0
while s < steps and not (backs and s >= backs[-1] + 200):
    try:
        c.step(s, [np.full(65536, s % 7 + 1, np.float32)], [p])
        s += 1
        time.sleep(0.001)   # still training when the shard is killed
    except tessera.Rollback:
        backs.append(c.resume_step)
        s = c.resume_step
want = -0.5 * sum(k % 7 + 1 for k in range(s))
print(json.dumps({"rollbacks": len(backs), "back_to": backs, "want": want,
                  "wrong": int(np.count_nonzero(p != np.float32(want)))}))
c.close()
"""]


def local_sha(steps, exact=True, extra=()):
    r = tl.run_cli(["train", "--local", "--steps", str(steps), "--json"] +
                   (["--exact"] if exact else []) + list(extra), timeout=300)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


class Base(tl.ClusterCase):
    SHARDS = 3
    REPLICAS = 1
    STORE = True
    MASTER_ENV = {}   # added to the master's environment
    SHARD_ENV = {}    # shard index: added to its environment (test hooks)

    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("TESSERA_LOG", "warn")
        cls.c = tl.Cluster()
        store = ["--store", os.path.join(cls.c.dir, "store")] if cls.STORE else []
        snap = ["--snapshot-every", str(EVERY)] if cls.STORE else []
        with tl.environ(**cls.MASTER_ENV):
            cls.master = cls.c.start_master(lease_ms=LEASE_MS, extra=[
                "--replicas", str(cls.REPLICAS)] + store + snap)
        cls.shards = []
        for i in range(cls.SHARDS):
            with tl.environ(**cls.SHARD_ENV.get(i, {})):
                cls.shards.append(cls.c.start_shard(cls.master.addr, name="shard%d" % i,
                                                    lease_ms=LEASE_MS, extra=store))
        cls.ch = cls.c.channel(cls.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(cls.ch).shards
                                  if s.state == tl.ALIVE) == cls.SHARDS, 15, "shards alive")
        cls.stubs = [tl.Stub(cls.c.channel(s.addr), shard_pb2, "Shard") for s in cls.shards]
        cls.status = [tl.wait_until(lambda st=st: (lambda r: r if r.shard_id else None)(
            st.ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)), 15,
            "the shard to know its id") for st in cls.stubs]

    def version(self, i, job):
        r = self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
        return max([j.max_version for j in r.jobs if j.id == job and j.partitions] or [-1])

    def train_and_kill(self, job, nvictims, at, also=(), args=EXACT):
        """Starts training of job with args, tessera train's or a PY_WORKER command (and of the
        jobs in also, beside it: an id, trained with EXACT, or (id, args)); once each passed
        step `at` and has a snapshot, kills -9 nvictims shards that head job's partitions, at
        once; returns (exit code, last JSON line or None, the training's log) of job, or with
        also, a list of those for job and each of also."""
        runs = [(job, args)] + [a if isinstance(a, tuple) else (a, EXACT) for a in also]
        procs = [self.c.spawn(args if args[0] == PY_WORKER[0] else
                              [os.path.join(tl.BIN, "tessera"), "train", "--master",
                               self.master.addr, "--steps", str(STEPS), "--keep", "--job", j,
                               "--json"] + args, "train-" + j, stdout_pipe=True)
                 for j, args in runs]
        for (j, _), p in zip(runs, procs):
            # A trainer gone before the kill fails the test at once, with its log.
            if tl.wait_until(lambda: "exited" if not p.running() else
                             max(self.version(i, j) for i in range(self.SHARDS)) >= at,
                             120, "job %s to pass step %d" % (j, at)) == "exited":
                self.fail("the trainer of job %s exited (%s) before the kill:\n%s" %
                          (j, p.p.returncode, p.log_text()[-3000:]))
            if self.STORE:
                tl.wait_until(lambda: self.job_snapshot(j) >= EVERY, 60, "a snapshot of " + j)
        self.killed_at = max(self.version(i, job) for i in range(self.SHARDS))
        for v in self.heads(job)[:nvictims]:
            os.kill(self.status[v].pid, signal.SIGKILL)
        got = []
        for p in procs:
            rc = p.wait(300)
            out = p.p.stdout.read().decode().strip().splitlines()
            got.append((rc, json.loads(out[-1]) if out and out[-1].startswith("{") else None,
                        p.log_text()))
        return got if also else got[0]

    def join_one(self, job):
        """Starts a shard that joins the cluster; once no shard is joining and it heads
        partitions of job, returns their max_version as its ShardStatus lists them."""
        s = self.c.start_shard(self.master.addr, name="joiner", lease_ms=LEASE_MS,
                               extra=["--store", os.path.join(self.c.dir, "store")])
        st = tl.Stub(self.c.channel(s.addr), shard_pb2, "Shard")

        def joined():
            if any(x.joining for x in tl.cluster_status(self.ch).shards):
                return None
            r = st.ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
            return [j.max_version for j in r.jobs if j.id == job and j.partitions] or None
        return tl.wait_until(joined, 60, "the joiner to head partitions of " + job)

    def train_past_the_victim(self, job, args, said, steps=STEPS):
        """Trains job (tessera train with args, steps steps) on a cluster whose shard 2 kills
        itself by a test hook; asserts that the training ended by itself and that the victim
        did, saying `said` in its log; returns the training's JSON."""
        p = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                          self.master.addr, "--steps", str(steps), "--keep", "--job", job,
                          "--json"] + args, "train-" + job, stdout_pipe=True)
        rc = p.wait(300)
        out = p.p.stdout.read().decode().strip().splitlines()
        self.assertEqual(rc, 0, p.log_text()[-3000:])
        victim = self.shards[2]
        self.assertEqual(victim.wait(10), -signal.SIGKILL, "the victim killed itself")
        self.assertIn(said, victim.log_text())
        return json.loads(out[-1])

    def dropped(self, i):
        """ShardStatus.partitions_dropped of shard i (0 for one that does not answer)."""
        try:
            return self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(),
                                             timeout=tl.RPC_TIMEOUT).partitions_dropped
        except Exception:   # the killed one
            return 0

    def job_snapshot(self, job):
        """The step of job's newest snapshot in the store (0: none)."""
        r = tl.run_cli(["snapshot", "list", "--store", os.path.join(self.c.dir, "store"),
                        "--json"])
        steps = [s["step"] for s in json.loads(r.stdout or "[]") if s.get("job") == job]
        return max(steps or [0])

    def heads(self, job):
        """Shard indexes heading some partition of job."""
        out = []
        for i, st in enumerate(self.stubs):
            r = st.ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
            if any(j.id == job and j.partitions for j in r.jobs):
                out.append(i)
        return out

    def job_info(self, job):
        return [j for j in tl.cluster_status(self.ch).jobs if j.id == job][0]

    def check_rolled_back(self, job, rc, doc, log, rollbacks=1, steps=STEPS):
        self.assertEqual(rc, 0, log)
        self.assertEqual(doc["params_sha256"], local_sha(steps))
        self.assertEqual(doc["rollbacks"], rollbacks)
        j = self.job_info(job)
        self.assertEqual(j.rollbacks, rollbacks)
        self.assertFalse(j.lost)
        self.assertFalse(j.rolling_back)
        self.assertEqual(j.rollback_step % EVERY, 0)
        self.assertLessEqual(j.rollback_step, self.killed_at)
        self.assertIn("back to step %d of snapshot" % j.rollback_step, j.rollback_note)
        tl.log("rolled back to step %d after a kill at step %d; %s" %
               (j.rollback_step, self.killed_at, j.rollback_note))
        self.assertIn("1 rollback, the last to step %d" % j.rollback_step,
                      tl.status_text(self.master.addr))
        js = [x for x in tl.status_json(self.master.addr)["jobs"] if x["id"] == job][0]
        self.assertEqual((js["rollbacks"], js["rollback_step"], js["lost"]),
                         (1, j.rollback_step, False))
        for s in tl.cluster_status(self.ch).shards:
            if s.state == tl.DEAD:
                self.assertIn("reported unreachable", s.death)


class RollbackOneCopy(Base, unittest.TestCase):
    def test_a_shard_killed_without_replicas_rolls_back_and_ends_exact(self):
        """Two jobs train at once, each snapshotted by --snapshot-every (rb2 with a sync
        period: its snapshots fall on its syncs); the dead shard held
        partitions of both, and both roll back and end exact."""
        (rc, doc, log), (rc2, doc2, log2) = self.train_and_kill(
            "rb", 1, 3 * EVERY, also=(("rb2", EXACT + SYNC),))
        self.check_rolled_back("rb", rc, doc, log)
        self.assertEqual(rc2, 0, log2)
        self.assertEqual(doc2["params_sha256"], local_sha(STEPS, extra=SYNC))
        # Placement depends on tensor names, not jobs: rb2 lost the same partitions.
        self.assertEqual((doc2["rollbacks"], self.job_info("rb2").rollbacks), (1, 1))
        tl.log("rb2: %s" % self.job_info("rb2").rollback_note)
        # A shard that joins after the rollback (a new one, or the dead one restarted) learns
        # the job's rollbacks from the shard that introduces the job, takes the heads' images
        # (of rollback 1) and heads partitions of it at its last version.
        self.assertEqual(self.join_one("rb"), [STEPS])


KILL_STEP = 4 * EVERY   # a few snapshots before it, however fast the steps run


@unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
class SlowToFollowTheMap(Base, unittest.TestCase):
    """The shard killed at a snapshot's step, while the others are slow to act on it (they
    hold a map without a shard 3 s before they follow it: TESSERA_TEST_REMAP_DELAY_MS). The
    victim kills itself as it applies step KILL_STEP (TESSERA_TEST_KILL_AT=step:...), the
    step the master has armed a snapshot at; the others reach it too. Once the victim is
    declared dead the master sees a map without it while the others still head only what
    they headed before, so their pieces of that step leave the victim's rows and tensors
    out. It used to commit those pieces as the job's snapshot (a flaky failure of the kill
    tests under load: the rollback then found a tensor missing, or, with tables, left rows
    out silently). Now the master asks for the pieces under its map, a shard behind it
    follows it before it writes (and finds the loss: its piece is refused), each piece says
    the map it was written under and the master commits none of another; the job goes back
    to an earlier snapshot and ends exact."""
    MASTER_ENV = {"TESSERA_LOG": "info"}
    SHARD_ENV = {0: {"TESSERA_TEST_REMAP_DELAY_MS": "3000"},
                 1: {"TESSERA_TEST_REMAP_DELAY_MS": "3000"},
                 2: {"TESSERA_TEST_KILL_AT": "step:%d" % KILL_STEP}}

    def test_a_snapshot_of_pieces_from_an_older_map_is_not_taken(self):
        # The CTR model: its tables spread over every shard and its small dense tensors are
        # one partition each, so what a piece leaves out is whole (rows, tensors), not a
        # partition the manifest's own check would miss.
        model = ["--model", "ctr", "--batch", "128", "--micro", "32"]
        doc = self.train_past_the_victim("sm", EXACT + model, "killed at step")
        self.assertEqual(doc["params_sha256"], local_sha(STEPS, extra=model))
        self.assertEqual(doc["rollbacks"], 1)
        j = self.job_info("sm")
        self.assertLess(j.rollback_step, KILL_STEP, j.rollback_note)
        self.assertEqual(j.rollback_step % EVERY, 0, j.rollback_note)
        self.assertRegex(self.master.log_text(), r"job sm step %d skipped: .*lost state on this "
                         r"shard" % KILL_STEP)


JP_STEPS = 3 * EVERY   # the kill past the first snapshot, then the rest after the join


@unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
class JoinBeforeThePull(Base, unittest.TestCase):
    """A shard joins after the rollback, before the workers pull the snapshot's values:
    they hold there (TESSERA_TEST_HOLD_ROLLBACK_PULL) until the joiner heads partitions and
    a shard dropped one it handed over (a shard still on the joining map serves the pull,
    rightly: make test once released the hold before that), so their connections, made
    under the rollback's map, reach shards that have since handed partitions to it. Such a shard answers "not on this shard under the shard map": the pull
    fails over to the new map and the job ends exact. Workers once exited there (a CTR job
    under `tessera up --respawn` whose shard came back just after its rollback)."""

    def test_the_pull_after_a_rollback_follows_a_join(self):
        hold = os.path.join(self.c.dir, "hold-pull")
        with tl.environ(TESSERA_TEST_HOLD_ROLLBACK_PULL=hold):
            p = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                              self.master.addr, "--steps", str(JP_STEPS), "--keep", "--job",
                              "jp",
                              "--json"] + EXACT, "train-jp", stdout_pipe=True)
        if tl.wait_until(lambda: "exited" if not p.running() else
                         max(self.version(i, "jp") for i in range(self.SHARDS)) >= EVERY and
                         self.job_snapshot("jp") >= EVERY, 120, "a snapshot of jp") == "exited":
            self.fail("the trainer exited before the kill:\n" + p.log_text()[-3000:])
        self.killed_at = max(self.version(i, "jp") for i in range(self.SHARDS))
        os.kill(self.status[self.heads("jp")[0]].pid, signal.SIGKILL)
        tl.wait_until(lambda: "TESSERA_TEST_HOLD_ROLLBACK_PULL" in p.log_text(), 120,
                      "a worker to hold before its pull")
        self.join_one("jp")
        # The shards that loaded the partitions the joiner heads now have dropped them (they
        # follow the new map): a pull under the rollback's map must be refused by one.
        tl.wait_until(lambda: sum(self.dropped(i) for i in range(self.SHARDS)) > 0, 30,
                      "a shard to drop a partition the joiner took")
        with open(hold, "w"):
            pass
        rc = p.wait(300)
        out = p.p.stdout.read().decode().strip().splitlines()
        log = p.log_text()
        self.check_rolled_back("jp", rc, json.loads(out[-1]) if out else None, log,
                               steps=JP_STEPS)
        self.assertRegex(log, r"pull after rollback 1: shard \d+: tensor \d+ partition \d+ "
                         r"is not on this shard under the shard map .*; failing over")


@tl.long_case
class RollbackModes(Base, unittest.TestCase):
    def test_ssp_and_asp_jobs_roll_back_too(self):
        """Every mode that keeps parameters on the shards is snapshotted and rolls back, with
        sync periods too. ASP with one worker applies its pushes in one order, so it must end
        at the bits of the float --local run; SSP with two workers (their pushes interleave)
        must end, after the rollback, as well trained as without one."""
        # Float steps are quick: 4 ms more each, so that these jobs still train when the
        # shard dies (it waits for a snapshot of each of the three).
        slow = ["--slow", "0:4"]
        got = self.train_and_kill(
            "rb-asp", 1, 3 * EVERY, args=["--workers", "1", "--mode", "asp"] + SYNC + slow,
            also=(("rb-ssp", ["--workers", "2", "--mode", "ssp", "--staleness", "2"] + slow),
                  ("rb-py", PY_WORKER + [self.master.addr, "rb-py", str(20 * STEPS)])))
        (rc, doc, log), (rc2, doc2, log2), (rc3, doc3, log3) = got
        for job, rc_, doc_, log_ in (("rb-asp", rc, doc, log), ("rb-ssp", rc2, doc2, log2)):
            self.assertEqual(rc_, 0, log_)
            j = self.job_info(job)
            self.assertEqual((doc_["rollbacks"], j.rollbacks), (1, 1), log_)
            self.assertEqual(j.rollback_step % EVERY, 0)
            tl.log("%s: %s; test accuracy %.4f" % (job, j.rollback_note, doc_["test_accuracy"]))
        self.assertEqual(doc["params_sha256"], local_sha(STEPS, exact=False, extra=SYNC))
        self.assertGreaterEqual(doc2["test_accuracy"], 0.75)
        # The Python binding: tessera.Rollback, resume_step, and no step lost or doubled.
        self.assertEqual(rc3, 0, log3)
        self.assertEqual((doc3["rollbacks"], self.job_info("rb-py").rollbacks), (1, 1),
                         (doc3, log3[-3000:]))
        self.assertEqual(doc3["back_to"], [self.job_info("rb-py").rollback_step])
        self.assertEqual(doc3["wrong"], 0, doc3)
        tl.log("rb-py: went back to step %d; all %d values are %g" %
               (doc3["back_to"][0], 65536, doc3["want"]))


class LostWithoutSnapshot(Base, unittest.TestCase):
    SHARDS = 2
    STORE = False

    def test_lost_state_fails_saying_what_and_how_to_avoid_it(self):
        rc, doc, log = self.train_and_kill("nostore", 1, 100)
        self.assertNotEqual(rc, 0)
        for want in ("every copy of a partition of job 'nostore' is lost",
                     "no snapshot of the job", "--replicas 2", "--snapshot-every"):
            self.assertIn(want, log)
        j = self.job_info("nostore")
        self.assertTrue(j.lost)
        self.assertIn("no snapshot", j.rollback_note)


class LostWithReplicas(Base, unittest.TestCase):
    REPLICAS = 2
    STORE = False

    def test_lost_state_advice_names_more_replicas_than_the_cluster_runs(self):
        # Two of three shards killed at once: some partition had both in its chain.
        rc, doc, log = self.train_and_kill("norep", 2, 100)
        if rc == 0:
            self.skipTest("no chain had both members among the two killed")
        note = self.job_info("norep").rollback_note
        for want in ("every copy of a partition of job 'norep' is lost",
                     "the cluster runs --replicas 2", "--replicas 3", "--snapshot-every"):
            self.assertIn(want, log)
            self.assertIn(want, note)
        self.assertNotIn("--replicas 2 or more", log)
        self.assertNotIn("...", note)   # the whole note fits


class ReduceSeeded(Base, unittest.TestCase):
    STORE = False

    def test_reduce_job_seeded_by_its_workers_ends_exact_without_a_snapshot(self):
        mode = ["--mode", "reduce"]
        rc, doc, log = self.train_and_kill("rd", 1, 100, args=EXACT + mode)
        self.assertEqual(rc, 0, log[-3000:])
        self.assertEqual(doc["params_sha256"], local_sha(STEPS, extra=mode))
        self.assertEqual(doc["rollbacks"], 0)
        self.assertFalse(self.job_info("rd").lost)
        alive = [i for i in range(self.SHARDS) if self.shards[i].running()]
        seeded = sum(self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(),
                                               timeout=tl.RPC_TIMEOUT).partitions_reseeded
                     for i in alive)
        self.assertGreater(seeded, 0)
        self.assertIn("seeded again by their workers", tl.status_text(self.master.addr))
        tl.log("rd: killed at step %d; %d partitions seeded again by the workers, same "
               "params_sha256 as --local" % (self.killed_at, seeded))


@unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
class ReduceSeededTorn(Base, unittest.TestCase):
    """As ReduceSeeded, but the shard dies in the middle of a pull's reply
    (TESSERA_TEST_KILL_AT=torn:KILL_STEP): the first rank it answers version KILL_STEP of a
    partition has half of it over version KILL_STEP - 1 in its buffer, the other rank the old
    version whole. The torn rank must seed that version without values; it once sent the
    mixed buffer as version KILL_STEP - 1's values, the new head found them different from
    the other rank's ("values: rank 0's version 103 ... differs from another rank's": make
    test, once) and the job failed. No store, so no snapshot to wait for: the kill comes
    early (TORN_STEP) and the job ends 60 steps after it."""
    STORE = False
    TORN_STEP = 60
    SHARD_ENV = {2: {"TESSERA_TEST_KILL_AT": "torn:%d" % TORN_STEP}}

    def test_a_reply_cut_short_is_not_seeded_as_values(self):
        mode = ["--mode", "reduce"]
        steps = self.TORN_STEP + 60
        doc = self.train_past_the_victim("rt", ["--transport", "tcp"] + EXACT + mode,
                                         "answered with half its values", steps)
        self.assertEqual(doc["params_sha256"], local_sha(steps, extra=mode))
        self.assertEqual(doc["rollbacks"], 0)


@unittest.skipUnless(os.environ.get("TESSERA_ROLLBACK_LONG") == "1",
                     "TESSERA_ROLLBACK_LONG=1 (make test-fault): two of four shards killed")
class TwoOfFour(Base, unittest.TestCase):
    SHARDS = 4
    REPLICAS = 2

    def test_two_shards_killed_at_once_roll_back_and_end_exact(self):
        rc, doc, log = self.train_and_kill("rb4", 2, 3 * EVERY)
        if rc == 0 and doc and doc["rollbacks"] == 0:
            self.skipTest("no chain had both members among the two killed")
        self.check_rolled_back("rb4", rc, doc, log)


if __name__ == "__main__":
    tl.main()
