#!/usr/bin/python3
"""test_deploy_kubernetes.py - deploy/kubernetes checked offline: rendered, validated against
the Kubernetes API schemas, and cross-checked against the real binaries (docs/deploy.md).

No cluster runs here. What can be checked without one is: `kubectl kustomize` renders; every
object (and the Secrets made by the commands docs/deploy.md gives) passes the API schemas of
the npm package kubernetes-models, unknown fields included (tests/node/k8s_validate.js); the
containers' arguments are flags their binary's --help lists; ports, probes, labels, selectors,
references and $(VAR)s agree; and the master and a shard started with the manifests' own
arguments (mapped to local paths and ports) pass the manifests' own probes under mutual TLS.
Each check is also fed a broken copy and must refuse it, naming the problem.
"""
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

try:
    import yaml  # Debian's python3-yaml
except ImportError:
    sys.stderr.write("test_deploy_kubernetes needs python3-yaml (make deps installs it)\n")
    sys.exit(1)

KDIR = os.path.join(tl.SRC, "deploy", "kubernetes")
NODE_DIR = os.path.join(tl.SRC, "tests", "node")
DOC = os.path.join(tl.SRC, "docs", "deploy.md")
PROGRAMS = ("tessera-master", "tessera-shard", "tessera-worker", "tessera-verify")
INT_METAVARS = {"N", "MS", "PORT", "R", "MIB", "K", "S", "E", "B", "M", "KB", "BASE"}
WORKLOADS = ("Deployment", "StatefulSet", "Job", "DaemonSet")
NOT_CHECKED = """\
Not checked here (no cluster on this machine): scheduling against node capacity, PVCs binding
(a ReadWriteMany storage class), cluster DNS resolving the shards' names, the probes passing
inside the pods (the image's python3, the mounted files), NetworkPolicy/CNI letting the data
plane through, the image running under the security context, training across pods, and the
API server's admission (immutable fields, quotas, Pod Security)."""


def kubectl():
    k = shutil.which("kubectl")
    if not k:
        raise AssertionError("no kubectl on PATH: `make deps` installs Debian's "
                             "kubernetes-client")
    return k


def render(kdir=KDIR):
    r = subprocess.run([kubectl(), "kustomize", kdir], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise AssertionError("kubectl kustomize %s failed: %s" % (kdir, r.stderr))
    return [o for o in yaml.safe_load_all(r.stdout) if o]


def help_flags(program):
    """{flag: metavar or None} from `program --help` (None: a flag that takes no value)."""
    r = subprocess.run([os.path.join(tl.BIN, program), "--help"], capture_output=True,
                       text=True, timeout=10)
    flags = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"^  --([a-z0-9-]+)(?: (\S+))?\s", line + " ")
        if m:
            flags[m.group(1)] = m.group(2)
    if not flags:
        raise AssertionError("%s --help listed no flags" % program)
    return flags


# ---- the rendering, as the checks see it ----------------------------------------------------

def name_of(o):
    return "%s/%s" % (o.get("kind"), o.get("metadata", {}).get("name"))


def find(objs, kind, name=None):
    return [o for o in objs if o.get("kind") == kind and
            (name is None or o.get("metadata", {}).get("name") == name)]


def pod_spec(o):
    return o.get("spec", {}).get("template", {}).get("spec", {})


def pod_labels(o):
    return o.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {}) or {}


def containers(objs):
    """(workload, container) for every container of every pod template."""
    for o in objs:
        if o.get("kind") in WORKLOADS:
            for c in pod_spec(o).get("containers", []) + pod_spec(o).get("initContainers", []):
                yield o, c


