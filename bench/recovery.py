#!/usr/bin/python3
"""recovery.py - bench/recovery: what does a dead shard cost a job with replicas?

Two figures, both against `tessera up` clusters started here (docs/replication.md):

1. Recovery. Each trial starts `tessera up --shards 3 --replicas 2 --lease-ms L`, runs
   `tessera train --workers 2 --exact` on it, and once the job has stepped a while kills -9 a
   shard that heads some of its partitions (chosen at random, seeded). The recovery time is
   from the kill to the first step completed after it: polling the survivors' ShardStatus
   every few ms until the job's newest version is 2 past the newest they held just after the
   kill (one step may still complete without the dead shard; the one after needs the
   failover).
   Every trial's training must end by itself with the params_sha256 of `tessera train
   --local`, or the run fails.
2. Cost. The same training, 300 steps, on `--replicas 1` and `--replicas 2` clusters, rounds
   alternating; the median of the JSON's `seconds` of each (the built-in MLP, about 1 MiB of
   parameters). And bench_pushpull's 64 MiB push+pull step (shm, float, 2 workers on 2
   shards) on a master with `--replicas 1` and `--replicas 2`, rounds alternating.

3. The master. The same training; once it has stepped a while the master is killed -9, and
   `tessera up` starts it again (after its 0.5 s backoff: the baseline) with the state it kept
   (docs/membership.md). Two times from the kill: to the next step completed (2 past the
   newest held just after the kill, as above: the data plane does not wait for the master;
   its baseline, two steps timed the same way just before the kill),
   and to the restarted master answering ClusterStatus with its state (restored, the same
   shards alive). The training must end at the --local fingerprint.

4. A worker. The same training with 3 workers (elastic, docs/elastic.md); once it has
   stepped a while a random worker is killed -9: time from the kill to the next step completed
   (2 past the newest held just after the kill: the dead worker's slot must have moved to a
   live worker, which computes it), against its baseline, two steps timed the same way just
   before the kill. The training must end at the --local fingerprint.

5. Joining. A third shard started while the job trains on `tessera up --shards 2` (R = 2):
   seconds from its start to being on the ring (it joined, got its copies, and a new epoch
   put it on), and the longest wait between two steps from its start to 2 s after (the
   workers move to the new heads), against the longest wait over 3.5 s just before; the
   training must still end at the --local fingerprint.

6. A pause. The same training; once it has stepped a while the master, or a shard heading
   some of the job's partitions, is stopped (SIGSTOP: a frozen VM, a swap storm) for
   --pause-s (default 10 s, over three leases), then continued. Time from the stop to the
   next step completed (2 past the newest held just after the stop, polled on the shards not
   stopped), against two steps just before; the goal is 2 leases (docs/replication.md, "A
   hung head"; docs/membership.md, "A paused master"). The training must end at the --local
   fingerprint.

Output: a table, and bench/results/recovery.json whose headline is the 64 MiB cost:
{"ours": R = 2 ms per step, "baseline": R = 1 ms per step, "unit", "ratio"}, with the MLP's
and the recovery figures beside it ("recovery": median, max, each trial).
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fault"))
import clusterlib as cl  # noqa: E402
from clusterlib import Cluster, result, train  # noqa: E402

RECOVERY_GOAL_S = 3.0
RESTART_BACKOFF_S = 0.5   # tessera up's first restart delay: a master cannot be back sooner
COST_GOAL = 1.3


def trial(a, binary, rng, want):
    with tempfile.TemporaryDirectory(prefix="tessera-recovery.") as d:
        c = Cluster(binary, d, lease_ms=a.lease_ms)
        try:
            p = train(binary, c.master, a.steps, "rec")
            ids = list(c.shards)
            _, heads, _ = cl.wait_version(c, "rec", ids, a.kill_at, p, 120)
            victim = rng.choice(sorted(heads))
            os.kill(c.pid(victim), signal.SIGKILL)
            t0 = time.monotonic()
            survivors = [i for i in ids if i != victim]
            # Read after the kill: one more step may complete without the dead shard (its
            # pushes were in), not two.
            v, _ = c.version("rec", survivors)
            cl.wait_version(c, "rec", survivors, v + 2, p, 120)
            took = time.monotonic() - t0
            got = result(p, "tessera train")
            if got["params_sha256"] != want:
                raise RuntimeError("params_sha256 %s after the kill, %s without" %
                                   (got["params_sha256"], want))
            return {"seconds": took, "victim": victim, "killed_at_version": v}
        finally:
            c.stop()


def timed_kill(a, binary, want, job, workers, pick, after=None):
    """Trains job with `workers` workers and, once it has stepped a while, kills -9 the process
    pick(cluster, training) names, returning (pid, record); after(cluster, record, t0), if
    given, runs once the next step is done. Returns the record with the seconds from the
    kill to the next step and, its baseline, for two steps just before the kill."""
    with tempfile.TemporaryDirectory(prefix="tessera-recovery-%s." % job) as d:
        c = Cluster(binary, d, lease_ms=a.lease_ms)
        try:
            p = train(binary, c.master, a.steps, job, workers=workers)
            ids = list(c.shards)
            cl.wait_version(c, job, ids, a.kill_at, p, 120)
            t0 = time.monotonic()
            v, _ = c.version(job, ids)
            cl.wait_version(c, job, ids, v + 2, p, 120)
            two = time.monotonic() - t0
            pid, out = pick(c, p)
            os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            v, _ = c.version(job, ids)
            cl.wait_version(c, job, ids, v + 2, p, 120)
            out.update(step_s=time.monotonic() - t0, two_steps_s=two, killed_at_version=v)
            if after:
                after(c, out, t0)
            got = result(p, "tessera train")
            if got["params_sha256"] != want:
                raise RuntimeError("params_sha256 %s after the kill, %s without" %
                                   (got["params_sha256"], want))
            return out
        finally:
            c.stop()


def pause_trial(a, binary, rng, want, kind):
    """Stops the master (kind "master") or a head shard (kind "shard") of a training for
    a.pause_s: the seconds from the stop to the next step, and its baseline, two steps just
    before."""
    job = "recp" + kind[0]
    with tempfile.TemporaryDirectory(prefix="tessera-recovery-%s." % job) as d:
        c = Cluster(binary, d, lease_ms=a.lease_ms)
        cont = None
        try:
            p = train(binary, c.master, a.steps, job)
            ids = list(c.shards)
            _, heads, _ = cl.wait_version(c, job, ids, a.kill_at, p, 120)
            t0 = time.monotonic()
            v, _ = c.version(job, ids)
            cl.wait_version(c, job, ids, v + 2, p, 120)
            two = time.monotonic() - t0
            if kind == "master":
                pid, survivors, out = c.status().master_pid, ids, {}
            else:
                victim = rng.choice(sorted(heads))
                pid, survivors = c.pid(victim), [i for i in ids if i != victim]
                out = {"victim": victim}
            os.kill(pid, signal.SIGSTOP)
            t0 = time.monotonic()
            cont = threading.Timer(a.pause_s, os.kill, (pid, signal.SIGCONT))
            cont.start()
            v, _ = c.version(job, survivors)
            cl.wait_version(c, job, survivors, v + 2, p, 120 + a.pause_s)
            out.update(step_s=time.monotonic() - t0, two_steps_s=two, stopped_at_version=v)
            got = result(p, "tessera train")
            if got["params_sha256"] != want:
                raise RuntimeError("params_sha256 %s after the pause, %s without" %
                                   (got["params_sha256"], want))
            return out
        finally:
            if cont:
                cont.cancel()
                cont.join()
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            c.stop()


def master_trial(a, binary, want):
    """Kills the master of a training run under `tessera up`: timed_kill's figures, and the
    seconds to the restarted master answering with its state."""
    def pick(c, p):
        before = c.status()
        return before.master_pid, {"before": before}

    def after(c, out, t0):
        back, wrong = cl.master_back(c, out.pop("before"), 60)
        if wrong:
            raise RuntimeError("; ".join(wrong))
        out["back_s"] = back - t0
    return timed_kill(a, binary, want, "recm", 2, pick, after)


def worker_trial(a, binary, rng, want):
    """Kills a random worker of a 3-worker training (docs/elastic.md): timed_kill's figures."""
    rank = rng.randrange(3)

    def pick(c, p):
        pid = cl.worker_pid(p, rank)
        if pid is None:
            raise RuntimeError("no worker of rank %d" % rank)
        return pid, {"rank": rank}
    return timed_kill(a, binary, want, "recw", 3, pick)


