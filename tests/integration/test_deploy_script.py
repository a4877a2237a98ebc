#!/usr/bin/python3
"""test_deploy_script.py - deploy/kubernetes/script, a user's own program as an indexed Job,
checked offline the way test_deploy_kubernetes.py checks the cluster's manifests, then run.

- `kubectl kustomize` renders it with tests/integration/user_train.py as train.py: a ConfigMap
  holding the script and the Job; with the cluster's objects (deploy/kubernetes, its Secrets
  made by docs/deploy.md's commands) every object passes the API schemas, and every Secret,
  ConfigMap and key it references exists, with a cpu and memory request and runAsNonRoot;
- the Job's command runs the script from the ConfigMap's mount; completions, parallelism and
  TESSERA_WORKERS agree; the rank is JOB_COMPLETION_INDEX from the downward API; the TLS
  directory is the client Secret's mount and holds ca.pem, client.pem and client.key;
- the pods' command and environment, taken from the rendered Job (the master and the
  certificates mapped to a local `tessera up`, the ConfigMap's script to a file), run as the
  Job's two ranks end on the fingerprint of the same script run by hand.
A broken copy of each check's input must be refused, naming the problem.
"""
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessera_testlib as tl  # noqa: E402
import test_deploy_kubernetes as k8s  # noqa: E402

SDIR = os.path.join(tl.SRC, "deploy", "kubernetes", "script")
SCRIPT = tl.USER_SCRIPT


def job_problems(objs):
    """What is wrong with the script Job against the objects it lives among."""
    out = []
    jobs = k8s.find(objs, "Job", "tessera-script")
    if len(jobs) != 1:
        return ["no Job/tessera-script"]
    job = jobs[0]
    spec, pod = job["spec"], k8s.pod_spec(job)
    c = pod["containers"][0]
    env = {e["name"]: e for e in c.get("env", [])}
    workers = env.get("TESSERA_WORKERS", {}).get("value")
    if spec.get("completionMode") != "Indexed":
        out.append("completionMode is not Indexed: the pods have no rank")
    if not (str(spec.get("completions")) == str(spec.get("parallelism")) == str(workers)):
        out.append("completions %s, parallelism %s and TESSERA_WORKERS %s differ"
                   % (spec.get("completions"), spec.get("parallelism"), workers))
    field = env.get("JOB_COMPLETION_INDEX", {}).get("valueFrom", {}).get("fieldRef", {})
    if "job-completion-index" not in field.get("fieldPath", ""):
        out.append("JOB_COMPLETION_INDEX is not the downward API's completion index")
    for name in ("TESSERA_MASTER", "TESSERA_JOB", "TESSERA_TLS_DIR"):
        if name not in env:
            out.append("env %s is missing" % name)
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    script = (c.get("command", []) + c.get("args", []))[1:2]
    m = script and k8s.mount_of(script[0], c)
    keys = m and k8s.volume_keys(vols.get(m["name"], {}), objs)
    if not m or not keys or os.path.basename(script[0]) not in keys:
        out.append("the script %s is in no ConfigMap mounted there" % (script or "(none)"))
    tls = env.get("TESSERA_TLS_DIR", {}).get("value", "")
    m = k8s.mount_of(tls + "/client.pem", c)
    keys = (m and k8s.volume_keys(vols.get(m["name"], {}), objs)) or set()
    if not {"ca.pem", "client.pem", "client.key"} <= keys:
        out.append("TESSERA_TLS_DIR %s holds %s, not ca.pem, client.pem and client.key"
                   % (tls, sorted(keys)))
    if spec.get("backoffLimit", 6) != 0:
        out.append("backoffLimit is not 0: a Python rank that died would be retried into a "
                   "job that cannot take it back")
    return out + k8s.check_references(objs, {})


