"""test_metrics_jobs.py - a job's series end with the job (docs/observability.md, "A job's
series end with it").

Real processes: `tessera up --shards 2 --metrics-port BASE` and JOBS short jobs run one after
the other (`tessera train --job life-K`, not kept: once its workers finish, the master has
every shard release it). Checked:
- while job K runs, every shard's /metrics has series labelled job_id="life-K" (its pushes,
  pulls, updates);
- once the job is released, no endpoint (the master, either shard) names it any more;
- the series each endpoint exports after the last job are no more than after the first, give
  or take a few that name a call or a status seen for the first time (RPC methods and codes):
  the count does not grow with the jobs run. Before this, each job left about 63 series on
  each shard for good (three histograms of 20 lines, three counters).
"""
import os
import re
import sys
import time
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

JOBS = int(os.environ.get("TESSERA_METRICS_JOBS", "4"))
STEPS = 300
# Series that may appear after the first job without naming one: a method or a status code
# of lib/rpc's counters seen for the first time (a ReleaseJob refused while the workers'
# connections close, say).
SLACK = 8


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def series(text):
    """The sample lines of a scrape (every series, histogram buckets included)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def naming(text, job):
    return [s for s in series(text) if re.search(r'job_id="%s"' % re.escape(job), s)]


class MetricsOfEndedJobs(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.base = tl.free_ports(3)
        _, cls.master = cls.c.tessera_up(["--shards", "2", "--metrics-port", str(cls.base)])
        cls.ports = [cls.base, cls.base + 1, cls.base + 2]   # the master, shard 1, shard 2

    def run_job(self, k):
        """Runs job life-K; returns the series naming it on each shard while it ran."""
        job = "life-%d" % k
        train = self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                              self.master, "--workers", "2", "--steps", str(STEPS), "--job",
                              job], "train-%d" % k)
        seen = {}

        def every_shard_names_it():
            for port in self.ports[1:]:
                if port not in seen:
                    n = len(naming(scrape(port), job))
                    if n:
                        seen[port] = n
            return len(seen) == 2 or not train.running() and "gone"
        done = tl.wait_until(every_shard_names_it, 120, "series of %s on every shard" % job,
                             interval=0.05)
        self.assertNotEqual(done, "gone", "%s ended before every shard showed series of it "
                            "(seen: %s)\n%s" % (job, seen, train.log_text()[-2000:]))
        self.assertEqual(train.wait(300), 0, train.log_text()[-2000:])
        tl.wait_until(lambda: not any(naming(scrape(p), job) for p in self.ports), 60,
                      "every endpoint to drop the series of %s once it is released" % job)
        return seen

    def test_series_of_each_job_go_with_it(self):
        counts = []
        for k in range(JOBS):
            seen = self.run_job(k)
            counts.append([len(series(scrape(p))) for p in self.ports])
            tl.log("job life-%d: %s series of it on the shards while it ran; after its "
                   "release the master, shard 1, shard 2 export %s series" % (
                       k, [seen[p] for p in self.ports[1:]], counts[-1]))
        for first, last, port in zip(counts[0], counts[-1], self.ports):
            self.assertLessEqual(last, first + SLACK, "port %d: %d series after job 1, %d "
                                 "after job %d: %s" % (port, first, last, JOBS, counts))
        for port in self.ports:
            self.assertEqual([s for s in series(scrape(port)) if "job_id=" in s], [],
                             "port %d still names a job" % port)


if __name__ == "__main__":
    tl.main()
