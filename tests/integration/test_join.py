"""test_join.py - a shard that joins a running cluster takes its share of the ring
(docs/replication.md, "Joining").

Real processes: a master and shards started by hand, `tessera train` as the workers. Checked,
with R = 2 (chains of 2) and with R = 1 (no replicas):
- a shard started while exact training runs joins: the master lists it joining, the heads
  copy it the partitions it will hold (it is the tail of their chains meanwhile), then a new
  epoch puts it on the ring; the workers send the step in flight to the new heads, and the
  training ends by itself with the params_sha256 of `tessera train --local`; an ASP job of
  one worker training beside it moves the same way and ends at the float --local bits, and
  so does an exact reduce job of one worker (its pulls are refused under the old map and it
  fails over: docs/replication.md), at the --local bits of reduce;
- afterwards the new shard heads partitions of the running job and of a job kept idle on the
  cluster, every partition has exactly R copies (the old owners dropped the ones that moved:
  ShardStatus.partitions_dropped, and no shard lists them), and `tessera verify replicas`
  finds every copy equal to its head;
- `tessera status` shows no shard joining once it is done, and the dropped partitions;
- the workers followed the epochs of the join with deltas of the shard map, not whole maps
  (the master's `tessera_shard_map_answers_total{as="delta"}`; docs/scaling.md, "The shard
  map"), and GetShardMap itself answers a caller that names a map it holds with what changed
  since, and one that names a map the master does not keep with the whole map;
- a shard stopped past its lease and resumed registers again and joins like a new one: it
  drops what it held (behind its chains) and takes fresh copies; training stays exact;
- with TESSERA_JOIN_KILLS=1 (make test-fault): the joining shard killed -9 while its copies
  move, then an old shard killed while another joins; the training still ends exact and the
  chains whole.
"""
import json
import os
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402

LONG = 300 if tl.SANITIZED else 1200   # steps: long enough to join in the middle
PART_KB = "64"                          # 19 partitions of the MLP: every shard gets some


EXACT = ["--workers", "2", "--exact"]
ASP = ["--workers", "1", "--mode", "asp"]   # one worker: the bits of the float --local run
REDUCE = ["--workers", "1", "--exact", "--mode", "reduce"]


def local_sha(steps, exact=True, extra=()):
    r = tl.run_cli(["train", "--local", "--steps", str(steps), "--partition-kb", PART_KB,
                    "--json"] + (["--exact"] if exact else []) + list(extra), timeout=300)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


