#!/usr/bin/python3
"""test_master_restart.py - a master killed with SIGKILL under `tessera up` is started again with
the state it kept, and training never notices (docs/membership.md, "A master that restarts").

Real processes: `tessera up --shards 3 --store DIR --snapshot-every 50` (R = 2), `tessera train
--exact` with 2 workers. While it trains, the master is killed (SIGKILL) twice, the second time
soon after its restart. Checked:
- the training ends by itself with the params_sha256 of `tessera train --local`, and the job
  is finished with that fingerprint in the restarted master's table;
- `tessera up` said each death and restart (0.5 s, then 1.0 s: the second came within a
  minute); `tessera status` says "restart 2 of the cluster's master", `--json`
  "master_restarts": 2 and "restored": true;
- the epoch never went back: after the restarts it is above every epoch seen before; the
  shards keep their ids, alive, none declared dead;
- the snapshot history is whole: every snapshot listed before the kills is still listed, the
  branch is the same, snapshots go on after the restarts on that branch, and each snapshot's
  parent is the one before it (`tessera snapshot log`);
- a second master pointed at the same state directory is refused, saying another master uses
  it, and changes nothing;
- SIGTERM to `tessera up` leaves none of its processes behind.

Priority tasks (services/master/tasks.h, the file "tasks"): `tessera up --shards 1` and a
long float job of 2 workers, both training; three SubmitTask calls (an admin's, with the admin
certificate), the master killed right after the last reply. The restarted master lists the three ids, the workers run each and
report it done, and the next SubmitTask gets id 4.

A worker's start: a master and a shard of our own under mutual TLS (certificates of `tessera
certs init`), the master with --state-dir on a fixed port;
an exact job of 2 workers whose start is held (TESSERA_TEST_HOLD_JOIN) after a worker caught
up and before it tells the master. The master is killed there and started again only once the
worker said it waits for it: the job ends with --local's params_sha256.
"""
import json
import os
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 800 if tl.SANITIZED else 2000
EVERY = 50


def snapshots(store):
    r = tl.run_cli(["snapshot", "list", "--store", store, "--json"])
    if r.returncode != 0:
        raise AssertionError("tessera snapshot list: %s" % r.stderr)
    return json.loads(r.stdout or "[]")


