"""test_admin_edges.py - admin operations and junk requests cannot wedge a job or a cluster
(docs/security.md, "Quotas"; docs/operations.md, "What nobody comes back for"; issue 41).

One `tessera up --tls` (mutual TLS, an admin token) with a snapshot store, 64 MiB of
--mem-budget per shard, --jobs-per-identity 8 and the shards' reclaim deadlines lowered to
3 s. Checked:
- the junk-job flood: 70 RegisterWorker calls with junk job ids from the admin certificate
  (identity admin, the member it names), half asking for a 600 s lease and never
  heartbeating, half kept (keep) and deregistered at once: 8 are let in, every other one
  is RESOURCE_EXHAUSTED naming the identity and --jobs-per-identity; a real `tessera
  train` (the client certificate, another identity) starts at once, and every junk job is
  given back within seconds (the registrations never heard from are held to the default
  lease, the kept jobs no shard holds anything of are finished);
- while that job trains, a RollbackJob naming a snapshot that does not exist is refused on
  every shard (INVALID_ARGUMENT naming snapshot_id) and an ArmSnapshot at a step that never
  comes is taken; the training ends normally with the params_sha256 of `tessera train
  --local`, so the refusal fenced nothing; once finished, the job is released as soon as the
  shards drop the armed snapshot (--arm-timeout-ms), and they count it;
- ReportLost from a worker's certificate is PERMISSION_DENIED (a shard's or an admin's word);
- the huge-tensor flood: RegisterTensor calls of a job no worker registered fill both
  shards' budgets until RESOURCE_EXHAUSTED, and another job's tensor is refused; the shards
  release the job the master holds nothing of after --orphan-job-ms, and a real `tessera
  train` then runs;
- the admin token over plaintext: the CLI with $TESSERA_TOKEN_FILE and no TLS refuses to make
  any call, saying to use TLS or drop the token; a master given --token-file without TLS
  warns that the token is worthless there;
- a shard of its own with --job-mem-share 25: a job's tensor past a quarter of the budget is
  RESOURCE_EXHAUSTED naming the flag, though the budget has room, and one within it fits.
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import tessera_testlib as tl  # noqa: E402

import grpc  # noqa: E402
from tessera_testlib import common_pb2, master_pb2, shard_pb2  # noqa: E402

STEPS = 400
DEADLINE_MS = 3000          # the shards' --arm-timeout-ms and --orphan-job-ms
QUOTA = 8                   # --jobs-per-identity
BUDGET_MIB = 64
JUNK = 70


def cli(args, env, timeout=60):
    r = subprocess.run([os.path.join(tl.BIN, "tessera")] + list(args), capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    tl.scan_for_sanitizer("tessera " + " ".join(args), r.stderr)
    return r


class AdminEdges(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("TESSERA_LOG", "warn")
        cls.c = tl.Cluster()
        cls.store = os.path.join(cls.c.dir, "store")
        cls.up, cls.addr = cls.c.tessera_up(
            ["--tls", "--shards", "2", "--store", cls.store, "--mem-budget", str(BUDGET_MIB),
             "--jobs-per-identity", str(QUOTA), "--arm-timeout-ms", str(DEADLINE_MS),
             "--orphan-job-ms", str(DEADLINE_MS)])
        cls.tls = os.path.join(cls.c.dir, "up", "tls")
        cls.env = dict(os.environ, TESSERA_TLS_DIR=cls.tls)
        # The reference fingerprint, computed while the cluster works.
        cls.local = subprocess.Popen(
            [os.path.join(tl.BIN, "tessera"), "train", "--local", "--exact", "--steps",
             str(STEPS), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True)

    @classmethod
    def tearDownClass(cls):
        if cls.local.poll() is None:
            cls.local.kill()
        cls.local.communicate()
        super().tearDownClass()

    def local_sha(self):
        out, err = self.local.communicate(timeout=120)
        self.assertEqual(self.local.returncode, 0, err[-2000:])
        return json.loads(out.strip().splitlines()[-1])["params_sha256"]

    # ---- helpers ----

    def channel(self, stem="admin", addr=None):
        ch = tl.tls_channel(addr or self.addr, self.tls, stem)
        self.c.channels.append(ch)
        return ch

    def master(self, stem="admin"):
        return tl.Stub(self.channel(stem), master_pb2, "Master")

    def status(self):
        return self.master().ClusterStatus(master_pb2.ClusterStatusRequest(),
                                           timeout=tl.RPC_TIMEOUT)

    def shards(self):
        return [tl.Stub(self.channel(addr=s.addr), shard_pb2, "Shard")
                for s in self.status().shards if s.state == tl.ALIVE]

    def job(self, job_id):
        for j in self.status().jobs:
            if j.id == job_id:
                return j
        return None

    def shard_jobs(self, stub):
        return {j.id: j for j in stub.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                  timeout=tl.RPC_TIMEOUT).jobs}

    def train(self, job, steps, extra=()):
        return subprocess.Popen(
            [os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr, "--job", job,
             "--steps", str(steps), "--json"] + list(extra), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=self.env)

    def finish(self, p, timeout=90):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("tessera train did not end in %d s (a job left fenced?):\n%s"
                      % (timeout, err[-2000:]))
        tl.scan_for_sanitizer("tessera train", err)
        self.assertEqual(p.returncode, 0, err[-3000:])
        return json.loads(out.strip().splitlines()[-1])

    def junk_flood(self):
        """JUNK registrations of junk jobs from the admin certificate; returns the ids let in
        and the refusals."""
        m = self.master("admin")
        let_in, refused = [], []
        for i in range(JUNK):
            kept = i % 2 == 1
            req = master_pb2.RegisterWorkerRequest(
                host="junk", pid=10000 + i, instance="junk-%d" % i, job="junk-%d" % i, rank=0,
                workers=1, keep=kept, lease_ms=0 if kept else 600000, secret=os.urandom(32))
            try:
                w = m.RegisterWorker(req, timeout=tl.RPC_TIMEOUT)
            except grpc.RpcError as e:
                refused.append(e)
                continue
            let_in.append(req.job)
            if kept:   # a kept job, finished at once: idle, holding nothing on any shard
                m.Deregister(master_pb2.DeregisterRequest(
                    kind=tl.WORKER, id=w.worker_id, secret=req.secret,
                    outcome=master_pb2.WORKER_OUTCOME_FINISHED), timeout=tl.RPC_TIMEOUT)
        return let_in, refused

    # ---- tests ----

    def test_1_junk_and_admin_calls_do_not_wedge_a_training_job(self):
        let_in, refused = self.junk_flood()
        self.assertEqual(len(let_in), QUOTA)
        self.assertEqual(len(refused), JUNK - QUOTA)
        e = refused[0]
        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
        self.assertIn("identity 'admin'", e.details())   # the member its certificate names
        self.assertIn("--jobs-per-identity %d" % QUOTA, e.details())
        self.assertEqual(sorted(j.owner for j in self.status().jobs if j.id in let_in),
                         ["admin"] * QUOTA)

        # Another identity is not held back by the flood.
        p = self.train("edge", STEPS, ["--workers", "2", "--exact"])
        shards = self.shards()
        tl.wait_until(lambda: all(self.shard_jobs(s).get("edge") and
                                  self.shard_jobs(s)["edge"].min_version >= 5 for s in shards),
                      60, "job edge training on both shards", interval=0.05)
        epoch = self.master().GetShardMap(master_pb2.GetShardMapRequest(),
                                          timeout=tl.RPC_TIMEOUT).epoch
        for s in shards:
            e = tl.call_error(s.RollbackJob, shard_pb2.RollbackJobRequest(
                job="edge", snapshot_id="0123abcd" * 8, step=1, generation=1, map_epoch=epoch))
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
            self.assertIn("snapshot_id", e.details())
            a = s.ArmSnapshot(shard_pb2.ArmSnapshotRequest(job="edge", step=10 ** 9),
                              timeout=tl.RPC_TIMEOUT)
            self.assertTrue(a.armed)
        doc = self.finish(p)
        self.assertEqual(doc["params_sha256"], self.local_sha())
        self.assertEqual(doc["rollbacks"], 0)

        # Finished, it is released once the shards drop the snapshot nobody asks for.
        t0 = time.monotonic()
        tl.wait_until(lambda: self.job("edge").released, DEADLINE_MS / 1000 + 10,
                      "job edge to be released", interval=0.1)
        self.assertEqual(self.job("edge").state, master_pb2.JOB_STATE_FINISHED)
        self.assertLess(time.monotonic() - t0, DEADLINE_MS / 1000 + 10)
        self.assertEqual([s.ShardStatus(shard_pb2.ShardStatusRequest(),
                                        timeout=tl.RPC_TIMEOUT).snapshot_arms_expired
                          for s in shards], [1, 1])

        # Every junk job is given back: never heard from, or kept with nothing kept.
        def junk_gone():
            jobs = {j.id: j for j in self.status().jobs}
            return all(jobs[j].released for j in let_in)
        tl.wait_until(junk_gone, 20, "the junk jobs to be released", interval=0.2)
        states = {j.id: j.state for j in self.status().jobs if j.id in let_in}
        self.assertEqual(sorted(states.values()), sorted(
            [master_pb2.JOB_STATE_ABANDONED] * (QUOTA // 2) +
            [master_pb2.JOB_STATE_FINISHED] * (QUOTA // 2)))

        # A loss is a shard's word: a worker's certificate cannot send a job back.
        e = tl.call_error(self.master("client").ReportLost,
                          master_pb2.ReportLostRequest(job="edge", shard_id=1))
        self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
        self.assertIn("ReportLost", e.details())

    def test_2_huge_tensors_of_an_unknown_job_are_reclaimed(self):
        shards = self.shards()
        epoch = self.master().GetShardMap(master_pb2.GetShardMapRequest(),
                                          timeout=tl.RPC_TIMEOUT).epoch

        def register(s, job, name, tid, numel):
            return s.RegisterTensor(shard_pb2.RegisterTensorRequest(
                job=common_pb2.JobSpec(id=job, workers=1, optimizer="sgd:lr=0.1", batch=1),
                tensor=common_pb2.TensorSpec(name=name, shape=[numel], dtype=1,
                                             initializer="zeros"),
                tensor_id=tid, map_epoch=epoch), timeout=30)
        for s in shards:
            for tid in range(16):
                try:
                    register(s, "hog", "t%d" % tid, tid, 2 << 20)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                    self.assertIn("--mem-budget", e.details())
                    break
            else:
                self.fail("16 tensors of 8 MiB fit a budget of %d MiB" % BUDGET_MIB)
            e = tl.call_error(lambda r, timeout: register(s, "other", "w", 0, 2 << 20), None)
            self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
            self.assertIn("in use: hog ", e.details())
        self.assertIsNone(self.job("hog"))
        tl.wait_until(lambda: all("hog" not in self.shard_jobs(s) for s in shards),
                      DEADLINE_MS / 1000 + 10, "the shards to release job hog", interval=0.1)
        for s in shards:
            st = s.ShardStatus(shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
            self.assertGreaterEqual(st.orphan_jobs_released, 1)
            self.assertNotIn("hog", [j.id for j in st.jobs])
        doc = self.finish(self.train("after-hog", 20))
        self.assertEqual(doc["steps"], 20)

    def test_3_token_never_over_plaintext(self):
        token = os.path.join(self.tls, "admin.token")
        env = {k: v for k, v in self.env.items() if not k.startswith("TESSERA_TLS")}
        env["TESSERA_TOKEN_FILE"] = token
        r = cli(["status", "--master", self.addr], env)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("$TESSERA_TOKEN_FILE: the admin token would go over plaintext", r.stderr)
        self.assertIn("use TLS", r.stderr)
        self.assertIn("unset TESSERA_TOKEN_FILE", r.stderr)
        r = cli(["status", "--master", self.addr], dict(env, TESSERA_TLS_DIR=self.tls))
        self.assertEqual(r.returncode, 0, r.stderr)   # over TLS it goes
        # A service given a token without TLS says the token is worthless there.
        m = self.c.start_master(name="plain-master", extra=["--token-file", token])
        tl.wait_until(lambda: "token is worthless" in m.log_text(), 10,
                      "the plaintext master's warning")
        m.stop()

    def test_4_job_mem_share(self):
        m = self.c.start_master(name="share-master")
        s = self.c.start_shard(m.addr, name="share-shard",
                               extra=["--mem-budget", str(BUDGET_MIB), "--job-mem-share", "25"])
        ms = tl.Stub(self.c.channel(m.addr, tls=False), master_pb2, "Master")   # --insecure
        ss = tl.Stub(self.c.channel(s.addr, tls=False), shard_pb2, "Shard")
        tl.wait_until(lambda: ss.ShardStatus(shard_pb2.ShardStatusRequest(),
                                             timeout=tl.RPC_TIMEOUT).shard_id, 15, "shard id")
        epoch = ms.GetShardMap(master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT).epoch

        def register(name, tid, numel):
            return ss.RegisterTensor(shard_pb2.RegisterTensorRequest(
                job=common_pb2.JobSpec(id="share", workers=1, optimizer="sgd:lr=0.1", batch=1),
                tensor=common_pb2.TensorSpec(name=name, shape=[numel], dtype=1,
                                             initializer="zeros"),
                tensor_id=tid, map_epoch=epoch), timeout=30)
        e = tl.call_error(lambda r, timeout: register("big", 0, 4 << 20), None)
        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
        self.assertIn("over its share of the --mem-budget (--job-mem-share 25%", e.details())
        register("small", 1, 1 << 20)   # 4 MiB of values, 8 with the sums: within 16 MiB


if __name__ == "__main__":
    tl.main()
