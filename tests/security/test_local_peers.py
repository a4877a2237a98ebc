#!/usr/bin/python3
"""test_local_peers.py - what another process on the shard's host can do to its shared-memory
data plane (docs/security.md, "Who may use shm, proved by the kernel", "Bounded before
trust"), against a default `tessera up` (mutual TLS):

- another user (a throwaway non-root user the test creates and removes; as root only, else
  skipped with the reason) cannot reach the shm socket: its directory is the shard user's
  alone (0700), so connect fails with EACCES, and nothing it could map exists for it;
- 50 connections of the shard's own user to the shm socket that never send their hello do
  not hold a job up: it takes at most 1.5 times a quiet run, and ends on the quiet run's
  params_sha256 (the shard polls the pending hellos together and closes the silent ones).
The parameters a worker maps are sealed against writes by anyone but their shard
(F_SEAL_FUTURE_WRITE): tests/unit/test_transport.c tries every way of writing them, and
tests/integration/test_dataplane.c tries from a real worker's mapping.
"""
import json
import os
import pwd
import socket
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import tessera_testlib as tl  # noqa: E402

STEPS = 150
SILENT = 50


def shm_path(c, addr):
    """The path of the only shard's shm socket (its data-plane address: BOOTID NETNS PATH)."""
    m = tl.Stub(c.channel(addr), tl.master_pb2, "Master").GetShardMap(
        tl.master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
    (shard,) = m.shards
    return next(d.address.decode() for d in shard.data_planes if d.transport == "shm").split()[2]


def train(addr, job):
    """`tessera train` of job over shm; (seconds, params_sha256)."""
    t0 = time.monotonic()
    r = tl.run_cli(["train", "--master", addr, "--steps", str(STEPS), "--exact", "--workers",
                    "2", "--job", job, "--transport", "shm", "--json"], timeout=300)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    return took, json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


class LocalPeers(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.up, cls.addr = cls.c.tessera_up(["--shards", "1"])
        assert cls.c.tls_dir, "tessera up without flags must run mutual TLS"
        cls.path = shm_path(cls.c, cls.addr)

    def test_another_user_cannot_reach_the_socket(self):
        if os.geteuid() != 0:
            self.skipTest("making a throwaway user needs root (useradd)")
        user = "tessera-probe-%d" % os.getpid()
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", user], capture_output=True, text=True)
        if r.returncode:
            self.skipTest("useradd %s: %s" % (user, r.stderr.strip()))
        try:
            pw = pwd.getpwnam(user)
            probe = ("import socket, sys\n"
                     "s = socket.socket(socket.AF_UNIX)\n"
                     "try:\n"
                     "    s.connect(sys.argv[1])\n"
                     "    print('connected')\n"
                     "except OSError as e:\n"
                     "    print('refused', e.errno)\n")
            r = subprocess.run(["/usr/bin/python3", "-c", probe, self.path],
                               capture_output=True, text=True, timeout=30,
                               preexec_fn=lambda: (os.setgid(pw.pw_gid), os.setuid(pw.pw_uid)))
            self.assertEqual(r.stdout.strip(), "refused 13", r.stderr)   # EACCES
        finally:
            subprocess.run(["userdel", user], capture_output=True)

    def test_silent_connections_hold_no_job_up(self):
        quiet, fp = train(self.addr, "quiet")
        silent = []
        for _ in range(SILENT):
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.path)
            silent.append(s)
        try:
            busy, fp2 = train(self.addr, "beside-the-silent")
        finally:
            for s in silent:
                s.close()
        tl.log("quiet run %.1f s; beside %d silent shm connections %.1f s" % (quiet, SILENT,
                                                                              busy))
        self.assertEqual(fp2, fp)
        self.assertLess(busy, 1.5 * quiet + 1.0)


if __name__ == "__main__":
    tl.main()
