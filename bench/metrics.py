#!/usr/bin/python3
"""metrics.py - bench/metrics: what do Prometheus metrics and their scrapes cost a step?

1. The data path, the headline: bench_pushpull's 64 MiB push+pull step (shm, the workers' own
   buffers, float, 2 workers on 2 shards), rounds alternating between shards without metrics
   and shards with `--metrics-port` whose /metrics bench_pushpull scrapes every second during
   the timed steps (`bench_pushpull --metrics-port`): the median step of each round, then the
   median over rounds, and their ratio (scraped / plain).
2. Training: two `tessera up --shards 2` clusters side by side (docs/observability.md): one plain, one with
`--metrics-port` on the master and shards. Rounds alternate between them: the same exact
training (the built-in MLP, 2 workers, --steps S) on the plain cluster, and on the metrics
cluster with `tessera train --metrics-port` (every worker serves too) while a scraper fetches
/metrics from all five endpoints every --interval seconds (1 s: Prometheus' busiest usual
setting is 10 s or more) during the whole run. The figure is the median of the JSON's
`seconds` over the rounds, and their ratio (scraped / plain). A second pair with a scrape
every 0.1 s is a stress row beside it.

Output: a table, and bench/results/metrics.json whose headline is the 64 MiB step: {ours: the
scraped median ms, baseline: the plain median ms, unit, ratio}.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fault"))
import clusterlib as cl  # noqa: E402
from clusterlib import Cluster, result, train  # noqa: E402


def free_ports(n):
    """A base port with n free ports from it."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
        s.close()
        socks = []
        try:
            for p in range(base, base + n):
                socks.append(socket.socket())
                socks[-1].bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
        finally:
            for x in socks:
                x.close()
    raise RuntimeError("no %d consecutive free ports" % n)


def scraped_run(binary, master, steps, ports, wbase, interval):
    """One training with every endpoint scraped each interval; (seconds, scrapes)."""
    stop, count = threading.Event(), [0]

    def scrape():
        while not stop.is_set():
            for p in ports:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % p,
                                                timeout=5) as r:
                        r.read()
                        count[0] += 1
                except OSError:
                    pass   # a worker not serving yet, or gone
            stop.wait(interval)
    th = threading.Thread(target=scrape)
    th.start()
    try:
        doc = result(train(binary, master, steps, extra=("--metrics-port", str(wbase))),
                     "tessera train (scraped)")
    finally:
        stop.set()
        th.join()
    return doc["seconds"], count[0]


def pushpull(a, base):
    """bench_pushpull's 64 MiB step without and with metrics scraped every second, rounds
    alternating: {"plain": [ms], "scraped": [ms]}, and the scrapes answered."""
    runs, scrapes = {"plain": [], "scraped": []}, 0
    with tempfile.TemporaryDirectory(prefix="tessera-bench-metrics.") as d:
        for k in range(a.rounds):
            for kind in ("plain", "scraped"):
                out = os.path.join(d, kind + ".json")
                argv = [os.path.join(a.bin, "bench_pushpull"), "--sizes", "64", "--transports",
                        "shm", "--buffers", "own", "--iters", str(a.pp_iters), "--out", out]
                if kind == "scraped":
                    argv += ["--metrics-port", str(base)]
                p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                if p.returncode != 0:
                    raise RuntimeError("bench_pushpull exited %d:\n%s" % (p.returncode,
                                                                          p.stderr[-2000:]))
                with open(out) as f:
                    doc = json.load(f)
                runs[kind].append(doc["runs"][0]["median_ms"])
                scrapes += doc.get("scrapes", 0)
            print("round %d/%d: 64 MiB step plain %.1f ms, scraped every second %.1f ms" %
                  (k + 1, a.rounds, runs["plain"][-1], runs["scraped"][-1]), flush=True)
    return runs, scrapes


