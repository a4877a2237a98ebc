#!/usr/bin/python3
"""test_hosts.py - Tessera across hosts: every process on an emulated host of its own.

Real processes on emulated hosts (bench/emuhosts.py): one network namespace per host on a
bridge, with addresses 10.78.0.1..6, no link limits. The master listens on its host's address;
the shards and the verify service listen on every address (0.0.0.0) and register the one other
hosts reach (--advertise); the two workers run one per host. Every service runs mutual TLS,
the default, with its own certificate of `tessera certs init` (one directory on the shared
file system); the workers and the CLI read the client's from $TESSERA_TLS_DIR. Checked:
- the training ends with the params_sha256 of `tessera train --local` (same seed and steps),
  and its data plane is tcp: shared memory is refused between hosts (another network
  namespace), so no worker fell back to something that would not work between real hosts;
  its tensors are in the SDK's partitions for shards on other hosts, not one host's 4 MiB;
- ClusterStatus (asked from the worker's host) lists each shard and the verify service at its
  advertised address, never 127.0.0.1 or 0.0.0.0, and the verify service answers health
  checks there from another host (python3-grpcio over mutual TLS, checking server.tessera);
- one worker takes its master, job, rank and worker count from the environment
  ($TESSERA_MASTER, $TESSERA_JOB, $TESSERA_RANK, $TESSERA_WORKERS), as a launcher would hand
  every worker one command line; a malformed $TESSERA_RANK is refused, naming it;
- a shard listening on 0.0.0.0 without --advertise, or with a malformed one, exits at once
  naming --advertise, and nothing was registered.
Skipped, with the reason printed, where network namespaces cannot be made (not root, no
`unshare`, `nsenter` or `ip`). Every namespace goes at the end (its holder killed by pid), also
on failure.
"""
import json
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

sys.path.insert(0, os.path.join(tl.SRC, "bench"))
from emuhosts import Net  # noqa: E402

STEPS = 40 if tl.SANITIZED else 120
HOSTS = ["master", "shard0", "shard1", "worker0", "worker1", "verify"]
PORT = {"master": 7070, "shard0": 7001, "shard1": 7001, "verify": 7090}


