#!/usr/bin/python3
"""security.py - bench/security: what do mutual TLS and the data-plane MACs cost?

Rounds alternate between a plaintext cluster and one with mutual TLS (`tessera certs init`
certificates; the data-plane handshake on every connection, frame MACs on tcp, none on shm:
docs/security.md), each round running, on a fresh cluster of each kind:

1. bench_rpc_latency [--tls DIR]: ClusterStatus p50 and p99 from the C client on loopback
   (the issue's goal: p99 under 1 ms with TLS), and a Heartbeat round of simulated workers;
2. bench_pushpull [--tls DIR]: the push+pull step of 4 and 64 MiB (2 workers, 2 shards, the
   workers' own buffers, float) over tcp (MAC'd) and shm (handshake only).

Each figure is the median over the rounds of each round's median; the ratio is plaintext /
TLS for step times (the throughput TLS keeps: the goal on tcp at 64 MiB is 0.8 or more) and
TLS / plaintext for latencies.

Output: a table, and bench/results/security.json whose headline is the tcp 64 MiB step:
{ours: TLS+MAC ms, baseline: plaintext ms, unit, ratio: plaintext / TLS}.
Loopback tcp is host-local unless told otherwise, without hashes or MACs; the bench tells every
process to take it for another host's (TESSERA_TCP_LOOPBACK=remote), which is what it measures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ["TESSERA_TCP_LOOPBACK"] = "remote"
SIZES = (4, 64)
TRANSPORTS = ("tcp", "shm")


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (os.path.basename(argv[0]), p.returncode,
                                                  (p.stdout + p.stderr)[-3000:]))


def one_round(a, d, tls):
    """{name: figure} of one cluster of each bench, plaintext or TLS."""
    extra = ["--tls", os.path.join(d, "certs")] if tls else []
    out = os.path.join(d, "rl.json")
    run([os.path.join(a.bin, "bench_rpc_latency"), "--calls", str(a.calls), "--workers",
         "1000", "--seconds", "2", "--out", out] + extra)
    with open(out) as f:
        rl = json.load(f)
    got = {"ClusterStatus p50 (us)": rl["c_clusterstatus_us"]["p50"],
           "ClusterStatus p99 (us)": rl["c_clusterstatus_us"]["p99"],
           "Heartbeat p50 (us)": rl["heartbeat"]["p50_us"]}
    out = os.path.join(d, "pp.json")
    run([os.path.join(a.bin, "bench_pushpull"), "--sizes", ",".join(map(str, SIZES)),
         "--transports", ",".join(TRANSPORTS), "--buffers", "own", "--iters", str(a.iters),
         "--out", out] + extra)
    with open(out) as f:
        pp = json.load(f)
    for r in pp["runs"]:
        if r["ok"] and not r["exact"]:
            got["%s %d MiB step (ms)" % (r["transport"], r["size_mib"])] = r["median_ms"]
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "build", "bin"),
                    help="where tessera, bench_pushpull and bench_rpc_latency are")
    ap.add_argument("--rounds", type=int, default=3, help="plain/TLS pairs (default 3)")
    ap.add_argument("--iters", type=int, default=10,
                    help="timed steps per bench_pushpull size (default 10)")
    ap.add_argument("--calls", type=int, default=3000,
                    help="timed ClusterStatus calls per round (default 3000)")
    ap.add_argument("--out", default="bench/results/security.json")
    a = ap.parse_args()
    figs = {False: {}, True: {}}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-security.") as d:
        run([os.path.join(a.bin, "tessera"), "certs", "init", os.path.join(d, "certs")])
        for k in range(a.rounds):
            for tls in (False, True):
                for name, v in one_round(a, d, tls).items():
                    figs[tls].setdefault(name, []).append(v)
            print("round %d/%d: tcp 64 MiB step plain %.1f ms, TLS+MAC %.1f ms; "
                  "ClusterStatus p99 plain %d us, TLS %d us" %
                  (k + 1, a.rounds, figs[False]["tcp 64 MiB step (ms)"][-1],
                   figs[True]["tcp 64 MiB step (ms)"][-1],
                   figs[False]["ClusterStatus p99 (us)"][-1],
                   figs[True]["ClusterStatus p99 (us)"][-1]), flush=True)
    rows = []
    print("\nbench/security: medians over %d rounds, plaintext and mutual TLS clusters "
          "alternating (tcp frames MAC'd, shm not)\n" % a.rounds)
    print("%-28s | %10s | %10s | %s" % ("figure", "plaintext", "TLS", "ratio"))
    print("%s-+-%s-+-%s-+-%s" % ("-" * 28, "-" * 10, "-" * 10, "-" * 32))
    for name in figs[False]:
        if name not in figs[True]:
            continue
        p, t = statistics.median(figs[False][name]), statistics.median(figs[True][name])
        step = name.endswith("(ms)")
        ratio = p / t if step else t / p
        rows.append({"figure": name, "plaintext": p, "tls": t, "ratio": round(ratio, 3),
                     "ratio_is": "plaintext / TLS" if step else "TLS / plaintext"})
        print("%-28s | %10.1f | %10.1f | %.3f %s" % (name, p, t, ratio,
                                                     "(throughput kept)" if step else
                                                     "(latency added)"))
    tcp = [r for r in rows if r["figure"] == "tcp 64 MiB step (ms)"][0]
    p99 = [r for r in rows if r["figure"] == "ClusterStatus p99 (us)"][0]
    print("\ngoals: TLS ClusterStatus p99 < 1 ms: %d us: %s; tcp 64 MiB with MACs >= 0.8x "
          "of plaintext: %.3fx: %s" % (p99["tls"], "met" if p99["tls"] < 1000 else "NOT met",
                                      tcp["ratio"], "met" if tcp["ratio"] >= 0.8 else "NOT met"))
    doc = {"name": "security", "rounds": a.rounds, "rows": rows,
           "headline": {"ours": tcp["tls"], "baseline": tcp["plaintext"],
                        "unit": "ms per 64 MiB push+pull step over tcp, 2 workers x 2 shards "
                                "(TLS: handshake and frame MACs; ratio: plaintext / TLS)",
                        "ratio": tcp["ratio"]},
           "tls_clusterstatus_p99_us": p99["tls"]}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
