#!/usr/bin/python3
"""test_soak.py - one long-lived cluster, many short jobs: no job may leave anything behind.

`tessera up --shards 2` starts a master and two shards that live for the whole run. Before the
first job the script reads, from /proc/<pid>, each service's resident memory (VmRSS), open file
descriptors (/proc/<pid>/fd) and threads (Threads:). It then runs many short `tessera train`
jobs against that cluster, each with settings drawn from a seeded generator (printed; --seed
makes the plan again): 1-3 workers, 1-4 steps, a partition size, a mode (bsp, ssp, asp,
reduce), exact or not, an optimizer and a gradient codec. First --jobs of them one after the
other, then a batch of --concurrent at once. Every --kill-every'th job is killed while it
trains: SIGKILL to the process group of its `tessera train` (the workers are in that group).

At the end:
- every job that was not killed exited 0 with what it was asked for: the steps, a finite loss
  and test accuracy; an exact job's params_sha256 equals that of a `tessera train --local` run
  with the same seed, batch, micro-batch, optimizer and steps (each reference run once);
- every killed job died, all of its processes;
- the master and the shards are the same processes as at the start, the shards alive and the
  map epoch unchanged (no shard died or registered again);
- if the master keeps a job table (ClusterStatus.jobs): each job listed is released, a killed
  one abandoned, the others finished with their own params_sha256 as the fingerprint;
- once the cluster has had time to release the finished jobs, each service's RSS, descriptors
  and threads are back within the margins below of where they were before the first job, and
  of where they were after a short warm-up (the first WARMUP_JOBS jobs; allocators keep some
  memory after the first job). A table shows the three samples.

Profiles: no arguments (or --short) runs the short one that the test suite runs (18 jobs in a
row, 4 at once, every 7th killed: about 1.5 minutes on 2 cores); --full is `make soak`'s (500 in
a row, 20 at once, every 25th killed); --growth is `make soak-growth`'s (1000 in a row, nothing
killed, and a sample after job 300: the master's and the shards' RSS, and the shards' heap in
use, after job 1000 must be within GROWTH_MARGIN_MIB of that sample, so memory that creeps up
a little with every job fails even where the margins above hide it; about 70 minutes on 2
cores). --jobs, --concurrent, --kill-every, --mid and --seed override any of them.
docs/operations.md, "The soak test" and "Memory over many jobs", says how to read the table.

Environment: as every integration test (tessera_testlib.py): TESSERA_BIN, PYTHONPATH,
TESSERA_SRC; TESSERA_KEEP_LOGS=1 keeps the cluster's logs and the jobs' output.
"""
import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
# tessera_testlib first: it re-runs this script under /usr/bin/python3 if grpc is missing.
import tessera_testlib as tl  # noqa: E402
from tessera_testlib import master_pb2, shard_pb2  # noqa: E402
from test_cluster import listen_ports  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
from clusterlib import group_members  # noqa: E402

# ---- Margins of the resource check: end (and warm) against a baseline ----
# Descriptors: a finished job owns none; a few may come and go with gRPC's own connections and
# wakeup fds (the master's connections to the shards, a health check), so a small constant.
FD_MARGIN = 8
# Threads: a finished job owns none (a shard's data-plane thread per connection ends with the
# connection); gRPC's thread pool grows under load and shrinks lazily, so a small constant.
THREAD_MARGIN = 4
# RSS: malloc keeps freed memory in its arenas (one per thread that allocated) and does not
# always give it back, so some growth is not a leak. A leak of one job's parameters (about
# 1 MiB a job for this MLP, plus optimizer state) over hundreds of jobs is far above this.
RSS_MARGIN_MIB = 32       # at least this much, in MiB ...
RSS_MARGIN_FRAC = 0.25    # ... or this fraction of the baseline, whichever is more
# Heap in use (a shard's ShardStatus.heap_in_use, malloc's live bytes): the sharp check. What a
# released job leaves allocated is a leak whatever malloc keeps, so only the noise of gRPC's
# own caches is allowed, against the warm baseline (the first jobs fill those caches).
HEAP_MARGIN_MIB = 4
# Growth (--mid N): what a service may gain from the sample after job N to the end. The first
# hundreds of jobs fill the master's bounded tables (departed workers, released jobs'
# summaries); past them a service that keeps anything per job grows without end.
GROWTH_MARGIN_MIB = 2

