/* test_codec.c - lib/codec: specs parse and print canonically and bad ones name the problem;
 * fp16 and bf16 round to nearest even on every representable value, every midpoint and its
 * neighbours (exhaustive over the 16-bit formats), overflow to Inf and keep NaN; each codec's
 * round trip stays within its documented bound on random data over wide ranges; int8 handles
 * zeros, negative maxima, exact ties and non-finite inputs; topk keeps exactly the k largest
 * with ties to the lower index; error feedback leaves decode / scale + residual equal to
 * g + residual, and leaves the residual alone when the encoding overflowed; a shard's check
 * refuses each malformed payload with a message naming the problem; add() scales by mul. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"

#define N 10007      /* random vectors: not a multiple of the kernels' blocks, so tails run */

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

/* Random sign * 2^U(lo, hi) with a random 24-bit significand. */
static float rand_mag(uint64_t *s, double lo, double hi)
{
    float v = (float)ldexp(1.0 + rng_unit(s), (int)floor(lo + (hi - lo) * rng_unit(s)));

    return rng_next(s) & 1 ? -v : v;
}

static uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;

    memcpy(&f, &u, 4);
    return f;
}

static struct ts_codec codec(const char *spec)
{
    struct ts_codec c;
    struct ts_err err = { 0 };

    if (ts_codec_parse(spec, &c, &err) != TS_OK)
        fail_msg("parse %s: %s", spec, err.msg);
    return c;
}

/* Encodes x (no residual, scale 1) into a fresh buffer; *bytes its length. */
static unsigned char *encode(const char *spec, const float *x, size_t n, size_t *bytes)
{
    struct ts_codec c = codec(spec);
    unsigned char *p = malloc(ts_codec_max_bytes(&c, n) + 1);

    assert_non_null(p);
    ts_codec_encode(&c, x, n, 1.0f, NULL, p, bytes);
    assert_int_equal(*bytes, ts_codec_max_bytes(&c, n));
    return p;
}

/* Encodes, checks and decodes x with spec. */
static void round_trip(const char *spec, const float *x, size_t n, float *out)
{
    struct ts_codec c = codec(spec);
    struct ts_err err = { 0 };
    size_t bytes;
    unsigned char *p = encode(spec, x, n, &bytes);

    if (ts_codec_check(c.kind, p, bytes, n, &err) != TS_OK)
        fail_msg("check %s: %s", spec, err.msg);
    ts_codec_decode(c.kind, p, bytes, n, out);
    free(p);
}

static uint16_t h_at(const unsigned char *p, size_t i)
{
    uint16_t h;

    memcpy(&h, p + 2 * i, 2);
    return h;
}

/* The value of binary16 h from its definition (independent of lib/codec). */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);

    return h & 0x8000 ? -v : v;
}

/* ---- specs ---- */

static void test_parse_good(void **state)
{
    static const struct { const char *spec; enum ts_codec_kind kind; double ratio;
                          const char *name; } ok[] = {
        { "none", TS_CODEC_NONE, 0, "none" },       { "fp16", TS_CODEC_FP16, 0, "fp16" },
        { "bf16", TS_CODEC_BF16, 0, "bf16" },       { "int8", TS_CODEC_INT8, 0, "int8" },
        { "topk:0.01", TS_CODEC_TOPK, 0.01, "topk:0.01" },
        { "topk:1", TS_CODEC_TOPK, 1, "topk:1" },   { "topk:0.5", TS_CODEC_TOPK, 0.5, "topk:0.5" },
        { "topk:1e-3", TS_CODEC_TOPK, 0.001, "topk:0.001" },
        { "topk:0.1", TS_CODEC_TOPK, 0.1, "topk:0.1" },
        { "topk:.25", TS_CODEC_TOPK, 0.25, "topk:0.25" },
    };
    char buf[64];

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct ts_codec c = codec(ok[i].spec);

        assert_int_equal(c.kind, ok[i].kind);
        assert_true(c.ratio == ok[i].ratio);
        assert_string_equal(ts_codec_name(&c, buf, sizeof(buf)), ok[i].name);
    }
    /* The canonical name parses back to the same double, however many digits that needs. */
    struct ts_codec c = { TS_CODEC_TOPK, 1.0 / 3 }, back;

    ts_codec_name(&c, buf, sizeof(buf));
    back = codec(buf);
    assert_true(back.ratio == c.ratio);
    /* A short buffer truncates. */
    c.ratio = 0.01;
    assert_string_equal(ts_codec_name(&c, buf, 5), "topk");
    assert_int_equal(TS_CODEC_TOPK, 4);      /* = tessera.v1.ENCODING_TOPK */
    assert_int_equal(TS_CODEC_INT8, 3);      /* = ENCODING_INT8_SCALED */
}

