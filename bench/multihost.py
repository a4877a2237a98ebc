#!/usr/bin/python3
"""multihost.py - bench/multihost: Tessera's push+pull against gloo's all_reduce across hosts.

Why: users pick a parameter server over a ring all-reduce between hosts because each link
carries the tensor once each way, where a ring of N carries it 2 (N - 1) / N times: with links
of rate R a ring all-reduce reaches an algbw of at most R N / (2 (N - 1)), 0.67 R at N = 4,
and a parameter server whose shards have links of their own up to R. This benchmark measures
both on the same emulated links. The issue's goal, at R = 1 Gbit/s and at both sizes: Tessera
at least 0.85 R and at least 1.35x gloo.

Topology (bench/emuhosts.Net, one network namespace per host on a bridge, every link shaped to
R each way with tc tbf): a master host m, shard hosts s0..s3, worker hosts w0..w3, at
10.79.0.1 .. 10.79.0.9. Per rate (--rates, default 1gbit,4gbit) a fresh set of hosts:
  1. Tessera: tessera-master --listen on m; on each s_i tessera-shard --listen 0.0.0.0:7001
     --advertise s_i:7001 --transport tcp (shared memory would bypass the links); on each w_i
     one bench_pushpull worker (its hidden --worker mode, bench/pushpull_worker.c) with one
     float tensor of S bytes in --partition-kib partitions (default auto: the SDK's choice for
     shards on other hosts, about S / 256 here, 4 KiB short of a multiple of 64 KiB, so that
     each shard heads up to 64 and pulls overlap the pushes after them; docs/placement.md,
     "Partition size"), 2 warm-up then --iters timed tessera_step calls (push S, pull S), BSP.
     A step takes the slowest worker's time; the figure is the median over steps.
     Placement: the ring, each tensor under the salt its workers choose for balance
     (docs/placement.md); --salt 0 sets TESSERA_PLACEMENT_SALT=0 for the ring's own split.
     The cluster runs mutual TLS as a user's does (the data-plane handshake, frame MACs on
     every link), with certificates made for the run; --insecure: plaintext.
  2. gloo: bench/pushpull_gloo.py --rank i on each w_i, 4 ranks meeting at w0's address
     (GLOO_SOCKET_IFNAME=eth0), all_reduce of S bytes, the same warm-up and timed calls.
algbw = S / step (GB/s = 1e9 B/s); fraction of R = algbw * 8 / R. CPU per step: Tessera's
workers (their own clock over the timed steps) and shards (/proc/PID/stat before and after),
gloo's ranks (their process clocks, summed); "busy" is the whole machine's (/proc/stat) over
the timed steps against its cores, and "other" what of it was not our processes' (softirq
work of the veths, bridge and tbf, and anything else running).

Output: a table per rate on stdout, progress on stderr, and --out (default
bench/results/multihost.json) with every row and the headline {ours: Tessera's algbw at
64 MiB and 1 Gbit/s, baseline: gloo's, unit, ratio}. Needs root (namespaces, tc), util-linux,
iproute2, python3-torch and the build (bench_pushpull, tessera-master, tessera-shard, tessera).

Cleanup: every process is started in its own session and stopped by its group (SIGTERM, then
SIGKILL) at the end, on errors and on SIGINT/SIGTERM/SIGHUP; every namespace goes with its
holder (emuhosts' down()). If this process is killed with SIGKILL nothing here runs, so every
child, the namespace holders included, has PR_SET_PDEATHSIG = SIGKILL (emuhosts.die_with_us):
it fires when the thread that forked the child dies, and this script has only one thread.
Every child also carries TESSERA_BENCH_TAG=<--tag> in its environment, so a test can find
anything left (tests/integration/test_multihost.py).
"""

import argparse
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emuhosts import (Net, Procs, die_with_us, interrupt_on_signals,  # noqa: E402
                      require_bins)

SHARDS = ["s0", "s1", "s2", "s3"]
WORKERS = ["w0", "w1", "w2", "w3"]
HOSTS = ["m"] + SHARDS + WORKERS          # 10.79.0.1 .. 10.79.0.9
SUBNET = "10.79.0"
MASTER_PORT, SHARD_PORT, GLOO_PORT = 7070, 7001, 29500
WARMUP = 2                                # bench_pushpull's and pushpull_gloo's
MIB = 1 << 20
GOAL_RATE, GOAL_OF_R, GOAL_VS_GLOO = 1e9, 0.85, 1.35
HEADLINE_MIB = 64
# The machine this busy over the timed steps counts as CPU-bound: a BSP step has moments where
# every process waits on the others (the barrier's round trips), so 100% is never reached.
CPU_BOUND_BUSY = 0.85
TAG_ENV = "TESSERA_BENCH_TAG"
TICK_MS = 1e3 / os.sysconf("SC_CLK_TCK")
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}  # tc's, SI


