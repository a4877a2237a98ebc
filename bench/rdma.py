#!/usr/bin/python3
"""rdma.py - the rdma transport beside the verbs device's own limit, on a real verbs device
(make bench-rdma runs it in the Soft-RoCE guest of tests/rdma/guest.sh).

Why: RDMA exists to move gradients at the link's rate without the CPU copying them. So these
figures, measured in the same guest run:
- the device's limit: perftest's ib_write_bw on the device (RDMA WRITE of 1 MiB messages, one
  process each side), timed by our own clock around the client (perftest's own figure reads
  the CPU's speed, which emulation misreports; it is printed beside ours for reference);
- push+pull (the headline): bench_pushpull --transports rdma,tcp, 2 workers x 2 shards
  listening on the device's address, one float tensor of --pp-mib pushed and pulled each
  step (tessera_step); the bytes a step moves over the device (each worker pushes S and
  pulls S: 2 x 2 x S) over the median step time, against ib_write_bw's rate;
- raw transport: bench_transport_raw's one-way GB/s over rdma (16 MiB messages through the
  transport ops alone, both processes on the device's address), against ib_write_bw; once
  copying each message into the staging area, once from a pinned buffer written in place;
- CPU: the CPU seconds per GB moved one way, rdma against tcp between the same two
  processes on the same address (bench_transport_raw's "CPU s/GB": both processes' user and
  system time; and "machine": every CPU's busy time, which includes the kernel's work for a
  software device such as rxe, charged to no process), and the machine's busy seconds per GB
  while ib_write_bw ran: the device's own cost, which a software device charges to the CPU.
Emulated rxe figures are not NIC figures: the device is the kernel copying packets, under a
CPU emulated by QEMU. They show the transport's overhead against the device, not RDMA's rates.

Output: tables and bench/results/rdma.json, whose headline is rdma's push+pull rate against
ib_write_bw's (goal: at least 0.8x), headline_raw the raw transport's, and headline_cpu
rdma's CPU s/GB from a pinned buffer against tcp's (goal: at most 0.5x).
"""
import argparse
import json
import os
import subprocess
import sys
import time


def machine_busy():
    """Every CPU's busy seconds so far (/proc/stat: user nice system irq softirq steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def ib_write_bw(dev, addr, size, iters, port):
    """GB/s of ib_write_bw between two processes on dev, by our clock; its own figure; the
    seconds it took; and the machine's busy CPU seconds per GB meanwhile."""
    base = ["ib_write_bw", "-d", dev, "-x", "1", "-s", str(size), "-n", str(iters), "-F",
            "-p", str(port)]
    server = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)
        t0, b0 = time.monotonic(), machine_busy()
        client = subprocess.run(base + [addr], capture_output=True, text=True, timeout=600)
        secs, busy = time.monotonic() - t0, machine_busy() - b0
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    if client.returncode != 0:
        sys.exit("rdma: ib_write_bw failed (%d): %s" % (client.returncode,
                                                      client.stdout + client.stderr))
    own = None
    for line in client.stdout.splitlines():   # "#bytes #iterations BW peak BW average ..."
        f = line.split()
        if len(f) >= 4 and f[0] == str(size):
            own = float(f[3]) * 1e6 / 1e9 if "MB/sec" in client.stdout else None
    return size * iters / secs / 1e9, own, secs, busy / (size * iters / 1e9)


