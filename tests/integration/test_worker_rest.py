"""test_worker_rest.py - workers the shards vouch for leave their heartbeats out
(docs/scaling.md, "Workers vouched for by the shards").

Real processes: a master (lease 3 s, its /metrics on), 2 shards, `tessera train` as the
workers. Checked:
- 4 workers training exact: the shards vouch for them (the master's
  tessera_worker_lease_renewals_total{by="shard"}), the workers other than rank 0 (which
  reports progress) beat at most every --worker-rest-ms, so the heartbeats are well under
  what 4 workers beating every third of a lease send; nobody's lease runs out, and the
  training ends on the `--local` fingerprint;
- a worker stopped (SIGSTOP) while it rests sends nothing and answers nothing: it is
  declared dead within its lease and a shard's beat, as a worker that beats would be;
- with `--worker-rest-ms 0` every worker beats every third of its lease, as before.
"""
import functools
import json
import os
import signal
import sys
import time
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

LEASE_MS = 3000
STEPS = 150 if tl.SANITIZED else 250
SLOW_MS = 40             # rank 0 sleeps this per step: the run lasts about STEPS * SLOW_MS


@functools.lru_cache(maxsize=None)
def local_sha(steps):
    r = tl.run_cli(["train", "--local", "--steps", str(steps), "--exact", "--json"],
                   timeout=300)
    if r.returncode != 0:
        raise AssertionError("tessera train --local exited %d:\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])["params_sha256"]


class Rest(tl.ClusterCase):
    REST = None          # --worker-rest-ms; None: the default

    @classmethod
    def setUpClass(cls):
        os.environ.setdefault("TESSERA_LOG", "warn")
        cls.c = tl.Cluster()
        cls.mport = tl.free_port()
        extra = ["--metrics-port", str(cls.mport)]
        if cls.REST is not None:
            extra += ["--worker-rest-ms", str(cls.REST)]
        cls.master = cls.c.start_master(lease_ms=LEASE_MS, extra=extra)
        cls.shards = [cls.c.start_shard(cls.master.addr, name="shard%d" % i) for i in range(2)]
        cls.ch = cls.c.channel(cls.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(cls.ch).shards
                                  if s.state == tl.ALIVE) == 2, 15, "2 shards alive")

    def metric(self, name, label):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport,
                                    timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('%s{%s} ' % (name, label)):
                    return float(line.split()[-1])
        return 0.0

    def renewals(self):
        return (self.metric("tessera_worker_lease_renewals_total", 'by="heartbeat"'),
                self.metric("tessera_worker_lease_renewals_total", 'by="shard"'))

    def train(self, job, workers, steps=STEPS):
        return self.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                             self.master.addr, "--workers", str(workers), "--steps",
                             str(steps), "--exact", "--job", job, "--slow",
                             "0:%d" % SLOW_MS, "--json"], "train-" + job, stdout_pipe=True)

    def beats_while_training(self, job):
        """Trains 4 workers exact; returns (heartbeats of workers during it, the beats 4
        workers send every third of a lease over that time, the same over the training's own
        seconds, renewals by the shards). The wall time holds the start and the end, slow on a
        loaded machine, in which a worker beats less than every interval (it registers, it
        waits for the others): a count of beats to be low is held to the wall time, one to be
        high to the training's seconds."""
        beats0, vouched0 = self.renewals()
        t0 = time.monotonic()
        p = self.train(job, 4)
        rc = p.wait(300)
        took = time.monotonic() - t0
        self.assertEqual(rc, 0, p.log_text())
        doc = json.loads(p.p.stdout.read().decode().strip().splitlines()[-1])
        self.assertEqual(doc["params_sha256"], local_sha(STEPS))
        self.assertEqual(self.metric("tessera_lease_expiries_total", 'kind="worker"'), 0)
        beats, vouched = self.renewals()
        per_s = 4 / (LEASE_MS / 3000.0)
        return beats - beats0, per_s * took, per_s * doc["seconds"], vouched - vouched0


class Resting(Rest, unittest.TestCase):
    def test_a_vouched_workers_rest_and_training_stays_exact(self):
        beats, every_interval, _, vouched = self.beats_while_training("rest")
        tl.log("%d worker heartbeats over the run, %d if each beat every interval; %d "
               "renewals by the shards" % (beats, every_interval, vouched))
        self.assertGreater(vouched, 0)
        self.assertLess(beats, 0.7 * every_interval)

    def test_b_a_stopped_worker_that_rested_is_declared_dead_in_time(self):
        p = self.train("stop", 2, steps=100000)
        try:
            def resting_rank1():
                for w in tl.cluster_status(self.ch).workers:
                    if w.job == "stop" and w.rank == 1 and w.state == tl.ALIVE:
                        return w
                return None
            tl.wait_until(resting_rank1, 60, "rank 1 of job stop to register")
            time.sleep(3 * LEASE_MS / 1000.0)   # beyond its first beats: resting now
            w = resting_rank1()
            self.assertIsNotNone(w)
            os.kill(w.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            try:
                tl.wait_until(lambda: [x for x in tl.cluster_status(self.ch).workers
                                       if x.id == w.id][0].state == tl.DEAD, 15,
                              "the stopped worker to be declared dead")
                took = time.monotonic() - t0
            finally:
                os.kill(w.pid, signal.SIGCONT)
            tl.log("declared dead %.1f s after SIGSTOP (lease %.1f s)" % (took,
                                                                         LEASE_MS / 1000.0))
            # its lease, the shards' beat that vouched for it last, the reaper's tick
            self.assertLess(took, LEASE_MS / 1000.0 + LEASE_MS / 3000.0 + 1.5)
        finally:
            p.signal(signal.SIGTERM)
            p.wait(60)


class NotResting(Rest, unittest.TestCase):
    REST = 0

    def test_every_worker_beats_every_interval(self):
        beats, every_interval, in_training, _ = self.beats_while_training("norest")
        tl.log("%d worker heartbeats over the run, %d if each beat every interval (%d over "
               "the training's own seconds)" % (beats, every_interval, in_training))
        self.assertGreater(beats, 0.75 * in_training)


if __name__ == "__main__":
    tl.main()
