#!/usr/bin/python3
"""test_metrics_torch.py - a PyTorch job watched like a built-in one (docs/launch.md,
"Watching a job"; docs/observability.md).

Real processes: `tessera up --shards 2 --metrics-port BASE`, a real Prometheus scraping the
master and both shards, and tests/integration/user_train.py (tessera.torch, a model that is
not the built-in MLP) run by `tessera run --workers 2`. While it trains:
- `tessera status --json` has the job's progress (step, a finite loss, samples/s);
- the master's /metrics has tessera_job_step, tessera_job_loss and
  tessera_job_samples_per_second for its job_id, and Prometheus answers a PromQL query for its
  loss and a rising step;
- the status page, rendered by headless Chromium, lists both workers under the job and draws
  its loss plot;
- each rank's own /metrics (attach's metrics_port) has its steps rising and the loss it
  reported, labelled with the job and its rank; the accuracy only rank 0 reports is on rank
  0's alone (no rank exports a value it never had).
Once the job ends and is released, no endpoint (the master, either shard) names it.
"""
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessera_testlib as tl  # noqa: E402

SCRIPT = tl.USER_SCRIPT


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.read().decode()


def gauge(text, name, job):
    m = re.search(r'^%s\{job_id="%s"\} (\S+)$' % (name, re.escape(job)), text, re.M)
    return float(m.group(1)) if m else None


class TorchJobMetrics(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.base = tl.free_port()
        cls.up, cls.master = cls.c.tessera_up(["--shards", "2", "--metrics-port",
                                               str(cls.base)])
        cls.ports = [cls.base, cls.base + 1, cls.base + 2]

    def dom(self):
        chromium = shutil.which("chromium")
        self.assertIsNotNone(chromium, "chromium (Debian's package, installed by make test)")
        profile = os.path.join(self.c.dir, "chromium")
        return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                               "--user-data-dir=" + profile, "--virtual-time-budget=3000",
                               "--dump-dom", "http://127.0.0.1:%d/" % self.base],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, HOME=profile)).stdout

    def test_a_pytorch_job_is_watched_and_forgotten(self):
        job = "torch-%d" % os.getpid()
        query = tl.start_prometheus(self.c, self.ports)
        env = tl.unlaunched_env()
        wbase = tl.free_port()
        run = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "run", "--master",
                                self.master, "--workers", "2", "--job", job, "/usr/bin/python3",
                                SCRIPT, "--steps", "600", "--step-sleep", "0.03",
                                "--metrics-port", str(wbase)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
        try:
            def reported():
                text = scrape(self.base)
                step = gauge(text, "tessera_job_step", job)
                return step and step >= 20 and text
            text = tl.wait_until(reported, 90, "tessera_job_step of %s at 20" % job)
            loss = gauge(text, "tessera_job_loss", job)
            self.assertTrue(loss is not None and 0 < loss < 5, text[-2000:])
            self.assertGreater(gauge(text, "tessera_job_samples_per_second", job), 0)
            st = [j for j in tl.status_json(self.master)["jobs"] if j["id"] == job][0]
            self.assertTrue(math.isfinite(st["progress"]["loss"]), st)
            q = 'tessera_job_step{job_id="%s"}' % job
            first = tl.wait_until(lambda: query(q), 60, "Prometheus to scrape the job's step")
            tl.wait_until(lambda: (query(q) or [0])[0] > first[0], 30, "its step to rise")
            prom_loss = tl.wait_until(lambda: query('tessera_job_loss{job_id="%s"}' % job),
                                      30, "the job's loss in Prometheus")
            self.assertTrue(0 < prom_loss[0] < 5, prom_loss)
            dom = self.dom()
            self.assertEqual(sorted(re.findall(
                r'<tr class="worker">.*?<td class="job">([^<]*)</td><td>(\d+)</td>', dom)),
                [(job, "0"), (job, "1")], dom[-3000:])
            self.assertIn("<td>%s</td>" % job, dom)
            lines = re.findall(r'<polyline points="([^"]*)"', dom)
            self.assertTrue(lines and len(lines[0].split()) >= 2, "a loss plot of the job")
            ranks = [scrape(wbase + r) for r in (0, 1)]
            for r, text in enumerate(ranks):
                labels = '{job_id="%s",rank="%d"}' % (job, r)
                self.assertIn("tessera_worker_steps_total" + labels, text)
                self.assertRegex(text, r"tessera_worker_loss%s \d" % re.escape(labels))
            self.assertIn("tessera_worker_train_accuracy{", ranks[0])
            self.assertNotIn("tessera_worker_train_accuracy{", ranks[1])
            _, err = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        self.assertEqual(run.returncode, 0, err[-3000:])
        tl.wait_until(lambda: not any(('job_id="%s"' % job) in scrape(p) for p in self.ports),
                      60, "every endpoint to drop the series of %s once released" % job)
        tl.log("PyTorch job %s: step %d, loss %.3f in /metrics and Prometheus, its workers "
               "and loss plot on the page; its series gone after release"
               % (job, first[0], prom_loss[0]))


if __name__ == "__main__":
    tl.main()
