"""test_tls.py - mutual TLS, certificate roles and the admin token (docs/security.md).

Real processes: `tessera certs init` makes a CA and the members' certificates; `tessera up
--tls-dir` starts a master and two shards serving mutual TLS (its default) with them (each
shard its own) and an admin token. Checked:
- the certificates: each verifies against the CA and carries its member and its roles
  (tessera certs show);
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
- a member's registration (test_i): another holder of a certificate of the same role cannot
  renew, take over or end it without the member's secret (UNAUTHENTICATED without one,
  PERMISSION_DENIED with another), ClusterStatus unchanged; its own process can, an admin may
  deregister it; the state file keeps the secret's SHA-256, never the secret; and a master
  killed with SIGKILL comes back knowing them (test_j): the shards' own heartbeats taken, an
  impostor's refused; a shard certificate's holder cannot register at an alive shard's
  address (which would mark it dead: the master asks the address which process listens
  there), while a shard restarted on its address, with its certificate, replaces its dead
  predecessor (test_k; test_identity.py has the rest of per-member certificates);
- the data plane (test_g): a hostile client (dp_probe) without the handshake, with a HELLO
  but no proof, replaying a recorded handshake, with a bit flipped after the MAC, or with the
  wrong key, is refused and cut off; the job it aims at keeps its partitions bit for bit, and
  a job training meanwhile ends with the --local fingerprint.

Every process here takes loopback tcp for another host's (TESSERA_TCP_LOOPBACK=remote), so
that the data plane's frames carry their MACs as between hosts (docs/transport.md).
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

os.environ["TESSERA_TCP_LOOPBACK"] = "remote"

import grpc  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402
from tessera.v1 import state_pb2  # noqa: E402

STEPS = 30 if tl.SANITIZED else 200
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


def without_tls():
    """os.environ as a client given no certificates sees it: tessera_up exported this
    cluster's TESSERA_TLS_DIR to everything the test starts."""
    return {k: v for k, v in os.environ.items() if k != "TESSERA_TLS_DIR"}


def cli(args, env=None, timeout=60, tls=True):
    """`tessera ARGS` with env added to os.environ (tls=False: without TESSERA_TLS_DIR)."""
    return subprocess.run([os.path.join(tl.BIN, "tessera")] + list(args), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=dict(os.environ if tls else without_tls(), **(env or {})))