def parse_args(args, flags):
    """{flag: value or True} of args under flags (help_flags); problems as a list."""
    got, problems, i = {}, [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            problems.append("argument '%s' is not a flag" % a)
            i += 1
            continue
        name, eq, val = a[2:].partition("=")
        if name not in flags:
            problems.append("--%s is not a flag it accepts (not in its --help)" % name)
            i += 1
            continue
        if flags[name] is None:
            if eq:
                problems.append("--%s takes no value" % name)
            got[name] = True
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                problems.append("--%s needs a value (%s)" % (name, flags[name]))
                break
            val = args[i + 1]
            i += 1
        got[name] = val
        i += 1
    return got, problems


def env_values(c, objs):
    """{name: literal value or None (from the downward API or a Secret)} of c's environment."""
    out = {}
    for cm_ref in c.get("envFrom", []):
        ref = cm_ref.get("configMapRef")
        for cm in find(objs, "ConfigMap", ref and ref.get("name")):
            out.update(cm.get("data", {}))
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("configMapKeyRef")
        if "value" in e:
            out[e["name"]] = e["value"]
        elif ref:
            cms = find(objs, "ConfigMap", ref.get("name"))
            out[e["name"]] = cms[0].get("data", {}).get(ref.get("key")) if cms else None
        else:
            out[e["name"]] = None
    return out


def expand(s, env):
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env[m.group(1)] if env.get(m.group(1)) is not None else m.group(0),
                  s)


