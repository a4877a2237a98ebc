#!/usr/bin/python3
"""test_shard_redo.py - a shard's redo log of its tables (`tessera-shard --redo-dir`,
services/shard/durable.h; docs/embeddings.md, "Restarting from its own disk").

Real processes: a tessera-master and one tessera-shard with --redo-dir, the CTR trainer
(`tessera train --model ctr`, 8 tables, exact) on 2 workers, the shard killed with SIGKILL,
and `tessera-shard --replay DIR --json` reading what the killed shard left. Checked:
- after 30 steps and the shard stopped with SIGTERM, every table the log holds is at step 30
  with the fingerprint the trainer reported for it (its table_sha256), bit for bit;
- so is the dense part: the 6 tensors' partitions at version 30, whose fingerprint is the
  trainer's dense_sha256; and the MLP's, in 64 KiB partitions (13 of fc1.weight), put back
  together give its params_sha256;
- killed mid-run (steps slowed to 60 ms), the log holds every step a worker had seen (the
  workers' clocks in `tessera status` read before the kill), and each table in it, and the
  dense tensors, equal the same after as many steps of `tessera train --local`: nothing a
  worker saw is lost, and nothing in the log is other than what training made;
- a shard started again on the killed one's directory once the master dropped it (no restart
  grace) is the same member (its id, at its new address: the instance and secret kept in
  DIR/identity), sets the log aside whole in DIR/previous and logs afresh;
- with the grace (RedoRestart): a shard killed mid-run and respawned starts from its log as
  the same member, and the job ends on the uninterrupted fingerprint with no rollback;
- a second shard on the same --redo-dir is refused, naming the directory; an ssp job's table
  is refused on a shard with --redo-dir, naming the redo log (its steps are not logged).
"""
import json
import os
import signal
import subprocess
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

CTR = ["--model", "ctr", "--batch", "128", "--micro", "32", "--exact", "--json"]


def train(args, timeout=300):
    return tl.run_cli(["train"] + list(args), timeout)


def replay(redo):
    r = subprocess.run([os.path.join(tl.BIN, "tessera-shard"), "--replay", redo, "--json"],
                       capture_output=True, text=True, timeout=120)
    tl.scan_for_sanitizer("tessera-shard --replay", r.stderr)
    if r.returncode != 0:
        raise AssertionError("tessera-shard --replay %s exited %d: %s" %
                             (redo, r.returncode, r.stderr))
    return json.loads(r.stdout)