static void test_parse_bad(void **state)
{
    static const struct { const char *spec, *words; } bad[] = {
        { "", "empty" },                     { "fp32", "codec 'fp32': unknown" },
        { "FP16", "unknown" },               { "none ", "unknown" },
        { "topkk:0.1", "unknown" },          { "int8:1", "unknown" },
        { "topk", "topk needs a ratio" },    { "topk:", "topk needs a ratio" },
        { "topk:0", "ratio 0 is not in (0, 1]" },
        { "topk:-0.1", "ratio -0.1 is not in (0, 1]" },
        { "topk:1.5", "ratio 1.5 is not in (0, 1]" },
        { "topk:1e-400", "not in (0, 1]" },  { "topk:nan", "not in (0, 1]" },
        { "topk:inf", "not in (0, 1]" },     { "topk:abc", "ratio 'abc' is not a number" },
        { "topk:0.1x", "'0.1x' is not a number" },
        { "topk: 0.1", "is not a number" },
    };
    struct ts_codec c = { TS_CODEC_FP16, 7 };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_err err = { 0 };

        if (ts_codec_parse(bad[i].spec, &c, &err) != TS_EINVAL)
            fail_msg("'%s' was accepted", bad[i].spec);
        if (!strstr(err.msg, bad[i].words) || !strstr(err.msg, "codec") ||
            !strstr(err.msg, "want none, fp16, bf16, int8 or topk:RATIO"))
            fail_msg("'%s': message '%s' lacks '%s' or the choices", bad[i].spec, err.msg,
                     bad[i].words);
        if (*bad[i].spec)
            assert_non_null(strstr(err.msg, bad[i].spec));   /* names the spec */
    }
    assert_int_equal(c.kind, TS_CODEC_FP16);                  /* untouched on error */
    assert_true(c.ratio == 7);
    assert_int_equal(ts_codec_parse(NULL, &c, NULL), TS_EINVAL);
}

static void test_sizes(void **state)
{
    struct ts_codec t = codec("topk:0.01"), h = codec("fp16"), b = codec("bf16"),
                    q = codec("int8"), f = codec("none"), all = codec("topk:1"),
                    tiny = codec("topk:1e-300"), half = codec("topk:0.5");

    assert_int_equal(ts_codec_topk_k(&t, 100), 1);
    assert_int_equal(ts_codec_topk_k(&t, 1000), 10);
    assert_int_equal(ts_codec_topk_k(&t, 1001), 11);            /* ceil */
    assert_int_equal(ts_codec_topk_k(&t, 1), 1);
    assert_int_equal(ts_codec_topk_k(&t, 0), 0);
    assert_int_equal(ts_codec_topk_k(&tiny, 1000000), 1);       /* at least one */
    assert_int_equal(ts_codec_topk_k(&all, 12345), 12345);
    assert_int_equal(ts_codec_topk_k(&half, 3), 2);
    assert_int_equal(ts_codec_topk_k(&h, 77), 77);
    for (uint64_t n = 1; n < 3000; n += 7)                      /* the formula, in double */
        assert_int_equal(ts_codec_topk_k(&t, n), (uint64_t)fmax(1, ceil(0.01 * (double)n)));
    assert_int_equal(ts_codec_max_bytes(&t, 1000), 4 + 8 * 10);
    assert_int_equal(ts_codec_max_bytes(&h, 1000), 2000);
    assert_int_equal(ts_codec_max_bytes(&b, 1000), 2000);
    assert_int_equal(ts_codec_max_bytes(&q, 1000), 1004);
    assert_int_equal(ts_codec_max_bytes(&f, 1000), 4000);
    assert_int_equal(ts_codec_max_bytes(&q, 0), 4);
    assert_int_equal(ts_codec_max_bytes(&t, 0), 4);
}

/* ---- fp16 and bf16: exhaustive rounding ---- */

/* Every finite binary16 h (both signs) encodes to itself and decodes to its value; every
 * midpoint between neighbours rounds to the even one, and the floats just either side of it
 * round down and up. The last midpoint, 65520, rounds up to Inf. */
