#!/usr/bin/python3
"""test_bad_input.py - every Master field rule, refused with the field named, and no harm done.

Against a real master and one shard: each bad field of each RPC (missing, oversized, malformed)
must get INVALID_ARGUMENT whose details start with the field's name; bytes that do not decode
must get INVALID_ARGUMENT "request: ..."; and ClusterStatus, less its clocks, must be identical
before and after. Then the other codes a client acts on: NOT_FOUND (unknown id), UNIMPLEMENTED
(unknown method), ABORTED "refresh" (a stale map on a shard), FAILED_PRECONDITION (a member
declared dead), and RegisterShard idempotency per instance.
"""
import sys
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
# tessera_testlib first: it re-runs this script under /usr/bin/python3 if grpc is missing.
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2 as M, shard_pb2 as S  # noqa: E402
import grpc  # noqa: E402

INV = grpc.StatusCode.INVALID_ARGUMENT
GOOD_ADDR = "127.0.0.1:1"
MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1

# (field named in the details, request fields) for each RPC. Every other field is valid.
BAD_REGISTER_SHARD = [
    ("secret", dict(secret=b"short")),                 # 16 to 64 bytes
    ("secret", dict(secret=b"s" * 65)),
    ("addr", dict(addr="")),
    ("addr", dict(addr="h" * 254 + ":1")),             # 256 bytes; the limit is 255
    ("addr", dict(addr="a" * 5000 + ":1")),
    ("addr", dict(addr="localhost")),                  # no port
    ("addr", dict(addr=":8080")),                      # no host
    ("addr", dict(addr="host:")),
    ("addr", dict(addr="host:0")),
    ("addr", dict(addr="host:65536")),
    ("addr", dict(addr="host:99999999999999999999")),
    ("addr", dict(addr="host:-1")),
    ("addr", dict(addr="host:80x")),
    ("addr", dict(addr="host:http")),
    ("addr", dict(addr="my host:80")),                 # space
    ("addr", dict(addr="host:80 ")),
    ("addr", dict(addr="ho\tst:80")),
    ("addr", dict(addr="ho\nst:80")),
    ("addr", dict(addr="ho\x7fst:80")),
    ("addr", dict(addr="h\u00e9te:80")),               # not ASCII printable
    ("instance", dict(instance="")),
    ("instance", dict(instance="i" * 65)),
    ("instance", dict(instance="i" * 10000)),
    ("instance", dict(instance="has space")),
    ("instance", dict(instance="a/b")),
    ("instance", dict(instance="a:b")),
    ("instance", dict(instance="caf\u00e9")),
    ("instance", dict(instance="tab\t")),
    ("lease_ms", dict(lease_ms=1)),
    ("lease_ms", dict(lease_ms=99)),
    ("lease_ms", dict(lease_ms=600001)),
    ("lease_ms", dict(lease_ms=MAX_U32)),
    # No address: an empty bytes field, which reached memcpy as NULL (fuzz_rpc).
    ("data_planes[0].address", dict(data_planes=[tl.common_pb2.DataPlaneEndpoint(
        transport="tcp")])),
]

BAD_REGISTER_WORKER = [
    ("secret", dict(secret=b"short")),                 # 16 to 64 bytes
    ("secret", dict(secret=b"s" * 65)),
    ("host", dict(host="")),
    ("host", dict(host="h" * 256)),
    ("host", dict(host="two words")),
    ("host", dict(host="ctl\x01")),
    ("host", dict(host="\u00fcber")),
    ("instance", dict(instance="")),
    ("instance", dict(instance="w" * 65)),
    ("instance", dict(instance="semi;colon")),
    ("lease_ms", dict(lease_ms=50)),
    ("lease_ms", dict(lease_ms=600001)),
]

# Heartbeat/Deregister cases name the real shard's id where the id is not the point, so that a
# missed check would show as a state change.
BAD_HEARTBEAT = [
    ("secret", dict(secret=b"short")),                 # 16 to 64 bytes
    ("secret", dict(secret=b"s" * 65)),
    ("kind", dict(kind=0)),
    ("kind", dict(kind=3)),                            # VERIFY: not a heartbeating kind
    ("kind", dict(kind=42)),                           # not in the enum at all
    ("id", dict(id=0)),
    ("id", dict(kind=2, id=0)),
    ("known_epoch", dict(known_epoch="ahead")),        # filled in: epoch + 1
    ("known_epoch", dict(known_epoch=MAX_U64)),
]