def as_probe_arg(s):
    """s as a probe's command must say it: the kubelet leaves a downward-API $(VAR) in a
    probe's command as written, so health.py expands ${VAR} from the environment."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", r"${\1}", s)


def pod_variants(w, o):
    """w as each pod of workload o sees it: POD_NAME in it taken for each of a StatefulSet's
    pod names (name-0 .. name-(replicas-1)); w alone for anything else."""
    if "POD_NAME" not in w or o.get("kind") != "StatefulSet":
        return [w]
    name, n = o["metadata"]["name"], int(o["spec"].get("replicas", 1))
    return [re.sub(r"\$(\(POD_NAME\)|\{POD_NAME\})", "%s-%d" % (name, i), w)
            for i in range(n)]


def port_of(addr):
    return int(addr.rsplit(":", 1)[1]) if ":" in addr and addr.rsplit(":", 1)[1].isdigit() \
        else None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---- the cross-checks: each returns a list of problems, "Kind/name: what" --------------------

def check_flags(objs, helps):
    out = []
    for o, c in containers(objs):
        where = "%s container %s" % (name_of(o), c.get("name"))
        cmd = c.get("command", [])
        prog = cmd[0] if cmd else None
        if prog not in helps:
            out.append("%s: command %r is none of %s" % (where, cmd, ", ".join(PROGRAMS)))
            continue
        got, problems = parse_args(cmd[1:] + c.get("args", []), helps[prog])
        out += ["%s: %s: %s" % (where, prog, p) for p in problems]
        env = env_values(c, objs)
        for f, v in got.items():
            meta = helps[prog][f]
            v2 = expand(str(v), env)  # from the downward API: known only in the pod
            if meta in INT_METAVARS and "$(" not in v2 and not re.fullmatch(r"-?\d+", v2):
                out.append("%s: %s --%s %s: wants a number (%s)" % (where, prog, f, v, meta))
    return out


def flags_of(c, helps):
    cmd = c.get("command", [])
    if not cmd or cmd[0] not in helps:
        return {}
    return parse_args(cmd[1:] + c.get("args", []), helps[cmd[0]])[0]


def probe_cmd(probe):
    return (probe or {}).get("exec", {}).get("command", [])


def check_ports(objs, helps):
    out = []
    for o, c in containers(objs):
        where = "%s container %s" % (name_of(o), c.get("name"))
        f = flags_of(c, helps)
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        listen = port_of(f.get("listen", "")) if f.get("listen") else None
        if f.get("listen") and listen not in ports.values():
            out.append("%s: --listen %s: no containerPort %s" % (where, f["listen"], listen))
        if "metrics-port" in f and str(ports.get("metrics")) != str(f["metrics-port"]):
            out.append("%s: --metrics-port %s but its port 'metrics' is %s"
                       % (where, f["metrics-port"], ports.get("metrics")))
        ann = o["spec"]["template"].get("metadata", {}).get("annotations", {}) or {}
        if "metrics-port" in f and ann.get("prometheus.io/port") != str(f["metrics-port"]):
            out.append("%s: prometheus.io/port %r is not --metrics-port %s"
                       % (where, ann.get("prometheus.io/port"), f["metrics-port"]))
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = c.get(kind)
            if not probe:
                if listen and kind != "startupProbe":
                    out.append("%s: no %s" % (where, kind))
                continue
            if "grpc" in probe:
                if probe["grpc"].get("port") != listen:
                    out.append("%s: %s grpc port %s, but it listens on %s"
                               % (where, kind, probe["grpc"].get("port"), listen))
                if "tls-ca" in f:
                    out.append("%s: %s is the kubelet's grpc probe, which cannot show a "
                               "client certificate to a mutual-TLS server" % (where, kind))
                continue
            cmd = probe_cmd(probe)
            if len(cmd) < 3 or not cmd[1].endswith("health.py"):
                out.append("%s: %s is neither grpc nor health.py: %r" % (where, kind, cmd))
                continue
            if port_of(cmd[2]) != listen or not cmd[2].startswith("127.0.0.1:"):
                out.append("%s: %s dials %s, but it listens on port %s"
                           % (where, kind, cmd[2], listen))
            want = [as_probe_arg(f.get(k) or "") for k in ("tls-ca", "tls-cert", "tls-key")]
            if "tls-ca" in f and cmd[3:] != want:
                out.append("%s: %s uses %s, the service %s" % (where, kind, cmd[3:], want))
    return out


def check_services(objs):
    out = []
    workloads = [o for o in objs if o.get("kind") in WORKLOADS]
    for s in find(objs, "Service"):
        sel = s.get("spec", {}).get("selector", {})
        chosen = [w for w in workloads if selects(sel, pod_labels(w))]
        if len(chosen) != 1:
            out.append("%s: selector %s matches the pods of %d workloads (%s), not 1"
                       % (name_of(s), sel, len(chosen), ", ".join(map(name_of, chosen))))
            continue
        cports = [p for c in pod_spec(chosen[0]).get("containers", [])
                  for p in c.get("ports", [])]
        for p in s.get("spec", {}).get("ports", []):
            t = p.get("targetPort", p.get("port"))
            if not any(t in (cp.get("name"), cp.get("containerPort")) for cp in cports):
                out.append("%s: port %s: targetPort %r is no container port of %s"
                           % (name_of(s), p.get("name"), t, name_of(chosen[0])))
    for ss in find(objs, "StatefulSet"):
        sn = ss["spec"].get("serviceName")
        svc = find(objs, "Service", sn)
        if not svc:
            out.append("%s: serviceName %r: no such Service" % (name_of(ss), sn))
        elif svc[0]["spec"].get("clusterIP") != "None":
            out.append("%s: serviceName %r is not headless (clusterIP: None)" % (name_of(ss), sn))
        elif not selects(svc[0]["spec"].get("selector"), pod_labels(ss)):
            out.append("%s: its Service %s does not select its pods" % (name_of(ss), sn))
    for pdb in find(objs, "PodDisruptionBudget"):
        sel = pdb.get("spec", {}).get("selector", {}).get("matchLabels", {})
        if not any(selects(sel, pod_labels(ss)) for ss in find(objs, "StatefulSet")):
            out.append("%s: selector %s matches no StatefulSet's pods" % (name_of(pdb), sel))
    for w in workloads:
        sel = w["spec"].get("selector", {}).get("matchLabels")
        if sel is not None and not selects(sel, pod_labels(w)):
            out.append("%s: selector %s does not match its own pods" % (name_of(w), sel))
    return out


def check_shards(objs, helps):
    out = []
    for ss in find(objs, "StatefulSet"):
        for c in pod_spec(ss).get("containers", []):
            f = flags_of(c, helps)
            if "listen" not in f:
                continue
            want = "$(POD_NAME).%s:%s" % (ss["spec"].get("serviceName"), port_of(f["listen"]))
            if f.get("advertise") != want:
                out.append("%s: --advertise %r, want %r (its stable name under the headless "
                           "Service)" % (name_of(ss), f.get("advertise"), want))
            pod = [e for e in c.get("env", []) if e["name"] == "POD_NAME"]
            if not pod or pod[0].get("valueFrom", {}).get("fieldRef", {}).get(
                    "fieldPath") != "metadata.name":
                out.append("%s: POD_NAME is not the downward API's metadata.name" % name_of(ss))
            limit = c.get("resources", {}).get("limits", {}).get("memory", "")
            m = re.fullmatch(r"(\d+)(Mi|Gi)", limit)
            if "mem-budget" in f and (not m or int(f["mem-budget"]) >=
                                      int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)):
                out.append("%s: --mem-budget %s MiB is not below its memory limit %r"
                           % (name_of(ss), f["mem-budget"], limit))
    for j in find(objs, "Job"):
        spec = j["spec"]
        if spec.get("completionMode") != "Indexed":
            out.append("%s: completionMode is not Indexed" % name_of(j))
        for c in pod_spec(j).get("containers", []):
            f = flags_of(c, helps)
            if f.get("rank") != "$(JOB_COMPLETION_INDEX)":
                out.append("%s: --rank %r is not $(JOB_COMPLETION_INDEX)"
                           % (name_of(j), f.get("rank")))
            if not (str(f.get("workers")) == str(spec.get("completions")) ==
                    str(spec.get("parallelism"))):
                out.append("%s: --workers %s, completions %s, parallelism %s differ"
                           % (name_of(j), f.get("workers"), spec.get("completions"),
                              spec.get("parallelism")))
    return out


def check_references(objs, helps):
    out = []
    for o in objs:
        if o.get("kind") not in WORKLOADS:
            continue
        spec = pod_spec(o)
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for v in vols.values():
            if "secret" in v and not find(objs, "Secret", v["secret"].get("secretName")):
                out.append("%s: volume %s: Secret %r does not exist"
                           % (name_of(o), v["name"], v["secret"].get("secretName")))
            if "configMap" in v and not find(objs, "ConfigMap", v["configMap"].get("name")):
                out.append("%s: volume %s: ConfigMap %r does not exist"
                           % (name_of(o), v["name"], v["configMap"].get("name")))
            pvc = v.get("persistentVolumeClaim", {}).get("claimName")
            if pvc and not find(objs, "PersistentVolumeClaim", pvc):
                out.append("%s: volume %s: PVC %r does not exist" % (name_of(o), v["name"], pvc))
        if spec.get("securityContext", {}).get("runAsNonRoot") is not True:
            out.append("%s: runAsNonRoot is not set" % name_of(o))
        for c in spec.get("containers", []):
            out += check_container_refs(o, c, vols, objs, helps)
    return out


def mount_of(path, c):
    """The volumeMount under which path lies (the longest), or None."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and \
                (not best or len(mp) > len(best["mountPath"])):
            best = m
    return best


