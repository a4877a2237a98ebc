#!/usr/bin/python3
"""torch_models.py - bench/torch_models: users' own models through tessera.torch against DDP
on gloo, step time, on one host and across emulated hosts (docs/python.md, "Real models").

The models are python/examples/torch_models.py's: torchvision's ResNet-18 on CIFAR-shaped
data and a 2-layer causal transformer language model on the GPL-3 text, 2 workers (one
process each, one torch thread each), global batch 64. Per model, place and round
(--rounds), three runs back to back: Tessera without overlap, Tessera with overlap="bucket",
DDP on gloo; the figure is rank 0's median step time (the example's step_ms_median: the
batch, forward, backward, the optimizer step with its push and pull, or DDP's all-reduce
and torch.optim), and per configuration the median over rounds and the median of the
rounds' ratios to DDP's step.
  - one host: `tessera up --shards 2` (mutual TLS, shared memory); DDP over loopback;
  - emulated hosts (--rates, default 1gbit; needs root): bench/emuhosts.Net with a master host
    m, shard hosts s0 s1 and worker hosts w0 w1, every link shaped with tc tbf; mutual TLS
    with certificates made for the run; shards --transport tcp; DDP between w0 and w1.
Each place runs its launcher's default replication unless --replicas says: tessera up's (2,
every partition on a chain of two shards, so a shard can die; DDP keeps no such copy) on one
host, tessera-master's (1) across hosts.
The goal (the issue's): at most 1.0x DDP's step on one host, at most 0.9x across hosts.

Output: a table on stdout and --out (default bench/results/torch_models.json) with every run
and the headline {ours, baseline, unit, ratio}: ResNet-18 across emulated hosts (on one host
when there are none), Tessera's better mode against DDP.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from emuhosts import Net, Procs  # noqa: E402
from torchbench import hosts_cluster, last_json  # noqa: E402

EXAMPLE = os.path.join(REPO, "python", "examples", "torch_models.py")
HOSTS = ["m", "s0", "s1", "w0", "w1"]
MASTER_PORT, SHARD_PORT, GLOO_PORT = 7070, 7001, 29600
RUNS = ("plain", "bucket", "ddp")


def log(msg):
    print("torch_models: " + msg, file=sys.stderr, flush=True)


class Place:
    """Where the ranks run: one host (hosts None) or emulated hosts at a rate."""

    def __init__(self, a, rate, procs, logs):
        self.a, self.rate, self.procs, self.logs = a, rate, procs, logs
        self.net = Net(HOSTS, rate=rate, tag="tmo", subnet="10.82.0") if rate else None
        self.cluster, self.master, self.gloo_port = [], None, GLOO_PORT

    def wrap(self, host, cmd):
        return self.net.wrap(host, cmd) if self.net else cmd

    def spawn(self, host, cmd, name, stdout=subprocess.DEVNULL):
        with open(os.path.join(self.logs, name + ".log"), "w") as err:
            return self.procs.start(self.wrap(host, cmd), stdout, err)

    def up(self):
        tessera = os.path.join(self.a.bin, "tessera")
        if not self.net:
            up = self.spawn("m", [tessera, "up", "--shards", "2", "--master-port", "0"] +
                            (["--replicas", str(self.a.replicas)] if self.a.replicas else []) +
                            ["--dir", os.path.join(self.logs, "up")], "up",
                            stdout=subprocess.PIPE)
            self.cluster = [up]
            for line in up.stdout:
                line = line.decode()
                if line.startswith("master "):
                    self.master = line.split()[1]
                if line.startswith("export TESSERA_TLS_DIR="):
                    os.environ["TESSERA_TLS_DIR"] = line.split("=", 1)[1].strip()
                if "shards alive" in line:
                    return
            raise RuntimeError("tessera up did not start (logs in %s)" % self.logs)
        self.net.up()
        self.master, self.cluster = hosts_cluster(self.net, self.a.bin, self.spawn, self.logs,
                                                  MASTER_PORT, SHARD_PORT, self.a.replicas or 1)

    def ranks(self, model, run, job):
        """Two ranks of the example; rank 0's JSON result."""
        self.gloo_port += 1   # a fresh port each time: no wait for the last one's TIME_WAIT
        base = [sys.executable, EXAMPLE, "--model", model, "--steps",
                str(self.a.steps[model]), "--workers", "2", "--batch", "64"]
        if run == "ddp":
            where = ["--ddp", "%s:%d" % (self.net.addr("w0") if self.net else "127.0.0.1",
                                         self.gloo_port)]
        else:
            where = ["--master", self.master, "--job", job] + \
                (["--overlap", "bucket"] if run == "bucket" else [])
        procs = [self.spawn("w%d" % r, base + where + ["--rank", str(r)], "%s-%d" % (job, r),
                            stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL)
                 for r in range(2)]
        try:
            out = procs[0].stdout.read().decode()
            codes = [p.wait(timeout=3600) for p in procs]
        finally:
            self.procs.stop(procs)
        if any(codes):
            raise RuntimeError("%s: ranks exited %s (logs in %s)" % (job, codes, self.logs))
        return last_json(out, job)

    def down(self):
        self.procs.stop(self.cluster)
        if self.net:
            self.net.down()