static void test_fp16_exhaustive(void **state)
{
    size_t n = 0, bytes;
    float *x = malloc(sizeof(float) * 6 * 0x7c00), *d = malloc(sizeof(float) * 6 * 0x7c00);
    uint16_t *want = malloc(2 * 6 * 0x7c00);

    assert_true(x && d && want);
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = f16_value((uint16_t)h), hi = h + 1 < 0x7c00 ? f16_value((uint16_t)(h + 1))
                                                                : 65536.0;
        float mid = (float)((lo + hi) / 2);

        assert_true((double)mid == (lo + hi) / 2);               /* exact in float */
        x[n] = (float)lo, want[n++] = (uint16_t)h;
        x[n] = -(float)lo, want[n++] = (uint16_t)(h | 0x8000);
        x[n] = mid, want[n++] = (uint16_t)(h & 1 ? h + 1 : h);   /* tie: even */
        x[n] = nextafterf(mid, 0), want[n++] = (uint16_t)h;
        x[n] = nextafterf(mid, INFINITY), want[n++] = (uint16_t)(h + 1);
        x[n] = -nextafterf(mid, INFINITY), want[n++] = (uint16_t)((h + 1) | 0x8000);
    }
    unsigned char *p = encode("fp16", x, n, &bytes);

    for (size_t i = 0; i < n; i++)
        if (h_at(p, i) != want[i])
            fail_msg("fp16(%a) = 0x%04x, want 0x%04x", (double)x[i], h_at(p, i), want[i]);
    ts_codec_decode(TS_CODEC_FP16, p, bytes, n, d);
    for (size_t i = 0; i < n; i += 6) {
        if (fbits(d[i]) != fbits(x[i]) || fbits(d[i + 1]) != fbits(x[i + 1]))
            fail_msg("decode 0x%04x: %a, want %a", want[i], (double)d[i], (double)x[i]);
    }
    free(p);
    free(x);
    free(d);
    free(want);
}

/* The same for bfloat16: values, midpoints (low 16 bits 0x8000) and their neighbours. */
static void test_bf16_exhaustive(void **state)
{
    size_t n = 0, bytes;
    float *x = malloc(sizeof(float) * 5 * 0x7f80), *d = malloc(sizeof(float) * 5 * 0x7f80);
    uint16_t *want = malloc(2 * 5 * 0x7f80);

    assert_true(x && d && want);
    for (uint32_t h = 0; h < 0x7f80; h++) {
        uint32_t mid = (h << 16) | 0x8000;

        x[n] = bitsf(h << 16), want[n++] = (uint16_t)h;
        x[n] = bitsf((h << 16) | 0x80000000u), want[n++] = (uint16_t)(h | 0x8000);
        x[n] = bitsf(mid), want[n++] = (uint16_t)(h & 1 ? h + 1 : h);
        x[n] = bitsf(mid - 1), want[n++] = (uint16_t)h;
        x[n] = bitsf(mid + 1), want[n++] = (uint16_t)(h + 1);   /* 0x7f80 = Inf at the top */
    }
    unsigned char *p = encode("bf16", x, n, &bytes);

    for (size_t i = 0; i < n; i++)
        if (h_at(p, i) != want[i])
            fail_msg("bf16(%a) = 0x%04x, want 0x%04x", (double)x[i], h_at(p, i), want[i]);
    ts_codec_decode(TS_CODEC_BF16, p, bytes, n, d);
    for (size_t i = 0; i < n; i += 5)
        assert_int_equal(fbits(d[i]), fbits(x[i]));
    free(p);
    free(x);
    free(d);
    free(want);
}

