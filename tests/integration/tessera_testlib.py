"""tessera_testlib.py - what the integration tests share: processes, waits, gRPC stubs.

The tests run the real binaries on 127.0.0.1 with ephemeral ports (a master writes the port it
bound into --port-file) and talk to them with python3-grpcio through generic stubs built from the
generated *_pb2 descriptors (Debian has no grpc_tools). Every process is started in its own
session and stopped by pid; if it does not exit in time, its process group (and only that group)
gets SIGKILL, so nothing outlives a failing test. Every wait is bounded.

A failing test prints its processes' logs; TESSERA_KEEP_LOGS=1 keeps the temp dir as well.
The run itself (paths, the interpreter, the temp dir, sanitizer reports, long cases, main) is
tessera_testrun.py's; its names are re-exported here, so a test needs only `tl`.
"""
import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# First: it re-runs this script under /usr/bin/python3 when grpc is missing.
from tessera_testrun import (BIN, GEN, LONG, NO_HOOKS, SANITIZED, SRC,  # noqa: E402,F401
                             TEST_HOOKS, TEST_TMP, exec_again, long_case, main,
                             sanitizer_reports, scan_for_sanitizer, scan_logs)
import grpc  # noqa: E402

from google.protobuf import symbol_database  # noqa: E402

from tessera.v1 import common_pb2, master_pb2, shard_pb2  # noqa: E402,F401


def _load_gen(relpath, modname):
    """Loads a generated module by file. The grpc/health and grpc/reflection bindings sit under
    a directory named grpc, which grpcio's own `grpc` package shadows, so they cannot be
    imported by package name."""
    import importlib.util
    dirs = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d] + [GEN]
    for d in dirs:
        path = os.path.join(d, relpath)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[modname] = mod
            return mod
    raise ImportError("%s not found under %s: build first (cmake --build build)"
                      % (relpath, dirs))


health_pb2 = _load_gen("grpc/health/v1/health_pb2.py", "ts_gen_health_v1_pb2")
reflection_v1_pb2 = _load_gen("grpc/reflection/v1/reflection_pb2.py",
                              "ts_gen_reflection_v1_pb2")
reflection_v1alpha_pb2 = _load_gen("grpc/reflection/v1alpha/reflection_pb2.py",
                                   "ts_gen_reflection_v1alpha_pb2")

SHARD = common_pb2.MEMBER_KIND_SHARD
WORKER = common_pb2.MEMBER_KIND_WORKER
ALIVE = common_pb2.MEMBER_STATE_ALIVE
DEAD = common_pb2.MEMBER_STATE_DEAD
LEFT = common_pb2.MEMBER_STATE_LEFT

RPC_TIMEOUT = 5.0     # seconds for one unary call
START_TIMEOUT = 15.0  # seconds for a process to come up


def log(msg):
    sys.stderr.write("  %s\n" % msg)
    sys.stderr.flush()


def wait_until(pred, timeout, what, interval=0.02):
    """Polls pred() until it returns something truthy, which is returned; fails after timeout.
    A pred that costs more CPU than interval (one that runs `tessera status`: a process and
    TLS handshakes, ~0.1 s of CPU here and as much in the services) is called again after twice
    the CPU it took (at most 1 s), not after interval: polled back to back it would take a core
    from the cluster it waits for. One that only waits (a refused call, a timeout) is not
    slowed down."""
    until = time.monotonic() + timeout
    last_exc = None
    while True:
        cpu0 = _cpu_seconds()
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # a call that fails while a process starts: try again
            last_exc = e
        now = time.monotonic()
        if now >= until:
            raise AssertionError("timed out after %.1f s waiting for %s%s" % (
                timeout, what, " (last error: %r)" % (last_exc,) if last_exc else ""))
        pause = min(max(interval, 2 * (_cpu_seconds() - cpu0)), 1.0)
        time.sleep(min(pause, max(until - now, 0)))


def _cpu_seconds():
    """CPU time of this process and of its children waited for (a `tessera status` run)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def children_of(pid):
    """The pids of pid's children, from /proc/<pid>/task/*/children."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except FileNotFoundError:
        pass
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except FileNotFoundError:
        return []


