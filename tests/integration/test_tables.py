#!/usr/bin/python3
"""Sparse embedding tables over real shards (docs/embeddings.md, issue 46).

Exact mode: the same pushes made by 1 or 2 workers (threads of this process, each its own
Client and data-plane connections) into 1 or 3 shards, and in one process (master "local"),
end on one table fingerprint and row count, with rows on every shard. Bad input over the wire
(an id past max_id, NaN, a wrong buffer, an unknown table, a table registered again with
another spec) is refused naming the field, and the table's fingerprint is unchanged after. A
cluster with replicas holds every row twice and ends on the same fingerprint. A
shard's row budget (--table-mem) refuses a push that would take it past its limit with
RESOURCE_EXHAUSTED naming the table and the budget, and nothing of the step is applied; the
table's rows, bytes and rows pulled and pushed show on the shard's /metrics."""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
import unittest

import numpy as np

import tessera_testlib as tl
from tessera_testlib import shard_pb2 as S
import tessera

DIM = 8
MAX_ID = 2 ** 62
BATCH = 32          # ids a step, over every worker
STEPS = 4
OPT = "adagrad:lr=0.2"


_CERTS = []


def certs(c):
    """One certificate directory for every cluster of this file (the SDK reads
    $TESSERA_TLS_DIR once a process), made by the first cluster that asks; c uses it."""
    if not _CERTS:   # in a cluster of no process, whose directory outlives the others'
        holder = tl.Cluster(prefix="tessera-tables-certs.")
        atexit.register(shutil.rmtree, holder.dir, True)   # it was left in /tmp
        _CERTS.append(holder.make_certs(shards=3))
    c.tls_dir = _CERTS[0]
    os.environ["TESSERA_TLS_DIR"] = _CERTS[0]
    return _CERTS[0]


def step_batch(s):
    """Step s's ids (a skewed draw with repeats, spread over the id range) and gradients."""
    rng = np.random.default_rng(1000 + s)
    ranks = np.minimum(rng.zipf(1.3, BATCH), 200)
    ids = (ranks * 0x9E3779B97F4A7C15 % MAX_ID).astype(np.int64)
    grads = rng.standard_normal((BATCH, DIM)).astype(np.float32)
    return ids, grads


def train(master, job, rank, workers, out):
    """One worker: its share of every step (positions i with i % workers == rank), pulled at
    the step's version and pushed; then the fingerprint and row count at the end."""
    with tessera.Client(master=master, job=job, rank=rank, workers=workers, batch=BATCH,
                        exact=True, optimizer="sgd:lr=0.1") as c:
        t = c.register_table("emb", DIM, MAX_ID, init="normal:0.05", seed=7, optimizer=OPT)
        for s in range(STEPS):
            ids, grads = step_batch(s)
            mine = np.arange(BATCH) % workers == rank
            rows = np.empty((int(mine.sum()), DIM), np.float32)
            c.pull_rows(t, s, ids[mine], rows)
            c.push_rows(t, s, ids[mine], grads[mine])
        out[rank] = (c.table_sha256(t, STEPS), c.table_rows(t, STEPS))


