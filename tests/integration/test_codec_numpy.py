#!/usr/bin/python3
"""test_codec_numpy.py - lib/codec's conversions against numpy's and torch's (Debian's).

codec_driver (tests/integration/codec_driver.c) encodes a file of float32 with a codec, checks
the payload as a shard would, and writes the decoded floats and the payload. Asserted:
  fp16  the payload is bit-identical to numpy's x.astype(np.float16), and the decoded floats
        to x.astype(np.float16).astype(np.float32), on ~1M random values over magnitudes
        2^-40..2^20, 200k random bit patterns (NaNs, subnormals, huge values), every binary16
        value with its midpoints and their neighbours, and named edge cases. NaN inputs: NaN
        out with numpy's bits, except that a signalling NaN comes out quiet (the scale
        multiply quiets it; numpy keeps it signalling).
  bf16  the decoded floats are bit-identical to torch.from_numpy(x).to(torch.bfloat16).float()
        on the same kinds of data (bf16 midpoints instead); NaN in, NaN out (torch's NaN bits
        depend on its code path, so only NaN-ness is compared).
  int8  a numpy transcription of the definition (s = max|x| / 127 in float32, q =
        rint(x / s) clipped), bit for bit.
  topk  the indices of numpy's stable sort by descending |x|, bit-identical values.
Prints one summary line per group; exits 1 if any group failed.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

BIN = os.environ.get("TESSERA_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
DRIVER = os.path.join(BIN, "codec_driver")


def run(tmp, spec, x):
    src, dst, pay = (os.path.join(tmp, n) for n in ("in.f32", "out.f32", "payload.bin"))
    np.ascontiguousarray(x, dtype="<f4").tofile(src)
    out = subprocess.run([DRIVER, spec, src, dst, pay], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.startswith("ok"):
        raise RuntimeError(f"codec_driver {spec}: {out.stdout} {out.stderr}")
    return np.fromfile(dst, dtype="<f4"), np.fromfile(pay, dtype=np.uint8)


class Group:
    def __init__(self, name):
        self.name, self.n, self.fails = name, 0, []

    def check(self, ok, what):
        self.n += 1
        if not ok:
            self.fails.append(what)

    def report(self):
        print(f"{self.name}: {self.n} checks, {len(self.fails)} failed")
        for f in self.fails[:10]:
            print("  FAIL", f)
        return not self.fails


def random_magnitudes(rng, n, lo, hi):
    """sign * 2^e * 1.m with e uniform in [lo, hi) and a random 23-bit m, as float32."""
    e = rng.integers(lo, hi, n)
    bits = ((e + 127).astype(np.uint32) << 23) | rng.integers(0, 1 << 23, n, dtype=np.uint32)
    bits |= rng.integers(0, 2, n, dtype=np.uint32) << 31
    return bits.view(np.float32)


def edge_cases():
    f = np.float32
    vals = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65505.0, 65519.0, 65519.996, 65520.0,
            65536.0, 1e10, -1e10, np.finfo(f).max, -np.finfo(f).max, np.finfo(f).tiny,
            2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25,
            1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, np.inf, -np.inf]
    x = np.array(vals, dtype=np.float32)
    bits = np.array([0x7fc00000, 0xffc00000, 0x7fc12345, 0x7f800001, 0x7fa00000, 0xff800001,
                     0x00000001, 0x80000001, 0x007fffff, 0x00018000, 0x7f7f8000, 0x7f7f7fff,
                     0x477fefff, 0x477ff000, 0x33000001, 0x387fe000], dtype=np.uint32)
    return np.concatenate([x, bits.view(np.float32)])


def fp16_grid():
    """Every finite binary16 value (both signs), each midpoint between neighbours and the
    floats just either side of it."""
    h = np.arange(0, 0x7c00, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = np.append(lo[1:], 65536.0)
    mid = ((lo + hi) / 2).astype(np.float32)
    both = np.concatenate([lo, -lo]).astype(np.float32)
    return np.concatenate([both, mid, -mid, np.nextafter(mid, np.float32(0)),
                           np.nextafter(mid, np.float32(np.inf))])


def bf16_grid():
    h = np.arange(0, 0x7f80, dtype=np.uint32) << 16
    mid = h | 0x8000
    return np.concatenate([h, h | 0x80000000, mid, mid - 1, mid + 1,
                           mid | 0x80000000]).view(np.float32)


def datasets(rng):
    return {
        "magnitudes": random_magnitudes(rng, 1_000_000, -40, 20),
        "bit patterns": rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(
            np.uint32).view(np.float32),
        "normal(0, 1e-3)": rng.normal(0, 1e-3, 100_000).astype(np.float32),
        "edges": edge_cases(),
    }


def test_fp16(tmp, sets):
    g = Group("fp16 vs numpy astype(float16)")
    for name, x in list(sets.items()) + [("binary16 grid", fp16_grid())]:
        dec, pay = run(tmp, "fp16", x)
        ours = pay.view("<u2")
        nan = np.isnan(x)
        quiet = x.view(np.uint32).copy()
        quiet[nan] |= 0x00400000       # a signalling NaN comes out quiet, payload kept
        with np.errstate(all="ignore"):
            ref = x.astype(np.float16)
            want = quiet.view(np.float32).astype(np.float16).view(np.uint16)
        bad = np.flatnonzero(ours != want)
        g.check(bad.size == 0, f"{name}: {bad.size} payloads differ, first x="
                f"{x[bad[:3]].view(np.uint32)} ours={ours[bad[:3]]} numpy={want[bad[:3]]}")
        refd = ref.astype(np.float32)
        same = (dec.view(np.uint32) == refd.view(np.uint32)) | (nan & np.isnan(dec))
        g.check(same.all() and np.isnan(dec[nan]).all(),
                f"{name}: {np.count_nonzero(~same)} decoded floats differ")
        g.check(not np.isnan(dec[~nan]).any(), f"{name}: NaN out of a number")
    return g.report()


def test_bf16(tmp, sets):
    import torch
    g = Group(f"bf16 vs torch {torch.__version__} to(bfloat16)")
    for name, x in list(sets.items()) + [("bfloat16 grid", bf16_grid())]:
        dec, pay = run(tmp, "bf16", x)
        ref = torch.from_numpy(x.copy()).to(torch.bfloat16).float().numpy()
        nan = np.isnan(x)
        same = (dec.view(np.uint32) == ref.view(np.uint32)) | (nan & np.isnan(dec))
        bad = np.flatnonzero(~same)
        g.check(bad.size == 0, f"{name}: {bad.size} differ, first x={x[bad[:3]].view(np.uint32)}"
                f" ours={dec[bad[:3]].view(np.uint32)} torch={ref[bad[:3]].view(np.uint32)}")
        g.check(np.isnan(dec[nan]).all() and not np.isnan(dec[~nan]).any(),
                f"{name}: NaN-ness differs")
        g.check(np.array_equal(pay.view("<u2")[~nan], (dec.view(np.uint32)[~nan] >> 16)),
                f"{name}: payload is not the top half of the decoded floats")
    return g.report()


def test_int8(tmp, rng):
    g = Group("int8 vs its definition in numpy")
    for x in (rng.normal(0, 1e-3, 100_003).astype(np.float32),
              random_magnitudes(rng, 50_000, -30, 5), np.zeros(17, np.float32),
              np.array([-3, 1, 2, 2.5, -0.5], np.float32)):
        dec, pay = run(tmp, "int8", x)
        s = np.float32(np.abs(x).max() if x.size else 0) / np.float32(127)
        with np.errstate(all="ignore"):
            q = np.clip(np.rint(x / s), -127, 127) if s > 0 else np.zeros_like(x)
        q = q.astype(np.int8)
        g.check(pay[:4].view("<f4")[0] == s, f"scale {pay[:4].view('<f4')[0]} != {s}")
        g.check(np.array_equal(pay[4:].view(np.int8), q), "q differs")
        g.check(np.array_equal(dec.view(np.uint32), (q.astype(np.float32) * s).view(np.uint32)),
                "decoded differs")
    return g.report()


def test_topk(tmp, rng):
    g = Group("topk vs numpy stable argsort")
    for ratio, x in ((0.01, rng.normal(0, 1, 100_003).astype(np.float32)),
                     (0.1, rng.integers(-3, 4, 20_000).astype(np.float32)),
                     (1.0, rng.normal(0, 1, 1000).astype(np.float32))):
        dec, pay = run(tmp, f"topk:{ratio}", x)
        k = max(1, int(np.ceil(ratio * x.size)))
        key = np.abs(x).view(np.uint32)
        idx = np.sort(np.argsort(-key.astype(np.int64), kind="stable")[:k])
        got_k = int(pay[:4].view("<u4")[0])
        g.check(got_k == k, f"count {got_k}, want {k}")
        got = pay[4:4 + 4 * got_k].view("<u4")
        g.check(np.array_equal(got, idx), f"ratio {ratio}: indices differ")
        want = np.zeros_like(x)
        want[idx] = x[idx]
        g.check(np.array_equal(dec.view(np.uint32), want.view(np.uint32)), "decoded differs")
    return g.report()


def main():
    print(f"numpy {np.__version__}, driver {DRIVER}")
    if not os.access(DRIVER, os.X_OK):
        print("codec_driver not built")
        return 1
    rng = np.random.default_rng(20240611)
    sets = datasets(rng)
    ok = True
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok = test_fp16(tmp, sets) and ok
        ok = test_bf16(tmp, sets) and ok
        ok = test_int8(tmp, rng) and ok
        ok = test_topk(tmp, rng) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
