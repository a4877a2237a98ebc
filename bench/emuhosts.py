"""emuhosts.py - emulated hosts on one machine: one network namespace per host on a bridge.

Used by bench/modes.py and by the tests that run Tessera across hosts
(tests/integration/test_hosts.py, tests/fault/partition.py). Layout: a switch namespace holds
bridge br0; host i is a namespace with eth0 at <subnet>.(i+1)/24, whose veth peer (p<i>) sits
on the bridge. With a rate, both directions of each link are shaped with `tbf rate R burst
256kb latency 50ms` (netem is not available here: bench/README.md, "Emulated hosts"). Without
namespaces (netns=False) every host is 127.0.0.1 and commands run as they are.

Each namespace is held by a process of ours (`unshare --net sleep`), and commands enter it with
`nsenter --net=/proc/PID/ns/net`. Not `ip netns add` and `ip netns exec`: those bind-mount
/run/netns, make a mount namespace and remount /sys, which a chroot (CI's fresh root) refuses
or, worse, leaves mounted under the root; only the network namespace matters here, and a held
namespace leaves nothing behind once its holder and the processes run in it are gone. down()
kills the holders by pid, also after a failure half way; callers run it in a `finally` and stop
what they ran in the namespaces first. A `finally` does not run when the caller is killed with
SIGKILL, so every holder, and every setup command, is started with PR_SET_PDEATHSIG = SIGKILL
(die_with_us()): the namespaces go with the caller whatever kills it. The signal follows the
death of the *thread* that started the child, so call up() from a thread that outlives the
namespaces' use (the main thread, in every user here); callers can give the processes they run
in the namespaces the same preexec_fn. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `unshare` and
`nsenter` (util-linux) and `ip` (iproute2); probe() says why not where it cannot run.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)   # loaded here: a preexec_fn should do little


def die_with_us():
    """A preexec_fn for Popen: the child gets SIGKILL when the thread that started it dies, also
    when that thread's process is killed with SIGKILL and cleans nothing up. The setting
    survives exec (of anything not set-user-ID), and nsenter and unshare exec in place. If we
    died between the fork and the prctl, the child has another parent already: it leaves."""
    parent = os.getpid()

    def preexec():
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def require_bins(ap, bindir, names):
    """argparse error (exit 2) unless every one of names is an executable in bindir."""
    for b in names:
        if not os.access(os.path.join(bindir, b), os.X_OK):
            ap.error(f"no executable {os.path.join(bindir, b)}: build first or pass --bin")


def interrupt_on_signals():
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, so a caller's `finally` stops its
    processes and takes its namespaces down."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)


class Procs:
    """Every process a bench starts, each in its own session (= process group), each dying with
    the thread that started it (die_with_us). name: the bench's, for the log; text: the
    children's pipes are text."""

    def __init__(self, name, text=False):
        self.name, self.text, self.live = name, text, []

    def start(self, cmd, stdout, stderr):
        p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                             start_new_session=True, text=self.text, preexec_fn=die_with_us())
        self.live.append(p)
        return p

    def stop(self, procs=None, grace=10):
        """SIGTERM to each group, SIGKILL after `grace` s. A group is signalled only while its
        leader is unreaped, so its id cannot have been reused by someone else's process (our
        processes start no children: nsenter execs the binary in place)."""
        procs = list(self.live if procs is None else procs)
        for p in procs:
            self.signal(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.signal(p, signal.SIGKILL)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    print(f"{self.name}: pid {p.pid} did not exit after SIGKILL",
                          file=sys.stderr, flush=True)
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
            if p in self.live:
                self.live.remove(p)

    @staticmethod
    def signal(p, sig):
        if p.returncode is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def sh(cmd, check=True):
    """Runs a setup command; returns (rc, stderr)."""
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       preexec_fn=die_with_us())
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.returncode, r.stderr.strip()


