#!/usr/bin/python3
"""test_tasks.py - priority tasks: an evaluation queued for a running job ahead of its
training, run by the first of its workers to call in (docs/scheduler.md, "Priority tasks").

Real processes: one `tessera up --shards 2`, and jobs of `tessera train`:
- Exact BSP, 2 workers: `tessera eval --json` while it trains returns the step it ran at, the
  test accuracy and the params_sha256 of the parameters it ran on; `tessera train --local
  --exact --steps STEP` (the same parameters, offline) has that fingerprint and that test
  accuracy. The job goes on and finishes; tessera status lists the task done.
- Dynamic ASP, 2 workers: a task is run too (by whichever worker called in first).
- ASP with --overlap, 1 worker: the task's fingerprint is that of `tessera train --local
  --mode asp --overlap --steps STEP`, the values pulled at its step, not the prediction the
  worker computes with.
- Bad input: SubmitTask for an unknown job is NOT_FOUND naming the job, an unknown kind
  INVALID_ARGUMENT naming kind; a heartbeat whose task_done has an accuracy outside 0..1, a
  NaN loss, a bad fingerprint or state is INVALID_ARGUMENT naming the field and changes
  nothing (the task stays running); more than 16 open tasks is RESOURCE_EXHAUSTED; `tessera
  eval` without --job exits 2.
"""
import json
import math
import os
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 2500


class Tasks(tl.UpCase, unittest.TestCase):
    def train(self, job, extra, workers=2):
        return self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                             "--workers", str(workers), "--steps", str(STEPS), "--job", job,
                             "--json"] + list(extra), "train-" + job, stdout_pipe=True)

    def running(self, job, workers=2):
        tl.wait_until(lambda: any(j["id"] == job and j["state"] == "running" and
                                  j["alive"] == workers
                                  for j in tl.status_json(self.addr)["jobs"]),
                      60, "job %s to run with %d workers" % (job, workers))

    def evaluate(self, job):
        with self.c.admin_env():   # SubmitTask is an admin call
            r = tl.run_cli(["eval", "--master", self.addr, "--job", job, "--json", "--timeout",
                            "60"], timeout=90)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def finish(self, p):
        rc = p.wait(300)
        out = p.p.stdout.read().decode()
        self.assertEqual(rc, 0, "tessera train exited %r:\n%s\n%s" % (rc, out, p.log_text()))

    def test_evaluate_equals_offline(self):
        p = self.train("ev", ["--exact"])
        self.running("ev")
        got = self.evaluate("ev")
        tl.log("task ran at step %d by worker %d: accuracy %.4f, %.2f s after it was queued" %
               (got["step"], got["worker"], got["test_accuracy"], got["seconds"]))
        self.assertEqual(got["state"], "done")
        self.assertGreater(got["step"], 0)
        self.assertLess(got["step"], STEPS)
        r = tl.run_cli(["train", "--local", "--exact", "--steps", str(got["step"]), "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        offline = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(offline["params_sha256"], got["params_sha256"])
        self.assertEqual(round(offline["test_accuracy"], 4), round(got["test_accuracy"], 4))
        job = next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == "ev")
        self.assertEqual([(t["id"], t["state"], t["step"]) for t in job["tasks"]],
                         [(got["task"], "done", got["step"])])
        self.finish(p)

    def test_dynamic_asp(self):
        p = self.train("evdyn", ["--mode", "asp", "--dynamic"])
        self.running("evdyn")
        got = self.evaluate("evdyn")
        self.assertEqual(got["state"], "done")
        self.assertGreater(got["step"], 0)
        self.assertTrue(0 <= got["test_accuracy"] <= 1)
        self.assertEqual(len(got["params_sha256"]), 64)
        self.finish(p)

    def test_overlap_runs_on_pulled_values(self):
        """One ASP worker with --overlap computes on predicted values while a step's exchange
        is in flight; a task runs on the newest values pulled instead and names their step:
        `tessera train --local --mode asp --overlap --steps STEP` ends on its fingerprint."""
        ov = ["--mode", "asp", "--overlap"]
        p = self.train("evov", ov, workers=1)
        self.running("evov", workers=1)
        got = self.evaluate("evov")
        self.assertEqual(got["state"], "done")
        self.assertGreater(got["step"], 0)
        r = tl.run_cli(["train", "--local", "--steps", str(got["step"]), "--json"] + ov,
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        offline = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(offline["params_sha256"], got["params_sha256"])
        self.finish(p)

    def test_bad_input(self):
        ch = self.c.admin_channel(self.addr)
        m = tl.Stub(ch, tl.master_pb2, "Master")
        M = tl.master_pb2
        e = tl.call_error(m.SubmitTask, M.SubmitTaskRequest(job="nope", kind=1))
        self.assertEqual(e.code(), tl.grpc.StatusCode.NOT_FOUND)
        self.assertIn("job: 'nope'", e.details())
        w = m.RegisterWorker(M.RegisterWorkerRequest(host="h", instance="task-bad", job="tb",
                                                     rank=0, workers=1, secret=os.urandom(32)),
                             timeout=tl.RPC_TIMEOUT).worker_id
        for kind in (0, 7):
            e = tl.call_error(m.SubmitTask, M.SubmitTaskRequest(job="tb", kind=kind))
            self.assertEqual(e.code(), tl.grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("kind: %d" % kind, e.details())
        ids = [m.SubmitTask(M.SubmitTaskRequest(job="tb", kind=1),
                            timeout=tl.RPC_TIMEOUT).id for _ in range(16)]
        self.assertEqual(ids, list(range(1, 17)))
        e = tl.call_error(m.SubmitTask, M.SubmitTaskRequest(job="tb", kind=1))
        self.assertEqual(e.code(), tl.grpc.StatusCode.RESOURCE_EXHAUSTED)
        handed = m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=w), timeout=tl.RPC_TIMEOUT)
        self.assertEqual((handed.task.id, handed.task.kind), (1, 1))
        fp = "ab" * 32
        for done, field in ((dict(id=1, state=3, accuracy=1.5, fingerprint=fp), "accuracy"),
                            (dict(id=1, state=3, accuracy=0.5, loss=math.nan), "loss"),
                            (dict(id=1, state=3, accuracy=0.5, fingerprint="xyz"),
                             "fingerprint"),
                            (dict(id=1, state=1, accuracy=0.5), "state"),
                            (dict(id=0, state=3, accuracy=0.5), "id")):
            e = tl.call_error(m.Heartbeat, M.HeartbeatRequest(kind=tl.WORKER, id=w,
                                                              task_done=M.TaskInfo(**done)))
            self.assertEqual(e.code(), tl.grpc.StatusCode.INVALID_ARGUMENT, done)
            self.assertIn("task_done." + field, e.details())
        tasks = next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == "tb")["tasks"]
        self.assertEqual((tasks[0]["state"], tasks[0]["worker"]), ("running", w))
        # A good result: done, and the next heartbeat hands the next task.
        nxt = m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=w, task_done=M.TaskInfo(
            id=1, state=3, step=7, accuracy=0.25, loss=1.0, fingerprint=fp)),
            timeout=tl.RPC_TIMEOUT)
        self.assertEqual(nxt.task.id, 2)
        tasks = next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == "tb")["tasks"]
        self.assertEqual((tasks[0]["state"], tasks[0]["step"], tasks[0]["params_sha256"]),
                         ("done", 7, fp))
        m.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=w), timeout=tl.RPC_TIMEOUT)
        r = tl.run_cli(["eval", "--master", self.addr])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--job is required", r.stderr)


if __name__ == "__main__":
    tl.main()
