#!/usr/bin/python3
"""kill_matrix.py - a shard, a worker or the master killed at random moments of exact training;
nothing may be lost.

Each trial starts `tessera up --shards 3 --replicas 2` (default lease), runs `tessera train
--workers 3 --exact`, and at a random step (and a random few milliseconds after it, so that
the kill lands in a push, between head and tail, in a pull or in a re-replication) kills -9 a
random process: one of the shards, one of the workers or the master (each process one chance
in 7; `tessera up` restarts a master with the state it kept, docs/membership.md; a dead
worker's slot moves to a live one, docs/elastic.md). Then, for the trial to pass:
- the training ends by itself with exit 0, and its params_sha256 equals `tessera train
  --local` with the same steps (computed once);
- acknowledged steps lost is 0: every partition's version on the survivors equals the steps
  run (a step acknowledged and then lost would leave a partition behind, and a worker that
  pushed past it would have been refused);
- `tessera verify replicas` passes: every partition has 2 equal copies again, on survivors;
- a shard victim: the master declared it dead; a master victim: the restarted master took its
  state back (ClusterStatus: restored, master_restarts 1), its epoch is above the one before
  the kill, and the shards are the same ids, alive; a worker victim: its slot was taken over
  (the job's `adopted` is 1 or more) and `tessera train` said so;
- the cluster stops cleanly: no process of it or of the training outlives `tessera up`'s
  SIGTERM.
The recovery time is from the kill to the second step past the newest version the survivors
hold just after it (that one step may complete without the dead shard, not two), polled on
the survivors' ShardStatus; for a master, also the time until the restarted master answers
with its state (`master back`).

With --mode reduce: a reduce job on --replicas 1, so that a dead shard takes every copy of
the partitions it held and the workers seed them again (docs/replication.md, "Reduce jobs
that lose every copy"); the victim is a shard or the master, and the same checks hold.

With --model ctr: the CTR trainer (8 sparse tables and a dense MLP, docs/embeddings.md) on a
cluster with a store and automatic snapshots every 10 steps, so that after a shard's death
the master copies the rows anew (a held snapshot and a move): the same checks, the tables'
rows in the fingerprint.

Prints a line per trial and a table; exits 1 if any trial failed. `make test-fault` runs 50
trials (KILL_TRIALS=N to change), `make test` 3 (integration/kill_matrix_short). Usage:
kill_matrix.py --help.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clusterlib as cl  # noqa: E402

JOB = "km"
WORKERS = 3


def verify_replicas(binary, master, wait_s=10):
    """`tessera verify replicas --json` until it passes or wait_s passed (a chain that gained
    a member gets its copy from the head's repair thread): (exit code, JSON or None, text)."""
    until = time.monotonic() + wait_s
    while True:
        r = subprocess.run([binary, "verify", "replicas", "--master", master, "--job", JOB,
                            "--json"], capture_output=True, text=True, timeout=60)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
        if r.returncode == 0 or time.monotonic() > until:
            return r.returncode, doc, r.stdout + r.stderr
        time.sleep(0.5)


def replicas(a):
    """bsp: 2 copies of each partition; reduce: 1, so that a shard's death loses every copy
    of its partitions and the workers seed them (docs/replication.md)."""
    return 1 if a.mode == "reduce" else 2


def mode_args(a):
    return (("--mode", "reduce") if a.mode == "reduce" else ()) + (
        ("--model", "ctr", "--batch", "128", "--micro", "32") if a.model == "ctr" else ())


def cluster_args(a, d):
    """A store and automatic snapshots for the CTR trainer's tables (their re-copy after a
    death needs them)."""
    return (("--store", os.path.join(d, "store"), "--snapshot-every", "10")
            if a.model == "ctr" else ())


def trial(a, binary, rng, want):
    """One kill; returns a dict of what was seen (its "errors" empty when it passed)."""
    errors = []
    out = {"errors": errors}
    d = tempfile.mkdtemp(prefix="tessera-killmatrix.")
    c = cl.Cluster(binary, d, shards=a.shards, replicas=replicas(a), lease_ms=a.lease_ms,
                   extra=cluster_args(a, d))
    p = None
    try:
        p = cl.train(binary, c.master, a.steps, JOB, workers=WORKERS,
                     extra=("--keep",) + mode_args(a))
        ids = sorted(c.shards)
        at = rng.randrange(a.steps // 10, a.steps * 6 // 10)
        # A reduce job's worker holds its own parameters: one that dies stops the job
        # (docs/elastic.md), so there only shards and the master are killed.
        victim = rng.choice(ids + ["master"] + ([] if a.mode == "reduce" else
                                                ["worker %d" % r for r in range(WORKERS)]))
        delay_ms = rng.randrange(0, 30)
        v, heads, _ = cl.wait_version(c, JOB, ids, at, p, 120, poll_s=0.002)
        before = c.status()
        time.sleep(delay_ms / 1000.0)
        worker = str(victim).startswith("worker")
        out.update(victim=victim, at=v, delay_ms=delay_ms,
                   role="master" if victim == "master" else "worker" if worker else
                   "head" if victim in heads else "follower")
        pid = (before.master_pid if victim == "master" else
               cl.worker_pid(p, int(victim.split()[1])) if worker else c.pid(victim))
        if pid is None:
            raise RuntimeError("no process for %s" % victim)
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        survivors = [i for i in ids if i != victim]
        # Read after the kill: a step past the next one needs the failover.
        v, _ = c.version(JOB, survivors)
        try:
            cl.wait_version(c, JOB, survivors, v + 2, p, 120, poll_s=0.002)
            out["recovery_s"] = time.monotonic() - t0
        except RuntimeError:
            pass   # the training ended first (killed near its end): no recovery figure
        if victim == "master":
            back, wrong = cl.master_back(c, before)
            out["master_back_s"] = back - t0
            errors.extend(wrong)
        got, said = cl.result(p, "tessera train", timeout=300, stderr=True)
        out["seconds"] = time.monotonic() - t0
        out["equal"] = got["params_sha256"] == want
        if not out["equal"]:
            errors.append("params_sha256 %s, --local %s" % (got["params_sha256"], want))
        rc, doc, text = verify_replicas(binary, c.master)
        if rc != 0 or not doc:
            errors.append("tessera verify replicas exited %d: %s" % (rc, text[-600:]))
            out["lost"] = None
        else:
            out["lost"] = sum(max(0, a.steps - x["version"]) for x in doc["details"])
            if out["lost"]:
                errors.append("%d acknowledged steps missing from partitions" % out["lost"])
        if worker:
            job = [j for j in c.status().jobs if j.id == JOB][0]
            if job.adopted < 1:
                errors.append("the job's slots were not taken over (adopted %d)" % job.adopted)
            if "%s was killed (signal 9); the others take over its share" % victim not in said:
                errors.append("tessera train did not say %s was killed" % victim)
        elif victim != "master":
            dead = [s for s in c.status().shards if s.id == victim][0]
            out["death"] = dead.death
            if not dead.death:
                errors.append("the master did not declare shard %d dead" % victim)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        errors.append(str(e))
    finally:
        if p is not None:
            left = cl.stop_group(p, grace_s=5)
            if left:
                errors.append("training processes left: %s" % left)
        left = c.stop()
        out["left"] = len(left)
        if left:
            errors.append("cluster processes left after SIGTERM: %s" % left)
    if errors:
        out["logs"] = d      # kept for the reader
    else:
        shutil.rmtree(d, ignore_errors=True)
    return out


def table(trials, a):
    ok = [t for t in trials if not t["errors"]]
    rec = [t["recovery_s"] for t in trials if "recovery_s" in t]
    back = [t["master_back_s"] for t in trials if "master_back_s" in t]
    print("\nkill_matrix: %d shards, --replicas %d, mode %s, model %s, %d exact workers, %d "
          "steps, kill -9 of a random shard, %sthe master at a random step" % (
              a.shards, replicas(a), a.mode, a.model, WORKERS, a.steps,
              "" if a.mode == "reduce" else "worker or "))
    print("%-40s %s" % ("trials", len(trials)))
    for role, what in (("head", "  a shard heading partitions"),
                       ("follower", "  a shard heading none"), ("worker", "  a worker"),
                       ("master", "  the master")):
        print("%-40s %d" % (what, sum(1 for t in trials if t.get("role") == role)))
    print("%-40s %d of %d" % ("params_sha256 equal to --local",
                              sum(1 for t in trials if t.get("equal")), len(trials)))
    print("%-40s %s" % ("acknowledged steps lost",
                        sum(t["lost"] or 0 for t in trials if "lost" in t)))
    print("%-40s %d" % ("processes left after the stop", sum(t.get("left", 0) for t in trials)))
    if rec:
        print("%-40s median %.2f s, max %.2f s (%d trials)" % (
            "recovery: kill -> 2nd step after it", statistics.median(rec), max(rec), len(rec)))
    if back:
        print("%-40s median %.2f s, max %.2f s (%d trials)" % (
            "master: kill -> back with its state", statistics.median(back), max(back),
            len(back)))
    print("%-40s %d of %d" % ("trials passed", len(ok), len(trials)))


def main():
    ap = argparse.ArgumentParser(
        prog="kill_matrix.py", description="Random kill -9 of a shard, a worker or the master "
        "during "
        "exact training with --replicas 2: each run must end with the --local fingerprint, "
        "lose no acknowledged step, have whole chains again and leave no process behind.")
    ap.add_argument("--trials", type=int, default=50, help="kills (default 50)")
    ap.add_argument("--steps", type=int, default=800, help="steps of each training "
                    "(default 800)")
    ap.add_argument("--shards", type=int, default=3, help="shards (default 3)")
    ap.add_argument("--lease-ms", type=int, default=3000, help="member lease (default 3000)")
    ap.add_argument("--mode", choices=("bsp", "reduce"), default="bsp",
                    help="bsp (default, --replicas 2) or reduce (--replicas 1: the workers "
                    "seed the partitions a dead shard held)")
    ap.add_argument("--model", choices=("mlp", "ctr"), default="mlp",
                    help="mlp (default: the MLP on Fashion-MNIST) or ctr (sparse tables; the "
                    "cluster keeps automatic snapshots every 10 steps)")
    cl.trial_args(ap, "victims, steps and delays")
    a = ap.parse_args()
    seed, rng = cl.seeded(a, "kill_matrix")
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    cl.exit_on_sigterm()
    want = cl.result(cl.train(binary, None, a.steps, extra=mode_args(a)),
                     "tessera train --local")["params_sha256"]
    trials = []
    for i in range(a.trials):
        t = trial(a, binary, rng, want)
        trials.append(t)
        print("trial %2d: %s (%s) killed %d ms after step %s: %s%s" % (
            i + 1, "the master" if t.get("victim") == "master" else
            t.get("victim") if t.get("role") == "worker" else
            "shard %s" % t.get("victim"), t.get("role"), t.get("delay_ms", 0), t.get("at"),
            "FAILED: " + "; ".join(t["errors"]) if t["errors"] else "ok",
            ", recovery %.2f s" % t["recovery_s"] if "recovery_s" in t else ""), flush=True)
        if t["errors"]:
            print("  (logs were in %s)" % t["logs"], flush=True)
    table(trials, a)
    return cl.trials_done(a, seed, trials)


if __name__ == "__main__":
    sys.exit(main())
