#!/usr/bin/python3
"""test_cluster.py - `tessera up` as a real process: status, a shard killed, a clean stop.

`tessera up --shards 3 --master-port 0 --lease-ms 1000` starts a master and three shards under
mutual TLS, its default, and prints `export TESSERA_TLS_DIR=...` right after the master. The
CLI's `status --json` and a python3-grpcio ClusterStatus must agree. One shard gets SIGKILL (no
chance to deregister): the master must declare it dead once its lease runs out (not before),
move the epoch on, keep the other two alive, and publish a shard map without it. SIGTERM to
`tessera up` must stop every process it started and exit 0. Also the CLI's help and its error
when no master listens.
"""
import os
import select
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# tessera_testlib first: it re-runs this script under /usr/bin/python3 if grpc is missing.
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2  # noqa: E402

LEASE_MS = 1000


def read_line(proc, timeout):
    """One line of proc's stdout (a pipe), or fails after timeout seconds."""
    until = time.monotonic() + timeout
    buf = b""
    fd = proc.p.stdout.fileno()
    while not buf.endswith(b"\n"):
        left = until - time.monotonic()
        if left <= 0:
            raise AssertionError("no line from %s within %.0f s (got %r)" % (proc.name, timeout,
                                                                             buf))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            b = os.read(fd, 1)
            if not b:
                raise AssertionError("%s closed stdout (exit %s) after %r:\n%s" % (
                    proc.name, proc.p.poll(), buf, proc.log_text()))
            buf += b
    return buf.decode().rstrip("\n")