def main():
    ap = argparse.ArgumentParser(prog="metrics.py", description="The cost of Prometheus "
                                 "metrics and scrapes on exact training steps, against the "
                                 "same training without them, rounds alternating.")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="directory of tessera and its services (default build/bin)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    ap.add_argument("--steps", type=int, default=300, help="steps per training (default 300)")
    ap.add_argument("--interval", type=float, default=1.0,
                    help="seconds between scrapes of the headline (default 1)")
    ap.add_argument("--pp-iters", type=int, default=20,
                    help="timed 64 MiB steps per bench_pushpull run (default 20)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "metrics.json"))
    a = ap.parse_args()
    binary = os.path.join(a.bin, "tessera")
    cl.load_protos(a.bin)
    base, wbase = free_ports(3), free_ports(2)
    ports = [base, base + 1, base + 2, wbase, wbase + 1]
    pp, pp_scrapes = pushpull(a, free_ports(2))
    runs = {"plain": [], "scraped": [], "stress": []}
    scrapes = {"scraped": 0, "stress": 0}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-metrics.") as d:
        plain = Cluster(binary, os.path.join(d, "plain"), shards=2)
        metered = Cluster(binary, os.path.join(d, "metered"), shards=2,
                          extra=("--metrics-port", str(base)))
        try:
            for k in range(a.rounds):
                runs["plain"].append(result(train(binary, plain.master, a.steps),
                                            "tessera train")["seconds"])
                for kind, every in (("scraped", a.interval), ("stress", 0.1)):
                    s, n = scraped_run(binary, metered.master, a.steps, ports, wbase, every)
                    runs[kind].append(s)
                    scrapes[kind] += n
                print("round %d/%d: plain %.3f s, scraped every %gs %.3f s, every 0.1 s %.3f s"
                      % (k + 1, a.rounds, runs["plain"][-1], a.interval, runs["scraped"][-1],
                         runs["stress"][-1]), flush=True)
        finally:
            plain.stop()
            metered.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    ppm = {k: statistics.median(v) for k, v in pp.items()}
    print("\nbench/metrics: bench_pushpull 64 MiB push+pull (shm, own buffers, float, 2 workers "
          "on 2 shards), %d rounds of %d steps" % (a.rounds, a.pp_iters))
    print("%-52s %10s %8s" % ("", "median ms", "ratio"))
    print("%-52s %10.1f %8s" % ("shards without metrics (baseline)", ppm["plain"], "1.00x"))
    print("%-52s %10.1f %7.3fx" % ("shards with /metrics scraped every second (%d scrapes)"
                                   % pp_scrapes, ppm["scraped"], ppm["scraped"] / ppm["plain"]))
    print("\nbench/metrics: %d exact steps of the MLP, 2 workers on 2 shards (R = 2), %d rounds"
          % (a.steps, a.rounds))
    print("%-52s %10s %8s" % ("", "median s", "ratio"))
    print("%-52s %10.3f %8s" % ("no metrics (baseline)", med["plain"], "1.00x"))
    print("%-52s %10.3f %7.3fx" % ("metrics on, every endpoint scraped every %g s" % a.interval,
                                   med["scraped"], med["scraped"] / med["plain"]))
    print("%-52s %10.3f %7.3fx" % ("metrics on, scraped every 0.1 s (stress)", med["stress"],
                                   med["stress"] / med["plain"]))
    doc = {"name": "metrics", "steps": a.steps, "rounds": a.rounds, "interval_s": a.interval,
           "runs_s": runs, "medians_s": med, "scrapes": scrapes,
           "pushpull_ms": pp, "pushpull_medians_ms": ppm, "pushpull_scrapes": pp_scrapes,
           "training": {"ours": round(med["scraped"], 4), "baseline": round(med["plain"], 4),
                        "unit": "s per %d exact MLP steps (metrics on and scraped every %g s "
                                "vs off)" % (a.steps, a.interval),
                        "ratio": round(med["scraped"] / med["plain"], 4)},
           "headline": {"ours": round(ppm["scraped"], 2), "baseline": round(ppm["plain"], 2),
                        "unit": "ms per 64 MiB push+pull step (shards' /metrics scraped every "
                                "second vs no metrics)",
                        "ratio": round(ppm["scraped"] / ppm["plain"], 4)}}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
