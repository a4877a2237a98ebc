#!/usr/bin/python3
"""test_balance.py - slots move between live workers by their speed, and the bits do not
change (docs/scheduler.md).

Real processes: one `tessera up --shards 2 --lease-ms 1500`, and `tessera train --balance
--exact` runs (--batch 384 --micro 32: 12 micro-batches a step, so 12 slots), each compared
with `tessera train --local` of the same settings:
- Slow worker: 2 workers, rank 1 three times as slow (--slow-factor 1:3). The final
  params_sha256 equals --local's; the master's log and tessera status say slots moved for
  speed; at the end rank 0's worker holds more slots than rank 1's; rank 0 pushed fewer than
  2 gradients a step, its slots summed into one push (docs/scheduler.md, "One push per
  worker"; a step redone after a move goes slot by slot).
- Slowdown moving: 3 workers, rank 1 three times as slow for the first half of the steps,
  rank 2 for the second, with TESSERA_COMBINE_SLOTS=off. Same fingerprint; at the end rank 2's
  worker holds fewer slots than an even share and no more than rank 1's, so slots moved back
  to rank 1 after it sped up; rank 0 pushed more than 2 gradients a step, each slot alone.
- Float: the same slow worker without --exact ends with a test accuracy within 0.02 of a
  static run's (float sums depend on the order, docs/scheduler.md: the bits may differ).
- Bad input: a heartbeat whose speed is 0, negative, NaN, or whose slot count is negative,
  absurd or above the job's slots is INVALID_ARGUMENT naming slot_seconds or speed_slots,
  and the slots stay as they were; RegisterWorker with balance but not elastic is
  INVALID_ARGUMENT naming balance.
"""
import json
import math
import os
import re
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 200 if tl.SANITIZED else 400
SHAPE = ["--batch", "384", "--micro", "32"]
LEASE_MS = 1500
# One exact push of the built-in MLP (784-256-128-10): its parameters as int64.
PUSH_BYTES = 8 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10)


