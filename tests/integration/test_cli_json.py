#!/usr/bin/python3
"""test_cli_json.py - every `tessera` command that reports with --json writes exactly one JSON
document to stdout, and everything else to stderr (README, "Scripts: `--json`").

Against one `tessera up --shards 2 --store DIR` (mutual TLS, its default) and that store:
status; train --workers 2 --exact (whose params_sha256 equals train --local's); eval, of a
running job, waited for and --no-wait; snapshot create, list, log, show, diff, rollback, gc
(via the master and on the store), fsck; verify compare, data and replicas; run; and demo,
which starts a cluster of its own. Each stdout must hold one document and nothing but
whitespace after it (json.JSONDecoder().raw_decode), with the fields a script reads. The
progress that used to share stdout (epoch lines, rank 0's params_sha256 line, the fsck banner,
the demo's status table) must be on stderr. Where a command fails, or is stopped by a signal,
stdout stays empty: the exit status and stderr say what happened.
"""
import json
import os
import re
import shutil
import signal
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
STEPS = 20
SHA = re.compile(r"^[0-9a-f]{64}$")
SDK_WORDS = re.compile(r"tessera_[a-z_]+\(\)")   # C functions: the SDK's, not a CLI user's


def one_doc(test, r, what, rc=0):
    """r's stdout as its one JSON document; fails unless the exit status is rc and nothing
    but whitespace surrounds the document."""
    test.assertEqual(r.returncode, rc, "%s exited %d:\n%s" % (what, r.returncode,
                                                              r.stderr[-3000:]))
    text = r.stdout.lstrip()
    try:
        doc, end = json.JSONDecoder().raw_decode(text)
    except ValueError as e:
        raise AssertionError("%s --json: stdout is not one JSON document (%s):\n%s"
                             % (what, e, r.stdout[:2000]))
    test.assertEqual(text[end:].strip(), "", "%s --json: more than one document on stdout"
                     % what)
    return doc