def log(msg):
    print(f"multihost: {msg}", file=sys.stderr, flush=True)


def parse_rate(s):
    """tc's rate syntax (SI units, bits): "1gbit" -> 1e9 bit/s."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?bit)", s.strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"rate {s!r}: want a number and bit, kbit, mbit or gbit (4gbit)")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def rate_name(bps):
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"


def proc_ticks(pid):
    """utime + stime of pid in clock ticks (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def busy_ticks():
    """The machine's busy time in ticks: /proc/stat's cpu line less idle and iowait."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4]


def machine_desc():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                         "")
    except OSError:
        pass
    return f"{os.cpu_count()} cpus" + (f", {model}" if model else "")


class Lines:
    """A child's stdout read a line at a time with a deadline: unbuffered reads, so a line that
    has arrived is never stuck in a buffer while select() says there is nothing to read."""

    def __init__(self, p, what):
        self.p, self.what, self.buf = p, what, b""

    def fill(self, logfile):
        """One read of what has arrived (the caller knows something has); EOF is an error."""
        chunk = os.read(self.p.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError(f"{self.what} ended (exit {self.p.wait()}): {tail(logfile)}")
        self.buf += chunk

    def pop(self):
        """The next whole line that has arrived, or None."""
        if b"\n" not in self.buf:
            return None
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def readline(self, deadline, logfile):
        """The next line; at the deadline an error naming logfile's tail."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.what}: nothing more after the deadline "
                                   f"({tail(logfile)})")
            if select.select([self.p.stdout], [], [], left)[0]:
                self.fill(logfile)
        return self.pop()


def tail(path, n=600):
    try:
        with open(path, errors="replace") as f:
            t = f.read()[-n:].strip()
        return f"{os.path.basename(path)}: ...{t}" if t else f"{path} is empty"
    except OSError:
        return f"no {path}"


def run_quiet(cmd, timeout=30):
    """cmd's exit and output; one that outlives timeout is killed and counts as a failure."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, preexec_fn=die_with_us())
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")


def wait_exit(p, secs):
    """p's exit status once it has exited; an error if it has not within secs."""
    try:
        return p.wait(timeout=secs)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{p.args[-1] if p.args else 'a process'}: still running {secs:.0f} "
                           f"s after its results ({tail(p.log)})") from None


def stats(values):
    s = sorted(values)
    return statistics.median(s), s[0], s[-1]


