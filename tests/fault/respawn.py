#!/usr/bin/python3
"""respawn.py - `tessera up --respawn` restarts a shard that dies, and training never notices.

Real processes: `tessera up --shards 3 --replicas 2 --respawn` starts the cluster; `tessera
train --exact` trains 2 workers on it. While it trains, a shard is killed with SIGKILL; the
supervisor says so and starts a new shard process after 0.5 s, which registers, joins
(docs/replication.md, "Joining") and goes on the ring. Then the new process is killed too:
the same slot dies again within a minute, so its restart waits twice as long (1.0 s). Checked:
- the training ends by itself with the params_sha256 of `tessera train --local`;
- `tessera up` printed each death and restart with its delay (0.5 s, then 1.0 s);
- `tessera status --json` lists the last restarted shard alive, on the ring, with
  "restarts": 2, under an id of its own (and `tessera up` said which, with its log), and the
  table says "restart 2 of its shard";
- `tessera verify replicas` finds every partition's copies equal;
- SIGTERM to `tessera up` leaves none of its processes behind.

Run by `make test-fault`; TESSERA_BIN like the integration tests.
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

STEPS = 3000


class Respawn(unittest.TestCase):
    def setUp(self):
        os.environ.setdefault("TESSERA_LOG", "warn")
        self.c = tl.Cluster()
        self.passed = False

    def tearDown(self):
        if not self.passed:
            self.c.dump_logs()
        self.c.stop()

    def victim(self, addr, not_pid=None):
        """The pid of an alive shard on the ring that heads partitions of the job."""
        def pick():
            for s in tl.status_json(addr)["shards"]:
                if (s["state"] == "alive" and not s["joining"] and s.get("pid") and
                        s["pid"] != not_pid and s.get("heads", 0) > 0):
                    return s
            return None
        return tl.wait_until(pick, 60, "a shard on the ring heading partitions", interval=0.2)

    def test_a_killed_shard_is_restarted_and_rejoins(self):
        logs = os.path.join(self.c.dir, "up-logs")
        up = self.c.spawn([os.path.join(tl.BIN, "tessera"), "up", "--shards", "3",
                           "--replicas", "2", "--respawn", "--master-port", "0",
                           "--dir", logs], "up")
        addr = tl.wait_until(lambda: next((ln.split()[1] for ln in up.log_text().splitlines()
                                           if ln.startswith("master ")), None),
                             tl.START_TIMEOUT, "tessera up to print the master's address")
        # the cluster's certificates (TLS by default), for our status calls
        tl.wait_until(lambda: self.c.take_tls(up.log_text()), tl.START_TIMEOUT,
                      "tessera up to print its certificates' directory")
        kids = set(tl.children_of(up.pid))
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", addr,
                              "--workers", "2", "--steps", str(STEPS), "--exact", "--keep",
                              "--job", "rsp", "--json"], "train", stdout_pipe=True)
        tl.wait_until(lambda: max([w["clock"] for w in tl.status_json(addr)["workers"]] or [0]) >=
                      STEPS // 8, 120, "the job to pass step %d" % (STEPS // 8), interval=0.1)
        first = self.victim(addr)
        os.kill(first["pid"], signal.SIGKILL)
        tl.log("killed shard %d (pid %d)" % (first["id"], first["pid"]))
        # The restarted process: restarts 1, alive, on the ring once its copies moved.
        again = tl.wait_until(lambda: next((s for s in tl.status_json(addr)["shards"]
                                            if s["restarts"] == 1 and s["state"] == "alive"
                                            and not s["joining"]), None), 60,
                              "the restarted shard on the ring", interval=0.2)
        self.assertNotEqual(again["id"], first["id"], "a new process registers anew")
        tl.log("restarted as shard %d (pid %d), on the ring" % (again["id"], again["pid"]))
        os.kill(again["pid"], signal.SIGKILL)
        third = tl.wait_until(lambda: next((s for s in tl.status_json(addr)["shards"]
                                            if s["restarts"] == 2 and s["state"] == "alive"
                                            and not s["joining"]), None), 60,
                              "the second restart on the ring", interval=0.2)
        rc = train.wait(300)
        out = train.p.stdout.read().decode().strip().splitlines()
        self.assertEqual(rc, 0, train.log_text())
        doc = json.loads(out[-1])
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(doc["params_sha256"],
                         json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"])

        said = up.log_text()
        self.assertIn("shard %d (pid %d) was killed by signal 9" % (first["id"], first["pid"]),
                      said)
        self.assertIn("restarting it in 0.5 s (restart 1)", said)
        self.assertIn("restarting it in 1.0 s (restart 2)", said)
        self.assertIn("restart 2 of its shard", tl.status_text(addr))
        # (third was picked by "restarts": 2; what it must also be: a new shard, named so.)
        self.assertNotIn(third["id"], (first["id"], again["id"]), "each restart registers anew")
        self.assertIn("registered as shard %d (log %s/shard-%d.log)" %
                      (third["id"], logs, third["id"]), said)
        v = tl.run_cli(["verify", "replicas", "--master", addr, "--job", "rsp"], timeout=120)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

        # Everything `tessera up` started (and restarted) goes with it.
        kids |= set(tl.children_of(up.pid))
        up.signal(signal.SIGTERM)
        self.assertEqual(up.wait(30), 0, up.log_text())
        left = [p for p in kids if tl.pid_alive(p)]
        self.assertEqual(left, [], "processes left behind: %r" % left)
        self.passed = True


if __name__ == "__main__":
    tl.main()
