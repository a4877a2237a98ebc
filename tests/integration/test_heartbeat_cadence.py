#!/usr/bin/python3
"""test_heartbeat_cadence.py - a member's heartbeats keep their cadence when one is slow
(lib/cluster/master.c, docs/membership.md "Leases").

Real processes: a master of our own making in Python (python3-grpcio, plaintext: it serves
RegisterWorker, Heartbeat and Deregister of tessera.v1.Master) and a real `tessera-verify
--insecure`, which registers with it as a member and beats through the C membership client
every shard and worker uses. The fake master grants a 1 s heartbeat interval (a 3 s lease)
and holds its answer to one heartbeat for 1.5 s, past the client's deadline of one interval.
Checked, from the times the beats arrive:
- the beat after the slow one comes within 1.6 s of it (the client's deadline, 1 s, and then
  at once): beats start an interval apart whatever each took. Before, the client waited a
  whole interval after the deadline, 2 s in all, so the lease the last answered beat renewed
  (3 s, from one interval before the slow beat) ran out just as the next one was sent: one
  slow answer of a loaded master was enough to declare a member dead;
- beats are not sent back to back either: every gap between two beats is at least 0.09 s
  (an interval's tenth), and the one after the slow beat aside, about one interval
  (0.8-1.6 s).
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2  # noqa: E402

import grpc  # noqa: E402

INTERVAL_MS = 1000
SLOW_BEAT = 3          # the third heartbeat is held
HOLD_S = 1.5           # past the client's deadline (one interval)


class FakeMaster:
    """Answers RegisterWorker, Heartbeat and Deregister; records when each beat came."""

    def __init__(self):
        self.beats = []
        self.mu = threading.Lock()
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
        M = master_pb2
        handlers = {
            "RegisterWorker": grpc.unary_unary_rpc_method_handler(
                self.register, request_deserializer=M.RegisterWorkerRequest.FromString,
                response_serializer=M.RegisterWorkerResponse.SerializeToString),
            "Heartbeat": grpc.unary_unary_rpc_method_handler(
                self.heartbeat, request_deserializer=M.HeartbeatRequest.FromString,
                response_serializer=M.HeartbeatResponse.SerializeToString),
            "Deregister": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: M.DeregisterResponse(epoch=1),
                request_deserializer=M.DeregisterRequest.FromString,
                response_serializer=M.DeregisterResponse.SerializeToString),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("tessera.v1.Master", handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def register(self, req, ctx):
        return master_pb2.RegisterWorkerResponse(worker_id=7, epoch=1, lease_ms=3 * INTERVAL_MS,
                                                 heartbeat_interval_ms=INTERVAL_MS)

    def heartbeat(self, req, ctx):
        with self.mu:
            self.beats.append(time.monotonic())
            n = len(self.beats)
        if n == SLOW_BEAT:
            time.sleep(HOLD_S)
        return master_pb2.HeartbeatResponse(epoch=1, lease_ms=3 * INTERVAL_MS)

    def arrivals(self):
        with self.mu:
            return list(self.beats)


class Cadence(unittest.TestCase):
    def test_a_slow_answer_does_not_delay_the_next_beat(self):
        fake = FakeMaster()
        store = tempfile.mkdtemp(prefix="tessera-cadence-", dir=tl.TEST_TMP)
        log = open(os.path.join(store, "verify.log"), "w")
        p = subprocess.Popen([os.path.join(tl.BIN, "tessera-verify"), "--insecure",
                              "--listen", "127.0.0.1:0", "--store", store,
                              "--master", "127.0.0.1:%d" % fake.port],
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            tl.wait_until(lambda: len(fake.arrivals()) >= SLOW_BEAT + 3, 30,
                          "three beats after the slow one")
        finally:
            p.terminate()
            p.wait(20)
            log.close()
            fake.server.stop(0)
        beats = fake.arrivals()
        gaps = [b - a for a, b in zip(beats, beats[1:])]
        tl.log("beats %s s apart (beat %d held %.1f s)" %
               (", ".join("%.2f" % g for g in gaps), SLOW_BEAT, HOLD_S))
        after_slow = gaps[SLOW_BEAT - 1]
        self.assertLess(after_slow, 1.6, "the beat after the slow one waited a whole interval "
                        "past the deadline: %s" % gaps)
        self.assertGreater(after_slow, 0.9, "the slow beat's deadline is one interval: %s" % gaps)
        self.assertTrue(all(g >= 0.09 for g in gaps), gaps)
        steady = [g for i, g in enumerate(gaps) if i != SLOW_BEAT - 1]
        self.assertTrue(all(0.8 <= g <= 1.6 for g in steady), gaps)


if __name__ == "__main__":
    tl.main()
