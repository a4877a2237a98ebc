#!/usr/bin/python3
"""kill_points.py - a shard killed at a chosen moment of exact training; nothing may be lost.

kill_matrix.py kills at random moments; this one at the moments that matter most to chain
replication, each made certain by the shard itself ($TESSERA_TEST_KILL_AT=POINT:N,
services/shard/testhooks.h: the shard SIGKILLs itself the Nth time it reaches POINT):
- push: a head applied a step, before its image went down the chain (the workers saw
  nothing acknowledged; the follower is promoted without the step, which is sent again);
- image: a follower loaded an image and died before acknowledging it, between head and tail
  (the head waits for the map to drop it, then sends to the new tail);
- pull: a head about to answer a pull (the worker's connection breaks mid-pull);
- repair: a head about to copy a partition to a shard that joined its chain after another
  shard died (R = 3 on 4 shards, so that two deaths leave a copy of everything).
Real processes: a master with --replicas R and shards started by hand, the victim with the
hook; `tessera train --exact` as the workers. Each must end with the params_sha256 of
`tessera train --local`, the victim dead by SIGKILL at its point and declared dead by the
master, and every partition whole again on the survivors (`tessera verify replicas`).

Run by `make test-fault`; with TESSERA_BIN and TESSERA_SANITIZED like the integration tests.
"""
import json
import os
import signal
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import shard_pb2  # noqa: E402

STEPS = 300 if tl.SANITIZED else 800
PART_KB = "64"   # 19 partitions of the MLP: every shard heads and follows some
_local = {}


def local_sha():
    if "sha" not in _local:
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--partition-kb",
                        PART_KB, "--json"], timeout=300)
        if r.returncode != 0:
            raise AssertionError("tessera train --local: %s" % r.stderr)
        _local["sha"] = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
    return _local["sha"]


class KillPoint(unittest.TestCase):
    def cluster(self, replicas, shards, victim_env):
        """A master with --replicas, `shards` shards; the last one gets victim_env. Returns
        (shard procs, their ids)."""
        os.environ.setdefault("TESSERA_LOG", "warn")
        self.c = tl.Cluster()
        self.master = self.c.start_master(extra=["--replicas", str(replicas)])
        procs = [self.c.start_shard(self.master.addr, name="shard%d" % i)
                 for i in range(shards - 1)]
        os.environ["TESSERA_TEST_KILL_AT"] = victim_env
        try:
            procs.append(self.c.start_shard(self.master.addr, name="victim"))
        finally:
            os.environ.pop("TESSERA_TEST_KILL_AT")
        self.ch = self.c.channel(self.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(self.ch).shards
                                  if s.state == tl.ALIVE) == shards, 15, "shards alive")
        ids = [tl.Stub(self.c.channel(p.addr), shard_pb2, "Shard").ShardStatus(
            shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT).shard_id for p in procs]
        return procs, ids

    def tearDown(self):
        if getattr(self, "c", None):
            self.c.stop()

    def train(self, job):
        return self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                             self.master.addr, "--workers", "2", "--steps", str(STEPS),
                             "--exact", "--partition-kb", PART_KB, "--job", job, "--keep",
                             "--json"], "train-" + job, stdout_pipe=True)

    def settle(self, p, job, victim, victim_id, point, copies):
        rc = p.wait(300)
        self.assertEqual(rc, 0, p.log_text())
        out = json.loads(p.p.stdout.read().decode().strip().splitlines()[-1])
        self.assertEqual(out["params_sha256"], local_sha(), point)
        self.assertEqual(victim.wait(10), -signal.SIGKILL, "the victim killed itself")
        self.assertIn("killed at %s" % point, victim.log_text())
        tl.wait_until(lambda: [s for s in tl.cluster_status(self.ch).shards
                               if s.id == victim_id][0].state == tl.DEAD, 30,
                      "the victim declared dead")
        last = []

        def whole():
            r = tl.run_cli(["verify", "replicas", "--master", self.master.addr, "--job", job,
                            "--json"])
            last[:] = [r.stdout + r.stderr]
            return r.returncode == 0 and all(d["copies"] == copies and d["version"] == STEPS
                                             for d in json.loads(r.stdout)["details"])
        try:
            tl.wait_until(whole, 30, "%d equal copies at step %d" % (copies, STEPS))
        except AssertionError:
            raise AssertionError(last[0])

    def at_point(self, point, n):
        procs, ids = self.cluster(2, 3, "%s:%d" % (point, n))
        p = self.train(point)
        self.settle(p, point, procs[-1], ids[-1], point, 2)

    # Each step, the victim applies about 6 partitions as a head (push), loads about 6 as a
    # follower (image), and answers 2 pulls for each it heads (pull): about step 100.
    def test_push(self):
        self.at_point("push", 600)

    def test_image(self):
        self.at_point("image", 600)

    def test_pull(self):
        self.at_point("pull", 1200)

    def test_repair(self):
        procs, ids = self.cluster(3, 4, "repair:1")
        p = self.train("repair")
        tl.wait_until(lambda: any(j.id == "repair" and j.max_version >= STEPS // 8
                                  for st in (tl.Stub(self.c.channel(q.addr), shard_pb2, "Shard")
                                             for q in procs[:3])
                                  for j in st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                          timeout=tl.RPC_TIMEOUT).jobs),
                      120, "the job to step")
        procs[0].signal(signal.SIGKILL)   # the victim then copies to the chains' new tails
        self.settle(p, "repair", procs[-1], ids[-1], "repair", 2)


if __name__ == "__main__":
    tl.main()