/* Named cases: overflow, just under 65504, subnormals, zeros, NaN. */
static void test_f16_edges(void **state)
{
    static const struct { uint32_t in; uint16_t fp16, bf16; } cases[] = {
        { 0x3f800000, 0x3c00, 0x3f80 },      /* 1 */
        { 0x477fe000, 0x7bff, 0x4780 },      /* 65504 = fp16 max */
        { 0x477fefff, 0x7bff, 0x4780 },      /* just under 65520: down to 65504 */
        { 0x477ff000, 0x7c00, 0x4780 },      /* 65520: the tie rounds to even = Inf */
        { 0x47800000, 0x7c00, 0x4780 },      /* 65536 */
        { 0xc77ff000, 0xfc00, 0xc780 },      /* -65520 -> -Inf */
        { 0x7f7fffff, 0x7c00, 0x7f80 },      /* FLT_MAX: Inf in both */
        { 0x7f800000, 0x7c00, 0x7f80 },      /* Inf */
        { 0xff800000, 0xfc00, 0xff80 },      /* -Inf */
        { 0x00000000, 0x0000, 0x0000 },      /* +0 */
        { 0x80000000, 0x8000, 0x8000 },      /* -0 */
        { 0x33800000, 0x0001, 0x3380 },      /* 2^-24: fp16's smallest subnormal */
        { 0x33000000, 0x0000, 0x3300 },      /* 2^-25: tie, to even 0 */
        { 0x33000001, 0x0001, 0x3300 },      /* just above: up */
        { 0x33c00000, 0x0002, 0x33c0 },      /* 3 * 2^-25: tie, to even 2 */
        { 0x387fe000, 0x0400, 0x3880 },      /* 2^-14 - 2^-25: tie between 0x3ff, 0x400 */
        { 0x00000001, 0x0000, 0x0000 },      /* float subnormal */
        { 0x00018000, 0x0000, 0x0002 },      /* bf16 subnormal tie: odd 1 -> even 2 */
        { 0x7fc00000, 0x7e00, 0x7fc0 },      /* quiet NaN */
        { 0xffc00001, 0xfe00, 0xffc0 },      /* negative NaN keeps its sign */
        { 0x7f800001, 0x7e00, 0x7fc0 },      /* signalling NaNs: the scale multiply */
        { 0x7fa00000, 0x7f00, 0x7fe0 },      /* quiets them, the payload's top stays */
    };
    size_t n = sizeof(cases) / sizeof(cases[0]), bytes;
    float x[sizeof(cases) / sizeof(cases[0])], d[sizeof(cases) / sizeof(cases[0])];

    for (size_t i = 0; i < n; i++)
        x[i] = bitsf(cases[i].in);
    unsigned char *h = encode("fp16", x, n, &bytes), *b = encode("bf16", x, n, &bytes);

    for (size_t i = 0; i < n; i++) {
        if (h_at(h, i) != cases[i].fp16 || h_at(b, i) != cases[i].bf16)
            fail_msg("0x%08x: fp16 0x%04x bf16 0x%04x, want 0x%04x 0x%04x", cases[i].in,
                     h_at(h, i), h_at(b, i), cases[i].fp16, cases[i].bf16);
    }
    ts_codec_decode(TS_CODEC_FP16, h, 2 * n, n, d);
    assert_true(isnan(d[n - 1]) && isnan(d[n - 2]) && isnan(d[n - 3]) && isnan(d[n - 4]));
    assert_true(signbit(d[n - 3]) && signbit(d[10]) && d[10] == 0);   /* -NaN, -0 */
    assert_true(isinf(d[3]) && d[2] == 65504.0f);
    ts_codec_decode(TS_CODEC_BF16, b, 2 * n, n, d);
    assert_true(isnan(d[n - 1]) && isnan(d[n - 2]) && isnan(d[n - 3]) && isnan(d[n - 4]));
    free(h);
    free(b);
}

/* ---- error bounds on random data ---- */

static void check_bound(const char *spec, unsigned enc, double lo, double hi, uint64_t seed)
{
    float *x = malloc(N * sizeof(float)), *d = malloc(N * sizeof(float));
    float mx = 0;

    assert_true(x && d);
    for (size_t i = 0; i < N; i++) {
        x[i] = rand_mag(&seed, lo, hi);
        mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
    }
    round_trip(spec, x, N, d);
    for (size_t i = 0; i < N; i++) {
        double e = fabs((double)d[i] - x[i]), b = ts_codec_err_bound(enc, x[i], mx / 127.0f);

        if (isinf(b)) {
            assert_true(isinf(d[i]) && signbit(d[i]) == signbit(x[i]));   /* overflow */
            continue;
        }
        if (!(e <= b))
            fail_msg("%s: %a -> %a: error %g above the bound %g", spec, (double)x[i],
                     (double)d[i], e, b);
    }
    free(x);
    free(d);
}

static void test_bounds(void **state)
{
    check_bound("fp16", TS_CODEC_FP16, -30, 17, 1);    /* subnormals to overflow */
    check_bound("fp16", TS_CODEC_FP16, -5, 5, 2);
    check_bound("bf16", TS_CODEC_BF16, -149, 128, 3);  /* float subnormals to overflow */
    check_bound("bf16", TS_CODEC_BF16, -10, 10, 4);
    check_bound("int8", TS_CODEC_INT8, -20, 3, 5);     /* most elements are 0 steps */
    check_bound("int8", TS_CODEC_INT8, 0, 1, 6);
    check_bound("int8", TS_CODEC_INT8, -149, -125, 7); /* s subnormal */
    check_bound("int8", TS_CODEC_INT8, 100, 127, 8);   /* s near FLT_MAX / 127 */
    check_bound("none", TS_CODEC_NONE, -149, 128, 9);
    assert_true(ts_codec_err_bound(TS_CODEC_FP16, 1.0, 0) == 0x1p-11);
    assert_true(ts_codec_err_bound(TS_CODEC_FP16, 1e-7, 0) == 0x1p-25);
    assert_true(isinf(ts_codec_err_bound(TS_CODEC_FP16, 65520, 0)));
    assert_true(ts_codec_err_bound(TS_CODEC_BF16, 2.0, 0) == 0x1p-7);
    assert_true(ts_codec_err_bound(TS_CODEC_TOPK, 5.0, 0) == 0);
}