def listen_ports(pid):
    """The TCP ports pid listens on, matched through its socket inodes in /proc/net/tcp*."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return ports


class CliHelp(unittest.TestCase):
    def test_help_exits_0_with_usage(self):
        for args in (["--help"], ["up", "--help"], ["status", "--help"]):
            r = tl.run_cli(args)
            self.assertEqual(r.returncode, 0, "tessera %s: %s" % (" ".join(args), r.stderr))
            self.assertIn("usage: tessera", r.stdout, args)
        r = tl.run_cli(["up", "--help"])
        for flag in ("--shards", "--master-port", "--dir", "--lease-ms"):
            self.assertIn(flag, r.stdout)
        r = tl.run_cli(["status", "--help"])
        for flag in ("--master", "--json"):
            self.assertIn(flag, r.stdout)

    def test_status_without_master_says_what_to_do(self):
        addr = "127.0.0.1:%d" % tl.free_port()
        t0 = time.monotonic()
        r = tl.run_cli(["status", "--master", addr, "--json", "--timeout-ms", "1000"])
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "", "no JSON when there is no answer")
        self.assertIn(addr, r.stderr)
        self.assertIn("tessera up", r.stderr, "the message should say how to start a master")
        self.assertIn("--master", r.stderr)
        self.assertLess(took, 5.0, "--timeout-ms 1000 should bound the wait")


class UpKillStop(unittest.TestCase):
    def setUp(self):
        self.c = tl.Cluster()
        self.passed = False

    def tearDown(self):
        if not self.passed:
            self.c.dump_logs()
        self.c.stop()

    def test_up_kill_one_shard_then_stop(self):
        up = self.c.spawn([os.path.join(tl.BIN, "tessera"), "up", "--shards", "3",
                           "--master-port", "0", "--lease-ms", str(LEASE_MS),
                           "--dir", os.path.join(self.c.dir, "up-logs")], "up",
                          stdout_pipe=True)
        first = read_line(up, tl.START_TIMEOUT)
        self.assertRegex(first, r"^master 127\.0\.0\.1:\d+$")
        addr = first.split()[1]
        # The default is mutual TLS: right after the master, what the clients need.
        export = read_line(up, tl.START_TIMEOUT)
        self.assertRegex(export, r"^export TESSERA_TLS_DIR=/\S+$")
        self.assertEqual(self.c.take_tls(export), os.path.join(self.c.dir, "up-logs", "tls"))
        ch = self.c.channel(addr)
        master = tl.Stub(ch, master_pb2, "Master")

        # The CLI and grpcio see the same cluster: 3 alive shards, one epoch per registration.
        js = tl.status_json(addr)
        cs = tl.cluster_status(ch)
        self.assertEqual(js["epoch"], cs.epoch)
        self.assertGreaterEqual(cs.epoch, 4, "epoch 1, then one per shard registered")
        self.assertEqual(len(js["shards"]), 3)
        self.assertEqual([s["state"] for s in js["shards"]], ["alive"] * 3)
        self.assertEqual([(s["id"], s["addr"]) for s in js["shards"]],
                         [(s.id, s.addr) for s in cs.shards])
        self.assertEqual([s.state for s in cs.shards], [tl.ALIVE] * 3)
        # Each shard's log is named by the id the master gave it, as status shows it.
        logs = os.path.join(self.c.dir, "up-logs")
        self.assertEqual(sorted(n for n in os.listdir(logs) if n.startswith("shard-")),
                         sorted("shard-%d.log" % s.id for s in cs.shards))
        for s in cs.shards:
            with open(os.path.join(logs, "shard-%d.log" % s.id)) as f:
                self.assertRegex(f.read(), r"registered with \S+ as %d " % s.id)
        self.assertEqual(js["workers"], [])
        self.assertEqual(js["vnodes"], cs.vnodes)
        self.assertEqual(js["ring_digest"], "%016x" % cs.ring_digest)
        for s in cs.shards:
            self.assertEqual(s.lease_ms, LEASE_MS, "shards take the master's --lease-ms")

        # Map each shard's addr to its pid: children of `up` only, by the port they listen on.
        kids = tl.children_of(up.pid)
        self.assertEqual(len(kids), 4, "a master and 3 shards: %r" % kids)
        by_port = {}
        for pid in kids:
            exe = os.path.basename(tl.cmdline(pid)[0])
            if exe == "tessera-shard":
                for port in listen_ports(pid):
                    by_port[port] = pid
            else:
                self.assertEqual(exe, "tessera-master")
        victim = cs.shards[1]
        victim_port = int(victim.addr.rsplit(":", 1)[1])
        self.assertIn(victim_port, by_port, "no child of `up` listens on %s" % victim.addr)
        # Each shard listens on its gRPC port and on its TCP data-plane port.
        self.assertEqual(len(set(by_port.values())), 3, "three shard pids: %r" % by_port)
        for s in cs.shards:
            self.assertIn(int(s.addr.rsplit(":", 1)[1]), by_port, s.addr)
        victim_pid = by_port[victim_port]
        epoch0 = cs.epoch

        # SIGKILL: no Deregister. It must be alive until its lease runs out, then dead.
        t_before = time.monotonic()  # the master answers `before` no earlier than this
        before = tl.cluster_status(ch)
        h0 = [s for s in before.shards if s.id == victim.id][0].last_heartbeat_ms_ago
        os.kill(victim_pid, signal.SIGKILL)
        t_kill = time.monotonic()
        seen_dead = None
        while seen_dead is None and time.monotonic() - t_kill < 2 * LEASE_MS / 1000 + 1:
            now = tl.cluster_status(ch)
            st = {s.id: s.state for s in now.shards}
            if st[victim.id] == tl.DEAD:
                seen_dead = (time.monotonic(), now)
            else:
                self.assertEqual(st[victim.id], tl.ALIVE)
                self.assertEqual(now.epoch, epoch0, "the epoch moved with no member change")
            time.sleep(0.05)
        self.assertIsNotNone(seen_dead, "shard %d not dead %.1f s after SIGKILL (lease %d ms)"
                             % (victim.id, 2 * LEASE_MS / 1000 + 1, LEASE_MS))
        t_dead, after = seen_dead
        # Its last heartbeat reached the master h0 ms before `before` was answered, at the
        # earliest t_before - h0, and a member is dead only once silent past its lease: the
        # reply that first says dead cannot come before that plus the lease.
        earliest = t_before - h0 / 1000.0 + LEASE_MS / 1000.0
        self.assertGreaterEqual(t_dead + 0.01, earliest,
                                "declared dead before its lease ran out")
        self.assertLessEqual(t_dead - t_kill, 2 * LEASE_MS / 1000.0,
                             "dead within two leases of the kill")
        self.assertGreater(after.epoch, epoch0, "a dead shard leaves the ring: new epoch")
        others = {s.id: s.state for s in after.shards if s.id != victim.id}
        self.assertEqual(sorted(others.values()), [tl.ALIVE, tl.ALIVE], "the others stay alive")
        tl.log("shard %d dead %.2f s after SIGKILL (lease %.1f s, last heartbeat %d ms before)"
               % (victim.id, t_dead - t_kill, LEASE_MS / 1000, h0))

        js = tl.status_json(addr)
        self.assertEqual(js["epoch"], after.epoch)
        self.assertEqual({s["id"]: s["state"] for s in js["shards"]}[victim.id], "dead")

        smap = master.GetShardMap(master_pb2.GetShardMapRequest(known_epoch=epoch0),
                                  timeout=tl.RPC_TIMEOUT)
        self.assertEqual(smap.epoch, after.epoch)
        self.assertEqual(sorted(s.id for s in smap.shards), sorted(others))
        self.assertTrue(all(s.state == tl.ALIVE for s in smap.shards))
        self.assertEqual(smap.digest, after.ring_digest)
        self.assertEqual(smap.vnodes, after.vnodes)

        # SIGTERM: `up` stops all it started and exits 0. Our own idle connection would hold
        # the master for its grace period (test_health_reflection covers that), so close it.
        self.c.close_channels()
        t0 = time.monotonic()
        up.signal(signal.SIGTERM)
        rc = up.wait(10.0)
        took = time.monotonic() - t0
        self.assertEqual(rc, 0, "tessera up after SIGTERM:\n%s" % up.log_text())
        self.assertLess(took, 4.0, "a master and 2 shards take well under a second to stop")
        left = [pid for pid in kids if tl.pid_alive(pid)]
        self.assertEqual(left, [], "children still running after `tessera up` exited")
        rest = up.p.stdout.read().decode()
        self.assertIn("stopped", rest)
        tl.log("tessera up stopped in %.2f s" % took)
        self.passed = True

    def killed_worker_message(self, rank):
        """`tessera train --workers 2 --no-elastic` on a default `tessera up` (mutual TLS) with
        rank `rank` killed by SIGKILL mid-run: its exit status and stderr (elastic jobs go on
        instead: test_elastic.py)."""
        _, addr = self.c.tessera_up(["--shards", "1"], name="up-%d" % rank)
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", addr,
                              "--workers", "2", "--steps", "100000", "--no-elastic"],
                             "train-%d" % rank)

        pid = tl.worker_of(train, rank)
        time.sleep(0.5)  # into its training loop
        os.kill(pid, signal.SIGKILL)
        rc = train.wait(30.0)
        return rc, train.log_text()

    def test_train_names_a_killed_worker_and_its_log(self):
        rc, text = self.killed_worker_message(1)
        self.assertEqual(rc, 1, text)
        self.assertRegex(text, r"worker 1 was killed by signal 9 \(Killed\); its log:\n"
                               r"  /\S+/worker-1\.log: ")
        self.assertIn("the workers' logs are kept in", text)
        rc, text = self.killed_worker_message(0)
        self.assertEqual(rc, 1, text)
        self.assertIn("worker 0 was killed by signal 9 (Killed) (it wrote to this terminal", text)
        self.passed = True


if __name__ == "__main__":
    tl.main()
