"""test_replication.py - partitions on chains of shards (docs/replication.md).

Real processes: a master with --replicas 2 and three shards. Checked:
- exact training over replicated partitions ends with the params_sha256 of `tessera train
  --local` (the hold on pulls and the images down the chain change no bit);
- every partition is held by exactly 2 shards, and `tessera verify replicas` finds every
  follower equal to its head (text and --json), so a failover would find the same state;
- shards started with TESSERA_TEST_FLIP_REPLICA corrupt one bit of the copy of one partition
  they follow, and `tessera verify replicas` exits 1 naming that partition and that shard
  (training stays exact: a follower serves no pull);
- refusals: `tessera up --replicas` above --shards, the master's --replicas out of range, each
  naming what to change; an SSP job of two workers has 2 equal copies of each partition at
  version 6 (its 6 pushes);
- a follower killed with SIGKILL while exact training runs (4 shards, R = 2, a shard that
  heads no partition): the heads wait for the map to drop it, send their next image to the
  shard that joined each chain, and training ends by itself with the --local fingerprint;
  then every partition has 2 equal copies again, none on the dead shard;
- then a head killed the same way: the workers' connections to it break, they wait for the
  map to drop it, connect to the shards of the new map and send the step again (duplicates
  acknowledged, not added); the promoted followers take it, and training ends by itself with
  the --local fingerprint and whole chains;
- after each kill, the jobs kept idle on the cluster get whole chains too, with no step to
  carry the images (the heads' repair thread);
- then down to one shard: the chains shrink to it, and training still ends exact;
- R = 3 on 4 shards: the shard in the middle of the most chains killed the same way; training
  ends with the --local fingerprint and every partition has 3 equal copies again;
- SSP and ASP (3 shards, R = 2): a head killed under an ASP job of one worker, an SSP job of
  two and an ASP job of two Python workers at once; each ends by itself without a rollback,
  the first with the float --local fingerprint, the second well trained, the third with every
  value the sum of every push of both ranks (none lost, none applied twice); then their
  chains are whole again. Then a shard killed just before workers start: they find it dead
  as they connect, report it, and train to the --local fingerprint; and one killed before a
  tessera_pull outside any step, which fails over like a step.
- The lease of those kills is 10 s, longer than a failover may take: each dead shard must be
  dropped from the map because a worker or a chain neighbour reported it (ReportUnreachable)
  and the master found its port closed, which ClusterStatus says as the shard's death;
- ReportUnreachable's refusals (shard_id missing or unknown, reporter too long), and a live
  shard reported unreachable stays in the map; a worker reported by a shard about a
  connection whose HELLO said a map older than the shard's registration stays alive, and
  one reported under the shard's map is declared dead.
"""
import functools
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402

STEPS = 6
SHARDS = 3
# Every shard runs with TESSERA_TEST_FLIP_REPLICA=2:1: whichever follows tensor 2 (fc2.weight,
# 256 x 128 floats) partition 1 corrupts one bit of its copy. With the default 4 MiB
# partitions fc2.weight has one partition, so nothing is corrupted; with 64 KiB it has two.
FLIP = (2, 1)


def train(master, job, *extra):
    r = tl.run_cli(["train", "--master", master, "--workers", "2", "--steps", str(STEPS),
                    "--exact", "--keep", "--job", job, "--json"] + list(extra), timeout=180)
    if r.returncode != 0:
        raise AssertionError("tessera train exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def local_sha(*extra):
    r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"] +
                   list(extra), timeout=120)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


def start_cluster(cls, shards, lease_ms=None, env=None, replicas=2):
    """cls.c: a master with --replicas `replicas` and `shards` shards (env set while they
    start), all alive and knowing their ids; cls.stubs their Shard stubs, cls.status their
    ShardStatus."""
    os.environ.setdefault("TESSERA_LOG", "warn")
    cls.c = tl.Cluster()
    cls.master = cls.c.start_master(lease_ms=lease_ms, extra=["--replicas", str(replicas)])
    os.environ.update(env or {})
    try:
        cls.shards = [cls.c.start_shard(cls.master.addr, name="shard%d" % i, lease_ms=lease_ms)
                      for i in range(shards)]
    finally:
        for k in env or {}:
            os.environ.pop(k, None)
    cls.ch = cls.c.channel(cls.master.addr)
    tl.wait_until(lambda: sum(1 for s in tl.cluster_status(cls.ch).shards
                              if s.state == tl.ALIVE) == shards, 15, "%d shards alive" % shards)
    cls.stubs = [tl.Stub(cls.c.channel(s.addr), shard_pb2, "Shard") for s in cls.shards]
    for st in cls.stubs:
        tl.wait_until(lambda: st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                             timeout=tl.RPC_TIMEOUT).shard_id, 15,
                      "the shard to know its id")
    cls.status = [st.ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
                  for st in cls.stubs]


