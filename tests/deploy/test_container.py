#!/usr/bin/python3
"""test_container.py - deploy/container/Containerfile built and run with a real podman.

The image is built from this source tree (`podman build -f deploy/container/Containerfile`),
FROM localhost/bookworm: there is no registry to pull from here, so when that image is missing
the test makes it (mmdebstrap --variant=apt bookworm with this machine's apt sources, then
podman import). podman runs with a CONTAINERS_CONF of the test's own (runc: crun refuses the
hybrid cgroup mode here; lowered ulimits: root lacks CAP_SYS_RESOURCE; netavark, whose
aardvark-dns lets containers find each other by name).

Checked:
- `tessera train --local --steps 50 --exact --json` in a container has the params_sha256 of
  the host's build (TESSERA_BIN) for the same command;
- the image runs as uid 10001 (`tessera`), not root, and its default command prints the
  CLI's help;
- its runtime stage has no compiler, cmake, make, protoc or header, and every package of
  the build's list (/opt/tessera/runtime-packages) is installed;
- a master and two shards, each in a container of its own on one podman network (found by
  container name: the shards listen on 0.0.0.0:7071 and advertise NAME:7071), sharing one
  volume for the snapshot store, the master's --state-dir and the certificates that `tessera
  certs ensure` made there first (mutual TLS: a plaintext client is refused), and `tessera train --master
  MASTER:7070 --workers 2 --steps 50 --exact --json` in a fourth container: the same
  params_sha256; the shards registered as NAME:7071; the master's health check
  (`podman healthcheck run`) passes; the master's state is in the volume, written by the
  non-root user; the master and the shards stop cleanly (exit 0) on `podman stop`'s SIGTERM.

Left behind: nothing of a run's containers, their anonymous volumes, its network or its
volume (removed by their exact names, also when a test fails; tearDownClass fails if one
stays). Images: localhost/bookworm stays (made once; the FROM of the image). The images this
run's build made (localhost/tessera:test and the layers of both stages) are removed by their
ids unless TESSERA_KEEP_IMAGE=1, which keeps them so that a rerun of an unchanged tree builds
from cache in seconds. Images that were there before the run are never touched: one kept
earlier, once the build moves its tag, stays untagged until removed by hand.

Skipped, with the reason printed, where podman cannot run here: not root; podman, runc,
netavark or aardvark-dns missing; or localhost/bookworm missing with no mmdebstrap to make it.
Needs: podman runc netavark aardvark-dns mmdebstrap (Debian 12), and the Debian archive for
the image's packages.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

STEPS = 50
BASE = "localhost/bookworm"
IMAGE = "localhost/tessera:test"
PY_IMAGE = "localhost/tessera-python:test"   # the Containerfile's target python
CONTAINERFILE = os.path.join(tl.SRC, "deploy", "container", "Containerfile")
TRAIN = ["--steps", str(STEPS), "--exact", "--json"]
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
"""
# The master container's health check (docs/deploy.md): its gRPC answers ClusterStatus.
HEALTH_CMD = "tessera status --master 127.0.0.1:7070 >/dev/null"
TLS_DIR = "/var/lib/tessera/tls"   # in the cluster's volume
NETAVARK = ("/usr/lib/podman/netavark", "/usr/lib/podman/aardvark-dns")
BUILD_TIMEOUT = 1800  # a cold build: the build packages, then Tessera compiled, on 2 cores


USER_SCRIPT = tl.USER_SCRIPT


