#!/usr/bin/python3
"""security.py - bench/security: what does the secure default cost?

Rounds alternate between a plaintext cluster (`--insecure`) and the default one (mutual TLS:
`tessera certs init` certificates, the data-plane handshake on every connection, frame MACs
on tcp between hosts, none on shm: docs/security.md), each round running, on a fresh cluster
of each kind:

1. bench_rpc_latency [--tls DIR]: ClusterStatus p50 and p99 from the C client on loopback
   (goal: p99 under 1 ms with TLS), and a Heartbeat round of simulated workers;
2. bench_pushpull [--tls DIR]: the push+pull step of 4 and 64 MiB (2 workers, 2 shards, the
   workers' own buffers, float) over shm (the handshake only; goal at 64 MiB: at most 5%
   slower) and over loopback tcp taken for another host's (TESSERA_TCP_LOOPBACK=remote:
   MAC'd);
3. unless --no-hosts: bench/multihost.py --no-gloo [--insecure]: the push+pull of 64 MiB of
   4 workers x 4 shards, each on an emulated host of its own with 1 Gbit/s links (network
   namespaces, tc; needs root), every frame MAC'd under the default (goal: at most 10%
   slower).

Each figure is the median over the rounds of each round's median; the ratio is plaintext /
TLS for step times (the throughput TLS keeps) and TLS / plaintext for latencies.

Output: a table with the goals, and bench/results/security.json whose headline is the
emulated hosts' 64 MiB step (with --no-hosts, the shm one): {ours: the default's ms, baseline:
plaintext's ms, unit, ratio: plaintext / default}.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ["TESSERA_TCP_LOOPBACK"] = "remote"
HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (4, 64)
TRANSPORTS = ("tcp", "shm")
SHM_ROW = "shm 64 MiB step (ms)"
HOSTS_ROW = "hosts 64 MiB step (ms)"     # emulated hosts, 1 Gbit/s links
GOALS = {SHM_ROW: 0.95, HOSTS_ROW: 0.90}  # throughput the default keeps (plaintext / TLS)


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (os.path.basename(argv[0]), p.returncode,
                                                  (p.stdout + p.stderr)[-3000:]))


def hosts_round(a, d, tls):
    """The 64 MiB step (ms) of 4 workers x 4 shards on emulated hosts, plaintext or TLS."""
    out = os.path.join(d, "mh.json")
    run([a.python, os.path.join(HERE, "multihost.py"), "--bin", a.bin, "--no-gloo", "--sizes",
         "64", "--rates", "1gbit", "--iters", str(a.iters), "--out", out] +
        ([] if tls else ["--insecure"]))
    with open(out) as f:
        mh = json.load(f)
    (row,) = [r for r in mh["rows"] if r["system"] == "tessera"]
    return {HOSTS_ROW: row["median_s"] * 1e3}


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
         "--no-gloo", "--out", out] + extra)
    with open(out) as f:
        pp = json.load(f)
    for r in pp["runs"]:
        if r["ok"] and not r["exact"]:
            got["%s %d MiB step (ms)" % (r["transport"], r["size_mib"])] = r["median_ms"]
    if not a.no_hosts:
        got.update(hosts_round(a, d, tls))
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="where tessera, bench_pushpull and bench_rpc_latency are")
    ap.add_argument("--rounds", type=int, default=3, help="plain/TLS pairs (default 3)")
    ap.add_argument("--iters", type=int, default=10,
                    help="timed steps per bench_pushpull size (default 10)")
    ap.add_argument("--calls", type=int, default=3000,
                    help="timed ClusterStatus calls per round (default 3000)")
    ap.add_argument("--no-hosts", action="store_true",
                    help="leave out the emulated hosts (they need root, iproute2 and tc)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="runs bench/multihost.py (default /usr/bin/python3)")
    ap.add_argument("--out", default="bench/results/security.json")
    a = ap.parse_args()
    figs = {False: {}, True: {}}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-security.") as d:
        run([os.path.join(a.bin, "tessera"), "certs", "init", os.path.join(d, "certs")])
        for k in range(a.rounds):
            for tls in (False, True):
                for name, v in one_round(a, d, tls).items():
                    figs[tls].setdefault(name, []).append(v)
            print("round %d/%d: shm 64 MiB step plain %.1f ms, TLS %.1f ms%s" %
                  (k + 1, a.rounds, figs[False][SHM_ROW][-1], figs[True][SHM_ROW][-1],
                   "" if a.no_hosts else "; hosts 64 MiB plain %.1f ms, TLS %.1f ms" %
                   (figs[False][HOSTS_ROW][-1], figs[True][HOSTS_ROW][-1])), flush=True)
    rows = []
    print("\nbench/security: medians over %d rounds, plaintext (--insecure) and default (mutual "
          "TLS) clusters alternating\n" % a.rounds)
    print("%-28s | %10s | %10s | %s" % ("figure", "plaintext", "default", "ratio"))
    print("%s-+-%s-+-%s-+-%s" % ("-" * 28, "-" * 10, "-" * 10, "-" * 40))
    for name in figs[False]:
        if name not in figs[True]:
            continue
        p, t = statistics.median(figs[False][name]), statistics.median(figs[True][name])
        step = name.endswith("(ms)")
        ratio = p / t if step else t / p
        goal = GOALS.get(name)
        rows.append({"figure": name, "plaintext": p, "tls": t, "ratio": round(ratio, 3),
                     "ratio_is": "plaintext / TLS" if step else "TLS / plaintext",
                     "goal": goal, "met": None if goal is None else ratio >= goal,
                     "rounds_plaintext": figs[False][name], "rounds_tls": figs[True][name]})
        print("%-28s | %10.1f | %10.1f | %.3f %s%s" % (
            name, p, t, ratio, "(throughput kept)" if step else "(latency added)",
            "" if goal is None else ", goal >= %.2f: %s" % (goal, "met" if ratio >= goal
                                                            else "NOT met")))
    p99 = [r for r in rows if r["figure"] == "ClusterStatus p99 (us)"][0]
    head = [r for r in rows if r["figure"] == (SHM_ROW if a.no_hosts else HOSTS_ROW)][0]
    print("\ngoal: ClusterStatus p99 under TLS < 1 ms: %d us: %s" %
          (p99["tls"], "met" if p99["tls"] < 1000 else "NOT met"))
    doc = {"name": "security", "rounds": a.rounds, "rows": rows,
           "headline": {"ours": head["tls"], "baseline": head["plaintext"],
                        "unit": "ms per 64 MiB push+pull step, %s, the default (mutual TLS, "
                                "handshake, frame MACs between hosts) against --insecure "
                                "(ratio: plaintext / default)" %
                                ("2 workers x 2 shards over shm" if a.no_hosts else
                                 "4 workers x 4 shards on emulated hosts, 1 Gbit/s links"),
                        "ratio": head["ratio"]},
           "tls_clusterstatus_p99_us": p99["tls"]}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