def longest_gap(c, job, ids, seconds, p, until=None):
    """Polls the job's newest version over ids for `seconds` (or until until() is true, then
    `seconds` more); returns the longest time between two advances, in seconds."""
    last_v, last_t, gap = -1, time.monotonic(), 0.0
    end = None if until else last_t + seconds
    while end is None or time.monotonic() < end:
        v, _ = c.version(job, ids)
        now = time.monotonic()
        if v != last_v:
            gap, last_v, last_t = max(gap, now - last_t), v, now
        if end is None and until():
            end = now + seconds
        if p.poll() is not None:
            break
    return max(gap, time.monotonic() - last_t)


def join_trial(a, binary, want):
    """A third shard started once the job stepped a while on 2 shards (R = 2): seconds from
    its start to being on the ring, and the longest wait between two steps from its start
    to 2 s after that (the workers move to the new heads once the old ones hear of the new
    map), against the longest wait over as long just before it started."""
    with tempfile.TemporaryDirectory(prefix="tessera-join.") as d:
        c = Cluster(binary, d, shards=2, lease_ms=a.lease_ms)
        extra = None
        try:
            p = train(binary, c.master, a.steps, "grow")
            ids = list(c.shards)
            cl.wait_version(c, "grow", ids, a.kill_at, p, 120)
            before = longest_gap(c, "grow", ids, 3.5, p)
            log = open(os.path.join(d, "shard-joined.log"), "w")
            extra = c.start_shard(a.bin, "joined", log, ["--lease-ms", str(a.lease_ms)])
            t0 = time.monotonic()
            state = {"seen": False, "joined": None}

            def on_ring():
                if state["joined"] is None:
                    shards = [s for s in c.status().shards if s.state == 1]
                    state["seen"] |= any(s.joining for s in shards)
                    if len(shards) == 3 and state["seen"] and \
                            not any(s.joining for s in shards):
                        state["joined"] = time.monotonic() - t0
                return state["joined"] is not None
            during = longest_gap(c, "grow", ids, 2.0, p, until=on_ring)
            if state["joined"] is None:
                raise RuntimeError("the new shard did not join while the job trained")
            got = result(p, "tessera train")
            if got["params_sha256"] != want:
                raise RuntimeError("params_sha256 %s with the join, %s without" %
                                   (got["params_sha256"], want))
            return {"join_s": state["joined"], "gap_s": during, "gap_before_s": before}
        finally:
            if extra:
                cl.stop_group(extra)
            c.stop()


