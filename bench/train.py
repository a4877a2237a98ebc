#!/usr/bin/python3
"""train.py - bench/train: what does the cluster cost an epoch of the demo's training?

Why: `tessera demo` trains the MLP with 2 worker processes against 2 shards; the issue's goal is
that an epoch that way takes at most 1.3x the time of `tessera train --local` (one process, the
same partitions applied in-process), in exact mode. This script measures, in one run:

    local exact   tessera train --local --epochs E --exact --json
    dist exact    tessera train --master ADDR --workers 2 --epochs E --exact --json
    local float   the same without --exact
    dist float
    dist exact --no-elastic   the cost of elastic workers (docs/elastic.md): the default keeps a
                  copy of each step's parameters and pulls them rather than mapping the shards'

against one `tessera up --shards 2 --master-port 0` started here (and stopped by pid with
SIGTERM at the end, on errors and on Ctrl-C too). Each configuration runs --reps times (default
2; the configurations take turns, so a change in the machine's load hits them alike) and the
median of the JSON's `seconds` is reported: the training loop of rank 0, including its epoch-end
accuracy passes, without process start-up and data loading. The exact runs must end with the
same params_sha256 locally and distributed, or the run fails: exact mode promises it.
Each run also records the CPU time the rest of the machine used meanwhile (/proc/stat minus
our processes): a large figure means another load disturbed that run.
Output: a table on stdout and bench/results/train.json with the headline
{"ours": dist exact s/epoch, "baseline": local exact s/epoch, "unit", "ratio"}.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

GOAL = 1.3
CONFIGS = [("local", True, False), ("dist", True, False), ("local", False, False),
           ("dist", False, False), ("dist", True, True)]
HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """Busy CPU seconds of the whole machine so far (all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / TICK


def tree(pid):
    """pid and its live descendants: {pid: utime + stime in seconds}."""
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[p] = (int(fields[11]) + int(fields[12])) / TICK
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, IndexError, ValueError):
            pass  # it ended meanwhile
    return out


class Cluster:
    """`tessera up` as a child process; stop() sends SIGTERM to its pid and waits. env: more
    environment for it (bench/python_buffers.py uses this class too); args: more flags of
    `tessera up` (bench/table_tiers.py: the disk tier's)."""

    def __init__(self, binary, workdir, env=None, replicas=1, args=()):
        self.proc = subprocess.Popen(
            # The data path alone: replication's cost is bench/recovery.py's to measure
            # (bench/embeddings.py's copies row asks for replicas 2).
            [binary, "up", "--shards", "2", "--replicas", str(replicas), "--master-port", "0",
             "--dir", workdir] + list(args),
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
        self.master = None
        deadline = time.monotonic() + 30
        for line in self.proc.stdout:  # "master ADDR", then "2 shards alive; ..."
            if line.startswith("master "):
                self.master = line.split()[1]
            # Its mutual TLS (the default): this process's clients (python_buffers.py) and
            # what it starts need the certificates it made.
            if line.startswith("export TESSERA_TLS_DIR="):
                os.environ["TESSERA_TLS_DIR"] = line.strip().split("=", 1)[1]
            if "shards alive" in line or time.monotonic() > deadline:
                break
        if not self.master or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"tessera up did not start (logs in {workdir})")

    def cpu_s(self):
        return sum(tree(self.proc.pid).values())

    def stop(self):
        """SIGTERM to `tessera up`, which stops its master and shards (SIGKILL after 10 s
        each); a shard still there after that (its parent was killed) gets SIGKILL by pid."""
        kids = [p for p in tree(self.proc.pid) if p != self.proc.pid]
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        for pid in kids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"tessera-" in f.read():
                        os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # gone, as it should be


def train(binary, cluster, where, exact, rigid, epochs):
    """One `tessera train`; returns its JSON line plus the machine's other CPU meanwhile."""
    cmd = [binary, "train", "--epochs", str(epochs), "--json"]
    cmd += ["--local"] if where == "local" else ["--master", cluster.master, "--workers", "2"]
    cmd += ["--exact"] if exact else []
    cmd += ["--no-elastic"] if rigid else []
    busy0, ours0 = machine_busy_s(), cluster.cpu_s()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = cluster.cpu_s() - ours0 + (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}; its stderr is above")
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed no JSON line")
    r = json.loads(lines[-1])
    r["other_cpu_s"] = round(machine_busy_s() - busy0 - ours, 2)
    return r


def summarize(runs):
    """Per configuration: median seconds and samples/s, the fingerprint, the other CPU."""
    out = {}
    for (where, exact, rigid), rs in runs.items():
        name = f"{where} {'exact' if exact else 'float'}{' rigid' if rigid else ''}"
        out[name] = {"where": where, "exact": exact,
                     "seconds": round(statistics.median(r["seconds"] for r in rs), 3),
                     "samples_per_s": round(statistics.median(r["samples_per_s"] for r in rs)),
                     "steps": rs[0]["steps"], "transport": rs[0]["transport"],
                     "test_accuracy": rs[0]["test_accuracy"],
                     "params_sha256": rs[0]["params_sha256"],
                     "runs_seconds": [r["seconds"] for r in rs],
                     "other_cpu_s": [r["other_cpu_s"] for r in rs]}
    return out


