#!/usr/bin/python3
"""test_dynamic.py - dynamic assignment in ASP and SSP: the workers take the next units of
the data from the master's queue as they become free (docs/scheduler.md, "Dynamic
assignment").

Real processes: one `tessera up --shards 2 --lease-ms 1500` (the master keeps a state
directory and is started again when it dies), and tessera-worker processes of ASP jobs with
--dynamic and --unit-log, each worker logging every unit it pushed:
- Slow worker: 2 workers, rank 1 three times as slow. The merged logs hold every unit of the
  run exactly once; each worker's units are its steps 0, 1, 2, ... in order; the fast worker
  did more units; the master's status says every unit done and none out; the run trains.
- Master killed: the master is killed with SIGKILL twice while the job trains (`tessera up`
  starts it again from its state). Every unit still exactly once.
- Worker killed: rank 1 is killed with SIGKILL mid-run and not started again. Rank 0 finishes
  the queue alone; no unit is in the logs twice, and what is missing is at most the dead
  worker's last grant, which rank 0 reports as lost.
- SSP(2): the same slow worker under ssp with --dynamic (the queue bounds staleness over its
  units): every unit exactly once, the fast worker did more.
- Overlap: the slow worker again with --overlap (each unit pushed and pulled while the next
  computes, on predicted values): every unit exactly once. And one local ASP worker with
  --overlap twice gives one params_sha256, not the one without it.
- Bad input: ClaimWork with want above 256, units not a multiple of the workers or beyond
  2^40, units unlike the queue's, a clock below the rank's grant, an unknown worker or one in
  no job: INVALID_ARGUMENT, FAILED_PRECONDITION or NOT_FOUND naming the field, and the queue
  as it was. `tessera train --dynamic` without --mode asp is refused, and --overlap without asp in
  tessera train and tessera-worker.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 150 if tl.SANITIZED else 300
# Each unit's compute also sleeps 3 ms (an accelerator's time, off the CPUs), which
# --slow-factor scales: without it, on a loaded host the exchange, which both workers pay
# alike, paced them both (299 against 301 units once, with --overlap; 327 against 327.6, the
# 1.2x bound, in ssp).
COMPUTE = ["--compute-ms", "3"]
LEASE_MS = 1500


class Dynamic(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2", "--lease-ms", str(LEASE_MS))

    def start(self, job, rank, extra=(), mode=("--mode", "asp")):
        log = os.path.join(self.c.dir, "%s-%d.units" % (job, rank))
        p = self.c.spawn([os.path.join(tl.BIN, "tessera-worker"), "--master", self.addr,
                          "--job", job, "--rank", str(rank), "--workers", "2"] + list(mode) +
                         ["--dynamic", "--steps", str(STEPS), "--unit-log", log] + list(extra),
                         "%s-%d" % (job, rank), stdout_pipe=True)
        return p, log

    def finish(self, p):
        rc = p.wait(300)
        out = p.p.stdout.read().decode()
        self.assertEqual(rc, 0, "tessera-worker exited %r:\n%s\n%s" % (rc, out, p.log_text()))
        return out

    def units(self, log):
        """The (unit, step) pairs a worker's log holds, in order."""
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [(int(w[1]), int(w[3])) for w in (line.split() for line in f)]

    def job(self, job):
        return next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == job)

    def check_once(self, logs, missing_ok=0):
        """Every unit of the run at most once in logs, in each worker's step order; at most
        missing_ok units missing. Returns the units per log."""
        per = [self.units(log) for log in logs]
        for rank, got in enumerate(per):
            self.assertEqual([s for _, s in got], list(range(len(got))),
                             "rank %d's units are not its steps in order" % rank)
        seen = collections.Counter(u for got in per for u, _ in got)
        twice = [u for u, n in seen.items() if n > 1]
        self.assertEqual(twice, [], "units done twice")
        self.assertTrue(all(0 <= u < 2 * STEPS for u in seen))
        self.assertLessEqual(2 * STEPS - len(seen), missing_ok,
                             "units missing: %s" % sorted(set(range(2 * STEPS)) - set(seen)))
        return [len(got) for got in per]

    def test_slow_worker(self):
        p0, l0 = self.start("slow", 0, ["--json"] + COMPUTE)
        p1, l1 = self.start("slow", 1, ["--slow-factor", "3"] + COMPUTE)
        out = self.finish(p0)
        self.finish(p1)
        done = self.check_once([l0, l1])
        r = json.loads(out.strip().splitlines()[-1])
        j = self.job("slow")
        tl.log("slow worker: units per rank %s, test accuracy %.4f" % (done, r["test_accuracy"]))
        self.assertGreater(done[0], 1.3 * done[1])
        self.assertEqual((j["work_units"], j["work_done"], j["work_outstanding"]),
                         (2 * STEPS, 2 * STEPS, 0))
        self.assertGreater(r["test_accuracy"], 0.6)

    def test_ssp_slow_worker(self):
        ssp = ("--mode", "ssp", "--staleness", "2")
        p0, l0 = self.start("ssp", 0, ["--json"] + COMPUTE, mode=ssp)
        p1, l1 = self.start("ssp", 1, ["--slow-factor", "3"] + COMPUTE, mode=ssp)
        out = self.finish(p0)
        self.finish(p1)
        done = self.check_once([l0, l1])
        r = json.loads(out.strip().splitlines()[-1])
        tl.log("ssp(2) slow worker: units per rank %s, test accuracy %.4f" %
               (done, r["test_accuracy"]))
        self.assertEqual(r["mode"], "ssp")
        self.assertGreater(done[0], 1.2 * done[1])
        self.assertGreater(r["test_accuracy"], 0.6)

    def test_master_killed(self):
        p0, l0 = self.start("mkill", 0)
        p1, l1 = self.start("mkill", 1, ["--slow-factor", "2"])
        for k in range(2):
            tl.wait_until(lambda: len(self.units(l0)) > (k + 1) * STEPS // 4, 120,
                          "rank 0 to push a quarter more of the units")
            first = tl.status_json(self.addr)["master_pid"]
            os.kill(first, signal.SIGKILL)
            tl.wait_until(lambda: (lambda d: d if d["master_pid"] != first else None)(
                tl.status_json(self.addr)), 60, "the master to come back")
        self.finish(p0)
        self.finish(p1)
        done = self.check_once([l0, l1])
        tl.log("master killed twice: units per rank %s" % done)

    def test_worker_killed(self):
        p0, l0 = self.start("wkill", 0, ["--slow-factor", "2"])
        p1, l1 = self.start("wkill", 1, ["--slow-factor", "2"])
        tl.wait_until(lambda: len(self.units(l1)) > STEPS // 4, 120, "rank 1 to push units")
        p1.signal(signal.SIGKILL)
        p1.wait(10)
        out = self.finish(p0)
        done = self.check_once([l0, l1], missing_ok=4)
        lost = 2 * STEPS - sum(done)
        tl.log("rank 1 killed: units per rank %s, %d not in the logs" % (done, lost))
        if lost:
            self.assertIn("units were lost with a worker that died", out)

    def test_bad_claims(self):
        ch = self.c.channel(self.addr)
        m = tl.Stub(ch, tl.master_pb2, "Master")
        M = tl.master_pb2
        # Each worker's secret (mutual TLS: a registration needs one, and ClaimWork and
        # Deregister prove the caller is the worker that registered with it).
        secret = {}

        def register(instance, **kv):
            key = os.urandom(32)
            w = m.RegisterWorker(M.RegisterWorkerRequest(host="h", instance=instance,
                                                         secret=key, **kv),
                                 timeout=tl.RPC_TIMEOUT).worker_id
            secret[w] = key
            return w

        def claim(**kv):
            return M.ClaimWorkRequest(secret=secret.get(kv.get("worker_id"), b""), **kv)
        ids = [register("dyn-bad-%d" % r, job="bad", rank=r, workers=2) for r in (0, 1)]
        lone = register("dyn-lone")
        g = m.ClaimWork(claim(worker_id=ids[0], clock=0, want=4, units=20),
                        timeout=tl.RPC_TIMEOUT)
        self.assertEqual((g.first, g.count, g.clock, g.units), (0, 4, 0, 20))
        before = self.job("bad")
        self.assertEqual((before["work_units"], before["work_outstanding"]), (20, 4))
        INVALID = tl.grpc.StatusCode.INVALID_ARGUMENT
        STATE = tl.grpc.StatusCode.FAILED_PRECONDITION
        for req, code, field in (
                (dict(worker_id=ids[1], want=257, units=20), INVALID, "want: 257"),
                (dict(worker_id=ids[1], want=1, units=21), INVALID, "units: 21"),
                (dict(worker_id=ids[1], want=1, units=0), INVALID, "units: 0"),
                (dict(worker_id=ids[1], want=1, units=(1 << 41)), INVALID, "units"),
                (dict(worker_id=ids[1], want=1, units=40), STATE, "units: 40"),
                (dict(worker_id=ids[0], clock=0, want=1, units=20), None, None),
                (dict(worker_id=ids[0], want=1, units=20, clock=(1 << 64) - 1), INVALID,
                 "clock"),
                (dict(worker_id=lone, want=1, units=20), STATE, "worker_id"),
                (dict(worker_id=99999, want=1, units=20), tl.grpc.StatusCode.NOT_FOUND, None)):
            if code is None:   # a clock inside its grant: the same units again, nothing new
                again = m.ClaimWork(claim(**req), timeout=tl.RPC_TIMEOUT)
                self.assertEqual((again.first, again.count, again.clock), (0, 4, 0))
                continue
            e = tl.call_error(m.ClaimWork, claim(**req))
            self.assertEqual(e.code(), code, req)
            if field:
                self.assertIn(field, e.details())
        # the rank's clock went on past 2 of its 4 units: a clock below 2 is refused
        g = m.ClaimWork(claim(worker_id=ids[0], clock=2, want=0, units=20),
                        timeout=tl.RPC_TIMEOUT)
        self.assertEqual((g.count, g.first, g.done), (2, 2, 2))
        e = tl.call_error(m.ClaimWork, claim(worker_id=ids[0], clock=1, want=1, units=20))
        self.assertEqual(e.code(), STATE)
        self.assertIn("clock: 1", e.details())
        after = self.job("bad")
        self.assertEqual((after["work_units"], after["work_done"], after["work_outstanding"]),
                         (20, 2, 2))
        for w in ids + [lone]:
            m.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=w, secret=secret[w]),
                         timeout=tl.RPC_TIMEOUT)
        r = tl.run_cli(["train", "--master", self.addr, "--dynamic", "--steps", "10"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--dynamic needs --mode asp or ssp", r.stderr)
        r = tl.run_cli(["train", "--master", self.addr, "--mode", "reduce", "--dynamic"])
        self.assertEqual(r.returncode, 2)
        for mode in ("bsp", "ssp"):   # --overlap: asp only, in tessera train and the worker
            r = tl.run_cli(["train", "--master", self.addr, "--mode", mode, "--overlap"])
            self.assertEqual(r.returncode, 2)
            self.assertIn("--overlap needs --mode asp", r.stderr)
            r = subprocess.run([os.path.join(tl.BIN, "tessera-worker"), "--mode", mode,
                                "--overlap"], capture_output=True, text=True, timeout=15,
                               stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 2)
            self.assertIn("--overlap needs --mode asp", r.stderr)

    def test_overlap(self):
        """--overlap with the slow worker: each unit's exchange runs while the next computes,
        and a claim waits for the exchange in flight, so the queue is still exactly once."""
        p0, l0 = self.start("ov", 0, ["--json", "--overlap"] + COMPUTE)
        p1, l1 = self.start("ov", 1, ["--slow-factor", "4", "--overlap"] + COMPUTE)
        out = self.finish(p0)
        self.finish(p1)
        done = self.check_once([l0, l1])
        r = json.loads(out.strip().splitlines()[-1])
        j = self.job("ov")
        tl.log("overlap, slow worker: units per rank %s, test accuracy %.4f" %
               (done, r["test_accuracy"]))
        # Less margin than without overlap: an exchange slower than compute (a loaded host)
        # paces both workers alike.
        self.assertGreater(done[0], done[1])
        self.assertEqual((j["work_units"], j["work_done"], j["work_outstanding"]),
                         (2 * STEPS, 2 * STEPS, 0))
        self.assertGreater(r["test_accuracy"], 0.6)

    def test_overlap_one_step_stale(self):
        """One local worker, static ASP: with --overlap, step s + 1 computes while step s's
        exchange is in flight, on values predicted from the pulls before. The run is as
        deterministic as without it, and different (the overlap is real)."""
        def sha(*extra):
            r = tl.run_cli(["train", "--local", "--mode", "asp", "--steps", "60", "--json"] +
                           list(extra), timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
        plain, ov = sha(), sha("--overlap")
        self.assertNotEqual(plain, ov)
        self.assertEqual(sha("--overlap"), ov)


if __name__ == "__main__":
    tl.main()