class Replicated(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_cluster(cls, SHARDS, env={"TESSERA_TEST_FLIP_REPLICA": "%d:%d" % FLIP})
        cls.ids = [s.shard_id for s in cls.status]

    def digests(self, job):
        """{(tensor_id, partition): [(shard id, PartitionDigest)]} over the shards."""
        out = {}
        for sid, st in zip(self.ids, self.stubs):
            r = st.PartitionDigests(shard_pb2.PartitionDigestsRequest(job=job),
                                    timeout=tl.RPC_TIMEOUT)
            self.assertEqual(r.shard_id, sid)
            for d in r.partitions:
                out.setdefault((d.tensor_id, d.partition), []).append((sid, d))
        return out

    def check_chains(self, parts):
        """Each partition on 2 shards: one head whose next is the follower, the follower the
        tail, both at the last step. Returns the follower of FLIP (or None)."""
        flip_follower = None
        for key, copies in parts.items():
            self.assertEqual(len(copies), 2, "partition %s on %s" % (key, copies))
            heads = [(sid, d) for sid, d in copies if not d.follower]
            tails = [(sid, d) for sid, d in copies if d.follower]
            self.assertEqual((len(heads), len(tails)), (1, 1), key)
            (hs, hd), (fs, fd) = heads[0], tails[0]
            self.assertNotEqual(hs, fs)
            self.assertEqual(hd.next, fs, "the head's next is its follower")
            self.assertEqual(fd.next, 0, "a chain of 2 ends at the follower")
            self.assertEqual((hd.version, fd.version), (STEPS, STEPS), key)
            if key == FLIP:
                self.assertNotEqual(hd.sha256, fd.sha256, "the planted bit")
                flip_follower = fs
            else:
                self.assertEqual(hd.sha256, fd.sha256, key)
        return flip_follower

    def test_1_exact_training_matches_local_and_replicas_are_equal(self):
        m = tl.Stub(self.ch, master_pb2, "Master")
        self.assertEqual(m.GetShardMap(master_pb2.GetShardMapRequest(),
                                       timeout=tl.RPC_TIMEOUT).replicas, 2)
        self.assertEqual(tl.cluster_status(self.ch).replicas, 2)
        r = tl.run_cli(["status", "--master", self.master.addr, "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["replicas"], 2)
        got = train(self.master.addr, "rep-a")
        self.assertEqual(got["params_sha256"], local_sha())
        parts = self.digests("rep-a")
        self.assertEqual(len(parts), 6)   # the MLP's 6 tensors, one partition each
        self.assertIsNone(self.check_chains(parts))
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", "rep-a"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("PASS: 6 of 6 partitions", r.stdout)

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_2_a_flipped_bit_in_a_replica_is_found(self):
        got = train(self.master.addr, "rep-flip", "--partition-kb", "64")
        # The corrupted follower never serves a pull: training is still exact.
        self.assertEqual(got["params_sha256"], local_sha("--partition-kb", "64"))
        parts = self.digests("rep-flip")
        self.assertGreater(len(parts), 6)
        bad = self.check_chains(parts)
        self.assertIsNotNone(bad)
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job",
                        "rep-flip"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("shard %d differs from the head" % bad, r.stdout)
        self.assertIn("FAIL: %d of %d partitions" % (len(parts) - 1, len(parts)), r.stdout)
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job",
                        "rep-flip", "--json"])
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["differ"], 1)
        self.assertEqual([(d["tensor"], d["partition"]) for d in doc["details"]
                          if not d["equal"]], [("fc2.weight", 1)])
        # Two jobs on the shards: --job is needed.
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr])
        self.assertEqual(r.returncode, 2)
        self.assertIn("name one with --job", r.stderr)

    def test_3_refusals_and_async_modes(self):
        # SSP is replicated too: 2 equal copies of each partition, clocks and all.
        r = tl.run_cli(["train", "--master", self.master.addr, "--workers", "2", "--steps", "3",
                        "--mode", "ssp", "--job", "rep-ssp", "--keep", "--json"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", "rep-ssp",
                        "--json"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["copies_wanted"], 2)
        self.assertTrue(all(d["copies"] == 2 and d["version"] == 6 for d in doc["details"]),
                        doc)
        r = tl.run_cli(["up", "--shards", "2", "--replicas", "3", "--master-port", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--replicas 3 needs at least as many shards (--shards 2)", r.stderr)
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", "nope"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("'nope' is on no alive shard", r.stderr)
        p = self.c.spawn([os.path.join(tl.BIN, "tessera-master"), "--replicas", "9",
                          "--listen", "127.0.0.1:0"], "bad-master")
        self.assertEqual(p.wait(10), 2)
        self.assertIn("replicas", p.log_text())

    def test_4_report_unreachable(self):
        """A report is checked, never trusted: a live shard stays; bad fields are refused."""
        m = tl.Stub(self.ch, master_pb2, "Master")
        before = tl.cluster_status(self.ch)
        sid = self.status[0].shard_id
        r = m.ReportUnreachable(master_pb2.ReportUnreachableRequest(
            shard_id=sid, reporter="test", detail="made up"), timeout=tl.RPC_TIMEOUT)
        self.assertFalse(r.dead)
        self.assertEqual(r.epoch, before.epoch)
        self.assertIn("accepts connections", r.verdict)
        after = tl.cluster_status(self.ch)
        self.assertEqual(after.epoch, before.epoch)
        # The report added no failure (one a loaded machine caused before it is not its).
        self.assertEqual(after.shard_failures, before.shard_failures)
        for req, code, field in (
                (master_pb2.ReportUnreachableRequest(), "INVALID_ARGUMENT", "shard_id"),
                (master_pb2.ReportUnreachableRequest(shard_id=9999), "NOT_FOUND", "shard_id"),
                (master_pb2.ReportUnreachableRequest(shard_id=sid, reporter="x" * 129),
                 "INVALID_ARGUMENT", "reporter"),
                (master_pb2.ReportUnreachableRequest(shard_id=sid, detail="x" * 257),
                 "INVALID_ARGUMENT", "detail")):
            e = tl.call_error(m.ReportUnreachable, req)
            self.assertEqual(e.code().name, code)
            self.assertIn(field, e.details())
        self.assertEqual(tl.cluster_status(self.ch).epoch, before.epoch)

    def test_5_a_worker_reported_on_an_older_connection_is_not_heard(self):
        """A shard's report of a worker's hang-up on a connection whose HELLO said a map older
        than the shard's registration is not heard (a shard dropped and back speaks of
        connections its workers left on purpose); one under its map is."""
        m = tl.Stub(self.ch, master_pb2, "Master")
        wid = m.RegisterWorker(master_pb2.RegisterWorkerRequest(
            host="localhost", pid=4242, instance="w-report", lease_ms=60000),
            timeout=tl.RPC_TIMEOUT).worker_id
        st = tl.cluster_status(self.ch)
        shard = [s for s in st.shards if s.state == tl.ALIVE][0]
        self.assertGreater(shard.registered_epoch, 1)

        def report(hello_epoch):
            return m.ReportUnreachable(master_pb2.ReportUnreachableRequest(
                worker_id=wid, reporter_shard=shard.id, reporter="shard %d" % shard.id,
                detail="its data-plane connection hung up", hello_epoch=hello_epoch),
                timeout=tl.RPC_TIMEOUT)

        def state():
            return [w for w in tl.cluster_status(self.ch).workers if w.id == wid][0].state
        r = report(shard.registered_epoch - 1)
        self.assertFalse(r.dead)
        self.assertIn("began before the reporting shard registered again", r.verdict)
        self.assertEqual(state(), tl.ALIVE)
        r = report(st.epoch)
        self.assertTrue(r.dead, r.verdict)
        self.assertEqual(state(), tl.DEAD)


KILLS = unittest.skipIf(os.environ.get("TESSERA_REPLICATION_KILLS") == "0",
                        "TESSERA_REPLICATION_KILLS=0: the sanitizer run of make test leaves the "
                        "kills to make test-fault, for time")


class Kills:
    """Shards killed while exact training runs, on a cluster of start_cluster."""
    LEASE_MS = 10000   # longer than a failover may take: reports must drop the dead
    LONG = 400 if tl.SANITIZED else 1500   # steps: long enough to be killed in the middle
    REPLICAS = 2

    @classmethod
    def setUpClass(cls):
        start_cluster(cls, 4, lease_ms=cls.LEASE_MS, replicas=cls.REPLICAS)

    def roles(self, job, alive):
        """{shard index: (heads, follows)} over the shards in `alive`."""
        out = {}
        for i in alive:
            r = self.stubs[i].PartitionDigests(shard_pb2.PartitionDigestsRequest(job=job),
                                               timeout=tl.RPC_TIMEOUT)
            out[i] = (sum(1 for d in r.partitions if not d.follower),
                      sum(1 for d in r.partitions if d.follower))
        return out

    def kill_while_training(self, victim, heads, job):
        """Starts exact training of `job`, kills -9 shard index victim once a shard in heads
        shows it stepping, and returns (rank 0's result, seconds from the kill to the end)."""
        p = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                          self.master.addr, "--workers", "2", "--steps", str(self.LONG),
                          "--exact", "--keep", "--job", job, "--json"], "train-" + job,
                         stdout_pipe=True)

        def stepping():
            for i in heads:
                for j in self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(),
                                                   timeout=tl.RPC_TIMEOUT).jobs:
                    if j.id == job and j.max_version >= 100:
                        return True
            return False
        tl.wait_until(stepping, 60, "job %s to step" % job)
        os.kill(self.status[victim].pid, signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(180)
        self.assertEqual(rc, 0, p.log_text())
        took = time.monotonic() - t0
        out = p.p.stdout.read().decode()
        self.assertFalse(tl.pid_alive(self.status[victim].pid))
        dead = [s for s in tl.cluster_status(self.ch).shards
                if s.id == self.status[victim].shard_id][0]
        self.assertEqual(dead.state, tl.DEAD)
        self.assertIn("reported unreachable by", dead.death)
        self.assertIn("refused", dead.death)
        return json.loads(out.strip().splitlines()[-1]), took

    def replicas_whole(self, job, alive):
        """verify replicas passes: every partition has REPLICAS equal copies at the last step,
        on the shards in alive only."""
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job,
                        "--json"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["differ"], 0)
        self.assertTrue(all(d["copies"] == self.REPLICAS and d["version"] == self.LONG
                            for d in doc["details"]), doc)
        after = self.roles(job, alive)
        self.assertEqual(sum(h for h, f in after.values()), 6)
        self.assertEqual(sum(f for h, f in after.values()), 6 * (self.REPLICAS - 1))

    def idle_job_whole(self, job):
        """An idle job (kept, not stepping) gets its chains whole again too: the heads send
        their images to the shards that joined them (repair.c), without a step."""
        last = []

        def whole():
            r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job])
            last[:] = [r.stdout + r.stderr]
            return r.returncode == 0
        try:
            tl.wait_until(whole, 15, "job %s to have 2 equal copies of every partition" % job)
        except AssertionError:
            raise AssertionError("tessera verify replicas --job %s:\n%s" % (job, last[0]))