def volume_keys(vol, objs):
    """The files a Secret or ConfigMap volume holds, or None for other volumes."""
    for kind, key, field in (("Secret", "secret", "secretName"), ("ConfigMap", "configMap",
                                                                 "name")):
        if key in vol:
            found = find(objs, kind, vol[key].get(field))
            if not found:
                return set()
            items = vol[key].get("items")
            if items:
                return {i["path"] for i in items}
            return set(found[0].get("data", {})) | set(found[0].get("stringData", {}))
    return None


def check_container_refs(o, c, vols, objs, helps):
    out = []
    where = "%s container %s" % (name_of(o), c.get("name"))
    defined = set()
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("configMapKeyRef") or \
            e.get("valueFrom", {}).get("secretKeyRef")
        kind = "ConfigMap" if "configMapKeyRef" in e.get("valueFrom", {}) else "Secret"
        if ref:
            got = find(objs, kind, ref.get("name"))
            if not got or ref.get("key") not in got[0].get("data", {}):
                out.append("%s: env %s: %s %r has no key %r"
                           % (where, e["name"], kind, ref.get("name"), ref.get("key")))
        defined.add(e["name"])
    for ef in c.get("envFrom", []):
        ref = ef.get("configMapRef")
        got = find(objs, "ConfigMap", ref and ref.get("name"))
        if not got:
            out.append("%s: envFrom: ConfigMap %r does not exist" % (where, ref))
        else:
            defined |= set(got[0].get("data", {}))
    words = c.get("command", []) + c.get("args", [])
    probes = []
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        probes += probe_cmd(c.get(probe))
    for w in words + probes:
        for var in re.findall(r"\$\(([^)]*)\)", w):
            if var not in defined:
                out.append("%s: $(%s) is not in its env: it would stay as written" % (where, var))
    for w in probes:
        for var in re.findall(r"\$\{([^}]*)\}", w):
            if var not in defined:
                out.append("%s: ${%s} is not in its env: health.py cannot expand it"
                           % (where, var))
    words += probes
    for m in c.get("volumeMounts", []):
        if m["name"] not in vols:
            out.append("%s: volumeMount %s: no such volume" % (where, m["name"]))
    if not (c.get("resources", {}).get("requests", {}).keys() >= {"cpu", "memory"}):
        out.append("%s: no cpu and memory requests" % where)
    ro_root = c.get("securityContext", {}).get("readOnlyRootFilesystem") is True
    writes = {"state-dir", "store"} if c.get("command", [""])[0] != "tessera-verify" else set()
    for w in words:
        if not w.startswith("/") or w.endswith(".py") and w == words[0]:
            continue
        if not w.startswith(("/etc/", "/var/")):
            continue
        m = mount_of(w, c)
        if not m:
            out.append("%s: %s is on no volume" % (where, w))
            continue
        keys = volume_keys(vols.get(m["name"], {}), objs)
        for pw in pod_variants(w, o):
            rel = pw[len(m["mountPath"].rstrip("/")) + 1:]
            if keys is not None and rel not in keys:
                out.append("%s: %s: volume %s has no file %r" % (where, w, m["name"], rel))
    f = flags_of(c, helps)
    for flag in writes & set(f):
        m = mount_of(f[flag], c)
        if ro_root and (not m or m.get("readOnly")):
            out.append("%s: --%s %s is not on a writable volume (the root is read-only)"
                       % (where, flag, f[flag]))
    return out


