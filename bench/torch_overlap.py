#!/usr/bin/python3
"""torch_overlap.py - bench/torch_overlap: tessera.torch with overlap against without and
against DDP on gloo, on the example's training loop (python/examples/fashion_mnist_torch.py).

Why: tessera.torch's overlap=True (docs/python.md, "Overlap") pushes each bucket of gradients
while backward still runs and pulls the next version in forward order behind forward
pre-hooks. The issue's goal: the example's step time at most DDP-on-gloo's in the same run, on
one host and across emulated hosts, with exact mode's bits unchanged.

Per configuration (--hidden: the MLP 784-H-H/2-10; 256 is the example's model) and round
(--rounds), three runs of --steps steps each, 2 workers / 2 ranks, back to back:
  1. Tessera without overlap, 2. Tessera with overlap (same cluster, a job each), 3. DDP.
The figure is rank 0's median step time (the example's step_ms_median: gathering the samples,
forward, backward, push and pull or allreduce); per configuration the median over rounds and
the median of the rounds' ratios (each round's runs are minutes apart at most, so a ratio
compares like with like on a shared machine). Every round also checks that overlap gave the
same params_sha256 as without (float: the same sums in the same order, so the same bits).
  - one host: the example's own --compare (`tessera up`, 2 shards, shared memory);
  - emulated hosts (--rates, default 1gbit; needs root): bench/emuhosts.Net with a master
    host m, shard hosts s0 s1 and worker hosts w0 w1, every link shaped with tc tbf; shards
    --transport tcp; DDP's ranks on w0 and w1 over eth0.

Output: a table on stdout and --out (default bench/results/torch_overlap.json) with every run
and the headline {ours: overlapped Tessera's step, baseline: DDP's, unit, ratio} of the
example's own model on one host; `headlines` has one per configuration.
Cleanup: every process in its own session, stopped by group; namespaces die with their holders
(bench/emuhosts.py), also when this process is killed.
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

EXAMPLE = os.path.join(REPO, "python", "examples", "fashion_mnist_torch.py")
HOSTS = ["m", "s0", "s1", "w0", "w1"]
MASTER_PORT, SHARD_PORT, GLOO_PORT = 7070, 7001, 29500


def log(msg):
    print("torch_overlap: " + msg, file=sys.stderr, flush=True)


def example_args(a, hidden, partition_kb):
    return ["--steps", str(a.steps), "--hidden", str(hidden), "--bucket-kb",
            str(a.bucket_kb), "--partition-kb", str(partition_kb), "--json"]


def one_host_round(a, hidden):
    """The example's --compare: {plain, MODE..., ddp} results of rank 0."""
    cmd = [sys.executable, EXAMPLE, "--compare", "--tessera-bin", a.bin,
           "--compare-overlap", ",".join(a.modes)] + example_args(a, hidden, a.partition_kb)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, timeout=1800)
    s = last_json(r.stdout, "--compare")
    if r.returncode:
        raise RuntimeError("--compare exited %d:\n%s" % (r.returncode, r.stdout[-2000:]))
    return dict(plain=s["tessera"], ddp=s["ddp"], **s["tessera_overlap"])