class RateRun:
    """One rate: its emulated hosts, the Tessera cluster and runs, then gloo's."""

    def __init__(self, a, bps, rate, procs, logs):
        self.a, self.bps, self.rate, self.procs = a, bps, rate, procs
        self.logs = os.path.join(logs, rate)
        os.makedirs(self.logs)
        self.net = Net(HOSTS, rate=rate, tag=f"{a.tag}{rate}", subnet=SUBNET)
        self.cluster, self.master = [], f"{self.net.addr('m')}:{MASTER_PORT}"
        self.placement = {}
        self.partition = {}     # size_mib: the partition size the workers said they use

    def bin(self, name):
        return os.path.join(self.a.bin, name)

    def spawn(self, host, cmd, name, stdout=subprocess.DEVNULL):
        path = os.path.join(self.logs, name + ".log")
        with open(path, "w") as err:
            p = self.procs.start(self.net.wrap(host, cmd), stdout, err)
        p.log = path
        return p

    def status(self):
        """`tessera status --json` asked from m, or None while it fails."""
        r = run_quiet(self.status_cmd())
        try:
            return json.loads(r.stdout) if r.returncode == 0 else None
        except ValueError:
            return None

    def tls_args(self, stem):
        """A service's TLS flags: its own certificate of --tls (shard-i.pem for shard i), or
        --insecure with --insecure."""
        d = self.a.tls
        if not d:
            return ["--insecure"]
        return ["--tls-cert", os.path.join(d, stem + ".pem"), "--tls-key",
                os.path.join(d, stem + ".key"), "--tls-ca", os.path.join(d, "ca.pem"),
                "--token-file", os.path.join(d, "admin.token")]

    def start_cluster(self):
        cmd = [self.bin("tessera-master"), "--listen", self.master] + self.tls_args("master")
        self.cluster = [self.spawn("m", cmd, "master")]
        for i, s in enumerate(SHARDS):
            addr = f"{self.net.addr(s)}:{SHARD_PORT}"
            cmd = [self.bin("tessera-shard"), "--master", self.master, "--transport", "tcp",
                   "--grace-ms", "1000", "--listen", f"0.0.0.0:{SHARD_PORT}", "--advertise",
                   addr] + self.tls_args(f"shard-{i}")
            self.cluster.append(self.spawn(s, cmd, s))
        deadline, st = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            for p in self.cluster:
                if p.poll() is not None:
                    raise RuntimeError(f"a process of the cluster exited {p.returncode}: "
                                       f"{tail(p.log)}")
            st = self.status()
            if st and sum(s.get("state") == "alive" for s in st.get("shards", [])) == 4:
                return
            time.sleep(0.2)
        raise RuntimeError(f"4 shards not alive after 30 s (status: {st}; logs in {self.logs})")

    def stop_cluster(self):
        self.procs.stop(self.cluster)
        self.cluster = []

    def status_cmd(self):
        return self.net.wrap("m", [self.bin("tessera"), "status", "--master", self.master,
                                   "--json", "--timeout-ms", "2000"])

    def take_placement(self, text, size_mib):
        """Partitions and bytes each shard holds (one job at a time here), from `tessera status
        --json`: what the master's placement made of the tensor, once every partition is held."""
        try:
            st = json.loads(text)
        except ValueError:
            return
        where = {f"{self.net.addr(s)}:{SHARD_PORT}": s for s in SHARDS}
        got = {where.get(s.get("addr"), s.get("addr")): {
            "partitions": s.get("partitions", 0), "bytes": s.get("bytes", 0)}
            for s in st.get("shards", []) if s.get("state") == "alive"}
        if sum(v["bytes"] or 0 for v in got.values()) == size_mib * MIB:   # all placed
            self.placement[size_mib] = got

    def wait_ready(self, lines, workers, size_mib, deadline):
        """Waits for every worker's "ready" (its warm-up done) and returns at once, so that the
        caller reads the CPU clocks where the timed steps start. Meanwhile `tessera status` is
        asked for the placement every 0.2 s until it shows every partition: during the warm-up,
        so that its CPU (~30 ms a call) stays out of the timed steps; each call is a child of
        its own that is polled, never waited for. Returns the call still running, or None."""
        pending, asker, next_ask = set(range(len(lines))), None, 0.0
        while pending:
            now = time.monotonic()
            if now >= deadline:
                raise RuntimeError(f"workers {sorted(pending)} not ready after the deadline "
                                   f"({tail(workers[min(pending)].log)})")
            if asker is not None and asker.poll() is not None:
                self.take_placement(asker.stdout.read().decode(errors="replace"), size_mib)
                self.procs.stop([asker])
                asker, next_ask = None, now + 0.2
            placed = size_mib in self.placement
            if asker is None and not placed and now >= next_ask:
                asker = self.procs.start(self.status_cmd(), subprocess.PIPE, subprocess.DEVNULL)
            wait = deadline - now if placed else 0.02 if asker else max(0.0, next_ask - now)
            fds = {lines[k].p.stdout: k for k in pending}
            for f in select.select(list(fds), [], [], min(wait, deadline - now))[0]:
                k = fds[f]
                lines[k].fill(workers[k].log)
                line = lines[k].pop()
                if line is None:
                    continue
                word = line.split()
                if len(word) != 2 or word[0] != "ready" or not word[1].isdigit():
                    raise RuntimeError(f"{lines[k].what}: printed {line[:80]!r}, not "
                                       "'ready PARTITION_BYTES'")
                if self.partition.setdefault(size_mib, int(word[1])) != int(word[1]):
                    raise RuntimeError(f"{lines[k].what}: partitions of {word[1]} bytes, "
                                       f"another worker's {self.partition[size_mib]}")
                pending.discard(k)
        return asker

    def step_bound(self, size_mib):
        """Seconds a run may take: start-up, and each step at 4x a push then a pull at R."""
        return 60 + (WARMUP + self.a.iters) * 4 * 2 * size_mib * MIB * 8 / self.bps

    def tessera(self, size_mib):
        a = self.a
        job = f"mh-{a.tag}-{self.rate}-{size_mib}"
        nbytes = size_mib * MIB
        workers = []
        try:
            for k, w in enumerate(WORKERS):
                cmd = [self.bin("bench_pushpull"), "--worker", self.master, job, "tcp", str(k),
                       str(nbytes), str(a.iters), "0", "0", str(len(WORKERS)),
                       str(partition_arg(a))]
                workers.append(self.spawn(w, cmd, f"tessera-{size_mib}-{w}", subprocess.PIPE))
            lines = [Lines(p, f"worker {k} (host {w})")
                     for k, (p, w) in enumerate(zip(workers, WORKERS))]
            deadline = time.monotonic() + self.step_bound(size_mib)
            asker = self.wait_ready(lines, workers, size_mib, deadline)
            shards = [p.pid for p in self.cluster[1:]]
            t0, b0, w0 = sum(map(proc_ticks, shards)), busy_ticks(), time.monotonic()
            # The warm-up was too short for the placement: asked in the first timed step.
            if asker is not None:
                try:
                    self.take_placement(asker.communicate(timeout=30)[0].decode(
                        errors="replace"), size_mib)
                except subprocess.TimeoutExpired:
                    pass      # no placement in the table then; the steps go on regardless
                self.procs.stop([asker])
            if size_mib not in self.placement:
                self.take_placement(run_quiet(self.status_cmd()).stdout, size_mib)
            results = [ln.readline(deadline, p.log).split() for ln, p in zip(lines, workers)]
            t1, b1, w1 = sum(map(proc_ticks, shards)), busy_ticks(), time.monotonic()
            for p in workers:
                if wait_exit(p, max(1, deadline - time.monotonic())):
                    raise RuntimeError(f"worker exited {p.returncode}: {tail(p.log)}")
        finally:
            self.procs.stop(workers, grace=2)
        if any(r[0] != "tcp" or len(r) != 2 + a.iters for r in results):
            raise RuntimeError(f"worker lines not 'tcp CPU_NS' and {a.iters} times: "
                               f"{[' '.join(r)[:80] for r in results]}")
        steps = [max(int(r[2 + i]) for r in results) / 1e9 for i in range(a.iters)]
        med, lo, hi = stats(steps)
        wcpu = sum(int(r[1]) for r in results) / 1e6 / a.iters
        scpu = (t1 - t0) * TICK_MS / a.iters
        return self.row("tessera", size_mib, med, lo, hi, wcpu, scpu, (b1 - b0) * TICK_MS,
                        w1 - w0)

    def gloo(self):
        a, rows = self.a, {}
        script = os.path.join(HERE, "pushpull_gloo.py")
        sizes = ",".join(str(s) for s in a.sizes)
        ranks = []
        try:
            for k, w in enumerate(WORKERS):
                cmd = [a.python, script, "--world", str(len(WORKERS)), "--rank", str(k),
                       "--addr", self.net.addr("w0"), "--port", str(GLOO_PORT),
                       "--ifname", "eth0", "--sizes", sizes, "--iters", str(a.iters),
                       "--warmup", str(WARMUP)]
                ranks.append(self.spawn(w, cmd, f"gloo-{w}",
                                        subprocess.PIPE if k == 0 else subprocess.DEVNULL))
            out = Lines(ranks[0], "gloo rank 0 (host w0)")
            for size_mib in a.sizes:
                deadline = time.monotonic() + self.step_bound(size_mib) * 2
                log(f"  {self.rate}: gloo all_reduce {size_mib} MiB, 4 ranks: {WARMUP} + "
                    f"{a.iters} calls...")
                line = out.readline(deadline, ranks[0].log)
                if line != f"ready {size_mib}":
                    raise RuntimeError(f"gloo rank 0 printed {line[:80]!r}, not ready")
                b0, w0 = busy_ticks(), time.monotonic()
                r = json.loads(out.readline(deadline, ranks[0].log))
                b1, w1 = busy_ticks(), time.monotonic()
                rows[size_mib] = self.row("gloo", size_mib, r["median_s"], r["min_s"],
                                          r["max_s"], r["cpu_s"] * 1e3 / a.iters, 0,
                                          (b1 - b0) * TICK_MS, w1 - w0)
                self.report_row(rows[size_mib])
            for p in ranks:
                if wait_exit(p, 60):
                    raise RuntimeError(f"a gloo rank exited {p.returncode}: {tail(p.log)}")
        finally:
            self.procs.stop(ranks, grace=2)
        return rows

    def row(self, system, size_mib, med, lo, hi, wcpu, scpu, busy_ms, wall):
        gbs = size_mib * MIB / med / 1e9
        ours = wcpu + scpu
        busy = busy_ms / self.a.iters
        return {"system": system, "rate": self.rate, "rate_bps": self.bps,
                "size_mib": size_mib, "median_s": round(med, 5), "min_s": round(lo, 5),
                "max_s": round(hi, 5), "algbw_gbs": round(gbs, 4),
                "fraction_of_r": round(gbs * 8e9 / self.bps, 3),
                "cpu_ms_per_step": round(ours, 1),
                "worker_cpu_ms_per_step": round(wcpu, 1),
                "shard_cpu_ms_per_step": round(scpu, 1) if system == "tessera" else None,
                "other_cpu_ms_per_step": round(busy - ours, 1),
                "machine_busy": round(busy_ms / (wall * 1e3 * os.cpu_count()), 3)}

    @staticmethod
    def report_row(r):
        log(f"    {r['system']} {r['size_mib']} MiB: {r['median_s']:.4f} s/step, "
            f"{r['algbw_gbs']:.4f} GB/s = {r['fraction_of_r']:.2f} R, "
            f"{r['cpu_ms_per_step']:.1f} CPU ms/step, machine {r['machine_busy']:.0%} busy")

    def run(self, errors):
        """Every size on Tessera, then on gloo; rows, and failures appended to errors."""
        rows = []
        log(f"{self.rate}: emulated hosts {','.join(HOSTS)} (one network namespace each), "
            f"tbf {self.rate} each way on every link...")
        self.net.up()
        log(f"{self.rate}: master on m, 4 shards --transport tcp on s0..s3...")
        try:
            self.start_cluster()
            log(f"{self.rate}: shards up: master {self.master}, shard pids "
                f"{' '.join(str(p.pid) for p in self.cluster[1:])}")
            for size_mib in self.a.sizes:
                log(f"  {self.rate}: tessera push+pull {size_mib} MiB, 4 workers on w0..w3: "
                    f"{WARMUP} + {self.a.iters} steps...")
                try:
                    rows.append(self.tessera(size_mib))
                    self.report_row(rows[-1])
                except (RuntimeError, ValueError) as e:
                    errors.append(f"{self.rate} tessera {size_mib} MiB: {e}")
                    log(f"    FAILED: {e}")
        except RuntimeError as e:
            errors.append(f"{self.rate} tessera: {e}")
            log(f"  FAILED: {e}")
        finally:
            self.stop_cluster()
        if self.a.no_gloo:
            return rows
        try:
            rows += list(self.gloo().values())
        except (RuntimeError, ValueError, KeyError) as e:
            errors.append(f"{self.rate} gloo: {e}")
            log(f"  gloo FAILED: {e}")
        return rows