class MasterRestart(unittest.TestCase):
    def setUp(self):
        os.environ.setdefault("TESSERA_LOG", "warn")
        self.c = tl.Cluster()
        self.passed = False

    def tearDown(self):
        if not self.passed:
            self.c.dump_logs()
        self.c.stop()

    def kill_master(self, addr):
        pid = tl.status_json(addr)["master_pid"]
        os.kill(pid, signal.SIGKILL)
        tl.log("killed the master (pid %d)" % pid)
        return pid

    def test_a_killed_master_comes_back_with_its_state(self):
        logs = os.path.join(self.c.dir, "up-logs")
        store = os.path.join(self.c.dir, "store")
        up = self.c.spawn([os.path.join(tl.BIN, "tessera"), "up", "--shards", "3",
                           "--master-port", "0", "--dir", logs, "--store", store,
                           "--snapshot-every", str(EVERY)], "up")
        addr = tl.wait_until(lambda: next((ln.split()[1] for ln in up.log_text().splitlines()
                                           if ln.startswith("master ")), None),
                             tl.START_TIMEOUT, "tessera up to print the master's address")
        tl.wait_until(lambda: self.c.take_tls(up.log_text()), tl.START_TIMEOUT,
                      "tessera up to print its TLS directory")   # mutual TLS, the default
        kids = set(tl.children_of(up.pid))
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", addr,
                              "--workers", "2", "--steps", str(STEPS), "--exact",
                              "--job", "mr", "--json"], "train", stdout_pipe=True)
        tl.wait_until(lambda: len(snapshots(store)) >= 2, 120, "two snapshots", interval=0.1)
        before = tl.status_json(addr)
        shards = {s["id"] for s in before["shards"] if s["state"] == "alive"}
        snaps = {s["id"] for s in snapshots(store)}

        first = self.kill_master(addr)
        after = tl.wait_until(lambda: (lambda d: d if d["master_pid"] != first else None)(
            tl.status_json(addr)), 30, "the master back", interval=0.1)
        self.kill_master(addr)   # within a minute of its restart: the backoff doubles
        rc = train.wait(300)
        out = train.p.stdout.read().decode().strip().splitlines()
        self.assertEqual(rc, 0, train.log_text())
        doc = json.loads(out[-1])
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
        self.assertEqual(doc["params_sha256"], local)

        end = tl.wait_until(lambda: (lambda d: d if d["master_restarts"] == 2 else None)(
            tl.status_json(addr)), 30, "the second restart", interval=0.1)
        self.assertTrue(end["restored"])
        self.assertGreater(after["epoch"], before["epoch"])
        self.assertGreater(end["epoch"], after["epoch"])
        self.assertEqual({s["id"] for s in end["shards"] if s["state"] == "alive"}, shards)
        self.assertEqual([s for s in end["shards"] if s["state"] == "dead"], [])
        job = tl.wait_until(lambda: next((j for j in tl.status_json(addr)["jobs"]
                                          if j["id"] == "mr" and j["state"] == "finished"),
                                         None), 30, "job mr finished", interval=0.1)
        self.assertEqual(job["params_sha256"], local)
        said = up.log_text()
        self.assertIn("the master (pid %d) was killed by signal 9" % first, said)
        self.assertIn("restarting it in 0.5 s (restart 1)", said)
        self.assertIn("restarting it in 1.0 s (restart 2)", said)
        self.assertIn("restart 2 of the cluster's master", tl.status_text(addr))

        # The history: nothing lost, one branch, snapshots after the restarts chained on.
        now = snapshots(store)
        self.assertTrue(snaps <= {s["id"] for s in now}, "snapshots lost")
        self.assertEqual(end["snapshots"]["branch"], before["snapshots"]["branch"])
        mine = sorted((s for s in now if s["job"] == "mr"), key=lambda s: s["step"])
        self.assertEqual(mine[-1]["step"], STEPS - STEPS % EVERY)
        log = tl.run_cli(["snapshot", "log", "--store", store, "--json"])
        self.assertEqual(log.returncode, 0, log.stderr)
        chain = json.loads(log.stdout)
        self.assertEqual([c["step"] for c in chain], sorted((c["step"] for c in chain),
                                                            reverse=True))
        self.assertEqual({c["id"] for c in chain}, {s["id"] for s in mine})

        # A second master on the same state directory (with the master's certificate, as
        # the first has) is refused, and changes nothing.
        second = self.c.spawn([os.path.join(tl.BIN, "tessera-master"), "--listen",
                               "127.0.0.1:0", "--state-dir", os.path.join(logs, "master-state")]
                              + self.c.tls_args("master"), "second-master")
        self.assertNotEqual(second.wait(30), 0)
        self.assertIn("another master uses it", second.log_text())
        self.assertEqual(tl.status_json(addr)["epoch"], end["epoch"])

        kids |= set(tl.children_of(up.pid))
        up.signal(signal.SIGTERM)
        self.assertEqual(up.wait(30), 0, up.log_text())
        left = [p for p in kids if tl.pid_alive(p)]
        self.assertEqual(left, [], "processes left behind: %r" % left)
        self.passed = True

    def test_tasks_survive_a_kill(self):
        _, addr = self.c.tessera_up(["--shards", "1"], name="tk-up")
        self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", addr, "--workers",
                      "2", "--steps", "1000000", "--job", "tk"], "tk-train")
        # Both workers past their start (data check, join) and training: what is under test
        # is the tasks, not a worker that starts while the master restarts (that is
        # test_a_start_outlives_a_master_restart's).
        tl.wait_until(lambda: sum(1 for w in tl.status_json(addr)["workers"]
                                  if w["state"] == "alive" and w["clock"] >= 1) == 2,
                      120, "both workers of job tk to train")

        def tasks():
            return next((j["tasks"] for j in tl.status_json(addr)["jobs"] if j["id"] == "tk"),
                        [])
        M = tl.master_pb2

        def submit():
            # A channel made soon after the restart may be handed the connection to the
            # killed master, which fails once (UNAVAILABLE, "Broken pipe") before the request
            # leaves: send again. Any other error fails at once.
            m = tl.Stub(self.c.admin_channel(addr), M, "Master")   # an admin call
            for _ in range(150):
                try:
                    return m.SubmitTask(M.SubmitTaskRequest(job="tk", kind=1),
                                        timeout=tl.RPC_TIMEOUT).id
                except tl.grpc.RpcError as e:
                    if e.code() != tl.grpc.StatusCode.UNAVAILABLE:
                        raise
                    time.sleep(0.2)
            self.fail("SubmitTask: UNAVAILABLE for 30 s")
        ids = [submit() for _ in range(3)]
        first = self.kill_master(addr)
        tl.wait_until(lambda: tl.status_json(addr)["master_pid"] != first, 30,
                      "the master back", interval=0.1)
        self.assertEqual([t["id"] for t in tasks()], ids)
        done = tl.wait_until(lambda: (lambda k: k if len(k) == 3 and all(
            t["state"] == "done" for t in k) else None)(tasks()), 60,
            "the tasks submitted before the kill to be done", interval=0.2)
        tl.log("tasks %s done at steps %s" % (ids, [t["step"] for t in done]))
        self.assertTrue(all(t["step"] > 0 and 0 <= t["test_accuracy"] <= 1 for t in done),
                        done)
        self.assertEqual(submit(), 4)
        self.passed = True

    @unittest.skipUnless(tl.TEST_HOOKS, tl.NO_HOOKS)
    def test_a_start_outlives_a_master_restart(self):
        """A worker of an exact job is held after catching up at its start, before it tells
        the master so (TESSERA_TEST_HOLD_JOIN); the master is killed there and started
        again on its port and state directory only once a worker said it waits for it. The
        job trains to the end, at --local's fingerprint."""
        steps = 40
        # Mutual TLS, the default: a worker's reconnection to the restarted master is a TLS
        # handshake (the workers read the certificates from $TESSERA_TLS_DIR).
        self.c.make_certs(shards=1)
        argv = ["--listen", "127.0.0.1:%d" % tl.free_port(), "--lease-ms", "1500",
                "--state-dir", os.path.join(self.c.dir, "js-state")] + self.c.tls_args("master")
        master = self.c.start_server("tessera-master", "js-master", argv)
        self.c.start_shard(master.addr, "js-shard", lease_ms=1500,
                           extra=self.c.tls_args("shard-0"))
        hold = os.path.join(self.c.dir, "js-hold")
        with tl.environ(TESSERA_TEST_HOLD_JOIN=hold):
            train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                                  master.addr, "--workers", "2", "--steps", str(steps),
                                  "--exact", "--json", "--job", "js"], "js-train")
        # The other worker's catching up may wait for the held one's first push.
        tl.wait_until(lambda: "TESSERA_TEST_HOLD_JOIN" in train.log_text(), 120,
                      "a worker to wait in its join")
        master.signal(signal.SIGKILL)
        self.assertIsNotNone(master.wait(10))
        with open(hold, "w"):
            pass
        tl.wait_until(lambda: "caught-up heartbeat" in train.log_text() or not train.running(),
                      30, "a worker to wait for the killed master")
        self.assertTrue(train.running(), "a worker did not wait for the master: "
                        "tessera train exited %s" % train.wait(0))
        tl.log("the workers wait for the master; starting it again")
        self.c.start_server("tessera-master", "js-master-2", argv)
        self.assertEqual(train.wait(120), 0, train.log_text())
        out = [ln for ln in train.log_text().splitlines() if ln.startswith("{")]
        self.assertTrue(out, "tessera train --json printed no result:\n" + train.log_text())
        r = tl.run_cli(["train", "--local", "--exact", "--json", "--steps", str(steps)],
                       timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(out[-1])["params_sha256"],
                         json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"])
        self.passed = True


if __name__ == "__main__":
    tl.main()
