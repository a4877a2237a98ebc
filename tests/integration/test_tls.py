"""test_tls.py - mutual TLS, certificate roles and the admin token (docs/security.md).

Real processes: `tessera certs init` makes a CA and the role certificates; `tessera up --tls`
starts a master and two shards serving mutual TLS with them and an admin token. Checked:
- the certificates: each verifies against the CA and carries its roles (tessera certs show);
- `tessera train --exact` through the TLS cluster (TESSERA_TLS_DIR) ends with the
  params_sha256 of `tessera train --local`;
- an independent client, Debian's python3-grpcio with ssl_channel_credentials and the client
  certificate, calls ClusterStatus; the Python binding (its C SDK reading TESSERA_TLS_DIR)
  trains a job of its own, and fails without it;
- refused, each with the code a client can act on: a client with no certificate, with one of
  another CA, or in plaintext (UNAVAILABLE: the handshake fails); a worker's certificate
  calling RegisterShard, a Heartbeat or a Deregister for a shard (PERMISSION_DENIED naming
  the role); CollectGarbage without the admin token, or with a wrong one
  (UNAUTHENTICATED); ClusterStatus shows the cluster unchanged after every refusal;
- with the admin token or the admin certificate, CollectGarbage gets past the check;
- tessera-verify with its own certificate registers as the verify service and answers over
  mutual TLS; a worker's certificate registering as "verify" is refused;
- `tessera status` without TESSERA_TLS_DIR says what to set;
- the data plane (test_g): a hostile client (dp_probe) without the handshake, with a HELLO
  but no proof, replaying a recorded handshake, with a bit flipped after the MAC, or with the
  wrong key, is refused and cut off; the job it aims at keeps its partitions bit for bit, and
  a job training meanwhile ends with the --local fingerprint.
"""
import json
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

import grpc  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402
from tessera.v1 import state_pb2  # noqa: E402

STEPS = 60 if tl.SANITIZED else 200
# The Python binding (build/python): a job of its own through the TLS cluster; the channels
# of the C SDK under it read TESSERA_TLS_DIR.
PY_STEPS = """
import sys
import numpy as np
import tessera
c = tessera.Client(master=sys.argv[1], job="tls-py", optimizer="sgd:lr=0.5", batch=1)
c.register("w", 1024)
p = np.zeros(1024, np.float32)
for s in range(10):
    c.step(s, [np.ones(1024, np.float32)], [p])
c.close()
print("max", float(np.abs(p + 5.0).max()))
"""


def read(path):
    with open(path, "rb") as f:
        return f.read()


def cli(args, env=None, timeout=60):
    return subprocess.run([os.path.join(tl.BIN, "tessera")] + list(args), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, **(env or {})))