def check_storage(objs, helps):
    """The master's and the shards' --store are the same ReadWriteMany PVC; the master's
    --state-dir is a PVC; one master, replaced by Recreate."""
    out, stores = [], set()
    for o, c in containers(objs):
        f = flags_of(c, helps)
        vols = {v["name"]: v for v in pod_spec(o).get("volumes", [])}
        for flag in ("store", "state-dir"):
            if flag in f:
                m = mount_of(f[flag], c)
                claim = m and vols.get(m["name"], {}).get("persistentVolumeClaim", {}).get(
                    "claimName")
                if not claim:
                    out.append("%s: --%s %s is not on a PVC" % (name_of(o), flag, f[flag]))
                elif flag == "store":
                    stores.add(claim)
    if len(stores) > 1:
        out.append("the master and the shards use different stores: %s" % sorted(stores))
    for claim in stores:
        for pvc in find(objs, "PersistentVolumeClaim", claim):
            if "ReadWriteMany" not in pvc["spec"].get("accessModes", []):
                out.append("%s: the shared store is not ReadWriteMany" % name_of(pvc))
    for d in find(objs, "Deployment", "tessera-master"):
        if d["spec"].get("replicas") != 1 or d["spec"].get("strategy", {}).get("type") != \
                "Recreate":
            out.append("%s: not 1 replica with strategy Recreate" % name_of(d))
    return out


def all_problems(objs, helps):
    return (check_flags(objs, helps) + check_ports(objs, helps) + check_services(objs) +
            check_shards(objs, helps) + check_references(objs, helps) +
            check_storage(objs, helps))


def schema_problems(objs, tmpdir):
    """tests/node/k8s_validate.js on objs: its lines (empty when all are valid)."""
    path = os.path.join(tmpdir, "objs.json")
    with open(path, "w") as f:
        json.dump(objs, f)
    r = subprocess.run(["node", os.path.join(NODE_DIR, "k8s_validate.js"), path],
                       capture_output=True, text=True, timeout=60)
    if r.returncode not in (0, 1):
        raise AssertionError("k8s_validate.js failed (%d): %s%s"
                             % (r.returncode, r.stdout, r.stderr))
    return [] if r.returncode == 0 else r.stdout.splitlines()


def doc_secret_commands():
    """The `kubectl ... create secret` commands of docs/deploy.md, continuation lines joined."""
    with open(DOC) as f:
        text = f.read().replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in text.splitlines()
            if re.match(r"\s+kubectl -n \S+ create secret ", line)]