@KILLS
class DeadFollower(Kills, tl.ClusterCase, unittest.TestCase):
    def test_b_a_dead_head_fails_over_and_training_ends_exact(self):
        """After test_a, 3 shards: kill one that heads partitions. The workers' connections to
        it break; once the map drops it they send the step again to the promoted followers."""
        alive = [i for i in range(4) if tl.pid_alive(self.status[i].pid)]
        train(self.master.addr, "probe-b")
        roles = self.roles("probe-b", alive)
        v = max(alive, key=lambda i: roles[i][0])
        self.assertGreater(roles[v][0], 0)
        want = local_sha_steps(self.LONG)
        doc, took = self.kill_while_training(v, [i for i in alive if i != v], "long-b")
        self.assertEqual(doc["params_sha256"], want)
        # rank 0 sent a step again to the new map (tessera_worker_failovers_total)
        self.assertGreaterEqual(doc["failovers"], 1)
        tl.log("training ended %.1f s after the head was killed" % took)
        self.replicas_whole("long-b", [i for i in alive if i != v])
        for job in ("probe", "long", "probe-b"):
            self.idle_job_whole(job)

    def test_c_down_to_one_shard_training_still_ends_exact(self):
        """After test_b, 2 shards, each holding every partition (the chains were made whole):
        kill one more. The chains shrink to the survivor alone, which publishes what it
        applies; the training still ends with the --local fingerprint."""
        alive = [i for i in range(4) if tl.pid_alive(self.status[i].pid)]
        self.assertEqual(len(alive), 2)
        doc, took = self.kill_while_training(alive[0], alive, "long-c")
        self.assertEqual(doc["params_sha256"], local_sha_steps(self.LONG))
        tl.log("training ended %.1f s after the second-to-last shard was killed" % took)
        r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", "long-c",
                        "--json"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["copies_wanted"], 1)

    def test_a_dead_follower_is_replaced_and_training_ends_exact(self):
        train(self.master.addr, "probe")   # the chains are a function of the shard ids alone
        roles = self.roles("probe", range(4))
        victims = [i for i, (h, f) in roles.items() if h == 0 and f > 0]
        if not victims:
            self.skipTest("every shard heads a partition: %s" % roles)
        v = victims[0]
        heads = [i for i, (h, f) in roles.items() if h > 0]
        want = local_sha_steps(self.LONG)
        doc, took = self.kill_while_training(v, heads, "long")
        self.assertEqual(doc["params_sha256"], want)
        tl.log("training ended %.1f s after the follower was killed" % took)
        self.replicas_whole("long", [i for i in range(4) if i != v])
        self.idle_job_whole("probe")
        # On one host the followers read the values of fc1.weight (the largest tensor, in a
        # shared region) from their heads' regions, not through the link.
        mapped = [self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(),
                                            timeout=tl.RPC_TIMEOUT).images_from_region
                  for i in range(4) if i != v]
        self.assertGreater(sum(mapped), 0, mapped)


