"""emuhosts.py - emulated hosts on one machine: one network namespace per host on a bridge.

Used by bench/modes.py and by the tests that run Tessera across hosts
(tests/integration/test_hosts.py). Layout: namespace <tag>-sw holds bridge br0; host i is
namespace <tag>-<name> with eth0 at <subnet>.(i+1)/24, whose veth peer sits on the bridge.
With a rate, both directions of each link are shaped with `tbf rate R burst 256kb latency 50ms`
(netem is not available here: bench/README.md, "Emulated hosts"). Without namespaces
(netns=False) every host is 127.0.0.1 and commands run as they are.

Commands enter a host's namespace with `nsenter --net` rather than `ip netns exec`, which also
makes a mount namespace and remounts /sys: that fails in a chroot (CI's fresh root), and only
the network namespace matters here. down() deletes every namespace up() or probe() made, by
its exact name, also after a failure half way; callers run it in a `finally`. Needs root
(CAP_NET_ADMIN), `ip` (iproute2) and `nsenter` (util-linux); probe() says why not where it
cannot run.
"""

import subprocess
import sys


def sh(cmd, check=True):
    """Runs a setup command; returns (rc, stderr)."""
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.returncode, r.stderr.strip()


class Net:
    """The emulated hosts `hosts` (names), or loopback (netns=False)."""

    def __init__(self, hosts, netns=True, rate=None, tag="ts", subnet="10.77.0"):
        self.hosts, self.netns, self.rate = list(hosts), netns, rate
        self.tag, self.subnet = tag, subnet
        self.made = []  # namespaces created, in order

    def ns(self, host):
        return f"{self.tag}-{host}"

    def addr(self, host):
        return f"{self.subnet}.{self.hosts.index(host) + 1}" if self.netns else "127.0.0.1"

    @staticmethod
    def _enter(ns):
        return ["nsenter", f"--net=/run/netns/{ns}"]

    def wrap(self, host, cmd):
        """cmd run on host: nsenter execs it in place (no fork), so its pid is cmd's."""
        return self._enter(self.ns(host)) + list(cmd) if self.netns else list(cmd)

    def probe(self):
        """Can we make namespaces here? (True, "") or (False, why)."""
        name = f"{self.tag}-probe"
        try:
            rc, err = sh(["ip", "netns", "add", name], check=False)
        except OSError as e:
            return False, f"ip: {e}"
        if rc != 0:
            return False, err or f"ip netns add: exit {rc}"
        self.made.append(name)
        why = ""
        cmd = self._enter(name) + ["ip", "link", "set", "lo", "up"]
        try:
            rc, err = sh(cmd, check=False)
            if rc != 0:
                why = f"{' '.join(cmd)}: {err or f'exit {rc}'}"
        except OSError as e:
            why = f"nsenter: {e}"
        if sh(["ip", "netns", "delete", name], check=False)[0] == 0:
            self.made.remove(name)
        return (False, why) if why else (True, "")

    def _add_ns(self, name):
        sh(["ip", "netns", "add", name])
        self.made.append(name)

    def up(self):
        if not self.netns:
            return
        sw = self.ns("sw")
        self._add_ns(sw)
        sw_ip = self._enter(sw) + ["ip"]
        sh(sw_ip + ["link", "add", "br0", "type", "bridge"])
        sh(sw_ip + ["link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, port = self.ns(host), f"p{i}"
            self._add_ns(ns)
            ns_ip = self._enter(ns) + ["ip"]
            sh(sw_ip + ["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
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
        for name in reversed(self.made):
            rc, err = sh(["ip", "netns", "delete", name], check=False)
            if rc != 0:
                print(f"emuhosts: could not delete namespace {name}: {err}", file=sys.stderr,
                      flush=True)
        self.made = []