def pushpull(a):
    """bench_pushpull over rdma and tcp on the device's address: per transport, the float runs
    (own buffers and tessera_buffers'), each with the bytes a step moves per second over the
    device and the CPU seconds per GB moved (our processes; the whole machine)."""
    out = a.out + ".pushpull.json"
    cmd = [os.path.join(a.bin, "bench_pushpull"), "--transports", "rdma,tcp", "--host", a.host,
           "--no-gloo", "--sizes", str(a.pp_mib), "--iters", str(a.pp_iters), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    sys.stderr.write(r.stderr)
    print(r.stdout)
    if r.returncode != 0:
        sys.exit("rdma: bench_pushpull failed (%d): %s" % (r.returncode, " ".join(cmd)))
    with open(out) as f:
        pp = json.load(f)
    os.unlink(out)
    runs = []
    for x in pp["runs"]:
        if not x.get("ok") or x["mode"] != "float":
            continue
        moved = pp["workers"] * 2 * x["size_mib"] * (1 << 20)   # bytes over the device a step
        ours = x["worker_cpu_ms_per_step"] + x["shard_cpu_ms_per_step"]
        runs.append({"transport": x["transport"], "buffers": x["buffers"],
                     "size_mib": x["size_mib"], "median_ms": x["median_ms"],
                     "moved_gbps": round(moved / (x["median_ms"] / 1e3) / 1e9, 4),
                     "cpu_s_per_gb": round(ours / 1e3 / (moved / 1e9), 2),
                     "machine_cpu_s_per_gb":
                         round((ours + x["other_cpu_ms_per_step"]) / 1e3 / (moved / 1e9), 2)})
    return runs


def best(runs, tp):
    """The fastest run of transport tp, or None."""
    mine = [x for x in runs if x["transport"] == tp]
    return max(mine, key=lambda x: x["moved_gbps"]) if mine else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the build's bin directory")
    ap.add_argument("--host", default=os.environ.get("TESSERA_RDMA_ADDR", "192.168.77.1"),
                    help="the RDMA device's interface address (default $TESSERA_RDMA_ADDR)")
    ap.add_argument("--dev", default="rxe0", help="the verbs device for ib_write_bw")
    ap.add_argument("--mib", type=int, default=16, help="bench_transport_raw's message MiB")
    ap.add_argument("--runs", type=int, default=3, help="bench_transport_raw's timed runs")
    ap.add_argument("--pp-mib", type=int, default=4, help="bench_pushpull's tensor MiB")
    ap.add_argument("--pp-iters", type=int, default=5, help="bench_pushpull's timed steps")
    ap.add_argument("--out", default="bench/results/rdma.json")
    a = ap.parse_args()

    wb, wb_own, wb_secs, wb_cpu = ib_write_bw(a.dev, a.host, 1 << 20, 300, 18515)
    raw_json = a.out + ".raw.json"
    r = subprocess.run([os.path.join(a.bin, "bench_transport_raw"), "--host", a.host,
                        "--only", "tcp,rdma", "--mib", str(a.mib), "--runs", str(a.runs),
                        "--count", "4", "--out", raw_json], capture_output=True, text=True,
                       timeout=1800)
    sys.stderr.write(r.stderr)
    print(r.stdout)
    if r.returncode != 0:
        sys.exit("rdma: bench_transport_raw failed (%d)" % r.returncode)
    with open(raw_json) as f:
        raw = json.load(f)
    os.unlink(raw_json)
    by = {x["label"]: x for x in raw["results"] if "error" not in x}
    rd, tcp = by.get("rdma"), by.get("tcp (kernel autotuning)")
    pinned = by.get("rdma (pinned buffer)")
    best_cpu = pinned or rd   # what a trainer's tessera_buffers gradients take
    if not rd or not tcp:
        sys.exit("rdma: no rdma or tcp figure: %s" % raw["results"])
    rate = rd["one_way_gbps_exact"]
    print("rdma: one way %.4f GB/s; ib_write_bw %.4f GB/s by our clock (%.1f s for 300 MiB; "
          "its own figure %s): %.2fx" % (rate, wb, wb_secs,
                                         "%.4f GB/s" % wb_own if wb_own else "unread",
                                         rate / wb))
    print("CPU s/GB one way: rdma %.2f, tcp %.2f (%.2fx); whole machine: rdma %.2f, tcp %.2f "
          "(%.2fx)" % (rd["cpu_s_per_gb"], tcp["cpu_s_per_gb"],
                       rd["cpu_s_per_gb"] / max(tcp["cpu_s_per_gb"], 1e-9),
                       rd["machine_cpu_s_per_gb"], tcp["machine_cpu_s_per_gb"],
                       rd["machine_cpu_s_per_gb"] / max(tcp["machine_cpu_s_per_gb"], 1e-9)))
    if pinned:
        print("rdma from a pinned buffer (written in place, no staging copy): one way %.4f GB/s "
              "(%.2fx the copying sends), CPU s/GB %.2f (%.2fx), machine %.2f (%.2fx)" % (
                  pinned["one_way_gbps_exact"], pinned["one_way_gbps_exact"] / rate,
                  pinned["cpu_s_per_gb"], pinned["cpu_s_per_gb"] / max(rd["cpu_s_per_gb"], 1e-9),
                  pinned["machine_cpu_s_per_gb"],
                  pinned["machine_cpu_s_per_gb"] / max(rd["machine_cpu_s_per_gb"], 1e-9)))
    print("machine CPU s/GB of ib_write_bw itself (the device's own cost here): %.2f; rdma "
          "transport: %.2f (%.2fx)" % (wb_cpu, rd["machine_cpu_s_per_gb"],
                                       rd["machine_cpu_s_per_gb"] / max(wb_cpu, 1e-9)))
    pp = pushpull(a)
    prd, ptcp = best(pp, "rdma"), best(pp, "tcp")
    if not prd or not ptcp:
        sys.exit("rdma: bench_pushpull gave no rdma or tcp float run: %s" % pp)
    print("push+pull, 2 workers x 2 shards, %d MiB a step each way per worker:" % a.pp_mib)
    print("%-8s | %-7s | %7s | %11s | %8s | %9s | %12s" % (
        "", "buffers", "step ms", "moved GB/s", "vs ib_wb", "CPU s/GB", "machine s/GB"))
    for x in pp:
        print("%-8s | %-7s | %7.1f | %11.4f | %7.2fx | %9.2f | %12.2f" % (
            x["transport"], "shared" if x["buffers"] else "own", x["median_ms"],
            x["moved_gbps"], x["moved_gbps"] / wb, x["cpu_s_per_gb"],
            x["machine_cpu_s_per_gb"]))
    print("emulated rxe under QEMU: these are not NIC figures")
    res = {
        "name": "rdma", "machine": raw["machine"], "device": a.dev,
        "note": "Soft-RoCE (rxe) under QEMU TCG: not NIC figures",
        "ib_write_bw": {"gbps": round(wb, 4), "own_gbps": wb_own, "seconds": round(wb_secs, 2),
                        "machine_cpu_s_per_gb": round(wb_cpu, 2),
                        "message_bytes": 1 << 20, "iterations": 300},
        "transport_raw": raw["results"],
        "pushpull": pp,
        "headline": {"ours": prd["moved_gbps"], "baseline": round(wb, 4),
                     "unit": "GB/s over the device, rdma push+pull (bench_pushpull, 2 workers "
                             "x 2 shards, %d MiB), vs ib_write_bw" % a.pp_mib,
                     "ratio": round(prd["moved_gbps"] / wb, 2)},
        "headline_raw": {"ours": round(rate, 4), "baseline": round(wb, 4),
                         "unit": "GB/s one way (rdma transport, %d MiB messages, vs "
                                 "ib_write_bw)" % a.mib,
                         "ratio": round(rate / wb, 2)},
        "headline_cpu": {"ours": best_cpu["cpu_s_per_gb"], "baseline": tcp["cpu_s_per_gb"],
                         "unit": "CPU s per GB one way (both processes; %s vs tcp)"
                                 % best_cpu["label"],
                         "ratio": round(best_cpu["cpu_s_per_gb"] /
                                        max(tcp["cpu_s_per_gb"], 1e-9), 2),
                         "machine_ours": best_cpu["machine_cpu_s_per_gb"],
                         "machine_baseline": tcp["machine_cpu_s_per_gb"],
                         "machine_ib_write_bw": round(wb_cpu, 2)},
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