# ---- report ----

def find(rows, system, rate, size_mib):
    return next((r for r in rows if r["system"] == system and r["rate"] == rate and
                 r["size_mib"] == size_mib), None)


def fmt_row(name, r, gloo):
    if r is None:
        return f"{name:14} | failed (see the errors below)"
    ratio = f"{r['algbw_gbs'] / gloo['algbw_gbs']:5.2f}x" if gloo else f"{'-':>6}"
    shard = r["shard_cpu_ms_per_step"]
    split = (f"{r['worker_cpu_ms_per_step']:7.1f} + {shard:6.1f}" if shard is not None else
             f"{r['worker_cpu_ms_per_step']:7.1f} {'':>8}")
    return (f"{name:14} | {r['median_s']:7.4f} | {r['algbw_gbs']:10.4f} | "
            f"{r['fraction_of_r']:4.2f} | {ratio} | {r['cpu_ms_per_step']:7.1f} | {split} | "
            f"{r['other_cpu_ms_per_step']:6.1f} | {r['machine_busy']:4.0%}")


def partition_arg(a):
    """The workers' partition_bytes: --partition-kib's, or 0 (auto), the SDK's choice, which
    for shards on other hosts is ts_partition_bytes_between_hosts: docs/placement.md says how
    it was measured (the sweeps are in bench/README.md, "Transport measurements")."""
    return 0 if a.partition_kib == "auto" else int(a.partition_kib) * 1024