/* ---- int8 ---- */

static void test_int8(void **state)
{
    float z[19] = { 0 }, d[19], v[8] = { -3, 1, 2, 0.5f, -1.5f, 3, 0, -0.0f };
    float ties[9] = { 127, 2.5f, 3.5f, -2.5f, 0.5f, 1.5f, -0.5f, 126.5f, -127 };
    signed char want[9] = { 127, 2, 4, -2, 0, 2, 0, 126, -127 };
    size_t bytes;
    float s;
    unsigned char *p = encode("int8", z, 19, &bytes);

    assert_int_equal(bytes, 4 + 19);
    memcpy(&s, p, 4);
    assert_true(s == 0 && !signbit(s));                 /* all zeros: s = 0, q = 0 */
    for (size_t i = 0; i < 19; i++)
        assert_int_equal(p[4 + i], 0);
    ts_codec_decode(TS_CODEC_INT8, p, bytes, 19, d);
    for (size_t i = 0; i < 19; i++)
        assert_true(d[i] == 0);
    free(p);

    p = encode("int8", v, 8, &bytes);                   /* the maximum is negative */
    memcpy(&s, p, 4);
    assert_true(s == 3.0f / 127);
    assert_int_equal((signed char)p[4], -127);
    assert_int_equal((signed char)p[4 + 5], 127);
    free(p);

    p = encode("int8", ties, 9, &bytes);                /* s = 1: v / s exact, ties to even */
    memcpy(&s, p, 4);
    assert_true(s == 1.0f);
    for (size_t i = 0; i < 9; i++)
        if ((signed char)p[4 + i] != want[i])
            fail_msg("int8(%g) = %d, want %d", (double)ties[i], (signed char)p[4 + i], want[i]);
    free(p);

    /* Non-finite input: s becomes Inf or NaN and everything decodes non-finite. */
    float xinf[3] = { 1, INFINITY, -2 }, xnan[3] = { 1, -2, NAN };

    p = encode("int8", xinf, 3, &bytes);
    memcpy(&s, p, 4);
    assert_true(isinf(s));
    ts_codec_decode(TS_CODEC_INT8, p, bytes, 3, d);
    assert_true(!isfinite(d[0]) && !isfinite(d[1]) && !isfinite(d[2]));
    free(p);
    p = encode("int8", xnan, 3, &bytes);
    memcpy(&s, p, 4);
    assert_true(isnan(s));
    free(p);
}

/* ---- topk ---- */

static const float *sort_x;

/* Larger |x| first (NaN largest), then the lower index. */
static int by_key(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint32_t ki = fbits(sort_x[i]) & 0x7fffffffu, kj = fbits(sort_x[j]) & 0x7fffffffu;

    return ki != kj ? (ki < kj) - (ki > kj) : (i > j) - (i < j);
}

static int by_index(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;

    return (i > j) - (i < j);
}

static void check_topk(const float *x, size_t n, const char *spec, float scale)
{
    struct ts_codec c = codec(spec);
    struct ts_err err = { 0 };
    size_t k = (size_t)fmax(1, ceil(c.ratio * (double)n)), bytes;
    uint32_t *ref = malloc(n * 4), cnt;
    unsigned char *p = malloc(ts_codec_max_bytes(&c, n));

    assert_true(ref && p);
    k = k > n ? n : k;
    for (uint32_t i = 0; i < n; i++)
        ref[i] = i;
    sort_x = x;
    qsort(ref, n, 4, by_key);
    qsort(ref, k, 4, by_index);
    ts_codec_encode(&c, x, n, scale, NULL, p, &bytes);
    assert_int_equal(bytes, 4 + 8 * k);
    assert_int_equal(ts_codec_check(TS_CODEC_TOPK, p, bytes, n, &err), TS_OK);
    memcpy(&cnt, p, 4);
    assert_int_equal(cnt, k);
    for (size_t j = 0; j < k; j++) {
        uint32_t i;
        float v;

        memcpy(&i, p + 4 + 4 * j, 4);
        memcpy(&v, p + 4 + 4 * k + 4 * j, 4);
        if (i != ref[j])
            fail_msg("%s, n %zu: position %zu holds index %u, want %u", spec, n, j, i, ref[j]);
        assert_int_equal(fbits(v), fbits(x[i] * scale));      /* sent values are exact */
    }
    free(ref);
    free(p);
}

