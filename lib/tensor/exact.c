/* exact.c - order-independent gradient sums in fixed point, and the plain float sum.
 *
 * A gradient element g becomes round-half-even(g * 2^32) as an int64; int64 addition is
 * associative and commutative, so a sum of such values does not depend on the order or the
 * grouping in which the pushes arrive (docs/exact-mode.md).
 *
 * These loops are the shard's hot path, so they are written for the vectoriser of a plain
 * `-O2` build (GCC 12's "very cheap" cost model), which takes a loop only if it needs neither
 * a scalar remainder nor a horizontal reduction nor a conversion SSE2 lacks:
 *  - the bulk runs in blocks of TS_LANES elements (internal.h), with an inner loop of constant
 *    trip count, and a scalar loop does the tail; flags are OR-ed into a small per-lane array,
 *    not one scalar;
 *  - conditions are computed as bits (sign bits of sums), never as branches or bools;
 *  - SSE2 has no double <-> int64 conversion, so rounding and conversion use the classic magic
 *    constant: for |y| < 2^51, adding M = 1.5 * 2^52 rounds y to an integer with the current
 *    rounding mode (round half to even, the default) and leaves it in the low bits of M's
 *    significand, so bits(y + M) - bits(M) is that integer as an int64. A fixed-point value
 *    reaches 2^63, so x = g * 2^32 is split as h * 2^12 + l with h = rint(x / 2^12) (|h| < 2^51)
 *    and l = x - h * 2^12, which is exact and |l| <= 2^11; then rint(x) = h * 2^12 + rint(l),
 *    since h * 2^12 is even and adding it keeps a tie's parity.
 * Every result is an exact integer or a correctly rounded IEEE operation, so a vectorised and
 * a scalar run, or an AVX and an SSE2 build, give the same bits. Checked by
 * `gcc -O2 -fopt-info-vec` (each bulk loop reports "loop vectorized") and by
 * bench/aggregate.c. TS_HOT (internal.h) compiles the loops for SSE2 and for AVX2 and picks one
 * per CPU at load time; both give the same bits. */
#include "tensor/tensor.h"
#include "tensor/internal.h"

#include <math.h>
#include <string.h>

#define MAGIC 0x1.8p52                   /* 1.5 * 2^52: see the file comment */
#define SCALE 0x1p32                     /* 2^TS_FIXED_FRAC_BITS */
#define SIGN64 0x8000000000000000ull
/* Adding this to the magnitude bits of a double sets bit 63 exactly when the magnitude is
 * 2^63 or more, or the value is Inf or NaN: a branch-free range check. */
#define RANGE_BIAS (SIGN64 - 0x43E0000000000000ull)   /* 0x43E0... = bits of 2^63 */

_Static_assert(TS_FIXED_FRAC_BITS == 32, "exact.c hard-codes 2^32 scaling");

static inline uint64_t dbits(double d)
{
    uint64_t u;

    memcpy(&u, &d, sizeof(u));
    return u;
}

static inline double bitsd(uint64_t u)
{
    double d;

    memcpy(&d, &u, sizeof(d));
    return d;
}

/* round-half-even(x) for an x = g * 2^32 of magnitude below 2^63 (anything else gives a
 * meaningless value, which range_flag() has flagged). Unsigned, so no overflow is undefined. */
static inline uint64_t fix_round(double x)
{
    double t = x * 0x1p-12 + MAGIC;      /* rint(x / 2^12), held in t's low bits */
    double h = t - MAGIC;                /* the same, as a double: exact */
    double l = x - h * 0x1p12;           /* exact, |l| <= 2^11 */

    return ((dbits(t) - dbits(MAGIC)) << 12) + (dbits(l + MAGIC) - dbits(MAGIC));
}

/* Bit 63 set when x is not finite or |x| >= 2^63 (the caller ORs these and tests the bit). */
static inline uint64_t range_flag(double x)
{
    return (dbits(x) & ~SIGN64) + RANGE_BIAS;
}