def partition_desc(a, used):
    """used: size_mib -> the partition bytes the workers reported."""
    if a.partition_kib != "auto":
        return f"{a.partition_kib} KiB partitions"
    sizes = ", ".join(f"{used[s] // 1024} KiB at {s} MiB" for s in a.sizes if s in used)
    return "the SDK's partitions between hosts" + (f" ({sizes})" if sizes else "")


def placement_desc(a):
    return ("the ring, each tensor under the salt that balances it "
            "(TESSERA_PLACEMENT_SALT=auto)" if a.salt == "auto" else
            f"the ring, TESSERA_PLACEMENT_SALT={a.salt}")


def report(a, rows, placements, used):
    print(f"""
bench/multihost: {machine_desc()}; 4 workers (w0..w3) x 4 shards (s0..s3) and a master
(m), one emulated host each (network namespaces on a bridge), every link tbf R each way.
Tessera: push+pull of S bytes per step over tcp, {partition_desc(a, used)};
  placement: {placement_desc(a)}.
gloo: all_reduce of S bytes, 4 ranks on w0..w3.
Median of {a.iters} steps after {WARMUP} warm-up, a step being the slowest worker's.
algbw = S / step (GB/s = 1e9 B/s); x R = algbw * 8 / R; x gloo = against gloo at the same
size and R. CPU: ms per step of our processes (Tessera: workers + shards; gloo: its ranks);
other: the rest of the machine's busy time per step (softirq work of the links, anything
else running); busy: the machine's, of {os.cpu_count()} cores, over the timed steps.
Bounds at N = 4: a ring all-reduce reaches 0.67 R, a parameter server R.""")
    for bps, rate in a.rates:
        gbits = rate_name(bps)
        print(f"\nR = {gbits} ({bps / 8e9:.4f} GB/s)"
              + (f"; goal (the issue): Tessera >= {GOAL_OF_R} R and >= {GOAL_VS_GLOO}x gloo, "
                 "every size" if bps == GOAL_RATE else ""))
        hdr = (f"{'row':14} | {'step s':>7} | {'algbw GB/s':>10} | {'x R':>4} | {'x gloo':>6} | "
               f"{'CPU ms':>7} | {'workers + shards':>16} | {'other':>6} | busy")
        print(hdr)
        print("-" * len(hdr))
        for system in ("tessera", "gloo"):
            for size in a.sizes:
                g = find(rows, "gloo", rate, size)
                print(fmt_row(f"{system} {size} MiB", find(rows, system, rate, size), g))
        print(f"{'limit: R':14} | {'':>7} | {bps / 8e9:10.4f} | {1:4.2f} |")
        for size in a.sizes:
            p = placements.get(rate, {}).get(size)
            if p:
                print(f"  placement at {size} MiB (partitions per shard): " + ", ".join(
                    f"{s} {p[s]['partitions']}" for s in sorted(p)))
        for line in verdicts(a, rows, bps, rate):
            print(line)


