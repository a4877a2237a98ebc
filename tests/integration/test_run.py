#!/usr/bin/python3
"""`tessera run`: a user's own training program launched and watched like the built-in jobs
(docs/launch.md).

- tests/integration/user_train.py (a PyTorch model that is not Tessera's MLP, exact mode) run
  by hand, with no launcher variables, and under `tessera run --local-cluster --workers 2
  --json` ends on the same params_sha256; stdout is one JSON document (the job finished, its
  fingerprint as the workers told the master), the ranks' lines went to stderr, prefixed;
- while such a job runs on a `tessera up` cluster, `tessera status --json` shows its step,
  loss and samples/s (tessera.torch's reports) and each worker's job and rank;
- every rank gets RANK, WORLD_SIZE, LOCAL_RANK, TESSERA_MASTER and TESSERA_JOB; --log-dir
  keeps each rank's lines, --no-prefix drops the prefix;
- a rank that fails stops the others at once and its exit code is the job's; a program that
  does not exist and a master that does not answer start nothing, saying what to do;
- --respawn: a rank of an elastic job killed with SIGKILL is started again, and the job ends
  on the fingerprint of the uninterrupted run: tessera-worker started as any program (against
  `tessera train --local`), and the user script with tessera.torch's elastic=True (against
  the script by hand).
"""
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessera_testlib as tl  # noqa: E402

SCRIPT = tl.USER_SCRIPT
LAUNCH_VARS = tl.LAUNCH_VARS
clean_env = tl.unlaunched_env


def tessera(args, timeout=180, env=None):
    return subprocess.run([os.path.join(tl.BIN, "tessera")] + list(args), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env or clean_env())