class JoinCase(tl.ClusterCase):
    REPLICAS = 2

    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("TESSERA_LOG", "warn")
        cls.c = tl.Cluster()
        cls.mport = tl.free_port()
        cls.master = cls.c.start_master(extra=["--replicas", str(cls.REPLICAS),
                                               "--metrics-port", str(cls.mport)])
        cls.shards = [cls.c.start_shard(cls.master.addr, name="shard%d" % i) for i in range(2)]
        cls.ch = cls.c.channel(cls.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(cls.ch).shards
                                  if s.state == tl.ALIVE) == 2, 15, "2 shards alive")

    def stub(self, proc):
        return tl.Stub(self.c.channel(proc.addr), shard_pb2, "Shard")

    def train(self, job, steps, wait=True, args=EXACT):
        argv = [os.path.join(tl.BIN, "tessera"), "train", "--master", self.master.addr,
                "--steps", str(steps), "--partition-kb", PART_KB, "--keep", "--job", job,
                "--json"] + args
        p = self.c.spawn(argv, "train-" + job, stdout_pipe=True)
        if wait:
            return self.finish(p)
        return p

    def finish(self, p):
        rc = p.wait(300)
        self.assertEqual(rc, 0, p.log_text())
        return json.loads(p.p.stdout.read().decode().strip().splitlines()[-1])

    def copies(self, job, procs):
        """{(tensor, partition): [(shard id, PartitionDigest)]} over procs."""
        out = {}
        for proc in procs:
            r = self.stub(proc).PartitionDigests(shard_pb2.PartitionDigestsRequest(job=job),
                                                 timeout=tl.RPC_TIMEOUT)
            for d in r.partitions:
                out.setdefault((d.tensor_id, d.partition), []).append((r.shard_id, d))
        return out

    def map_answers(self):
        """{"whole"|"delta": (answers, bytes)} from the master's /metrics."""
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport,
                                    timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            for kind in ("whole", "delta"):
                for fam, k in (("tessera_shard_map_answers_total", 0),
                               ("tessera_shard_map_answer_bytes_total", 1)):
                    if line.startswith('%s{as="%s"} ' % (fam, kind)):
                        v = out.setdefault(kind, [0, 0])
                        v[k] = float(line.split()[-1])
        return out

    def test_a_a_shard_joins_while_training_runs(self):
        self.train("idle", 5)           # kept on the shards, not stepping
        p = self.train("run", LONG, wait=False)
        pa = self.train("run-asp", LONG, wait=False, args=ASP + ["--slow", "0:3"])
        pr = self.train("run-reduce", LONG, wait=False, args=REDUCE + ["--slow", "0:3"])
        tl.wait_until(lambda: any(j.id == "run" and j.max_version >= LONG // 6
                                  for st in map(self.stub, self.shards)
                                  for j in st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                          timeout=tl.RPC_TIMEOUT).jobs),
                      120, "job run to step")
        epoch = tl.cluster_status(self.ch).epoch
        before = self.map_answers()
        new = self.c.start_shard(self.master.addr, name="shard-new")
        got = self.finish(p)
        self.assertEqual(got["params_sha256"], local_sha(LONG))
        # The move happened while it trained: the old heads sent the workers to the new ones.
        self.assertIn("failed over", p.log_text())
        self.assertEqual(self.finish(pa)["params_sha256"], local_sha(LONG, exact=False))
        self.assertIn("failed over", pa.log_text(), "the ASP job trained through the move")
        self.assertEqual(self.finish(pr)["params_sha256"], local_sha(LONG, extra=REDUCE[2:]))
        self.assertIn("failed over", pr.log_text(), "the reduce job trained through the move")
        # The 4 workers followed the join's epochs with deltas of the map, each smaller than
        # a whole map.
        after = self.map_answers()
        deltas = after["delta"][0] - before.get("delta", [0, 0])[0]
        self.assertGreaterEqual(deltas, 4, after)
        self.assertLess((after["delta"][1] - before.get("delta", [0, 0])[1]) / deltas,
                        after["whole"][1] / after["whole"][0], after)

        procs = self.shards + [new]
        type(self).shards = procs   # test_b goes on from here
        tl.wait_until(lambda: not any(s.joining for s in tl.cluster_status(self.ch).shards),
                      60, "the new shard to be on the ring")
        cs = tl.cluster_status(self.ch)
        self.assertEqual(sum(1 for s in cs.shards if s.state == tl.ALIVE), 3)
        self.assertGreaterEqual(cs.epoch, epoch + 2, "one epoch to join, one to be on the ring")
        new_id = self.stub(new).ShardStatus(shard_pb2.ShardStatusRequest(),
                                            timeout=tl.RPC_TIMEOUT).shard_id
        for job, steps in (("run", LONG), ("idle", 5), ("run-asp", LONG), ("run-reduce", LONG)):
            def settled():
                parts = self.copies(job, procs)
                return parts and all(len(c) == self.REPLICAS for c in parts.values())
            tl.wait_until(settled, 30, "job %s: %d copies of each partition" %
                          (job, self.REPLICAS))
            parts = self.copies(job, procs)
            self.assertEqual(len(parts), 19)
            heads = [sid for c in parts.values() for sid, d in c if not d.follower]
            self.assertEqual(len(heads), 19)
            self.assertIn(new_id, heads, "job %s: the new shard heads some partitions" % job)
            for key, c in parts.items():
                self.assertEqual(len({d.sha256 for _, d in c}), 1, key)
                self.assertEqual({d.version for _, d in c}, {steps}, key)
            r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        dropped = [self.stub(s).ShardStatus(shard_pb2.ShardStatusRequest(),
                                            timeout=tl.RPC_TIMEOUT).partitions_dropped
                   for s in self.shards]
        self.assertGreater(sum(dropped), 0, "the old owners dropped what moved")
        text = tl.status_text(self.master.addr)
        self.assertNotIn("JOIN", text)
        self.assertIn("moved away to shards that joined", text)
        doc = tl.status_json(self.master.addr)
        self.assertFalse(any(s["joining"] for s in doc["shards"]))
        self.assertEqual(sum(s.get("partitions_dropped", 0) for s in doc["shards"]),
                         sum(dropped))