# ---- Profiles and timing ----
PROFILES = {"short": {"jobs": 18, "concurrent": 4, "kill_every": 7, "mid": 0},
            "full": {"jobs": 500, "concurrent": 20, "kill_every": 25, "mid": 0},
            "growth": {"jobs": 1000, "concurrent": 0, "kill_every": 0, "mid": 300}}
SHARDS = 2
WARMUP_JOBS = 3        # the warm baseline is sampled after this many jobs (and a settle)
SETTLE_TIMEOUT = 20.0  # s: the most we wait for the shards to drop finished jobs before a sample
SETTLE_QUIET = 1.0     # s: then this long, for connections and threads to wind down
SAMPLE_READS = 5       # a sample is the least of this many reads of /proc ...
SAMPLE_GAP = 0.2       # ... this many seconds apart, so a passing gRPC thread does not count
JOB_TIMEOUT = 300.0    # s: a job that runs longer is killed and fails
KILL_STEPS = 100000    # a job to be killed asks for this many steps: it is still training
KILL_WAIT = 60.0       # s: a victim not seen stepping by then is killed anyway
REF_TIMEOUT = 120.0    # s: one --local reference run

# ---- What a job's settings are drawn from ----
MODES = ("bsp", "ssp", "asp", "reduce")
OPTIMIZERS = ("sgd:lr=0.05", "momentum:lr=0.02,momentum=0.9", "adam:lr=0.001")
CODECS = ("none", "fp16", "bf16", "int8", "topk:0.1")   # refused with --exact
PARTITION_KB = (8, 16, 64, 256, 4096)
SEEDS = (1, 2, 3)
BATCHES = ((32, 8), (64, 16))                           # (batch, micro)

# A master that tracks jobs (docs/operations.md, "How jobs end") lists them in ClusterStatus:
# then settling also waits for it to call every ended job released, and each job's end state is
# checked. Against a master (or generated code) without that table these checks are skipped.
_JOB_STATE = master_pb2.DESCRIPTOR.enum_types_by_name.get("JobState")
JOB_STATES = {v.number: v.name[len("JOB_STATE_"):].lower()
              for v in (_JOB_STATE.values if _JOB_STATE else ())}

T0 = time.monotonic()


def say(msg):
    sys.stdout.write("[%7.1f s] %s\n" % (time.monotonic() - T0, msg))
    sys.stdout.flush()


def tessera():
    return os.path.join(tl.BIN, "tessera")


# ---- /proc ----

def proc_status(pid):
    """(VmRSS in KiB, Threads) from /proc/PID/status."""
    rss = threads = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fd_kinds(pid):
    """{kind: count} of pid's descriptors: socket, pipe, anon_inode:[eventfd], a path..."""
    out = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        k = re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", t)
        out[k] = out.get(k, 0) + 1
    return out