class Balance(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2", "--lease-ms", str(LEASE_MS))
    UP_LOG = "info"   # the master's log says what moved

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.logs = os.path.join(cls.c.dir, "up")   # tessera_up's --dir
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"] + SHAPE,
                       timeout=300)
        if r.returncode != 0:
            raise AssertionError("tessera train --local: %s" % r.stderr)
        cls.local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]

    def train(self, job, extra, exact=True, env=()):
        p = self.c.spawn(["env"] + list(env) +
                         [os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                          "--steps", str(STEPS), "--job", job, "--json"] + SHAPE +
                         (["--exact"] if exact else []) + list(extra), "train-" + job,
                         stdout_pipe=True)
        rc = p.wait(300)
        out = p.p.stdout.read().decode()
        self.assertEqual(rc, 0, "tessera train exited %r:\n%s\n%s" % (rc, out, p.log_text()))
        return json.loads(out.strip().splitlines()[-1])

    def pushes(self, r, what):
        """Gradients rank 0 pushed a step on average, logged."""
        n = r["bytes_pushed"] / PUSH_BYTES / (r["steps"] - r["start_step"])
        tl.log("%s: rank 0 pushed %.2f gradients a step" % (what, n))
        return n

    def owners(self, job):
        j = next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == job)
        return j["slot_owners"]

    def moved(self, job):
        with open(os.path.join(self.logs, "master.log")) as f:
            return len(re.findall(r"job %s: balance: \d+ slot\(s\) moved" % re.escape(job),
                                  f.read()))

    def held(self, owners, rank):
        """Slots held at the end by the worker that held rank's own slot."""
        return sum(1 for w in owners if w == owners[rank])

    def test_slow_worker(self):
        r = self.train("slow", ["--workers", "2", "--balance", "--slow-factor", "1:3"])
        self.assertEqual(r["params_sha256"], self.local)
        self.assertGreaterEqual(self.moved("slow"), 1)
        own = self.owners("slow")
        j = next(j for j in tl.status_json(self.addr)["jobs"] if j["id"] == "slow")
        self.assertTrue(j["balance"])
        self.assertGreaterEqual(j["balanced"], 1)
        tl.log("slow worker: slots at the end %s, %d moved for speed" % (own, j["balanced"]))
        self.assertEqual(len(own), 12)
        self.assertGreater(self.held(own, 0), self.held(own, 1))
        # Rank 0 holds 6 of the 12 slots or more from the first moves on: a push per slot
        # would be 6 a step or more; combined, one (slot by slot only in steps redone after
        # a move).
        self.assertLess(self.pushes(r, "slow worker"), 2)

    def test_slowdown_moves(self):
        half = STEPS // 2
        r = self.train("moving", ["--workers", "3", "--balance", "--slow-factor",
                                  "1:3:0-%d,2:3:%d-%d" % (half, half, STEPS)],
                       env=["TESSERA_COMBINE_SLOTS=off"])
        self.assertEqual(r["params_sha256"], self.local)
        # 12 slots on 3 workers, each alone: rank 0 holds 3 or more of them.
        self.assertGreater(self.pushes(r, "slowdown moving, per slot"), 2)
        own = self.owners("moving")
        tl.log("slowdown moving: slots at the end %s, %d balance events" %
               (own, self.moved("moving")))
        self.assertGreaterEqual(self.moved("moving"), 2)
        # Slow now, rank 2 holds less than an even share (4) and no more than rank 1, slow
        # before: slots went back to rank 1 after it sped up. (On a loaded machine rank 0
        # can look the fastest by far and take slots from both: CI ended once at 8, 2, 2.)
        self.assertLess(self.held(own, 2), len(own) // 3)
        self.assertLessEqual(self.held(own, 2), self.held(own, 1))

    @tl.long_case
    def test_float(self):
        static = self.train("float-static", ["--workers", "2", "--slow-factor", "1:3"],
                            exact=False)
        bal = self.train("float-balanced", ["--workers", "2", "--balance", "--slow-factor",
                                            "1:3"], exact=False)
        tl.log("float: test accuracy static %.4f, balanced %.4f" %
               (static["test_accuracy"], bal["test_accuracy"]))
        self.assertLess(abs(static["test_accuracy"] - bal["test_accuracy"]), 0.02)

    def test_bad_speed(self):
        ch = self.c.channel(self.addr)
        m = tl.Stub(ch, tl.master_pb2, "Master")
        M = tl.master_pb2
        # Each registration with a secret of its own (mutual TLS needs one), which the
        # worker's heartbeats and its Deregister show.
        e = tl.call_error(m.RegisterWorker, M.RegisterWorkerRequest(
            host="h", instance="bal-off", job="bad-off", rank=0, workers=4, start_workers=2,
            balance=True, elastic=False, secret=os.urandom(32)))
        self.assertEqual(e.code(), tl.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("balance:", e.details())
        secret = {}
        for r in (0, 1):
            key = os.urandom(32)
            secret[m.RegisterWorker(M.RegisterWorkerRequest(
                host="h", instance="bal-%d" % r, job="bad", rank=r, workers=4, start_workers=2,
                elastic=True, balance=True, secret=key), timeout=tl.RPC_TIMEOUT).worker_id] = key
        ids = list(secret)

        def beat(w, **speed):
            return m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=w, secret=secret[w],
                                                  **speed), timeout=tl.RPC_TIMEOUT)
        for w in ids:   # equal speeds: nothing to move
            beat(w, has_speed=True, slot_seconds=0.01, speed_slots=2)
        before = [(list(b.slots), b.roster) for b in (beat(w) for w in ids)]
        for speed, field in ((dict(slot_seconds=0, speed_slots=2), "slot_seconds: 0"),
                             (dict(slot_seconds=-0.5, speed_slots=2), "slot_seconds: -0.5"),
                             (dict(slot_seconds=math.nan, speed_slots=2), "slot_seconds"),
                             (dict(slot_seconds=1e9, speed_slots=2), "slot_seconds"),
                             (dict(slot_seconds=1e-6, speed_slots=-3), "speed_slots: -3"),
                             (dict(slot_seconds=1e-6, speed_slots=0), "speed_slots: 0"),
                             (dict(slot_seconds=1e-6, speed_slots=1 << 40), "speed_slots"),
                             (dict(slot_seconds=1e-6, speed_slots=5),
                              "speed_slots: 5, but job 'bad' has 4 slots")):
            e = tl.call_error(m.Heartbeat, M.HeartbeatRequest(kind=tl.WORKER, id=ids[1],
                                                              secret=secret[ids[1]],
                                                              has_speed=True, **speed))
            self.assertEqual(e.code(), tl.grpc.StatusCode.INVALID_ARGUMENT, speed)
            self.assertIn(field, e.details())
        after = [(list(b.slots), b.roster) for b in (beat(w) for w in ids)]
        self.assertEqual(after, before)
        for w in ids:
            m.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=w, secret=secret[w]),
                         timeout=tl.RPC_TIMEOUT)


if __name__ == "__main__":
    tl.main()