class Tls(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.certs = os.path.join(cls.c.dir, "certs")
        r = cli(["certs", "init", cls.certs])
        if r.returncode:
            raise AssertionError(r.stdout + r.stderr)
        cls.up, cls.master = cls.c.tessera_up(["--tls-dir", cls.certs])
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
        stems = ("master", "shard-0", "shard-1", "verify", "client", "admin")
        r = cli(["certs", "show"] + [os.path.join(self.certs, s + ".pem") for s in stems])
        self.assertEqual(r.returncode, 0, r.stderr)
        for stem, member, roles in (("master", "master", "master,server"),
                                    ("shard-0", "shard/0", "shard,server"),
                                    ("shard-1", "shard/1", "shard,server"),
                                    ("verify", "verify", "verify,server"),
                                    ("client", "worker/\\*", "worker"),
                                    ("admin", "admin", "worker,admin")):
            self.assertRegex(r.stdout, r"(?s)%s\.pem\s+member\s+%s\s.*?roles\s*:?\s*%s"
                             % (stem, member, roles))
        self.assertFalse(os.path.exists(os.path.join(self.certs, "shard.pem")), "no shared one")
        self.assertEqual(os.stat(os.path.join(self.certs, "shard-0.key")).st_mode & 0o777,
                         0o600)
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
                           capture_output=True, timeout=120, env=without_tls())
        self.assertNotEqual(r.returncode, 0, "plaintext against mutual TLS")
        self.assertIn("UNAVAILABLE", r.stderr)

    def test_d_clients_that_cannot_connect(self):
        before = tl.status_fingerprint(self.status())
        req = master_pb2.ClusterStatusRequest()
        for what, kw in (("no client certificate", {"stem": None}),
                         ("a certificate of another CA", {"certs": self.other})):
            e = tl.call_error(self.master_stub(**kw).ClusterStatus, req)
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, what)
        e = tl.call_error(tl.Stub(self.c.channel(self.master, tls=False), master_pb2,
                                  "Master").ClusterStatus, req)
        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, "plaintext")
        r = cli(["status", "--master", self.master, "--timeout-ms", "3000"], tls=False)
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
        the wrong key, a worker sending a shard's copy of table rows: each refused and the
        connection closed; the kept job's partitions are
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
            return tl.partition_digests(stub, "dp-target")
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
                    "wrongkey": ["refused EAUTH", "wrong proof"],
                    "copy": ["refused EAUTH", "not for this connection", "closed"]}
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

    def test_i_a_registration_answers_only_to_its_own_process(self):
        """Another holder of a certificate of the same role cannot renew, take over or end a
        member's registration: the member's secret (docs/security.md, "Member identity") is
        the proof; an admin may still deregister it. The master keeps only its SHA-256."""
        stub = self.master_stub()
        secret, other = os.urandom(32), os.urandom(32)
        e = tl.call_error(stub.RegisterWorker, master_pb2.RegisterWorkerRequest(
            host="h", instance="victim"))
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
        self.assertIn("secret", e.details())
        w = stub.RegisterWorker(master_pb2.RegisterWorkerRequest(
            host="h", instance="victim", secret=secret, lease_ms=60000),
            timeout=tl.RPC_TIMEOUT).worker_id
        before = self.status()
        shard = before.shards[0]
        shard_stub = self.master_stub(stem="shard-0")
        for what, fn, req, code in (
                ("heartbeat, no secret", stub.Heartbeat,
                 master_pb2.HeartbeatRequest(kind=tl.WORKER, id=w), "UNAUTHENTICATED"),
                ("heartbeat, another secret", stub.Heartbeat,
                 master_pb2.HeartbeatRequest(kind=tl.WORKER, id=w, secret=other),
                 "PERMISSION_DENIED"),
                ("deregister, another secret", stub.Deregister,
                 master_pb2.DeregisterRequest(kind=tl.WORKER, id=w, secret=other),
                 "PERMISSION_DENIED"),
                ("take over the instance", stub.RegisterWorker,
                 master_pb2.RegisterWorkerRequest(host="h", instance="victim", secret=other),
                 "PERMISSION_DENIED"),
                ("a worker certificate reporting another worker gone", stub.ReportUnreachable,
                 master_pb2.ReportUnreachableRequest(worker_id=w), "PERMISSION_DENIED"),
                ("a shard certificate renewing a running shard's lease", shard_stub.Heartbeat,
                 master_pb2.HeartbeatRequest(kind=tl.SHARD, id=shard.id), "UNAUTHENTICATED"),
                ("a shard certificate ending a running shard", shard_stub.Deregister,
                 master_pb2.DeregisterRequest(kind=tl.SHARD, id=shard.id, secret=other),
                 "PERMISSION_DENIED")):
            e = tl.call_error(fn, req)
            self.assertEqual(e.code().name, code, what + ": " + e.details())
            self.assertIn("shard" if fn is stub.ReportUnreachable else "secret", e.details(),
                          what)
        after = self.status()
        self.assertEqual(tl.status_fingerprint(after), tl.status_fingerprint(before))
        self.assertEqual(after.epoch, before.epoch)
        self.assertEqual([x.state for x in after.workers if x.id == w], [tl.ALIVE])
        # its own process renews it; the state file holds the secret's hash, not the secret
        stub.Heartbeat(master_pb2.HeartbeatRequest(kind=tl.WORKER, id=w, secret=secret),
                       timeout=tl.RPC_TIMEOUT)
        path = os.path.join(self.c.dir, "up", "master-state", "state")

        def saved():
            st = state_pb2.MasterState()
            st.ParseFromString(read(path))
            return {(x.kind, x.id): x.sha256 for x in st.secrets}
        tl.wait_until(lambda: (tl.WORKER, w) in saved(), 30, "the state file to keep worker %d"
                      % w)
        kept = saved()
        self.assertEqual(kept[(tl.WORKER, w)], hashlib.sha256(secret).digest())
        self.assertTrue(all((tl.SHARD, s.id) in kept for s in after.shards), kept.keys())
        self.assertNotIn(secret, read(path))
        # an admin deregisters it without the secret
        token = read(os.path.join(self.certs, "admin.token")).decode().strip()
        stub.Deregister(master_pb2.DeregisterRequest(kind=tl.WORKER, id=w, reason="test"),
                        timeout=tl.RPC_TIMEOUT, metadata=[("authorization", "Bearer " + token)])
        self.assertEqual([x.state for x in self.status().workers if x.id == w], [tl.LEFT])

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

    def test_j_a_restarted_master_still_knows_whose_registration_is_whose(self):
        """The master killed with SIGKILL comes back (tessera up) with the secrets' hashes of
        its state file: the shards' own heartbeats are taken, an impostor's still refused."""
        def status():
            r = cli(["status", "--master", self.master, "--json"], env=self.env)
            return json.loads(r.stdout) if r.returncode == 0 else None
        first = status()["master_pid"]
        os.kill(first, signal.SIGKILL)
        back = tl.wait_until(lambda: (lambda d: d if d and d["master_pid"] != first and
                                      d["restored"] else None)(status()), 60,
                             "the master back with its state", interval=0.2)
        self.assertTrue(back["restored"])
        shard = self.status().shards[0]
        e = tl.call_error(self.master_stub(stem="shard-0").Heartbeat,
                          master_pb2.HeartbeatRequest(kind=tl.SHARD, id=shard.id))
        self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED, e.details())
        self.assertIn("secret", e.details())
        # past the restart's grace and a lease: the shards' own heartbeats were taken
        lease_s = max(s.lease_ms for s in self.status().shards) / 1000.0
        time.sleep(lease_s * 2)
        after = self.status()
        self.assertEqual([s.state for s in after.shards], [tl.ALIVE, tl.ALIVE])
        self.assertTrue(all(s.last_heartbeat_ms_ago < s.lease_ms for s in after.shards),
                        [(s.id, s.last_heartbeat_ms_ago) for s in after.shards])

    def test_k_a_shard_address_is_taken_only_by_the_process_listening_there(self):
        """A registration at an alive shard's address marks that shard dead. A shard
        certificate's holder cannot use that to end a running shard: the master asks the
        address which process listens there. A shard restarted on its address, with its own
        certificate, still replaces its dead predecessor at once."""
        addr = "127.0.0.1:%d" % tl.free_port()
        for member in ("shard/k", "shard/impostor"):
            r = cli(["certs", "issue", self.certs, "--member", member])
            self.assertEqual(r.returncode, 0, r.stderr)
        tls = []
        for flag, f in (("--tls-cert", "shard-k.pem"), ("--tls-key", "shard-k.key"),
                        ("--tls-ca", "ca.pem")):
            tls += [flag, os.path.join(self.certs, f)]
        argv = [os.path.join(tl.BIN, "tessera-shard"), "--master", self.master, "--listen",
                addr] + tls

        def at_addr(state=tl.ALIVE):
            return [s.id for s in self.status().shards if s.addr == addr and s.state == state]
        first = self.c.spawn(argv, "shard-k1")
        old = tl.wait_until(at_addr, 30, "the shard at %s registered" % addr)[0]
        before = self.status()
        e = tl.call_error(self.master_stub(stem="shard-impostor").RegisterShard,
                          master_pb2.RegisterShardRequest(addr=addr, instance="impostor",
                                                          secret=os.urandom(32)))
        self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
        self.assertIn("addr", e.details())
        after = self.status()
        self.assertEqual(after.epoch, before.epoch)
        self.assertEqual(tl.status_fingerprint(after), tl.status_fingerprint(before))
        self.assertEqual(at_addr(), [old])
        first.signal(signal.SIGKILL)
        first.wait(10)
        second = self.c.spawn(argv, "shard-k2")
        new = tl.wait_until(lambda: [i for i in at_addr() if i != old], 30,
                            "the restarted shard registered at %s" % addr)[0]
        self.assertEqual(at_addr(tl.DEAD), [old], "replaced at once, not at its lease's end")
        second.stop()
        tl.log("shard %d at %s: an impostor refused; restarted as shard %d" % (old, addr, new))


if __name__ == "__main__":
    tl.main()