/* acc += y in two's complement; bit 63 of the result's flag is set on signed overflow (the
 * operands have equal signs and the sum's sign differs). */
static inline uint64_t add_flag(uint64_t a, uint64_t b, uint64_t s)
{
    return (a ^ s) & (b ^ s);
}

static ts_status bad_value(const float *g, size_t n, struct ts_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (range_flag((double)g[i] * SCALE) & SIGN64)
            return ts_err_set(err, TS_EINVAL, "exact mode: gradient element %zu is %g: want a "
                              "finite value of magnitude below 2^31 (scale the loss down or "
                              "clip gradients)", i, (double)g[i]);
    return ts_err_set(err, TS_EINTERNAL, "exact mode: range check flagged no element");
}

static ts_status overflow(const int64_t *acc, const int64_t *x, const float *g, size_t n,
                          struct ts_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int64_t y = x ? x[i] : (int64_t)fix_round((double)g[i] * SCALE), s;

        if (__builtin_add_overflow(acc[i], y, &s))
            return ts_err_set(err, TS_EINVAL, "exact mode: element %zu: the sum %.9g + %.9g "
                              "leaves the fixed-point range of +-2^31 (scale the loss down or "
                              "clip gradients)", i, (double)acc[i] / SCALE, (double)y / SCALE);
    }
    return ts_err_set(err, TS_EINTERNAL, "exact mode: overflow check flagged no element");
}

TS_HOT
ts_status ts_fixed_from_f32(const float *restrict in, size_t n, int64_t *restrict o,
                            struct ts_err *err)
{
    uint64_t flag[TS_LANES] = { 0 }, bad = 0;
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES) {
        for (size_t j = 0; j < TS_LANES; j++) {
            double x = (double)in[i + j] * SCALE;   /* exact: a float has 24 bits */

            flag[j] |= range_flag(x);
            o[i + j] = (int64_t)fix_round(x);
        }
    }
    for (; i < n; i++) {
        double x = (double)in[i] * SCALE;

        bad |= range_flag(x);
        o[i] = (int64_t)fix_round(x);
    }
    for (size_t j = 0; j < TS_LANES; j++)
        bad |= flag[j];
    return bad & SIGN64 ? bad_value(in, n, err) : TS_OK;
}

/* acc[i] += x[i] modulo 2^64, returning the OR of the overflow flags. */
TS_HOT
static uint64_t add_wrap(int64_t *restrict a, const int64_t *restrict b, size_t n)
{
    uint64_t flag[TS_LANES] = { 0 }, f = 0;
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES) {
        for (size_t j = 0; j < TS_LANES; j++) {
            uint64_t u = (uint64_t)a[i + j], v = (uint64_t)b[i + j], s = u + v;

            flag[j] |= add_flag(u, v, s);
            a[i + j] = (int64_t)s;
        }
    }
    for (; i < n; i++) {
        uint64_t u = (uint64_t)a[i], v = (uint64_t)b[i], s = u + v;

        f |= add_flag(u, v, s);
        a[i] = (int64_t)s;
    }
    for (size_t j = 0; j < TS_LANES; j++)
        f |= flag[j];
    return f;
}

/* acc[i] -= x[i] modulo 2^64: undoes add_wrap exactly, since wrapping arithmetic is a group. */
static void sub_wrap(int64_t *restrict a, const int64_t *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (int64_t)((uint64_t)a[i] - (uint64_t)b[i]);
}

/* The contract is "all or nothing". Checking every element before adding would read both
 * arrays twice on every push; instead the add is done in one pass with wrapping arithmetic
 * while overflow is detected, and in the rare case of an overflow it is undone exactly by a
 * second pass, before __builtin_add_overflow finds the first overflowing element. */
ts_status ts_fixed_add(int64_t *acc, const int64_t *x, size_t n, struct ts_err *err)
{
    if (!(add_wrap(acc, x, n) & SIGN64))
        return TS_OK;
    sub_wrap(acc, x, n);
    return overflow(acc, x, NULL, n, err);
}