def summarize(where, model, rounds):
    ms = {k: [r[k]["step_ms_median"] for r in rounds] for k in RUNS}

    def ratio(x):
        return round(statistics.median([a / b for a, b in zip(ms[x], ms["ddp"])]), 3)
    return {"where": where, "model": model, "rounds": len(rounds),
            "step_ms": {k: round(statistics.median(v), 2) for k, v in ms.items()},
            "step_ms_rounds": {k: [round(x, 2) for x in v] for k, v in ms.items()},
            "vs_ddp": {k: ratio(k) for k in RUNS[:-1]},
            "loss_last": {k: round(statistics.median(r[k]["loss_last"] for r in rounds), 4)
                          for k in RUNS}}


def parse():
    p = argparse.ArgumentParser(description="tessera.torch against DDP on gloo on ResNet-18 "
                                "and a transformer LM, step time, on one host and across "
                                "emulated hosts (docs/python.md).")
    p.add_argument("--rounds", type=int, default=3, help="rounds per configuration (default 3)")
    p.add_argument("--models", default="resnet18,transformer",
                   help="comma-separated (default resnet18,transformer)")
    p.add_argument("--steps", default="resnet18=30,transformer=80",
                   help="steps per run, per model (default resnet18=30,transformer=80)")
    p.add_argument("--rates", default="1gbit", help="emulated link rates, comma-separated "
                   "(default 1gbit); 'none' skips the emulated hosts")
    p.add_argument("--no-one-host", action="store_true", help="skip the one-host runs")
    p.add_argument("--replicas", type=int, help="shards holding each partition (default: the "
                   "launcher's, 2 on one host, 1 across hosts; 1: no replication)")
    p.add_argument("--bin", default=os.environ.get("TESSERA_BIN") or
                   os.path.join(REPO, "build", "bin"), help="tessera, tessera-master, "
                   "tessera-shard (default build/bin)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch_models.json"),
                   help="the JSON report (default bench/results/torch_models.json)")
    a = p.parse_args()
    a.models = a.models.split(",")
    try:
        a.steps = {k: int(v) for k, v in (kv.split("=") for kv in a.steps.split(","))}
    except ValueError:
        p.error("--steps %r: MODEL=N,... expected" % a.steps)
    if any(m not in a.steps for m in a.models):
        p.error("--steps: a count for each of %s expected" % ",".join(a.models))
    a.rates = [] if a.rates == "none" else a.rates.split(",")
    if a.rounds < 1:
        p.error("--rounds >= 1 expected")
    return a


def main():
    a = parse()
    os.environ.setdefault("TESSERA_LOG", "warn")
    runs, summaries = [], []
    for rate in ([None] if not a.no_one_host else []) + a.rates:
        where = "hosts " + rate if rate else "one host"
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0" if rate else "lo"
        logs = tempfile.mkdtemp(prefix="torch_models.")
        procs = Procs("torch_models")
        place = Place(a, rate, procs, logs)
        try:
            place.up()
            for model in a.models:
                rounds = []
                for k in range(a.rounds):
                    log("%s, %s, round %d" % (where, model, k + 1))
                    rnd = {run: place.ranks(model, run, "%s-%s-%d" % (model, run, k))
                           for run in RUNS}
                    rounds.append(rnd)
                    runs.append({"where": where, "model": model, "round": k, **rnd})
                summaries.append(summarize(where, model, rounds))
        finally:
            procs.stop()
            place.down()
    print("%-12s %-12s " % ("where", "model") + " ".join("%10s" % (k + " ms") for k in RUNS) +
          " " + " ".join("%11s" % (k + "/ddp") for k in RUNS[:-1]))
    for s in summaries:
        print("%-12s %-12s " % (s["where"], s["model"]) +
              " ".join("%10.1f" % s["step_ms"][k] for k in RUNS) + " " +
              " ".join("%10.2fx" % s["vs_ddp"][k] for k in RUNS[:-1]))
    heads = [s for s in summaries if s["model"] == "resnet18"] or summaries
    head = next((s for s in heads if s["where"] != "one host"), heads[0] if heads else None)
    best = head and min(RUNS[:-1], key=lambda k: head["vs_ddp"][k])
    report = {"bench": "torch_models", "rounds": a.rounds, "steps": a.steps,
              "replicas": a.replicas,
              "machine": os.cpu_count(),
              "headline": head and {"ours": head["step_ms"][best],
                                    "baseline": head["step_ms"]["ddp"],
                                    "unit": "ms per step (rank 0's median), %s on %s, "
                                            "tessera.torch (%s, replicas %s) against DDP "
                                            "on gloo" % (head["model"], head["where"], best,
                                                         a.replicas or "default"),
                                    "ratio": head["vs_ddp"][best]},
              "summaries": summaries, "runs": runs}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
