#!/usr/bin/python3
"""test_redo_full.py - a shard's redo log (--redo-dir) on a disk that fills up: the pulls wait,
nothing a worker saw is lost, and once there is room the job goes on to the fingerprint of a
run that never ran short (issue 48; docs/embeddings.md, "Restarting from its own disk").

The shard's --redo-dir lies on a 3 MiB tmpfs in a private mount namespace (`unshare -m`;
mounting needs root). The CTR trainer (2 workers, exact, 8 tables and 6 dense tensors) logs
about 200 KB a step there, so the log soon needs more than the tmpfs holds: its writer's
writes fail with ENOSPC (each cut back and tried again every 500 ms), and the workers' pulls
wait for their step to be on the disk. Checked while it is full: /metrics says the log fails
(`tessera_shard_redo_failing` 1), the shard's log says why ("No space left on device") and
what to do, and no worker's clock moves for 2.5 s (read from their heartbeats). Then the test makes the tmpfs 512 MiB: the
run ends by itself on the `--local` run's params_sha256, and the log, replayed after a
SIGTERM, holds every table at the last step with the trainer's fingerprints. Where the mount
is not allowed the test prints why and exits 77 (ctest: skipped).
"""
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

CTR = ["--model", "ctr", "--batch", "128", "--micro", "32", "--exact", "--json",
       "--steps", "40"]


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as f:
        return dict(line.rsplit(" ", 1) for line in f.read().decode().splitlines()
                    if line.startswith("tessera_shard_redo_"))


class FullLog(unittest.TestCase):
    mnt = None   # the tmpfs, mounted by tl.main_on_tmpfs

    def test_pulls_wait_while_full_then_the_same_fingerprint(self):
        want = json.loads(tl.run_cli(["train", "--local"] + CTR, 300).stdout)
        c = tl.Cluster()
        failed = True
        redo = os.path.join(self.mnt, "redo")
        port = tl.free_port()
        try:
            master = c.start_master()
            shard = c.start_shard(master.addr, extra=["--redo-dir", redo, "--metrics-port",
                                                      str(port)])
            p = subprocess.Popen([os.path.join(tl.BIN, "tessera"), "train", "--master",
                                  master.addr, "--workers", "2", "--job", "full", "--keep"] +
                                 CTR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, stdin=subprocess.DEVNULL)
            try:
                tl.wait_until(lambda: metrics(port).get("tessera_shard_redo_failing") == "1",
                              120, "the redo log's disk full")

                def clocks():
                    return sorted(w.get("clock", 0) for w in
                                  tl.status_json(master.addr).get("workers", []))
                time.sleep(5)   # the clocks come with the workers' heartbeats (1 s apart)
                before = clocks()
                time.sleep(2.5)
                self.assertEqual(clocks(), before, "workers went on while their steps could "
                                 "not be logged")
                self.assertIn("No space left on device", shard.log_text())
                self.assertIn("make room on the disk", shard.log_text())
                tl.log("full at the workers' clocks %s; making room" % before)
                self.assertIsNone(tl.mount_tmpfs(self.mnt, "512m", remount=True))
                out, err = p.communicate(timeout=300)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            tl.scan_for_sanitizer("tessera train", err)
            self.assertEqual(p.returncode, 0, err[-3000:])
            got = json.loads(out)
            self.assertEqual(got["params_sha256"], want["params_sha256"])
            self.assertEqual(got["rollbacks"], 0)
            self.assertEqual(metrics(port)["tessera_shard_redo_failing"], "0")
            self.assertEqual(shard.stop(), 0)
            log = subprocess.run([os.path.join(tl.BIN, "tessera-shard"), "--replay", redo,
                                  "--json"], capture_output=True, text=True, timeout=120)
            self.assertEqual(log.returncode, 0, log.stderr)
            log = json.loads(log.stdout)
            self.assertEqual({t["table"]: (t["step"], t["sha256"]) for t in log["tables"]},
                             {name: (40, hexd) for name, hexd in got["table_sha256"].items()})
            self.assertEqual(log["jobs"][0]["dense_sha256"], got["dense_sha256"])
            failed = False
        finally:
            if failed:
                c.dump_logs()
            c.stop()


if __name__ == "__main__":
    tl.main_on_tmpfs(__file__, "3m", FullLog)