class Hosts:
    """Emulated hosts at one rate, a master and two shards on them."""

    def __init__(self, a, rate, procs, logs):
        self.a, self.rate, self.procs, self.logs = a, rate, procs, logs
        self.net = Net(HOSTS, rate=rate, tag="tov%s" % rate[:3], subnet="10.81.0")
        self.cluster, self.gloo_port = [], GLOO_PORT

    def spawn(self, host, cmd, name, stdout=subprocess.DEVNULL):
        with open(os.path.join(self.logs, name + ".log"), "w") as err:
            return self.procs.start(self.net.wrap(host, cmd), stdout, err)

    def up(self):
        self.net.up()
        self.master, self.cluster = hosts_cluster(self.net, self.a.bin, self.spawn, self.logs,
                                                  MASTER_PORT, SHARD_PORT)

    def ranks(self, argvs, name):
        """One example process per worker host; rank 0's JSON result."""
        procs = [self.spawn("w%d" % r, [sys.executable, EXAMPLE] + argv,
                            "%s-%d" % (name, r), stdout=subprocess.PIPE if r == 0 else
                            subprocess.DEVNULL) for r, argv in enumerate(argvs)]
        try:
            out = procs[0].stdout.read().decode()
            codes = [p.wait(timeout=1800) for p in procs]
        finally:
            self.procs.stop(procs)
        if any(codes):
            raise RuntimeError("%s: ranks exited %s (logs in %s)" % (name, codes, self.logs))
        return last_json(out, name)

    def round(self, hidden, k):
        res, pkb = {}, self.a.hosts_partition_kb
        for mode in ["plain"] + self.a.modes:
            job = "tov-%d-%d-%s" % (hidden, k, mode)
            res[mode] = self.ranks(
                [example_args(self.a, hidden, pkb) + ["--master", self.master, "--job", job,
                                                      "--rank", str(r), "--workers", "2"] +
                 (["--overlap", mode] if mode != "plain" else []) for r in range(2)], job)
        self.gloo_port += 1   # a fresh port each time: no wait for the last one's TIME_WAIT
        res["ddp"] = self.ranks(
            [example_args(self.a, hidden, pkb) + ["--ddp", "--workers", "2", "--ddp-rank", str(r),
                                             "--ddp-port", str(self.gloo_port),
                                             "--ddp-addr", self.net.addr("w0")]
             for r in range(2)], "ddp-%d-%d" % (hidden, k))
        return res

    def down(self):
        self.procs.stop(self.cluster)
        self.net.down()


def summarize(where, hidden, rounds, modes):
    """Medians over rounds of each run's step, and the medians of the rounds' ratios."""
    runs = ["plain"] + modes + ["ddp"]
    ms = {k: [r[k]["step_ms_median"] for r in rounds] for k in runs}

    def ratio(x, y):
        return round(statistics.median([a / b for a, b in zip(ms[x], ms[y])]), 3)
    return {"where": where, "hidden": hidden, "rounds": len(rounds),
            "step_ms": {k: round(statistics.median(v), 3) for k, v in ms.items()},
            "step_ms_rounds": {k: [round(x, 3) for x in v] for k, v in ms.items()},
            "cpu_ms": {k: round(statistics.median(r[k]["step_cpu_ms_median"] for r in rounds),
                                3) for k in runs},
            "vs_ddp": {k: ratio(k, "ddp") for k in runs[:-1]},
            "vs_plain": {k: ratio(k, "plain") for k in modes},
            "same_bits": all(r["plain"]["params_sha256"] == r[m]["params_sha256"]
                             for r in rounds for m in modes)}


def parse():
    p = argparse.ArgumentParser(description="tessera.torch with overlap against without and "
                                "against DDP on gloo, on the Fashion-MNIST example's loop, on "
                                "one host and across emulated hosts (docs/python.md).")
    p.add_argument("--rounds", type=int, default=3, help="rounds per configuration (default 3)")
    p.add_argument("--steps", type=int, default=300, help="steps per run (default 300)")
    p.add_argument("--hidden", default="256,2048",
                   help="MLP widths H (784-H-H/2-10), comma-separated (default 256,2048)")
    p.add_argument("--rates", default="1gbit", help="emulated link rates, comma-separated "
                   "(default 1gbit); 'none' skips the emulated hosts")
    p.add_argument("--no-one-host", action="store_true", help="skip the one-host runs")
    p.add_argument("--bucket-kb", type=int, default=-1,
                   help="overlap's bucket size in KiB (default -1: tessera.torch's default)")
    p.add_argument("--modes", default="forward,bucket",
                   help="overlap modes run besides Tessera without overlap (default "
                   "forward,bucket)")
    p.add_argument("--partition-kb", type=int, default=0,
                   help="Tessera partitions on one host, KiB (default 0: the SDK's 4 MiB)")
    p.add_argument("--hosts-partition-kb", type=int, default=60,
                   help="... across emulated hosts (default 60: the tensors spread over both "
                   "shards' links, each partition's pull follows its push, and no frame ends "
                   "in a segment of its header alone: docs/transport.md, \"Across hosts\")")
    p.add_argument("--bin", default=os.environ.get("TESSERA_BIN") or
                   os.path.join(REPO, "build", "bin"), help="tessera, tessera-master, "
                   "tessera-shard (default build/bin)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch_overlap.json"),
                   help="the JSON report (default bench/results/torch_overlap.json)")
    a = p.parse_args()
    try:
        a.hidden = [int(h) for h in a.hidden.split(",")]
    except ValueError:
        p.error("--hidden %r: comma-separated ints expected" % a.hidden)
    a.rates = [] if a.rates == "none" else a.rates.split(",")
    a.modes = a.modes.split(",")
    if any(m not in ("forward", "bucket") for m in a.modes):
        p.error("--modes %r: 'forward' and/or 'bucket' expected" % ",".join(a.modes))
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    from tessera._overlap import DEFAULT_OVERLAP
    a.default = DEFAULT_OVERLAP
    if a.rounds < 1 or a.steps < 10:
        p.error("--rounds >= 1 and --steps >= 10 expected")
    return a


