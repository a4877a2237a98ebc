"""clusterlib.py - a `tessera up` cluster driven from Python, for the kill trials of
tests/fault/ and bench/recovery.py.

A Cluster is `tessera up` started as a child in its own process group, with the master's
address read from its output and each shard's ShardStatus stub and PID. stop() ends it the
way an operator would (SIGTERM to `tessera up`), says how many processes of its group were
still there afterwards (0 is the only right answer), then SIGKILLs whatever is left so that a
failed run leaves nothing behind. Trainings run as `tessera train` in their own groups too.

Protos come from the build: load_protos(bin_dir) before anything else.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

grpc = master_pb2 = shard_pb2 = None


def load_protos(bin_dir):
    """Imports grpc and the generated modules of the build whose binaries are in bin_dir."""
    global grpc, master_pb2, shard_pb2
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "gen", "python"))
    import grpc as g  # noqa: E402
    from tessera.v1 import master_pb2 as m, shard_pb2 as s  # noqa: E402
    grpc, master_pb2, shard_pb2 = g, m, s


def trial_args(ap, seed_help):
    """The arguments every trial script takes: --bin, --seed (seed_help: what it draws) and
    --json-out."""
    ap.add_argument("--bin", default=os.environ.get(
        "TESSERA_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "build", "bin")),
        help="directory of tessera and its services (default $TESSERA_BIN, then build/bin)")
    ap.add_argument("--seed", type=int, default=None,
                    help="%s (default: random, printed)" % seed_help)
    ap.add_argument("--json-out", help="write every trial's record here")


def seeded(a, prog):
    """(seed, its random.Random): a.seed, or a random one; printed with how to rerun it."""
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print("%s: seed %d (rerun with --seed %d)" % (prog, seed, seed), flush=True)
    return seed, random.Random(seed)


def trials_done(a, seed, trials, **extra):
    """Writes the trials to --json-out (with the seed, the steps and extra), if asked; the
    script's exit status: 0 when no trial has errors."""
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(dict({"seed": seed, "steps": a.steps}, **extra, trials=trials), f,
                      indent=1)
    return 0 if all(not t["errors"] for t in trials) else 1


def exit_on_sigterm():
    """SIGTERM ends the script through SystemExit, so that each `finally` stops its cluster
    and nothing of it is left behind."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def stub(channel, svc, method, req_cls, resp_cls):
    return channel.unary_unary("/tessera.v1.%s/%s" % (svc, method),
                               request_serializer=req_cls.SerializeToString,
                               response_deserializer=resp_cls.FromString)


def group_members(pgid):
    """PIDs of the live (not zombie) processes in process group pgid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(d))
    return out


