"""torchbench.py - what bench/torch_overlap.py and bench/torch_models.py share: a cluster of a
master and two shards on emulated hosts (bench/emuhosts.py) under mutual TLS, with
certificates made for the run, and reading an example's JSON result."""
import json
import os
import subprocess
import time


def last_json(text, what):
    """The last line of text that is a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("%s: no JSON result; output ends:\n%s" % (what, text[-2000:]))


def hosts_cluster(net, bindir, spawn, logs, master_port, shard_port, replicas=1):
    """Starts tessera-master (--replicas) on host m and tessera-shard on s0 and s1
    (--transport tcp) of net, with certificates made in logs/tls ($TESSERA_TLS_DIR of this
    process and of what it starts from now on), and waits until both shards are alive.
    spawn(host, cmd, name) starts a process there. Returns (the master's address, the
    processes)."""
    d = os.path.join(logs, "tls")
    subprocess.run([os.path.join(bindir, "tessera"), "certs", "init", d, "--shards", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    os.environ["TESSERA_TLS_DIR"] = d

    def tls(stem):
        return ["--tls-cert", os.path.join(d, stem + ".pem"), "--tls-key",
                os.path.join(d, stem + ".key"), "--tls-ca", os.path.join(d, "ca.pem")]
    master = "%s:%d" % (net.addr("m"), master_port)
    procs = [spawn("m", [os.path.join(bindir, "tessera-master"), "--listen", master,
                         "--replicas", str(replicas)] + tls("master"), "master")]
    for i, s in enumerate(("s0", "s1")):
        procs.append(spawn(s, [os.path.join(bindir, "tessera-shard"), "--master", master,
                               "--transport", "tcp", "--listen", "0.0.0.0:%d" % shard_port,
                               "--advertise", "%s:%d" % (net.addr(s), shard_port)] +
                           tls("shard-%d" % i), s))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = subprocess.run(net.wrap("m", [os.path.join(bindir, "tessera"), "status",
                                          "--master", master, "--json", "--timeout-ms",
                                          "2000"]),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            st = json.loads(r.stdout) if r.returncode == 0 else {}
        except ValueError:
            st = {}
        if sum(s.get("state") == "alive" for s in st.get("shards", [])) == 2:
            return master, procs
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.3)
    raise RuntimeError("2 shards not alive after 30 s (logs in %s)" % logs)
