#!/usr/bin/python3
"""test_health_reflection.py - grpc.health.v1 and server reflection (v1 and v1alpha) on a master.

Health: Check for the server ("") and its service is SERVING, an unknown service NOT_FOUND; a
Watch stream gets SERVING first and ends once the server gets SIGTERM, and the server exits 0
within its grace period. Reflection, through both protocol versions on one bidi stream each:
list_services names every service, file_containing_symbol gives FileDescriptorProtos that load
into a fresh DescriptorPool, from which ClusterStatus is called with no generated code; an
unknown symbol gets error_code 5 (NOT_FOUND) on the same stream.
"""
import queue
import signal
import sys
import threading
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# tessera_testlib first: it re-runs this script under /usr/bin/python3 if grpc is missing.
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import health_pb2, master_pb2  # noqa: E402
import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
WANT_SERVICES = {"tessera.v1.Master", "grpc.health.v1.Health",
                 "grpc.reflection.v1.ServerReflection",
                 "grpc.reflection.v1alpha.ServerReflection"}
REFLECTION = {"v1": tl.reflection_v1_pb2, "v1alpha": tl.reflection_v1alpha_pb2}


def message_class(pool, full_name):
    desc = pool.FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)  # protobuf 3.21/4.21


class ReflectionStream:
    """One ServerReflectionInfo stream: ask() sends a request and returns its reply."""

    def __init__(self, channel, version):
        self.pb = REFLECTION[version]
        self.requests = queue.Queue()
        fn = channel.stream_stream(
            "/grpc.reflection.%s.ServerReflection/ServerReflectionInfo" % version,
            request_serializer=self.pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=self.pb.ServerReflectionResponse.FromString)
        self.call = fn(iter(self.requests.get, None), timeout=10.0)

    def ask(self, **fields):
        req = self.pb.ServerReflectionRequest(host="", **fields)
        self.requests.put(req)
        resp = next(self.call)
        assert resp.original_request == req, "reply echoes another request: %r" % (resp,)
        return resp

    def close(self):
        """Half-closes the stream; the server must then end it with OK."""
        self.requests.put(None)
        rest = list(self.call)
        assert rest == [], "replies after half-close: %r" % (rest,)
        assert self.call.code() == grpc.StatusCode.OK, self.call.details()


def load_files(fd_protos, pool):
    """Adds serialized FileDescriptorProtos to pool, each after the files it imports."""
    files = {}
    for raw in fd_protos:
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        files[fd.name] = fd
    added = set()

    def add(name):
        if name in added:
            return
        if name not in files:
            raise AssertionError("dependency %s was not sent (got %s)" % (name, sorted(files)))
        for dep in files[name].dependency:
            add(dep)
        pool.Add(files[name])
        added.add(name)
    for name in files:
        add(name)
    return files


