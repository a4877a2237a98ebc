#!/usr/bin/python3
"""test_verify_service.py - tessera-verify as a service, from python3-grpcio.

A cluster with a store trains an exact job and tags a snapshot. tessera-verify, started on
that store, must register with the master (a member with role "verify" and its address), answer
Health as SERVING and list tessera.v1.Verify through reflection. Compare of the tag against
"live" (a coordinated snapshot taken through the master during the call) passes bit for bit;
bad fields get INVALID_ARGUMENT naming the field, an unknown ref NOT_FOUND; its /metrics
(--metrics-port) counts those audits by result with their durations; and SIGTERM makes it
leave the cluster cleanly.
"""
import os
import re
import signal
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import health_pb2  # noqa: E402
from tessera.v1 import verify_pb2  # noqa: E402
import grpc  # noqa: E402
from test_snapshot import Cell, cli  # noqa: E402
from test_health_reflection import ReflectionStream  # noqa: E402

V = verify_pb2


class VerifyService(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmpdir = tempfile.mkdtemp(prefix="tessera-vsvc.")
        cls.store = os.path.join(cls.tmpdir, "store")
        cls.cell = Cell(cls.store, 2)
        try:
            cli(["train", "--master", cls.cell.master.addr, "--workers", "2", "--job", "v", "--keep",
                 "--exact", "--steps", "10", "--seed", "4", "--partition-kb", "64", "--json"],
                timeout=240)
            cli(["snapshot", "create", "--master", cls.cell.master.addr, "--tag", "t10"])
            cls.metrics_port = tl.free_port()
            cls.svc = cls.cell.c.start_server("tessera-verify", "verify",
                                              ["--master", cls.cell.master.addr,
                                               "--store", cls.store, "--metrics-port",
                                               str(cls.metrics_port)])
            cls.addr = cls.svc.addr
            cls.ch = cls.cell.c.channel(cls.addr)
            cls.v = tl.Stub(cls.ch, V, "Verify")
        except BaseException:
            cls.cell.close(failed=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cell.close()
        import shutil
        shutil.rmtree(cls.tmpdir, ignore_errors=True)

    def verify_members(self):
        cs = tl.cluster_status(self.cell.c.channel(self.cell.master.addr))
        return [w for w in cs.workers if w.role == "verify"]

    def test_registered_healthy_reflected(self):
        members = tl.wait_until(self.verify_members, 10, "the verify member")
        self.assertEqual(members[0].addr, self.addr)
        self.assertEqual(members[0].state, tl.ALIVE)
        health = tl.Stub(self.ch, health_pb2, "Health")
        r = health.Check(health_pb2.HealthCheckRequest(service="tessera.v1.Verify"),
                         timeout=tl.RPC_TIMEOUT)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)
        rs = ReflectionStream(self.ch, "v1")
        try:
            names = {s.name for s in rs.ask(list_services="").list_services_response.service}
        finally:
            rs.close()
        self.assertIn("tessera.v1.Verify", names)

    def test_compare_tag_with_live(self):
        r = self.v.Compare(V.CompareRequest(a="t10", b="live", job="v"), timeout=120)
        self.assertTrue(getattr(r, "pass") and r.pass_bits and r.pass_cosine and r.pass_dist, r)
        self.assertEqual(len(r.tensors), 6)
        self.assertTrue(all(t.differing == 0 and t.cosine == 1.0 for t in r.tensors))
        self.assertEqual(list(r.layer_cosine), [1.0, 1.0, 1.0])
        self.assertIn("step 10", r.b)
        self.assertEqual(r.dist_of, "logits")
        self.assertEqual(r.ks_statistic, 0.0)

    def test_cli_live(self):
        r = tl.run_cli(["verify", "compare", "--master", self.cell.master.addr, "t10", "live",
                        "--level", "bits", "--timeout-ms", "60000"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("bit-identical", r.stdout)
        r = tl.run_cli(["verify", "compare", "--store", self.store, "t10", "live"], timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--master", r.stderr)

    def test_bad_fields_and_unknown_ref(self):
        for req, field in ((V.CompareRequest(a="", b="t10"), "a"),
                           (V.CompareRequest(a="t10", b="x" * 301), "b"),
                           (V.CompareRequest(a="t10", b="t10", level="everything"), "level"),
                           (V.CompareRequest(a="t10", b="t10", probe=20000), "probe"),
                           (V.CompareRequest(a="t10", b="t10", alpha=1.5), "alpha"),
                           (V.CompareRequest(a="t10", b="t10", cosine_min=2), "cosine_min")):
            e = tl.call_error(self.v.Compare, req)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, field)
            self.assertTrue(e.details().startswith(field + ":"), e.details())
        e = tl.call_error(self.v.Compare, V.CompareRequest(a="t10", b="nope"))
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)
        self.assertTrue(e.details().startswith("b: "), e.details())
        # A file path is not a ref: the service never reads arbitrary files.
        e = tl.call_error(self.v.Compare, V.CompareRequest(a="t10", b="/etc/passwd"))
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)

    def test_y_metrics_count_audits(self):
        """After the tests above (in name order): the Compare that passed and the 8 refused
        are counted, each timed (the CLI's compare runs in the CLI, not here)."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            text = r.read().decode()
        got = {}
        for line in text.splitlines():
            m = re.match(r'(tessera_verify_audit\w*)(\{result="(\w+)"\})? (\S+)$', line)
            if m:
                got[m.group(1) + ":" + (m.group(3) or "")] = float(m.group(4))
        self.assertEqual(got.get("tessera_verify_audits_total:pass", 0), 1, got)
        self.assertGreaterEqual(got.get("tessera_verify_audits_total:error", 0), 8, got)
        self.assertEqual(got.get("tessera_verify_audit_seconds_count:"),
                         sum(v for k, v in got.items() if k.startswith("tessera_verify_audits")))

    def test_zz_sigterm_leaves_cleanly(self):
        self.svc.signal(signal.SIGTERM)
        self.assertEqual(self.svc.wait(15), 0)
        tl.wait_until(lambda: self.verify_members()[0].state == tl.LEFT, 10,
                      "the verify member to leave")


if __name__ == "__main__":
    tl.main()