def thread_names(pid):
    """{thread name (comm): count} of pid's threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                k = f.read().strip()
        except OSError:
            continue
        out[k] = out.get(k, 0) + 1
    return out


# ---- the cluster ----

class Soak:
    """The cluster (`tessera up` under tl.Cluster), its services and our gRPC channels."""

    def __init__(self):
        self.c = tl.Cluster(prefix="tessera-soak.")
        self.jobs_dir = os.path.join(self.c.dir, "jobs")
        os.mkdir(self.jobs_dir)
        self.up = self.c.spawn([tessera(), "up", "--shards", str(SHARDS), "--master-port", "0",
                                "--dir", os.path.join(self.c.dir, "up-logs")], "up")
        self.addr = tl.wait_until(lambda: self._master_line(), tl.START_TIMEOUT,
                                  "`tessera up` to print its master's address")
        self.c.take_tls(self.up.log_text())   # the default: mutual TLS
        self._ch = {}
        self.last_master_jobs = None   # the master's job table at the last settle
        cs = tl.wait_until(lambda: self._alive(), tl.START_TIMEOUT, "%d shards alive" % SHARDS)
        self.epoch = cs.epoch
        self.shard_addrs = {s.id: s.addr for s in cs.shards}
        kids = tl.wait_until(lambda: self._kids(), tl.START_TIMEOUT,
                             "a master and %d shards under `tessera up`" % SHARDS)
        # service name -> pid; a shard is named by its id, found by the port it listens on
        self.services = {}
        for pid in kids:
            exe = os.path.basename(tl.cmdline(pid)[0])
            if exe == "tessera-master":
                self.services["master"] = pid
                continue
            ports = listen_ports(pid)
            for sid, addr in self.shard_addrs.items():
                if int(addr.rsplit(":", 1)[1]) in ports:
                    self.services["shard-%d" % sid] = pid
        if len(self.services) != SHARDS + 1:
            raise AssertionError("cannot tell the services apart: %r (children %r)"
                                 % (self.services, kids))

    def _master_line(self):
        m = re.search(r"^master (\S+)$", self.up.log_text(), re.M)
        if not self.up.running():
            raise AssertionError("`tessera up` exited %s:\n%s" % (self.up.p.returncode,
                                                                  self.up.log_text()))
        return m and m.group(1)

    def _alive(self):
        cs = tl.cluster_status(self.channel(self.addr))
        alive = [s for s in cs.shards if s.state == tl.ALIVE]
        return cs if len(alive) == SHARDS else None

    def _kids(self):
        kids = tl.children_of(self.up.pid)
        return kids if len(kids) == SHARDS + 1 else None

    def channel(self, addr):
        if addr not in self._ch:
            self._ch[addr] = tl.dial(addr, self.c.tls_dir)
        return self._ch[addr]

    def close_channels(self):
        """Our connections close before a sample: the services' descriptors count only theirs."""
        for ch in self._ch.values():
            ch.close()
        self._ch = {}

    def shard_status(self):
        """{shard id: ShardStatusResponse} of every shard."""
        return {sid: tl.Stub(self.channel(addr), shard_pb2, "Shard").ShardStatus(
                    shard_pb2.ShardStatusRequest(), timeout=tl.RPC_TIMEOUT)
                for sid, addr in self.shard_addrs.items()}

    def shard_jobs(self):
        """{shard id: {job id: max_version}} from every shard's ShardStatus."""
        return {sid: {j.id: j.max_version for j in st.jobs}
                for sid, st in self.shard_status().items()}

    def cluster(self):
        return tl.cluster_status(self.channel(self.addr))

    def master_jobs(self, cs):
        """{job id: JobInfo} from ClusterStatus, or None if this master has no job table."""
        if not JOB_STATES or "jobs" not in cs.DESCRIPTOR.fields_by_name:
            return None
        return {j.id: j for j in cs.jobs}

    def stop(self, failed):
        self.close_channels()
        if failed:
            self.c.dump_logs()
        self.c.stop()