class HealthAndReflection(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        try:
            cls.master = cls.c.start_master()
            cls.ch = cls.c.channel(cls.master.addr)
            cls.health = tl.Stub(cls.ch, health_pb2, "Health")
        except BaseException:
            cls.c.dump_logs()
            cls.c.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def check(self, service):
        return self.health.Check(health_pb2.HealthCheckRequest(service=service),
                                 timeout=tl.RPC_TIMEOUT)

    def test_health_check(self):
        for svc in ("", "tessera.v1.Master", "grpc.health.v1.Health"):
            with self.subTest(service=svc):
                self.assertEqual(self.check(svc).status, SERVING)
        for svc in ("no.such.Service", "tessera.v1.Shard", "tessera.v1"):
            with self.subTest(service=svc):
                e = tl.call_error(self.health.Check, health_pb2.HealthCheckRequest(service=svc))
                self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())

    def test_health_watch_unknown_service(self):
        call = self.health.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"),
                                 timeout=5.0)
        try:
            self.assertEqual(next(call).status, SERVICE_UNKNOWN)
        finally:
            call.cancel()

    def test_list_services(self):
        for version in REFLECTION:
            with self.subTest(version=version):
                rs = ReflectionStream(self.ch, version)
                resp = rs.ask(list_services="")
                names = {s.name for s in resp.list_services_response.service}
                self.assertTrue(WANT_SERVICES <= names, "%s lists %s" % (version, names))
                self.assertNotIn("tessera.v1.Shard", names, "a master serves no Shard")
                rs.close()

    def test_dynamic_cluster_status(self):
        want = tl.cluster_status(self.ch)
        for version in REFLECTION:
            with self.subTest(version=version):
                rs = ReflectionStream(self.ch, version)
                # Several requests on one stream, the unknown symbol in between.
                resp = rs.ask(file_containing_symbol="tessera.v1.Master")
                protos = resp.file_descriptor_response.file_descriptor_proto
                self.assertTrue(protos, "no descriptors for tessera.v1.Master: %r" % (resp,))
                bad = rs.ask(file_containing_symbol="tessera.v1.NoSuchThing")
                self.assertTrue(bad.HasField("error_response"), bad)
                self.assertEqual(bad.error_response.error_code, 5)  # NOT_FOUND
                self.assertTrue(bad.error_response.error_message)
                method = rs.ask(file_containing_symbol="tessera.v1.Master.ClusterStatus")
                self.assertTrue(method.file_descriptor_response.file_descriptor_proto)
                listed = rs.ask(list_services="")
                self.assertTrue(listed.HasField("list_services_response"))
                rs.close()

                pool = descriptor_pool.DescriptorPool()  # fresh: nothing generated in it
                files = load_files(protos, pool)
                self.assertIn("tessera/v1/master.proto", files)
                self.assertIn("tessera/v1/common.proto", files, "imports come along")
                svc = pool.FindServiceByName("tessera.v1.Master")
                m = svc.methods_by_name["ClusterStatus"]
                req_cls = message_class(pool, m.input_type.full_name)
                resp_cls = message_class(pool, m.output_type.full_name)
                self.assertIsNot(resp_cls, master_pb2.ClusterStatusResponse)
                fn = self.ch.unary_unary("/%s/%s" % (svc.full_name, m.name),
                                         request_serializer=req_cls.SerializeToString,
                                         response_deserializer=resp_cls.FromString)
                got = fn(req_cls(), timeout=tl.RPC_TIMEOUT)
                self.assertEqual(got.DESCRIPTOR.full_name, "tessera.v1.ClusterStatusResponse")
                self.assertEqual(got.epoch, want.epoch)
                self.assertGreaterEqual(got.epoch, 1)
                self.assertEqual(got.version, want.version)
                self.assertEqual(got.vnodes, want.vnodes)
                self.assertEqual(got.default_lease_ms, want.default_lease_ms)
                self.assertGreater(got.uptime_ms, 0)
                self.assertEqual(len(got.shards), 0)

    def test_reflection_by_filename_and_unknown_file(self):
        for version in REFLECTION:
            with self.subTest(version=version):
                rs = ReflectionStream(self.ch, version)
                resp = rs.ask(file_by_filename="tessera/v1/common.proto")
                names = [descriptor_pb2.FileDescriptorProto.FromString(b).name
                         for b in resp.file_descriptor_response.file_descriptor_proto]
                self.assertIn("tessera/v1/common.proto", names)
                bad = rs.ask(file_by_filename="no/such/file.proto")
                self.assertEqual(bad.error_response.error_code, 5)
                rs.close()


class WatchAcrossShutdown(unittest.TestCase):
    GRACE_MS = 1000

    def setUp(self):
        self.c = tl.Cluster()
        self.master = self.c.start_master(extra=["--grace-ms", str(self.GRACE_MS)])

    def tearDown(self):
        self.c.stop()

    def test_watch_ends_and_server_exits_on_sigterm(self):
        ch = self.c.channel(self.master.addr)
        health = tl.Stub(ch, health_pb2, "Health")
        call = health.Watch(health_pb2.HealthCheckRequest(service="tessera.v1.Master"),
                            timeout=15.0)
        got = queue.Queue()

        def reader():  # the stream's messages, then its end, onto a queue
            try:
                for msg in call:
                    got.put(("msg", msg.status))
                got.put(("end", call.code()))
            except grpc.RpcError as e:
                got.put(("end", e.code()))
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        self.assertEqual(got.get(timeout=5.0), ("msg", SERVING))

        t0 = time.monotonic()
        self.master.signal(signal.SIGTERM)
        events = []
        while not events or events[-1][0] != "end":
            events.append(got.get(timeout=self.GRACE_MS / 1000 + 3))
        ended = time.monotonic() - t0
        t.join(5.0)
        # Either NOT_SERVING and a clean end, or the stream cut (UNAVAILABLE/CANCELLED).
        statuses = [v for k, v in events if k == "msg"]
        self.assertTrue(set(statuses) <= {NOT_SERVING}, events)
        end = events[-1][1]
        if statuses:
            self.assertIn(end, (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.CANCELLED), events)
        else:
            self.assertIn(end, (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), events)
        rc = self.master.wait(self.GRACE_MS / 1000 + 3)
        took = time.monotonic() - t0
        self.assertEqual(rc, 0, "tessera-master after SIGTERM:\n%s" % self.master.log_text())
        # The grace period, plus cancelling and joining: an idle connection (ours, once the
        # stream ended) can hold the server for the whole grace period.
        self.assertLess(took, self.GRACE_MS / 1000 + 1.5, "exit within the grace period")
        held = "calls still running" in self.master.log_text()
        tl.log("watch got %s, ended in %.2f s; master exited in %.2f s (grace %.1f s)%s"
               % ([health_pb2.HealthCheckResponse.ServingStatus.Name(s) for s in statuses],
                  ended, took, self.GRACE_MS / 1000,
                  "; held to the end of the grace period by our idle connection" if held
                  else ""))


if __name__ == "__main__":
    tl.main()