def report(s, a, quick, ok, notes):
    le, de, lf, df = (s["local exact"], s["dist exact"], s["local float"], s["dist float"])
    print(f"\nbench/train.py: {os.cpu_count()} cpus; MLP 784-256-128-10 on Fashion-MNIST, "
          f"{a.epochs} epoch(s), {le['steps']} steps of batch 64; median of {a.reps} run(s) "
          "each;\ndist = tessera train --workers 2 against tessera up --shards 2 "
          f"(transport {de['transport']}); seconds = the JSON's `seconds`\n")
    print(f"{'config':16} | {'seconds':>8} | {'samples/s':>9} | {'vs local':>8} | "
          f"{'runs (s)':>13} | {'other CPU s':>11}")
    print("-" * 17 + "+" + "-" * 10 + "+" + "-" * 11 + "+" + "-" * 10 + "+" + "-" * 15 + "+" +
          "-" * 12)
    for name, local in (("local exact", le), ("dist exact", le), ("local float", lf),
                        ("dist float", lf), ("dist exact rigid", le)):
        r = s[name]
        runs = ", ".join(f"{x:.2f}" for x in r["runs_seconds"])
        other = ", ".join(f"{x:.1f}".replace("-0.0", "0.0") for x in r["other_cpu_s"])
        print(f"{name:16} | {r['seconds']:8.2f} | {r['samples_per_s']:9.0f} | "
              f"{r['seconds'] / local['seconds']:7.2f}x | {runs:>13} | {other:>11}")
    ratio = de["seconds"] / le["seconds"]
    print(f"\nexact / float step time: distributed {de['seconds'] / df['seconds']:.2f}x, "
          f"local {le['seconds'] / lf['seconds']:.2f}x")
    elastic = de["seconds"] / s["dist exact rigid"]["seconds"]
    print(f"elastic workers (the default) / --no-elastic (\"rigid\"), dist exact: "
          f"{elastic:.2f}x")
    print(f"goal: dist exact <= {GOAL}x local exact: {ratio:.2f}x: "
          f"{'met' if ratio <= GOAL else 'NOT met'}")
    for n in notes:
        print(f"NOTE: {n}")
    result = {"name": "train", "machine": f"{os.cpu_count()} cpus", "ok": ok, "quick": quick,
              "epochs": a.epochs, "reps": a.reps, "configs": s,
              "exact_over_float": {"dist": round(de["seconds"] / df["seconds"], 3),
                                   "local": round(le["seconds"] / lf["seconds"], 3)},
              "elastic_over_rigid": round(elastic, 3),
              "notes": notes,
              "headline": {"ours": de["seconds"], "baseline": le["seconds"],
                           "unit": "s per epoch (2 workers x 2 shards vs --local, exact)",
                           "ratio": round(ratio, 3)}}
    if a.epochs != 1:
        result["headline"]["unit"] = f"s per {a.epochs} epochs (2 workers x 2 shards vs " \
                                     "--local, exact)"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}")


def main():
    ap = argparse.ArgumentParser(
        description="Epoch time of the demo's shape (tessera up --shards 2, tessera train "
                    "--workers 2) against tessera train --local, exact and float mode.")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run (default 1)")
    ap.add_argument("--reps", type=int, default=None,
                    help="runs of each configuration, median taken (default 2; --quick: 1)")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="where the tessera binary is (default: ../build/bin from this script)")
    ap.add_argument("--out", default="bench/results/train.json",
                    help="results (default bench/results/train.json)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run of each")
    a = ap.parse_args()
    a.reps = a.reps or (1 if a.quick else 2)
    if a.epochs < 1 or a.reps < 1:
        sys.exit("train.py: --epochs and --reps must be >= 1")
    binary = os.path.join(a.bin, "tessera")
    if not os.access(binary, os.X_OK):
        sys.exit(f"train.py: no executable {binary}: build first (make build) or pass --bin")

    # SIGTERM/SIGHUP become KeyboardInterrupt, so the finally below stops the cluster.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    cluster, logs = None, tempfile.mkdtemp(prefix="ts-bench-train-")
    try:
        cluster = Cluster(binary, logs)
        print(f"cluster: master {cluster.master}; {len(CONFIGS)} configs x {a.reps} runs of "
              f"{a.epochs} epoch(s)...", file=sys.stderr)
        runs = {c: [] for c in CONFIGS}
        for rep in range(a.reps):
            for where, exact, rigid in CONFIGS:
                r = train(binary, cluster, where, exact, rigid, a.epochs)
                print(f"  run {rep + 1}: {where} {'exact' if exact else 'float'}"
                      f"{' --no-elastic' if rigid else ''}: {r['seconds']:.2f} s",
                      file=sys.stderr)
                runs[(where, exact, rigid)].append(r)
    except (RuntimeError, KeyboardInterrupt) as e:
        sys.exit(f"train.py: {str(e) or 'interrupted'} (cluster logs in {logs})")
    finally:
        if cluster:
            cluster.stop()
    shutil.rmtree(logs, ignore_errors=True)
    s = summarize(runs)
    notes = []
    if s["local exact"]["params_sha256"] != s["dist exact"]["params_sha256"]:
        notes.append("exact mode: params_sha256 differs between --local and 2 workers x 2 "
                     "shards (it must not)")
    report(s, a, a.quick, not notes, notes)
    return 0 if not notes else 1


if __name__ == "__main__":
    sys.exit(main())