static void test_topk(void **state)
{
    static const char *const specs[] = { "topk:0.01", "topk:0.1", "topk:0.5", "topk:1",
                                         "topk:0.003" };
    static const size_t sizes[] = { 1, 2, 63, 64, 65, 1000, N, 70001 };
    float *x = malloc(70001 * sizeof(float));
    uint64_t seed = 11;

    assert_non_null(x);
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < 70001; i++) {
            if (kind == 0)                  /* distinct magnitudes, wide range */
                x[i] = rand_mag(&seed, -20, 5);
            else if (kind == 1)             /* many ties: lower index first */
                x[i] = (float)((int)(rng_next(&seed) % 7) - 3);
            else                            /* ties within one radix bin, a few large */
                x[i] = i % 97 == 0 ? rand_mag(&seed, 0, 1) : (i % 2 ? 0.75f : -0.75f);
        }
        for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
            for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
                check_topk(x, sizes[z], specs[s], kind == 0 ? 1024.0f : 1.0f);
    }
    /* NaN and Inf rank first, so the shard sees them. */
    x[5] = NAN;
    x[9] = -INFINITY;
    check_topk(x, 1000, "topk:0.002", 1.0f);
    free(x);
}

/* ---- error feedback and loss scaling ---- */

static void check_feedback(const char *spec, float scale, uint64_t seed)
{
    struct ts_codec c = codec(spec);
    size_t max = ts_codec_max_bytes(&c, N), b1, b2;
    float *g = malloc(N * 4), *r = malloc(N * 4), *x = malloc(N * 4), *d = malloc(N * 4);
    unsigned char *p1 = malloc(max), *p2 = malloc(max);

    assert_true(g && r && x && d && p1 && p2);
    for (size_t i = 0; i < N; i++)
        r[i] = rand_mag(&seed, -14, -8);
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < N; i++) {
            g[i] = rand_mag(&seed, -24, 0);
            x[i] = g[i] + r[i];
        }
        ts_codec_encode(&c, g, N, scale, r, p1, &b1);
        ts_codec_encode(&c, x, N, scale, NULL, p2, &b2);      /* the same as encoding g + r */
        assert_int_equal(b1, b2);
        assert_memory_equal(p1, p2, b1);
        ts_codec_decode(c.kind, p1, b1, N, d);
        for (size_t i = 0; i < N; i++) {
            float sum = d[i] / scale + r[i];

            /* Bit for bit; only a zero could come back with the other sign. */
            if (fbits(sum) != fbits(x[i]) && !(sum == 0 && x[i] == 0))
                fail_msg("%s scale %g step %d element %zu: decode/scale %a + residual %a = "
                         "%a, want %a", spec, (double)scale, step, i, (double)(d[i] / scale),
                         (double)r[i], (double)sum, (double)x[i]);
        }
    }
    free(g);
    free(r);
    free(x);
    free(d);
    free(p1);
    free(p2);
}

static void test_error_feedback(void **state)
{
    static const char *const specs[] = { "none", "fp16", "bf16", "int8", "topk:0.01",
                                         "topk:0.3", "topk:1" };
    static const float scales[] = { 1.0f, 1024.0f, 0.125f, 0x1p-20f };

    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++)
        for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++)
            check_feedback(specs[s], scales[k], 100 + s * 10 + k);
}

/* An encoding holding Inf or NaN (overflow under loss scaling, or a non-finite gradient)
 * makes the shard skip the step: the residual stays as it was. */
static void test_overflow_keeps_residual(void **state)
{
    static const struct { const char *spec; float big, scale; } cases[] = {
        { "fp16", 100.0f, 1024.0f },         /* 102400 > 65504 */
        { "fp16", 64.0f, 1024.0f },          /* 65536: rounds to Inf */
        { "bf16", 3e38f, 2.0f },
        { "none", 3e38f, 2.0f },
        { "int8", INFINITY, 1.0f },
        { "int8", NAN, 1.0f },
        { "topk:0.01", NAN, 1.0f },
        { "topk:0.01", 1e38f, 16.0f },
    };
    float g[300], r[300], r0[300], d[300];
    uint64_t seed = 77;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct ts_codec k = codec(cases[c].spec);
        unsigned char p[1300];
        size_t bytes;
        bool nonfinite = false;

        for (size_t i = 0; i < 300; i++) {
            g[i] = rand_mag(&seed, -10, 0);
            r0[i] = r[i] = rand_mag(&seed, -20, -12);
        }
        g[123] = cases[c].big;
        ts_codec_encode(&k, g, 300, cases[c].scale, r, p, &bytes);
        assert_memory_equal(r, r0, sizeof(r));
        ts_codec_decode(k.kind, p, bytes, 300, d);
        for (size_t i = 0; i < 300; i++)
            nonfinite |= !isfinite(d[i]);
        if (!nonfinite)
            fail_msg("%s: %g * %g decoded finite", cases[c].spec, (double)cases[c].big,
                     (double)cases[c].scale);
    }
    /* Just under the edge (65504 after scaling) is finite and updates the residual. */
    struct ts_codec h = codec("fp16");
    unsigned char p[600];
    size_t bytes;

    for (size_t i = 0; i < 300; i++)
        r[i] = 0.3f, g[i] = 1.0f;
    g[0] = 65504.0f / 1024 - 0.3f;
    ts_codec_encode(&h, g, 300, 1024.0f, r, p, &bytes);
    assert_true(h_at(p, 0) == 0x7bff || h_at(p, 0) == 0x7bfe);
    assert_true(r[1] != 0.3f && fabsf(r[1]) < 0x1p-10);     /* 1.3 * 1024 lost 0.2 */
}