def worker_of(train, rank):
    """The pid of `tessera train` train's (a Proc) tessera-worker of rank, once it runs."""
    def find():
        for pid in children_of(train.pid):
            argv = cmdline(pid)
            if "--rank" in argv and argv[argv.index("--rank") + 1] == str(rank):
                return pid
        return None
    return wait_until(find, START_TIMEOUT, "worker %d of %s to start" % (rank, train.name))


def rank_pid_past(addr, job, rank, step, timeout=90):
    """The pid of job's worker of rank at the cluster at addr (alive, as `tessera status`
    lists it), once its clock is at step or past: a victim for a kill."""
    def find():
        for w in status_json(addr)["workers"]:
            if w.get("job") == job and w["rank"] == rank and w["clock"] >= step and \
                    w["state"] == "alive":
                return w["pid"]
        return None
    return wait_until(find, timeout, "rank %d of %s at step %d" % (rank, job, step))


class Proc:
    """A process of ours: its own session, stdout+stderr in a log file, stopped by pid."""

    def __init__(self, argv, logdir, name, stdout_pipe=False):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(logdir, name + ".log")
        self._log = open(self.log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE if stdout_pipe else self._log,
                                  stderr=self._log, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        self.pid = self.p.pid
        self.pgid = self.pid  # start_new_session: the child leads its own group

    def running(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.p.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout):
        """The exit status, or None if it is still running after timeout seconds."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=10.0):
        """SIGTERM, wait, then SIGKILL to its own process group. Returns the exit status."""
        rc = self.p.poll()
        if rc is None:
            self.signal(signal.SIGTERM)
            rc = self.wait(timeout)
        if rc is None:
            log("%s (pid %d) ignored SIGTERM for %.0f s: SIGKILL to its group"
                % (self.name, self.pid, timeout))
        try:
            os.killpg(self.pgid, signal.SIGKILL)  # also whatever it started and left behind
        except ProcessLookupError:
            pass
        if rc is None:
            rc = self.wait(5.0)
        if self.p.stdout:
            self.p.stdout.close()
        self._log.close()
        return rc

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


class Cluster:
    """The processes and temp dir of one test; stop() ends them all (call it in tearDown). A
    cluster not stopped by then is stopped when the test process exits: unittest skips
    tearDownClass when setUpClass fails halfway, which once left a master and two shards of a
    failed setUpClass running."""

    def __init__(self, prefix="tessera-test."):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.procs = []
        self.channels = []
        self.tls_dir = None   # set by tessera_up for a TLS cluster
        atexit.register(lambda: self.procs and self.stop())

    def spawn(self, argv, name, stdout_pipe=False):
        p = Proc(argv, self.dir, name, stdout_pipe)
        self.procs.append(p)
        return p

    def tessera_up(self, args=(), tessera=None, name="up", prefix=()):
        """`tessera up --master-port 0 --dir DIR/name ARGS` (tessera: the binary, default
        BIN's; prefix: argv run before it, e.g. a MemoryCage's), waited for until its shards are
        alive; returns (its Proc, the master's address).
        Without --insecure in ARGS the cluster runs mutual TLS, its default: its certificates'
        directory becomes self.tls_dir and $TESSERA_TLS_DIR of this process and of every
        process it starts from now on (the CLI, tessera train, the SDK read it), and
        self.channel() dials TLS. The lines it printed up to its shards alive are the Proc's
        .head."""
        if "--insecure" in args:   # what was exported for another cluster is not this one's
            self.tls_dir = None
            os.environ.pop("TESSERA_TLS_DIR", None)
        argv = [tessera or os.path.join(BIN, "tessera"), "up", "--master-port", "0", "--dir",
                os.path.join(self.dir, name)] + list(args)
        up = self.spawn(list(prefix) + argv, name, stdout_pipe=True)
        master = None
        up.head = []
        for line in up.p.stdout:
            line = line.decode()
            up.head.append(line)
            if line.startswith("master "):
                master = line.split()[1]
            self.take_tls(line)
            if "shards alive" in line:
                break
        if "--insecure" in args:   # what was exported for another cluster is not this one's
            self.tls_dir = None
            os.environ.pop("TESSERA_TLS_DIR", None)
        if not master:
            raise AssertionError("%s up did not start:\n%s" % (tessera or "tessera",
                                                              up.log_text()))
        return up, master

    def take_tls(self, text):
        """The certificates a `tessera up` of this cluster printed in text (its output, or a
        line of it): `export TESSERA_TLS_DIR=DIR` makes DIR self.tls_dir and the
        $TESSERA_TLS_DIR of this process and what it starts. For tests that start `tessera up`
        themselves; tessera_up does it. Returns the directory, or None."""
        m = re.search(r"^export TESSERA_TLS_DIR=(\S+)$", text, re.M)
        if m:
            self.tls_dir = m.group(1)
            os.environ["TESSERA_TLS_DIR"] = self.tls_dir
        return m and m.group(1)

    def make_certs(self, shards=2, hosts=()):
        """`tessera certs init DIR --shards N [--hosts H,...]` for services a test starts
        itself under mutual TLS (start_server with tls_args): DIR becomes self.tls_dir and
        $TESSERA_TLS_DIR of this process and of what it starts from now on, as tessera_up's
        would. Returns DIR."""
        d = os.path.join(self.dir, "certs")
        r = run_cli(["certs", "init", d, "--shards", str(shards)] +
                    (["--hosts", ",".join(hosts)] if hosts else []))
        if r.returncode != 0:
            raise AssertionError("tessera certs init: %s" % r.stderr)
        self.tls_dir = d
        os.environ["TESSERA_TLS_DIR"] = d
        return d

    def tls_args(self, stem):
        """The flags that make a service serve mutual TLS with self.tls_dir's certificate
        STEM.pem (master, shard-0, verify, ...), for start_server and spawn."""
        return ["--tls-cert", os.path.join(self.tls_dir, stem + ".pem"),
                "--tls-key", os.path.join(self.tls_dir, stem + ".key"),
                "--tls-ca", os.path.join(self.tls_dir, "ca.pem")]

    def start_server(self, exe, name, args=()):
        """A Tessera server (tessera-master, -shard, -verify) on 127.0.0.1:0: started with
        --port-file, waited for; returns its Proc with .addr set. Plaintext (--insecure,
        $TESSERA_TLS_DIR left out) unless args give --tls-cert: tests of one service's
        calls need no certificates; what a default cluster does is tessera_up's."""
        port_file = os.path.join(self.dir, name + ".port")
        tls = "--tls-cert" in args or "--insecure" in args
        with environ(TESSERA_TLS_DIR=None) if not tls else contextlib.nullcontext():
            p = self.spawn([os.path.join(BIN, exe), "--port-file", port_file] +
                           ([] if tls else ["--insecure"]) + list(args), name)
        port = wait_until(lambda: _read_port(port_file, p), START_TIMEOUT,
                          "%s to write %s" % (name, port_file))
        p.addr = "127.0.0.1:%d" % port
        return p

    def start_master(self, lease_ms=None, name="master", extra=()):
        """tessera-master on 127.0.0.1:0; returns the Proc with .addr set."""
        lease = ["--lease-ms", str(lease_ms)] if lease_ms else []
        return self.start_server("tessera-master", name,
                                 ["--listen", "127.0.0.1:0"] + lease + list(extra))

    def start_shard(self, master_addr, name="shard", lease_ms=None, extra=()):
        """tessera-shard on 127.0.0.1:0 registered with master_addr; returns it with .addr."""
        lease = ["--lease-ms", str(lease_ms)] if lease_ms else []
        return self.start_server("tessera-shard", name,
                                 ["--master", master_addr] + lease + list(extra))

    def channel(self, addr, tls=None):
        """A channel to addr: TLS with self.tls_dir's client certificate when the cluster runs
        TLS (tessera_up without --insecure; tls=False: plaintext all the same), else
        plaintext."""
        ch = dial(addr, self.tls_dir if tls is None or tls else None)
        self.channels.append(ch)
        return ch

    def admin_channel(self, addr):
        """A channel with the cluster's admin certificate (admin calls: SubmitTask,
        CollectGarbage, ...), or plaintext on an --insecure cluster."""
        ch = tls_channel(addr, self.tls_dir, "admin") if self.tls_dir else dial(addr)
        self.channels.append(ch)
        return ch

    def admin_metadata(self):
        """The cluster's admin token as call metadata (`authorization: Bearer TOKEN`), for an
        admin's act on a channel() that shows another certificate (the worker/* one: an act
        that must show the member's own certificate and an admin's word); () on an --insecure
        cluster, which has none (every caller counts as an admin there)."""
        if not self.tls_dir:
            return ()
        with open(os.path.join(self.tls_dir, "admin.token")) as f:
            return (("authorization", "Bearer " + f.read().strip()),)

    def admin_env(self):
        """environ() with the cluster's admin token for the CLI's admin calls (`tessera
        eval`, `snapshot gc`, ...); nothing on an --insecure cluster, which has none."""
        if not self.tls_dir:
            return contextlib.nullcontext()
        return environ(TESSERA_TOKEN_FILE=os.path.join(self.tls_dir, "admin.token"))

    def close_channels(self):
        """Closes our client channels. A server waits for open connections, idle or not, before
        it exits (up to its --grace-ms), so close them before timing a shutdown."""
        for ch in self.channels:
            ch.close()
        self.channels = []

    def stop(self):
        """Stops every process (in reverse start order) and closes channels; returns nothing.
        The TLS directory this cluster exported is taken back."""
        self.close_channels()
        if self.tls_dir and os.environ.get("TESSERA_TLS_DIR") == self.tls_dir:
            del os.environ["TESSERA_TLS_DIR"]
        for p in reversed(self.procs):
            p.stop()
        self.procs = []
        scan_logs(self.dir)
        if os.environ.get("TESSERA_KEEP_LOGS"):
            log("logs kept in %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def dump_logs(self):
        """Prints the tail of every log under the temp dir (ours and those `tessera up` wrote)."""
        for root, _, names in sorted(os.walk(self.dir)):
            for name in sorted(names):
                if not name.endswith(".log"):
                    continue
                path = os.path.join(root, name)
                with open(path, errors="replace") as f:
                    text = f.read()
                if text:
                    sys.stderr.write("---- %s ----\n%s\n" % (path, text[-4000:]))


def _read_port(path, proc):
    if not proc.running():
        raise AssertionError("%s exited with %s before writing its port:\n%s"
                             % (proc.name, proc.p.returncode, proc.log_text()[-2000:]))
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text else None
    except (FileNotFoundError, ValueError):
        return None


# ---- gRPC: generic stubs from the generated descriptors ----

def message_class(full_name):
    """The generated class of a message, by full name (e.g. 'tessera.v1.ShardMap')."""
    return symbol_database.Default().GetSymbol(full_name)


class Stub:
    """Attributes per method of a service, e.g. Stub(ch, master_pb2, 'Master').ClusterStatus.

    Streaming methods come out with the matching channel.unary_stream/stream_stream call."""

    def __init__(self, channel, pb2_module, service):
        sd = pb2_module.DESCRIPTOR.services_by_name[service]
        self.full_name = sd.full_name
        self.types = {}
        for m in sd.methods:
            req = message_class(m.input_type.full_name)
            resp = message_class(m.output_type.full_name)
            path = "/%s/%s" % (sd.full_name, m.name)
            if m.client_streaming and m.server_streaming:
                make = channel.stream_stream
            elif m.server_streaming:
                make = channel.unary_stream
            elif m.client_streaming:
                make = channel.stream_unary
            else:
                make = channel.unary_unary
            setattr(self, m.name, make(path, request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString))
            self.types[m.name] = (req, resp)


def tls_channel(addr, tls_dir, who="client"):
    """A channel to addr under mutual TLS with tls_dir's certificate WHO.pem (client: the
    worker/* certificate; admin, shard-0, ...), checking the server against the cluster's CA
    as every Tessera client does (the name server.tessera, docs/security.md)."""
    def read(name):
        with open(os.path.join(tls_dir, name), "rb") as f:
            return f.read()
    creds = grpc.ssl_channel_credentials(root_certificates=read("ca.pem"),
                                         private_key=read(who + ".key"),
                                         certificate_chain=read(who + ".pem"))
    return grpc.secure_channel(addr, creds,
                               options=[("grpc.ssl_target_name_override", "server.tessera")])


def dial(addr, tls_dir=None):
    """A channel to addr: tls_channel with tls_dir's client certificate, or plaintext."""
    return tls_channel(addr, tls_dir) if tls_dir else grpc.insecure_channel(addr)


def raw_call(channel, path, payload, timeout=RPC_TIMEOUT):
    """Sends payload bytes as the request of a unary method; returns the reply bytes."""
    fn = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    return fn(payload, timeout=timeout)


def call_error(fn, req, timeout=RPC_TIMEOUT):
    """Calls fn(req) expecting a gRPC error; returns the grpc.RpcError (fails if it succeeded)."""
    try:
        resp = fn(req, timeout=timeout)
    except grpc.RpcError as e:
        return e
    raise AssertionError("expected an error, got a reply: %r" % (resp,))


def cluster_status(channel):
    return Stub(channel, master_pb2, "Master").ClusterStatus(
        master_pb2.ClusterStatusRequest(), timeout=RPC_TIMEOUT)


def status_fingerprint(cs):
    """ClusterStatus without its time-varying fields, serialized: equal means same state."""
    c = master_pb2.ClusterStatusResponse()
    c.CopyFrom(cs)
    c.uptime_ms = 0
    for s in c.shards:
        s.last_heartbeat_ms_ago = 0
    for w in c.workers:
        w.last_heartbeat_ms_ago = 0
    for j in c.jobs:
        if j.HasField("progress"):
            j.progress.reported_ms_ago = 0
    return c.SerializeToString(deterministic=True)


@contextlib.contextmanager
def environ(**kv):
    """os.environ with kv set (a value of None: removed), for every process started inside (a
    cluster's too)."""
    old = {k: os.environ.get(k) for k in kv}
    for k, v in kv.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(args, timeout=15.0):
    """Runs `tessera ARGS` to completion; returns CompletedProcess (text)."""
    r = subprocess.run([os.path.join(BIN, "tessera")] + list(args), capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    scan_for_sanitizer("tessera " + " ".join(args), r.stderr)
    return r


# `tessera status` waits 3 s for the master by default; on a loaded machine (2 cores, a
# sanitizer build beside) a ClusterStatus once took longer, and a test read its empty stdout.
STATUS_TIMEOUT_MS = "20000"


def status_text(addr, *extra):
    """`tessera status --master ADDR [EXTRA...]`'s stdout; AssertionError if it fails."""
    r = run_cli(["status", "--master", addr, "--timeout-ms", STATUS_TIMEOUT_MS] + list(extra),
                timeout=30.0)
    if r.returncode != 0:
        raise AssertionError("tessera status exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout


def status_json(addr, *extra):
    """`tessera status --master ADDR --json [EXTRA...]`, parsed; AssertionError if it fails."""
    return json.loads(status_text(addr, "--json", *extra))


def job_tables(addr, job):
    """Job's sparse tables as `tessera status --json` lists them: one entry per table and
    shard (rows, bytes, and "disk_tier" where the shards have one)."""
    return [t for s in status_json(addr)["shards"] for t in s.get("table_list", [])
            if t["job"] == job]


def tier_summary(tables):
    """What job_tables says of the disk tier, summed: "whole", the bytes the rows would take
    were they all in memory (each table's bytes per row in the memory tier, times its rows);
    "disk", the bytes reserved for them on disk; "misses" (disk reads) and "evictions"."""
    tiers = [t["disk_tier"] for t in tables]
    return {"whole": sum(t["rows"] * t["bytes"] / t["disk_tier"]["mem_rows"] for t in tables),
            "disk": sum(d["disk_bytes"] for d in tiers),
            "misses": sum(d["misses"] for d in tiers),
            "evictions": sum(d["evictions"] for d in tiers)}


def assert_rows_went_through_disk(case, tables):
    """Every table's rows were evicted (more than it holds in memory) and read back."""
    for t in tables:
        case.assertGreater(t["disk_tier"]["misses"], 0, t)
        case.assertGreater(t["disk_tier"]["evictions"], t["disk_tier"]["mem_rows"], t)


def partition_digests(stub, job):
    """A shard's partitions of job as (tensor, partition, version, sha256), sorted: what a
    probe that must change nothing is checked against (stub: a Stub of the shard)."""
    return sorted((d.tensor_id, d.partition, d.version, d.sha256) for d in
                  stub.PartitionDigests(shard_pb2.PartitionDigestsRequest(job=job),
                                        timeout=RPC_TIMEOUT).partitions)


def shard_once_past(addr, step, timeout=60, which=1, procs=()):
    """Waits until a worker of the cluster at addr reports its clock at step or past, then
    returns the status JSON of the alive shard at position `which` (a victim for a fault),
    once that shard answered for itself (its "pid" is there: a shard slow to answer `tessera
    status` leaves it out). procs: the workers; one that exits first fails the wait at once,
    with its exit status and log, instead of at the timeout."""
    def victim():
        for p in procs:
            if not p.running():
                return p
        st = status_json(addr)
        if not any(w.get("clock", 0) >= step for w in st.get("workers", [])):
            return None
        alive = [s for s in st["shards"] if s["state"] == "alive"]
        return alive[which] if len(alive) > which and "pid" in alive[which] else None
    v = wait_until(victim, timeout, "a worker past step %d (and shard %d's own status)" %
                   (step, which))
    if not isinstance(v, dict):
        raise AssertionError("%s exited with %s before a worker was past step %d:\n%s" %
                             (v.name, v.p.returncode, step, v.log_text()[-3000:]))
    return v


# A user's own training script (tests/integration/user_train.py), what the launch and deploy
# tests run in place of the built-in trainer; the variables a launcher sets, none of which may
# leak into a run "by hand".
USER_SCRIPT = os.path.join(SRC, "tests", "integration", "user_train.py")
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TESSERA_MASTER",
               "TESSERA_JOB", "TESSERA_RANK", "TESSERA_WORKERS", "TESSERA_RESTARTS",
               "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "JOB_COMPLETION_INDEX",
               "TORCHELASTIC_RUN_ID")


def unlaunched_env(**extra):
    """os.environ without a launcher's variables, with extra."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra)
    return env


def script_by_hand(*args):
    """params_sha256 of USER_SCRIPT ARGS run by hand: one process, no launcher, master local."""
    r = subprocess.run(["/usr/bin/python3", USER_SCRIPT] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=180,
                       env=unlaunched_env(TESSERA_LOG="warn"))
    if r.returncode != 0:
        raise AssertionError("user_train.py by hand exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout.split("params_sha256 ")[1].split()[0]


def local_fingerprint(steps, *extra):
    """params_sha256 of `tessera train --local --exact --steps STEPS EXTRA --json`: the
    reference a run with faults must end on."""
    r = run_cli(["train", "--local", "--exact", "--steps", str(steps), "--json"] + list(extra),
                timeout=300)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d: %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)["params_sha256"]


PRIVATE_NS_ENV = "TESSERA_PRIVATE_MOUNT_NS"   # set in the copy that runs in the namespace
SKIP = 77   # ctest's SKIP_RETURN_CODE for the tests that need what a machine may lack


def private_mount_namespace(script):
    """Runs script again, with this process's arguments, in a private mount namespace
    (`unshare --mount`, root only), where a test may mount a small tmpfs, a disk that fills
    up, that nothing outside sees and that goes with the namespace: does not return. Returns
    why it cannot, or None in that copy."""
    if os.environ.get(PRIVATE_NS_ENV) == "1":
        return None
    if os.geteuid() != 0:
        return "not root: a tmpfs cannot be mounted"
    unshare = shutil.which("unshare")
    if not unshare:
        return "no unshare(1) on PATH"
    argv = [unshare, "--mount", "--propagation", "private"]
    probe = subprocess.run(argv + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "unshare --mount is not allowed here: %s" % probe.stderr.strip()
    exec_again(unshare, argv + [sys.executable, os.path.abspath(script)] + sys.argv[1:],
               dict(os.environ, **{PRIVATE_NS_ENV: "1"}))


def main_on_tmpfs(script, size, case):
    """main() of a test whose case needs a small disk that fills up: in a private mount
    namespace, a tmpfs of size on case.mnt (a fresh temporary directory), the tests run
    (main()), then unmounted and removed. Where that cannot be, it prints why and exits SKIP
    (ctest's SKIP_RETURN_CODE)."""
    why = private_mount_namespace(script)
    tmp = tempfile.mkdtemp(prefix="tessera-full.")
    case.mnt = os.path.join(tmp, "mnt")
    os.mkdir(case.mnt)
    why = why or mount_tmpfs(case.mnt, size)
    if why:
        shutil.rmtree(tmp, ignore_errors=True)
        print("%s: skipped: %s" % (os.path.basename(script), why), flush=True)
        sys.exit(SKIP)
    try:
        main()
    finally:
        subprocess.run(["umount", case.mnt], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def mount_tmpfs(mnt, size, remount=False):
    """A tmpfs of size (mount's size=: "256k", "4m") on mnt, or the one there resized; why
    not, or None."""
    argv = (["mount", "-o", "remount,size=%s" % size, mnt] if remount else
            ["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tessera-full", mnt])
    r = subprocess.run(argv, capture_output=True, text=True)
    return "%s failed: %s" % (" ".join(argv[:3]), r.stderr.strip()) if r.returncode else None


def start_prometheus(cluster, ports):
    """A real Prometheus (Debian's) scraping 127.0.0.1:PORT of each of ports every second, as
    a process of cluster; returns query(promql) -> [values] or None."""
    import urllib.error
    import urllib.parse
    import urllib.request
    prom = shutil.which("prometheus")
    if not prom:
        raise AssertionError("no prometheus: Debian's package, which make test installs")
    port = free_port()
    cfg = os.path.join(cluster.dir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n- job_name: tessera\n  static_configs:\n"
                "  - targets: [%s]\n" % ", ".join("'127.0.0.1:%d'" % p for p in ports))
    cluster.spawn([prom, "--config.file=" + cfg,
                   "--storage.tsdb.path=" + os.path.join(cluster.dir, "tsdb"),
                   "--web.listen-address=127.0.0.1:%d" % port], "prometheus")

    def query(q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode(
            {"query": q}))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                res = json.load(r).get("data", {}).get("result", [])
        except (urllib.error.URLError, ConnectionError):
            return None
        return [float(x["value"][1]) for x in res] or None
    return query


def free_port():
    """A port nothing listens on right now (bound then released)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """A base port with n free ports from it (e.g. `tessera up --metrics-port BASE`: the
    master's and each shard's)."""
    import socket
    for _ in range(200):
        base = free_port()
        if base + n >= 65000:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no %d consecutive free ports" % n)


class ClusterCase:
    """A mixin for a unittest.TestCase whose class shares one Cluster in cls.c: once any test
    of the class fails, tearDownClass prints the cluster's logs before stopping it."""
    failed = False

    @classmethod
    def tearDownClass(cls):
        if cls.failed:
            cls.c.dump_logs()
        cls.c.stop()

    def run(self, result=None):
        r = super().run(result)
        if result and (result.failures or result.errors):
            type(self).failed = True
        return r


class UpCase(ClusterCase):
    """ClusterCase whose class shares one `tessera up UP_ARGS` (cls.up, its master at cls.addr),
    stopped with SIGTERM at the end, which must exit 0; its services log at UP_LOG (None: as
    TESSERA_LOG says). Workers log warnings only unless TESSERA_LOG says otherwise."""
    UP_ARGS = ("--shards", "2")
    UP_LOG = None

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()
        with environ(**({"TESSERA_LOG": cls.UP_LOG} if cls.UP_LOG else {})):
            cls.up, cls.addr = cls.c.tessera_up(list(cls.UP_ARGS))
        os.environ.setdefault("TESSERA_LOG", "warn")

    @classmethod
    def tearDownClass(cls):
        cls.up.signal(signal.SIGTERM)
        rc = cls.up.wait(30)
        super().tearDownClass()
        assert rc == 0, "tessera up exited %r" % rc