/* acc[i] += fixed(g[i]) modulo 2^64; returns the range flags, and the overflow flags in *ovf
 * (bit 63 of each). */
TS_HOT
static uint64_t add_f32_wrap(int64_t *restrict a, const float *restrict in, size_t n,
                             uint64_t *ovf)
{
    uint64_t flag[TS_LANES] = { 0 }, oflag[TS_LANES] = { 0 }, bad = 0, o = 0;
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES) {
        for (size_t j = 0; j < TS_LANES; j++) {
            double x = (double)in[i + j] * SCALE;
            uint64_t u = (uint64_t)a[i + j], v = fix_round(x), s = u + v;

            flag[j] |= range_flag(x);
            oflag[j] |= add_flag(u, v, s);
            a[i + j] = (int64_t)s;
        }
    }
    for (; i < n; i++) {
        double x = (double)in[i] * SCALE;
        uint64_t u = (uint64_t)a[i], v = fix_round(x), s = u + v;

        bad |= range_flag(x);
        o |= add_flag(u, v, s);
        a[i] = (int64_t)s;
    }
    for (size_t j = 0; j < TS_LANES; j++) {
        bad |= flag[j];
        o |= oflag[j];
    }
    *ovf = o;
    return bad;
}

/* Undoes add_f32_wrap. fix_round is a pure function of its input, also for the NaN, Inf and
 * out-of-range values whose results are meaningless, so subtracting restores acc exactly. */
static void sub_f32_wrap(int64_t *restrict a, const float *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (int64_t)((uint64_t)a[i] - fix_round((double)in[i] * SCALE));
}

ts_status ts_fixed_add_f32(int64_t *acc, const float *g, size_t n, struct ts_err *err)
{
    uint64_t ovf, bad = add_f32_wrap(acc, g, n, &ovf);

    if (!((bad | ovf) & SIGN64))
        return TS_OK;
    sub_f32_wrap(acc, g, n);
    if (bad & SIGN64)
        return bad_value(g, n, err);
    return overflow(acc, NULL, g, n, err);
}

/* ---- float pushes of exact jobs (ts_fixed_hold_f32 and friends) ---- */

#define F32_RANGE 0x4f000000u   /* magnitude bits of 2^31: exact mode refuses this and above */

static inline uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

/* Bit 31 set when the magnitude bits m (at most 0x7fffffff: NaN included) are lim or more. */
static inline uint32_t at_least(uint32_t m, uint32_t lim)
{
    return (lim - 1u) - m;
}

/* ORs the range flag of g into *range and its bound flag (|g| >= the bound whose magnitude
 * bits are lim) into *big, each in bit 31. */
static inline void f32_flags(float g, uint32_t lim, uint32_t *range, uint32_t *big)
{
    uint32_t m = fbits(g) & 0x7fffffffu;

    *range |= at_least(m, F32_RANGE);
    *big |= at_least(m, lim);
}

static ts_status f32_verdict(const float *g, size_t n, uint32_t range, uint32_t big,
                             bool *below, struct ts_err *err)
{
    if (range >> 31)
        return bad_value(g, n, err);
    *below = !(big >> 31);
    return TS_OK;
}

/* Two values below 2^30 have fixed-point values whose sum fits int64, and a double sum of
 * them rounds that sum once (ts_fixed_pair_to_f32). More pushes are summed as doubles only
 * while every partial sum is an integer of at most 53 bits: each below 2^(53 - c) / 2^32 with
 * 2^c >= pushes. */
float ts_fixed_f32_bound(uint32_t pushes)
{
    int c = 0;

    if (pushes <= 2)
        return 0x1p30f;
    while (c < 31 && (1u << c) < pushes)
        c++;
    return ldexpf(1.0f, 21 - c);
}