def settle(soak, what):
    """Waits (at most SETTLE_TIMEOUT) until no worker is alive and no shard holds a job, then
    SETTLE_QUIET; returns the sample, with what the cluster still held."""
    t0 = time.monotonic()
    held = workers = listed = mjobs = None
    while True:
        try:
            cs = soak.cluster()
            workers = sum(1 for w in cs.workers if w.state == tl.ALIVE)
            listed = len(cs.workers)
            mjobs = soak.master_jobs(cs)
            held = soak.shard_jobs()
        except tl.grpc.RpcError as e:
            say("settle (%s): %s" % (what, e))
        unreleased = [j for j in (mjobs or {}).values() if not j.released]
        if (workers == 0 and held is not None and not any(held.values()) and not unreleased) \
                or time.monotonic() - t0 >= SETTLE_TIMEOUT:
            break
        time.sleep(0.5)
    soak.last_master_jobs = mjobs
    soak.close_channels()
    time.sleep(SETTLE_QUIET)
    s = sample(soak.services)
    keep_smaps(soak.services, what)
    try:   # after the sample: these channels would count as the shards' descriptors
        for sid, st in soak.shard_status().items():
            s["shard-%d" % sid].update(heap=st.heap_in_use // 1024, held=st.heap_held // 1024)
    except tl.grpc.RpcError as e:
        say("heap figures (%s): %s" % (what, e))
    jobs_held = {"shard-%d" % sid: len(j) for sid, j in (held or {}).items()}
    if mjobs is None:
        table = "no job table"
    else:
        states = {}
        for j in mjobs.values():
            k = JOB_STATES.get(j.state, str(j.state)) + ("" if j.released else " unreleased")
            states[k] = states.get(k, 0) + 1
        table = "jobs %s" % (", ".join("%s %d" % kv for kv in sorted(states.items())) or "none")
    say("sample '%s' after %.1f s of settling: %s workers alive (%s listed by the master; %s), "
        "jobs held by the shards %s" % (what, time.monotonic() - t0, workers, listed, table,
                                        jobs_held))
    for name in s:
        s[name]["jobs"] = jobs_held.get(name, "")
    return s


def sample(services):
    """{service: {rss (KiB), fds, threads}}, each the least of SAMPLE_READS reads."""
    out = {n: {"rss": None, "fds": None, "threads": None} for n in services}
    for i in range(SAMPLE_READS):
        if i:
            time.sleep(SAMPLE_GAP)
        for name, pid in services.items():
            rss, threads = proc_status(pid)
            fds = proc_fds(pid)
            for k, v in (("rss", rss), ("fds", fds), ("threads", threads)):
                if out[name][k] is None or v < out[name][k]:
                    out[name][k] = v
    for name, pid in services.items():   # what they are, for a report of what grew
        out[name]["fd_kinds"] = fd_kinds(pid)
        out[name]["thread_names"] = thread_names(pid)
    return out


def keep_smaps(services, what):
    """With TESSERA_SOAK_SMAPS=DIR, copies each service's /proc/PID/smaps into DIR, named after
    the service and the sample: which mappings grew tells heap from stacks from arenas."""
    out = os.environ.get("TESSERA_SOAK_SMAPS")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    for name, pid in services.items():
        with open("/proc/%d/smaps" % pid) as src, \
                open(os.path.join(out, "%s.%s.smaps" % (name, what.replace(" ", "-"))), "w") as dst:
            dst.write(src.read())


def growth(before, after):
    """'kind +N, ...' for each kind that after has more of than before."""
    return ", ".join("%s %+d" % (k, after.get(k, 0) - before.get(k, 0))
                     for k in sorted(set(before) | set(after))
                     if after.get(k, 0) != before.get(k, 0)) or "none"


# ---- jobs ----

class Job:
    def __init__(self, n, rng, seed, kill, phase):
        self.n = n
        self.phase = phase
        self.id = "soak-s%d-%d" % (seed, n)
        self.workers = rng.randint(1, 3)
        self.steps = rng.randint(1, 4)
        self.seed = rng.choice(SEEDS)
        self.batch, self.micro = rng.choice(BATCHES)
        self.pkb = rng.choice(PARTITION_KB)
        self.mode = rng.choice(MODES)
        self.staleness = rng.randint(0, 2) if self.mode == "ssp" else None
        self.exact = self.mode in ("bsp", "reduce") and rng.random() < 0.5
        self.optimizer = rng.choice(OPTIMIZERS)
        self.codec = "none" if self.exact else rng.choice(CODECS)
        self.tcp = rng.random() < 0.25
        self.kill = kill
        self.kill_delay = rng.uniform(0.0, 0.5)   # after the shards first show it stepping
        self.p = None
        self.rc = None
        self.killed = False
        self.timed_out = False
        self.seen_step = None
        self.result = None      # its --json line
        self.problems = []

    def describe(self):
        return "W=%d K=%d %s%s%s %s pkb=%d seed=%d b=%d/%d %s%s%s" % (
            self.workers, KILL_STEPS if self.kill else self.steps, self.mode,
            "(%d)" % self.staleness if self.staleness is not None else "",
            " exact" if self.exact else "", self.optimizer.split(":")[0], self.pkb, self.seed,
            self.batch, self.micro, self.codec, " tcp" if self.tcp else "",
            " KILL" if self.kill else "")

    def argv(self, master):
        a = [tessera(), "train", "--master", master, "--workers", str(self.workers),
             "--steps", str(KILL_STEPS if self.kill else self.steps), "--seed", str(self.seed),
             "--batch", str(self.batch), "--micro", str(self.micro),
             "--partition-kb", str(self.pkb), "--mode", self.mode,
             "--optimizer", self.optimizer, "--job", self.id, "--json"]
        if self.staleness is not None:
            a += ["--staleness", str(self.staleness)]
        if self.exact:
            a += ["--exact"]
        if self.codec != "none":
            a += ["--compress", self.codec]
        if self.tcp:
            a += ["--transport", "tcp"]
        return a

    def ref_key(self):
        return (self.seed, self.batch, self.micro, self.optimizer, self.steps)

    def start(self, soak):
        self.out_path = os.path.join(soak.jobs_dir, self.id + ".out")
        self.err_path = os.path.join(soak.jobs_dir, self.id + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(self.argv(soak.addr), stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.pgid = self.p.pid   # start_new_session: it leads its own group; workers join it
        self.t0 = time.monotonic()

    def kill_group(self):
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def text(self, which):
        with open(self.out_path if which == "out" else self.err_path, errors="replace") as f:
            return f.read()

    def finish(self):
        """After the leader exited: no process of the group may be left."""
        self.seconds = time.monotonic() - self.t0
        until = time.monotonic() + 10.0     # SIGKILLed workers take a moment to be reaped
        left = group_members(self.pgid)
        while left and time.monotonic() < until:
            time.sleep(0.05)
            left = group_members(self.pgid)
        if left:
            self.problems.append("left processes of its group running: %r" % left)
            self.kill_group()
        tl.scan_for_sanitizer("job %s" % self.id, self.text("err"))


def plan(args):
    rng = random.Random(args.seed)
    jobs = []
    total = args.jobs + args.concurrent
    for n in range(1, total + 1):
        kill = args.kill_every > 0 and n % args.kill_every == 0
        jobs.append(Job(n, rng, args.seed, kill, "seq" if n <= args.jobs else "conc"))
    return jobs


def run_batch(soak, batch, total, done):
    """Starts every job of batch, kills the victims once they step, waits for all. done counts
    the jobs finished so far, over the whole run; returns the new count."""
    for j in batch:
        j.start(soak)
    running = list(batch)
    while running:
        now = time.monotonic()
        versions = {}
        if any(j.kill and not j.killed for j in running):
            try:
                for held in soak.shard_jobs().values():
                    for job, v in held.items():
                        versions[job] = max(versions.get(job, 0), v)
            except tl.grpc.RpcError as e:
                say("ShardStatus: %s" % e)
        for j in list(running):
            rc = j.p.poll()
            if rc is None:
                if j.kill and not j.killed:
                    if j.seen_step is None and versions.get(j.id, 0) >= 1:
                        j.seen_step = now
                    if (j.seen_step is not None and now >= j.seen_step + j.kill_delay) \
                            or now - j.t0 > KILL_WAIT:
                        j.killed = True
                        j.kill_group()
                elif now - j.t0 > JOB_TIMEOUT and not j.timed_out:
                    j.timed_out = True
                    j.problems.append("still running after %.0f s: killed" % JOB_TIMEOUT)
                    j.kill_group()
                continue
            j.rc = rc
            j.finish()
            running.remove(j)
            done += 1
            if j.killed:
                how = "killed %s" % ("%.2f s after it stepped" % (now - j.seen_step)
                                     if j.seen_step else "(never seen stepping)")
            else:
                how = "rc %d" % rc
            say("%4d/%d %-4s %-14s %-64s %s in %.1f s" % (done, total, j.phase, j.id,
                                                          j.describe(), how, j.seconds))
        time.sleep(0.05)
    return done


# ---- checks ----

def check_job(j, refs):
    """What is wrong with a job that was not killed (a list of strings; empty: nothing)."""
    out = j.text("out")
    if j.rc != 0:
        return ["exited %s: %s" % (j.rc, j.text("err").strip()[-600:])]
    try:
        r = j.result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ["no JSON line at the end of its output: %r" % out[-300:]]
    bad = []
    want = {"steps": j.steps, "start_step": 0, "workers": j.workers, "exact": j.exact,
            "mode": j.mode, "compress": j.codec, "seed": j.seed, "batch": j.batch}
    for k, v in want.items():
        if r.get(k) != v:
            bad.append("%s: %r, asked for %r" % (k, r.get(k), v))
    # rank 0's progress: on stderr with --json
    losses = re.findall(r"step %d/%d: loss (\S+)," % (j.steps, j.steps), j.text("err"))
    if not losses:
        bad.append("no loss reported for step %d/%d" % (j.steps, j.steps))
    elif not math.isfinite(float(losses[-1])):
        bad.append("loss %s" % losses[-1])
    acc = r.get("test_accuracy")
    if not isinstance(acc, (int, float)) or not math.isfinite(acc) or not 0 <= acc <= 1:
        bad.append("test_accuracy %r" % (acc,))
    if j.exact:
        ref = refs[j.ref_key()]
        if ref is None:
            bad.append("no --local reference to compare with (it failed)")
        elif r.get("params_sha256") != ref:
            bad.append("params_sha256 %s, --local gives %s" % (r.get("params_sha256"), ref))
    return bad


def check_master_job(j, info):
    """What the master's job table says wrong about job j (info: its JobInfo)."""
    state = JOB_STATES.get(info.state, str(info.state))
    want = "abandoned" if j.killed else "finished"
    bad = []
    if state != want:
        bad.append("the master says %s (%s), not %s" % (state, info.reason or "no reason", want))
    if not info.released:
        bad.append("the master says its shards have not released it")
    if not j.killed and info.fingerprint and j.result \
            and info.fingerprint != j.result.get("params_sha256"):
        bad.append("the master's fingerprint %s is not the job's params_sha256 %s"
                   % (info.fingerprint, j.result.get("params_sha256")))
    return bad


def local_reference(key):
    """params_sha256 of `tessera train --local --exact` with these settings."""
    seed, batch, micro, optimizer, steps = key
    argv = [tessera(), "train", "--local", "--exact", "--json", "--steps", str(steps),
            "--seed", str(seed), "--batch", str(batch), "--micro", str(micro),
            "--optimizer", optimizer]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        out, err = p.communicate(timeout=REF_TIMEOUT)
    finally:
        if p.poll() is None or group_members(p.pid):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    tl.scan_for_sanitizer("tessera train --local", err)
    if p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(argv), p.returncode, err))
    return json.loads(out.strip().splitlines()[-1])["params_sha256"]


def limits(base):
    return {"rss": base["rss"] + max(RSS_MARGIN_MIB * 1024, RSS_MARGIN_FRAC * base["rss"]),
            "fds": base["fds"] + FD_MARGIN, "threads": base["threads"] + THREAD_MARGIN}


def table(samples, pids):
    """samples: [(letter, sample)], e.g. s(tart), w(arm), m(id), e(nd)."""
    mib = lambda kib: "%.1f" % (kib / 1024.0)  # noqa: E731
    heap = lambda x, k: mib(x[k]) if k in x else "?"  # noqa: E731
    tag = "/".join(k for k, _ in samples)
    lines = ["%-9s %7s | %-26s | %-24s | %-24s | %-16s | %-16s | %s" % (
        "service", "pid", "RSS MiB " + tag, "heap in use MiB " + tag,
        "heap held MiB " + tag, "fds " + tag, "threads " + tag, "jobs held " + tag)]
    for name in sorted(samples[0][1]):
        xs = [x[name] for _, x in samples]
        lines.append("%-9s %7d | %-26s | %-24s | %-24s | %-16s | %-16s | %s" % (
            name, pids[name], "/".join(mib(x["rss"]) for x in xs),
            "/".join(heap(x, "heap") for x in xs) if "heap" in xs[0] else "-",
            "/".join(heap(x, "held") for x in xs) if "held" in xs[0] else "-",
            "/".join(str(x["fds"]) for x in xs),
            "/".join(str(x["threads"]) for x in xs),
            "/".join(str(x["jobs"]) for x in xs) if xs[0]["jobs"] != "" else "-"))
    return "\n".join(lines)


def resource_problems(start, warm, end):
    bad = []
    for base_name, base in (("start", start), ("warm", warm)):
        for name in sorted(end):
            lim = limits(base[name])
            for k in ("rss", "fds", "threads"):
                if end[name][k] > lim[k]:
                    unit = " KiB" if k == "rss" else ""
                    bad.append("%s: %s %d%s at the end, above its %s baseline %d%s + margin "
                               "(limit %d%s)" % (name, k, end[name][k], unit, base_name,
                                                 base[name][k], unit, lim[k], unit))
    for name in sorted(end):
        if "heap" in end[name] and "heap" in warm[name]:
            lim = warm[name]["heap"] + HEAP_MARGIN_MIB * 1024
            if end[name]["heap"] > lim:
                bad.append("%s: heap in use %d KiB at the end, above its warm baseline %d KiB "
                           "+ %d MiB: a released job left memory allocated (a leak)" % (
                               name, end[name]["heap"], warm[name]["heap"], HEAP_MARGIN_MIB))
    return bad


def growth_problems(mid, end, mid_jobs):
    """What grew past GROWTH_MARGIN_MIB from the sample after mid_jobs jobs to the end: RSS of
    every service, heap in use of the shards."""
    bad = []
    for name in sorted(end):
        for k, what in (("rss", "RSS"), ("heap", "heap in use")):
            if k in end[name] and k in mid[name] and \
                    end[name][k] > mid[name][k] + GROWTH_MARGIN_MIB * 1024:
                bad.append("%s: %s %d KiB at the end, %d KiB after job %d: it grew %.2f MiB, "
                           "more than %d MiB, so something is kept per job" % (
                               name, what, end[name][k], mid[name][k], mid_jobs,
                               (end[name][k] - mid[name][k]) / 1024.0, GROWTH_MARGIN_MIB))
    return bad


# ---- main ----

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="test_soak.py", description="Many short training jobs against one long-lived "
        "cluster; afterwards the services' memory, descriptors and threads must be back near "
        "where they started. With no arguments: the short profile (the test suite's).")
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--short", dest="profile", action="store_const", const="short",
                      help="30 jobs in a row, 6 at once, every 12th killed (the default)")
    prof.add_argument("--full", dest="profile", action="store_const", const="full",
                      help="500 jobs in a row, 20 at once, every 25th killed (make soak)")
    prof.add_argument("--growth", dest="profile", action="store_const", const="growth",
                      help="1000 jobs in a row, none killed, RSS after job 300 against the "
                      "end (make soak-growth)")
    ap.add_argument("--jobs", type=int, metavar="N", help="jobs run one after the other")
    ap.add_argument("--concurrent", type=int, metavar="M",
                    help="jobs run at once in the concurrent phase, after the others")
    ap.add_argument("--kill-every", type=int, metavar="K",
                    help="every K-th job is killed while it trains (0: none)")
    ap.add_argument("--mid", type=int, metavar="N",
                    help="sample after the N-th job in a row too: the end may be at most %d "
                    "MiB above it (0: no such sample)" % GROWTH_MARGIN_MIB)
    ap.add_argument("--seed", type=int, metavar="S",
                    help="seed of the plan (default: from the clock; printed)")
    a = ap.parse_args(argv)
    prof = PROFILES[a.profile or "short"]
    for k in ("jobs", "concurrent", "kill_every", "mid"):
        if getattr(a, k) is None:
            setattr(a, k, prof[k])
        if getattr(a, k) < 0:
            ap.error("--%s must be 0 or more" % k.replace("_", "-"))
    if a.jobs + a.concurrent == 0:
        ap.error("nothing to run: --jobs and --concurrent are both 0")
    if a.mid and a.mid >= a.jobs:
        ap.error("--mid %d: the sample must come before the last of the %d jobs in a row"
                 % (a.mid, a.jobs))
    if a.seed is None:
        a.seed = int(time.time() * 1000) % 1000000
    a.profile = a.profile or "short"
    return a