def verdicts(a, rows, bps, rate):
    """The goal at 1 Gbit/s; elsewhere, whether the machine's CPU was the limit."""
    out = []
    for size in a.sizes:
        t, g = find(rows, "tessera", rate, size), find(rows, "gloo", rate, size)
        if bps == GOAL_RATE and t:
            vs = t["algbw_gbs"] / g["algbw_gbs"] if g else 0
            met = t["fraction_of_r"] >= GOAL_OF_R and vs >= GOAL_VS_GLOO
            out.append(f"  goal at {size} MiB: {t['fraction_of_r']:.2f} R (>= {GOAL_OF_R}), "
                       + (f"{vs:.2f}x gloo (>= {GOAL_VS_GLOO}x)" if g else "gloo failed")
                       + f": {'met' if met else 'NOT met'}")
        elif t:
            bound = t["machine_busy"] >= CPU_BOUND_BUSY
            ncpu, step_ms = os.cpu_count(), t["median_s"] * 1e3
            out.append(f"  {size} MiB: {'CPU-bound' if bound else 'not CPU-bound'} (taken as "
                       f"the machine >= {CPU_BOUND_BUSY:.0%} busy): {t['machine_busy']:.0%} "
                       f"busy during Tessera's steps,\n    {t['cpu_ms_per_step']:.0f} CPU ms "
                       f"of ours + {t['other_cpu_ms_per_step']:.0f} other per {step_ms:.0f} ms "
                       f"step ({ncpu} cores: {ncpu * step_ms:.0f} CPU ms)"
                       + (f"; during gloo's {g['machine_busy']:.0%}, {g['cpu_ms_per_step']:.0f}"
                          f" + {g['other_cpu_ms_per_step']:.0f} per {g['median_s'] * 1e3:.0f} "
                          "ms" if g else ""))
    return out


