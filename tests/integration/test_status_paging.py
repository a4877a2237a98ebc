#!/usr/bin/python3
"""test_status_paging.py - the master's status of many workers, paged and summarised
(docs/scaling.md).

A tessera-master (plaintext) and 230 workers registered by python3-grpcio as the ranks of one
job, 5 of which deregister; a few heartbeat with a clock. ClusterStatus with max_workers pages through every worker once, by
id, its workers_next leading from page to page, while the counts by state cover all of them;
jobs_only answers the jobs with no shard and no worker. `tessera status` lists 50 workers in
its tables and says how many there are by state, `--workers all` lists every one, `--json`
every one with the counts, and `--workers 0` is refused saying what it wants. The status
page's /api/status, past 200 workers, lists the 150 alive ones with the lowest clocks (those
that heartbeat a clock come last) with the counts of all.
"""
import json
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2 as M  # noqa: E402

WORKERS = 230
LEFT = 5


class Paging(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.http = tl.free_ports(1)
        cls.master = cls.c.start_master(lease_ms=60000,
                                        extra=["--metrics-port", str(cls.http)])
        cls.stub = tl.Stub(cls.c.channel(cls.master.addr), M, "Master")
        cls.ids = []
        for r in range(WORKERS):
            g = cls.stub.RegisterWorker(M.RegisterWorkerRequest(
                host="sim", pid=r + 1, instance="paging-%d" % r, job="paged", rank=r,
                workers=WORKERS), timeout=tl.RPC_TIMEOUT)
            cls.ids.append(g.worker_id)
        for w in cls.ids[LEFT:LEFT + 100]:   # ahead: not the slowest
            cls.stub.Heartbeat(M.HeartbeatRequest(kind=tl.WORKER, id=w, clock=9),
                               timeout=tl.RPC_TIMEOUT)
        for w in cls.ids[:LEFT]:
            cls.stub.Deregister(M.DeregisterRequest(kind=tl.WORKER, id=w,
                                                    reason="paging test"),
                                timeout=tl.RPC_TIMEOUT)

    def status(self, **kw):
        return self.stub.ClusterStatus(M.ClusterStatusRequest(**kw), timeout=tl.RPC_TIMEOUT)

    def test_pages_cover_every_worker_once(self):
        seen, after, pages = [], 0, 0
        while True:
            r = self.status(max_workers=50, workers_after=after)
            self.assertLessEqual(len(r.workers), 50)
            self.assertEqual((r.workers_alive, r.workers_dead, r.workers_left),
                             (WORKERS - LEFT, 0, LEFT))
            seen += [w.id for w in r.workers]
            pages += 1
            if not r.workers_next:
                break
            self.assertEqual(r.workers_next, r.workers[-1].id)
            after = r.workers_next
        self.assertEqual(pages, 5)
        self.assertEqual(seen, sorted(self.ids))
        # A worker listed on a page keeps its seat: job and rank.
        r = self.status(max_workers=1, workers_after=self.ids[LEFT + 6] - 1)
        self.assertEqual((r.workers[0].job, r.workers[0].rank), ("paged", LEFT + 6))
        # The default lists every worker, as before.
        self.assertEqual(len(self.status().workers), WORKERS)

    def test_status_page_lists_the_slowest(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/api/status" % self.http,
                                    timeout=10) as r:
            doc = json.loads(r.read().decode())
        self.assertEqual((doc["workers_alive"], doc["workers_dead"], doc["workers_left"]),
                         (WORKERS - LEFT, 0, LEFT))
        self.assertEqual(doc["workers_listed"], 150)
        listed = [w["id"] for w in doc["workers"]]
        self.assertEqual(len(listed), 150)
        # The 125 at clock 0 first, then 25 of those at clock 9, the lowest ids among them.
        self.assertEqual(listed, self.ids[LEFT + 100:] + self.ids[LEFT:LEFT + 25])
        self.assertEqual([w["clock"] for w in doc["workers"]], [0] * 125 + [9] * 25)

    def test_jobs_only(self):
        r = self.status(jobs_only=True)
        self.assertEqual((len(r.workers), len(r.shards)), (0, 0))
        job = [j for j in r.jobs if j.id == "paged"][0]
        self.assertEqual((job.workers, job.alive), (WORKERS, WORKERS - LEFT))

    def test_cli_lists_fifty_and_counts_all(self):
        text = tl.status_text(self.master.addr)
        self.assertIn("... %d workers in all: %d alive, 0 dead, %d left; 50 listed" %
                      (WORKERS, WORKERS - LEFT, LEFT), text)
        rows = [l for l in text.splitlines() if l.split()[:1] and l.split()[0].isdigit() and
                " sim " in l]
        self.assertEqual(len(rows), 50)
        text = tl.status_text(self.master.addr, "--workers", "all")
        self.assertNotIn("workers in all", text)
        self.assertEqual(len([l for l in text.splitlines() if " sim " in l]), WORKERS)
        doc = tl.status_json(self.master.addr)
        self.assertEqual(len(doc["workers"]), WORKERS)
        self.assertEqual((doc["workers_alive"], doc["workers_left"]), (WORKERS - LEFT, LEFT))
        self.assertNotIn("workers_next", doc)
        doc = tl.status_json(self.master.addr, "--workers", "7")
        self.assertEqual(len(doc["workers"]), 7)
        self.assertEqual(doc["workers_next"], doc["workers"][-1]["id"])
        r = tl.run_cli(["status", "--master", self.master.addr, "--workers", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--workers: '0'; want a count from 1, or all", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
