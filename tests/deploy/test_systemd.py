#!/usr/bin/python3
"""test_systemd.py - deploy/systemd: the units are valid, and their command lines run a cluster.

Checked:
- `systemd-analyze verify` of tessera-master.service and tessera-shard@7001.service (with
  ExecStart pointed at this build and EnvironmentFile at a copy of tessera.env) says nothing:
  any message (an unknown key, a missing binary, a bad option value) fails the test; a copy
  with an unknown key is refused, so the check can fail;
- the units' ExecStart lines, expanded as systemd does (%i, ${VAR} as one word, $VAR split on
  spaces, from tessera.env with loopback addresses and temp paths put in), start a master and
  two shards (instances: a free port each) that a `tessera train --exact` trains on to the
  --local fingerprint; SIGTERM (the units' KillSignal) stops each within TimeoutStopSec;
- tessera-run@.service's ExecStart, with run.env naming a user's PyTorch script
  (tests/integration/user_train.py) as its command, runs that script's two ranks on the
  same cluster in the unit's WorkingDirectory, to the fingerprint of the script by hand.
Not checked here: the hardening options at run time (this machine runs no systemd as PID 1, so
no unit can be started); docs/deploy.md says so. Skipped where systemd-analyze is missing.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

UNITS = os.path.join(tl.SRC, "deploy", "systemd")
STEPS = 60


def unit_values(path, key):
    """The values of key= in a unit file, continuation lines joined."""
    with open(path) as f:
        text = re.sub(r"\\\n\s*", " ", f.read())
    return [ln.split("=", 1)[1].strip() for ln in text.splitlines()
            if ln.startswith(key + "=")]


def env_file(path):
    env = {}
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln and not ln.startswith("#"):
                k, v = ln.split("=", 1)
                env[k] = v
    return env


def expand(line, env, instance):
    """ExecStart as systemd expands it: specifiers, then ${VAR} (one word) and $VAR (split)."""
    argv = []
    host = socket.gethostname().split(".")[0]
    for word in shlex.split(line.replace("%i", instance).replace("%l", host)):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            argv += env.get(m.group(1), "").split()
            continue
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda v: env.get(v.group(1), ""),
                           word))
    return argv


class Systemd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.analyze = shutil.which("systemd-analyze")
        cls.dir = tempfile.mkdtemp(prefix="tessera-systemd.")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def copy_units(self, sub, extra=""):
        """The units in DIR/sub, pointed at this build and at DIR/sub/tessera.env."""
        d = os.path.join(self.dir, sub)
        os.makedirs(d)
        for name in os.listdir(UNITS):
            with open(os.path.join(UNITS, name)) as f:
                text = f.read()
            text = text.replace("/usr/local/bin/", tl.BIN + "/").replace(
                "/etc/tessera/tessera.env", os.path.join(d, "tessera.env")).replace(
                "/etc/tessera/run-%i.env", os.path.join(d, "run-%i.env"))
            with open(os.path.join(d, name), "w") as f:
                f.write(text + (extra if name.endswith(".service") else ""))
        return d

    def verify(self, d):
        shutil.copy(os.path.join(d, "run.env"), os.path.join(d, "run-script.env"))
        r = subprocess.run([self.analyze, "verify", os.path.join(d, "tessera-master.service"),
                            os.path.join(d, "tessera-shard@7001.service"),
                            os.path.join(d, "tessera-run@script.service")],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, (r.stdout + r.stderr).strip()

    def test_a_systemd_analyze_verify_says_nothing(self):
        if not self.analyze:
            self.skipTest("no systemd-analyze here (Debian's systemd package has it)")
        rc, said = self.verify(self.copy_units("good"))
        self.assertEqual((rc, said), (0, ""))
        rc, said = self.verify(self.copy_units("bad", "RestartSecs=1\n"))
        self.assertIn("Unknown key 'RestartSecs'", said)
        tl.log("systemd-analyze verify: tessera-master.service, tessera-shard@7001.service, "
               "tessera-run@script.service clean; a misspelt key is reported")

    def test_b_the_units_command_lines_run_a_cluster(self):
        d = self.copy_units("run")
        c = tl.Cluster()
        try:
            port = tl.free_port()
            env = dict(env_file(os.path.join(d, "tessera.env")),
                       TESSERA_MASTER="127.0.0.1:%d" % port,
                       TESSERA_MASTER_LISTEN="127.0.0.1:%d" % port,
                       TESSERA_ADVERTISE="127.0.0.1",
                       TESSERA_STORE=os.path.join(c.dir, "store"))
            state = os.path.join(c.dir, "var-lib-tessera")
            os.makedirs(os.path.join(state, "master"))

            def argv(unit, instance, key="ExecStart"):
                line = unit_values(os.path.join(d, unit), key)[0]
                return [a.replace("/var/lib/tessera", state) for a in expand(line, env,
                                                                             instance)]

            def start(unit, instance, name):
                # ExecStartPre first, as systemd runs it: the certificates on first start.
                pre = subprocess.run(argv(unit, instance, "ExecStartPre"), capture_output=True,
                                     text=True, timeout=60)
                self.assertEqual(pre.returncode, 0, name + ": " + pre.stderr)
                return c.spawn(argv(unit, instance), name)
            # The services read TESSERA_MASTER, TESSERA_TLS_DIR and TESSERA_TOKEN_FILE from
            # tessera.env (systemd puts them in their environment); the CLI here reads them too.
            saved = dict(os.environ)
            self.addCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
            for k in ("TESSERA_MASTER", "TESSERA_TLS_DIR", "TESSERA_TOKEN_FILE"):
                os.environ[k] = env[k].replace("/var/lib/tessera", state)
            tls = os.environ["TESSERA_TLS_DIR"]
            master = argv("tessera-master.service", "")
            self.assertEqual(master[0], os.path.join(tl.BIN, "tessera-master"))
            self.assertIn("--tls-cert", master)
            procs = [start("tessera-master.service", "", "master")]
            for i in range(2):
                procs.append(start("tessera-shard@.service", str(tl.free_port()), "shard%d" % i))
            for f in ("ca.key", "admin.token", "master.key"):
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(tls, f)).st_mode), 0o600, f)
            tl.wait_until(lambda: (lambda d_: d_ and len([s for s in d_["shards"]
                                                          if s["state"] == "alive"]) == 2)(
                tl.status_json(env["TESSERA_MASTER"])), tl.START_TIMEOUT,
                "the master and two shards started from the units' ExecStart")
            # Plaintext reaches nothing: the default is mutual TLS.
            r = subprocess.run([os.path.join(tl.BIN, "tessera"), "status"], capture_output=True,
                               text=True, timeout=60,
                               env=dict(os.environ, TESSERA_TLS_DIR="", TESSERA_TOKEN_FILE=""))
            self.assertNotEqual(r.returncode, 0, r.stdout)
            r = tl.run_cli(["train", "--master", env["TESSERA_MASTER"], "--workers", "2",
                            "--steps", str(STEPS), "--exact", "--json"], timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            got = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
            r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                           timeout=300)
            self.assertEqual(got, json.loads(r.stdout.strip().splitlines()[-1])
                             ["params_sha256"])
            self.run_unit(d, env, state)
            stop_s = int(unit_values(os.path.join(d, "tessera-master.service"),
                                     "TimeoutStopSec")[0])
            for p in reversed(procs):
                p.signal(signal.SIGTERM)
                self.assertEqual(p.wait(stop_s), 0, p.name + ": " + p.log_text()[-2000:])
            tl.log("the units' ExecStart: master + 2 shards, %d exact steps as --local; each "
                   "left on SIGTERM" % STEPS)
        except BaseException:
            c.dump_logs()
            raise
        finally:
            c.stop()

    def run_unit(self, d, env, state):
        """tessera-run@script.service's ExecStart, run.env's command replaced by the user
        script (its other settings kept), in the unit's WorkingDirectory."""
        script, want = tl.USER_SCRIPT, tl.script_by_hand("--steps", 30)
        run_env = dict(env_file(os.path.join(d, "run.env")),
                       TESSERA_RUN_COMMAND="/usr/bin/python3 %s --steps 30" % script)
        unit = os.path.join(d, "tessera-run@.service")
        argv = expand(unit_values(unit, "ExecStart")[0], dict(env, **run_env), "script")
        cwd = expand(unit_values(unit, "WorkingDirectory")[0], env, "script")[0]
        cwd = cwd.replace("/var/lib/tessera", state)
        os.makedirs(cwd)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("[rank 0] params_sha256 %s" % want, r.stdout)
        self.assertIn("tessera run: job script finished, params_sha256 %s" % want, r.stderr)
        tl.log("tessera-run@script: user_train.py's 2 ranks, params_sha256 %s... as by hand"
               % want[:12])


if __name__ == "__main__":
    tl.main()