class Tls(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.certs = os.path.join(cls.c.dir, "certs")
        r = cli(["certs", "init", cls.certs])
        if r.returncode:
            raise AssertionError(r.stdout + r.stderr)
        cls.up, cls.master = cls.c.tessera_up(["--tls", "--tls-dir", cls.certs])
        cls.env = {"TESSERA_TLS_DIR": cls.certs}
        other = os.path.join(cls.c.dir, "other")
        r = cli(["certs", "init", other])
        if r.returncode:
            raise AssertionError(r.stdout + r.stderr)
        cls.other = other

    def channel(self, stem="client", ca=None, certs=None, addr=None):
        """A grpcio channel to the master (or addr) over TLS, showing certs/stem.pem (stem
        None: no client certificate), checking the server against ca (default ours)."""
        certs = certs or self.certs
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(ca or os.path.join(self.certs, "ca.pem")),
            private_key=read(os.path.join(certs, stem + ".key")) if stem else None,
            certificate_chain=read(os.path.join(certs, stem + ".pem")) if stem else None)
        ch = grpc.secure_channel(addr or self.master, creds,
                                 options=[("grpc.ssl_target_name_override", "server.tessera")])
        self.c.channels.append(ch)
        return ch

    def master_stub(self, **kw):
        return tl.Stub(self.channel(**kw), master_pb2, "Master")

    def status(self):
        return self.master_stub().ClusterStatus(master_pb2.ClusterStatusRequest(),
                                                timeout=tl.RPC_TIMEOUT)

    def test_a_certificates_and_their_roles(self):
        r = cli(["certs", "show"] + [os.path.join(self.certs, s + ".pem") for s in
                                     ("master", "shard", "verify", "client", "admin")])
        self.assertEqual(r.returncode, 0, r.stderr)
        for stem, roles in (("master", "master,server"), ("shard", "shard,server"),
                            ("verify", "verify,server"), ("client", "worker"),
                            ("admin", "worker,admin")):
            self.assertRegex(r.stdout, r"(?s)%s\.pem.*?roles\s*:?\s*%s" % (stem, roles))
        self.assertEqual(os.stat(os.path.join(self.certs, "shard.key")).st_mode & 0o777, 0o600)
        r = cli(["certs", "init", self.certs])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--force", r.stderr)

    @classmethod
    def local_sha(cls):
        if not hasattr(cls, "_local"):
            r = cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                    timeout=300)
            if r.returncode:
                raise AssertionError(r.stderr[-3000:])
            cls._local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
        return cls._local

    def test_b_a_tls_cluster_trains_to_the_local_fingerprint(self):
        for transport in ("shm", "tcp"):   # tcp: frames MAC'd; shm: the handshake alone
            r = cli(["train", "--master", self.master, "--workers", "2", "--steps", str(STEPS),
                     "--exact", "--json", "--transport", transport], env=self.env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            got = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
            self.assertEqual(got, self.local_sha(), transport)
        tl.log("TLS cluster: %d exact steps over shm and tcp, params_sha256 %s... as --local"
               % (STEPS, got[:12]))

    def test_c_python_grpcio_over_mutual_tls(self):
        cs = self.status()
        self.assertEqual([s.state for s in cs.shards], [tl.ALIVE, tl.ALIVE])

    def test_c_the_python_binding_over_mutual_tls(self):
        r = subprocess.run(["/usr/bin/python3", "-c", PY_STEPS, self.master], text=True,
                           capture_output=True, timeout=120, env=dict(os.environ, **self.env))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(r.stdout.split(), ["max", "0.0"])
        r = subprocess.run(["/usr/bin/python3", "-c", PY_STEPS, self.master], text=True,
                           capture_output=True, timeout=120)
        self.assertNotEqual(r.returncode, 0, "plaintext against mutual TLS")
        self.assertIn("UNAVAILABLE", r.stderr)

    def test_d_clients_that_cannot_connect(self):
        before = tl.status_fingerprint(self.status())
        req = master_pb2.ClusterStatusRequest()
        for what, kw in (("no client certificate", {"stem": None}),
                         ("a certificate of another CA", {"certs": self.other})):
            e = tl.call_error(self.master_stub(**kw).ClusterStatus, req)
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, what)
        e = tl.call_error(tl.Stub(self.c.channel(self.master), master_pb2, "Master")
                          .ClusterStatus, req)
        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, "plaintext")
        r = cli(["status", "--master", self.master, "--timeout-ms", "3000"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TESSERA_TLS_DIR", r.stderr)
        self.assertEqual(tl.status_fingerprint(self.status()), before)

    def test_e_a_worker_certificate_cannot_act_as_a_shard(self):
        stub = self.master_stub()
        before = self.status()
        shard = before.shards[0]
        e = tl.call_error(stub.RegisterShard, master_pb2.RegisterShardRequest(
            addr="127.0.0.1:1", instance="intruder"))
        self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
        self.assertIn("shard", e.details())
        for fn, req in ((stub.Heartbeat, master_pb2.HeartbeatRequest(kind=tl.SHARD,
                                                                     id=shard.id)),
                        (stub.Deregister, master_pb2.DeregisterRequest(kind=tl.SHARD,
                                                                       id=shard.id))):
            e = tl.call_error(fn, req)
            self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
        after = self.status()
        self.assertEqual(tl.status_fingerprint(after), tl.status_fingerprint(before))
        self.assertEqual(after.epoch, before.epoch)
        self.assertEqual([s.state for s in after.shards], [tl.ALIVE, tl.ALIVE])

    def test_f_admin_calls_need_the_token_or_an_admin_certificate(self):
        req = master_pb2.CollectGarbageRequest()
        e = tl.call_error(self.master_stub().CollectGarbage, req)
        self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED, e.details())
        self.assertIn("admin token", e.details())
        fn = self.master_stub().CollectGarbage
        e = tl.call_error(lambda r, timeout: fn(r, timeout=timeout, metadata=[
            ("authorization", "Bearer " + "0" * 64)]), req)
        self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED, e.details())
        self.assertIn("not this service's admin token", e.details())
        token = read(os.path.join(self.certs, "admin.token")).decode().strip()
        for how, call in (
                ("token", lambda r, timeout: fn(r, timeout=timeout, metadata=[
                    ("authorization", "Bearer " + token)])),
                ("admin certificate", self.master_stub(stem="admin").CollectGarbage)):
            # past the check: this master has no store, which it says
            e = tl.call_error(call, req)
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION,
                             how + ": " + e.details())
        r = cli(["snapshot", "gc", "--master", self.master], env=dict(
            self.env, TESSERA_TOKEN_FILE=os.path.join(self.certs, "admin.token")))
        self.assertNotIn("UNAUTHENTICATED", r.stderr)

    def test_g_the_data_plane_takes_only_the_handshake(self):
        """dp_probe speaks the frame format to a shard's tcp data plane: no handshake, a
        HELLO without one, a recorded handshake replayed, a frame whose MAC does not match,
        the wrong key: each refused and the connection closed; the kept job's partitions are
        bit for bit as before, and a job training meanwhile ends with the --local
        fingerprint."""
        r = cli(["train", "--master", self.master, "--workers", "1", "--steps", "20", "--exact",
                 "--keep", "--job", "dp-target", "--transport", "tcp"], env=self.env,
                timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        state = state_pb2.MasterState()
        state.ParseFromString(read(os.path.join(self.c.dir, "up", "master-state", "state")))
        self.assertEqual(len(state.data_key), 32)
        self.assertEqual(os.stat(os.path.join(self.c.dir, "up", "master-state", "state"))
                         .st_mode & 0o777, 0o600)
        smap = self.master_stub().GetShardMap(master_pb2.GetShardMapRequest(),
                                              timeout=tl.RPC_TIMEOUT)
        shard = smap.shards[0]
        tcp = [d.address.decode() for d in shard.data_planes if d.transport == "tcp"][0]
        stub = tl.Stub(self.channel(addr=shard.addr), shard_pb2, "Shard")

        def digests():
            return sorted((d.tensor_id, d.partition, d.version, d.sha256) for d in
                          stub.PartitionDigests(shard_pb2.PartitionDigestsRequest(
                              job="dp-target"), timeout=tl.RPC_TIMEOUT).partitions)
        before = digests()
        self.assertTrue(before)
        refused0 = stub.ShardStatus(shard_pb2.ShardStatusRequest(),
                                    timeout=tl.RPC_TIMEOUT).frames_refused
        bystander = subprocess.Popen(
            [os.path.join(tl.BIN, "tessera"), "train", "--master", self.master, "--workers",
             "2", "--steps", str(STEPS), "--exact", "--json", "--transport", "tcp"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, **self.env))
        try:
            want = {"good": ["good ok"],
                    "nohandshake": ["refused EAUTH", "before the data-plane handshake",
                                    "closed"],
                    "noauth": ["refused EAUTH", "needs the handshake", "closed"],
                    "replay": ["nonce is new", "refused EAUTH", "proof", "closed"],
                    "badmac": ["refused ECORRUPT", "MAC mismatch", "closed"],
                    "wrongkey": ["refused EAUTH", "wrong proof"]}
            for mode, needles in want.items():
                p = subprocess.run([os.path.join(tl.BIN, "dp_probe"), tcp, "dp-target",
                                    state.data_key.hex(), mode], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
                for n in needles:
                    self.assertIn(n, p.stdout, mode)
            out, errs = bystander.communicate(timeout=300)
        finally:
            if bystander.poll() is None:
                bystander.kill()
                bystander.wait()
        self.assertEqual(bystander.returncode, 0, errs[-3000:])
        self.assertEqual(json.loads(out.strip().splitlines()[-1])["params_sha256"],
                         self.local_sha())
        self.assertEqual(digests(), before, "the kept job's partitions changed")
        refused = stub.ShardStatus(shard_pb2.ShardStatusRequest(),
                                   timeout=tl.RPC_TIMEOUT).frames_refused
        self.assertGreater(refused, refused0, "the frame with the bad MAC is counted")

    def test_h_the_verify_service_registers_with_its_own_certificate(self):
        tls = []
        for flag, f in (("--tls-cert", "verify.pem"), ("--tls-key", "verify.key"),
                        ("--tls-ca", "ca.pem")):
            tls += [flag, os.path.join(self.certs, f)]
        svc = self.c.start_server("tessera-verify", "verify", [
            "--master", self.master, "--store", os.path.join(self.c.dir, "vstore")] + tls)
        tl.wait_until(lambda: any(w.role == "verify" and w.state == tl.ALIVE
                                  for w in self.status().workers), 30,
                      "tessera-verify registered as role verify")
        health = self.channel(addr=svc.addr).unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=tl.health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=tl.health_pb2.HealthCheckResponse.FromString)
        self.assertEqual(health(tl.health_pb2.HealthCheckRequest(), timeout=tl.RPC_TIMEOUT)
                         .status, tl.health_pb2.HealthCheckResponse.SERVING)
        # a worker's certificate may not pose as the verify service
        e = tl.call_error(self.master_stub().RegisterWorker, master_pb2.RegisterWorkerRequest(
            host="h", instance="fake-verify", role="verify", addr="127.0.0.1:1"))
        self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())


if __name__ == "__main__":
    tl.main()
