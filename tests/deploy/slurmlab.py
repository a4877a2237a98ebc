"""slurmlab.py - a real Slurm on this host for the deploy tests: munged, slurmctld and three
slurmd as three nodes (n1, n2, n3), all from a slurm.conf written into a temp dir.

Every daemon runs in the foreground in its own process group, started and stopped by its pid
(munged is reused when one already answers on the default socket, and then left running). The
nodes share this host's address and file system; each slurmd has a port of its own. Client
commands (sbatch, squeue, scancel, scontrol, sinfo) get SLURM_CONF through env(), and the
jobs inherit it, so srun inside a job finds the same cluster.

Needs root (slurmd and munged run as root and as munge) and Debian's slurmctld, slurmd,
slurm-client and munge (`make test-deploy` installs them); unavailable() says what is missing.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NODES = ("n1", "n2", "n3")
MUNGE_SOCKET = "/run/munge/munge.socket.2"
CONF = """ClusterName=tessera
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
ReturnToService=2
MinJobAge=600
KillWait=10
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=n[1-{n}] NodeHostname={host} NodeAddr=127.0.0.1 Port={ports} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=n[1-{n}] Default=YES MaxTime=INFINITE State=UP
"""


def unavailable():
    """Why a Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root (slurmd and munged must run as root and as munge)"
    if not os.path.ismount("/sys/fs/cgroup"):
        return ("no cgroup file system at /sys/fs/cgroup: slurmd 22.05 will not start without "
                "one (a chroot such as CI's fresh root has none)")
    for exe in ("slurmctld", "slurmd", "sbatch", "srun", "munged"):
        if not shutil.which(exe) and not os.path.exists("/usr/sbin/" + exe):
            return ("%s is not installed (apt-get install slurmctld slurmd slurm-client munge;"
                    " make test-deploy does)" % exe)
    return None


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _consecutive_free_ports(n):
    """n consecutive free ports (slurm.conf's Port=[a-b] for the nodes)."""
    for _ in range(50):
        base = _free_ports(1)[0]
        if base + n > 65535:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no %d consecutive free ports" % n)


class Slurm:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-slurm.")
        self.procs = []      # (name, Popen), each its own process group
        self.conf = os.path.join(self.dir, "slurm.conf")
        os.chmod(self.dir, 0o755)

    def env(self, **extra):
        e = dict(os.environ, SLURM_CONF=self.conf)
        e.update(extra)
        return e

    def run(self, argv, check=True, timeout=60, **kw):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=self.env(), stdin=subprocess.DEVNULL, **kw)
        if check and r.returncode != 0:
            raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                   (r.stdout + r.stderr)[-2000:]))
        return r

    def _spawn(self, name, argv, user=None):
        log = open(os.path.join(self.dir, name + ".out"), "wb")
        # user: our own child (not runuser's), so that we reap it when it stops
        p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=self.env(), user=user, group=user,
                             extra_groups=[] if user else None)
        log.close()
        self.procs.append((name, p))
        return p

    @staticmethod
    def _munge_up():
        return subprocess.run(["munge", "-n"], capture_output=True, timeout=10).returncode == 0

    def start(self, timeout=60):
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub))
        if not self._munge_up():
            os.makedirs("/run/munge", exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            os.chmod("/run/munge", 0o755)
            for d in ("/var/log/munge", "/var/lib/munge"):
                os.makedirs(d, exist_ok=True)
                shutil.chown(d, "munge", "munge")
            self._spawn("munged", ["/usr/sbin/munged", "-F", "--force"], user="munge")
            self._wait(self._munge_up, 20, "munged to answer")
        first_port = _consecutive_free_ports(len(NODES))
        cpus = os.cpu_count() or 2
        with open(self.conf, "w") as f:
            f.write(CONF.format(
                d=self.dir, ctld_port=_free_ports(1)[0], n=len(NODES),
                host=socket.gethostname(), cpus=cpus,
                ports="[%d-%d]" % (first_port, first_port + len(NODES) - 1)))
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self._wait(lambda: self.run(["sinfo", "-h"], check=False).returncode == 0, timeout,
                   "slurmctld to answer")
        for n in NODES:
            self._spawn("slurmd-" + n, ["slurmd", "-D", "-N", n, "-f", self.conf])
        self._wait(lambda: self.run(["sinfo", "-h", "-o", "%t", "-N"], check=False)
                   .stdout.split().count("idle") == len(NODES), timeout,
                   "three idle nodes in sinfo")

    def _wait(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited %d:\n%s" % (name, p.returncode,
                                                              self.logs()[-4000:]))
            time.sleep(0.2)
        raise RuntimeError("timed out waiting for %s:\n%s" % (what, self.logs()[-4000:]))

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out.append("---- %s ----\n%s" % (name, f.read()[-3000:]))
        return "\n".join(out)

    def job_state(self, job):
        r = self.run(["scontrol", "show", "job", "-o", str(job)], check=False)
        for tok in r.stdout.split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
        return None

    def wait_job(self, job, timeout, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                             "NODE_FAIL", "OUT_OF_MEMORY")):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.job_state(job)
            if st in states:
                return st
            time.sleep(0.3)
        raise RuntimeError("job %s did not end in %d s (state %s):\n%s"
                           % (job, timeout, self.job_state(job), self.logs()[-3000:]))

    def stop(self):
        self.run(["scancel", "--full", "-u", "root"], check=False)
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.procs = []
        if not os.environ.get("TESSERA_KEEP_LOGS"):
            shutil.rmtree(self.dir, ignore_errors=True)


def job_pids(job):
    """Pids of processes that belong to Slurm job `job` (SLURM_JOB_ID in their environment)."""
    want = ("SLURM_JOB_ID=%s" % job).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env:
            pids.append(int(d))
    return pids