static void test_scale(void **state)
{
    /* 1e-6 is subnormal in fp16 (step 2^-24, ~6e-8); scaled by 2^16 it is normal, and the
     * relative error drops to 2^-11. */
    float g[4] = { 1e-6f, -3e-7f, 2.5e-6f, 1e-5f }, d[4];
    struct ts_codec h = codec("fp16");
    unsigned char p[8];
    size_t bytes;

    ts_codec_encode(&h, g, 4, 65536.0f, NULL, p, &bytes);
    ts_codec_decode(TS_CODEC_FP16, p, bytes, 4, d);
    for (int i = 0; i < 4; i++) {
        double back = (double)d[i] / 65536;

        assert_true(fabs(back - g[i]) <= fabs((double)g[i]) * 0x1p-11);
    }
    ts_codec_encode(&h, g, 4, 1.0f, NULL, p, &bytes);
    ts_codec_decode(TS_CODEC_FP16, p, bytes, 4, d);
    assert_true(fabs((double)d[1] - g[1]) > fabs((double)g[1]) * 0x1p-11);   /* unscaled */
}

/* ---- the shard side ---- */

static void expect_bad(unsigned enc, const void *p, size_t bytes, uint64_t n, const char *words)
{
    struct ts_err err = { 0 };

    if (ts_codec_check(enc, p, bytes, n, &err) != TS_EINVAL)
        fail_msg("encoding %u, %zu bytes, n %llu was accepted (want '%s')", enc, bytes,
                 (unsigned long long)n, words);
    if (!strstr(err.msg, words) || strncmp(err.msg, "payload: ", 9))
        fail_msg("message '%s' lacks '%s'", err.msg, words);
}

static void put_topk(unsigned char *p, uint32_t k, const uint32_t *idx)
{
    memcpy(p, &k, 4);
    memcpy(p + 4, idx, 4 * (size_t)k);
    memset(p + 4 + 4 * (size_t)k, 0, 4 * (size_t)k);
}

static void test_check(void **state)
{
    unsigned char p[256] = { 0 };
    struct ts_err err = { 0 };
    uint32_t ok[4] = { 2, 5, 17, 99 }, dup[4] = { 2, 5, 17, 17 }, down[4] = { 2, 17, 5, 9 },
             high[4] = { 2, 5, 17, 100 };

    /* Exact lengths for the dense encodings. */
    assert_int_equal(ts_codec_check(TS_CODEC_FP16, p, 20, 10, &err), TS_OK);
    assert_int_equal(ts_codec_check(TS_CODEC_BF16, p, 20, 10, &err), TS_OK);
    assert_int_equal(ts_codec_check(TS_CODEC_INT8, p, 14, 10, &err), TS_OK);
    assert_int_equal(ts_codec_check(TS_CODEC_NONE, p, 40, 10, &err), TS_OK);
    expect_bad(TS_CODEC_FP16, p, 19, 10, "fp16 of 10 elements is 20 bytes, got 19");
    expect_bad(TS_CODEC_BF16, p, 22, 10, "bf16 of 10 elements is 20 bytes, got 22");
    expect_bad(TS_CODEC_INT8, p, 10, 10, "int8 of 10 elements is 14 bytes, got 10");
    expect_bad(TS_CODEC_NONE, p, 39, 10, "raw f32 of 10 elements is 40 bytes, got 39");
    expect_bad(5, p, 40, 10, "encoding 5 is not a codec's");
    expect_bad(99, p, 40, 10, "encoding 99");

    /* TOPK. */
    put_topk(p, 4, ok);
    assert_int_equal(ts_codec_check(TS_CODEC_TOPK, p, 36, 100, &err), TS_OK);
    expect_bad(TS_CODEC_TOPK, p, 3, 100, "has no 4-byte count");
    expect_bad(TS_CODEC_TOPK, p, 35, 100, "count 4 needs 36 bytes (4 + 8 * count), got 35");
    expect_bad(TS_CODEC_TOPK, p, 44, 100, "count 4 needs 36 bytes");
    expect_bad(TS_CODEC_TOPK, p, 36, 3, "count 4 is above the 3 elements");
    expect_bad(TS_CODEC_TOPK, p, 36, 99, "topk index 99 at position 3 is not below n (99)");
    put_topk(p, 0, ok);
    expect_bad(TS_CODEC_TOPK, p, 4, 100, "count 0, want 1..100");
    assert_int_equal(ts_codec_check(TS_CODEC_TOPK, p, 4, 0, &err), TS_OK);   /* n = 0 */
    put_topk(p, 4, dup);
    expect_bad(TS_CODEC_TOPK, p, 36, 100, "topk index 17 at position 3 is not above the "
               "previous (17)");
    put_topk(p, 4, down);
    expect_bad(TS_CODEC_TOPK, p, 36, 100, "topk index 5 at position 2 is not above the "
               "previous (17)");
    put_topk(p, 4, high);
    expect_bad(TS_CODEC_TOPK, p, 36, 100, "index 100 at position 3 is not below n (100)");
    /* Non-finite values are not the check's business. */
    float inf = INFINITY;

    put_topk(p, 4, ok);
    memcpy(p + 4 + 16, &inf, 4);
    assert_int_equal(ts_codec_check(TS_CODEC_TOPK, p, 36, 100, &err), TS_OK);
    assert_int_equal(err.code, TS_OK);
}

