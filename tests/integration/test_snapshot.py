#!/usr/bin/python3
"""test_snapshot.py - coordinated snapshots through real services, and restores from them.

One exact-mode job on 2 shards and 2 workers trains to HALF, is snapshotted there (tessera
snapshot create), and trains on to STEPS in place (automatic snapshots every EVERY steps run
meanwhile): its final fingerprint H1 must equal a --local run's. Each restore test
starts a fresh cluster (other shard and worker counts) from the step-HALF snapshot, trains to
STEPS, and must end with H2 == H1 bit for bit; its own final snapshot must then share every
chunk with the first run's (the same bytes, stored once). Damage is refused with names: a
flipped byte in a chunk stops `tessera up --restore` before anything starts and fsck names
the chunk; unknown refs and mismatched jobs get clear errors.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
from tessera.v1 import shard_pb2, snapshot_pb2  # noqa: E402

STEPS = 24
HALF = 12
EVERY = 4
COMMON = ["--exact", "--seed", "7", "--batch", "64", "--micro", "16", "--partition-kb", "64",
          "--json"]


def cli(args, timeout=120.0, ok=True):
    r = tl.run_cli(args, timeout=timeout)
    if ok and r.returncode != 0:
        raise AssertionError("tessera %s exited %d:\n%s\n%s" % (" ".join(args), r.returncode,
                                                               r.stdout, r.stderr))
    return r


def train(master, workers, steps, extra=(), common=COMMON):
    # --keep: the shards keep the job after it finishes, to snapshot it or train it on.
    r = cli(["train", "--master", master, "--workers", str(workers), "--steps", str(steps),
             "--keep"] + common + list(extra), timeout=240.0)
    return json.loads(r.stdout.strip().splitlines()[-1])


def salts(store, ref):
    """Each tensor's placement salt in snapshot ref (docs/placement.md)."""
    shown = json.loads(cli(["snapshot", "show", "--store", store, ref, "--json"]).stdout)
    return {t["name"]: t["placement_salt"] for t in shown["tensors"]}


def snapshots(store):
    return json.loads(cli(["snapshot", "list", "--store", store, "--json"]).stdout)


def manifest(store, hexid):
    """The decoded manifest object (a 32-byte store header, then the protobuf)."""
    with open(os.path.join(store, "manifests", hexid[:2], hexid), "rb") as f:
        data = f.read()
    m = snapshot_pb2.Manifest()
    m.ParseFromString(data[32:])
    return m


class Cell:
    """A master and S shards on one store; restore is a snapshot id or None."""

    def __init__(self, store, shards, restore=None, every=0):
        self.c = tl.Cluster()
        extra = ["--store", store] + (["--restore", restore] if restore else [])
        self.master = self.c.start_master(
            extra=extra + (["--snapshot-every", str(every)] if every else []))
        for i in range(shards):
            self.c.start_shard(self.master.addr, name="shard%d" % i, extra=extra)
        ch = self.c.channel(self.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(ch).shards
                                  if s.state == tl.ALIVE) == shards, 15,
                      "%d shards alive" % shards)
        # The master lists a shard as soon as it registers; it serves once it knows its id.
        for s in tl.cluster_status(ch).shards:
            st = tl.Stub(self.c.channel(s.addr), shard_pb2, "Shard")
            tl.wait_until(lambda: st.ShardStatus(shard_pb2.ShardStatusRequest(),
                                                 timeout=tl.RPC_TIMEOUT).shard_id, 15,
                          "shard %d to know its id" % s.id)

    def close(self, failed=False):
        if failed:
            self.c.dump_logs()
        self.c.stop()