class DeployKubernetes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.stderr.write(NOT_CHECKED + "\n")
        kubectl()
        cls.c = tl.Cluster(prefix="tessera-k8s.")
        cls.tmp = cls.c.dir
        cls.helps = {p: help_flags(p) for p in PROGRAMS}
        cls.certs = os.path.join(cls.tmp, "certs")
        r = tl.run_cli(["certs", "init", cls.certs, "--shards", "3", "--hosts",
                        "tessera-master,tessera-shard-0.tessera-shard"])
        assert r.returncode == 0, r.stderr
        for i in range(3):   # as the shards' Secret names them (docs/deploy.md)
            for ext in ("pem", "key"):
                shutil.copy(os.path.join(cls.certs, "shard-%d.%s" % (i, ext)),
                            os.path.join(cls.certs, "tessera-shard-%d.%s" % (i, ext)))
        with open(os.path.join(cls.certs, "admin.token"), "w") as f:
            f.write("%s\n" % os.urandom(32).hex())
        cls.rendered = render()
        cls.secrets = cls.make_secrets()
        cls.objs = cls.rendered + cls.secrets

    @classmethod
    def make_secrets(cls):
        """Runs the doc's Secret commands with --dry-run=client on certificates made here."""
        cmds = doc_secret_commands()
        assert cmds, "docs/deploy.md gives no `kubectl -n NS create secret` command"
        out = []
        for argv in cmds:
            argv = [a.replace("=certs/", "=%s/" % cls.certs) for a in argv]
            r = subprocess.run([kubectl()] + argv[1:] + ["--dry-run=client", "-o", "json"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr)
            out.append(json.loads(r.stdout))
        return out

    def test_renders_what_is_expected(self):
        kinds = sorted(name_of(o) for o in self.rendered)
        tl.log("rendered: %s" % ", ".join(kinds))
        for want in ("Deployment/tessera-master", "Service/tessera-master",
                     "StatefulSet/tessera-shard", "Service/tessera-shard",
                     "PodDisruptionBudget/tessera-shard", "Job/tessera-train",
                     "PersistentVolumeClaim/tessera-store",
                     "PersistentVolumeClaim/tessera-master-state"):
            self.assertIn(want, kinds)
        ns = {o["metadata"].get("namespace") for o in self.rendered if o["kind"] != "Namespace"}
        self.assertEqual(ns, {"tessera-ps"})
        self.assertEqual({c["image"] for _, c in containers(self.rendered)}, {"tessera:latest"})

    def test_schemas(self):
        self.assertEqual(schema_problems(self.objs, self.tmp), [])

    def test_cross_checks(self):
        self.assertEqual(all_problems(self.objs, self.helps), [])

    def test_bad_input_is_refused(self):
        """Each broken copy must be refused, with the problem named."""
        def mutate(fn):
            objs = copy.deepcopy(self.objs)
            fn(objs)
            return objs

        def cont(objs, kind, name):
            return pod_spec(find(objs, kind, name)[0])["containers"][0]

        def master(objs):
            return cont(objs, "Deployment", "tessera-master")

        def shard(objs):
            return cont(objs, "StatefulSet", "tessera-shard")

        def worker(objs):
            return cont(objs, "Job", "tessera-train")

        cross = [
            ("a flag the binary lacks", lambda o: master(o)["args"].append("--lease"),
             "tessera-master: --lease is not a flag it accepts"),
            ("a word for a number", lambda o: master(o)["args"].extend(["--lease-ms", "3s"]),
             "--lease-ms 3s: wants a number"),
            ("a Service selecting nothing", lambda o: find(o, "Service", "tessera-master")[0]
             ["spec"]["selector"].update({"app.kubernetes.io/name": "tessera-mastr"}),
             "Service/tessera-master: selector"),
            ("a targetPort that is no port", lambda o: find(o, "Service", "tessera-shard")[0]
             ["spec"]["ports"][0].update({"targetPort": "rpc"}), "targetPort 'rpc'"),
            ("a probe on another port", lambda o: master(o)["livenessProbe"]["exec"]
             ["command"].__setitem__(2, "127.0.0.1:7071"), "livenessProbe dials 127.0.0.1:7071"),
            ("the kubelet's grpc probe under mutual TLS", lambda o: master(o).update(
                {"readinessProbe": {"grpc": {"port": 7070}}}), "cannot show a client cert"),
            ("a PDB selecting no shard", lambda o: find(o, "PodDisruptionBudget")[0]["spec"]
             ["selector"]["matchLabels"].update({"app.kubernetes.io/name": "shard"}),
             "PodDisruptionBudget/tessera-shard: selector"),
            ("advertise under another Service", lambda o: shard(o)["args"].__setitem__(
                shard(o)["args"].index("--advertise") + 1, "$(POD_NAME).shards:7071"),
             "--advertise '$(POD_NAME).shards:7071'"),
            ("serviceName of no Service", lambda o: find(o, "StatefulSet")[0]["spec"].update(
                {"serviceName": "shards"}), "serviceName 'shards': no such Service"),
            ("a Secret nobody made", lambda o: find(o, "Secret", "tessera-shard-tls")[0]
             ["metadata"].update({"name": "other"}), "Secret 'tessera-shard-tls' does not exist"),
            ("a file the Secret lacks", lambda o: master(o)["args"].__setitem__(
                master(o)["args"].index("--tls-key") + 1, "/etc/tessera/tls/shard.key"),
             "volume tls has no file 'shard.key'"),
            ("a shard with no certificate of its own", lambda o: find(o, "StatefulSet")[0]
             ["spec"].update({"replicas": 4}), "volume tls has no file 'tessera-shard-3.pem'"),
            ("a probe with the shard's name unexpanded", lambda o: shard(o)["livenessProbe"]
             ["exec"]["command"].__setitem__(4, "/etc/tessera/tls/$(POD_NAME).pem"),
             "livenessProbe uses"),
            ("a ConfigMap key that is not there", lambda o: find(o, "ConfigMap", "tessera-config")
             [0]["data"].pop("TESSERA_JOB"), "has no key 'TESSERA_JOB'"),
            ("an undefined $(VAR)", lambda o: worker(o)["args"].extend(["--seed", "$(SEED)"]),
             "$(SEED) is not in its env"),
            ("a PVC that does not exist", lambda o: o.remove(
                find(o, "PersistentVolumeClaim", "tessera-store")[0]),
             "PVC 'tessera-store' does not exist"),
            ("--workers not the completions", lambda o: find(o, "Job")[0]["spec"].update(
                {"completions": 3}), "--workers 2, completions 3, parallelism 2 differ"),
            ("a memory budget over the limit", lambda o: shard(o)["resources"]["limits"].update(
                {"memory": "2Gi"}), "--mem-budget 3072 MiB is not below its memory limit"),
            ("the store on the read-only root", lambda o: master(o)["volumeMounts"].pop(1),
             "--store /var/lib/tessera/store is not on a writable volume"),
        ]
        schema = [
            ("an unknown field", lambda o: worker(o).update({"imagePullPolcy": "Always"}),
             "Job/tessera-train: spec.template.spec.containers[0].imagePullPolcy: unknown"),
            ("an unknown field in a volume", lambda o: pod_spec(find(o, "Deployment")[0])
             ["volumes"][2]["secret"].update({"mode": 256}), "volumes[2].secret.mode: unknown"),
            ("a wrong type", lambda o: find(o, "StatefulSet")[0]["spec"].update(
                {"replicas": "three"}), "StatefulSet/tessera-shard: schema: data/spec/replicas "
             "must be integer"),
            ("a required field missing", lambda o: find(o, "Deployment")[0]["spec"].pop(
                "selector"), "must have required property selector"),
            ("a value out of its enum", lambda o: master(o).update(
                {"imagePullPolicy": "Sometimes"}), "imagePullPolicy must be equal to one of"),
        ]
        for cases, check in ((cross, lambda objs: all_problems(objs, self.helps)),
                             (schema, lambda objs: schema_problems(objs, self.tmp))):
            for what, fn, want in cases:
                with self.subTest(what):
                    problems = check(mutate(fn))
                    self.assertTrue(any(want in p for p in problems),
                                    "%s: want a problem with %r, got %s" % (what, want,
                                                                            problems))
                    tl.log("refused (%s): %s" % (what, [p for p in problems if want in p][0]))

    def local_argv(self, c, env, ports):
        """c's command line with the manifest's paths and ports mapped to local ones."""
        words = [expand(w, env) for w in c["command"] + c.get("args", [])]
        words = [w.replace("/etc/tessera/tls/", self.certs + "/")
                 .replace("/etc/tessera/token/", self.certs + "/")
                 .replace("/etc/tessera/probe/", self.tmp + "/probe/")
                 .replace("/var/lib/tessera/", self.tmp + "/var/") for w in words]
        for old, new in ports.items():
            words = [w.replace(old, new) for w in words]
        words[0] = os.path.join(tl.BIN, words[0])
        return words

    def run_probe(self, c, kind, env, ports):
        argv = self.local_argv({"command": probe_cmd(c[kind])}, env, ports)
        argv[0] = "/usr/bin/python3"
        penv = dict(os.environ, **{k: v for k, v in env.items() if v is not None})
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, env=penv)

    def test_services_start_with_these_args_and_pass_these_probes(self):
        """The master and a shard, started with the manifests' own arguments under mutual TLS
        (paths, ports and addresses mapped to local ones), pass the manifests' own probes."""
        for d in ("probe", "var/master", "var/store"):  # in a pod: the volumes' mount points
            os.makedirs(os.path.join(self.tmp, d), exist_ok=True)
        probe = find(self.rendered, "ConfigMap", "tessera-probe")[0]["data"]["health.py"]
        with open(os.path.join(self.tmp, "probe", "health.py"), "w") as f:
            f.write(probe)
        mc = pod_spec(find(self.rendered, "Deployment", "tessera-master")[0])["containers"][0]
        sc = pod_spec(find(self.rendered, "StatefulSet", "tessera-shard")[0])["containers"][0]
        mport, sport = tl.free_port(), tl.free_port()
        menv = env_values(mc, self.rendered)
        senv = dict(env_values(sc, self.rendered), POD_NAME="tessera-shard-0",
                    TESSERA_MASTER="127.0.0.1:%d" % mport)
        mmap = {"0.0.0.0:7070": "127.0.0.1:%d" % mport, "127.0.0.1:7070": "127.0.0.1:%d" % mport}
        smap = {"0.0.0.0:7071": "127.0.0.1:%d" % sport, "127.0.0.1:7071": "127.0.0.1:%d" % sport,
                "tessera-shard-0.tessera-shard:7071": "127.0.0.1:%d" % sport}
        margv = self.local_argv(mc, menv, mmap)
        margv[margv.index("--metrics-port") + 1] = "0"
        m = self.c.spawn(margv, "master")
        try:
            tl.wait_until(lambda: self.run_probe(mc, "readinessProbe", menv, mmap).returncode
                          == 0, tl.START_TIMEOUT, "the master's readiness probe to pass")
        except AssertionError as e:
            raise AssertionError("%s\n%s\nits log:\n%s" % (e, " ".join(margv), m.log_text()))
        sargv = self.local_argv(sc, senv, smap)
        sargv[sargv.index("--metrics-port") + 1] = "0"
        s = self.c.spawn(sargv, "shard")
        try:
            tl.wait_until(lambda: self.run_probe(sc, "livenessProbe", senv, smap).returncode
                          == 0, tl.START_TIMEOUT, "the shard's liveness probe to pass")
            st = tl.wait_until(lambda: self.shard_alive(mport), tl.START_TIMEOUT,
                               "the shard to register")
            tl.log("master and shard up with the manifests' arguments: %s" % st)
            for kind in ("readinessProbe", "livenessProbe"):
                self.assertEqual(self.run_probe(mc, kind, menv, mmap).returncode, 0)
                self.assertEqual(self.run_probe(sc, kind, senv, smap).returncode, 0)
            # What the kubelet's grpc probe would do: plaintext, no client certificate.
            r = subprocess.run(["/usr/bin/python3", os.path.join(self.tmp, "probe", "health.py"),
                                "127.0.0.1:%d" % mport], capture_output=True, text=True,
                               timeout=20)
            self.assertEqual(r.returncode, 1, "a plaintext probe passed under mutual TLS")
            tl.log("a probe without a client certificate fails: %s" % r.stderr.strip())
        finally:
            self.assertEqual(s.stop(), 0, s.log_text())
        r = self.run_probe(sc, "livenessProbe", senv, smap)
        self.assertEqual(r.returncode, 1, "a probe of a stopped shard passed")
        tl.log("the probe of a stopped shard fails: %s" % r.stderr.strip())
        self.assertEqual(m.stop(), 0, m.log_text())

    def shard_alive(self, mport):
        env = dict(os.environ, TESSERA_TLS_DIR=self.certs)
        r = subprocess.run([os.path.join(tl.BIN, "tessera"), "status", "--master",
                            "127.0.0.1:%d" % mport, "--json"], capture_output=True, text=True,
                           timeout=15, env=env)
        if r.returncode != 0:
            return None
        shards = json.loads(r.stdout).get("shards", [])
        return [(x.get("addr"), x.get("state")) for x in shards] or None


if __name__ == "__main__":
    tl.main()