/* acc[i] += decoded[i] * mul, bit for bit; TOPK touches only the listed indices. */
static void test_add(void **state)
{
    static const char *const specs[] = { "none", "fp16", "bf16", "int8", "topk:0.05" };
    static const float muls[] = { 1.0f, 0.25f, -3.0f };
    float g[N], acc[N], acc0[N], d[N];
    uint64_t seed = 5;

    for (size_t i = 0; i < N; i++)
        g[i] = rand_mag(&seed, -12, 2);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        struct ts_codec c = codec(specs[s]);
        size_t bytes;
        unsigned char *p = encode(specs[s], g, N, &bytes);

        ts_codec_decode(c.kind, p, bytes, N, d);
        for (size_t m = 0; m < sizeof(muls) / sizeof(muls[0]); m++) {
            size_t touched = 0;

            for (size_t i = 0; i < N; i++)
                acc0[i] = acc[i] = rand_mag(&seed, -6, 0);
            ts_codec_add(c.kind, p, bytes, N, muls[m], acc);
            for (size_t i = 0; i < N; i++) {
                float want = acc0[i] + d[i] * muls[m];

                touched += fbits(acc[i]) != fbits(acc0[i]);
                if (c.kind == TS_CODEC_TOPK && d[i] == 0)
                    want = acc0[i];
                if (fbits(acc[i]) != fbits(want))
                    fail_msg("%s mul %g: acc[%zu] = %a, want %a", specs[s], (double)muls[m],
                             i, (double)acc[i], (double)want);
            }
            if (c.kind == TS_CODEC_TOPK)
                assert_true(touched <= ts_codec_topk_k(&c, N));
        }
        free(p);
    }
}

/* Payloads sit at any alignment; n = 0 works. */
static void test_unaligned(void **state)
{
    static const char *const specs[] = { "none", "fp16", "bf16", "int8", "topk:0.1" };
    float g[101], d1[101], d2[101];
    unsigned char *buf = malloc(1024);
    uint64_t seed = 9;

    assert_non_null(buf);
    for (size_t i = 0; i < 101; i++)
        g[i] = rand_mag(&seed, -5, 5);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        struct ts_codec c = codec(specs[s]);
        struct ts_err err = { 0 };
        size_t b1, b2;

        ts_codec_encode(&c, g, 101, 1.0f, NULL, buf, &b1);
        ts_codec_decode(c.kind, buf, b1, 101, d1);
        ts_codec_encode(&c, g, 101, 1.0f, NULL, buf + 3, &b2);
        assert_int_equal(ts_codec_check(c.kind, buf + 3, b2, 101, &err), TS_OK);
        ts_codec_decode(c.kind, buf + 3, b2, 101, d2);
        assert_memory_equal(d1, d2, sizeof(d1));
        ts_codec_encode(&c, g, 0, 1.0f, NULL, buf + 1, &b2);
        assert_int_equal(b2, ts_codec_max_bytes(&c, 0));
        assert_int_equal(ts_codec_check(c.kind, buf + 1, b2, 0, &err), TS_OK);
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_topk),
        cmocka_unit_test(test_error_feedback),
        cmocka_unit_test(test_overflow_keeps_residual),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_unaligned),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
