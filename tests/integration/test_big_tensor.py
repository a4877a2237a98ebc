#!/usr/bin/python3
"""test_big_tensor.py - a 2 GiB tensor registers and trains a step (`make test-big`: about a
minute and 7 GiB of memory, so not in `make test`).

A default `tessera up --shards 2` (mutual TLS); one worker registers a tensor of 2^29 floats
and steps once through its zero-copy buffers. Checked: the registration ends within its
deadline (the call deadline plus 8 s per GiB, lib/client/sdk.c) while both shards stay alive
(a shard once built the partitions under its registry lock, went silent past its lease and
was declared dead), and the step's values are the optimizer's.

Environment: PYTHONPATH with build/python and build/gen/python (the Makefile target sets it).
"""
import sys
import time
import unittest

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

import numpy as np  # noqa: E402
import tessera  # noqa: E402

NUMEL = (2 << 30) // 4


class BigTensor(tl.UpCase, unittest.TestCase):
    UP_ARGS = ("--shards", "2")

    def test_two_gib_registers_and_steps(self):
        c = tessera.Client(master=self.addr, job="big", batch=1, optimizer="sgd:lr=0.5",
                           timeout_ms=300000)
        try:
            t0 = time.monotonic()
            i = c.register("w", NUMEL, init="zeros")
            took = time.monotonic() - t0
            tl.log("registered 2 GiB in %.1f s" % took)
            st = tl.status_json(self.addr)
            self.assertEqual([s["state"] for s in st["shards"]], ["alive", "alive"])
            p, g = c.buffers(i)
            g[:] = 1.0
            c.step(0, [g], [p])
            self.assertEqual(float(p[0]), -0.5)
            self.assertEqual(float(p[NUMEL - 1]), -0.5)
            self.assertEqual(float(np.min(p[::4096])), -0.5)
            del p, g
        finally:
            c.close()


if __name__ == "__main__":
    tl.main()