class Hosts(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.net = Net(HOSTS, tag="tsh%d" % os.getpid(), subnet="10.78.0")
        ok, why = cls.net.probe()
        if not ok:
            cls.net.down()
            raise unittest.SkipTest("cannot make network namespaces here (%s): the emulated "
                                    "hosts need root and iproute2" % why)
        cls.c = tl.Cluster()
        try:
            cls.net.up()
            cls.store = os.path.join(cls.c.dir, "store")   # one file system: a shared path
            cls.c.make_certs(shards=2)   # also $TESSERA_TLS_DIR of the workers and the CLI
            cls.master = "%s:%d" % (cls.net.addr("master"), PORT["master"])
            m = cls.c.spawn(cls.net.wrap("master", [
                os.path.join(tl.BIN, "tessera-master"), "--listen", cls.master,
                "--store", cls.store] + cls.c.tls_args("master")), "master")
            tl.wait_until(lambda: cls.status() or not m.running(), tl.START_TIMEOUT,
                          "the master at %s" % cls.master)
            for i, s in enumerate(("shard0", "shard1")):
                cls.c.spawn(cls.net.wrap(s, [
                    os.path.join(tl.BIN, "tessera-shard"), "--master", cls.master,
                    "--listen", "0.0.0.0:%d" % PORT[s],
                    "--advertise", "%s:%d" % (cls.net.addr(s), PORT[s]),
                    "--store", cls.store] + cls.c.tls_args("shard-%d" % i)), s)
            cls.c.spawn(cls.net.wrap("verify", [
                os.path.join(tl.BIN, "tessera-verify"), "--master", cls.master,
                "--listen", "0.0.0.0:%d" % PORT["verify"],
                "--advertise", "%s:%d" % (cls.net.addr("verify"), PORT["verify"]),
                "--store", cls.store] + cls.c.tls_args("verify")), "verify")
            tl.wait_until(lambda: (lambda d: d and len([s for s in d["shards"]
                                                        if s["state"] == "alive"]) == 2
                                   and any(w.get("role") == "verify" for w in d["workers"]))(
                cls.status()), tl.START_TIMEOUT, "two shards and the verify service")
        except BaseException:
            cls.c.dump_logs()
            cls.c.stop()
            cls.net.down()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.net.down()

    @classmethod
    def cli(cls, host, args, timeout=60):
        return subprocess.run(cls.net.wrap(host, [os.path.join(tl.BIN, "tessera")] + args),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    @classmethod
    def status(cls):
        """`tessera status --json` from a worker's host, or None while it fails."""
        r = cls.cli("worker0", ["status", "--master", cls.master, "--json",
                                "--timeout-ms", "2000"])
        return json.loads(r.stdout) if r.returncode == 0 else None

    def test_a_workers_on_two_hosts_train_to_the_local_fingerprint(self):
        # rank 0 by flags; rank 1 by the environment, as a launcher hands one command line
        ranks = [self.c.spawn(self.net.wrap("worker0", [
            os.path.join(tl.BIN, "tessera-worker"), "--master", self.master, "--job", "hosts",
            "--rank", "0", "--workers", "2", "--steps", str(STEPS), "--exact", "--json",
            "--keep"]),
            "worker0", stdout_pipe=True)]
        ranks.append(self.c.spawn(self.net.wrap("worker1", [
            "env", "TESSERA_MASTER=" + self.master, "TESSERA_JOB=hosts", "TESSERA_RANK=1",
            "TESSERA_WORKERS=2", os.path.join(tl.BIN, "tessera-worker"), "--steps", str(STEPS),
            "--exact", "--keep"]), "worker1"))
        out, _ = ranks[0].p.communicate(timeout=300)
        for r in ranks:
            self.assertEqual(r.wait(120), 0, r.log_text()[-3000:])
        doc = json.loads(out.decode().strip().splitlines()[-1])
        r = tl.run_cli(["train", "--local", "--steps", str(STEPS), "--exact", "--json"],
                       timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        local = json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]
        self.assertEqual(doc["params_sha256"], local)
        self.assertEqual(doc["transport"], "tcp")
        # The SDK chose the partition size for shards on other hosts (docs/placement.md,
        # "Partition size"): a tensor's bytes / (64 x 2 shards), at least 64 KiB, less 4 KiB,
        # so 60 KiB (15360 floats) for every tensor of the MLP 784-256-128-10: fc1.weight's
        # 200704 floats in 14 partitions, fc2.weight's 32768 in 3, the other four in one
        # each, 21 (in the 4 MiB of one host: 6). The job was kept (--keep) to count them.
        heads = sum(sh["heads"] for sh in self.status()["shards"] if sh["state"] == "alive")
        self.assertEqual(heads, 21)
        tl.log("2 workers on 2 hosts, 2 shards on 2 more: %d exact steps over tcp, "
               "params_sha256 %s... as --local" % (STEPS, local[:12]))

    def test_b_members_are_listed_at_the_addresses_other_hosts_reach(self):
        d = self.status()
        shards = sorted(s["addr"] for s in d["shards"] if s["state"] == "alive")
        self.assertEqual(shards, ["%s:%d" % (self.net.addr(s), PORT[s])
                                  for s in ("shard0", "shard1")])
        verify = [w for w in d["workers"] if w.get("role") == "verify"]
        self.assertEqual(len(verify), 1, d["workers"])
        want = "%s:%d" % (self.net.addr("verify"), PORT["verify"])
        self.assertIn(want, json.dumps(verify[0]))
        self.assertNotIn("127.0.0.1", json.dumps(d["shards"]) + json.dumps(verify))
        self.assertNotIn("0.0.0.0", json.dumps(d["shards"]) + json.dumps(verify))
        # the verify service answers at its advertised address, from another host
        probe = ("import grpc, sys; sys.path.insert(0, sys.argv[2]);"
                 "import tessera_testlib as tl; h = tl.health_pb2;"
                 "ch = tl.tls_channel(sys.argv[1], sys.argv[3]);"
                 "f = ch.unary_unary('/grpc.health.v1.Health/Check',"
                 " request_serializer=h.HealthCheckRequest.SerializeToString,"
                 " response_deserializer=h.HealthCheckResponse.FromString);"
                 "print(f(h.HealthCheckRequest(), timeout=10).status)")
        r = subprocess.run(self.net.wrap("worker1", ["/usr/bin/python3", "-c", probe, want,
                                                   os.path.dirname(os.path.abspath(__file__)),
                                                   self.c.tls_dir]),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(r.stdout.strip(), "1")   # SERVING

    def test_c_a_wildcard_listen_needs_an_advertised_address(self):
        before = len(self.status()["shards"])
        for adv, needle in (([], "--advertise: required"),
                            (["--advertise", "shard-host:port"], "is not HOST or HOST:PORT")):
            r = subprocess.run(self.net.wrap("shard0", [
                os.path.join(tl.BIN, "tessera-shard"), "--master", self.master,
                "--listen", "0.0.0.0:7002"] + adv + self.c.tls_args("shard-0")),
                capture_output=True, text=True,
                timeout=60, stdin=subprocess.DEVNULL)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(needle, r.stderr)
        self.assertEqual(len(self.status()["shards"]), before)
        r = subprocess.run([os.path.join(tl.BIN, "tessera-worker"), "--steps", "1"],
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, TESSERA_RANK="one"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("$TESSERA_RANK: 'one' is not an integer", r.stderr)


if __name__ == "__main__":
    tl.main()
