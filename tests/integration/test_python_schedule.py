#!/usr/bin/python3
"""test_python_schedule.py - the master's schedule through the Python binding
(python/tessera/work.c; docs/python.md, "Dynamic assignment and tasks"), on
test_python_binding.py's cluster (a master and two shards as processes).

Checked: two ranks claiming an asp job's units get disjoint grants covering every unit once;
the refusals of the SDK (bsp), the master (want above 256, units) and the binding, by name;
master "local"'s claims in order; a task queued by `tessera eval --no-wait` handed by the
heartbeats, reported with task_done and listed done (or failed) by tessera status;
task_done's bad figures raised as InvalidArgument naming the field.

Environment (ctest sets it): PYTHONPATH with build/python (the binding) and build/gen/python.
"""
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from test_python_binding import BATCH, BindingCase, np, tessera  # noqa: E402


class Schedule(BindingCase, unittest.TestCase):
    def test_claim_work_two_ranks(self):
        """Two ranks of an asp job take its units from the master's queue, each claiming at
        its clock (the previous claim's step + count, as if it had pushed those steps): the
        grants are disjoint and cover every unit once, and the last claims see them all done.
        Refusals: a bsp job (the SDK, UNIMPLEMENTED), want above 256 and units not a multiple
        of the workers (the master, InvalidArgument naming them), another run's units (the
        master, FAILED_PRECONDITION); bad types and ranges (the binding), naming the argument.
        """
        units, want = 46, 4
        ai = self.assert_invalid
        with self.client("py-dyn", rank=0, workers=2, mode="asp") as c0, \
                self.client("py-dyn", rank=1, workers=2, mode="asp", dynamic=True) as c1:
            clients, clocks = (c0, c1), [0, 0]
            granted, counts, finished = [], [0, 0], [False, False]
            e = ai(lambda: c0.claim_work(0, 257, units), "want", "256")
            self.assertNotIn("4294967295", e.message)   # the master's limit, not the binding's
            while not all(finished):
                for r, c in enumerate(clients):
                    if finished[r]:
                        continue
                    g = c.claim_work(clocks[r], want, units)
                    self.assertEqual(set(g), {"first", "step", "count", "units", "done",
                                              "outstanding", "lost", "retry", "pull"})
                    self.assertEqual((g["units"], g["lost"], g["retry"], g["pull"]),
                                     (units, 0, False, False), g)
                    self.assertLessEqual(g["count"], want)
                    self.assertLessEqual(g["done"] + g["outstanding"], units)
                    if g["count"] == 0:   # (the master's empty grant says first and step 0)
                        finished[r] = True
                        continue
                    self.assertEqual(g["step"], clocks[r], g)
                    granted.extend(range(g["first"], g["first"] + g["count"]))
                    counts[r] += g["count"]
                    clocks[r] += g["count"]
                    if len(granted) == want:   # the queue exists: its units are fixed
                        ai(lambda: c1.claim_work(0, 1, units + 1), "units")
                        with self.assertRaises(tessera.Error) as cm:
                            c1.claim_work(0, 1, units + 2)
                        self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
                        self.assertIn("units", cm.exception.message)
            self.assertEqual(sorted(granted), list(range(units)))   # disjoint, all, once
            self.assertEqual(sum(counts), units)
            self.assertTrue(all(counts), counts)   # both ranks took some
            for r, c in enumerate(clients):        # want 0: the counts only
                g = c.claim_work(clocks[r], 0, units)
                self.assertEqual((g["count"], g["done"], g["outstanding"]), (0, units, 0), g)
            for bad, needle in (((-1, 1, units), "step"), ((clocks[0], -1, units), "want"),
                                ((clocks[0], 2 ** 32, units), "want"),
                                ((clocks[0], "4", units), "want"),
                                ((clocks[0], 1, None), "units"), ((clocks[0], 1, -3), "units")):
                ai(lambda: c0.claim_work(*bad), needle + ": ")
        with self.client("py-dyn-bsp") as c:
            with self.assertRaises(tessera.Error) as cm:
                c.claim_work(0, 1, 10)
            e = cm.exception
            self.assertNotIsInstance(e, tessera.InvalidArgument)
            self.assertEqual((e.code, e.tessera_code), ("UNIMPLEMENTED", 12))
            self.assertIn("bsp", e.message)

    def test_claim_work_local(self):
        """master 'local': every unit is this client's, in order (claim_local); ssp claims
        with dynamic=True only; no tasks are ever handed."""
        with tessera.Client(batch=BATCH, mode="asp") as c:
            got = []
            step = 0
            while True:
                g = c.claim_work(step, 4, 10)
                self.assertEqual((g["first"], g["step"], g["done"], g["outstanding"]),
                                 (step, step, step, g["count"]), g)
                if not g["count"]:
                    break
                got.append(g["count"])
                step += g["count"]
            self.assertEqual((got, g["done"], g["units"]), ([4, 4, 2], 10, 10))
            self.assertIsNone(c.next_task())
        with tessera.Client(batch=BATCH, mode="ssp", staleness=1, dynamic=True) as c:
            self.assertEqual(c.claim_work(0, 2, 4)["count"], 2)
        with tessera.Client(batch=BATCH, mode="ssp", staleness=1) as c:
            with self.assertRaises(tessera.Error) as cm:
                c.claim_work(0, 2, 4)
            self.assertEqual(cm.exception.code, "UNIMPLEMENTED")

    def test_task_done_bad_values(self):
        """The SDK refuses a result it could not send (EINVAL naming the field): raised as
        InvalidArgument with its message; types and missing figures are the binding's."""
        fp = "0123456789abcdef" * 4
        ai = self.assert_invalid
        with tessera.Client(batch=BATCH) as c:
            ai(lambda: c.task_done(1, 5, accuracy=1.5, loss=0.5), "accuracy: 1.5", "0..1")
            ai(lambda: c.task_done(1, 5, accuracy=-0.1, loss=0.5), "accuracy")
            ai(lambda: c.task_done(1, 5, accuracy=0.5, loss=-1.0), "loss")
            ai(lambda: c.task_done(1, 5, accuracy=0.5, loss=float("inf")), "loss")
            ai(lambda: c.task_done(1, 5, accuracy=0.5, loss=0.5, fingerprint="xyz"),
               "fingerprint", "64 lowercase hex")
            ai(lambda: c.task_done(1, 5, accuracy=0.5, loss=0.5, fingerprint=fp.upper()),
               "fingerprint")
            ai(lambda: c.task_done(0, 5, accuracy=0.5, loss=0.5), "id: 0")
            ai(lambda: c.task_done(1, 5, loss=0.5), "accuracy", "required")
            ai(lambda: c.task_done(1, 5, accuracy=0.5), "loss", "required")
            ai(lambda: c.task_done(1, 5, accuracy="0.5", loss=0.5), "accuracy", "str")
            ai(lambda: c.task_done(1, 5, accuracy=True, loss=0.5), "accuracy", "bool")
            ai(lambda: c.task_done(1, -5, accuracy=0.5, loss=0.5), "step")
            ai(lambda: c.task_done(-1, 5, accuracy=0.5, loss=0.5), "id")
            ai(lambda: c.task_done(1, 5, failed=True, error=3), "error")
            self.assertIsNone(c.task_done(1, 5, accuracy=np.float64(0.5), loss=0, fingerprint=fp))
            self.assertIsNone(c.task_done(1, 5, failed=True, error="out of memory"))

    def test_task_from_tessera_eval(self):
        """`tessera eval --no-wait` queues an evaluation of a running job; the client's
        heartbeat thread receives it, next_task() gives it once, task_done() reports it, and
        tessera status lists it done with the figures reported (a bad figure first: refused,
        the task still running). A second task reported failed is listed failed, with why."""
        job, fp = "py-task", "0123456789abcdef" * 4

        def queue():
            r = tl.run_cli(["eval", "--master", self.master.addr, "--job", job, "--no-wait"])
            self.assertEqual(r.returncode, 0, r.stderr)
            words = r.stdout.split()   # "job J task N queued"
            self.assertEqual((words[:3], words[4:]), (["job", job, "task"], ["queued"]))
            return int(words[3])

        def task(tid):
            jobs = tl.status_json(self.master.addr)["jobs"]
            return next(t for j in jobs if j["id"] == job for t in j["tasks"] if t["id"] == tid)

        with self.client(job) as c:
            self.assertIsNone(c.next_task())
            tid = queue()
            got = tl.wait_until(c.next_task, 30, "the heartbeat to hand task %d" % tid)
            self.assertEqual(got, {"id": tid, "kind": "evaluate"})
            self.assertIsNone(c.next_task())   # each task once
            self.assert_invalid(lambda: c.task_done(tid, 3, accuracy=1.5, loss=0.25),
                                "accuracy")
            self.assert_invalid(lambda: c.task_done(tid, 3, accuracy=0.75, loss=0.25,
                                                    fingerprint="ab"), "fingerprint")
            self.assertEqual(task(tid)["state"], "running")
            c.task_done(tid, 3, accuracy=0.75, loss=0.25, fingerprint=fp)
            t = tl.wait_until(lambda: task(tid)["state"] == "done" and task(tid), 30,
                              "task %d done in tessera status" % tid)
            self.assertEqual((t["kind"], t["step"], t["test_accuracy"], t["loss"],
                              t["params_sha256"]), ("evaluate", 3, 0.75, 0.25, fp))

            tid2 = queue()
            got = tl.wait_until(c.next_task, 30, "the heartbeat to hand task %d" % tid2)
            self.assertEqual(got, {"id": tid2, "kind": "evaluate"})
            c.task_done(tid2, 4, failed=True, error="no test set here")
            t = tl.wait_until(lambda: task(tid2)["state"] == "failed" and task(tid2), 30,
                              "task %d failed in tessera status" % tid2)
            self.assertEqual(t["error"], "no test set here")


if __name__ == "__main__":
    tl.main()