@KILLS
class MiddleOfThree(Kills, tl.ClusterCase, unittest.TestCase):
    """R = 3 on 4 shards: kill -9 of the shard in the middle of the most chains. Its head
    sends the next image past it to the tail and a shard joins each chain; training ends
    with the --local fingerprint, and every partition has 3 equal copies again."""
    REPLICAS = 3

    def middles(self, job):
        """{shard index: partitions whose chain it is the middle of (a follower with a
        next)}."""
        out = {}
        for i, st in enumerate(self.stubs):
            r = st.PartitionDigests(shard_pb2.PartitionDigestsRequest(job=job),
                                    timeout=tl.RPC_TIMEOUT)
            out[i] = sum(1 for d in r.partitions if d.follower and d.next)
        return out

    def test_the_middle_of_a_chain_dies_and_training_ends_exact(self):
        train(self.master.addr, "probe3")
        mids = self.middles("probe3")
        v = max(mids, key=lambda i: mids[i])
        self.assertGreater(mids[v], 0, mids)
        doc, took = self.kill_while_training(v, [i for i in range(4) if i != v], "long3")
        self.assertEqual(doc["params_sha256"], local_sha_steps(self.LONG))
        tl.log("training ended %.1f s after the middle of %d chains was killed" % (took, mids[v]))
        self.replicas_whole("long3", [i for i in range(4) if i != v])
        self.idle_job_whole("probe3")