class Net:
    """The emulated hosts `hosts` (names), or loopback (netns=False)."""

    def __init__(self, hosts, netns=True, rate=None, tag="ts", subnet="10.77.0"):
        self.hosts, self.netns, self.rate = list(hosts), netns, rate
        self.tag, self.subnet = tag, subnet
        self.holders = {}  # namespace name -> the Popen that holds it

    def ns(self, host):
        return f"{self.tag}-{host}"

    def addr(self, host):
        return f"{self.subnet}.{self.hosts.index(host) + 1}" if self.netns else "127.0.0.1"

    def _enter(self, ns):
        return ["nsenter", f"--net=/proc/{self.holders[ns].pid}/ns/net"]

    def join(self, host):
        """Moves the calling thread into host's namespace for good, so that the sockets it
        opens from now on are host's (a test that calls the services as one more host). Only
        that thread moves, and the threads it starts later inherit it: call it from the main
        thread before anything starts threads of its own that open sockets (gRPC's)."""
        fd = os.open(f"/proc/{self.holders[self.ns(host)].pid}/ns/net", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {self.ns(host)}: {os.strerror(err)}")
        finally:
            os.close(fd)

    def wrap(self, host, cmd):
        """cmd run on host: nsenter execs it in place (no fork), so its pid is cmd's."""
        return self._enter(self.ns(host)) + list(cmd) if self.netns else list(cmd)

    def _hold(self, name):
        """A new network namespace, held by a sleeping process (unshare execs it in place).
        Returns once /proc/PID/ns/net is the new namespace: until unshare has run, it is still
        ours, and a command entering it would change this host's own network."""
        p = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=die_with_us())
        self.holders[name] = p
        mine, end = os.readlink("/proc/self/ns/net"), time.monotonic() + 5
        while time.monotonic() < end:
            if p.poll() is not None:   # unshare refused: it says why
                raise RuntimeError("unshare --net: " + (p.stderr.read().decode().strip() or
                                                        "exit %d" % p.returncode))
            try:
                if os.readlink(f"/proc/{p.pid}/ns/net") != mine:
                    return
            except OSError:
                pass
            time.sleep(0.001)
        raise RuntimeError("unshare --net: no namespace of its own after 5 s")

    def probe(self):
        """Can we make namespaces here? (True, "") or (False, why)."""
        name = f"{self.tag}-probe"
        try:
            self._hold(name)
            rc, err = sh(self._enter(name) + ["ip", "link", "set", "lo", "up"], check=False)
            why = "" if rc == 0 else "nsenter ... ip link set lo up: " + (err or f"exit {rc}")
        except (OSError, RuntimeError) as e:
            why = str(e)
        self.down()
        return (False, why) if why else (True, "")

    def up(self):
        if not self.netns:
            return
        sw = self.ns("sw")
        self._hold(sw)
        sw_ip = self._enter(sw) + ["ip"]
        sh(sw_ip + ["link", "add", "br0", "type", "bridge"])
        sh(sw_ip + ["link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, port = self.ns(host), f"p{i}"
            self._hold(ns)
            ns_ip = self._enter(ns) + ["ip"]
            sh(sw_ip + ["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
                        str(self.holders[ns].pid)])
            sh(sw_ip + ["link", "set", port, "master", "br0", "up"])
            sh(ns_ip + ["addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            sh(ns_ip + ["link", "set", "eth0", "up"])
            sh(ns_ip + ["link", "set", "lo", "up"])
            if not self.rate:
                continue
            for where, dev in ((ns, "eth0"), (sw, port)):  # both directions
                sh(self._enter(where) + ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                                         self.rate, "burst", "256kb", "latency", "50ms"])

    def down(self):
        """Kills every holder: a namespace goes when nothing else runs in it."""
        for name, p in reversed(list(self.holders.items())):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                print(f"emuhosts: the holder of {name} (pid {p.pid}) did not exit",
                      file=sys.stderr, flush=True)
            if p.stderr:
                p.stderr.close()
        self.holders = {}
