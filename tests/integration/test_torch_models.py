#!/usr/bin/python3
"""test_torch_models.py - users' own PyTorch models through tessera.torch, as processes
against a `tessera up` (mutual TLS), beside DDP on gloo (python/examples/torch_models.py).

- A CNN with BatchNorm on Fashion-MNIST, torch's own initialisation and mean loss, 2 workers,
  2 epochs: both ranks start from the model's own weights, reach 0.87 test accuracy, and end
  with equal BatchNorm buffers.
- torchvision's ResNet-18 (BatchNorm everywhere) on CIFAR-shaped data and a causal transformer
  language model on the GPL-3 text, each trained with tessera.torch and with DDP from the same
  start on the same samples: the losses agree to float noise, and training lowers them.

Environment (ctest sets it): PYTHONPATH with build/python and build/gen/python.
"""
import json
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

EXAMPLE = os.path.join(tl.SRC, "python", "examples", "torch_models.py")


class Models(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2")

    def ranks(self, model, ddp=False, **kw):
        """Two ranks of the example; their JSON lines, by rank."""
        args = [a for k, v in kw.items() for a in ("--" + k, str(v))]
        port = tl.free_port()
        where = ["--ddp", "127.0.0.1:%d" % port] if ddp else ["--master", self.addr]
        procs = [subprocess.Popen([sys.executable, EXAMPLE, "--model", model, "--workers", "2",
                                   "--rank", str(r), "--job", "%s-%s" % (model, r if ddp else 0)]
                                  + where + args, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(2)]
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=280)
                self.assertEqual(p.returncode, 0, err[-3000:])
                outs.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return outs

    def test_cnn_batchnorm_fashion_mnist(self):
        out = self.ranks("cnn", epochs=2)
        self.assertTrue(out[0]["starts_from_own_weights"] and out[1]["starts_from_own_weights"])
        self.assertGreaterEqual(out[0]["test_accuracy"], 0.87)
        self.assertEqual(out[0]["buffers_sha256"], out[1]["buffers_sha256"])
        self.assertEqual(out[0]["params_sha256"], out[1]["params_sha256"])

    def test_resnet18_and_transformer_as_ddp(self):
        for model, steps in (("resnet18", 8), ("transformer", 20)):
            with self.subTest(model=model):
                ours = self.ranks(model, steps=steps)[0]
                ddp = self.ranks(model, ddp=True, steps=steps)[0]
                self.assertTrue(ours["starts_from_own_weights"])
                self.assertAlmostEqual(ours["loss_0"], ddp["loss_0"], delta=1e-5)
                self.assertAlmostEqual(ours["loss_last"], ddp["loss_last"],
                                       delta=0.02 * ddp["loss_last"])
                self.assertLess(ours["loss_last"], ours["loss_first"])


if __name__ == "__main__":
    tl.main()