TS_HOT
ts_status ts_fixed_hold_f32(const float *restrict g, size_t n, float bound,
                            float *restrict held, bool *below, struct ts_err *err)
{
    uint32_t range[TS_LANES] = { 0 }, big[TS_LANES] = { 0 }, r = 0, b = 0, lim = fbits(bound);
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++) {
            f32_flags(g[i + j], lim, &range[j], &big[j]);
            held[i + j] = g[i + j];
        }
    for (; i < n; i++) {
        f32_flags(g[i], lim, &r, &b);
        held[i] = g[i];
    }
    for (size_t j = 0; j < TS_LANES; j++) {
        r |= range[j];
        b |= big[j];
    }
    return f32_verdict(g, n, r, b, below, err);
}

TS_HOT
ts_status ts_fixed_check_f32(const float *restrict g, size_t n, float bound, bool *below,
                             struct ts_err *err)
{
    uint32_t range[TS_LANES] = { 0 }, big[TS_LANES] = { 0 }, r = 0, b = 0, lim = fbits(bound);
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            f32_flags(g[i + j], lim, &range[j], &big[j]);
    for (; i < n; i++)
        f32_flags(g[i], lim, &r, &b);
    for (size_t j = 0; j < TS_LANES; j++) {
        r |= range[j];
        b |= big[j];
    }
    return f32_verdict(g, n, r, b, below, err);
}

/* round-half-even(g * 2^32) as a double: exact, since g * 2^32 is, and rint rounds in the
 * default mode (to nearest, ties to even), as fix_round does. The AVX2 clone vectorises it
 * (vroundpd); the SSE2 one calls libm, as SSE2 has no rounding instruction: slower, same bits. */
static inline double fix_exact(float g)
{
    return rint((double)g * SCALE);
}

/* Sums of such values below the bounds above are exact integers, or (a pair) the correctly
 * rounded value of the int64 sum S: exactly what i64_to_f64(S) gives in ts_fixed_to_f32, once
 * + 0.0 has made a -0 (from -0 + -0, or a tiny negative value rounded) the +0 of an int64
 * zero. The conversions below are then that function's: a multiplication by m = 2^-32 /
 * divisor when the divisor is a power of two (use_mul), else * 2^-32 / m, m the divisor. */
static inline float f64_out(double sum, bool use_mul, double m)
{
    return use_mul ? (float)((sum + 0.0) * m) : (float)((sum + 0.0) * 0x1p-32 / m);
}

/* o = the conversion of fix(a) + fix(b) (a pair) or acc + fix(b) (sum), by mul (use_mul) or
 * divisor m. Always inlined into the clones below with constant flags: one loop each. */
static inline __attribute__((always_inline)) void
f64_loop(const double *restrict acc, const float *restrict a, const float *restrict b,
         size_t n, bool sum, bool use_mul, double m, float *restrict o)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            o[i + j] = f64_out((sum ? acc[i + j] : fix_exact(a[i + j])) + fix_exact(b[i + j]),
                               use_mul, m);
    for (; i < n; i++)
        o[i] = f64_out((sum ? acc[i] : fix_exact(a[i])) + fix_exact(b[i]), use_mul, m);
}

TS_HOT static void pair_mul(const float *a, const float *b, size_t n, double m, float *o)
{
    f64_loop(NULL, a, b, n, false, true, m, o);
}

TS_HOT static void pair_div(const float *a, const float *b, size_t n, double m, float *o)
{
    f64_loop(NULL, a, b, n, false, false, m, o);
}

TS_HOT static void sum_mul(const double *acc, const float *b, size_t n, double m, float *o)
{
    f64_loop(acc, NULL, b, n, true, true, m, o);
}

TS_HOT static void sum_div(const double *acc, const float *b, size_t n, double m, float *o)
{
    f64_loop(acc, NULL, b, n, true, false, m, o);
}

TS_HOT
void ts_fixed_pair_f64(const float *restrict a, const float *restrict b, size_t n,
                       double *restrict acc)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            acc[i + j] = fix_exact(a[i + j]) + fix_exact(b[i + j]);
    for (; i < n; i++)
        acc[i] = fix_exact(a[i]) + fix_exact(b[i]);
}

