#!/usr/bin/python3
"""test_preauth.py - before a data-plane connection is trusted it can cost a shard nothing
(docs/security.md, "Bounded before trust"), against a default `tessera up` (mutual TLS):

- 4 connections each sending a HELLO whose header says 256 MiB at once: each is refused on
  its header and counted ("oversize"), and the shard's resident memory grows by less than
  64 MiB;
- connections that send nothing: past 16 from one host the shard cuts the oldest for each new
  one ("flood"), the job's own connections from the same host included, and closes each that
  stayed silent for the limit ("idle"); a job trains meanwhile and ends on `tessera train
  --local`'s params_sha256.
"""
import json
import os
import socket
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import tessera_testlib as tl  # noqa: E402

STEPS = 100
SILENT = 24           # connections that never speak: over the 16 one host may hold untrusted
UNTRUSTED_S = 10      # DP_UNTRUSTED_MS


def shard_view(c, addr):
    """The only shard's ShardStatus (pid, refusals), through the cluster's TLS channel."""
    ch = c.channel(addr)
    m = tl.Stub(ch, tl.master_pb2, "Master").GetShardMap(tl.master_pb2.GetShardMapRequest(),
                                                         timeout=tl.RPC_TIMEOUT)
    (shard,) = m.shards
    st = tl.Stub(c.channel(shard.addr), tl.shard_pb2, "Shard").ShardStatus(
        tl.shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
    tcp = next(d.address.decode() for d in shard.data_planes if d.transport == "tcp")
    return st, tcp


def refused(st, reason):
    return next((r.count for r in st.refusals if r.reason == reason), 0)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))


class PreAuth(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.up, cls.addr = cls.c.tessera_up(["--shards", "1"])
        assert cls.c.tls_dir, "tessera up without flags must run mutual TLS"

    def test_oversized_hellos_are_refused_before_they_cost(self):
        st, tcp = shard_view(self.c, self.addr)
        before, rss0 = refused(st, "oversize"), rss_kib(st.pid)
        probes = [subprocess.Popen([os.path.join(tl.BIN, "dp_probe"), tcp, "any", "-",
                                    "oversize"], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True) for _ in range(4)]
        outs = [p.communicate(timeout=60)[0] for p in probes]
        for out in outs:
            self.assertRegex(out, r"oversize (refused ECORRUPT: .*over the receive buffer|cut)")
        st, _ = shard_view(self.c, self.addr)
        self.assertEqual(refused(st, "oversize"), before + 4)
        grew = rss_kib(st.pid) - rss0
        tl.log("shard resident memory: %+d KiB after 4 HELLOs of 256 MiB" % grew)
        self.assertLess(grew, 64 << 10)

    def test_silent_connections_are_capped_and_closed(self):
        st, tcp = shard_view(self.c, self.addr)
        flood0, idle0 = refused(st, "flood"), refused(st, "idle")
        host, port = tcp.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), timeout=5)
                  for _ in range(SILENT)]
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
        r = tl.run_cli(["train", "--master", self.addr, "--steps", str(STEPS), "--exact",
                        "--workers", "2", "--job", "beside-the-silent", "--json"], timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"], local)
        st, _ = shard_view(self.c, self.addr)
        self.assertGreaterEqual(refused(st, "flood"), flood0 + SILENT - 16)
        # Every silent one is closed by the shard once its time is up: EOF on our end.
        deadline = time.monotonic() + UNTRUSTED_S + 10
        for s in silent:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                self.assertEqual(s.recv(1), b"")
            except ConnectionResetError:
                pass
            s.close()
        st, _ = shard_view(self.c, self.addr)
        self.assertGreaterEqual(refused(st, "idle"), idle0 + 16)


if __name__ == "__main__":
    tl.main()