class ShardRedo(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        # No restart grace: a killed shard leaves the map at once, as one without a log does
        # (RedoRestart, below, has the grace).
        cls.master = cls.c.start_master(extra=["--shard-restart-grace", "0"])

    def shard(self, name, extra=(), redo=None):
        redo = redo or os.path.join(self.c.dir, name)
        # A short lease: a killed shard leaves the map soon after the workers that would
        # report it are gone.
        return self.c.start_shard(self.master.addr, name=name, lease_ms=1500,
                                  extra=["--redo-dir", redo] + list(extra)), redo

    def kill(self, shard):
        shard.signal(signal.SIGKILL)
        shard.wait(30)
        self.wait_out()

    def wait_out(self):
        """The master drops a killed shard on a worker's report or at its lease: wait for
        that, so that the next case's job is not placed on it. (Not with the workers killed
        too: a master that hears no member at all takes it for its own network's cut and
        declares none dead for 30 s.)"""
        tl.wait_until(lambda: not [s for s in tl.status_json(self.master.addr)["shards"]
                                   if s["state"] == "alive"], 60, "the shard out of the map")

    def test_1_trained_tables_are_in_the_log(self):
        port = tl.free_port()
        shard, redo = self.shard("redo-a", ["--metrics-port", str(port)])
        r = train(["--master", self.master.addr, "--workers", "2", "--job", "ja", "--steps",
                   "30", "--keep"] + CTR)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        got = json.loads(r.stdout)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as f:
            m = dict(line.rsplit(" ", 1) for line in f.read().decode().splitlines()
                     if line.startswith("tessera_shard_redo_"))
        # 8 tables: each an image when attached, then a record a step; one blob each
        tl.log("redo log: %s" % m)
        self.assertGreaterEqual(float(m["tessera_shard_redo_records_total"]), 8 * 32)
        self.assertGreater(float(m["tessera_shard_redo_syncs_total"]), 0)
        self.assertGreater(float(m["tessera_shard_redo_bytes"]), 0)
        self.assertEqual(float(m["tessera_shard_redo_failing"]), 0)
        # SIGTERM: the log is closed before the tables and tensors are freed, which must then
        # log nothing (they stay in it as they are), and the shard leaves the map itself
        self.assertEqual(shard.stop(), 0)
        log = replay(redo)
        tables = {t["table"]: t for t in log["tables"]}
        self.assertEqual(sorted(tables), sorted(got["table_sha256"]), log)
        for name, hexd in got["table_sha256"].items():
            self.assertEqual(tables[name]["job"], "ja")
            self.assertEqual(tables[name]["step"], 30, tables[name])
            self.assertEqual(tables[name]["sha256"], hexd, name)
        self.assertEqual(sum(t["rows"] for t in tables.values()), got["table_rows"])
        self.assertEqual(log["torn_bytes"], 0)
        # the dense part: its 6 tensors' partitions, at version 30, the trainer's fingerprint
        jobs = {j["job"]: j for j in log["jobs"]}
        self.assertEqual(len(jobs["ja"]["tensors"]), 6, jobs)
        for t in jobs["ja"]["tensors"]:
            self.assertEqual((t["version"], t["partitions_here"]), (30, t["partitions"]), t)
        self.assertEqual(jobs["ja"]["dense_sha256"], got["dense_sha256"])

    def test_2_killed_mid_run_loses_no_step_a_worker_saw(self):
        shard, redo = self.shard("redo-b")
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "train", "--master",
                              self.master.addr, "--workers", "2", "--job", "jb", "--steps",
                              "400", "--slow", "0:60"] + CTR, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            def clocks():
                st = tl.status_json(self.master.addr)
                c = [w.get("clock", 0) for w in st.get("workers", []) if w.get("job") == "jb"]
                return c if c and max(c) >= 12 else None
            seen = max(tl.wait_until(clocks, 120, "a worker of jb past step 12"))
            sid = [s["id"] for s in tl.status_json(self.master.addr)["shards"]
                   if s["state"] == "alive"][0]
            self.kill(shard)   # the workers alive: their reports drop it from the map
        finally:
            p.kill()
            _, err = p.communicate()
        tl.scan_for_sanitizer("tessera train", err)
        log = replay(redo)
        steps = sorted({t["step"] for t in log["tables"]})
        dense = log["jobs"][0]
        versions = sorted({t["version"] for t in dense["tensors"]})
        self.assertEqual(len(log["tables"]), 8, log)
        self.assertEqual(len(versions), 1, dense)   # each dense step is one push of them all
        tl.log("workers had seen step %d; the log holds the tables at steps %s, the dense "
               "tensors at %d" % (seen, steps, versions[0]))
        self.assertGreaterEqual(steps[0], seen, log)
        self.assertGreaterEqual(versions[0], seen, log)
        # Each part equals --local's after as many steps: the kill may fall between tables.
        for step in sorted(set(steps + versions)):
            want = train(["--local", "--steps", str(step)] + CTR)
            self.assertEqual(want.returncode, 0, want.stderr[-3000:])
            want = json.loads(want.stdout)
            for t in log["tables"]:
                if t["step"] == step:
                    self.assertEqual(t["sha256"], want["table_sha256"][t["table"]],
                                     "%s at step %d" % (t["table"], step))
            if versions[0] == step:
                self.assertEqual(dense["dense_sha256"], want["dense_sha256"],
                                 "the dense tensors at step %d" % step)
        # A shard started again on the directory after the master dropped it (no grace here)
        # does not start from the log: it sets the log aside in DIR/previous, whole, and
        # begins an empty one. It is the same member: its instance and secret kept in
        # DIR/identity, its id comes back.
        again, _ = self.shard("redo-b-again", redo=redo)
        back = [s for s in tl.status_json(self.master.addr)["shards"] if s["state"] == "alive"]
        self.assertEqual([(s["id"], s["addr"]) for s in back], [(sid, again.addr)], back)
        self.assertEqual(again.stop(), 0)
        self.assertIn("set aside", again.log_text())
        aside = replay(os.path.join(redo, "previous"))
        self.assertEqual((aside["tables"], aside["jobs"]), (log["tables"], log["jobs"]))
        fresh = replay(redo)
        self.assertEqual((fresh["tables"], fresh["jobs"]), ([], []))

    def test_4_partitions_put_together(self):
        """The MLP on Fashion-MNIST in 64 KiB partitions (fc1.weight in 13): the log's images,
        put back together by tensor, give the trainer's params_sha256."""
        shard, redo = self.shard("redo-d")
        r = train(["--master", self.master.addr, "--workers", "2", "--job", "jd", "--steps",
                   "20", "--exact", "--json", "--keep", "--partition-kb", "64"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        got = json.loads(r.stdout)
        self.assertEqual(shard.stop(), 0)
        job = replay(redo)["jobs"][0]
        parts = {t["name"]: (t["partitions"], t["partitions_here"], t["version"])
                 for t in job["tensors"]}
        self.assertEqual(parts["fc1.weight"], (13, 13, 20), parts)
        self.assertEqual(job["dense_sha256"], got["params_sha256"])

    def test_3_refusals(self):
        shard, redo = self.shard("redo-c")
        second = subprocess.run([os.path.join(tl.BIN, "tessera-shard"), "--insecure",
                                 "--master", self.master.addr, "--redo-dir", redo],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, 2, second.stderr)
        self.assertIn("--redo-dir", second.stderr)
        self.assertIn("another process", second.stderr)
        r = train(["--master", self.master.addr, "--workers", "1", "--job", "jc", "--steps",
                   "3", "--mode", "ssp", "--model", "ctr", "--batch", "128"], timeout=120)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("redo log", r.stderr)
        self.assertIn("ssp", r.stderr)   # the tensors are refused first
        tl.log([line for line in r.stderr.splitlines() if "redo" in line][0])
        self.assertEqual(shard.stop(), 0)   # SIGTERM: it leaves the map itself


class RedoRestart(tl.ClusterCase, unittest.TestCase):
    """`tessera up --shards 2 --replicas 1 --redo-dir R --respawn --store S --snapshot-every 10
    --table-mem 64K --table-dir T`: a shard killed with SIGKILL after step 25 of 80, with no
    copies of what it held, its rows mostly on its disk tier and more on their way. The master
    holds its place on the ring (the restart grace, its default 30 s); the respawned process
    starts from its log as the same member at its new port; the workers wait for it, send their
    tables' last pushes and the step again, and the job ends on the --local fingerprint with no
    rollback: nothing the shard acknowledged is lost (its tier, a cache each start empties, is
    filled again from the log's rows as they go out of memory). Then, the cluster stopped,
    each shard's log holds its part at step 80: every table on both, each dense tensor on
    one."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()

    def test_kill_and_restart_from_the_log(self):
        c = self.c
        redo = os.path.join(c.dir, "redo")
        up, addr = c.tessera_up(["--insecure", "--shards", "2", "--replicas", "1", "--respawn",
                                 "--redo-dir", redo, "--store", os.path.join(c.dir, "store"),
                                 "--snapshot-every", "10", "--table-mem", "64K",
                                 "--table-dir", os.path.join(c.dir, "tier")])
        args = ["--steps", "80"] + CTR
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "train", "--master", addr,
                              "--workers", "2", "--job", "jr", "--slow", "0:60", "--keep"] +
                             args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        try:
            victim = tl.shard_once_past(addr, 25)
            tl.log("killing shard %d (pid %d)" % (victim["id"], victim["pid"]))
            os.kill(victim["pid"], signal.SIGKILL)
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        tl.scan_for_sanitizer("tessera train", err)
        self.assertEqual(p.returncode, 0, err[-3000:])
        got = json.loads(out)
        self.assertEqual(got["rollbacks"], 0, err[-3000:])
        want = json.loads(train(["--local"] + args).stdout)
        self.assertEqual(got["params_sha256"], want["params_sha256"], err[-3000:])
        self.assertEqual(got["table_sha256"], want["table_sha256"])
        # the killed shard had written rows to its disk tier, and had more on their way
        killed = [t["disk_tier"] for t in victim.get("table_list", []) if t["job"] == "jr"]
        self.assertGreater(sum(d["written"] for d in killed), 0, killed)
        # the respawned process is the same member, back at its own address, its rows again
        # through its own tier
        shards = {s["id"]: s for s in tl.status_json(addr)["shards"] if s["state"] == "alive"}
        self.assertEqual(len(shards), 2, shards)
        self.assertIn(victim["id"], shards)
        self.assertNotEqual(shards[victim["id"]]["pid"], victim["pid"])
        tables = [t for t in shards[victim["id"]].get("table_list", []) if t["job"] == "jr"]
        self.assertEqual(len(tables), 8, shards[victim["id"]])
        tl.assert_rows_went_through_disk(self, tables)
        self.assertIn("sent again the last push", err)   # the workers' resend
        logs = [open(os.path.join(c.dir, "up", f), errors="replace").read()
                for f in os.listdir(os.path.join(c.dir, "up")) if f.startswith("shard-")]
        started = [line for text in logs for line in text.splitlines()
                   if "started from its redo log" in line]
        self.assertEqual(len(started), 1, started)
        tl.log(started[0].split("shard: ", 1)[-1])
        up.signal(signal.SIGTERM)
        self.assertEqual(up.wait(60), 0)
        logs = [replay(os.path.join(redo, d)) for d in sorted(os.listdir(redo))]
        self.assertEqual(len(logs), 2, logs)
        for log in logs:
            self.assertEqual(sorted((t["table"], t["step"]) for t in log["tables"]),
                             [("emb%d" % k, 80) for k in range(8)], log["tables"])
        # every shard registers every tensor; each partition is held by one
        tensors = [t for log in logs for j in log["jobs"] for t in j["tensors"]
                   if t["partitions_here"]]
        self.assertEqual(sorted(t["id"] for t in tensors), list(range(6)), tensors)
        self.assertEqual({t["version"] for t in tensors}, {80}, tensors)
        # started from its log, not set aside
        for d in sorted(os.listdir(redo)):
            self.assertFalse(os.path.isdir(os.path.join(redo, d, "previous")), d)


if __name__ == "__main__":
    tl.main()
