#!/usr/bin/python3
"""pause_matrix.py - the master or a head shard stopped (SIGSTOP) at a random moment of exact
training, for a while, then continued; nothing may be lost and the stall is bounded.

A stopped process is not a dead one: its sockets stay open, the kernel still acknowledges
what is sent to it, and it comes back with its old view of the world (a frozen VM, a swap
storm, a stop-the-world pause). Each trial starts `tessera up --shards 3 --replicas 2
--lease-ms L`, runs `tessera train --workers 2 --exact` on it (rank 0 slowed, so that the run
outlasts the shorter pauses), and at a random version stops the victim:
- the master, for 5, 15 and 60 s (docs/membership.md, "A paused master"): it must declare no
  member dead when it resumes, and the job must go on (the data plane does not wait for it);
- a shard heading partitions of the job, for 5, 30 and 150 s (docs/replication.md, "A hung
  head"): the master drops it at its lease, the workers leave it at the next epoch and fail
  over to its followers; it comes back to a map without it and joins again.
Then, for the trial to pass:
- the training ends by itself with exit 0 and the params_sha256 of `tessera train --local`
  with the same steps;
- the stall, from the stop to the second step past the newest version held just after it
  (polled on ShardStatus of the shards that are not stopped), is under 2 leases for a shard
  and under the pause plus 2 leases for the master;
- a stopped shard was declared dead by its lease only when the pause was longer than it
  (shard_failures), a stopped master declared no one dead;
- the cluster stops cleanly: no process of it outlives `tessera up`'s SIGTERM.

With --model ctr: the CTR trainer (8 sparse tables with copies and a dense MLP,
docs/embeddings.md) on a cluster with a store and automatic snapshots every 10 steps (after
a shard is dropped the rows are copied anew; the woken shard joins and the rows move to it):
the same checks, the tables' rows in the fingerprint.

Prints a line per trial and a table; exits 1 if any trial failed. `make test-fault` runs the
six pauses; `make test` one shard pause of 8 s (integration/pause_matrix_short). Usage:
pause_matrix.py --help.
"""

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clusterlib as cl  # noqa: E402

JOB = "pm"
SLOW = ("--slow", "0:30")   # rank 0 sleeps 30 ms a step: about 20 steps a second here
CTR = ("--model", "ctr", "--batch", "128", "--micro", "32")


def model_args(a):
    return CTR if a.model == "ctr" else ()


def parse_pauses(text):
    """"master:5,shard:30" -> [("master", 5.0), ("shard", 30.0)]."""
    out = []
    for item in text.split(","):
        kind, _, secs = item.partition(":")
        if kind not in ("master", "shard") or not secs:
            raise argparse.ArgumentTypeError("%r: want master:SECONDS or shard:SECONDS" % item)
        out.append((kind, float(secs)))
    return out


def trial(a, binary, rng, want, kind, pause_s):
    rec = {"kind": kind, "pause_s": pause_s, "errors": []}
    lease_s = a.lease_ms / 1000.0
    logs = tempfile.mkdtemp(prefix="tessera-pause.")
    rec["logs"] = logs
    c = cl.Cluster(binary, logs, shards=3, replicas=2, lease_ms=a.lease_ms,
                   extra=("--store", os.path.join(logs, "store"), "--snapshot-every", "10")
                   if a.model == "ctr" else ())
    cont = None
    try:
        p = cl.train(binary, c.master, a.steps, JOB, extra=SLOW + model_args(a))
        ids = list(c.shards)
        at = rng.randrange(20, 120)
        _, heads, _ = cl.wait_version(c, JOB, ids, at, p, 120)
        if kind == "master":
            pid, survivors = c.status().master_pid, ids
        else:
            victim = rng.choice(sorted(heads))
            pid, survivors = c.pid(victim), [i for i in ids if i != victim]
            rec["victim"] = victim
        failures = c.status().shard_failures
        rec["pid"] = pid
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        cont = threading.Timer(pause_s, os.kill, (pid, signal.SIGCONT))
        cont.start()
        v, _ = c.version(JOB, survivors)
        rec["at"] = v
        try:
            cl.wait_version(c, JOB, survivors, v + 2, p, pause_s + 120)
            rec["stall_s"] = time.monotonic() - t0
        except RuntimeError as e:
            if p.poll() is None:
                raise
            rec["stall_s"] = time.monotonic() - t0   # the run ended: it did not stall
            rec["ended_in_pause"] = str(e)
        bound = 2 * lease_s + (pause_s if kind == "master" else 0)
        if rec["stall_s"] > bound:
            rec["errors"].append("stalled %.1f s, the bound is %.1f s" % (rec["stall_s"], bound))
        got, err = cl.result(p, "tessera train", timeout=pause_s + 600, stderr=True)
        with open(os.path.join(logs, "train.stderr"), "w") as f:
            f.write(err)
        if got["params_sha256"] != want:
            rec["errors"].append("params_sha256 %s, --local %s" % (got["params_sha256"], want))
        cont.join()
        # The master answers again once continued; what it decided while the victim slept.
        st = cl.wait_status(c, 30)
        died = st.shard_failures - failures
        rec["declared_dead"] = died
        if kind == "master" and died:
            rec["errors"].append("the paused master declared %d shard(s) dead" % died)
        if kind == "shard" and pause_s > 2 * lease_s and died < 1:
            rec["errors"].append("a shard stopped %.0f s was not declared dead" % pause_s)
        if kind == "master" and "declared dead" in err:
            rec["errors"].append("tessera train saw a member declared dead: %s" % err[-500:])
        rec["failovers"] = got.get("failovers")
    except (RuntimeError, OSError) as e:
        rec["errors"].append(str(e)[-1500:])
    finally:
        if cont:
            cont.cancel()
            try:
                os.kill(rec["pid"], signal.SIGCONT)
            except (KeyError, ProcessLookupError):
                pass
        left = c.stop()
        if left:
            rec["errors"].append("%d process(es) outlived tessera up: %s" % (len(left), left))
    if not rec["errors"]:
        shutil.rmtree(logs, ignore_errors=True)
    return rec


