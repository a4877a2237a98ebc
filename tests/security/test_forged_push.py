#!/usr/bin/python3
"""test_forged_push.py - a forged push never ends a job "successfully" with wrong state
(docs/security.md, "Pushes bound to their sender").

Against a default `tessera up` (mutual TLS): an outsider that pushes rank 0's step on the
data plane, naming rank 0's worker, is refused at the handshake and counted ("handshake"),
and the job ends on `tessera train --local`'s params_sha256.

Against `tessera up --insecure` (no handshake, by the operator's word), with two ranks driven
through the Python binding so that the order of the pushes is the test's:
- the forgery first: the shard counts it for rank 0's step, and rank 0's real push is then
  refused (PERMISSION_DENIED, "differs from the one counted"), counted as a conflict: the job
  fails loudly, never goes on silently with the forged gradient;
- the forgery after the step was applied (rank 0's step again, other bytes): refused, counted
  as a conflict, and the parameters are bit for bit those of the same job without it;
- the forgery naming another worker than rank 0's owner: refused as an identity, counted.
dp_probe (tests/integration) is the forger.
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import tessera_testlib as tl  # noqa: E402

STEPS = 60
N = 1000


def tessera_module():
    """The Python binding, from the build (docs/python.md)."""
    sys.path.insert(0, os.path.join(os.path.dirname(tl.BIN), "python"))
    import tessera  # noqa: E402
    return tessera


def tcp_endpoint(addr):
    """The tcp data-plane address of the only shard of the cluster whose master is addr."""
    with tl.grpc.insecure_channel(addr) if not os.environ.get("TESSERA_TLS_DIR") else \
            tl.tls_channel(addr, os.environ["TESSERA_TLS_DIR"]) as ch:
        m = tl.Stub(ch, tl.master_pb2, "Master").GetShardMap(tl.master_pb2.GetShardMapRequest(),
                                                             timeout=tl.RPC_TIMEOUT)
    (shard,) = m.shards
    return next(d.address.decode() for d in shard.data_planes if d.transport == "tcp")


def forge(addr, job, member, rank, step, encoding=5, tensors=1):
    """dp_probe's forgery: rank's step pushed as worker member, no handshake. Its lines."""
    r = subprocess.run([os.path.join(tl.BIN, "dp_probe"), tcp_endpoint(addr), job, "-",
                        "forge", str(member), str(rank), str(step), str(encoding),
                        str(tensors)], capture_output=True, text=True, timeout=60)
    if r.returncode:
        raise AssertionError("dp_probe failed: %s%s" % (r.stdout, r.stderr))
    return r.stdout.strip().splitlines()


def refusals(addr, reason):
    """The only shard's count of refusals for reason (ShardStatus.refusals)."""
    st = tl.status_json(addr)
    (shard,) = st["shards"]
    return shard.get("refusals", {}).get(reason, 0)


class Insecure(tl.ClusterCase, unittest.TestCase):
    """A plaintext cluster of one shard (one head per partition, no chain)."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.up, cls.addr = cls.c.tessera_up(["--shards", "1", "--insecure"])
        cls.tessera = tessera_module()

    def clients(self, job):
        opts = dict(master=self.addr, job=job, workers=2, exact=True, optimizer="sgd:lr=0.5",
                    batch=4, transport="tcp")
        c0 = self.tessera.Client(rank=0, **opts)
        c1 = self.tessera.Client(rank=1, **opts)
        ids = [c.register("w", (N,), init="normal:0.1", seed=3) for c in (c0, c1)]
        return (c0, c1), ids

    def grads(self):
        g = [np.full(N, (r + 1) << 24, np.int64) for r in range(2)]
        return g

    def test_forgery_first_fails_the_job_loudly(self):
        (c0, c1), (w0, w1) = self.clients("forged-first")
        g0, g1 = self.grads()
        before = refusals(self.addr, "conflict")
        self.assertEqual(forge(self.addr, "forged-first", c0.worker_id, 0, 0),
                         ["tensor 0 counted"])
        c1.push(w1, 0, g1)
        with self.assertRaises(self.tessera.Error) as e:
            c0.push(w0, 0, g0)
        self.assertIn("differs from the one counted", e.exception.message)
        self.assertEqual(refusals(self.addr, "conflict"), before + 1)
        for c in (c0, c1):
            c.set_result(True, "a forged push")
            c.close()

    def test_forgery_after_is_refused(self):
        ref = {}
        for job, attack in (("clean", False), ("forged-after", True)):
            (c0, c1), (w0, w1) = self.clients(job)
            g0, g1 = self.grads()
            c0.push(w0, 0, g0)
            c1.push(w1, 0, g1)
            out = np.empty(N, np.float32)
            c0.pull(w0, 1, out)
            if attack:
                before = refusals(self.addr, "conflict")
                (line,) = forge(self.addr, job, c0.worker_id, 0, 0)
                self.assertRegex(line, r"^tensor 0 refused EPERM: .*differs from the one")
                self.assertEqual(refusals(self.addr, "conflict"), before + 1)
                before = refusals(self.addr, "identity")
                (line,) = forge(self.addr, job, c0.worker_id + 1000, 0, 1)
                self.assertRegex(line, r"^tensor 0 refused EPERM: .*this connection is worker")
                self.assertEqual(refusals(self.addr, "identity"), before + 1)
            c0.push(w0, 1, g0)   # training goes on: step 1, from the same values
            c1.push(w1, 1, g1)
            c0.pull(w0, 2, out)
            ref[job] = out.copy()
            for c in (c0, c1):
                c.close()
        self.assertEqual(ref["clean"].tobytes(), ref["forged-after"].tobytes())


class Default(tl.ClusterCase, unittest.TestCase):
    """`tessera up` as a user gets it: mutual TLS."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.up, cls.addr = cls.c.tessera_up(["--shards", "1"])
        assert cls.c.tls_dir, "tessera up without flags must run mutual TLS"
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        assert r.returncode == 0, r.stderr
        cls.local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]

    def test_outsider_is_refused_and_the_job_ends_right(self):
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master", self.addr,
                              "--steps", str(STEPS), "--exact", "--workers", "2", "--job",
                              "victim", "--json"], "train-victim", stdout_pipe=True)
        job = tl.wait_until(lambda: next((j for j in tl.status_json(self.addr)["jobs"]
                                          if j["id"] == "victim" and
                                          all(j.get("slot_owners") or [0])), None), 60,
                            "the job to start")
        owner = job["slot_owners"][0]
        before = refusals(self.addr, "handshake")
        (line,) = forge(self.addr, "victim", owner, 0, 0)
        self.assertRegex(line, r"^forge hello refused: .*handshake")
        rc = train.wait(300)
        out = train.p.stdout.read().decode()
        self.assertEqual(rc, 0, out + train.log_text())
        self.assertEqual(json.loads(out.strip().splitlines()[-1])["params_sha256"], self.local)
        self.assertEqual(refusals(self.addr, "handshake"), before + 1)


if __name__ == "__main__":
    tl.main()