def pushpull(a):
    """bench_pushpull's 64 MiB push+pull step (shm, the workers' own buffers, float) on a
    master with --replicas 1 and 2, rounds alternating: {R: [median ms of each round]}."""
    runs = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="tessera-recovery.") as d:
        for _ in range(a.rounds):
            for r in (1, 2):
                out = os.path.join(d, "pp%d.json" % r)
                p = subprocess.run([os.path.join(a.bin, "bench_pushpull"), "--sizes", "64",
                                    "--transports", "shm", "--buffers", "own", "--iters",
                                    str(a.pp_iters), "--replicas", str(r), "--out", out],
                                   capture_output=True, text=True, timeout=600)
                if p.returncode != 0:
                    raise RuntimeError("bench_pushpull --replicas %d exited %d:\n%s" %
                                       (r, p.returncode, p.stderr[-2000:]))
                with open(out) as f:
                    runs[r].append(json.load(f)["runs"][0]["median_ms"])
    return runs


def cost(a, binary):
    runs = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="tessera-recovery.") as d:
        clusters = {}
        for r in (1, 2):
            os.makedirs(os.path.join(d, "r%d" % r))
            clusters[r] = Cluster(binary, os.path.join(d, "r%d" % r), replicas=r)
        try:
            for _ in range(a.rounds):
                for r in (1, 2):
                    # Each cluster has its own CA; the one made last set the environment.
                    os.environ["TESSERA_TLS_DIR"] = clusters[r].tls_dir
                    runs[r].append(result(train(binary, clusters[r].master, 300),
                                          "tessera train")["seconds"])
        finally:
            for c in clusters.values():
                c.stop()
    return runs