def main():
    a = parse()
    os.environ.setdefault("TESSERA_LOG", "warn")
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0" if a.rates else "lo"
    runs, summaries = [], []
    if not a.no_one_host:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        for h in a.hidden:
            rounds = []
            for k in range(a.rounds):
                log("one host, hidden %d, round %d" % (h, k + 1))
                rounds.append(one_host_round(a, h))
                runs.append({"where": "one host", "hidden": h, "round": k, **rounds[-1]})
            summaries.append(summarize("one host", h, rounds, a.modes))
    for rate in a.rates:
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
        logs = tempfile.mkdtemp(prefix="torch_overlap.")
        procs = Procs("torch_overlap")
        hosts = Hosts(a, rate, procs, logs)
        try:
            hosts.up()
            for h in a.hidden:
                rounds = []
                for k in range(a.rounds):
                    log("hosts at %s, hidden %d, round %d" % (rate, h, k + 1))
                    rounds.append(hosts.round(h, k))
                    runs.append({"where": "hosts " + rate, "hidden": h, "round": k,
                                 **rounds[-1]})
                summaries.append(summarize("hosts " + rate, h, rounds, a.modes))
        finally:
            procs.stop()
            hosts.down()
    runs_ = ["plain"] + a.modes + ["ddp"]
    print("%-12s %6s " % ("where", "hidden") + " ".join("%9s" % (k + " ms") for k in runs_) +
          " " + " ".join("%9s" % (k + "/ddp") for k in runs_[:-1]) + "  bits")
    for s in summaries:
        print("%-12s %6d " % (s["where"], s["hidden"]) +
              " ".join("%9.2f" % s["step_ms"][k] for k in runs_) + " " +
              " ".join("%8.2fx" % s["vs_ddp"][k] for k in runs_[:-1]) +
              ("  same" if s["same_bits"] else "  DIFF"))
    best = a.default if a.default in a.modes else "plain"
    heads = [{"where": s["where"], "hidden": s["hidden"], "ours": s["step_ms"][best],
              "baseline": s["step_ms"]["ddp"], "ratio": s["vs_ddp"][best]} for s in summaries]
    head = next((h for h in heads if h["hidden"] == 256), heads[0] if heads else None)
    report = {"bench": "torch_overlap", "steps": a.steps, "rounds": a.rounds,
              "bucket_kb": a.bucket_kb, "machine": os.cpu_count(),
              "headline": head and {"ours": head["ours"], "baseline": head["baseline"],
                                    "unit": "ms per step (rank 0's median), Tessera with "
                                            "overlap=True (" + best + ") against DDP on gloo, "
                                            "2 workers, "
                                            "MLP 784-%d-%d-10, %s; ratio: the median of the "
                                            "rounds' ratios" % (head["hidden"],
                                                                head["hidden"] // 2,
                                                                head["where"]),
                                    "ratio": head["ratio"]},
              "headlines": heads, "summaries": summaries, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print("wrote %s" % a.out)
    if not all(s["same_bits"] for s in summaries):
        sys.exit(1)


if __name__ == "__main__":
    main()