class LocalCluster(unittest.TestCase):
    def test_user_script_same_bits_as_by_hand(self):
        want = tl.script_by_hand("--steps", 30)
        r = tessera(["run", "--local-cluster", "--workers", "2", "--json", "/usr/bin/python3",
                     SCRIPT, "--steps", "30"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        doc = json.loads(r.stdout)   # exactly one JSON document
        self.assertEqual(doc["exit_code"], 0)
        self.assertEqual(doc["workers"], 2)
        self.assertEqual(doc["state"], "finished", doc)
        self.assertEqual(doc["params_sha256"], want)
        self.assertEqual([k["exit_code"] for k in doc["ranks"]], [0, 0])
        self.assertIn("[rank 0] params_sha256 %s" % want, r.stderr)
        self.assertNotIn("INFO", r.stderr)   # the SDK is quiet inside a user's program

    def test_nothing_to_run(self):
        r = tessera(["run", "--local-cluster", "--", "no-such-program-here"])
        self.assertEqual(r.returncode, 127)
        self.assertIn("no such program on $PATH (nothing was started)", r.stderr)
        r = tessera(["run", "--master", "127.0.0.1:%d" % tl.free_port(), "true"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing listens there", r.stderr)
        self.assertIn("start a cluster with `tessera up`", r.stderr)
        r = tessera(["run", "--workers", "2"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no program to run", r.stderr)


class ElasticRefusals(unittest.TestCase):
    """What an elastic tessera.torch job cannot have is refused by name, before any step."""

    def test_refused(self):
        import torch
        import tessera
        import tessera.torch

        def attach(model, **kw):
            with tl.environ(**{k: None for k in LAUNCH_VARS}):
                return tessera.torch.attach(model, batch=4, elastic=True, **kw)
        for kw, model, needle in (
                ({}, torch.nn.Linear(3, 2), "pass init="),
                ({"init": True, "overlap": True}, torch.nn.Linear(3, 2), "not with overlap"),
                ({"init": True, "buffers": True}, torch.nn.Linear(3, 2), "buffers=True"),
                ({"init": True}, torch.nn.BatchNorm1d(3), "broadcast_buffers"),
                ({"init": True, "broadcast_buffers": False},
                 torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)),
                 "frozen parameters ['0.weight'")):
            if "frozen" in needle:
                model[0].weight.requires_grad_(False)
            with self.assertRaises(tessera.InvalidArgument) as cm:
                attach(model, **kw).close()
            self.assertIn(needle, str(cm.exception))
        ps = attach(torch.nn.Linear(3, 2), init=True)   # one process: its slot is its rank
        self.assertEqual(ps.slots(), [0])
        with self.assertRaises(tessera.InvalidArgument):
            ps.accumulate(slot=1)
        ps.close()


class OnACluster(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2")

    def env(self):
        return clean_env(TESSERA_TLS_DIR=os.environ["TESSERA_TLS_DIR"], TESSERA_LOG="warn")

    def test_environment_prefix_and_logs(self):
        logs = tempfile.mkdtemp(dir=tl.TEST_TMP)
        r = tessera(["run", "--master", self.addr, "--workers", "3", "--job", "envjob",
                     "--log-dir", logs, "--", "sh", "-c",
                     'echo "$RANK $WORLD_SIZE $LOCAL_RANK $TESSERA_MASTER $TESSERA_JOB '
                     '$TESSERA_RESTARTS"; echo "to stderr $RANK" >&2'], env=self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        for k in range(3):
            self.assertIn("[rank %d] %d 3 %d %s envjob 0\n" % (k, k, k, self.addr), r.stdout)
            self.assertIn("[rank %d] to stderr %d\n" % (k, k), r.stderr)
            with open(os.path.join(logs, "rank-%d.log" % k)) as f:
                self.assertEqual(sorted(f.read().splitlines()),
                                 sorted(["%d 3 %d %s envjob 0" % (k, k, self.addr),
                                         "to stderr %d" % k]))
        r = tessera(["run", "--master", self.addr, "--no-prefix", "--", "echo", "plain"],
                    env=self.env())
        self.assertEqual(r.stdout, "plain\n")

    def test_a_failing_rank_stops_the_others(self):
        t0 = time.monotonic()
        r = tessera(["run", "--master", self.addr, "--workers", "2", "--json", "--", "sh", "-c",
                     'if [ "$RANK" = 1 ]; then sleep 0.5; exit 5; fi; exec sleep 120'],
                    env=self.env(), timeout=60)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(r.returncode, 5, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["exit_code"], 5)
        self.assertEqual(doc["ranks"][1]["exit_code"], 5)
        self.assertEqual(doc["ranks"][0]["exit_code"], 128 + signal.SIGTERM)
        self.assertIn("rank 1 exited with status 5; stopping the others", r.stderr)

    def test_progress_in_status(self):
        job = "watch-%d" % os.getpid()
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "run", "--master", self.addr,
                              "--workers", "2", "--job", job, "/usr/bin/python3", SCRIPT,
                              "--steps", "400", "--step-sleep", "0.02"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env(), start_new_session=True)
        try:
            def progressed():
                st = tl.status_json(self.addr)
                jb = [j for j in st["jobs"] if j["id"] == job]
                pr = jb[0].get("progress") if jb else None
                return (st, pr) if pr and pr["step"] >= 20 else None
            st, pr = tl.wait_until(progressed, 60, "the job's progress in tessera status")
            self.assertTrue(math.isfinite(pr["loss"]) and 0 < pr["loss"] < 5, pr)
            self.assertGreater(pr["samples_per_s"], 0)
            seats = sorted(w["rank"] for w in st["workers"] if w.get("job") == job)
            self.assertEqual(seats, [0, 1])
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("tessera run: job %s finished, params_sha256" % job, err)
        jb = [j for j in tl.status_json(self.addr)["jobs"] if j["id"] == job][0]
        # the reported step is rank 0's clock, its next version: the script's versions start
        # at 1, so after its 400th step it is 401 (when that heartbeat is the last heard)
        self.assertTrue(20 <= jb["progress"]["step"] <= 401, jb["progress"])
        self.assertIn("[rank 0] params_sha256 %s" % jb["params_sha256"], out)

    def kill_rank1_under_respawn(self, job, workers, program):
        """`tessera run --respawn --json` of program as job; SIGKILL of rank 1 once it is at
        step 20; returns (stdout, stderr, exit code)."""
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "run", "--master", self.addr,
                              "--workers", str(workers), "--job", job, "--respawn", "--json",
                              "--"] + program, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=self.env(), start_new_session=True)
        try:
            os.kill(tl.rank_pid_past(self.addr, job, 1, 20), signal.SIGKILL)
            out, err = p.communicate(timeout=240)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return out, err, p.returncode

    def test_respawn_in_an_elastic_job(self):
        steps, worker = 240, os.path.join(tl.BIN, "tessera-worker")
        want = tessera(["train", "--local", "--exact", "--steps", str(steps), "--seed", "3",
                        "--json"], env=self.env())
        self.assertEqual(want.returncode, 0, want.stderr)
        want = json.loads(want.stdout.strip().splitlines()[-1])["params_sha256"]
        out, err, rc = self.kill_rank1_under_respawn(
            "respawn-%d" % os.getpid(), 3, [worker, "--exact", "--steps", str(steps), "--seed",
                                           "3", "--slow-ms", "15"])
        self.assertEqual(rc, 0, err[-3000:])
        self.assertIn("rank 1 was killed by signal 9", err)
        self.assertIn("starting rank 1 again (restart 1)", err)
        doc = json.loads(out)
        self.assertEqual(doc["ranks"][1]["restarts"], 1)
        self.assertEqual(doc["params_sha256"], want)

    def test_respawn_a_python_rank_of_an_elastic_job(self):
        args = ["--steps", "300", "--batch", "36", "--elastic"]
        want = tl.script_by_hand(*args)
        out, err, rc = self.kill_rank1_under_respawn(
            "pyrespawn-%d" % os.getpid(), 3,
            ["/usr/bin/python3", SCRIPT, "--step-sleep", "0.03"] + args)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertIn("rank 1 was killed by signal 9", err)
        doc = json.loads(out)
        self.assertEqual(doc["ranks"][1]["restarts"], 1)
        self.assertEqual(doc["params_sha256"], want)
        back = "came back after its job ended" not in err
        tl.log("a Python rank killed at step 20 and started again (%s): params_sha256 %s... as "
               "the uninterrupted run" % ("it rejoined" if back else "too late to rejoin: the "
                                          "others finished", want[:12]))


if __name__ == "__main__":
    tl.main()