class JoinReplicated(JoinCase, unittest.TestCase):
    REPLICAS = 2

    @unittest.skipUnless(os.environ.get("TESSERA_JOIN_KILLS") == "1",
                         "TESSERA_JOIN_KILLS=1 (make test-fault): kills during a join")
    def test_b_kills_during_a_join(self):
        """After test_a, 3 shards. A fourth joins while exact training runs and is killed -9
        while its copies move; then a fifth joins and one of the old shards is killed while
        it copies. The training ends by itself with the --local fingerprint both times, and
        the survivors end with 2 equal copies of every partition."""
        for round_, job in enumerate(("kill-joiner", "kill-old")):
            p = self.train(job, LONG, wait=False)
            tl.wait_until(lambda: any(j.id == job and j.max_version >= LONG // 6
                                      for st in map(self.stub, self.alive())
                                      for j in st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                              timeout=tl.RPC_TIMEOUT).jobs),
                          120, "job %s to step" % job)
            new = self.c.start_shard(self.master.addr, name="shard-%s" % job)
            tl.wait_until(lambda: any(s.joining for s in tl.cluster_status(self.ch).shards),
                          30, "a shard joining")
            victim = new if round_ == 0 else self.alive()[0]
            victim.signal(9)
            victim.wait(10)
            self.shards = [s for s in self.shards if s is not victim]
            if round_ == 1:
                self.shards.append(new)
            got = self.finish(p)
            self.assertEqual(got["params_sha256"], local_sha(LONG), job)
            tl.wait_until(lambda: not any(s.joining for s in tl.cluster_status(self.ch).shards),
                          60, "no shard joining")
            r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job,
                            "--json"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(all(d["copies"] == 2 for d in json.loads(r.stdout)["details"]))

    def alive(self):
        return [s for s in self.shards if s.running()]

    def test_c_a_stalled_shard_comes_back_and_joins_again(self):
        """A shard stopped (SIGSTOP) past its lease while exact training runs is declared dead
        and its chains go on without it; resumed, it registers again and joins as a new shard
        would: what it held is behind, so it drops it and takes fresh copies from the heads.
        The training ends with the --local fingerprint and the chains are whole and equal."""
        import signal
        job = "stall"
        p = self.train(job, LONG, wait=False)
        shards = self.alive()
        tl.wait_until(lambda: any(j.id == job and j.max_version >= LONG // 6
                                  for st in map(self.stub, shards)
                                  for j in st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                          timeout=tl.RPC_TIMEOUT).jobs),
                      120, "job %s to step" % job)
        victim = shards[-1]
        sid = self.stub(victim).ShardStatus(shard_pb2.ShardStatusRequest(),
                                            timeout=tl.RPC_TIMEOUT).shard_id
        victim.signal(signal.SIGSTOP)
        try:
            tl.wait_until(lambda: [s for s in tl.cluster_status(self.ch).shards
                                   if s.id == sid][0].state == tl.DEAD, 30,
                          "the stopped shard to be declared dead")
        finally:
            victim.signal(signal.SIGCONT)
        got = self.finish(p)
        self.assertEqual(got["params_sha256"], local_sha(LONG))
        tl.wait_until(lambda: [s for s in tl.cluster_status(self.ch).shards
                               if s.id == sid][0].state == tl.ALIVE, 30, "it to register again")
        tl.wait_until(lambda: not any(s.joining for s in tl.cluster_status(self.ch).shards),
                      60, "it to be on the ring again")
        last = []

        def whole():
            r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job,
                            "--json"])
            last[:] = [r.stdout + r.stderr]
            return r.returncode == 0 and all(d["copies"] == 2 and d["version"] == LONG
                                             for d in json.loads(r.stdout)["details"])
        try:
            tl.wait_until(whole, 30, "2 equal copies of every partition at step %d" % LONG)
        except AssertionError:
            raise AssertionError(last[0])
        self.assertGreater(self.stub(victim).ShardStatus(
            shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT).partitions_dropped, 0)


    def test_d_the_shard_map_as_deltas(self):
        """GetShardMap from a map the caller holds: what changed since (here nothing: an
        empty delta with the same hash); from a hash the master does not keep: the whole map.
        A shard that joins comes as a delta of one shard, and one that leaves as its id.
        That joining shard, killed -9, is declared dead within its lease: the other shards'
        calls to it (telling it of their jobs, retried until their deadline) do not hold up
        their own heartbeats (they did, and the master, hearing no shard for seconds at a
        time, took itself for cut off and pardoned the dead one again and again)."""
        import signal
        m = tl.Stub(self.ch, master_pb2, "Master")
        whole = m.GetShardMap(master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
        self.assertEqual(whole.delta_from, 0)
        self.assertNotEqual(whole.map_hash, 0)
        self.assertGreater(len(whole.shards), 0)
        same = m.GetShardMap(master_pb2.GetShardMapRequest(
            base_epoch=whole.epoch, base_hash=whole.map_hash), timeout=tl.RPC_TIMEOUT)
        self.assertEqual((same.delta_from, len(same.shards), len(same.removed), same.map_hash),
                         (whole.epoch, 0, 0, whole.map_hash))
        other = m.GetShardMap(master_pb2.GetShardMapRequest(
            base_epoch=whole.epoch, base_hash=whole.map_hash ^ 1), timeout=tl.RPC_TIMEOUT)
        self.assertEqual((other.delta_from, len(other.shards)), (0, len(whole.shards)))
        extra = self.c.start_shard(self.master.addr, name="shard-delta")
        tl.wait_until(lambda: len(m.GetShardMap(master_pb2.GetShardMapRequest(),
                                                timeout=tl.RPC_TIMEOUT).shards) ==
                      len(whole.shards) + 1, 30, "the extra shard in the map")
        grown = m.GetShardMap(master_pb2.GetShardMapRequest(
            base_epoch=whole.epoch, base_hash=whole.map_hash), timeout=tl.RPC_TIMEOUT)
        self.assertEqual(grown.delta_from, whole.epoch)
        self.assertGreaterEqual(len(grown.shards), 1)
        self.assertLess(len(grown.shards), len(whole.shards) + 1)
        self.assertEqual(len(grown.removed), 0)
        full = m.GetShardMap(master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
        extra_id = [s.id for s in full.shards if s.id not in {x.id for x in whole.shards}][0]
        self.assertIn(extra_id, [s.id for s in grown.shards])
        seen = len(self.master.log_text())
        extra.signal(signal.SIGKILL)   # declared dead when its lease runs out
        tl.wait_until(lambda: extra_id not in [s.id for s in m.GetShardMap(
            master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT).shards], 15,
            "the extra shard to leave the map")
        self.assertNotIn("no member heard", self.master.log_text()[seen:])
        gone = m.GetShardMap(master_pb2.GetShardMapRequest(
            base_epoch=full.epoch, base_hash=full.map_hash), timeout=tl.RPC_TIMEOUT)
        self.assertEqual((gone.delta_from, list(gone.removed)), (full.epoch, [extra_id]))


@tl.long_case
class JoinUnreplicated(JoinCase, unittest.TestCase):
    """The same join with R = 1: the chain of a partition that moves is its owner and then
    the joining shard."""
    REPLICAS = 1


if __name__ == "__main__":
    tl.main()