def next_step_rows(label, trials):
    """Prints timed_kill's figures over trials, kill -> next step against its baseline (two
    steps, nothing killed); returns them for the JSON."""
    ks = [t["step_s"] for t in trials]
    two = [t["two_steps_s"] for t in trials]
    print("%-44s %9.3fs %9.3fs %7.1fs" % (label, statistics.median(ks), max(ks),
                                           RECOVERY_GOAL_S))
    print("%-44s %9.3fs %9.3fs  (kill / that: %.2f)" % (
        "  two steps, nothing killed (baseline)", statistics.median(two), max(two),
        statistics.median(ks) / statistics.median(two)))
    return {"step_median_s": statistics.median(ks), "step_max_s": max(ks),
            "two_steps_median_s": statistics.median(two)}


def repeat(n, run, say):
    """n trials of run(), each printed as say(its number from 1, its record); the records."""
    out = []
    for i in range(n):
        out.append(run())
        print(say(i + 1, out[-1]), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(
        prog="recovery.py", description="Recovery time after kill -9 of a shard with "
        "--replicas 2, and the step time with replicas against without (docs/replication.md).")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="directory of tessera and its services (default build/bin)")
    ap.add_argument("--trials", type=int, default=5, help="kills (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="cost rounds per R (default 3)")
    ap.add_argument("--lease-ms", type=int, default=3000, help="member lease (default 3000, "
                    "the master's)")
    ap.add_argument("--steps", type=int, default=3000, help="steps of each trial's training")
    ap.add_argument("--kill-at", type=int, default=300, help="the step after which to kill")
    ap.add_argument("--seed", type=int, default=1, help="which shards are killed")
    ap.add_argument("--master-trials", type=int, default=5, help="kills of the master "
                    "(default 5)")
    ap.add_argument("--worker-trials", type=int, default=5, help="kills of a worker of 3 "
                    "(default 5)")
    ap.add_argument("--pause-trials", type=int, default=3, help="pauses of the master and of "
                    "a head shard, each (default 3)")
    ap.add_argument("--pause-s", type=float, default=10.0, help="how long a pause lasts "
                    "(default 10 s)")
    ap.add_argument("--join-trials", type=int, default=3, help="shards that join a running "
                    "job (default 3)")
    ap.add_argument("--out", default="bench/results/recovery.json")
    ap.add_argument("--pp-iters", type=int, default=10, help="timed steps of each 64 MiB "
                    "push+pull run (default 10)")
    ap.add_argument("--quick", action="store_true", help="2 trials, 1 round, 1000 steps, 3 "
                    "push+pull steps")
    a = ap.parse_args()
    if a.quick:
        a.trials, a.rounds, a.steps, a.pp_iters, a.join_trials = 2, 1, 1000, 3, 1
        a.master_trials = a.worker_trials = a.pause_trials = 2
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    cl.exit_on_sigterm()
    rng = random.Random(a.seed)
    want = result(train(binary, None, a.steps), "tessera train --local")["params_sha256"]
    trials = repeat(a.trials, lambda: trial(a, binary, rng, want), lambda i, t: (
        "trial %d: shard %d killed after step %d, a step completed %.2f s later; params_sha256 "
        "equal to --local" % (i, t["victim"], t["killed_at_version"], t["seconds"])))
    masters = repeat(a.master_trials, lambda: master_trial(a, binary, want), lambda i, t: (
        "master %d: killed after step %d; a step completed %.3f s later, the master back with "
        "its state %.2f s later; params_sha256 equal to --local" %
        (i, t["killed_at_version"], t["step_s"], t["back_s"])))
    workers = repeat(a.worker_trials, lambda: worker_trial(a, binary, rng, want), lambda i, t: (
        "worker %d: rank %d killed after step %d; a step completed %.3f s later (two steps "
        "before: %.3f s); params_sha256 equal to --local" %
        (i, t["rank"], t["killed_at_version"], t["step_s"], t["two_steps_s"])))
    pauses = {kind: repeat(a.pause_trials, lambda: pause_trial(a, binary, rng, want, kind),
                           lambda i, t: (
        "pause %d: %s stopped %.0f s after step %d; a step completed %.3f s later (two steps "
        "before: %.3f s); params_sha256 equal to --local" % (
            i, "the master" if kind == "master" else "shard %d" % t["victim"], a.pause_s,
            t["stopped_at_version"], t["step_s"], t["two_steps_s"])))
              for kind in ("master", "shard")}
    joins = repeat(a.join_trials, lambda: join_trial(a, binary, want), lambda i, t: (
        "join %d: on the ring %.2f s after it started; longest wait between steps %.3f s "
        "(before it started: %.3f s); params_sha256 equal to --local" %
        (i, t["join_s"], t["gap_s"], t["gap_before_s"])))
    runs = cost(a, binary)
    pp = pushpull(a)
    rec = [t["seconds"] for t in trials]
    r1, r2 = statistics.median(runs[1]), statistics.median(runs[2])
    p1, p2 = statistics.median(pp[1]), statistics.median(pp[2])
    print("\nbench_recovery: 3 shards, 2 exact workers (tessera train), lease %d ms, one "
          "host" % a.lease_ms)
    print("%-44s %10s %10s %8s" % ("", "median", "max", "goal"))
    print("%-44s %9.2fs %9.2fs %7.1fs" % ("recovery: kill -9 of a head -> next step",
                                           statistics.median(rec), max(rec), RECOVERY_GOAL_S))
    # The baseline of the recovery: the lease, what detection takes without a report (the
    # master drops a silent shard once it has run out).
    print("%-44s %9.2fs %9s  (recovery / lease: %.2f)" % (
        "the lease (--lease-ms, the baseline)", a.lease_ms / 1000.0, "",
        statistics.median(rec) / (a.lease_ms / 1000.0)))
    master = {"trials": masters, "baseline_backoff_s": RESTART_BACKOFF_S,
              "goal_s": RECOVERY_GOAL_S}
    if masters:
        mb = [t["back_s"] for t in masters]
        master.update(next_step_rows("master kill -9 -> next step", masters),
                      back_median_s=statistics.median(mb), back_max_s=max(mb))
        print("%-44s %9.2fs %9.2fs %7.1fs" % ("master kill -9 -> back with its state",
                                               statistics.median(mb), max(mb), RECOVERY_GOAL_S))
        print("%-44s %9.2fs %9s  (back / that: %.2f)" % (
            "  the restart's backoff (baseline)", RESTART_BACKOFF_S, "",
            statistics.median(mb) / RESTART_BACKOFF_S))
    worker = {"trials": workers, "goal_s": RECOVERY_GOAL_S}
    if workers:
        worker.update(next_step_rows("worker kill -9 -> next step (3 workers)", workers))
    paused = {}
    for kind, label in (("master", "master SIGSTOP %.0f s -> next step"),
                        ("shard", "head shard SIGSTOP %.0f s -> next step")):
        if pauses[kind]:
            ps = [t["step_s"] for t in pauses[kind]]
            two = [t["two_steps_s"] for t in pauses[kind]]
            goal = 2 * a.lease_ms / 1000.0
            print("%-44s %9.3fs %9.3fs %7.1fs" % (label % a.pause_s, statistics.median(ps),
                                                   max(ps), goal))
            print("%-44s %9.3fs %9.3fs  (pause / that: %.1f)" % (
                "  two steps, nothing stopped (baseline)", statistics.median(two), max(two),
                statistics.median(ps) / statistics.median(two)))
            paused[kind] = {"trials": pauses[kind], "pause_s": a.pause_s, "goal_s": goal,
                            "step_median_s": statistics.median(ps), "step_max_s": max(ps),
                            "two_steps_median_s": statistics.median(two)}
    if joins:
        js = [t["join_s"] for t in joins]
        sw = [t["gap_s"] for t in joins]
        ts = [t["gap_before_s"] for t in joins]
        print("%-44s %9.2fs %9.2fs" % ("join: shard start -> on the ring (2 -> 3)",
                                       statistics.median(js), max(js)))
        # The baseline: the shards hear of the joining shard at a heartbeat and report the
        # copies done at a later one, a third of the lease apart (phases vary: not a floor).
        print("%-44s %9.2fs %9s  (join / that: %.2f)" % (
            "  two heartbeats, 2 x lease/3 (baseline)", 2 * a.lease_ms / 3000.0, "",
            statistics.median(js) / (2 * a.lease_ms / 3000.0)))
        print("%-44s %9.3fs %9.3fs" % ("join: longest wait between steps", statistics.median(sw),
                                       max(sw)))
        print("%-44s %9.3fs %9.3fs" % ("  the same before it (baseline)",
                                       statistics.median(ts), max(ts)))
    print("%-44s %9.3fs %9.3fs" % ("300 steps, --replicas 1 (baseline)", r1, max(runs[1])))
    print("%-44s %9.3fs %9.3fs %7.1fx" % ("300 steps, --replicas 2", r2, max(runs[2]),
                                           COST_GOAL))
    print("%-44s %8.1fms %8.1fms" % ("64 MiB push+pull, --replicas 1 (baseline)", p1,
                                      max(pp[1])))
    print("%-44s %8.1fms %8.1fms %7.1fx" % ("64 MiB push+pull, --replicas 2", p2, max(pp[2]),
                                            COST_GOAL))
    print("ratio R=2 / R=1: %.2fx at 64 MiB, %.2fx for the MLP's 300 steps (goal at most "
          "%.1fx)" % (p2 / p1, r2 / r1, COST_GOAL))
    doc = {"bench": "recovery", "lease_ms": a.lease_ms, "steps": a.steps,
           "headline": {"ours": p2, "baseline": p1,
                        "unit": "ms per push+pull step of 64 MiB (bench_pushpull, shm, float, "
                                "2 workers x 2 shards), --replicas 2 (ours) against 1",
                        "ratio": p2 / p1},
           "mlp_300_steps": {"replicas_2_s": r2, "replicas_1_s": r1, "ratio": r2 / r1},
           "pushpull_64mib_runs": {"replicas_1_ms": pp[1], "replicas_2_ms": pp[2]},
           "recovery": {"median_s": statistics.median(rec), "max_s": max(rec),
                        "goal_s": RECOVERY_GOAL_S, "baseline_lease_s": a.lease_ms / 1000.0,
                        "ratio_to_lease": statistics.median(rec) / (a.lease_ms / 1000.0),
                        "trials": trials},
           "cost_runs": {"replicas_1": runs[1], "replicas_2": runs[2]},
           "join": {"trials": joins, "baseline_two_heartbeats_s": 2 * a.lease_ms / 3000.0},
           "master": master, "worker": worker, "pause": paused}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
