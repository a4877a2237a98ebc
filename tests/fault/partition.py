#!/usr/bin/python3
"""partition.py - network partitions between emulated hosts during exact training: packets
dropped without a word (no RST, no ICMP) for a while, then the cut healed; nothing may be lost.

A partition is neither a crash nor a pause: every process runs on, its sockets stay open, and
what it sends is lost on the way, so only timeouts can tell (issue 44). Each run makes 7
emulated hosts (bench/emuhosts.py: network namespaces on one bridge, 10.80.0.1..7): host 1 the
master (tessera-master --replicas 2 --lease-ms L), hosts 2-4 a shard each, hosts 5-6 the two
ranks of one exact job (tessera-worker, as tests/integration/test_hosts.py starts them; rank 0
sleeps 30 ms a step, as `tessera train --slow 0:30` makes it, so that the run outlasts the
cuts), and host 7 this script: it joins that namespace (Net.join, before gRPC starts a thread)
so that its ShardStatus and ClusterStatus calls cross the bridge as another host's would.
Every service runs mutual TLS with the certificates of `tessera certs init`. Each trial starts
a fresh cluster on the hosts, and at a random version of the job cuts, with iptables DROP
rules on INPUT at both ends of each pair cut: what one end sends leaves its stack and is lost
on the way, as on a real network (a DROP on OUTPUT would fail the send inside the sender's
own stack, which no real partition does):
- master: the master cut from every other host for 15 s. The data plane (workers <-> shards)
  needs no master for steps, and a master that hears nobody suspects itself, not every
  member at once (issue 44): it must declare no shard dead;
- link: one worker cut from one shard heading partitions of the job, that pair only, both
  ways, for 60 s. TCP keepalive and TCP_USER_TIMEOUT on the data-plane sockets are to tell
  the worker within seconds (issue 44); it fails over or retries until the cut heals (its
  calls give up after 120 s).
Each cut is checked as it is made: a TCP connect to a closed port across it, each way, must
time out during it (dropped) and be refused once healed (reached: the RST came back).
Then, for the trial to pass:
- both ranks exit 0, and rank 0's params_sha256 equals `tessera train --local` with the same
  steps, over a tcp data plane (shared memory is refused between namespaces);
- master: ClusterStatus shard_failures unchanged once healed, and no rank was told that a
  member was declared dead;
- every process of the cluster stops on SIGTERM.
The stall, from the cut to the second step past the newest version the shards held just after
it (polled on ShardStatus of every shard, as clusterlib.wait_version does), is reported in the
table, not bounded, with the part of it that came after the heal ("past heal": a worker that
waited on TCP's own retransmissions resumes up to a backoff, about a minute, after it).

Skipped with exit 77, the reason printed, where network namespaces cannot be made or iptables
cannot drop packets in one (not root, no CAP_NET_ADMIN, a chroot; no `unshare`, `nsenter`,
`ip` or `iptables`). Every namespace goes at the end (its holder killed by pid), also on a
failure, and with this process whatever kills it (emuhosts.die_with_us).

Prints a line per trial and a table; exits 1 if any trial failed. `make test-fault` runs both
trials. Usage: partition.py --help.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import clusterlib as cl  # noqa: E402
from emuhosts import (Net, Procs, interrupt_on_signals, require_bins, sh,  # noqa: E402
                      die_with_us)

JOB = "pt"
SHARDS = ["shard0", "shard1", "shard2"]
WORKERS = ["worker0", "worker1"]
HOSTS = ["master"] + SHARDS + WORKERS + ["observer"]   # 10.80.0.1 .. 10.80.0.7
SUBNET = "10.80.0"
MASTER_PORT, SHARD_PORT = 7070, 7001   # plus the trial's index: no port of a stopped run
CLOSED_PORT = 9     # nothing listens there: a connect is refused (reached) or times out (cut)
SLOW_MS = 30        # rank 0's sleep per step: `tessera train --slow 0:30`
IPTABLES = ("iptables", "iptables-legacy")   # nf_tables first; the legacy one where it is not
KINDS = ("master", "link")


class Cut:
    """DROP on INPUT at both ends of each (a, b) of pairs (hosts of net), in their namespaces,
    so that what one end sends leaves its stack and is lost on the way. All the rules go in
    one `bash -c`, one fork: a fork of this process, which runs gRPC's threads, takes about
    0.1 s here, ten times an iptables call, and a cut should fall at once. heal() takes them
    out again, once, from whichever thread calls it first; it never raises (it may run in a
    timer's thread), and what it could not undo is in .unhealed."""

    def __init__(self, net, tool, pairs):
        self.net, self.tool, self.pairs = net, tool, list(pairs)
        self.rules = [(a, net.addr(b)) for x, y in self.pairs for a, b in ((x, y), (y, x))]
        self.lock, self.made, self.unhealed = threading.Lock(), False, None

    def make(self):
        self.made = True    # a rule that went in before one failed is taken out too
        sh(["bash", "-ec", "; ".join(self.commands("-I"))])

    def heal(self):
        with self.lock:
            if self.made:
                self.made = False
                try:    # every rule, also past one that fails
                    sh(["bash", "-c", "rc=0; %s || rc=1; exit $rc" %
                        " || rc=1; ".join(self.commands("-D"))])
                except (RuntimeError, OSError) as e:
                    self.unhealed = str(e)[-300:]

    def commands(self, op):
        return [shlex.join(self.net.wrap(h, [self.tool, "-w", op, "INPUT", "-s", src, "-j",
                                             "DROP"])) for h, src in self.rules]

    def connects(self, procs):
        return Connects(self.net, self.pairs, procs)


class Connects:
    """A TCP connect to CLOSED_PORT each way across every pair, all at once: "dropped" when it
    times out, "reached" when it is refused (the RST came back) or connects. Started before the
    moment it is for, waiting on its stdin, so that go() costs no fork (see Cut)."""

    def __init__(self, net, pairs, procs):
        self.tries = [(a, b) for x, y in pairs for a, b in ((x, y), (y, x))]
        jobs = []
        for i, (a, b) in enumerate(self.tries):
            cmd = shlex.join(net.wrap(a, ["timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/%s/%d"
                                          % (net.addr(b), CLOSED_PORT)]))
            jobs.append("(r=$(%s 2>&1); c=$?; echo %d $c $r) &" % (cmd, i))
        self.procs = procs
        self.p = subprocess.Popen(["bash", "-c", "set -f; read -r go || exit 0; %s wait" %
                                   " ".join(jobs)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  start_new_session=True, preexec_fn=die_with_us())
        procs.live.append(self.p)

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.close()
        return self

    def results(self):
        """[(from, to, "dropped" | "reached" | what went wrong)] once every connect ended."""
        out = self.p.stdout.read()      # to its end: each connect gives up after 2 s
        self.p.wait()
        self.p.stdout.close()
        self.procs.live.remove(self.p)
        got = {}
        for line in out.splitlines():
            i, rc, *msg = line.split()
            got[int(i)] = (int(rc), " ".join(msg))
        res = []
        for i, (a, b) in enumerate(self.tries):
            rc, msg = got.get(i, (None, "no answer"))
            res.append((a, b, "dropped" if rc == 124 else "reached"
                        if rc == 0 or "refused" in msg else "exit %s: %s" % (rc, msg[-200:])))
        return res


def check_connects(connects, want, when):
    """Errors for the connects that did not end as want."""
    bad = ["%s -> %s %s" % (a, b, got) for a, b, got in connects.results() if got != want]
    return ["%s, connects that were not %s: %s" % (when, want, ", ".join(bad))] if bad else []


class EmuCluster(cl.Cluster):
    """The master and 3 shards on their hosts of net, mutual TLS; clusterlib's calls (status,
    version, fresh_status) come from this thread's namespace, the observer's. stop() returns
    what did not stop on SIGTERM."""

    def __init__(self, a, net, procs, tls_dir, logs, index):
        self.a, self.net, self.procs, self.logs = a, net, procs, logs
        self.tls_dir, self.started, self.job = tls_dir, [], []
        self.master = "%s:%d" % (net.addr("master"), MASTER_PORT + index)
        try:
            self.start(index)
        except BaseException:
            self.stop()
            raise

    def start(self, index):
        """The master, then the shards, until every shard is alive; their status stubs."""
        net = self.net
        self.spawn("master", ["tessera-master", "--listen", self.master, "--replicas", "2",
                              "--lease-ms", str(self.a.lease_ms), "--grace-ms", "1000"] +
                   self.tls("master"), "master")
        port = SHARD_PORT + index
        for i, h in enumerate(SHARDS):
            self.spawn(h, ["tessera-shard", "--master", self.master, "--listen",
                           "0.0.0.0:%d" % port, "--advertise", "%s:%d" % (net.addr(h), port),
                           "--grace-ms", "1000"] + self.tls("shard-%d" % i), h)
        self.cluster_status = cl.stub(self.channel(self.master), "Master", "ClusterStatus",
                                      cl.master_pb2.ClusterStatusRequest,
                                      cl.master_pb2.ClusterStatusResponse)
        self.wait_alive(60)
        self.shards = {}
        for s in self.status().shards:
            call = cl.stub(self.channel(s.addr), "Shard", "ShardStatus",
                           cl.shard_pb2.ShardStatusRequest, cl.shard_pb2.ShardStatusResponse)
            self.shards[s.id] = (call, call(cl.shard_pb2.ShardStatusRequest(), timeout=5).pid)

    def tls(self, stem):
        d = self.tls_dir
        return ["--tls-cert", os.path.join(d, stem + ".pem"), "--tls-key",
                os.path.join(d, stem + ".key"), "--tls-ca", os.path.join(d, "ca.pem")]

    def spawn(self, host, argv, name, stdout=subprocess.DEVNULL):
        argv = [os.path.join(self.a.bin, argv[0])] + argv[1:]
        with open(os.path.join(self.logs, name + ".log"), "w") as err:
            p = self.procs.start(self.net.wrap(host, argv), stdout, err)
        p.name = name
        self.started.append(p)
        return p

    def wait_alive(self, limit_s):
        until, st = time.monotonic() + limit_s, None
        while time.monotonic() < until:
            for p in self.started:
                if p.poll() is not None:
                    raise RuntimeError("%s exited %d at start: %s" % (p.name, p.returncode,
                                                                      self.tail(p.name)))
            try:
                st = self.fresh_status()
            except cl.grpc.RpcError:
                st = None
            if st and sum(s.state == 1 for s in st.shards) == len(SHARDS):
                return
            time.sleep(0.2)
        raise RuntimeError("%d shards not alive after %d s (logs in %s)" %
                           (len(SHARDS), limit_s, self.logs))

    def tail(self, name, n=1500):
        try:
            with open(os.path.join(self.logs, name + ".log")) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def train(self, steps):
        """The 2 ranks of the job, one per worker host; rank 0 slowed and writing JSON."""
        for r, h in enumerate(WORKERS):
            argv = ["tessera-worker", "--master", self.master, "--job", JOB, "--rank", str(r),
                    "--workers", str(len(WORKERS)), "--steps", str(steps), "--exact"]
            if r == 0:
                argv += ["--json", "--slow-ms", str(SLOW_MS)]
            with open(os.path.join(self.logs, "rank%d.json" % r), "w") as out:
                self.job.append(self.spawn(h, argv, "rank%d" % r, stdout=out))

    def poll(self):
        """For wait_version: an exit code once a rank failed or every rank ended, else None."""
        codes = [p.poll() for p in self.job]
        failed = [c for c in codes if c not in (None, 0)]
        return failed[0] if failed else None if None in codes else 0

    def result(self, timeout):
        """Rank 0's JSON once both ranks exited 0; RuntimeError naming a rank that did not."""
        until = time.monotonic() + timeout
        for r, p in enumerate(self.job):
            try:
                p.wait(timeout=max(1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError("rank %d still running after %d s: %s" %
                                   (r, timeout, self.last("rank%d" % r)))
            if p.returncode != 0:
                raise RuntimeError("rank %d exited %d: %s" % (r, p.returncode,
                                                              self.last("rank%d" % r)))
        with open(os.path.join(self.logs, "rank0.json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])

    def last(self, name):
        """A rank's reason for its exit: the last line its tessera-worker wrote, else the last
        line of its log."""
        lines = self.tail(name, 1 << 16).strip().splitlines() or ["(no output)"]
        said = [x for x in lines if x.startswith("tessera-worker:")]
        return (said or lines)[-1]

    def said(self, text):
        return any(text in self.tail("rank%d" % r, 1 << 20) for r in range(len(WORKERS)))

    def stop(self):
        self.procs.stop(self.started, grace=15)
        return ["%s (exit %d)" % (p.name, p.returncode) for p in self.started
                if p.returncode == -9]


def trial(a, net, tool, procs, tls_dir, rng, want, kind, index):
    cut_s = a.master_cut_s if kind == "master" else a.link_cut_s
    rec = {"kind": kind, "cut_s": cut_s, "errors": []}
    logs = tempfile.mkdtemp(prefix="tessera-partition.")
    rec["logs"] = logs
    heal = c = cut = during = None
    try:
        c = EmuCluster(a, net, procs, tls_dir, logs, index)
        c.train(a.steps)
        ids = sorted(c.shards)
        at = rng.randrange(20, 120)
        _, heads, _ = cl.wait_version(c, JOB, ids, at, c, 120)
        if kind == "master":
            pairs = [("master", h) for h in HOSTS if h != "master"]
            rec["victim"] = "the master from everyone"
        else:
            rank, sid = rng.randrange(len(WORKERS)), rng.choice(sorted(heads))
            addr = [s.addr for s in c.status().shards if s.id == sid][0]
            shard = [h for h in SHARDS if addr.startswith(net.addr(h) + ":")][0]
            pairs = [(WORKERS[rank], shard)]
            rec["victim"] = "rank %d from shard %d (a head)" % (rank, sid)
        failures = c.status().shard_failures
        cut = Cut(net, tool, pairs)
        during = cut.connects(procs)
        cut.make()
        t0 = time.monotonic()
        heal = threading.Timer(cut_s, cut.heal)
        heal.start()
        v, _ = c.version(JOB, ids)
        rec["at"] = v
        during.go()
        try:
            cl.wait_version(c, JOB, ids, v + 2, c, cut_s + 120)
            rec["stall_s"] = time.monotonic() - t0
        except RuntimeError:
            if c.poll() is None:
                raise
            if c.poll() == 0:       # the run ended first: no stall past it
                rec["stall_s"] = time.monotonic() - t0
            else:
                rec["failed_after_s"] = time.monotonic() - t0
        rec["errors"] += check_connects(during, "dropped", "during the cut")
        heal.join()
        if cut.unhealed:
            rec["errors"].append("the cut did not heal: %s" % cut.unhealed)
        rec["errors"] += check_connects(cut.connects(procs).go(), "reached", "once healed")
        try:
            got = c.result(cut_s + 600)
            if got["params_sha256"] != want:
                rec["errors"].append("params_sha256 %s, --local %s" %
                                     (got["params_sha256"], want))
            if got.get("transport") != "tcp":
                rec["errors"].append("data plane %s, not tcp: the cut missed it" %
                                     got.get("transport"))
        except RuntimeError as e:   # what the master decided meanwhile still counts
            rec["errors"].append(str(e))
        st = cl.wait_status(c, 30)
        rec["declared_dead"] = st.shard_failures - failures
        if kind == "master" and rec["declared_dead"]:
            rec["errors"].append("the master declared %d shard(s) dead while cut off" %
                                 rec["declared_dead"])
        if kind == "master" and c.said("declared dead"):
            rec["errors"].append("a rank saw a member declared dead")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        rec["errors"].append(str(e)[-1500:])
    except cl.grpc.RpcError as e:
        rec["errors"].append("gRPC: %s" % e)
    finally:
        if heal:
            heal.cancel()
        if cut:
            cut.heal()
        if during and during.p in procs.live:   # never fired: the trial failed before
            procs.stop([during.p])
        if c:
            left = c.stop()
            if left:
                rec["errors"].append("did not stop on SIGTERM: %s" % ", ".join(left))
    if not rec["errors"]:
        shutil.rmtree(logs, ignore_errors=True)
    return rec


def table(trials, a):
    """A row per trial; "past heal": how much of the stall came after the cut healed."""
    print("\npartition: %d steps, --replicas 2, lease %d ms, rank 0 slowed %d ms a step" %
          (a.steps, a.lease_ms, SLOW_MS))
    print("%-7s %-30s %6s %8s %8s %10s %5s %s" % ("trial", "cut", "cut s", "version",
                                                 "stall s", "past heal", "dead", "result"))
    for t in trials:
        stall = t.get("stall_s")
        print("%-7s %-30s %6.0f %8s %8s %10s %5s %s" % (
            t["kind"], t.get("victim", "-"), t["cut_s"], t.get("at", "-"),
            "-" if stall is None else "%.2f" % stall,
            "%.2f" % (stall - t["cut_s"]) if stall and stall > t["cut_s"] else "-",
            t.get("declared_dead", "-"), "FAILED" if t["errors"] else "ok"))


def usable_iptables(net):
    """The first of IPTABLES that inserts and deletes a DROP rule in the observer's namespace,
    and why each failed."""
    why = []
    for tool in IPTABLES:
        if not shutil.which(tool):
            why.append("no %s" % tool)
            continue
        rule = ["INPUT", "-s", "192.0.2.1", "-j", "DROP"]
        rc, err = sh(net.wrap("observer", [tool, "-w", "-I"] + rule), check=False)
        if rc == 0:
            sh(net.wrap("observer", [tool, "-w", "-D"] + rule), check=False)
            return tool, why
        why.append("%s -I INPUT in a namespace: %s" % (tool, err or "exit %d" % rc))
    return None, why


def parse_kinds(text):
    kinds = [k for k in text.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError("%r: want trials among %s" % (text, ",".join(KINDS)))
    return kinds


def make_certs(binary, d):
    r = subprocess.run([binary, "certs", "init", d, "--shards", str(len(SHARDS))],
                       capture_output=True, text=True, timeout=60, preexec_fn=die_with_us())
    if r.returncode:
        raise SystemExit("tessera certs init: %s" % r.stderr.strip())
    os.environ["TESSERA_TLS_DIR"] = d


def main():
    ap = argparse.ArgumentParser(
        prog="partition.py", description="Network partitions between emulated hosts (network "
        "namespaces, packets dropped by iptables, no RST) during exact training with "
        "--replicas 2: the master cut from everyone, one worker cut from one head shard; each "
        "run must end with the --local fingerprint, the master must declare no shard dead, "
        "and the stall from the cut is reported. Needs root; exits 77 where it cannot run.")
    ap.add_argument("--only", type=parse_kinds, default=list(KINDS),
                    help="trials to run, in order: master (the master cut from everyone), "
                    "link (a worker cut from a head shard); default master,link")
    ap.add_argument("--steps", type=int, default=1200, help="steps of each training "
                    "(default 1200: about a minute)")
    ap.add_argument("--lease-ms", type=int, default=3000, help="member lease (default 3000)")
    ap.add_argument("--master-cut-s", type=float, default=15,
                    help="how long the master is cut off (default 15)")
    ap.add_argument("--link-cut-s", type=float, default=60,
                    help="how long the worker is cut from the head (default 60)")
    cl.trial_args(ap, "moments, ranks and shards")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    require_bins(ap, a.bin, ("tessera", "tessera-master", "tessera-shard", "tessera-worker"))
    seed, rng = cl.seeded(a, "partition")
    binary = os.path.join(a.bin, "tessera")
    interrupt_on_signals()
    net = Net(HOSTS, tag="tsp%d" % os.getpid(), subnet=SUBNET)
    ok, why = net.probe()
    if not ok:
        print("partition: SKIPPED: cannot make network namespaces here (%s): the emulated "
              "hosts need root (CAP_SYS_ADMIN, CAP_NET_ADMIN), util-linux and iproute2" % why)
        return 77
    work = tempfile.mkdtemp(prefix="tessera-partition-run.")
    procs, trials, tool = Procs("partition"), [], None
    try:
        net.up()
        tool, why = usable_iptables(net)
        if not tool:
            print("partition: SKIPPED: cannot drop packets in a network namespace here (%s): "
                  "the cuts need iptables and CAP_NET_ADMIN" % "; ".join(why))
            return 77
        net.join("observer")
        cl.load_protos(a.bin)
        want = cl.result(cl.train(binary, None, a.steps),
                         "tessera train --local")["params_sha256"]
        make_certs(binary, os.path.join(work, "tls"))
        for i, kind in enumerate(a.only):
            t = trial(a, net, tool, procs, os.path.join(work, "tls"), rng, want, kind, i)
            trials.append(t)
            print("trial %d: %s cut %.0f s at version %s: %s%s" % (
                i + 1, t.get("victim", kind), t["cut_s"], t.get("at"),
                "FAILED: " + "; ".join(t["errors"]) if t["errors"] else "ok",
                ", stall %.2f s" % t["stall_s"] if "stall_s" in t else
                ", a rank failed %.2f s after the cut" % t["failed_after_s"]
                if "failed_after_s" in t else ""), flush=True)
            if t["errors"]:
                print("  (logs are in %s)" % t["logs"], flush=True)
    finally:
        procs.stop()
        net.down()
        shutil.rmtree(work, ignore_errors=True)
    table(trials, a)
    return cl.trials_done(a, seed, trials, iptables=tool)


if __name__ == "__main__":
    sys.exit(main())