TS_HOT
void ts_fixed_add_f32_f64(double *restrict acc, const float *restrict g, size_t n)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            acc[i + j] += fix_exact(g[i + j]);
    for (; i < n; i++)
        acc[i] += fix_exact(g[i]);
}

/* The int64 of each exact double, in place: the same 8 bytes of memory, read as one type and
 * written as the other (memcpy, so that no lvalue of the wrong type is used). Rare: scalar. */
void ts_fixed_f64_to_i64(void *acc, size_t n)
{
    unsigned char *p = acc;

    for (size_t i = 0; i < n; i++) {
        double d;
        int64_t v;

        memcpy(&d, p + i * 8, sizeof(d));
        v = (int64_t)d;
        memcpy(p + i * 8, &v, sizeof(v));
    }
}

/* (double)v, correctly rounded like cvtsi2sd, from two exactly converted halves: hi * 2^32 and
 * lo are exact doubles and their sum is rounded once. SSE2 converts int32 but not int64. */
static inline double i64_to_f64(int64_t v)
{
    uint64_t u = (uint64_t)v;
    double hi = (double)(int32_t)(u >> 32) * 0x1p32;
    double lo = bitsd((u & 0xffffffffu) | 0x4330000000000000ull) - 0x1p52;  /* 2^52 + lo */

    return hi + lo;
}

/* o[i] = (float)((double)a[i] * 2^-32 / divisor), divided. */
TS_HOT
static void to_f32_div(const int64_t *restrict a, size_t n, double divisor, float *restrict o)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            o[i + j] = (float)(i64_to_f64(a[i + j]) * 0x1p-32 / divisor);
    for (; i < n; i++)
        o[i] = (float)(i64_to_f64(a[i]) * 0x1p-32 / divisor);
}

/* o[i] = (float)((double)a[i] * mul), for mul = 2^-32 / divisor when that is exact. */
TS_HOT
static void to_f32_mul(const int64_t *restrict a, size_t n, double mul, float *restrict o)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            o[i + j] = (float)(i64_to_f64(a[i + j]) * mul);
    for (; i < n; i++)
        o[i] = (float)(i64_to_f64(a[i]) * mul);
}

/* A division is the slowest step of the loop (a vector divide retires a few lanes every several
 * cycles). When divisor is a power of two 2^k (batch and sync period usually are), x * 2^-32 and
 * the division by 2^k only move the exponent, exactly, as does one multiplication by 2^(-32-k):
 * the same bits, since no value here comes near the ends of double's exponent range
 * (|x| <= 2^63, k within +-900). */
static bool pow2_mul(double divisor, double *mul)
{
    int k;

    if (frexp(divisor, &k) != 0.5 || k <= -900 || k >= 900)
        return false;
    *mul = ldexp(1.0, -32 - (k - 1));
    return true;
}

void ts_fixed_to_f32(const int64_t *restrict a, size_t n, double divisor, float *restrict o)
{
    double mul;

    if (pow2_mul(divisor, &mul))
        to_f32_mul(a, n, mul, o);
    else
        to_f32_div(a, n, divisor, o);
}

void ts_fixed_pair_to_f32(const float *restrict a, const float *restrict b, size_t n,
                          double divisor, float *restrict o)
{
    double mul;

    if (pow2_mul(divisor, &mul))
        pair_mul(a, b, n, mul, o);
    else
        pair_div(a, b, n, divisor, o);
}

void ts_fixed_f64_to_f32(const double *restrict acc, const float *restrict last, size_t n,
                         double divisor, float *restrict o)
{
    double mul;

    if (pow2_mul(divisor, &mul))
        sum_mul(acc, last, n, mul, o);
    else
        sum_div(acc, last, n, divisor, o);
}

TS_HOT
void ts_f32_add(float *restrict a, const float *restrict b, size_t n)
{
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            a[i + j] += b[i + j];
    for (; i < n; i++)
        a[i] += b[i];
}