BAD_DEREGISTER = [
    ("secret", dict(secret=b"short")),                 # 16 to 64 bytes
    ("secret", dict(secret=b"s" * 65)),
    ("kind", dict(kind=0)),
    ("kind", dict(kind=3)),
    ("kind", dict(kind=7)),
    ("id", dict(id=0)),
    ("reason", dict(reason="r" * 257)),
    ("reason", dict(reason="r" * 100000)),
]

BAD_GET_SHARD_MAP = [
    ("known_epoch", dict(known_epoch="ahead")),
    ("known_epoch", dict(known_epoch=MAX_U64)),
]

RAW_GARBAGE = [
    b"\xff\xff\xff",                 # a tag varint that never ends
    b"\x0a\x05ab",                   # a length-delimited field cut short
    b"\x80",                         # a truncated varint
    b"\x0f",                         # wire type 7 does not exist
]


class BadInput(unittest.TestCase):
    """One master and one shard for the whole class; no test here may change their state."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        try:
            cls.master = cls.c.start_master(lease_ms=3000)
            cls.shard = cls.c.start_shard(cls.master.addr)
            cls.ch = cls.c.channel(cls.master.addr)
            cls.m = tl.Stub(cls.ch, M, "Master")
            cls.sch = cls.c.channel(cls.shard.addr)
            cls.s = tl.Stub(cls.sch, S, "Shard")
            cls.shard_status = tl.wait_until(
                lambda: cls._registered(cls.s.ShardStatus(S.ShardStatusRequest(),
                                                          timeout=tl.RPC_TIMEOUT)),
                tl.START_TIMEOUT, "the shard to register")
        except BaseException:
            cls.c.dump_logs()
            cls.c.stop()
            raise

    @staticmethod
    def _registered(st):
        return st if st.shard_id and st.state == tl.ALIVE else None

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def setUp(self):
        self.before = tl.status_fingerprint(tl.cluster_status(self.ch))
        self.epoch = tl.cluster_status(self.ch).epoch

    def tearDown(self):
        after = tl.status_fingerprint(tl.cluster_status(self.ch))
        if after != self.before:
            self.c.dump_logs()
        self.assertEqual(after, self.before, "the master's state changed")

    def expect_invalid(self, fn, req, field):
        e = tl.call_error(fn, req)
        self.assertEqual(e.code(), INV, "%s: %s" % (field, e.details()))
        self.assertTrue(e.details().startswith(field + ":"),
                        "details should name %r first: %r" % (field, e.details()))
        return e

    def run_cases(self, rpc, req_cls, base, cases):
        fn = getattr(self.m, rpc)
        for field, over in cases:
            fields = dict(base)
            fields.update(over)
            for k, v in fields.items():
                if v == "ahead":
                    fields[k] = self.epoch + 1
            with self.subTest(rpc=rpc, field=field, value=repr(over)[:80]):
                self.expect_invalid(fn, req_cls(**fields), field)

    def test_register_shard_invalid(self):
        self.run_cases("RegisterShard", M.RegisterShardRequest,
                       dict(addr=GOOD_ADDR, instance="bad-input-test", lease_ms=0),
                       BAD_REGISTER_SHARD)

    def test_register_worker_invalid(self):
        self.run_cases("RegisterWorker", M.RegisterWorkerRequest,
                       dict(host="localhost", pid=1, instance="bad-input-w", lease_ms=0),
                       BAD_REGISTER_WORKER)

    def test_heartbeat_invalid(self):
        self.run_cases("Heartbeat", M.HeartbeatRequest,
                       dict(kind=tl.SHARD, id=self.shard_status.shard_id, known_epoch=0),
                       BAD_HEARTBEAT)

    def test_deregister_invalid(self):
        self.run_cases("Deregister", M.DeregisterRequest,
                       dict(kind=tl.SHARD, id=self.shard_status.shard_id, reason="test"),
                       BAD_DEREGISTER)

    def test_get_shard_map_invalid(self):
        self.run_cases("GetShardMap", M.GetShardMapRequest, {}, BAD_GET_SHARD_MAP)
        # The current epoch and 0 are fine.
        for known in (0, self.epoch):
            smap = self.m.GetShardMap(M.GetShardMapRequest(known_epoch=known),
                                      timeout=tl.RPC_TIMEOUT)
            self.assertEqual(smap.epoch, self.epoch)

    def test_snapshot_rpcs_invalid(self):
        self.run_cases("CreateSnapshot", M.CreateSnapshotRequest, {}, [
            ("job", dict(job="j" * 65)),
            ("job", dict(job="no/slash")),
            ("message", dict(message="m" * 4097)),
            ("tag", dict(tag="t" * 129)),
            ("timeout_ms", dict(timeout_ms=3600001)),
        ])
        # Valid, but this master has no store: FAILED_PRECONDITION saying what to do.
        e = tl.call_error(self.m.CreateSnapshot, M.CreateSnapshotRequest())
        self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("--store", e.details())
        for rpc, req, field in (
                ("ArmSnapshot", S.ArmSnapshotRequest(job="", step=1), "job"),
                ("ArmSnapshot", S.ArmSnapshotRequest(job="x" * 65), "job"),
                ("WriteSnapshot", S.WriteSnapshotRequest(job=""), "job"),
                ("WriteSnapshot", S.WriteSnapshotRequest(job="j", wait_ms=60001), "wait_ms")):
            with self.subTest(rpc=rpc, field=field):
                self.expect_invalid(getattr(self.s, rpc), req, field)
        e = tl.call_error(self.s.ArmSnapshot, S.ArmSnapshotRequest(job="no-such-job", step=3))
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no-such-job", e.details())

    def test_register_tensor_modes_invalid(self):
        """Bad modes and sync periods are refused by name, and create no job (the shard's job
        list is unchanged)."""
        C = tl.common_pb2
        jobs = lambda: [j.id for j in self.s.ShardStatus(S.ShardStatusRequest(),
                                                          timeout=tl.RPC_TIMEOUT).jobs]
        before = jobs()
        epoch = self.s.ShardStatus(S.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT).epoch
        good = dict(id="modes-bad", workers=2, exact=False, optimizer="sgd", batch=64)
        tensor = C.TensorSpec(name="w", dtype=C.DTYPE_F32, shape=[10], initializer="zeros")
        for field, job, extra in (
                ("job.mode", dict(good, exact=True, mode=C.TRAIN_MODE_ASP), {}),
                ("job.mode", dict(good, exact=True, mode=C.TRAIN_MODE_SSP), {}),
                ("job.mode", dict(good, mode=9), {}),
                ("job.staleness", dict(good, mode=C.TRAIN_MODE_BSP, staleness=2), {}),
                ("sync_every", good, dict(sync_every=2000000))):
            with self.subTest(field=field, job=job, extra=extra):
                self.expect_invalid(self.s.RegisterTensor, S.RegisterTensorRequest(
                    job=C.JobSpec(**job), tensor=tensor, tensor_id=0, map_epoch=epoch, **extra),
                    field)
        self.assertEqual(jobs(), before)

    def test_check_data_invalid(self):
        good = dict(name="train-images[0:1000)", sha256=b"\x01" * 32, file="f.gz")
        C = M.DataChecksum
        self.run_cases("CheckData", M.CheckDataRequest, dict(job="j", checksums=[C(**good)]), [
            ("job", dict(job="")),
            ("job", dict(job="j" * 65)),
            ("job", dict(job="no spaces")),
            ("checksums", dict(checksums=[])),
            ("checksums[0].name", dict(checksums=[C(**dict(good, name=""))])),
            ("checksums[0].sha256", dict(checksums=[C(**dict(good, sha256=b"\x01" * 31))])),
            ("checksums[0].file", dict(checksums=[C(**dict(good, file="f" * 257))])),
            ("checksums", dict(checksums=[C(**good), C(**good)])),   # one name twice
        ])

    def test_undecodable_bytes(self):
        methods = ["/tessera.v1.Master/" + m for m in
                   ("RegisterShard", "RegisterWorker", "Heartbeat", "Deregister", "GetShardMap",
                    "ClusterStatus")]
        for path in methods:
            for payload in RAW_GARBAGE:
                with self.subTest(path=path, payload=payload):
                    e = self._raw_error(self.ch, path, payload)
                    self.assertEqual(e.code(), INV, e.details())
                    self.assertTrue(e.details().startswith("request:"), e.details())
        for payload in RAW_GARBAGE:
            with self.subTest(path="Shard/ShardStatus", payload=payload):
                e = self._raw_error(self.sch, "/tessera.v1.Shard/ShardStatus", payload)
                self.assertEqual(e.code(), INV, e.details())
                self.assertTrue(e.details().startswith("request:"), e.details())
        # A wire type that does not match the field's type does not decode either.
        e = self._raw_error(self.ch, "/tessera.v1.Master/RegisterShard", b"\x08\x01")
        self.assertEqual(e.code(), INV, e.details())

    def _raw_error(self, ch, path, payload):
        try:
            reply = tl.raw_call(ch, path, payload)
        except grpc.RpcError as e:
            return e
        self.fail("%s accepted %r and replied %r" % (path, payload, reply))

    def test_unknown_id_is_not_found(self):
        for kind in (tl.SHARD, tl.WORKER):
            for id_ in (999, MAX_U32):
                with self.subTest(kind=kind, id=id_):
                    e = tl.call_error(self.m.Heartbeat, M.HeartbeatRequest(kind=kind, id=id_))
                    self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
                    self.assertTrue(e.details().startswith("id:"), e.details())
                    e = tl.call_error(self.m.Deregister, M.DeregisterRequest(kind=kind, id=id_))
                    self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())

    def test_unknown_method_is_unimplemented(self):
        for ch, path in ((self.ch, "/tessera.v1.Master/NoSuchMethod"),
                         (self.ch, "/tessera.v1.NoSuchService/ClusterStatus"),
                         (self.ch, "/tessera.v1.Shard/ShardStatus"),   # not on the master
                         (self.sch, "/tessera.v1.Master/ClusterStatus")):  # not on a shard
            with self.subTest(path=path):
                e = self._raw_error(ch, path, b"")
                self.assertEqual(e.code(), grpc.StatusCode.UNIMPLEMENTED, e.details())

    def test_shard_status_stale_map_is_aborted(self):
        mine = self.shard_status.epoch
        self.assertGreaterEqual(mine, 2, "the shard registered at epoch 2 or later")
        e = tl.call_error(self.s.ShardStatus, S.ShardStatusRequest(map_epoch=mine - 1))
        self.assertEqual(e.code(), grpc.StatusCode.ABORTED, e.details())
        self.assertIn("refresh", e.details())
        self.assertTrue(e.details().startswith("map_epoch:"), e.details())
        # The master's epoch (the shard fetches the map if it lags) and 0 (no check) are
        # served; an epoch the master has not reached is refused as the master refuses it.
        master_epoch = tl.cluster_status(self.ch).epoch
        for ep in (0, master_epoch):
            st = self.s.ShardStatus(S.ShardStatusRequest(map_epoch=ep), timeout=tl.RPC_TIMEOUT)
            self.assertEqual(st.shard_id, self.shard_status.shard_id)
            self.assertEqual(st.addr, self.shard.addr)
            self.assertEqual(st.master, self.master.addr)
        e = tl.call_error(self.s.ShardStatus, S.ShardStatusRequest(map_epoch=master_epoch + 1))
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
        self.assertEqual(e.details(), "map_epoch: %d is ahead of the master's epoch %d"
                         % (master_epoch + 1, master_epoch))


class Membership(unittest.TestCase):
    """Leases, FAILED_PRECONDITION and idempotency, each against a master of its own."""

    def setUp(self):
        self.c = tl.Cluster()
        self.passed = False
        self.master = self.c.start_master(lease_ms=1000)  # the reaper looks every 50 ms
        self.ch = self.c.channel(self.master.addr)
        self.m = tl.Stub(self.ch, M, "Master")

    def tearDown(self):
        if not self.passed:
            self.c.dump_logs()
        self.c.stop()

    def test_silent_worker_dies_and_gets_failed_precondition(self):
        r = self.m.RegisterWorker(M.RegisterWorkerRequest(host="localhost", pid=4242,
                                                          instance="w-200", lease_ms=200),
                                  timeout=tl.RPC_TIMEOUT)
        self.assertEqual(r.lease_ms, 200)
        self.assertGreater(r.worker_id, 0)
        epoch = r.epoch
        hb = self.m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=r.worker_id,
                                                 known_epoch=epoch, clock=7),
                              timeout=tl.RPC_TIMEOUT)
        self.assertEqual(hb.epoch, epoch)
        self.assertFalse(hb.map_changed)

        def dead():
            w = [w for w in tl.cluster_status(self.ch).workers if w.id == r.worker_id][0]
            return w if w.state == tl.DEAD else None
        t0 = time.monotonic()
        w = tl.wait_until(dead, 3.0, "worker %d (lease 200 ms) to be declared dead"
                          % r.worker_id)
        self.assertGreaterEqual(time.monotonic() - t0, 0.1)
        self.assertEqual(w.clock, 7, "the clock from its last heartbeat")
        self.assertEqual(w.pid, 4242)
        self.assertEqual(tl.cluster_status(self.ch).epoch, epoch, "workers do not move the epoch")
        e = tl.call_error(self.m.Heartbeat, M.HeartbeatRequest(kind=tl.WORKER, id=r.worker_id))
        self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
        self.assertIn("register again", e.details())
        # Registering again with the same instance brings back the same id, alive.
        r2 = self.m.RegisterWorker(M.RegisterWorkerRequest(host="localhost", pid=4242,
                                                           instance="w-200", lease_ms=5000),
                                   timeout=tl.RPC_TIMEOUT)
        self.assertEqual(r2.worker_id, r.worker_id)
        self.m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=r.worker_id),
                         timeout=tl.RPC_TIMEOUT)
        # A worker declared dead may still leave, telling its outcome (a lease that ran out
        # while it finished): taken, no new epoch; it is gone then, and a second is refused.
        r3 = self.m.RegisterWorker(M.RegisterWorkerRequest(host="localhost", pid=4243,
                                                           instance="w-201", lease_ms=200),
                                   timeout=tl.RPC_TIMEOUT)
        self.m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=r3.worker_id),
                         timeout=tl.RPC_TIMEOUT)

        def dead3():   # the first one heard meanwhile: all silent at once is the master's cut
            self.m.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=r.worker_id),
                             timeout=tl.RPC_TIMEOUT)
            return [w for w in tl.cluster_status(self.ch).workers
                    if w.id == r3.worker_id and w.state == tl.DEAD]
        tl.wait_until(dead3, 3.0, "worker %d (lease 200 ms) to be declared dead" % r3.worker_id)
        d = self.m.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=r3.worker_id,
                                                  reason="finished"), timeout=tl.RPC_TIMEOUT)
        self.assertEqual(d.epoch, epoch)
        e = tl.call_error(self.m.Deregister, M.DeregisterRequest(kind=tl.WORKER,
                                                                 id=r3.worker_id))
        self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
        self.assertIn("deregistered", e.details())
        self.passed = True

    def test_register_shard_is_idempotent_per_instance(self):
        req = M.RegisterShardRequest(addr="127.0.0.1:7001", instance="shard-a", lease_ms=60000)
        r1 = self.m.RegisterShard(req, timeout=tl.RPC_TIMEOUT)
        self.assertEqual(r1.epoch, 2, "epoch 1 is the empty ring; a shard joining makes 2")
        self.assertEqual(r1.lease_ms, 60000)
        self.assertEqual(r1.heartbeat_interval_ms, 20000)
        before = tl.status_fingerprint(tl.cluster_status(self.ch))
        r2 = self.m.RegisterShard(req, timeout=tl.RPC_TIMEOUT)
        self.assertEqual(r2.shard_id, r1.shard_id)
        self.assertEqual(r2.epoch, r1.epoch, "a retried register does not move the epoch")
        after = tl.status_fingerprint(tl.cluster_status(self.ch))
        self.assertEqual(after, before)
        # Another instance is another shard and another epoch.
        r3 = self.m.RegisterShard(M.RegisterShardRequest(addr="127.0.0.1:7002",
                                                         instance="shard-b", lease_ms=60000),
                                  timeout=tl.RPC_TIMEOUT)
        self.assertNotEqual(r3.shard_id, r1.shard_id)
        self.assertEqual(r3.epoch, r1.epoch + 1)
        smap = self.m.GetShardMap(M.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
        self.assertEqual(sorted(s.id for s in smap.shards), sorted([r1.shard_id, r3.shard_id]))
        self.passed = True

    def test_limits_are_inclusive(self):
        """The largest and smallest good values pass, so the bad ones above fail for a reason."""
        ok = [
            dict(addr="h" * 253 + ":1", instance="edge-addr"),            # 255 bytes
            dict(addr="127.0.0.1:65535", instance="i" * 64),
            dict(addr="127.0.0.1:1", instance="A.z_0-9", lease_ms=100),
            dict(addr="[::1]:80", instance="edge-lease", lease_ms=600000),
        ]
        for fields in ok:
            with self.subTest(fields=repr(fields)[:60]):
                r = self.m.RegisterShard(M.RegisterShardRequest(**fields),
                                         timeout=tl.RPC_TIMEOUT)
                self.assertGreater(r.shard_id, 0)
        r = self.m.RegisterWorker(M.RegisterWorkerRequest(host="h" * 255, instance="w" * 64,
                                                          lease_ms=600000),
                                  timeout=tl.RPC_TIMEOUT)
        self.assertGreater(r.worker_id, 0)
        d = self.m.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=r.worker_id,
                                                  reason="r" * 256), timeout=tl.RPC_TIMEOUT)
        self.assertGreaterEqual(d.epoch, 1)
        self.passed = True


class StringEdgeCases(unittest.TestCase):
    """Strings protobuf-c would cut at a NUL byte, invalid UTF-8, and a signed port: each once
    slipped past validation (lib/rpc/wirecheck.c and members.c's check_addr refuse them now)."""

    def setUp(self):
        self.c = tl.Cluster()
        self.master = self.c.start_master()
        self.ch = self.c.channel(self.master.addr)
        self.m = tl.Stub(self.ch, M, "Master")

    def tearDown(self):
        self.c.stop()

    def _expect_invalid(self, fn, req, field):
        try:
            fn(req, timeout=tl.RPC_TIMEOUT)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), INV, e.details())
            self.assertTrue(e.details().startswith(field + ":"), e.details())
            return
        self.fail("%s accepted: %r" % (field, req))

    def test_nul_byte_in_addr(self):
        # protobuf-c hands strings over NUL-terminated, so "127.0.0.1:5\0 junk" is checked
        # (and stored) as "127.0.0.1:5": the NUL and the space after it are never seen.
        self._expect_invalid(self.m.RegisterShard, M.RegisterShardRequest(
            addr="127.0.0.1:5\x00 junk", instance="nul-addr"), "addr")

    def test_nul_byte_in_instance(self):
        # Two different instances, "x\0 a" and "x\0 b", would get the same shard id.
        self._expect_invalid(self.m.RegisterShard, M.RegisterShardRequest(
            addr="127.0.0.1:6", instance="x\x00 a"), "instance")

    def test_nul_byte_in_reason(self):
        # A 301-byte reason passes the 256-byte limit because strlen() stops at the NUL.
        r = self.m.RegisterWorker(M.RegisterWorkerRequest(host="h", instance="nul-reason"),
                                  timeout=tl.RPC_TIMEOUT)
        self._expect_invalid(self.m.Deregister, M.DeregisterRequest(
            kind=tl.WORKER, id=r.worker_id, reason="x\x00" + "y" * 299), "reason")

    def test_signed_port(self):
        # strtol() takes a sign: "host:+80" registers, though a port is 1..65535 in digits.
        self._expect_invalid(self.m.RegisterShard, M.RegisterShardRequest(
            addr="host:+80", instance="plus-port"), "addr")

    def test_invalid_utf8_in_reason(self):
        # proto3 strings are UTF-8; the Python client refuses to build one, so send raw bytes:
        # field 3 (reason), wire type 2, length 2, an overlong encoding of '/'.
        raw = bytes([0x08, tl.WORKER, 0x10, 0x01, 0x1a, 0x02, 0xc0, 0xaf])
        call = self.ch.unary_unary("/tessera.v1.Master/Deregister",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as cm:
            call(raw, timeout=tl.RPC_TIMEOUT)
        self.assertEqual(cm.exception.code(), INV)
        self.assertTrue(cm.exception.details().startswith("reason:"), cm.exception.details())


if __name__ == "__main__":
    tl.main()