class DeployScript(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        k8s.kubectl()
        cls.c = tl.Cluster(prefix="tessera-k8s-script.")
        cls.tmp = cls.c.dir
        kdir = os.path.join(cls.tmp, "script")
        shutil.copytree(SDIR, kdir)
        shutil.copy(SCRIPT, os.path.join(kdir, "train.py"))
        cls.rendered = k8s.render(kdir)
        base = k8s.render()
        certs = os.path.join(cls.tmp, "certs")
        r = tl.run_cli(["certs", "init", certs, "--shards", "3"])
        assert r.returncode == 0, r.stderr
        secrets = []
        for argv in k8s.doc_secret_commands():
            if "tessera-worker-tls" not in argv:
                continue
            argv = [a.replace("=certs/", "=%s/" % certs) for a in argv]
            r = subprocess.run([k8s.kubectl()] + argv[1:] + ["--dry-run=client", "-o", "json"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            secrets.append(__import__("json").loads(r.stdout))
        cls.objs = cls.rendered + [o for o in base if o["kind"] == "ConfigMap"] + secrets

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def test_renders_the_script_and_the_job(self):
        kinds = sorted(k8s.name_of(o) for o in self.rendered)
        self.assertEqual(kinds, ["ConfigMap/tessera-script", "Job/tessera-script"])
        cm = k8s.find(self.rendered, "ConfigMap", "tessera-script")[0]
        with open(SCRIPT) as f:
            self.assertEqual(cm["data"]["train.py"], f.read())
        self.assertEqual({o["metadata"]["namespace"] for o in self.rendered}, {"tessera-ps"})

    def test_schemas(self):
        self.assertEqual(k8s.schema_problems(self.objs, self.tmp), [])

    def test_cross_checks(self):
        self.assertEqual(job_problems(self.objs), [])

    def test_bad_input_is_refused(self):
        def broken(fn):
            objs = copy.deepcopy(self.objs)
            fn(k8s.find(objs, "Job", "tessera-script")[0])
            return job_problems(objs)

        def env(job, name, value):
            for e in job["spec"]["template"]["spec"]["containers"][0]["env"]:
                if e["name"] == name:
                    e.clear()
                    e.update({"name": name, "value": value})
        for fn, needle in (
                (lambda j: j["spec"].update(parallelism=3), "parallelism 3"),
                (lambda j: env(j, "TESSERA_WORKERS", "3"), "TESSERA_WORKERS 3"),
                (lambda j: env(j, "JOB_COMPLETION_INDEX", "0"), "completion index"),
                (lambda j: env(j, "TESSERA_TLS_DIR", "/tmp"), "TESSERA_TLS_DIR /tmp"),
                (lambda j: j["spec"]["template"]["spec"]["containers"][0].update(
                    command=["python3", "/opt/other/train.py"]), "in no ConfigMap"),
                (lambda j: j["spec"].update(backoffLimit=4), "backoffLimit"),
                (lambda j: j["spec"]["template"]["spec"]["volumes"][0]["configMap"].update(
                    name="nope"), "ConfigMap 'nope' does not exist")):
            problems = broken(fn)
            self.assertTrue(any(needle in p for p in problems), (needle, problems))

    def test_the_pods_command_trains_as_by_hand(self):
        env0 = tl.unlaunched_env()
        env0.pop("TESSERA_TLS_DIR", None)
        want = tl.script_by_hand("--steps", 30)
        up, addr = self.c.tessera_up(["--shards", "2"])
        job = k8s.find(self.rendered, "Job", "tessera-script")[0]
        c = k8s.pod_spec(job)["containers"][0]
        values = k8s.env_values(c, self.objs)
        script = tempfile.mkdtemp(dir=self.tmp)   # the ConfigMap's mount
        cm = k8s.find(self.rendered, "ConfigMap", "tessera-script")[0]
        with open(os.path.join(script, "train.py"), "w") as f:
            f.write(cm["data"]["train.py"])
        argv = [a.replace(os.path.dirname(c["command"][1]), script)
                for a in c["command"] + c.get("args", [])]
        argv[0] = "/usr/bin/" + argv[0]   # Debian's python3, with torch
        procs = []
        for rank in range(int(job["spec"]["completions"])):
            env = dict(env0, **{k: v for k, v in values.items() if v is not None})
            env.update(JOB_COMPLETION_INDEX=str(rank), TESSERA_MASTER=addr,
                       TESSERA_TLS_DIR=self.c.tls_dir, TESSERA_JOB="k8s-%d" % os.getpid())
            procs.append(subprocess.Popen(argv + ["--steps", "30"], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outs = [p.communicate(timeout=180) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertIn("params_sha256 %s" % want, outs[0][0])
        tl.log("the Job's command as 2 ranks: params_sha256 %s... as by hand" % want[:12])


if __name__ == "__main__":
    tl.main()
