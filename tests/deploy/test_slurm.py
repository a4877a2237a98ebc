#!/usr/bin/python3
"""test_slurm.py - deploy/slurm against a real Slurm: munged, slurmctld and three slurmd as
three nodes on this host (tests/deploy/slurmlab.py).

Checked:
- `sbatch -N 3 -n 3 deploy/slurm/tessera.sbatch --shards 3 --workers 2 -- --steps N --exact
  --json`:
  squeue shows the job running; the master, three shards (one per node) and two workers run
  as srun steps of the one allocation; the job completes and its output's --json line has the
  params_sha256 of `tessera train --local` for the same seed and steps; the logs are in the
  scratch directory, none left running;
- scancel of a running job: every process of the job (any process with its SLURM_JOB_ID)
  is gone soon after, the job CANCELLED;
- bad input fails before starting anything, naming the problem: more shards than nodes, a
  malformed --master, --master without a value (the job FAILED, its output says why, and no
  tessera process ever ran in it);
- `--run -- python3 tests/integration/user_train.py`: a user's PyTorch script as the two
  workers, which take rank, worker count, master and job from the environment srun and the
  launcher give them; the job completes on the fingerprint of the same script run by hand.
Skipped, with the reason printed, where Slurm cannot run (not root, packages missing).
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
import slurmlab  # noqa: E402

STEPS = 120
SBATCH = os.path.join(tl.SRC, "deploy", "slurm", "tessera.sbatch")


class Slurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = slurmlab.unavailable()
        if why:
            raise unittest.SkipTest("no Slurm here: " + why)
        cls.s = slurmlab.Slurm()
        cls.work = tempfile.mkdtemp(prefix="tessera-slurm-work.")
        os.chmod(cls.work, 0o755)
        try:
            t0 = time.monotonic()
            cls.s.start()
            tl.log("Slurm up: slurmctld and 3 slurmd in %.1f s" % (time.monotonic() - t0))
        except BaseException:
            cls.s.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def sbatch(self, name, slurm_args, args):
        """Submits tessera.sbatch; returns (job id, output path)."""
        out = os.path.join(self.work, name + "-%j.out")
        # TMPDIR: the launcher's scratch, where the test reads the logs; TESSERA_SLURM_DIR: the
        # launcher, wherever sbatch runs from (ctest runs in build/tests); TESSERA_TLS_DIR:
        # where the first job makes the certificates (by default ~/.tessera/tls)
        r = self.s.run(["sbatch", "--parsable", "-o", out, "-D", tl.SRC,
                        "--export=ALL,TESSERA_BIN=%s,TMPDIR=%s,TESSERA_SLURM_DIR=%s,"
                        "TESSERA_TLS_DIR=%s" % (tl.BIN, self.work, os.path.dirname(SBATCH),
                                                os.path.join(self.work, "tls"))] +
                       slurm_args + [SBATCH] + args)
        job = r.stdout.strip().split(";")[0]
        return job, out.replace("%j", job)

    def output(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def local_sha(self):
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]

    def test_a_a_job_over_three_nodes_trains_to_the_local_fingerprint(self):
        t0 = time.monotonic()
        job, out = self.sbatch("train", ["-N", "3", "-n", "3"],
                               ["--shards", "3", "--workers", "2", "--", "--steps", str(STEPS),
                                "--exact", "--json"])
        # squeue shows it running on three nodes (the training takes seconds: polled at 50 Hz)
        q = tl.wait_until(lambda: (lambda out: out if "RUNNING" in out else None)(
            self.s.run(["squeue", "-h", "-j", job, "-o", "%i %T %D"], check=False).stdout),
            60, "squeue to show job %s RUNNING" % job)
        self.assertEqual(q.split()[1:], ["RUNNING", "3"], q)
        state = self.s.wait_job(job, 300)
        text = self.output(out)
        self.assertEqual(state, "COMPLETED", text[-3000:] + self.s.logs()[-2000:])
        doc = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
        self.assertEqual(doc["params_sha256"], self.local_sha())
        self.assertRegex(text, r"master \S+:\d+")
        self.assertIn("3 shard(s) alive", text)
        scratch = os.path.join(self.work, "tessera-" + job)
        logs = sorted(os.listdir(scratch))
        self.assertEqual(logs, ["master.log", "master.port", "shard-0.log", "shard-1.log",
                                "shard-2.log", "worker-0.log", "worker-1.log"])
        with open(os.path.join(scratch, "shard-2.log")) as f:
            self.assertIn("serving at", f.read())
        # mutual TLS by default, with the certificates the first job made
        with open(os.path.join(scratch, "master.log")) as f:
            self.assertIn("client certificates required (mutual TLS)", f.read())
        tls = os.path.join(self.work, "tls")
        for name in ("ca.key", "shard-2.key", "admin.token"):
            self.assertEqual(os.stat(os.path.join(tls, name)).st_mode & 0o777, 0o600, name)
        self.assertEqual(slurmlab.job_pids(job), [])
        tl.log("sbatch -N 3: master + 3 shards + 2 workers, %d exact steps, params_sha256 "
               "%s... as --local; %.1f s from sbatch to the end" % (
                   STEPS, doc["params_sha256"][:12], time.monotonic() - t0))

    def test_b_scancel_leaves_no_process_behind(self):
        job, out = self.sbatch("cancel", ["-N", "2", "-n", "2"],
                               ["--shards", "2", "--", "--steps", "1000000"])
        # running for real: the master, the shards and both workers up
        tl.wait_until(lambda: "2 shard(s) alive" in self.output(out), 90,
                      "the shards of job %s" % job)
        tl.wait_until(lambda: len([p for p in slurmlab.job_pids(job)
                                   if "tessera-worker" in " ".join(tl.cmdline(p))]) == 2, 60,
                      "two workers of job %s" % job)
        pids = slurmlab.job_pids(job)
        names = sorted({os.path.basename(tl.cmdline(p)[0]) for p in pids if tl.cmdline(p)})
        self.assertTrue({"tessera-master", "tessera-shard", "tessera-worker"} <= set(names),
                        names)
        t0 = time.monotonic()
        self.s.run(["scancel", job])
        tl.wait_until(lambda: not slurmlab.job_pids(job), 60,
                      "every process of job %s gone" % job)
        gone = time.monotonic() - t0
        self.assertEqual(self.s.wait_job(job, 30), "CANCELLED")
        tl.log("scancel: %d processes of the job (%s) gone in %.1f s"
               % (len(pids), ", ".join(names), gone))

    def test_c_bad_input_fails_before_starting_anything(self):
        for name, slurm_args, args, needle in (
                ("shards", ["-N", "2", "-n", "2"], ["--shards", "3"],
                 "--shards 3: the allocation has 2 node(s)"),
                ("master", ["-N", "1", "-n", "1"], ["--master", "no-port"],
                 "--master: 'no-port' is not HOST:PORT"),
                ("nomaster", ["-N", "1", "-n", "1"], ["--master"], "--master: needs a value"),
                ("insecure", ["-N", "1", "-n", "1"], ["--insecure", "--tls-dir", self.work],
                 "--insecure and --tls-dir: choose one")):
            job, out = self.sbatch(name, slurm_args, args)
            self.assertEqual(self.s.wait_job(job, 60), "FAILED", name)
            text = self.output(out)
            self.assertIn(needle, text)
            self.assertNotRegex(text, re.compile(r"^master ", re.M))
            self.assertFalse(os.path.exists(os.path.join(self.work, "tessera-" + job)), name)

    def test_d_a_user_script_as_the_workers(self):
        script, want = tl.USER_SCRIPT, tl.script_by_hand("--steps", 30)
        job, out = self.sbatch("user", ["-N", "2", "-n", "2"],
                               ["--shards", "2", "--run", "--", "/usr/bin/python3", script,
                                "--steps", "30"])
        state = self.s.wait_job(job, 300)
        text = self.output(out)
        self.assertEqual(state, "COMPLETED", text[-3000:] + self.s.logs()[-2000:])
        self.assertIn("2 shard(s) alive", text)
        self.assertRegex(text, r"(?m)^0: params_sha256 %s$" % want)   # srun --label
        self.assertRegex(text, r"(?m)^0: step 20 loss ")
        self.assertEqual(slurmlab.job_pids(job), [])
        tl.log("sbatch --run: user_train.py as 2 workers on 2 nodes, params_sha256 %s... as "
               "by hand" % want[:12])


if __name__ == "__main__":
    tl.main()
