"""test_identity.py - one certificate per member (docs/security.md, "The unit of trust").

Real processes: `tessera certs init` makes a CA and a certificate per member, `tessera certs
issue` adds members, `tessera up --tls --respawn` gives each shard slot its own (shard-0.pem,
shard-1.pem). Checked:
- each shard registered with its own certificate: ClusterStatus and `tessera status` show
  shard/0 and shard/1;
- refused, each while a job trains, and the shards and the epoch left as they were: a
  RegisterShard with shard-0's certificate while shard 0 is alive (PERMISSION_DENIED naming
  the identity); with a role-only shard certificate, the shard.pem of an older `tessera certs
  init` (PERMISSION_DENIED naming --allow-shared-certs); with a member's certificate nobody
  holds, at an address where nothing listens (UNAVAILABLE naming addr), and at shard 0's
  address, where shard 0's certificate answers (PERMISSION_DENIED naming addr), even with
  shard 0's instance copied from ClusterStatus; a worker certificate of one job registering
  for another (PERMISSION_DENIED naming job);
- the job trains through it all on a certificate of its own job (worker/JOB) and ends with
  the params_sha256 of `tessera train --local`;
- a master started with --allow-shared-certs says so and takes a shard showing the role-only
  certificate;
- `--respawn`: shard 0 killed with SIGKILL comes back as a new shard with its own
  certificate (shard/0), the dead one replaced.
The role-only certificate is made with the openssl command from the cluster's CA.
"""
import json
import os
import signal
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import tessera_testlib as tl  # noqa: E402

import grpc  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402

STEPS = 60 if tl.SANITIZED else 150
JOB = "ident-job"


def cli(args, env=None, timeout=60):
    return subprocess.run([os.path.join(tl.BIN, "tessera")] + list(args), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, **(env or {})))


