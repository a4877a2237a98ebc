#!/usr/bin/python3
"""test_rdma_train.py - training over the rdma transport on a real verbs device: Soft-RoCE in
the guest of tests/rdma/guest.sh (make test-rdma runs this there; elsewhere it skips, saying
why).

The services run as they do between hosts: master and shards listen on rxe0's address
($TESSERA_RDMA_ADDR, 192.168.77.1 in the guest), with mutual TLS and the data plane's
handshake (the default), and the workers are started with --transport rdma, so a worker that
cannot use rdma fails instead of quietly taking shm or tcp; rank 0 says which transport it
trained over, and the shards log each connection's (TESSERA_LOG=debug for their data plane),
which the test counts. Every run is exact, so its params_sha256 must equal `tessera train
--local`'s:

- Exact: 2 workers over rdma, 2 shards.
- ShardKilled: 2 workers over rdma, 3 shards with --replicas 2, one shard killed with SIGKILL
  mid-run: the workers fail over to the copies over rdma and end on the same bits.
- Mixed: one worker over rdma and one over tcp in the same job.
- WrongKey: tests/integration/dp_probe on the rdma data plane: without the handshake, with the
  wrong key, with a frame whose MAC does not match: refused and closed; the kept job's
  partitions unchanged.
"""
import json
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402
from tessera.v1 import state_pb2  # noqa: E402

ADDR = os.environ.get("TESSERA_RDMA_ADDR")
STEPS = 20
# Members' leases: emulation stalls a process for over a second at times (the master saw all
# members silent for 1.1 s at once), and a shard declared dead by a stall is a fault of its own
# that these tests do not ask for; the killed shard is found at once all the same (its peers
# are refused).
LEASE_MS = "5000"
WORKER = ["--exact", "--steps", str(STEPS), "--partition-kb", "64"]
_local = {}


def local_fingerprint():
    """`tessera train --local`'s params_sha256, once: about 200 s under emulation, so with a
    longer bound than tl.local_fingerprint's."""
    if "fp" not in _local:
        r = tl.run_cli(["train", "--local", "--exact", "--steps", str(STEPS), "--json",
                        "--partition-kb", "64"], timeout=1200)
        if r.returncode != 0:
            raise AssertionError("tessera train --local exited %d: %s" % (r.returncode,
                                                                          r.stderr))
        _local["fp"] = json.loads(r.stdout)["params_sha256"]
    return _local["fp"]


def done_line(text):
    """The worker's `done: ... over TRANSPORT` line, and its params_sha256."""
    done = [ln for ln in text.splitlines() if ln.startswith("done:")]
    fp = [ln.split()[1] for ln in text.splitlines() if ln.startswith("params_sha256 ")]
    return (done[-1] if done else ""), (fp[-1] if fp else "")


@unittest.skipUnless(ADDR, "rdma: TESSERA_RDMA_ADDR is not set: run it on a verbs device, "
                           "e.g. in tests/rdma/guest.sh (make test-rdma)")