def headline(a, rows):
    """Tessera's algbw against gloo's at 64 MiB and 1 Gbit/s; where a run (--quick) has not
    those, the largest size at the lowest rate, said in the unit."""
    bps, rate = min(a.rates)
    size = HEADLINE_MIB if HEADLINE_MIB in a.sizes else max(a.sizes)
    t, g = find(rows, "tessera", rate, size), find(rows, "gloo", rate, size)
    ours, base = (t or {}).get("algbw_gbs", 0), (g or {}).get("algbw_gbs", 0)
    return {"ours": ours, "baseline": base,
            "unit": f"GB/s algbw, Tessera push+pull against gloo all_reduce of {size} MiB, "
                    f"4 workers x 4 shards on emulated hosts, links of {rate_name(bps)}",
            "ratio": round(ours / base, 3) if base else 0, "size_mib": size, "rate": rate}


# ---- main ----

def make_certs(a, logs):
    """The run's certificates (`tessera certs init`: a CA, master, shard-0..3, client, admin)
    and admin token in logs/tls; every process of the run finds them in $TESSERA_TLS_DIR,
    as a user's do. Returns the directory."""
    d = os.path.join(logs, "tls")
    r = run_quiet([os.path.join(a.bin, "tessera"), "certs", "init", d, "--shards",
                   str(len(SHARDS))])
    if r.returncode:
        raise SystemExit(f"tessera certs init: {r.stderr.strip()}")
    with open(os.path.join(d, "admin.token"), "w", opener=lambda p, f: os.open(p, f, 0o600)) as t:
        t.write(os.urandom(32).hex() + "\n")
    os.environ["TESSERA_TLS_DIR"] = d
    return d


def parse():
    ap = argparse.ArgumentParser(
        description="Tessera's push+pull (4 workers x 4 shards) against gloo's all_reduce "
                    "(4 ranks), every process on an emulated host of its own (network "
                    "namespaces on a bridge), links shaped with tc tbf. Needs root.")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"),
                    help="bench_pushpull, tessera, tessera-master, -shard (default build/bin)")
    ap.add_argument("--out", default="bench/results/multihost.json",
                    help="results (default bench/results/multihost.json)")
    ap.add_argument("--rates", default=None,
                    help="link rates, tc's syntax, comma-separated (default 1gbit,4gbit)")
    ap.add_argument("--sizes", default=None, help="tensor sizes in MiB (default 4,64)")
    ap.add_argument("--iters", type=int, default=None,
                    help=f"timed steps after {WARMUP} warm-up (default 10)")
    ap.add_argument("--partition-kib", default="auto",
                    help="Tessera's partition size in KiB, or auto (default): the SDK's for "
                         "shards on other hosts, S / (64 x shards) rounded down to a multiple "
                         "of 64 KiB less 4 KiB (60 KiB .. 4092 KiB), so that each shard heads "
                         "up to 64 partitions of the tensor, a pull overlaps the pushes after "
                         "it, and no frame ends in a segment of its header alone")
    ap.add_argument("--salt", default="auto",
                    help="the workers' TESSERA_PLACEMENT_SALT: auto (default) balances each "
                         "tensor over the shards; 0 places it by the ring's own hash")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="python3 with torch, for gloo (default /usr/bin/python3)")
    ap.add_argument("--tag", default=None,
                    help="names this run's namespaces and jobs, and is put in every child's "
                         f"environment as {TAG_ENV} (default mh<pid>; letters and digits)")
    ap.add_argument("--quick", action="store_true",
                    help="a test-sized run: 4 MiB, the first rate, 2 steps (flags given win)")
    ap.add_argument("--insecure", action="store_true",
                    help="a plaintext cluster (services --insecure); by default it runs mutual "
                         "TLS as a user's does: certificates made for the run, the data-plane "
                         "handshake, frames MAC'd between hosts (docs/security.md)")
    ap.add_argument("--no-gloo", action="store_true",
                    help="Tessera only (bench/security.py compares clusters, not gloo)")
    a = ap.parse_args()
    a.rates = a.rates or ("1gbit" if a.quick else "1gbit,4gbit")
    a.sizes = a.sizes or ("4" if a.quick else "4,64")
    a.iters = a.iters or (2 if a.quick else 10)
    a.tag = a.tag or f"mh{os.getpid()}"
    try:
        rates = [r.strip() for r in a.rates.split(",") if r.strip()]
        a.rates = sorted({(parse_rate(r), r) for r in rates})
        a.sizes = sorted({int(s) for s in a.sizes.split(",")})
    except ValueError as e:
        ap.error(f"--rates or --sizes: {e}")
    if not a.rates or not a.sizes or min(a.sizes) < 1 or max(a.sizes) > 1024 or a.iters < 1:
        ap.error("--sizes 1..1024 MiB, at least one rate and size, --iters >= 1")
    if a.partition_kib != "auto" and not (a.partition_kib.isdigit() and
                                          1 <= int(a.partition_kib) <= 131072):
        ap.error(f"--partition-kib: '{a.partition_kib}'; want auto or 1..131072 (KiB)")
    if a.partition_kib != "auto" and int(a.partition_kib) > min(a.sizes) * 1024:
        ap.error(f"--partition-kib: {a.partition_kib} KiB is larger than the {min(a.sizes)} "
                 f"MiB tensor: it would be one partition on one shard; want at most "
                 f"{min(a.sizes) * 1024 // len(SHARDS)} to spread it over the {len(SHARDS)} "
                 f"shards")
    if not re.fullmatch(r"[A-Za-z0-9]{1,16}", a.tag):
        ap.error("--tag: 1 to 16 letters and digits")
    if a.salt != "auto" and not (a.salt.isdigit() and int(a.salt) < 1 << 32):
        ap.error(f"--salt: '{a.salt}'; want auto or a salt 0..4294967295")
    if len({r for _, r in a.rates}) != len(a.rates) or len({b for b, _ in a.rates}) != len(
            a.rates):
        ap.error("--rates: each rate once")
    require_bins(ap, a.bin, ("bench_pushpull", "tessera", "tessera-master", "tessera-shard"))
    return a