def unavailable():
    """Why podman cannot build and run the image here, or None."""
    if os.geteuid() != 0:
        return "not root (the notes' podman setup is rootful)"
    for exe in ("podman", "runc"):
        if not shutil.which(exe, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            return "%s is not installed (apt-get install podman runc netavark aardvark-dns " \
                   "mmdebstrap)" % exe
    for path in NETAVARK:
        if not os.path.exists(path):
            return "%s is missing (apt-get install netavark aardvark-dns: containers find " \
                   "each other by name through aardvark-dns)" % path
    return None


def apt_sources():
    """This machine's apt source files, as mmdebstrap's MIRROR arguments (it pastes a file's
    contents into the new root's sources, one-line or deb822)."""
    out = []
    main = "/etc/apt/sources.list"
    if os.path.exists(main):
        with open(main) as f:
            if any(ln.strip() and not ln.lstrip().startswith("#") for ln in f):
                out.append(main)
    d = "/etc/apt/sources.list.d"
    if os.path.isdir(d):
        out += [os.path.join(d, n) for n in sorted(os.listdir(d))
                if n.endswith((".list", ".sources"))]
    return out


class Podman:
    """podman with the test's containers.conf; what it creates, by exact name or id."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-podman.")
        self.conf = os.path.join(self.dir, "containers.conf")
        with open(self.conf, "w") as f:
            f.write(CONTAINERS_CONF)
        self.env = dict(os.environ, CONTAINERS_CONF=self.conf)
        self.tag = "tessera-test-%d" % os.getpid()
        self.containers = []   # names we gave, removed by name in cleanup()
        self.networks = []
        self.volumes = []
        self.images = []       # ids our build made, newest last

    def run(self, args, check=True, timeout=300, **kw):
        r = subprocess.run(["podman"] + list(args), capture_output=True, text=True,
                           timeout=timeout, env=self.env, stdin=subprocess.DEVNULL, **kw)
        if check and r.returncode != 0:
            raise AssertionError("podman %s: exit %d:\n%s" % (
                " ".join(args), r.returncode, (r.stdout + r.stderr)[-3000:]))
        return r

    def name(self, role):
        return "%s-%s" % (self.tag, role)

    def image_ids(self):
        r = self.run(["images", "-a", "-q", "--no-trunc"])
        return {i.split(":")[-1] for i in r.stdout.split()}

    def ensure_base(self):
        """Makes localhost/bookworm if it is missing; returns seconds spent (0: it was there)."""
        if self.run(["image", "exists", BASE], check=False).returncode == 0:
            return 0.0
        if not shutil.which("mmdebstrap"):
            raise unittest.SkipTest("%s is missing and mmdebstrap is not installed to make it "
                                    "(apt-get install mmdebstrap)" % BASE)
        t0 = time.monotonic()
        tar = os.path.join(self.dir, "bookworm.tar")
        r = subprocess.run(["mmdebstrap", "--variant=apt", "bookworm", tar] + apt_sources(),
                           capture_output=True, text=True, timeout=900,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError("mmdebstrap: exit %d:\n%s" % (r.returncode, r.stderr[-3000:]))
        self.run(["import", tar, BASE], timeout=300)
        os.unlink(tar)
        return time.monotonic() - t0

    def build(self, image=IMAGE, target=None):
        """podman build of the Containerfile (its target, else the default) as image; records
        the images it made."""
        before = self.image_ids()
        iid = os.path.join(self.dir, "iid")
        log = os.path.join(self.dir, "build.log")
        with open(log, "w") as f:
            r = subprocess.run(["podman", "build", "-f", CONTAINERFILE, "-t", image,
                                "--build-arg", "BASE=" + BASE, "--iidfile", iid] +
                               (["--target", target] if target else []) + [tl.SRC],
                               stdout=f, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT,
                               env=self.env, stdin=subprocess.DEVNULL)
        with open(log, errors="replace") as f:
            text = f.read()
        # Each step's image ("--> 1234abcd", "--> Using cache <id>") and the final one: the
        # ones not there before are this build's, removed in cleanup() by id.
        made = re.findall(r"^--> (?:Using cache )?([0-9a-f]{11,64})$", text, re.M)
        if os.path.exists(iid):
            with open(iid) as f:
                made.append(f.read().strip().split(":")[-1])
        full = []
        for short in made:
            q = self.run(["image", "inspect", "--format", "{{.Id}}", short], check=False)
            if q.returncode == 0 and q.stdout.strip() not in before:
                full.append(q.stdout.strip())
        self.images += [i for i in dict.fromkeys(full)]
        if r.returncode != 0:
            raise AssertionError("podman build: exit %d:\n%s" % (r.returncode, text[-5000:]))
        return text

    def cleanup(self):
        """Removes what this run made, each by its exact name or id; returns what it could not
        remove (empty when all is gone)."""
        left, anonymous = [], []
        for c in reversed(self.containers):
            # -v: also the anonymous volume the image's VOLUME gives a container run without
            # a volume there; its name is read first, to check that it went too.
            r = self.run(["inspect", "--format",
                          "{{range .Mounts}}{{if eq .Type \"volume\"}}{{.Name}} {{end}}{{end}}",
                          c], check=False)
            anonymous += [v for v in r.stdout.split() if v not in self.volumes]
            r = self.run(["rm", "-f", "-v", "-t", "5", c], check=False, timeout=120)
            if self.run(["container", "exists", c], check=False).returncode == 0:
                left.append("container %s: %s" % (c, r.stderr.strip()))
        for v in anonymous:
            if self.run(["volume", "exists", v], check=False).returncode == 0:
                left.append("anonymous volume " + v[:12])
        for n in self.networks:
            self.run(["network", "rm", n], check=False)
            if self.run(["network", "exists", n], check=False).returncode == 0:
                left.append("network " + n)
        for v in self.volumes:
            self.run(["volume", "rm", v], check=False)
            if self.run(["volume", "exists", v], check=False).returncode == 0:
                left.append("volume " + v)
        if os.environ.get("TESSERA_KEEP_IMAGE") == "1":
            if self.images:
                tl.log("TESSERA_KEEP_IMAGE=1: kept %s and the %d new image(s) of this build"
                       % (IMAGE, len(self.images)))
        else:
            for i in reversed(self.images):   # the final image first, then its layers
                self.run(["rmi", i], check=False, timeout=120)
            still = self.image_ids()
            left += ["image " + i[:12] for i in self.images if i in still]
        self.containers, self.networks, self.volumes, self.images = [], [], [], []
        shutil.rmtree(self.dir, ignore_errors=True)
        return left


def last_json(text):
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError("no JSON line in:\n" + text[-3000:])
    return json.loads(lines[-1])


class Container(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = unavailable()
        if why:
            raise unittest.SkipTest("no podman here: " + why)
        cls.p = Podman()
        try:
            base_s = cls.p.ensure_base()
            if base_s:
                tl.log("base image %s made (mmdebstrap + podman import) in %.1f s"
                       % (BASE, base_s))
            t0 = time.monotonic()
            text = cls.p.build()
            cached = len(re.findall(r"^--> Using cache ", text, re.M))
            size = int(cls.p.run(["image", "inspect", "--format", "{{.Size}}", IMAGE])
                       .stdout.strip())
            pkgs = re.search(r"^runtime packages: (.*)$", text, re.M)
            tl.log("image %s built in %.1f s (%d step(s) from cache), %.1f MB"
                   % (IMAGE, time.monotonic() - t0, cached, size / 1e6))
            if pkgs:
                tl.log("runtime packages: " + pkgs.group(1).strip())
        except BaseException:
            left = cls.p.cleanup()
            if left:
                tl.log("left behind: " + ", ".join(left))
            raise

    @classmethod
    def tearDownClass(cls):
        left = cls.p.cleanup()
        if left:
            raise AssertionError("cleanup left " + ", ".join(left))

    def podman_run(self, role, argv, timeout=300, extra=(), image=IMAGE):
        """`podman run` of image in the foreground, named for role; returns (result, seconds).
        The host's OPENBLAS_* variables go in too: OPENBLAS_CORETYPE picks the BLAS kernel,
        and another kernel rounds the gradients differently (docs/exact-mode.md), so the
        container's bits would not be the host's."""
        name = self.p.name(role)
        self.p.containers.append(name)
        blas = [a for k in sorted(os.environ) if k.startswith("OPENBLAS_") for a in ("-e", k)]
        t0 = time.monotonic()
        r = self.p.run(["run", "--name", name] + blas + list(extra) + [image] + list(argv),
                       check=False, timeout=timeout)
        return r, time.monotonic() - t0

    _host_sha = None

    def host_sha(self):
        """params_sha256 of the host's `tessera train --local` (TESSERA_BIN), run once."""
        if Container._host_sha is None:
            r = tl.run_cli(["train", "--local"] + TRAIN, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            Container._host_sha = last_json(r.stdout)["params_sha256"]
        return Container._host_sha

    def test_a_local_training_has_the_hosts_fingerprint(self):
        r, secs = self.podman_run("local", ["tessera", "train", "--local"] + TRAIN)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        got = last_json(r.stdout)["params_sha256"]
        want = self.host_sha()
        self.assertEqual(got, want)
        tl.log("train --local in a container: params_sha256 %s... as the host's; podman run "
               "%.1f s" % (got[:12], secs))

    def test_b_runs_as_a_non_root_user_and_prints_help(self):
        r, _ = self.podman_run("id", ["sh", "-c", "id -u; id -un; id -g"])
        self.assertEqual(r.returncode, 0, r.stderr)
        uid, user, gid = r.stdout.split()
        self.assertNotEqual(uid, "0")
        self.assertEqual((uid, user, gid), ("10001", "tessera", "10001"))
        r, _ = self.podman_run("help", [])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: tessera <command>", r.stdout + r.stderr)

    def test_b_the_runtime_stage_has_no_build_tools(self):
        # The build stage's compilers and headers stay there: the runtime has the programs
        # and the packages the build listed, which are all installed.
        r, _ = self.podman_run("tools", ["sh", "-c", "for t in cc gcc cmake make protoc; do "
                                         "command -v $t; done; ls /usr/include | wc -l; "
                                         "dpkg-query -W -f '${Status}\\n' "
                                         "$(cat /opt/tessera/runtime-packages) | sort | uniq -c"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # no tool found, no header, every listed package installed
        self.assertRegex(r.stdout.strip(), r"^0\n\s*\d+ install ok installed$")

    def test_c_three_containers_on_one_network_train_to_the_fingerprint(self):
        net = self.p.name("net")
        vol = self.p.name("data")
        self.p.networks.append(net)
        self.p.run(["network", "create", net])
        self.p.volumes.append(vol)
        self.p.run(["volume", "create", vol])
        master, shards = self.p.name("master"), [self.p.name("shard-%d" % i) for i in (0, 1)]
        common = ["--network", net, "-v", vol + ":/var/lib/tessera",
                  "-e", "TESSERA_TLS_DIR=" + TLS_DIR]
        t0 = time.monotonic()
        # The documented first step: the certificates and the admin token, in the volume.
        r, _ = self.podman_run("certs", ["tessera", "certs", "ensure", TLS_DIR, "--shards",
                                         "2"], extra=["-v", vol + ":/var/lib/tessera"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.p.containers.append(master)
        self.p.run(["run", "-d", "--name", master] + common + [
            "--health-cmd", HEALTH_CMD, "--health-interval", "30s",
            IMAGE, "tessera-master", "--listen", "0.0.0.0:7070",
            "--store", "/var/lib/tessera/store", "--state-dir", "/var/lib/tessera/state",
            "--tls-cert", TLS_DIR + "/master.pem", "--tls-key", TLS_DIR + "/master.key",
            "--token-file", TLS_DIR + "/admin.token"])
        for i, s in enumerate(shards):
            self.p.containers.append(s)
            self.p.run(["run", "-d", "--name", s] + common + [
                IMAGE, "tessera-shard", "--master", master + ":7070",
                "--listen", "0.0.0.0:7071", "--advertise", s + ":7071",
                "--store", "/var/lib/tessera/store",
                "--tls-cert", "%s/shard-%d.pem" % (TLS_DIR, i),
                "--tls-key", "%s/shard-%d.key" % (TLS_DIR, i)])

        doc = self.wait_alive(master, shards, 60)
        addrs = sorted(s.get("addr", "") for s in doc["shards"])
        self.assertEqual(addrs, sorted(s + ":7071" for s in shards), doc)
        # The documented health check, run once (no systemd here to run it on a timer).
        self.p.run(["healthcheck", "run", master])
        up = time.monotonic() - t0
        # The Kubernetes manifests' probe script runs in the image, with the shard's TLS
        # files as there: a serving shard, then an address nobody serves.
        with open(os.path.join(tl.SRC, "deploy", "kubernetes", "probe.yaml")) as f:
            probe = yaml.safe_load(f)["data"]["health.py"]
        tls_args = [TLS_DIR + "/ca.pem", TLS_DIR + "/shard-0.pem", TLS_DIR + "/shard-0.key"]
        r, _ = self.podman_run("probe", ["python3", "-c", probe, shards[0] + ":7071"] + tls_args,
                               extra=common[:4])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # mutual TLS by default: a plaintext client of the same network reaches nothing
        r, _ = self.podman_run("plaintext", ["tessera", "status", "--master", master + ":7070"],
                               extra=["--network", net])
        self.assertNotEqual(r.returncode, 0, r.stdout)
        r, _ = self.podman_run("probe-down", ["python3", "-c", probe, master + ":7099"] +
                               tls_args, extra=common[:4])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("UNAVAILABLE", r.stderr)

        r, secs = self.podman_run("train", ["tessera", "train", "--master", master + ":7070",
                                            "--workers", "2"] + TRAIN, extra=common)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.logs([master] + shards))
        got = last_json(r.stdout)
        self.assertEqual(got["workers"], 2, got)
        self.assertEqual(got["transport"], "tcp", got)
        self.assertEqual(got["params_sha256"], self.host_sha())

        # A user's PyTorch script (not the built-in MLP), mounted into the python target's
        # image: by hand (one process, no launcher), then its two ranks by `tessera run`
        # against the cluster: the same bits.
        t0 = time.monotonic()
        self.p.build(PY_IMAGE, "python")
        built = time.monotonic() - t0
        mount = ["-v", "%s:/opt/tessera/script/train.py:ro" % USER_SCRIPT]
        script = ["python3", "/opt/tessera/script/train.py", "--steps", "30"]
        r, _ = self.podman_run("by-hand", script, extra=mount, image=PY_IMAGE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        want = r.stdout.split("params_sha256 ")[1].split()[0]
        r, secs = self.podman_run("script", [
            "tessera", "run", "--master", master + ":7070", "--workers", "2", "--json"] +
            script, extra=common + mount, image=PY_IMAGE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.logs([master] + shards))
        run = json.loads(r.stdout)
        self.assertEqual((run["state"], run["exit_code"]), ("finished", 0), run)
        self.assertEqual(run["params_sha256"], want)
        tl.log("target python (built in %.1f s): tessera run of a user's script, 2 ranks, "
               "params_sha256 %s... as by hand in the image; %.1f s"
               % (built, want[:12], secs))

        # The master's --state-dir, in the shared volume, written as the image's user.
        r = self.p.run(["exec", master, "sh", "-c",
                        "find /var/lib/tessera/state -mindepth 1 -user 10001 | head -1"])
        self.assertTrue(r.stdout.strip(), "nothing of the master's state in the volume")

        for c in shards + [master]:
            self.p.run(["stop", "-t", "15", c], timeout=60)
            code = self.p.run(["inspect", "--format", "{{.State.ExitCode}}", c]).stdout.strip()
            self.assertEqual(code, "0", "%s exited %s on SIGTERM:\n%s"
                             % (c, code, self.logs([c])))
        tl.log("master + 2 shards in 3 containers, train --workers 2 in a 4th: "
               "params_sha256 %s... as the host's --local; cluster up in %.1f s, "
               "training container %.1f s" % (got["params_sha256"][:12], up, secs))

    def wait_alive(self, master, shards, timeout):
        """`tessera status --json` at the master once every shard is alive there; fails at
        once, with the logs, when one of the containers has exited."""
        names = [master] + shards
        end = time.monotonic() + timeout
        while True:
            r = self.p.run(["exec", master, "tessera", "status", "--json"], check=False)
            if r.returncode == 0:
                doc = json.loads(r.stdout)
                if len([s for s in doc.get("shards", [])
                        if s.get("state") == "alive"]) == len(shards):
                    return doc
            states = self.p.run(["inspect", "--format", "{{.Name}} {{.State.Status}}"] + names)
            gone = [ln for ln in states.stdout.splitlines() if not ln.endswith(" running")]
            if gone or time.monotonic() > end:
                raise AssertionError("the shards did not join (%s):\n%s" % (
                    ", ".join(gone) or "timed out after %d s" % timeout, self.logs(names)))
            time.sleep(0.5)

    def logs(self, names):
        out = []
        for n in names:
            r = self.p.run(["logs", n], check=False)
            out.append("---- %s ----\n%s" % (n, (r.stdout + r.stderr)[-3000:]))
        return "\n".join(out)


if __name__ == "__main__":
    tl.main()