def main(argv):
    args = parse_args(argv)
    # SIGTERM (ctest's timeout, a kill by pid) unwinds through the finally below.
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))
    say("soak: seed %d, %d jobs in a row then %d at once, %s killed "
        "(rerun: test_soak.py --jobs %d --concurrent %d --kill-every %d --mid %d --seed %d)"
        % (args.seed, args.jobs, args.concurrent,
           "one job in %d" % args.kill_every if args.kill_every else "no job", args.jobs,
           args.concurrent, args.kill_every, args.mid, args.seed))
    jobs = plan(args)
    failures = []
    soak = None
    try:
        soak = Soak()
        say("cluster: master %s, services %s, logs in %s" % (
            soak.addr, ", ".join("%s pid %d" % kv for kv in sorted(soak.services.items())),
            soak.c.dir))
        start = settle(soak, "start, before the first job")
        warm = mid = None
        done = 0
        seq = [j for j in jobs if j.phase == "seq"]
        for j in seq:
            done = run_batch(soak, [j], len(jobs), done)
            if j.n == min(WARMUP_JOBS, len(seq)):
                warm = settle(soak, "warm, after %d jobs" % j.n)
            if j.n == args.mid:
                mid = settle(soak, "mid, after %d jobs" % j.n)
        if warm is None:
            warm = start
        conc = [j for j in jobs if j.phase == "conc"]
        if conc:
            say("concurrent phase: %d jobs at once" % len(conc))
            done = run_batch(soak, conc, len(jobs), done)
        end = settle(soak, "end, after %d jobs" % len(jobs))
        say("resources (the least of %d reads %.1f s apart; margins: fds +%d, threads +%d, "
            "RSS +max(%d MiB, %d%%), shards' heap in use +%d MiB over warm):\n%s" % (
                SAMPLE_READS, SAMPLE_GAP, FD_MARGIN, THREAD_MARGIN, RSS_MARGIN_MIB,
                RSS_MARGIN_FRAC * 100, HEAP_MARGIN_MIB,
                table([("s", start), ("w", warm)] + ([("m", mid)] if mid else []) + [("e", end)],
                      soak.services)))

        # the services lived through it: same pids, shards alive, the map as it was
        for name, pid in sorted(soak.services.items()):
            if not tl.pid_alive(pid):
                failures.append("%s (pid %d) is gone" % (name, pid))
        cs = soak.cluster()
        alive = sorted(s.id for s in cs.shards if s.state == tl.ALIVE)
        if alive != sorted(soak.shard_addrs) or cs.epoch != soak.epoch:
            failures.append("shards alive %r at epoch %d; at the start %r at epoch %d"
                            % (alive, cs.epoch, sorted(soak.shard_addrs), soak.epoch))
        soak.close_channels()
        for name in sorted(end):
            say("%s, start to end: descriptors: %s; threads: %s" % (
                name, growth(start[name]["fd_kinds"], end[name]["fd_kinds"]),
                growth(start[name]["thread_names"], end[name]["thread_names"])))
        failures += resource_problems(start, warm, end)
        if mid:
            failures += growth_problems(mid, end, args.mid)

        # every job: killed ones are gone; the others did what they were asked
        refs = {}
        keys = sorted({j.ref_key() for j in jobs if j.exact and not j.killed})
        say("%d --local reference runs for the exact jobs" % len(keys))
        for k in keys:
            try:
                refs[k] = local_reference(k)
            except (AssertionError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
                refs[k] = None
                failures.append("the --local reference %r: %s" % (k, e))
        counts = {"ok": 0, "killed": 0, "exact checked": 0}
        mjobs = soak.last_master_jobs   # the master's table at the end sample
        for j in jobs:
            bad = list(j.problems)
            if j.killed:
                counts["killed"] += 1
                if j.rc != -signal.SIGKILL:
                    bad.append("killed, but exited %s" % j.rc)
            else:
                if j.kill:
                    bad.append("meant to be killed, exited %s first" % j.rc)
                bad += check_job(j, refs)
                if not bad:
                    counts["ok"] += 1
                    counts["exact checked"] += j.exact
            if mjobs is not None and j.id in mjobs and (j.killed or not bad):
                bad += check_master_job(j, mjobs[j.id])
            failures += ["job %s (%s): %s" % (j.id, j.describe(), b) for b in bad]
        say("jobs: %d ok (%d exact, equal to --local), %d killed, of %d; %s"
            % (counts["ok"], counts["exact checked"], counts["killed"], len(jobs),
               "the master has no job table" if mjobs is None else
               "the master's job table lists %d of them"
               % sum(1 for j in jobs if j.id in mjobs)))
    except BaseException as e:
        failures.append("the run stopped: %s: %s" % (type(e).__name__, e))
        if not isinstance(e, (AssertionError, KeyboardInterrupt, SystemExit)):
            import traceback
            traceback.print_exc()
    finally:
        for j in jobs:
            if j.p is not None and j.p.poll() is None:
                j.kill_group()
                j.p.wait()
        # The problems go out before the services' logs: a log cut short keeps them.
        for f in failures:
            sys.stdout.write("FAIL: %s\n" % f)
        sys.stdout.flush()
        if soak is not None:
            soak.stop(bool(failures))
    reported = len(failures)
    if tl.SANITIZED:
        tl.scan_logs(tl.TEST_TMP)
    failures += tl.sanitizer_reports()
    for f in failures[reported:]:
        sys.stdout.write("FAIL: %s\n" % f)
    # The first problem is repeated on the last line: a log cut to its tail still shows it.
    say("%s: seed %d, %d jobs%s" % (
        "FAILED (%d problem%s, the first: %s)" % (
            len(failures), "s" * (len(failures) != 1), failures[0][:400]) if failures
        else "OK", args.seed, len(jobs),
        "; TESSERA_KEEP_LOGS=1 keeps the logs" if failures and
        not os.environ.get("TESSERA_KEEP_LOGS") else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