def role_only_shard_cert(certs):
    """legacy-shard.pem/.key: what `tessera certs init` wrote as shard.pem before certificates
    named their member: the shard and server roles, no tessera: URI."""
    ext, csr = os.path.join(certs, "legacy.ext"), os.path.join(certs, "legacy.csr")
    key, pem = os.path.join(certs, "legacy-shard.key"), os.path.join(certs, "legacy-shard.pem")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:shard.tessera,DNS:server.tessera,DNS:localhost,"
                "IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
                "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n")
    for argv in (["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-subj",
                  "/CN=shard.tessera", "-out", csr],
                 ["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(certs, "ca.pem"),
                  "-CAkey", os.path.join(certs, "ca.key"), "-set_serial", "4242", "-days", "30",
                  "-extfile", ext, "-out", pem]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if r.returncode:
            raise AssertionError("%s: %s" % (" ".join(argv[:2]), r.stderr))


class Identity(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("TESSERA_LOG", "warn")
        cls.c = tl.Cluster()
        cls.certs = os.path.join(cls.c.dir, "certs")
        for args in (["init", cls.certs], ["issue", cls.certs, "--member", "shard/9"],
                     ["issue", cls.certs, "--member", "worker/" + JOB]):
            r = cli(["certs"] + args)
            if r.returncode:
                raise AssertionError(r.stdout + r.stderr)
        role_only_shard_cert(cls.certs)
        cls.up, cls.master = cls.c.tessera_up(["--tls", "--tls-dir", cls.certs, "--respawn"])
        cls.env = {"TESSERA_TLS_DIR": cls.certs}

    def channel(self, stem="client", addr=None):
        """A grpcio channel over mutual TLS to the master (or addr), showing stem.pem."""
        ch = tl.tls_channel(addr or self.master, self.certs, stem)
        self.c.channels.append(ch)
        return ch

    def stub(self, stem="client", addr=None):
        return tl.Stub(self.channel(stem, addr), master_pb2, "Master")

    def status(self, addr=None):
        return self.stub(addr=addr).ClusterStatus(master_pb2.ClusterStatusRequest(),
                                                  timeout=tl.RPC_TIMEOUT)

    def shards(self):
        """The shard table and the epoch: what a refused registration must leave alone."""
        cs = self.status()
        return cs.epoch, sorted((s.id, s.addr, s.state, s.instance, s.identity)
                                for s in cs.shards)

    def alive(self, identity):
        return [s for s in self.status().shards if s.identity == identity and
                s.state == tl.ALIVE]

    def test_a_each_shard_registered_with_its_own_certificate(self):
        cs = self.status()
        self.assertEqual(sorted(s.identity for s in cs.shards if s.state == tl.ALIVE),
                         ["shard/0", "shard/1"])
        r = cli(["status", "--master", self.master, "--json"], env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(s["identity"] for s in json.loads(r.stdout)["shards"]),
                         ["shard/0", "shard/1"])
        r = cli(["status", "--master", self.master], env=self.env)
        self.assertIn("MEMBER", r.stdout)
        self.assertIn("shard/1", r.stdout)

    def test_b_refused_registrations_leave_the_cluster_and_its_job_alone(self):
        local = cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                    timeout=300)
        self.assertEqual(local.returncode, 0, local.stderr[-3000:])
        want = json.loads(local.stdout.strip().splitlines()[-1])["params_sha256"]
        job_cert = {"TESSERA_TLS_CERT": os.path.join(self.certs, "worker-%s.pem" % JOB),
                    "TESSERA_TLS_KEY": os.path.join(self.certs, "worker-%s.key" % JOB)}
        train = subprocess.Popen(
            [os.path.join(tl.BIN, "tessera"), "train", "--master", self.master, "--job", JOB,
             "--workers", "2", "--steps", str(STEPS), "--exact", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, **self.env, **job_cert))
        try:
            tl.wait_until(lambda: any(w.identity == "worker/" + JOB and w.state == tl.ALIVE
                                      for w in self.status().workers), 60,
                          "the job's workers registered with their job's certificate")
            before = self.shards()
            shard0 = self.alive("shard/0")[0]
            nowhere = "127.0.0.1:%d" % tl.free_port()

            def register(stem, addr, instance="intruder"):
                return tl.call_error(self.stub(stem).RegisterShard,
                                     master_pb2.RegisterShardRequest(
                                         addr=addr, instance=instance, secret=os.urandom(32)))
            for what, stem, addr, instance, code, needles in (
                    ("shard-0's certificate while shard 0 is alive", "shard-0", nowhere,
                     "intruder", "PERMISSION_DENIED", ("identity", "shard/0")),
                    ("a role-only shard certificate", "legacy-shard", nowhere, "intruder",
                     "PERMISSION_DENIED", ("--allow-shared-certs", "tessera certs issue")),
                    ("nothing listens at the address", "shard-9", nowhere, "intruder",
                     "UNAVAILABLE", ("addr", nowhere)),
                    ("shard 0's certificate answers at its address", "shard-9", shard0.addr,
                     "intruder", "PERMISSION_DENIED", ("addr", shard0.addr)),
                    ("... even to shard 0's own instance", "shard-9", shard0.addr,
                     shard0.instance, "PERMISSION_DENIED", ("addr", "shard/0", "shard/9"))):
                e = register(stem, addr, instance)
                self.assertEqual(e.code().name, code, what + ": " + e.details())
                for n in needles:
                    self.assertIn(n, e.details(), what)
                self.assertEqual(self.shards(), before, what + ": the shards changed")
            e = tl.call_error(self.stub("worker-" + JOB).RegisterWorker,
                              master_pb2.RegisterWorkerRequest(
                                  host="h", instance="other-job-worker", job="other-job",
                                  secret=os.urandom(32)))
            self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
            self.assertIn("job", e.details())
            self.assertIn("worker/" + JOB, e.details())
            self.assertFalse([w for w in self.status().workers
                              if w.instance == "other-job-worker"])
            out, errs = train.communicate(timeout=300)
        finally:
            if train.poll() is None:
                train.kill()
                train.wait()
        self.assertEqual(train.returncode, 0, errs[-3000:])
        self.assertEqual(json.loads(out.strip().splitlines()[-1])["params_sha256"], want)
        self.assertEqual(self.shards(), before)
        tl.log("5 shard registrations and 1 worker's refused; job %s ended as --local (%s...)"
               % (JOB, want[:12]))

    def test_c_allow_shared_certs_takes_a_role_only_certificate(self):
        def tls(stem):
            return ["--tls-cert", os.path.join(self.certs, stem + ".pem"), "--tls-key",
                    os.path.join(self.certs, stem + ".key"), "--tls-ca",
                    os.path.join(self.certs, "ca.pem")]
        m = self.c.start_master(name="shared-master", extra=tls("master") +
                                ["--allow-shared-certs"])
        tl.wait_until(lambda: "--allow-shared-certs" in m.log_text(), 10,
                      "the master to say it takes shared certificates")
        self.assertIn("any holder of it can add shards", m.log_text())
        s = self.c.start_shard(m.addr, name="shared-shard", extra=tls("legacy-shard"))
        got = tl.wait_until(lambda: [x for x in self.status(m.addr).shards
                                     if x.state == tl.ALIVE], 30,
                            "the shard with the role-only certificate registered")
        self.assertEqual([x.identity for x in got], [""])
        s.stop()
        m.stop()

    def test_d_respawn_restarts_a_shard_with_its_own_certificate(self):
        old = self.alive("shard/0")[0]
        pid = tl.Stub(self.channel(addr=old.addr), shard_pb2, "Shard").ShardStatus(
            shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT).pid
        os.kill(pid, signal.SIGKILL)
        new = tl.wait_until(lambda: [s for s in self.alive("shard/0") if s.id != old.id], 60,
                            "shard/0 back under a new id", interval=0.1)[0]
        self.assertEqual(new.restarts, 1)
        self.assertEqual([s.state for s in self.status().shards if s.id == old.id], [tl.DEAD])
        self.assertEqual(len(self.alive("shard/1")), 1)
        self.assertIn("restarting it in", self.up.log_text())
        tl.log("shard %d (shard/0) killed; its slot came back as shard %d with shard-0.pem"
               % (old.id, new.id))


if __name__ == "__main__":
    tl.main()