class Snapshots(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-snap.")
        cls.store = os.path.join(cls.tmp, "store")
        cls.local = json.loads(cli(["train", "--local", "--steps", str(STEPS)] + COMMON)
                               .stdout.strip().splitlines()[-1])
        # Train to HALF, snapshot the idle job (exactly step HALF), then the same job trains
        # on to STEPS from where the shards stand; automatic snapshots run meanwhile.
        cell = Cell(cls.store, 2, every=EVERY)
        try:
            half = train(cell.master.addr, 2, HALF, ["--job", "run1"])
            made = json.loads(cli(["snapshot", "create", "--master", cell.master.addr,
                                   "--tag", "half", "--json"]).stdout)
            cls.direct = cls.create_direct(cell.master.addr)
            cls.first = train(cell.master.addr, 2, STEPS, ["--job", "run1"])
            cli(["snapshot", "create", "--master", cell.master.addr, "--tag", "last"])
            cls.auto = [s for s in snapshots(cls.store) if not s["tags"]]
        except BaseException:
            cell.close(failed=True)
            raise
        cell.close()
        assert half["steps"] == HALF and made["step"] == HALF, (half, made)
        cls.half = made["id"]
        cls.last = [s for s in snapshots(cls.store) if "last" in s["tags"]][0]["id"]
        tl.log("H1 %s; snapshots at %s" % (cls.first["params_sha256"],
                                           sorted(s["step"] for s in snapshots(cls.store))))

    @classmethod
    def create_direct(cls, addr):
        """CreateSnapshot through python3-grpcio, with the times around it (the CLI prints
        only some of the reply's fields)."""
        ch = tl.grpc.insecure_channel(addr)
        try:
            t0 = time.time()
            resp = tl.Stub(ch, tl.master_pb2, "Master").CreateSnapshot(
                tl.master_pb2.CreateSnapshotRequest(tag="direct-half-" + "x" * 100,
                                                    message="through grpcio"),
                timeout=60.0)
            return resp, t0, time.time()
        finally:
            ch.close()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_create_snapshot_reply_every_field(self):
        # The reply once pointed at the request's tag, freed before the reply was packed.
        resp, t0, t1 = self.direct
        ref = resp.snapshot
        listed = {s["id"]: s for s in snapshots(self.store)}
        self.assertRegex(ref.id, "^[0-9a-f]{64}$")
        self.assertIn(ref.id, listed)
        self.assertEqual(list(ref.tags), ["direct-half-" + "x" * 100])
        self.assertEqual(listed[ref.id]["tags"], list(ref.tags))
        self.assertEqual(ref.branch, "heads/" + listed[ref.id]["branch"])
        self.assertEqual(ref.branch, "heads/main")
        self.assertEqual(ref.step, HALF)
        self.assertLessEqual(int(t0 * 1000) - 1000, ref.created_unix_ms)
        self.assertLessEqual(ref.created_unix_ms, int(t1 * 1000) + 1000)
        # The CLI's snapshot of the same state came first and stored every chunk.
        self.assertEqual(resp.bytes_written, 0)
        self.assertGreaterEqual(resp.took_ms, 0)
        self.assertLessEqual(resp.took_ms, int((t1 - t0) * 1000) + 1)

    def test_continuing_in_place_equals_one_run(self):
        self.assertEqual(self.first["start_step"], HALF)
        self.assertEqual(self.first["params_sha256"], self.local["params_sha256"])

    def test_automatic_snapshots_at_multiples(self):
        self.assertTrue(self.auto, "no automatic snapshot was taken")
        for s in self.auto:
            self.assertEqual(s["step"] % EVERY, 0, s)

    def test_list_json_fields_and_history(self):
        snaps = snapshots(self.store)
        self.assertEqual({s["step"] for s in snaps if s["tags"]}, {HALF, STEPS})
        for s in snaps:
            for key in ("id", "step", "branch", "tags", "time"):
                self.assertIn(key, s)
            self.assertEqual(len(s["id"]), 64)
        m = manifest(self.store, self.last)
        self.assertEqual(m.step, STEPS)
        self.assertTrue(m.job.exact)
        self.assertEqual(m.schedule.seed, 7)
        self.assertEqual(m.schedule.micro_batch, 16)
        self.assertEqual(m.cluster.shards, 2)
        for t in m.tensors:                                 # every partition, in order
            self.assertEqual([p.index for p in t.partitions], list(range(len(t.partitions))))
            self.assertTrue(all(p.version == STEPS for p in t.partitions))
            # Its optimizer's update count (a run without assignments: one a step).
            self.assertTrue(all(p.HasField("optimizer_updates") and
                                p.optimizer_updates.updates == STEPS for p in t.partitions))
        log = json.loads(cli(["snapshot", "log", "--store", self.store, self.last,
                              "--json"]).stdout)
        steps = [e["step"] for e in log]            # the history links, newest first
        self.assertEqual(steps, sorted(steps, reverse=True))
        self.assertIn(self.half, [e["id"] for e in log])

    def restore_and_train(self, shards, workers, common=COMMON):
        store = os.path.join(self.tmp, "copy-%d-%d" % (shards, workers))
        shutil.copytree(self.store, store)
        cell = Cell(store, shards, restore=self.half)
        failed = True
        try:
            r = train(cell.master.addr, workers, STEPS, common=common)
            self.assertEqual(r["start_step"], HALF)
            self.assertEqual(r["params_sha256"], self.first["params_sha256"],
                             "restored at %d on %d shards, %d workers" % (HALF, shards, workers))
            made = json.loads(cli(["snapshot", "create", "--master", cell.master.addr, "--json",
                                   "-m", "restored", "--tag", "again"]).stdout)
            self.assertEqual(made["step"], STEPS)
            self.assertEqual(made["bytes_written"], 0, "the same bits are already stored")
            d = json.loads(cli(["snapshot", "diff", "--store", store, self.last, "again",
                                "--json"]).stdout)
            for t in d["tensors"]:
                self.assertEqual(t["change"], "same", t)
                self.assertEqual(t["chunks_shared"], t["chunks"])
            # A restored tensor keeps the placement salt it was snapshotted with, chosen for
            # the first run's two shards, whatever its new workers proposed.
            self.assertEqual(salts(store, "again"), salts(store, self.half))
            failed = False
        finally:
            cell.close(failed)

    def test_manifest_records_placement_salts(self):
        got = salts(self.store, self.half)
        self.assertEqual(set(got), {t.spec.name for t in manifest(self.store, self.half).tensors})
        # Some tensor of several partitions needed a salt to spread over the two shards.
        self.assertTrue(any(got.values()), got)

    def test_restore_three_shards_one_worker(self):
        self.restore_and_train(3, 1)

    def test_restore_one_shard_four_workers(self):
        self.restore_and_train(1, 4)

    def test_restore_keeps_the_snapshots_partition_size(self):
        # Without --partition-kb the workers only propose a size (4 MiB on one host); the
        # restored tensors keep the snapshot's 64 KiB partitions, and the workers take them
        # from the shards' answer (docs/placement.md, "Partition size").
        i = COMMON.index("--partition-kb")
        self.restore_and_train(2, 2, common=COMMON[:i] + COMMON[i + 2:])

    def test_diff_reports_change(self):
        d = json.loads(cli(["snapshot", "diff", "--store", self.store, self.half, self.last,
                            "--json"]).stdout)
        self.assertEqual((d["step_a"], d["step_b"]), (HALF, STEPS))
        for t in d["tensors"]:
            self.assertEqual(t["change"], "changed")
            self.assertGreater(t["l2"], 0)
            self.assertGreater(t["max_abs"], 0)
            self.assertGreater(t["changed_elements"], 0)

    def test_flipped_byte_refused_with_names(self):
        store = os.path.join(self.tmp, "flipped")
        shutil.copytree(self.store, store)
        m = manifest(store, self.half)
        fc1 = [t for t in m.tensors if t.spec.name == "fc1.weight"][0]
        chunk = fc1.partitions[0].value_chunks[0].hex()
        path = os.path.join(store, "chunks", chunk[:2], chunk)
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.seek(32 + 1000)
            b = f.read(1)
            f.seek(32 + 1000)
            f.write(bytes([b[0] ^ 0x01]))
        r = cli(["up", "--store", store, "--restore", self.half, "--master-port", "0",
                 "--dir", os.path.join(self.tmp, "flipped-logs")], timeout=60, ok=False)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(chunk, r.stderr)
        self.assertIn("fc1.weight", r.stderr)
        self.assertIn("nothing was started", r.stderr)
        self.assertNotIn("master 127.0.0.1", r.stdout)
        f = cli(["snapshot", "fsck", "--store", store], ok=False)
        self.assertEqual(f.returncode, 1)
        self.assertIn(chunk, f.stdout)
        clean = cli(["snapshot", "fsck", "--store", self.store], ok=False)
        self.assertEqual(clean.returncode, 0, clean.stdout)

    def test_gc_through_the_master_keeps_what_refs_reach(self):
        # The store may hold garbage (an automatic snapshot cut short when its cluster
        # stopped), and holds one orphan for certain: the first gc removes them, never a
        # chunk a ref reaches, and a second one finds nothing left to remove.
        store = os.path.join(self.tmp, "gc-store")   # a master moves HEAD: use a copy
        shutil.copytree(self.store, store)
        # An orphan for certain: a chunk no manifest names, under another (valid) id.
        fan = sorted(os.listdir(os.path.join(store, "chunks")))[0]
        name = sorted(os.listdir(os.path.join(store, "chunks", fan)))[0]
        orphan = os.path.join(store, "chunks", fan, fan + "0" * 62)
        if orphan.endswith(name):
            orphan = os.path.join(store, "chunks", fan, fan + "1" * 62)
        shutil.copyfile(os.path.join(store, "chunks", fan, name), orphan)
        cell = Cell(store, 1)
        try:
            runs = [cli(["snapshot", "gc", "--master", cell.master.addr]).stdout
                    for _ in range(2)]
        finally:
            cell.close()
        got = [re.match(r"gc: (\d+) chunks live; removed (\d+) chunks", r) for r in runs]
        self.assertTrue(all(got), runs)
        self.assertGreater(int(got[0].group(1)), 0)
        self.assertGreaterEqual(int(got[0].group(2)), 1, runs)
        self.assertFalse(os.path.exists(orphan))
        self.assertEqual(got[1].group(1), got[0].group(1), runs)
        self.assertEqual(int(got[1].group(2)), 0, runs)
        cli(["snapshot", "fsck", "--store", store])   # exits 1 if a ref lost a chunk

    def test_unknown_refs_and_bad_prefixes(self):
        for ref, want in (("nope", "no branch, tag or snapshot id"),
                          ("tags/nope", "not found"),
                          ("HEAD~99", "the history has only"),
                          ("main~x", "count of parents")):
            r = cli(["snapshot", "show", "--store", self.store, ref], ok=False)
            self.assertEqual(r.returncode, 1, ref)
            self.assertIn(want, r.stderr, ref)
        r = cli(["up", "--store", self.store, "--restore", "nope", "--master-port", "0"],
                ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing was started", r.stderr)
        r = cli(["snapshot", "frobnicate", "--store", self.store], ok=False)
        self.assertEqual(r.returncode, 2)

    def test_restore_refuses_another_optimizer(self):
        store = os.path.join(self.tmp, "mismatch")
        shutil.copytree(self.store, store)
        cell = Cell(store, 1, restore=self.half)
        try:
            r = cli(["train", "--master", cell.master.addr, "--workers", "1", "--steps",
                     str(STEPS), "--optimizer", "sgd:lr=0.1"] + COMMON, ok=False, timeout=120)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("job.optimizer", r.stderr)
            self.assertIn("continue with the snapshot's settings", r.stderr)
        finally:
            cell.close()

    def test_rollback_makes_branch_and_head(self):
        store = os.path.join(self.tmp, "rollback")
        shutil.copytree(self.store, store)
        r = cli(["snapshot", "rollback", "--store", store, self.half[:10], "--branch", "retry"])
        self.assertIn("tessera up --store DIR --restore retry", r.stdout)
        with open(os.path.join(store, "HEAD")) as f:
            self.assertEqual(f.read(), "heads/retry\n")
        shown = json.loads(cli(["snapshot", "show", "--store", store, "HEAD", "--json"]).stdout)
        self.assertEqual(shown["id"], self.half)
        r = cli(["snapshot", "rollback", "--store", store, self.last, "--branch", "retry"],
                ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists", r.stderr)


class ArmBeforeRegister(unittest.TestCase):
    """A snapshot armed while a job is still registering its tensors covers the late ones:
    the automatic loop may arm as soon as the first tensor of a job appears."""

    def test_late_tensor_is_captured(self):
        tmp = tempfile.mkdtemp(prefix="tessera-arm.")
        cell = Cell(os.path.join(tmp, "store"), 1)
        try:
            from tessera_testlib import master_pb2 as M, shard_pb2 as S, common_pb2 as C
            m = tl.Stub(cell.c.channel(cell.master.addr), M, "Master")
            smap = m.GetShardMap(M.GetShardMapRequest(), timeout=tl.RPC_TIMEOUT)
            sh = tl.Stub(cell.c.channel(smap.shards[0].addr), S, "Shard")
            job = C.JobSpec(id="late", workers=1, exact=True, optimizer="sgd:lr=0.1", batch=4)

            def register(name, tid):
                sh.RegisterTensor(S.RegisterTensorRequest(
                    job=job, tensor_id=tid, map_epoch=smap.epoch,
                    tensor=C.TensorSpec(name=name, dtype=C.DTYPE_F32, shape=[300],
                                        initializer="normal:0.1", seed=1)),
                    timeout=tl.RPC_TIMEOUT)
            register("first", 0)
            armed = sh.ArmSnapshot(S.ArmSnapshotRequest(job="late", step=0),
                                   timeout=tl.RPC_TIMEOUT)
            self.assertTrue(armed.armed)
            register("late", 1)
            r = sh.WriteSnapshot(S.WriteSnapshotRequest(job="late", step=0, wait_ms=2000),
                                 timeout=30)
            self.assertTrue(r.ready, "the late tensor was not captured")
            self.assertEqual(sorted(t.spec.name for t in r.tensors), ["first", "late"])
        finally:
            cell.close()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    tl.main()