def table(trials, a):
    print("\n%-8s %8s %9s %9s %7s %s" % ("victim", "pause s", "stall s", "bound s", "dead",
                                          "result"))
    for t in trials:
        bound = 2 * a.lease_ms / 1000.0 + (t["pause_s"] if t["kind"] == "master" else 0)
        print("%-8s %8.0f %9s %9.1f %7s %s" % (
            t["kind"], t["pause_s"], "%.2f" % t["stall_s"] if "stall_s" in t else "-", bound,
            t.get("declared_dead", "-"), "FAILED" if t["errors"] else "ok"))
    stalls = [t["stall_s"] for t in trials if t["kind"] == "shard" and "stall_s" in t]
    if stalls:
        print("shard pauses: median stall %.2f s (lease %.1f s)" %
              (statistics.median(stalls), a.lease_ms / 1000.0))


def main():
    ap = argparse.ArgumentParser(
        prog="pause_matrix.py", description="SIGSTOP of the master or of a head shard at a "
        "random moment of exact training with --replicas 2, then SIGCONT: each run must end "
        "with the --local fingerprint, stall at most 2 leases (a shard) or the pause plus 2 "
        "leases (the master), and leave no process behind.")
    ap.add_argument("--pauses", type=parse_pauses,
                    default=parse_pauses("master:5,master:15,master:60,shard:5,shard:30,"
                                         "shard:150"),
                    help="KIND:SECONDS,... (default master:5,master:15,master:60,shard:5,"
                    "shard:30,shard:150)")
    ap.add_argument("--steps", type=int, default=1200, help="steps of each training "
                    "(default 1200: about a minute)")
    ap.add_argument("--lease-ms", type=int, default=3000, help="member lease (default 3000)")
    ap.add_argument("--model", choices=("mlp", "ctr"), default="mlp",
                    help="mlp (default: the MLP on Fashion-MNIST) or ctr (sparse tables; the "
                    "cluster keeps automatic snapshots every 10 steps)")
    cl.trial_args(ap, "moments and victims")
    a = ap.parse_args()
    seed, rng = cl.seeded(a, "pause_matrix")
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    cl.exit_on_sigterm()
    want = cl.result(cl.train(binary, None, a.steps, extra=model_args(a)),
                     "tessera train --local")["params_sha256"]
    trials = []
    for i, (kind, pause_s) in enumerate(a.pauses):
        t = trial(a, binary, rng, want, kind, pause_s)
        trials.append(t)
        print("trial %d: %s stopped %.0f s at version %s: %s%s" % (
            i + 1, "the master" if kind == "master" else "shard %s" % t.get("victim"),
            pause_s, t.get("at"), "FAILED: " + "; ".join(t["errors"]) if t["errors"] else "ok",
            ", stall %.2f s" % t["stall_s"] if "stall_s" in t else ""), flush=True)
        if t["errors"]:
            print("  (logs are in %s)" % t["logs"], flush=True)
    table(trials, a)
    return cl.trials_done(a, seed, trials)


if __name__ == "__main__":
    sys.exit(main())