# A rank of an ASP job of two Python workers: one tensor of 64 Ki floats in 16 partitions (so
# that every shard heads some), SGD with lr 0.5 and batch 1, and at step s the gradient
# (5 rank + s) % 7 + 1 in every element, a millisecond apart, until the file DIR/stop appears.
# Every value is a multiple of 0.5 far below 2^24, so whatever order the pushes of both ranks
# come in, once both are done every value must be -0.5 times the sum of every push of both:
# one lost, or applied twice, shows. Each rank writes its step count to DIR/steps-RANK, reads
# the other's, pulls until it sees that sum (or 60 s pass), and prints what it found.
PY_ASP = ["/usr/bin/python3", "-c", """
import json, os, sys, time
import numpy as np
import tessera
master, job, rank, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = tessera.Client(master=master, job=job, rank=rank, workers=2, mode="asp",
                   optimizer="sgd:lr=0.5", batch=1, keep=True)
w = c.register("w", 65536, partition_bytes=16384)
p = np.zeros(65536, np.float32)
n = 0
while n < 20000 and not os.path.exists(os.path.join(d, "stop")):
    c.step(n, [np.full(65536, (5 * rank + n) % 7 + 1, np.float32)], [p])
    n += 1
    time.sleep(0.001)
with open(os.path.join(d, "steps-%d" % rank), "w") as f:
    f.write(str(n))
until = time.time() + 60
other = os.path.join(d, "steps-%d" % (1 - rank))
while not os.path.exists(other) and time.time() < until:
    time.sleep(0.05)
time.sleep(0.05)
steps = [n, int(open(other).read() or 0)] if rank == 0 else [int(open(other).read() or 0), n]
want = np.float32(-0.5 * sum((5 * r + k) % 7 + 1 for r in range(2) for k in range(steps[r])))
while not np.all(p == want) and time.time() < until:
    time.sleep(0.05)
    c.pull(w, n, p)
print(json.dumps({"steps": steps, "want": float(want), "wrong": int(np.count_nonzero(p != want))}))
c.close()
"""]