def stop_group(proc, grace_s=45):
    """SIGTERM to proc (the leader of its own group), a wait, then returns the PIDs of its
    group still alive, and SIGKILLs them."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    left = group_members(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return left


class Cluster:
    """`tessera up --shards N --replicas R --lease-ms L` in workdir: mutual TLS, its default,
    unless extra says --insecure. Its certificates become $TESSERA_TLS_DIR of this process and
    of what it starts (the trainings) while it runs."""

    def __init__(self, binary, workdir, shards=3, replicas=2, lease_ms=3000, extra=()):
        self.proc = subprocess.Popen(
            [binary, "up", "--shards", str(shards), "--replicas", str(replicas), "--lease-ms",
             str(lease_ms), "--master-port", "0", "--dir", workdir] + list(extra),
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.workdir = workdir
        self.master = self.tls_dir = None
        for line in self.proc.stdout:
            if line.startswith("master "):
                self.master = line.split()[1]
            if line.startswith("export TESSERA_TLS_DIR="):
                self.tls_dir = line.strip().split("=", 1)[1]
                os.environ["TESSERA_TLS_DIR"] = self.tls_dir
            if "shards alive" in line:
                break
        if not self.master or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("tessera up did not start (logs in %s)" % workdir)
        ch = self.channel(self.master)
        self.cluster_status = stub(ch, "Master", "ClusterStatus",
                                   master_pb2.ClusterStatusRequest,
                                   master_pb2.ClusterStatusResponse)
        self.shards = {}
        for s in self.status().shards:
            call = stub(self.channel(s.addr), "Shard", "ShardStatus",
                        shard_pb2.ShardStatusRequest, shard_pb2.ShardStatusResponse)
            self.shards[s.id] = (call, call(shard_pb2.ShardStatusRequest(), timeout=5).pid)

    def channel(self, addr):
        """A channel to a service of the cluster: mutual TLS with the client certificate of
        its directory, checking the server as server.tessera (docs/security.md)."""
        if not self.tls_dir:
            return grpc.insecure_channel(addr)
        pem = {}
        for name in ("ca.pem", "client.pem", "client.key"):
            with open(os.path.join(self.tls_dir, name), "rb") as f:
                pem[name] = f.read()
        creds = grpc.ssl_channel_credentials(pem["ca.pem"], pem["client.key"], pem["client.pem"])
        return grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override",
                                                          "server.tessera")])

    def status(self):
        return self.cluster_status(master_pb2.ClusterStatusRequest(), timeout=5)

    def start_shard(self, bin_dir, name, log, extra=()):
        """One more tessera-shard registered with the master (it joins while jobs run), its
        output to the file log, in a session of its own (stop_group). On a TLS cluster it
        shows a certificate of its own, member shard/NAME, issued from the cluster's CA
        (`tessera certs issue`): the client's is no server's, and another shard's identity
        is refused while that shard is alive."""
        argv = [os.path.join(bin_dir, "tessera-shard"), "--master", self.master] + list(extra)
        if self.tls_dir:
            subprocess.run([os.path.join(bin_dir, "tessera"), "certs", "issue", self.tls_dir,
                            "--member", "shard/" + name], check=True, capture_output=True)
            cert = os.path.join(self.tls_dir, "shard-%s." % name)
            argv += ["--tls-cert", cert + "pem", "--tls-key", cert + "key", "--tls-ca",
                     os.path.join(self.tls_dir, "ca.pem")]
        return subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)

    def fresh_status(self):
        """ClusterStatus over a new channel: after the master was killed and restarted, a
        channel that was connected to the old one went on failing calls for seconds
        (docs/membership.md), which would time the client, not the master."""
        ch = self.channel(self.master)
        try:
            return stub(ch, "Master", "ClusterStatus", master_pb2.ClusterStatusRequest,
                        master_pb2.ClusterStatusResponse)(master_pb2.ClusterStatusRequest(),
                                                          timeout=1)
        finally:
            ch.close()

    def pid(self, shard_id):
        return self.shards[shard_id][1]

    def version(self, job, ids):
        """The newest version of job over the shards ids (those that answer), and the ids
        heading some of its partitions."""
        best, heads = -1, []
        for sid in ids:
            try:
                st = self.shards[sid][0](shard_pb2.ShardStatusRequest(), timeout=1)
            except grpc.RpcError:
                continue
            for j in st.jobs:
                if j.id == job:
                    best = max(best, j.max_version)
                    if j.partitions:
                        heads.append(sid)
        return best, heads

    def stop(self):
        """Stops the cluster; returns the PIDs of its processes that outlived the stop."""
        if self.tls_dir and os.environ.get("TESSERA_TLS_DIR") == self.tls_dir:
            del os.environ["TESSERA_TLS_DIR"]
        left = stop_group(self.proc)
        self.proc.stdout.close()
        return left


def train(binary, master, steps, job=None, workers=2, extra=()):
    """`tessera train --exact --json`: --local when master is None."""
    argv = [binary, "train", "--steps", str(steps), "--exact", "--json"]
    argv += ["--local"] if master is None else ["--master", master, "--workers", str(workers)]
    if job:
        argv += ["--job", job]
    return subprocess.Popen(argv + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def result(p, what, timeout=600, stderr=False):
    """The last JSON line of a finished training (and, with stderr, what it wrote there);
    RuntimeError with its stderr if it failed."""
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (what, p.returncode, err[-2000:]))
    doc = json.loads(out.strip().splitlines()[-1])
    return (doc, err) if stderr else doc


def children(pid):
    """The pids of pid's children."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def worker_pid(p, rank):
    """The pid of `tessera train` p's worker of rank, or None."""
    for pid in children(p.pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--rank" in argv and argv[argv.index(b"--rank") + 1] == str(rank).encode():
            return pid
    return None



def master_back(c, before, limit_s=30):
    """Waits for the master killed after ClusterStatus `before` to answer again (another
    pid, over a new channel); returns (when it did, on the monotonic clock, and what is wrong
    with what it says: not restored, not restart 1, an epoch not above before's, other shards
    alive)."""
    until = time.monotonic() + limit_s
    alive = lambda s: sorted(x.id for x in s.shards if x.state == 1)  # noqa: E731
    while time.monotonic() < until:
        try:
            st = c.fresh_status()
        except grpc.RpcError:
            st = None
        if st is None or st.master_pid == before.master_pid:
            time.sleep(0.005)
            continue
        back, wrong = time.monotonic(), []
        if not st.restored or st.master_restarts != 1:
            wrong.append("the restarted master: restored %s, restarts %d" %
                         (st.restored, st.master_restarts))
        if st.epoch <= before.epoch:
            wrong.append("epoch %d after the restart, %d before" % (st.epoch, before.epoch))
        if alive(st) != alive(before):
            wrong.append("shards alive %s after the restart, %s before" %
                         (alive(st), alive(before)))
        return back, wrong
    return time.monotonic(), ["the master did not come back within %d s" % limit_s]


def wait_status(c, limit_s):
    """ClusterStatus once the master answers (a new channel each try: see fresh_status);
    RuntimeError after limit_s."""
    until = time.monotonic() + limit_s
    while True:
        try:
            return c.fresh_status()
        except grpc.RpcError as e:
            if time.monotonic() > until:
                raise RuntimeError("the master did not answer within %d s: %s" % (limit_s, e))
        time.sleep(0.1)


def wait_version(c, job, ids, at_least, proc, limit_s, poll_s=0.005):
    """Polls until job's newest version over ids is at least at_least; returns (version,
    heads, seconds waited). RuntimeError if proc ended first or limit_s passed."""
    t0 = time.monotonic()
    while True:
        v, heads = c.version(job, ids)
        if v >= at_least and heads:
            return v, heads, time.monotonic() - t0
        if time.monotonic() - t0 > limit_s:
            raise RuntimeError("job %s did not reach version %d within %d s" %
                               (job, at_least, limit_s))
        if proc.poll() is not None:
            raise RuntimeError("the training of job %s ended before version %d" %
                               (job, at_least))
        time.sleep(poll_s)