def main():
    a = parse()
    t_start = time.monotonic()
    os.environ[TAG_ENV] = a.tag      # every child inherits it: a test finds what is left
    os.environ["TESSERA_PLACEMENT_SALT"] = a.salt
    interrupt_on_signals()   # -> KeyboardInterrupt -> finally
    procs, logs = Procs("multihost"), tempfile.mkdtemp(prefix=f"ts-bench-multihost-{a.tag}-")
    rows, errors, placements, used, run = [], [], {}, {}, None
    a.tls = None if a.insecure else make_certs(a, logs)
    try:
        ok, why = Net(["probe"], tag=f"{a.tag}p").probe()
        if not ok:
            log(f"cannot make network namespaces here ({why}): this benchmark needs root, "
                "util-linux and iproute2")
            return 2
        for bps, rate in a.rates:
            run = RateRun(a, bps, rate, procs, logs)
            try:
                rows += run.run(errors)
            finally:
                run.net.down()
            placements[rate] = run.placement
            used.update(run.partition)
    except KeyboardInterrupt:
        log(f"interrupted (logs in {logs})")
        return 1
    except RuntimeError as e:     # the namespaces could not be made
        log(f"{e} (logs in {logs})")
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # let the cleanup finish
            signal.signal(sig, signal.SIG_IGN)
        procs.stop()
        if run:
            run.net.down()
    report(a, rows, placements, used)
    for e in errors:
        print(f"ERROR: {e}")
    result = {"name": "multihost", "machine": machine_desc(), "ok": not errors,
              "quick": a.quick, "tls": bool(a.tls), "workers": len(WORKERS),
              "shards": len(SHARDS),
              "warmup": WARMUP, "iters": a.iters,
              "partition_kib": {s: used[s] // 1024 for s in a.sizes if s in used},
              "placement": {"salt": a.salt, "used": placement_desc(a),
                            "partitions": placements},
              "rates": [r for _, r in a.rates], "sizes_mib": a.sizes,
              "goal": {"rate": "1gbit", "fraction_of_r": GOAL_OF_R, "vs_gloo": GOAL_VS_GLOO},
              "rows": rows + [{"system": "limit", "rate": r, "rate_bps": b,
                               "algbw_gbs": round(b / 8e9, 4), "fraction_of_r": 1.0}
                              for b, r in a.rates],
              "errors": errors, "headline": headline(a, rows)}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}; runtime {time.monotonic() - t_start:.0f} s")
    if errors:
        print(f"logs kept in {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