def push_300(cluster, master, job):
    """One worker pushes 300 rows of step 0 of one table (sgd) and checks they exist; then,
    while the Client is still connected: each shard's (tables, table_rows, table_bytes) of
    the job from ShardStatus, and `tessera status` as JSON (once a shard shows the push in
    its rows pushed a second) and as text."""
    with tessera.Client(master=master, job=job, rank=0, workers=1, batch=1, exact=True,
                        optimizer="sgd:lr=0.1") as c:
        t = c.register_table("emb", DIM, MAX_ID, optimizer="sgd:lr=0.1")
        ids = np.arange(300, dtype=np.int64) * 7919
        c.push_rows(t, 0, ids, np.ones((300, DIM), np.float32))
        assert c.table_rows(t, 1) == 300
        held = []
        for sh in tl.cluster_status(cluster.channel(master)).shards:
            st = tl.Stub(cluster.channel(sh.addr), S, "Shard").ShardStatus(
                S.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
            held += [(j.tables, j.table_rows, j.table_bytes) for j in st.jobs if j.id == job]
        # The rate shows once a shard's heartbeat measured the interval the push fell in.
        doc = {}

        def pushing():
            doc.update(tl.status_json(master))
            return any(t["job"] == job and t["pushed_per_s"] > 0
                       for sh in doc["shards"] for t in sh.get("table_list", []))
        tl.wait_until(pushing, 15, "a shard's pushed rows/s above 0")
        return held, doc, tl.status_text(master)


def run_job(master, job, workers):
    out, errors = {}, []

    def one(rank):
        try:
            train(master, job, rank, workers, out)
        except Exception as e:   # reported by the caller's assertion
            errors.append("rank %d: %r" % (rank, e))

    threads = [threading.Thread(target=one, args=(r,)) for r in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    if errors:
        raise AssertionError("; ".join(errors))
    return out


class ExactTables(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.local = run_job("local", "local", 1)[0]
        cls.ups = {}
        for shards in (1, 3):
            _, addr = cls.c.tessera_up(["--shards", str(shards), "--replicas", "1",
                                        "--tls-dir", certs(cls.c)], name="up%d" % shards)
            cls.ups[shards] = addr

    def test_same_fingerprint_for_any_worker_and_shard_count(self):
        sha, rows = self.local
        self.assertGreater(rows, 25)   # repeats merged, but many rows
        for shards, addr in sorted(self.ups.items()):
            for workers in (1, 2):
                with self.subTest(shards=shards, workers=workers):
                    got = run_job(addr, "x%d" % workers, workers)
                    self.assertEqual(len(got), workers)
                    for rank, (g_sha, g_rows) in got.items():
                        self.assertEqual(g_rows, rows, "rank %d" % rank)
                        self.assertEqual(g_sha, sha, "rank %d" % rank)

    def test_rows_spread_over_every_shard(self):
        """300 rows pushed by one worker land on all 3 shards (ShardStatus's table_rows),
        each row on one of them."""
        held, doc, text = push_300(self.c, self.ups[3], "spread")
        # tessera status shows them per shard, and per table: each row pushed once.
        self.assertEqual(sum(s["table_rows"] for s in doc["shards"]), 300, doc["shards"])
        tables = [t for s in doc["shards"] for t in s["table_list"] if t["job"] == "spread"]
        self.assertEqual([t["name"] for t in tables], ["emb"] * 3, tables)
        self.assertEqual(sum(t["rows_pushed"] for t in tables), 300, tables)
        self.assertEqual(sum(t["rows"] for t in tables), 300, tables)
        self.assertIn("rows pulled/s", text)
        self.assertEqual(len(re.findall(r"sparse tables: \d+ rows of 1 tables", text)), 3, text)
        self.assertEqual(len(held), 3, held)
        self.assertEqual(sum(h[1] for h in held), 300, held)
        for tables, rows, nbytes in held:
            self.assertEqual(tables, 1)
            self.assertGreater(rows, 50, held)   # about 100 each
            self.assertGreater(nbytes, rows * DIM * 4)


class Copies(tl.ClusterCase, unittest.TestCase):
    """`tessera up --shards 3 --replicas 2`: every row has a copy on the next shard of its
    chain (docs/embeddings.md, "Copies of rows"), fed the same pushes. 1 and 2 workers end on
    the local run's fingerprint and row count; the shards serve each row once (table_rows adds
    up to the rows) and hold it twice (table_bytes adds up to twice their bytes)."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.local = run_job("local", "local", 1)[0]
        _, cls.addr = cls.c.tessera_up(["--shards", "3", "--replicas", "2", "--tls-dir",
                                        certs(cls.c)])

    def test_same_fingerprint(self):
        for workers in (1, 2):
            with self.subTest(workers=workers):
                got = run_job(self.addr, "copies%d" % workers, workers)
                for rank, (g_sha, g_rows) in got.items():
                    self.assertEqual((g_sha, g_rows), self.local, "rank %d" % rank)

    def test_each_row_twice_served_once(self):
        held, _, _ = push_300(self.c, self.addr, "twice")
        self.assertEqual(len(held), 3, held)
        self.assertEqual(sum(h[1] for h in held), 300, held)
        # sgd: a 32-byte header and DIM floats a record, and 2 map slots of 16 bytes
        self.assertEqual(sum(h[2] for h in held), 2 * 300 * (32 + DIM * 4 + 32), held)


class CopiesTakeOverMidStep(tl.ClusterCase, unittest.TestCase):
    """A shard killed between two ranks' pushes of a step: rank 1 meets the broken connection
    first and fails over, and the other shards take over the dead shard's copies; then rank 0,
    whose connections began under the old map, pushes the step placed on the old ring, so its
    parts for the shards that took over hold none of the rows it meant for the dead one. Those
    shards refuse the push (it may be placed on the old ring), rank 0 fails over and sends it
    again, and the table ends on the fingerprint and row count of the same pushes without the
    kill. A copy that took the old-ring part (none of the dead shard's rows) as rank 0's push of
    the step would acknowledge the retry that carries them unchanged: rows lost (dp_rows.c,
    push_locked)."""
    DIM, MAX_ID = 4, 2 ** 40

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        _, cls.addr = cls.c.tessera_up(["--shards", "3", "--replicas", "2", "--tls-dir",
                                        certs(cls.c)])

    def batch(self, step, rank):
        rng = np.random.default_rng(100 * step + rank)
        ids = np.unique(rng.integers(0, self.MAX_ID, 200)).astype(np.int64)
        return ids, rng.standard_normal((len(ids), self.DIM)).astype(np.float32)

    def run_job(self, job, kill):
        kw = dict(master=self.addr, job=job, workers=2, batch=2, exact=True,
                  optimizer="sgd:lr=0.1")
        with tessera.Client(rank=0, **kw) as c0, tessera.Client(rank=1, **kw) as c1:
            t0, t1 = (c.register_table("emb", self.DIM, self.MAX_ID, init="normal:0.05",
                                       seed=7, optimizer="adagrad:lr=0.1") for c in (c0, c1))
            c0.push_rows(t0, 0, *self.batch(0, 0))
            c1.push_rows(t1, 0, *self.batch(0, 1))
            if kill:   # the last of the workers' connections: the others get their parts first
                victim = max((s for s in tl.status_json(self.addr)["shards"]
                              if s["state"] == "alive"), key=lambda s: s["id"])
                tl.log("killing shard %d (pid %d)" % (victim["id"], victim["pid"]))
                os.kill(victim["pid"], signal.SIGKILL)
            c1.push_rows(t1, 1, *self.batch(1, 1))   # fails over: the copies take over
            c0.push_rows(t0, 1, *self.batch(1, 0))   # placed on the ring it held
            return c0.table_sha256(t0, 2), c0.table_rows(t0, 2)

    def test_push_placed_on_the_old_ring(self):
        want = self.run_job("whole", kill=False)
        rows = set()
        for step in (0, 1):
            for rank in (0, 1):
                rows.update(self.batch(step, rank)[0].tolist())
        self.assertEqual(want[1], len(rows))
        self.assertEqual(self.run_job("killed", kill=True), want)


class BadInput(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        _, cls.addr = cls.c.tessera_up(["--shards", "2", "--replicas", "1", "--tls-dir",
                                        certs(cls.c)])

    def client(self, job):
        return tessera.Client(master=self.addr, job=job, rank=0, workers=1, batch=4,
                              exact=True, optimizer="sgd:lr=0.1")

    def test_refused_and_state_unchanged(self):
        with self.client("bad") as c:
            t = c.register_table("emb", DIM, 1000, optimizer="adam:lr=0.01")
            ids = np.array([1, 5, 5, 900], np.int64)
            c.push_rows(t, 0, ids, np.ones((4, DIM), np.float32))
            before = (c.table_sha256(t, 1), c.table_rows(t, 1))
            bad_grad = np.ones((4, DIM), np.float32)
            bad_grad[2, 3] = np.nan
            cases = [
                ("ids", lambda: c.push_rows(t, 1, np.array([1001], np.int64),
                                            np.ones((1, DIM), np.float32))),
                ("rows.grad[2][3]", lambda: c.push_rows(t, 1, ids, bad_grad)),
                ("grads", lambda: c.push_rows(t, 1, ids, np.ones((3, DIM), np.float32))),
                ("out", lambda: c.pull_rows(t, 1, ids, np.ones((4, DIM + 1), np.float32))),
                ("table", lambda: c.push_rows(7, 1, ids, np.ones((4, DIM), np.float32))),
                ("ids", lambda: c.pull_rows(t, 1, np.array([-1], np.int64),
                                            np.ones((1, DIM), np.float32))),
            ]
            for field, call in cases:
                with self.subTest(field=field):
                    with self.assertRaises(tessera.InvalidArgument) as cm:
                        call()
                    self.assertIn(field, str(cm.exception))
            with self.assertRaises(tessera.Error) as cm:
                c.register_table("emb", DIM + 1, 1000)
            self.assertIn("ALREADY_EXISTS", str(cm.exception))
            self.assertIn("table.name", str(cm.exception))
            # A row lifetime by the clock in an exact job: refused by the shards, by name.
            with self.assertRaises(tessera.InvalidArgument) as cm:
                c.register_table("clock", DIM, 1000, ttl_seconds=60)
            self.assertIn("table.ttl_seconds: 60: an exact job drops rows by steps",
                          str(cm.exception))
            self.assertEqual((c.table_sha256(t, 1), c.table_rows(t, 1)), before)
            # The step goes on after every refusal.
            c.push_rows(t, 1, ids, np.ones((4, DIM), np.float32))
            self.assertEqual(c.table_rows(t, 2), 3)
            self.assertNotEqual(c.table_sha256(t, 2), before[0])

    def test_elastic_from_python(self):
        """A table in an elastic job from Python: registered, pushed as the worker's slot
        (push_rows(..., slot=)); a slot the job does not have is refused by name, nothing
        pushed (test_ctr_torch.py's ElasticKilled trains one through a death)."""
        with tessera.Client(master=self.addr, job="elastic", rank=0, workers=1, batch=4,
                            exact=True, optimizer="sgd:lr=0.1", elastic=True) as c:
            self.assertTrue(c.elastic)
            t = c.register_table("emb", DIM, 1000)
            ids = np.array([3, 7], np.int64)
            with self.assertRaises(tessera.InvalidArgument) as cm:
                c.push_rows(t, 0, ids, np.ones((2, DIM), np.float32), slot=1)
            self.assertIn("slot", str(cm.exception))
            self.assertEqual(c.table_rows(t, 0), 0)
            c.push_rows(t, 0, ids, np.ones((2, DIM), np.float32), slot=0)
            self.assertEqual(c.table_rows(t, 1), 2)

    def test_another_worker_spec_is_refused_by_the_shards(self):
        opts = dict(master=self.addr, job="spec", workers=2, batch=4, exact=True,
                    optimizer="sgd:lr=0.1")
        with tessera.Client(rank=0, **opts) as a, tessera.Client(rank=1, **opts) as b:
            a.register_table("emb", DIM, 1000)
            with self.assertRaises(tessera.Error) as cm:
                b.register_table("emb", DIM, 999)
            self.assertIn("ALREADY_EXISTS", str(cm.exception))
            self.assertIn("table_id: 0 is table 'emb'", str(cm.exception))


class Budget(tl.ClusterCase, unittest.TestCase):
    """One shard with a 1 MiB row budget; rows of 256 floats with Adam state are ~3 KiB."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        certs(cls.c)
        master = cls.c.start_master(extra=cls.c.tls_args("master"))
        cls.addr = master.addr
        cls.metrics = tl.free_port()
        cls.c.start_shard(cls.addr, extra=cls.c.tls_args("shard-0") +
                          ["--table-mem", "1", "--metrics-port", str(cls.metrics)])
        tl.wait_until(lambda: tl.cluster_status(cls.c.channel(cls.addr)).shards, 30,
                      "the shard alive")

    def test_push_past_the_budget(self):
        with tessera.Client(master=self.addr, job="budget", rank=0, workers=1, batch=1,
                            exact=False, optimizer="sgd:lr=0.1") as c:
            t = c.register_table("big", 256, 10 ** 6, optimizer="adam:lr=0.01")
            c.push_rows(t, 0, np.arange(100, dtype=np.int64), np.ones((100, 256), np.float32))
            before = (c.table_sha256(t, 1), c.table_rows(t, 1))
            with self.assertRaises(tessera.Error) as cm:
                c.push_rows(t, 1, np.arange(100, 500, dtype=np.int64),
                            np.ones((400, 256), np.float32))
            msg = str(cm.exception)
            self.assertIn("RESOURCE_EXHAUSTED", msg)
            self.assertIn("table 'big'", msg)
            self.assertIn("budget of 1048576 bytes", msg)
            self.assertEqual((c.table_sha256(t, 1), c.table_rows(t, 1)), before)
            # Within the budget the same step goes through.
            c.push_rows(t, 1, np.arange(100, 150, dtype=np.int64),
                        np.ones((50, 256), np.float32))
            self.assertEqual(c.table_rows(t, 2), 150)
            out = np.empty((10, 256), np.float32)
            c.pull_rows(t, 2, np.arange(10, dtype=np.int64), out)
            # The table's series on the shard's /metrics (docs/observability.md).
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics,
                                        timeout=10) as r:
                text = r.read().decode()
            series = dict(re.findall(r'^(tessera_shard_table_\w+)\{job_id="budget",'
                                     r'table="big"\} (\S+)$', text, re.M))
            self.assertEqual(float(series["tessera_shard_table_rows"]), 150)
            self.assertGreater(float(series["tessera_shard_table_bytes"]), 150 * 3 * 1024)
            self.assertEqual(float(series["tessera_shard_table_rows_pushed_total"]), 150)
            self.assertEqual(float(series["tessera_shard_table_rows_pulled_total"]), 10)


class Modes(tl.ClusterCase, unittest.TestCase):
    """SSP (staleness 2) and ASP jobs of 2 workers: each pushes 20 steps of its own ids and
    some shared ones, gradients of ones with sgd lr 0.25 and batch 1, init zeros: binary
    arithmetic, so whatever order the pushes arrive in, each row ends at -0.25 x the pushes
    that touched it, read back by rank 0 once both are done (and pulls of a step wait as the
    mode says, or the run would deadlock or fail). On `--replicas 2`: the copies take every
    push too, with no step to wait for."""

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        _, cls.addr = cls.c.tessera_up(["--shards", "2", "--replicas", "2", "--tls-dir",
                                        certs(cls.c)])

    def run_mode(self, mode):
        steps, done, errors, got = 20, threading.Barrier(2, timeout=120), [], {}
        shared = np.array([3, 4], np.int64)

        def worker(rank):
            try:
                with tessera.Client(master=self.addr, job="mode-" + mode, rank=rank, workers=2,
                                    batch=1, mode=mode, staleness=2 if mode == "ssp" else 0,
                                    optimizer="sgd:lr=0.25") as c:
                    t = c.register_table("emb", 4, 10 ** 6, init="zeros")
                    out = np.empty((1, 4), np.float32)
                    for s in range(steps):
                        own = np.array([1000 + rank * 100 + s % 5], np.int64)
                        ids = np.concatenate([own, shared])
                        c.pull_rows(t, s, own, out)
                        c.push_rows(t, s, ids, np.ones((3, 4), np.float32))
                    done.wait()
                    if rank == 0:
                        want = np.concatenate([shared, 1000 + np.arange(5, dtype=np.int64),
                                               1100 + np.arange(5, dtype=np.int64)])
                        rows = np.empty((len(want), 4), np.float32)
                        c.pull_rows(t, steps, want, rows)
                        got["rows"] = rows
                        got["count"] = c.table_rows(t, steps)
                    done.wait()
            except Exception as e:   # reported below
                errors.append("rank %d: %r" % (rank, e))
                done.abort()

        threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(180)
        self.assertEqual(errors, [])
        self.assertEqual(got["count"], 12)
        # shared rows: 2 workers x 20 pushes; own rows: 20 / 5 = 4 pushes each
        want = np.array([-0.25 * 40] * 2 + [-0.25 * 4] * 10, np.float32)
        np.testing.assert_array_equal(got["rows"][:, 0], want)
        np.testing.assert_array_equal(got["rows"], np.repeat(want[:, None], 4, axis=1))

    def test_ssp(self):
        self.run_mode("ssp")

    def test_asp(self):
        self.run_mode("asp")


class Snapshots(tl.ClusterCase, unittest.TestCase):
    """A job with a 10^7-row table snapshotted twice on 2 shards: the second snapshot, after a
    step that touched 10 rows, adds about 10 records of data to the store; `snapshot gc` keeps
    the first snapshot's runs that the second still needs; a cluster of 3 shards restored from
    it starts the table at the snapshot's step with the same rows and fingerprint, and trains
    on from there; `tessera verify compare` passes a snapshot against itself with the table's
    rows in it, and fails bits against a later one that has a row more, whose cosine is over
    the rows both hold (counted), or a sample of them (--rows-sample)."""

    DIM = 16
    RECORD = 24 + DIM * 4 * 2   # adagrad: values and one state component

    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()

    def export_tables(self, store, sid, probe_ids, probe):
        """python3 -m tessera.snapshot export: the table's ids and rows in
        ['tessera']['tables'], equal to what a pull of the same step read, with its spec and
        each row's Adagrad state; --model-only refuses (a model's state dict has no place
        for a table). Returns the file's path."""
        import torch
        out = os.path.join(self.c.dir, "tables.pt")

        def snap(*args):
            return subprocess.run([sys.executable, "-m", "tessera.snapshot"] + list(args),
                                  capture_output=True, text=True, timeout=120)
        r = snap("export", sid, out, "--store", store)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("table emb: 5009 rows", r.stdout)
        emb = torch.load(out, weights_only=True)["tessera"]["tables"]["emb"]
        ids, rows = emb["ids"].numpy(), emb["rows"].numpy()
        self.assertEqual((len(ids), rows.shape), (5009, (5009, self.DIM)))
        self.assertTrue((np.diff(ids) > 0).all())
        at = np.searchsorted(ids, probe_ids)
        self.assertTrue((ids[at] == probe_ids).all())
        self.assertEqual(rows[at].tobytes(), probe.tobytes())
        self.assertEqual(emb["spec"], {"dim": self.DIM, "max_id": 10 ** 7 - 1,
                                       "init": "normal:0.01", "seed": 0,
                                       "optimizer": "adagrad:lr=0.1", "ttl_steps": 0,
                                       "ttl_seconds": 0})
        self.assertEqual(tuple(emb["state"].shape), (5009, 1, self.DIM))
        self.assertGreater(float(emb["state"][at[1]].min()), 0)   # row 7: pushed at step 1
        self.assertEqual(emb["steps"][at[1]].item(), 1)
        r = snap("export", sid, out + ".m", "--store", store, "--model-only")
        self.assertEqual(r.returncode, 1)
        self.assertIn("has sparse tables (emb)", r.stderr)
        return out

    def import_restores(self, exported, opts, want, after):
        """python3 -m tessera.snapshot import of the exported file into a new store: restored
        on 2 shards, the table is at the snapshot's step with the same rows and fingerprint,
        and the same push as on the cluster restored from the original ends on the same
        fingerprint (row 7's Adagrad state came back too, or it would not)."""
        c = self.c
        store = os.path.join(c.dir, "imported")
        r = subprocess.run([sys.executable, "-m", "tessera.snapshot", "import", exported,
                            "--store", store, "--job", "snap", "--batch", "1", "--exact"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        sid = r.stdout.split()[0]
        up, addr = c.tessera_up(["--shards", "2", "--replicas", "1", "--store", store,
                                 "--tls-dir", _CERTS[0], "--restore", sid], name="imp")
        with tessera.Client(master=addr, **opts) as cl:
            t = cl.register_table("emb", self.DIM, 10 ** 7 - 1, optimizer="adagrad:lr=0.1")
            self.assertEqual(cl.table_version(t), 2)
            self.assertEqual((cl.table_sha256(t, 2), cl.table_rows(t, 2)), want)
            cl.push_rows(t, 2, np.array([5, 7], np.int64), np.ones((2, self.DIM), np.float32))
            self.assertEqual((cl.table_sha256(t, 3), cl.table_rows(t, 3)), (after, 5010))
        up.stop()

    def test_incremental_and_restored_on_another_shard_count(self):
        c = self.c
        store = os.path.join(c.dir, "store")
        certs(c)
        up, addr = c.tessera_up(["--shards", "2", "--replicas", "1", "--store", store,
                                 "--tls-dir", _CERTS[0]], name="a")

        def snapshot(master):
            with c.admin_env():
                r = tl.run_cli(["snapshot", "create", "--master", master, "--job", "snap",
                                "--json"], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)

        opts = dict(job="snap", rank=0, workers=1, batch=1, exact=True, optimizer="sgd:lr=0.1")
        with tessera.Client(master=addr, keep=True, **opts) as cl:
            t = cl.register_table("emb", self.DIM, 10 ** 7 - 1, optimizer="adagrad:lr=0.1")
            self.assertEqual(cl.table_version(t), 0)
            ids = np.arange(5000, dtype=np.int64) * 1999
            cl.push_rows(t, 0, ids, np.ones((5000, self.DIM), np.float32))
            first = snapshot(addr)
            cl.push_rows(t, 1, np.arange(10, dtype=np.int64) * 7,
                         np.ones((10, self.DIM), np.float32))
            second = snapshot(addr)
            want = (cl.table_sha256(t, 2), cl.table_rows(t, 2))
            probe_ids = np.array([0, 7, 1999, 63, 5], np.int64)   # 5: never created
            probe = np.zeros((5, self.DIM), np.float32)
            cl.pull_rows(t, 2, probe_ids[:4], probe[:4])
        tl.log("snapshots of 5000 and then 10 changed rows: %d and %d bytes written" %
               (first["bytes_written"], second["bytes_written"]))
        self.assertEqual((first["step"], second["step"]), (1, 2))
        self.assertGreater(first["bytes_written"], 5000 * self.RECORD // 4)
        # 10 records of 152 bytes and the chunk's header; none of the first 5000 again.
        self.assertLess(second["bytes_written"], 10 * self.RECORD + 1024)
        self.assertEqual(want[1], 5009)
        with c.admin_env():
            for cmd in (["snapshot", "gc", "--store", store, "--master", addr, "--grace-s",
                         "0"], ["snapshot", "fsck", "--store", store]):
                r = tl.run_cli(cmd, timeout=60)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        up.stop()
        _, addr3 = c.tessera_up(["--shards", "3", "--replicas", "1", "--store", store,
                                 "--tls-dir", _CERTS[0], "--restore", second["id"]], name="b")
        with tessera.Client(master=addr3, **opts) as cl:
            t = cl.register_table("emb", self.DIM, 10 ** 7 - 1, optimizer="adagrad:lr=0.1")
            self.assertEqual(cl.table_version(t), 2)
            self.assertEqual((cl.table_sha256(t, 2), cl.table_rows(t, 2)), want)
            cl.push_rows(t, 2, np.array([5, 7], np.int64), np.ones((2, self.DIM), np.float32))
            self.assertEqual(cl.table_rows(t, 3), 5010)
            after = cl.table_sha256(t, 3)
            third = snapshot(addr3)
        # tessera snapshot diff: row 0 changed, the 9 other ids of the second push added;
        # the first snapshot's run is the second's too (incremental), and a snapshot against
        # itself is the same without a row read.
        def table_diff(a, b):
            r = tl.run_cli(["snapshot", "diff", a, b, "--store", store, "--json"], timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            tables = json.loads(r.stdout)["tables"]
            self.assertEqual([x["name"] for x in tables], ["emb"], tables)
            return tables[0]
        d = table_diff(first["id"], second["id"])
        self.assertEqual((d["change"], d["rows_a"], d["rows_b"], d["rows_added"],
                          d["rows_removed"], d["rows_changed"]),
                         ("changed", 5000, 5009, 9, 0, 1), d)
        self.assertGreater(d["l2"], 0)
        self.assertEqual(d["runs_shared"], d["runs"] - 2, d)   # one new run on each shard
        d = table_diff(second["id"], second["id"])
        self.assertEqual((d["change"], d["rows_changed"], d["runs_shared"]),
                         ("same", 0, d["runs"]), d)
        text = tl.run_cli(["snapshot", "diff", first["id"], second["id"], "--store", store],
                          timeout=60)
        self.assertIn("TABLE", text.stdout)
        self.assertRegex(text.stdout, r"\nemb +changed +5000 +5009 +9 +0 +1 ")
        exported = self.export_tables(store, second["id"], probe_ids[:4], probe[:4])
        self.import_restores(exported, opts, want, after)
        # tessera verify compare: the table as a tensor of its rows ("table:emb")
        same = tl.run_cli(["verify", "compare", second["id"], second["id"], "--store", store,
                           "--json"], timeout=60)
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)
        doc = json.loads(same.stdout)
        rows = [x for x in doc["tensors"] if x["name"] == "table:emb"]
        self.assertEqual(len(rows), 1, doc["tensors"])
        self.assertEqual(rows[0]["elements"], 5009 * self.DIM)
        self.assertEqual(rows[0]["differing"], 0)
        moved = tl.run_cli(["verify", "compare", second["id"], third["id"], "--store", store,
                            "--level", "bits", "--json"], timeout=60)
        self.assertEqual(moved.returncode, 1, moved.stdout + moved.stderr)
        self.assertEqual(rows[0]["rows"]["sampled"], 5009)
        self.assertEqual(rows[0]["rows"]["cosine"], 1.0)
        # ... but its cosine is over the 5009 rows both hold (row 5 is only in the third, row 7
        # moved in it): below 1, above --cosine-min 0.5, so the cosine level passes.
        grown = tl.run_cli(["verify", "compare", second["id"], third["id"], "--store", store,
                            "--level", "cosine", "--cosine-min", "0.5", "--json"], timeout=60)
        self.assertEqual(grown.returncode, 0, grown.stdout + grown.stderr)
        t = [x for x in json.loads(grown.stdout)["tensors"] if x["name"] == "table:emb"][0]
        self.assertTrue(t["rows_differ"])
        self.assertEqual((t["rows"]["common"], t["rows"]["only_a"], t["rows"]["only_b"],
                          t["rows"]["sampled"]), (5009, 0, 1, 5009))
        self.assertLess(t["rows"]["cosine"], 1.0)
        self.assertGreater(t["rows"]["cosine"], 0.5)
        self.assertEqual(t["cosine"], t["rows"]["cosine"])
        self.assertNotIn("differing", t)   # the bits of other ids are not compared
        # A sample of 10 rows is 10, of the same 5009; the text says the same.
        few = tl.run_cli(["verify", "compare", second["id"], third["id"], "--store", store,
                          "--level", "cosine", "--cosine-min", "0.5", "--rows-sample", "10",
                          "--json"], timeout=60)
        self.assertEqual(few.returncode, 0, few.stdout + few.stderr)
        t = [x for x in json.loads(few.stdout)["tensors"] if x["name"] == "table:emb"][0]
        self.assertEqual((t["rows"]["common"], t["rows"]["sampled"]), (5009, 10))
        text = tl.run_cli(["verify", "compare", second["id"], third["id"], "--store", store,
                           "--level", "cosine", "--rows-sample", "10"], timeout=60)
        self.assertIn("rows: 5009 common, 0 only in A, 1 only in B; cosine over 10 sampled",
                      text.stdout)


if __name__ == "__main__":
    os.environ.setdefault("TESSERA_LOG", "warn")
    unittest.main(verbosity=2)
