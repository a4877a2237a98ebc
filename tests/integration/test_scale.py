#!/usr/bin/python3
"""test_scale.py - one master for ten thousand workers beside a real job (`make test-scale`;
docs/scaling.md).

`tessera up --shards 2` (mutual TLS, its default). bench_rpc_latency --master registers 10,000
simulated workers as the ranks of one job, heartbeats each every 10 s (lease 30 s; the rest a
worker the shards vouch for takes, docs/scaling.md) for TESSERA_SCALE_SECONDS (120), and then
deregisters them all; meanwhile `tessera train` runs an exact job of 2 workers. Checked: the
10,000 registered within 20 s, none missed a lease and no call failed (the benchmark's own
check: every one alive at the end, its clock equal to the heartbeats acknowledged), every one
left, the master lists none of them alive afterwards, and the training ended on the
params_sha256 of `tessera train --local`. The master's resident bytes per worker are printed.
Minutes: not part of `make test`.
"""
import json
import os
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

WORKERS = int(os.environ.get("TESSERA_SCALE_WORKERS", "10000"))
SECONDS = int(os.environ.get("TESSERA_SCALE_SECONDS", "120"))
TRAIN = ["--workers", "2", "--exact", "--steps", "600", "--json"]


class TenThousandWorkers(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.certs = cls.c.make_certs(shards=2)
        _, cls.addr = cls.c.tessera_up(["--shards", "2", "--tls-dir", cls.certs])

    def test_training_beside_ten_thousand_workers(self):
        out = os.path.join(self.c.dir, "load.json")
        load = self.c.spawn([os.path.join(tl.BIN, "bench_rpc_latency"), "--master", self.addr,
                             "--tls", self.certs, "--workers", str(WORKERS), "--job", "sim",
                             "--seconds", str(SECONDS), "--interval-ms", "10000",
                             "--lease-ms", "30000", "--out", out], "load")
        tl.wait_until(lambda: tl.status_json(self.addr).get("workers_alive", 0) >= WORKERS,
                      60, "%d simulated workers registered" % WORKERS, interval=0.5)
        r = tl.run_cli(["train", "--master", self.addr] + TRAIN, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        got = json.loads(r.stdout.strip().splitlines()[-1])
        want = json.loads(tl.run_cli(["train", "--local"] + TRAIN, timeout=600)
                          .stdout.strip().splitlines()[-1])
        self.assertEqual(got["params_sha256"], want["params_sha256"])
        self.assertEqual(load.wait(SECONDS + 300), 0, load.log_text()[-3000:])
        with open(out) as f:
            doc = json.load(f)
        hb = doc["heartbeat"]
        tl.log("%d workers registered in %.2f s; %d heartbeats, %d errors, %d alive at the "
               "end; %d left in %.2f s; master RSS %.0f bytes a worker" % (
                   hb["workers"], hb["register_s"], hb["calls"], hb["errors"],
                   hb["alive_at_end"], hb.get("deregistered", -1), hb.get("deregister_s", -1),
                   doc.get("master_rss_per_worker_bytes", -1)))
        self.assertTrue(doc["ok"])
        self.assertEqual((hb["alive_at_end"], hb["errors"], hb["clock_mismatches"],
                          hb["deregistered"]), (WORKERS, 0, 0, WORKERS))
        self.assertLess(hb["register_s"], 20)
        self.assertLess(tl.status_json(self.addr).get("workers_alive", WORKERS), 100)


if __name__ == "__main__":
    unittest.main(verbosity=2)