# A Python client of one worker: 5 steps of one tensor in 16 partitions, "stepped" on
# stdout; then, once a line comes on stdin, tessera_pull of version 5 (a shard was killed
# meanwhile), and whether it gave the values the last step gave.
PULL_AFTER = """
import json, sys
import numpy as np
import tessera
c = tessera.Client(master=sys.argv[1], job="pull-after", optimizer="sgd:lr=0.5", batch=1,
                   keep=True)
w = c.register("w", 65536, partition_bytes=16384)
p = np.zeros(65536, np.float32)
for s in range(5):
    c.step(s, [np.full(65536, s + 1, np.float32)], [p])
print("stepped", flush=True)
sys.stdin.readline()
q = np.empty_like(p)
c.pull(w, 5, q)
print(json.dumps({"same": bool(np.array_equal(p, q))}))
c.close()
"""


@KILLS
@tl.long_case
class AsyncModes(Kills, tl.ClusterCase, unittest.TestCase):
    """SSP and ASP jobs are replicated too: a push is acknowledged once the chain's tail holds
    it, with every rank's clock; a head killed with SIGKILL under three such jobs at once,
    and each ends by itself, without a rollback (the cluster has no snapshot store: a lost
    partition would end it)."""
    STEPS = 300 if tl.SANITIZED else 1500

    @classmethod
    def setUpClass(cls):
        start_cluster(cls, 3, lease_ms=cls.LEASE_MS, replicas=2)

    def test_a_dead_head_under_ssp_and_asp_jobs(self):
        train = [os.path.join(tl.BIN, "tessera"), "train", "--master", self.master.addr,
                 "--steps", str(self.STEPS), "--keep", "--json", "--slow", "0:2"]
        runs = {}

        def stepping(jobs, at):
            for name, p in runs.items():
                if not p.running():
                    self.fail("%s exited (%s) before the kill:\n%s" %
                              (name, p.p.returncode, p.log_text()[-3000:]))
            return all(max(self.version(i, j) for i in range(3)) >= at for j in jobs)
        d = os.path.join(self.c.dir, "asp-py")
        os.makedirs(d)
        for r in (0, 1):
            runs["py%d" % r] = self.c.spawn(PY_ASP + [self.master.addr, "asp-py", str(r), d],
                                            "asp-py-%d" % r, stdout_pipe=True)
        tl.wait_until(lambda: stepping(["asp-py"], 20), 60, "the Python workers to step")
        runs["asp1"] = self.c.spawn(train + ["--job", "asp1", "--workers", "1", "--mode",
                                             "asp"], "train-asp1", stdout_pipe=True)
        runs["ssp2"] = self.c.spawn(train + ["--job", "ssp2", "--workers", "2", "--mode",
                                             "ssp", "--staleness", "2"], "train-ssp2",
                                    stdout_pipe=True)
        tl.wait_until(lambda: stepping(["asp1", "ssp2"], 100), 60, "the jobs to step")
        roles = self.roles("asp-py", range(3))
        v = max(range(3), key=lambda i: roles[i][0])
        self.assertGreater(roles[v][0], 0, roles)
        self.assertGreater(roles[v][1], 0, "every partition has a follower: %s" % roles)
        os.kill(self.status[v].pid, signal.SIGKILL)
        docs = {}
        for name in ("asp1", "ssp2", "py0", "py1"):   # the Python ranks stop after the others
            if name == "py0":
                open(os.path.join(d, "stop"), "w").close()
            p = runs[name]
            self.assertEqual(p.wait(180), 0, p.log_text()[-3000:])
            docs[name] = json.loads(p.p.stdout.read().decode().strip().splitlines()[-1])
        # One worker applies its pushes in one order: the bits of the float --local run.
        self.assertEqual(docs["asp1"]["params_sha256"], local_sha_steps(self.STEPS, False))
        self.assertGreaterEqual(docs["ssp2"]["test_accuracy"], 0.7 if tl.SANITIZED else 0.75)
        for r in (0, 1):
            self.assertEqual(docs["py%d" % r]["wrong"], 0, docs["py%d" % r])
        for j in ("asp1", "ssp2"):
            self.assertEqual(docs[j]["rollbacks"], 0)
        tl.log("after the kill: asp1 exact, ssp2 test accuracy %.4f, asp-py every value %g" %
               (docs["ssp2"]["test_accuracy"], docs["py0"]["want"]))
        dead = [s for s in tl.cluster_status(self.ch).shards
                if s.id == self.status[v].shard_id][0]
        self.assertEqual(dead.state, tl.DEAD)
        self.assertIn("reported unreachable by", dead.death)
        alive = [i for i in range(3) if i != v]
        for j in ("asp1", "ssp2", "asp-py"):
            self.idle_job_whole(j)
            after = self.roles(j, alive)
            self.assertEqual(sum(h for h, f in after.values()),
                             sum(f for h, f in after.values()), (j, after))

    def test_b_a_shard_dead_as_workers_start(self):
        """After test_a, 2 shards: one is killed just before training starts, long before its
        lease runs out. The workers find it dead as they connect, report it and wait for the
        map without it, as in a step; the training ends with the --local fingerprint."""
        alive = [i for i in range(3) if tl.pid_alive(self.status[i].pid)]
        self.assertEqual(len(alive), 2)
        v = alive[0]
        os.kill(self.status[v].pid, signal.SIGKILL)
        doc = train(self.master.addr, "late-start")
        self.assertEqual(doc["params_sha256"], local_sha_steps(STEPS))
        dead = [s for s in tl.cluster_status(self.ch).shards
                if s.id == self.status[v].shard_id][0]
        self.assertEqual(dead.state, tl.DEAD)
        self.assertIn("reported unreachable by worker rank", dead.death)

    def test_c_a_pull_outside_a_step_fails_over(self):
        """After test_b, 1 shard; two more join. A Python client steps 5 times, then a shard
        heading some of its partitions is killed, and tessera_pull (outside any step) of
        version 5 fails over like a step and gives the values the last step gave."""
        for i in range(2):
            self.c.start_shard(self.master.addr, name="more%d" % i, lease_ms=self.LEASE_MS)
        tl.wait_until(lambda: not any(s.joining for s in tl.cluster_status(self.ch).shards),
                      60, "the new shards on the ring")
        p = subprocess.Popen(["/usr/bin/python3", "-c", PULL_AFTER, self.master.addr],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "stepped")
            alive = [tl.Stub(self.c.channel(s.addr), shard_pb2, "Shard")
                     for s in tl.cluster_status(self.ch).shards if s.state == tl.ALIVE]
            heads = [st for st in alive if any(not d.follower for d in st.PartitionDigests(
                shard_pb2.PartitionDigestsRequest(job="pull-after"),
                timeout=tl.RPC_TIMEOUT).partitions)]
            self.assertGreater(len(alive), 1, "a shard to fail over to")
            self.assertTrue(heads, "a shard heads partitions of pull-after")
            os.kill(heads[0].ShardStatus(shard_pb2.ShardStatusRequest(),
                                         timeout=tl.RPC_TIMEOUT).pid, signal.SIGKILL)
            out, _ = p.communicate("pull\n", timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0)
        self.assertEqual(json.loads(out.strip().splitlines()[-1]), {"same": True})

    def version(self, i, job):
        r = self.stubs[i].ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
        return max([j.max_version for j in r.jobs if j.id == job and j.partitions] or [-1])


@functools.lru_cache(maxsize=None)
def local_sha_steps(steps, exact=True):
    r = tl.run_cli(["train", "--local", "--steps", str(steps), "--json"] +
                   (["--exact"] if exact else []), timeout=300)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


if __name__ == "__main__":
    tl.main()
