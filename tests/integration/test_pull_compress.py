#!/usr/bin/python3
"""test_pull_compress.py - compressed pulls through real services (docs/compression.md,
"Pulls").

- BSP with int8 both ways over tcp: the run finishes, reaches a sane accuracy, and the bytes
  pulled are about a quarter of float32's (the worker's own count), while a run without
  --compress-pull pulls exactly its float32 bytes.
- ASP with top-k both ways (error feedback on the worker for pushes, on the shard for pulls).
- Over shared memory the option is taken and pulls go in full (the documented rule).
- Refused by name before anything trains: an unknown codec, exact mode, reduce mode; in the
  Python binding too (compress_pull=, where build/python is on PYTHONPATH).
"""
import json
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402
try:
    import tessera
except ImportError:
    tessera = None

STEPS = ["--steps", "200", "--batch", "64", "--partition-kb", "256", "--json"]


def train(args, timeout=300.0):
    r = tl.run_cli(["train"] + args, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("tessera train %s exited %d:\n%s\n%s" % (" ".join(args),
                                                                     r.returncode, r.stdout,
                                                                     r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


class PullCompress(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.master = cls.c.start_master()
        for i in range(2):
            cls.c.start_shard(cls.master.addr, name="shard%d" % i)
        ch = cls.c.channel(cls.master.addr)
        tl.wait_until(lambda: sum(1 for s in tl.cluster_status(ch).shards
                                  if s.state == tl.common_pb2.MEMBER_STATE_ALIVE) == 2,
                      15, "2 shards alive")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def job(self, extra, transport="tcp"):
        out = train(["--master", self.master.addr, "--workers", "2", "--transport", transport]
                    + STEPS + extra)
        tl.log("%s over %s: accuracy %.4f, pulled %d of %d bytes, pushed %d of %d" %
               (" ".join(extra) or "fp32", transport, out["test_accuracy"],
                out["bytes_pulled"], out["bytes_pulled_raw"], out["bytes_pushed"],
                out["bytes_raw"]))
        self.assertEqual(out["steps"], 200)
        self.assertGreater(out["bytes_pulled_raw"], 0)
        return out

    def test_int8_both_ways_pulls_a_quarter(self):
        plain = self.job([])
        self.assertEqual(plain["bytes_pulled"], plain["bytes_pulled_raw"])
        both = self.job(["--compress", "int8", "--compress-pull", "int8"])
        self.assertEqual(both["compress_pull"], "int8")
        self.assertEqual(both["bytes_pulled_raw"], plain["bytes_pulled_raw"])
        # 1 + 4/n bytes per element and an 8-byte token per partition, after one pull in full
        # per partition: well under 0.3 of float32.
        self.assertLess(both["bytes_pulled"], 0.3 * both["bytes_pulled_raw"])
        self.assertGreater(both["bytes_pulled"], 0.25 * both["bytes_pulled_raw"])
        self.assertGreater(both["test_accuracy"], 0.75)
        self.assertGreater(both["test_accuracy"], plain["test_accuracy"] - 0.03)

    def test_asp_topk_both_ways(self):
        out = self.job(["--mode", "asp", "--compress", "topk:0.1", "--compress-pull",
                        "topk:0.1"])
        # k = 10% as index/value pairs: 0.2 of float32, plus the first pull in full.
        self.assertLess(out["bytes_pulled"], 0.3 * out["bytes_pulled_raw"])
        self.assertGreater(out["test_accuracy"], 0.65)

    def test_shm_pulls_in_full(self):
        out = self.job(["--compress-pull", "fp16"], transport="shm")
        self.assertEqual(out["transport"], "shm")
        self.assertEqual(out["bytes_pulled"], out["bytes_pulled_raw"])

    def test_refused_by_name(self):
        for args, says in ((["--compress-pull", "zip"], "pull_compress"),
                           (["--compress-pull", "topk:0"], "pull_compress"),
                           (["--compress-pull", "fp16", "--exact"], "pull_compress: 'fp16', "
                                                                    "but exact mode"),
                           (["--compress-pull", "int8", "--mode", "reduce"], "reduce job"),
                           (["--compress-pull", "fc9.weight=int8"], "no tensor 'fc9.weight'")):
            r = tl.run_cli(["train", "--master", self.master.addr, "--workers", "1",
                            "--steps", "2", "--json"] + args, timeout=120)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(says, r.stderr + r.stdout, args)


    @unittest.skipIf(tessera is None, "the Python binding (build/python) is not on PYTHONPATH")
    def test_python_refuses_exact(self):
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.Client(master="local", batch=64, exact=True, compress_pull="fp16")
        self.assertIn("pull_compress: 'fp16', but exact mode", str(cm.exception))
        with self.assertRaises(tessera.InvalidArgument) as cm:
            tessera.Client(master="local", batch=64, compress_pull="zip")
        self.assertIn("pull_compress", str(cm.exception))


if __name__ == "__main__":
    tl.main()