class Rdma(unittest.TestCase):
    def setUp(self):
        self.c = tl.Cluster(prefix="tessera-rdma.")
        self.c.make_certs(shards=3, hosts=(ADDR,))

    def tearDown(self):
        # Every process's log when the test failed, wherever it failed (the guest's temp dir
        # is gone when it exits).
        if not self._outcome.success:
            self.c.dump_logs()
        self.c.stop()

    def cluster(self, shards, replicas):
        """Master and shards on ADDR under mutual TLS; returns the master's address."""
        self.state_dir = os.path.join(self.c.dir, "master-state")
        m = self.c.start_server("tessera-master", "master",
                                ["--listen", ADDR + ":0", "--lease-ms", LEASE_MS,
                                 "--state-dir", self.state_dir,
                                 "--replicas", str(replicas)] + self.c.tls_args("master"))
        m.addr = self.master = "%s:%s" % (ADDR, m.addr.rsplit(":", 1)[1])
        with tl.environ(TESSERA_LOG="debug", TESSERA_LOG_SUBSYS="dataplane"):
            self.shards = [self.c.start_server("tessera-shard", "shard-%d" % i,
                                               ["--master", m.addr, "--listen", ADDR + ":0",
                                                "--lease-ms", LEASE_MS] +
                                               self.c.tls_args("shard-%d" % i))
                           for i in range(shards)]
        tl.wait_until(lambda: sum(s["state"] == "alive"
                                  for s in tl.status_json(m.addr)["shards"]) == shards,
                      60, "%d shards alive" % shards)
        return m.addr

    def workers(self, master, job, transports, extra=()):
        return [self.c.spawn([os.path.join(tl.BIN, "tessera-worker"), "--master", master,
                              "--job", job, "--rank", str(r), "--workers", str(len(transports)),
                              "--transport", t] + WORKER + list(extra),
                             "worker-%s-%d" % (job, r), stdout_pipe=True)
                for r, t in enumerate(transports)]

    def finish(self, ws, transports):
        """Waits for the workers; each must have trained over its transport, and rank 0's
        params_sha256 must be --local's."""
        texts = []
        for w in ws:
            out, _ = w.p.communicate(timeout=1200)
            texts.append(out.decode(errors="replace"))
            self.assertEqual(w.p.returncode, 0, "worker exited %d:\n%s\n%s" %
                             (w.p.returncode, texts[-1], w.log_text()))
        done, fp = done_line(texts[0])
        self.assertTrue(done.endswith(" over " + transports[0]), "rank 0 said %r" % texts[0])
        self.assertEqual(fp, local_fingerprint())
        # The shards took data-plane connections over each transport a worker asked for, and
        # over no other (the chains between shards would, but they run on one host: shm):
        # in their logs and in `tessera status --json`.
        logs = "".join(s.log_text() for s in self.shards)
        conns = [s.get("data_conns", {}) for s in tl.status_json(self.master)["shards"]
                 if s["state"] == "alive"]
        for t in ("rdma", "tcp"):
            n = len(re.findall(r"dataplane: %s connection from %s:" % (t, t), logs))
            accepted = sum(c.get(t, {}).get("accepted", 0) for c in conns)
            if t in transports:
                self.assertGreater(n, 0, "no %s connection in the shards' logs" % t)
                self.assertGreater(accepted, 0, "tessera status: %s" % conns)
            else:
                self.assertEqual(n, 0, "%d %s connections in the shards' logs" % (n, t))
                self.assertEqual(accepted, 0, "tessera status: %s" % conns)

    def test_exact(self):
        master = self.cluster(shards=2, replicas=1)
        self.finish(self.workers(master, "exact", ["rdma", "rdma"]), ["rdma", "rdma"])

    def test_shard_killed(self):
        master = self.cluster(shards=3, replicas=2)
        ws = self.workers(master, "killed", ["rdma", "rdma"])
        victim = tl.shard_once_past(master, STEPS // 3, timeout=300, procs=ws)
        os.kill(victim["pid"], signal.SIGKILL)
        tl.log("killed shard %s (pid %d) past step %d" % (victim.get("id"), victim["pid"],
                                                          STEPS // 3))
        self.finish(ws, ["rdma", "rdma"])

    def test_wrong_key(self):
        master = self.cluster(shards=2, replicas=1)
        self.finish(self.workers(master, "dp-target", ["rdma"], ["--keep"]), ["rdma"])
        state = state_pb2.MasterState()
        with open(os.path.join(self.state_dir, "state"), "rb") as f:
            state.ParseFromString(f.read())
        smap = tl.Stub(self.c.channel(master), master_pb2, "Master").GetShardMap(
            master_pb2.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
        shard = smap.shards[0]
        rdma = [d.address.decode() for d in shard.data_planes if d.transport == "rdma"][0]
        stub = tl.Stub(self.c.channel(shard.addr), shard_pb2, "Shard")

        before = tl.partition_digests(stub, "dp-target")
        self.assertTrue(before)
        want = {"good": ["good ok"],
                "nohandshake": ["refused EAUTH", "before the data-plane handshake", "closed"],
                "wrongkey": ["refused EAUTH", "wrong proof"],
                "badmac": ["refused ECORRUPT", "MAC mismatch", "closed"]}
        for mode, needles in want.items():
            p = subprocess.run([os.path.join(tl.BIN, "dp_probe"), "rdma:" + rdma, "dp-target",
                                state.data_key.hex(), mode], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            for n in needles:
                self.assertIn(n, p.stdout, mode)
        self.assertEqual(tl.partition_digests(stub, "dp-target"), before,
                         "the kept job's partitions changed")

    def test_mixed(self):
        master = self.cluster(shards=2, replicas=1)
        self.finish(self.workers(master, "mixed", ["rdma", "tcp"]), ["rdma", "tcp"])


if __name__ == "__main__":
    tl.main()