class CliJson(tl.UpCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = os.path.join(tl.TEST_TMP, "store")
        cls.UP_ARGS = ("--shards", "2", "--store", cls.store)
        super().setUpClass()

    def cli(self, args, timeout=120, admin=False):
        if not admin:
            return tl.run_cli(args, timeout=timeout)
        with self.c.admin_env():
            return tl.run_cli(args, timeout=timeout)

    def doc(self, args, timeout=120, admin=False, rc=0):
        return one_doc(self, self.cli(args, timeout, admin), "tessera " + " ".join(args), rc)

    def empty_stdout(self, args, timeout=120, admin=False):
        r = self.cli(args, timeout, admin)
        self.assertNotEqual(r.returncode, 0, "tessera %s should fail" % " ".join(args))
        self.assertEqual(r.stdout, "", "a failed --json command wrote to stdout: %s" % args)
        self.assertTrue(r.stderr.strip(), "a failed command should say why on stderr")
        return r

    def test_status(self):
        st = self.doc(["status", "--master", self.addr, "--json"])
        self.assertEqual(st["master"], self.addr)
        self.assertEqual(len([s for s in st["shards"] if s["state"] == "alive"]), 2)
        for key in ("epoch", "workers", "jobs", "snapshots"):
            self.assertIn(key, st)
        self.assertEqual(st["snapshots"]["store"], self.store)

    def test_train_snapshots_verify(self):
        job = "cj-train"
        r = self.cli(["train", "--master", self.addr, "--json", "--workers", "2", "--steps",
                      str(STEPS), "--exact", "--job", job, "--keep"], timeout=240)
        out = one_doc(self, r, "tessera train")
        for key in ("test_accuracy", "samples_per_s", "seconds", "transport"):
            self.assertIn(key, out)
        self.assertEqual((out["job"], out["steps"], out["workers"], out["exact"]),
                         (job, STEPS, 2, True))
        self.assertRegex(out["params_sha256"], SHA)
        # What rank 0 writes as text is stderr's now, the fingerprint line with it.
        self.assertRegex(r.stderr, r"(?m)^epoch 1 step %d/%d: " % (STEPS, STEPS))
        self.assertIn("params_sha256 %s" % out["params_sha256"], r.stderr)
        self.assertNotRegex(r.stderr, SDK_WORDS)
        local = self.doc(["train", "--local", "--json", "--steps", str(STEPS), "--exact"],
                         timeout=240)
        self.assertEqual(local["params_sha256"], out["params_sha256"])
        self.assertEqual(local["workers"], 1)
        self.snapshots(job, out)
        self.verify(job)

    def snapshots(self, job, trained):
        a = self.doc(["snapshot", "create", "--master", self.addr, "--job", job, "--tag",
                      "cj-a", "--json"], admin=True)
        self.assertRegex(a["id"], SHA)
        self.assertEqual((a["step"], a["tag"]), (STEPS, "cj-a"))
        b = self.doc(["snapshot", "create", "--master", self.addr, "--job", job, "-m",
                      "again", "--json"], admin=True)
        self.assertEqual(b["step"], STEPS)
        listed = self.doc(["snapshot", "list", "--store", self.store, "--json"])
        self.assertIn(a["id"], [s["id"] for s in listed])
        self.assertIn("cj-a", next(s for s in listed if s["id"] == a["id"])["tags"])
        log = self.doc(["snapshot", "log", "--master", self.addr, b["id"], "--json"])
        self.assertEqual(log[0]["id"], b["id"])
        self.assertEqual(log[0]["message"], "again")
        shown = self.doc(["snapshot", "show", "--store", self.store, "cj-a", "--json"])
        self.assertEqual((shown["id"], shown["step"], shown["job"]), (a["id"], STEPS, job))
        self.assertEqual(len(shown["tensors"]), 6)
        diff = self.doc(["snapshot", "diff", "--store", self.store, a["id"], b["id"],
                         "--json"])
        self.assertEqual({t["change"] for t in diff["tensors"]}, {"same"})
        copy = os.path.join(tl.TEST_TMP, "store-copy")   # the master's store keeps its HEAD
        shutil.copytree(self.store, copy)
        rb = self.doc(["snapshot", "rollback", "--store", copy, a["id"][:12], "--branch",
                       "cj-retry", "--json"])
        self.assertEqual((rb["branch"], rb["id"]), ("cj-retry", a["id"]))
        gc = self.doc(["snapshot", "gc", "--master", self.addr, "--json"], admin=True)
        self.assertGreater(gc["chunks_live"], 0)
        self.assertEqual(gc["chunks_removed"], 0)
        gc = self.doc(["snapshot", "gc", "--store", copy, "--json"])
        self.assertGreaterEqual(gc["snapshots_reachable"], 2)
        r = self.cli(["snapshot", "fsck", "--store", self.store, "--json"])
        fsck = one_doc(self, r, "tessera snapshot fsck")
        self.assertEqual((fsck["bad"], fsck["bad_refs"], fsck["problems"]), (0, 0, []))
        self.assertGreater(fsck["scanned"], 0)
        self.assertIn("fsck: re-hashing", r.stderr)
        self.a, self.b = a["id"], b["id"]

    def verify(self, job):
        cmp = self.doc(["verify", "compare", "--store", self.store, self.a, self.b, "--json"],
                       timeout=180)
        self.assertTrue(cmp["pass"])
        self.assertTrue(cmp["pass_bits"])
        self.assertEqual(len(cmp["tensors"]), 6)
        data = self.doc(["verify", "data", DATA, self.a, "--store", self.store, "--json"],
                        timeout=180)
        self.assertTrue(data["pass"])
        self.assertEqual(data["mismatches"], [])
        rep = self.doc(["verify", "replicas", "--master", self.addr, "--job", job, "--json"])
        self.assertEqual((rep["job"], rep["differ"]), (job, 0))
        self.assertGreater(rep["partitions"], 0)

    def test_eval_and_a_stopped_train(self):
        job = "cj-live"
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                              self.addr, "--workers", "1", "--steps", "100000", "--slow",
                              "0:20", "--job", job, "--json"], "train-" + job,
                             stdout_pipe=True)
        tl.wait_until(lambda: any(j["id"] == job and j["state"] == "running"
                                  for j in tl.status_json(self.addr)["jobs"]), 60,
                      "job %s to run" % job)
        ev = self.doc(["eval", "--master", self.addr, "--job", job, "--json", "--timeout",
                       "60"], timeout=90, admin=True)
        self.assertEqual((ev["job"], ev["state"]), (job, "done"))
        self.assertRegex(ev["params_sha256"], SHA)
        self.assertGreater(ev["step"], 0)
        queued = self.doc(["eval", "--master", self.addr, "--job", job, "--no-wait",
                           "--json"], admin=True)
        self.assertEqual((queued["job"], queued["state"]), (job, "queued"))
        self.assertGreater(queued["task"], ev["task"])
        # Stopped by a signal: no result, so nothing on stdout.
        train.signal(signal.SIGTERM)
        self.assertEqual(train.wait(60), 130, train.log_text())
        self.assertEqual(train.p.stdout.read().decode(), "", train.log_text())
        self.assertIn("stopping the workers", train.log_text())

    def test_run(self):
        prog = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
        r = self.cli(["run", "--master", self.addr, "--workers", "2", "--json", "--",
                      "/usr/bin/python3", "-c", prog])
        doc = one_doc(self, r, "tessera run")
        self.assertEqual((doc["exit_code"], doc["workers"]), (0, 2))
        self.assertEqual([k["exit_code"] for k in doc["ranks"]], [0, 0])
        self.assertIn("[rank 1] to stdout", r.stderr)

    def test_demo(self):
        r = self.cli(["demo", "--json", "--shards", "1", "--steps", "10"], timeout=180)
        doc = one_doc(self, r, "tessera demo")
        self.assertEqual(doc["steps"], 10)
        self.assertRegex(doc["params_sha256"], SHA)
        self.assertIn("SHARD", r.stderr)             # the status table, on stderr
        self.assertIn("stopped", r.stderr)
        # A demo that worked removes its logs: it must not name a directory it deletes.
        self.assertNotIn("logs", r.stderr)

    def test_failures_leave_stdout_empty(self):
        dead = "127.0.0.1:%d" % tl.free_port()
        r = self.empty_stdout(["train", "--master", dead, "--json", "--steps", "2"])
        self.assertIn("tessera up", r.stderr)       # what to do next
        self.assertIn("--local", r.stderr)
        # The workers start and fail: what they say goes to stderr, stdout stays empty.
        r = self.empty_stdout(["train", "--master", self.addr, "--json", "--workers", "1",
                               "--steps", "2", "--exact", "--compress", "fp16"])
        self.assertIn("drop --exact or --compress", r.stderr)
        self.empty_stdout(["train", "--local", "--json", "--steps", "2", "--exact",
                           "--compress", "fp16"])
        self.empty_stdout(["eval", "--master", self.addr, "--job", "cj-nope", "--json"],
                          admin=True)
        self.empty_stdout(["snapshot", "show", "--store", self.store, "cj-nope", "--json"])
        self.empty_stdout(["verify", "compare", "--store", self.store, "cj-nope", "cj-nope",
                           "--json"])
        self.empty_stdout(["verify", "replicas", "--master", self.addr, "--job", "cj-nope",
                           "--json"])
        self.empty_stdout(["status", "--master", dead, "--json", "--timeout-ms", "1000"])


if __name__ == "__main__":
    tl.main()
