#!/usr/bin/python3
"""test_verify_scipy.py - lib/verify's statistics against scipy and numpy (Debian's).

Samples come from numpy's default_rng over several seeds and sizes: both sides of
ks_2samp's 'auto' switch at 10,000 (exact path counting below, kstwo above), explicit
'exact' and 'asymp', equal and unequal sizes, continuous samples and heavily tied ones.
verify_stats_driver (tests/integration/verify_stats_driver.c) computes the same numbers from
.npy files. Asserted: KS statistic within 1e-12 absolute, p-value within 1e-9 relative,
location and sign equal, the exact->asymp fallback exactly when scipy warns; kstwo.sf and
special.smirnov on a grid within 1e-9 relative; Jensen-Shannon distance within 1e-12; mean,
std, histogram edges and counts as numpy gives them; PSI against a numpy transcription of
its definition; cosine against numpy in float64; .npy files written by the driver
byte-identical to numpy.save's, and malformed ones refused with the right status.
Prints one summary line per group; exits 1 on the first group with a failure.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import scipy
import scipy.special
import scipy.stats
from scipy.spatial.distance import jensenshannon

BIN = os.environ.get("TESSERA_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))
DRIVER = os.path.join(BIN, "verify_stats_driver")

KS_D_ABS = 1e-12
KS_P_REL = 1e-9
JS_ABS = 1e-12


class Driver:
    def __init__(self):
        self.p = subprocess.Popen([DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("driver died on: " + line)
        return out.split()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def rel_err(got, want):
    if np.isnan(want) and np.isnan(got):
        return 0.0
    if got == want:
        return 0.0
    return abs(got - want) / abs(want) if want != 0 else float("inf")


class Group:
    def __init__(self, name):
        self.name, self.n, self.fails, self.worst = name, 0, [], 0.0

    def check(self, ok, what, err=0.0):
        self.n += 1
        self.worst = max(self.worst, err)
        if not ok:
            self.fails.append(what)

    def report(self):
        print(f"{self.name}: {self.n} checks, worst error {self.worst:.3g}, "
              f"{len(self.fails)} failed")
        for f in self.fails[:10]:
            print("  FAIL", f)
        return not self.fails


def ks_samples(rng, n1, n2, ties):
    shift = float(rng.choice([0.0, 0.03, 0.1, 0.5, 2.0]))
    if ties:  # few distinct values: long runs of ties inside and across the samples
        k = int(rng.choice([2, 5, 30]))
        return (rng.integers(0, k, n1).astype(np.float64),
                (rng.integers(0, k, n2) + (shift > 0.4)).astype(np.float64))
    return rng.normal(0, 1, n1), rng.normal(shift, 1 + shift / 4, n2)


def test_ks(drv, tmp):
    g = Group("ks_2samp")
    sizes = [(1, 1), (1, 3), (4, 4), (7, 13), (25, 25), (60, 45), (200, 200), (500, 320),
             (1000, 1000), (2500, 1700), (10000, 10000), (10000, 7001),  # exact (auto)
             (10001, 10001), (12000, 30000), (25000, 800), (40, 15000)]  # asymp (auto)
    a_path, b_path = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
    regimes = set()
    for seed in range(6):
        rng = np.random.default_rng(seed)
        for n1, n2 in sizes:
            for ties in (False, True):
                a, b = ks_samples(rng, n1, n2, ties)
                np.save(a_path, a)
                np.save(b_path, b)
                for mode in ("auto", "exact", "asymp"):
                    if mode == "exact" and n1 * n2 > 1.5e8:
                        continue
                    with warnings.catch_warnings(record=True) as w:
                        warnings.simplefilter("always")
                        r = scipy.stats.ks_2samp(a, b, method=mode)
                    fell = any("Switching to" in str(x.message) for x in w)
                    out = drv.ask(f"ks {a_path} {b_path} {mode}")
                    what = f"seed {seed} {n1}x{n2} ties={ties} {mode}: scipy {r} ours {out}"
                    if out[0] == "ERR":
                        g.check(False, what)
                        continue
                    d, p, loc, sign = float(out[0]), float(out[1]), float(out[2]), int(out[3])
                    ed, ep = abs(d - r.statistic), rel_err(p, r.pvalue)
                    want_method = ("exact" if max(n1, n2) <= 10000 else "asymp") \
                        if mode == "auto" else mode
                    if fell:
                        want_method = "asymp"
                    regimes.add((out[4], ties))
                    g.check(ed <= KS_D_ABS and ep <= KS_P_REL and loc == r.statistic_location
                            and sign == r.statistic_sign and out[4] == want_method
                            and (out[5] == "1") == fell, what, max(ed, ep))
    # Every regime must have been exercised, with and without ties.
    for want in [("exact", False), ("exact", True), ("asymp", False), ("asymp", True)]:
        g.check(want in regimes, f"regime {want} never ran")
    return g.report()


def test_kstwo_smirnov(drv):
    g = Group("kstwo.sf and special.smirnov")
    rng = np.random.default_rng(7)
    ns = list(range(1, 30)) + [57, 139, 140, 141, 500, 1013, 4999, 20000, 100000, 100001,
                               1500000]
    for n in ns:
        ds = np.concatenate([rng.uniform(0, 1, 12), rng.uniform(0, 3 / np.sqrt(n), 24),
                             [0.0, 0.5 / n, 0.7 / n, 1.0 / n, 0.5, 1 - 1.0 / n, 1.0]])
        for d in ds:
            d = float(min(max(d, 0.0), 1.0))
            want = float(scipy.stats.kstwo.sf(d, n))
            got = float(drv.ask(f"kstwo {n} {d!r}")[0])
            e = rel_err(got, want)
            g.check(e <= KS_P_REL or abs(got - want) < 1e-300, f"kstwo n={n} d={d!r}: "
                    f"scipy {want!r} ours {got!r}", e)
            want = float(scipy.special.smirnov(n, d))
            got = float(drv.ask(f"smirnov {n} {d!r}")[0])
            e = rel_err(got, want)
            g.check(e <= KS_P_REL or abs(got - want) < 1e-300, f"smirnov n={n} d={d!r}: "
                    f"scipy {want!r} ours {got!r}", e)
    return g.report()


def test_js(drv, tmp):
    g = Group("jensenshannon")
    p_path, q_path = os.path.join(tmp, "p.npy"), os.path.join(tmp, "q.npy")
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        for n in (1, 2, 3, 7, 10, 64, 129, 1000, 5000):
            p = rng.random(n) ** 3
            q = rng.random(n) ** 3
            if n > 2:  # zeros in one, the other, and both
                p[rng.integers(0, n, n // 3 + 1)] = 0
                q[rng.integers(0, n, n // 3 + 1)] = 0
                p[0] = q[0] = 0
                p[1] = max(p[1], 0.5)
                q[2] = max(q[2], 0.5)
            np.save(p_path, p)
            np.save(q_path, q)
            for base in (None, 2.0, 10.0):
                want = float(jensenshannon(p, q, base=base))
                out = drv.ask(f"js {p_path} {q_path} {base or 0}")
                got = float(out[0]) if out[0] != "ERR" else float("nan")
                g.check(abs(got - want) <= JS_ABS, f"n={n} base={base}: scipy {want!r} "
                        f"ours {out}", abs(got - want))
        # Identical vectors: distance 0.
        np.save(q_path, p)
        got = float(drv.ask(f"js {p_path} {q_path} 0")[0])
        g.check(abs(got - float(jensenshannon(p, p))) <= JS_ABS, f"identical: {got}")
    return g.report()


def psi_numpy(ref, act, nbins):
    """The PSI as docs/verify-stats.md defines it, in numpy."""
    cuts = np.quantile(ref, np.arange(1, nbins) / nbins)
    pr = np.bincount(np.searchsorted(cuts, ref, side="left"), minlength=nbins) / len(ref)
    pa = np.bincount(np.searchsorted(cuts, act, side="left"), minlength=nbins) / len(act)
    pr = np.where(pr > 0, pr, 1e-4)
    pa = np.where(pa > 0, pa, 1e-4)
    return float(np.sum((pa - pr) * np.log(pa / pr)))


def test_numpy_stats(drv, tmp):
    g = Group("mean/std, histogram, psi, cosine")
    a_path, b_path = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
    for seed in range(6):
        rng = np.random.default_rng(300 + seed)
        for n1, n2 in ((1, 1), (5, 9), (130, 100), (1000, 3000), (20000, 9000), (100003, 50)):
            a = rng.normal(1.0, 2.0, n1)
            b = rng.standard_t(3, n2) * 1.5
            if seed % 2:
                a, b = np.round(a, 1), np.round(b, 1)  # ties and values on bin edges
            np.save(a_path, a)
            np.save(b_path, b)
            for ddof in (0, 1):
                if len(a) <= ddof:
                    continue
                out = drv.ask(f"moments {a_path} {ddof}")
                m, s = float(out[0]), float(out[1])
                em = rel_err(m, float(np.mean(a)))
                es = rel_err(s, float(np.std(a, ddof=ddof)))
                g.check(em <= 1e-14 and es <= 1e-14, f"moments n={n1} ddof={ddof}: {out} vs "
                        f"{np.mean(a)!r} {np.std(a, ddof=ddof)!r}", max(em, es))
            for nbins in (1, 10, 37):
                lo, hi = min(a.min(), b.min()), max(a.max(), b.max())
                ca, ea = np.histogram(a, bins=nbins, range=(lo, hi))
                cb, _ = np.histogram(b, bins=nbins, range=(lo, hi))
                out = drv.ask(f"hist {a_path} {b_path} {nbins}")
                edges = [float(x) for x in out[:nbins + 1]]
                counts = [int(x) for x in out[nbins + 1:]]
                g.check(edges == list(ea) and counts == list(ca) + list(cb),
                        f"hist n={n1},{n2} bins={nbins}")
            if n1 >= 10:
                want = psi_numpy(a, b, 10)
                got = float(drv.ask(f"psi {a_path} {b_path} 10")[0])
                g.check(abs(got - want) <= 1e-12 * max(1, abs(want)),
                        f"psi n={n1},{n2}: {got!r} vs {want!r}", abs(got - want))
        for dt in (np.float32, np.float64):
            x = rng.normal(0, 1, 4099).astype(dt)
            y = (x + rng.normal(0, 1e-3, 4099)).astype(dt)
            np.save(a_path, x)
            np.save(b_path, y)
            xd, yd = x.astype(np.float64), y.astype(np.float64)
            want = float(np.dot(xd, yd) / np.sqrt(np.dot(xd, xd) * np.dot(yd, yd)))
            got = float(drv.ask(f"cosine {a_path} {b_path}")[0])
            g.check(abs(got - want) <= 1e-12, f"cosine {dt.__name__}: {got!r} vs {want!r}",
                    abs(got - want))
    return g.report()


def test_npy(drv, tmp):
    g = Group("npy")
    src, dst = os.path.join(tmp, "src.npy"), os.path.join(tmp, "dst.npy")
    rng = np.random.default_rng(9)
    for shape in ((), (0,), (1,), (5,), (3, 4), (2, 3, 4), (1, 1, 1, 1, 7), (123457,)):
        for dt in ("<f4", "<f8"):
            x = rng.normal(0, 1, shape).astype(dt)
            np.save(src, x)
            out = drv.ask(f"copy {src} {dst}")
            same = out == ["ok"] and open(src, "rb").read() == open(dst, "rb").read()
            y = np.load(dst) if out == ["ok"] else None
            g.check(same and y.dtype == x.dtype and y.shape == x.shape
                    and x.tobytes() == y.tobytes(),
                    f"round trip {shape} {dt}: {out}")
    # Version 2.0 files, as numpy writes them when asked.
    x = rng.normal(0, 1, (4, 5)).astype("<f4")
    with open(src, "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    g.check(drv.ask(f"copy {src} {dst}") == ["ok"] and np.array_equal(np.load(dst), x),
            "version 2.0")
    # Refusals: Fortran order, big-endian, another dtype, truncation, bad magic.
    cases = [(np.asfortranarray(rng.normal(0, 1, (3, 4))), "EINVAL", "fortran_order"),
             (rng.normal(0, 1, 5).astype(">f4"), "EINVAL", "big-endian"),
             (np.arange(5, dtype="<i4"), "EINVAL", "not supported")]
    for arr, code, words in cases:
        np.save(src, arr)
        out = drv.ask(f"copy {src} {dst}")
        g.check(out[:2] == ["ERR", code] and words in " ".join(out) and src in " ".join(out),
                f"{words}: {out}")
    np.save(src, rng.normal(0, 1, 10))
    data = open(src, "rb").read()
    for bad, code, words in ((data[:-3], "ECORRUPT", "truncated"),
                             (data + b"\0" * 8, "ECORRUPT", "trailing"),
                             (b"\x93NUMPZ" + data[6:], "ECORRUPT", "magic")):
        open(src, "wb").write(bad)
        out = drv.ask(f"copy {src} {dst}")
        g.check(out[:2] == ["ERR", code] and words in " ".join(out), f"{words}: {out}")
    return g.report()


def main():
    print(f"scipy {scipy.__version__}, numpy {np.__version__}, driver {DRIVER}")
    if not os.access(DRIVER, os.X_OK):
        print("verify_stats_driver not built")
        return 1
    drv = Driver()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for t in (lambda: test_ks(drv, tmp), lambda: test_kstwo_smirnov(drv),
                  lambda: test_js(drv, tmp), lambda: test_numpy_stats(drv, tmp),
                  lambda: test_npy(drv, tmp)):
            ok = t() and ok
    drv.close()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
