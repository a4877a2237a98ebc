/* test_tensor_vec.c - lib/tensor's vectorised loops (exact sums, conversions, the optimizers,
 * the float sum) give the bits of plain scalar references, and the same errors, on random and
 * edge-case inputs. tests/CMakeLists.txt also builds it against lib/tensor without its
 * CPU-picked clones (test_tensor_vec_sse2) and without vectorisation (test_tensor_vec_scalar). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/internal.h"
#include "tensor/tensor.h"
#include "tensor_rng.h"

/* ---- the vector paths against portable scalar references ----
 * lib/tensor's bulk loops are vectorised (SSE2 and AVX2 clones, internal.h); these references
 * are the definitions written plainly, one element at a time and never vectorised, and the
 * library must give their bits on random and edge-case inputs, at every length around the
 * blocks of TS_LANES and at unaligned starts. */
#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_REF __attribute__((noinline, optimize("no-tree-vectorize")))
#else
#define SCALAR_REF __attribute__((noinline))
#endif

/* fixed(g), or -1 for a value exact mode refuses (*bad set). */
SCALAR_REF static int64_t ref_fixed(float g, bool *bad)
{
    double x = (double)g * 0x1p32;

    *bad = !(fabs(x) < 0x1p63);
    return *bad ? -1 : llrint(x);
}

/* acc += fixed(g) (or x when g is NULL), all or nothing: the first refused element, the first
 * overflowing one (when all convert), or -1 for success. */
SCALAR_REF static long ref_add(int64_t *acc, const int64_t *x, const float *g, size_t n,
                               bool *range)
{
    bool bad;

    *range = false;
    for (size_t i = 0; g && i < n; i++)
        if (ref_fixed(g[i], &bad), bad) {
            *range = true;
            return (long)i;
        }
    for (size_t i = 0; i < n; i++) {
        int64_t s, y = g ? ref_fixed(g[i], &bad) : x[i];

        if (__builtin_add_overflow(acc[i], y, &s))
            return (long)i;
    }
    for (size_t i = 0; i < n; i++)
        acc[i] += g ? ref_fixed(g[i], &bad) : x[i];
    return -1;
}

SCALAR_REF static float ref_to_f32(int64_t a, double div)
{
    return (float)((double)a * 0x1p-32 / div);
}

/* The optimizers of optim.c's header comment, element by element. */
SCALAR_REF static void ref_optim(const struct ts_optim_cfg *c, uint64_t step, float *p,
                                 float *st, const float *grad, size_t n)
{
    double b1t = 1.0, b2t = 1.0, b1 = c->beta1, b2 = c->beta2;

    for (uint64_t t = step ? step : 1; t; t >>= 1, b1 *= b1, b2 *= b2)
        if (t & 1) {
            b1t *= b1;
            b2t *= b2;
        }
    for (size_t i = 0; i < n; i++) {
        bool decoupled = c->kind == TS_OPTIM_ADAMW;
        float g = c->weight_decay != 0.0f && !decoupled ? grad[i] + c->weight_decay * p[i]
                                                        : grad[i];
        float *m = &st[i], *v = &st[n + i];

        if (decoupled)
            p[i] *= (float)(1.0 - (double)c->lr * (double)c->weight_decay);
        if (c->kind == TS_OPTIM_SGD) {
            p[i] -= c->lr * g;
        } else if (c->kind == TS_OPTIM_MOMENTUM) {
            *m = c->momentum * *m + g;
            p[i] -= c->lr * *m;
        } else if (c->kind == TS_OPTIM_NESTEROV) {
            *m = c->momentum * *m + g;
            p[i] -= c->lr * (g + c->momentum * *m);
        } else if (c->kind == TS_OPTIM_ADAGRAD) {
            *m = *m + g * g;
            p[i] -= c->lr * (g / (sqrtf(*m) + c->eps));
        } else {
            float bc1 = (float)(1.0 - b1t), bc2 = (float)(1.0 - b2t);

            *m = c->beta1 * *m + (1.0f - c->beta1) * g;
            *v = c->beta2 * *v + (1.0f - c->beta2) * g * g;
            p[i] -= c->lr * (*m / bc1) / (sqrtf(*v / bc2) + c->eps);
        }
    }
}

/* A float from a mix of the cases that matter: ordinary gradients, signed zeros, subnormals,
 * rounding ties of the fixed-point conversion, values at the edge of its range. */
static float edge_float(uint64_t *s)
{
    static const float special[] = {
        0.0f, -0.0f, 1e-45f, -1e-45f, 0x1p-149f * 12345, FLT_MIN, -FLT_MIN, 0x1p-33f,
        -0x1p-33f, 0x3p-33f, -0x5p-33f, 0x1.000002p-10f, 0x1.fffffep30f, -0x1.fffffep30f,
        0x1p30f, -0x1p29f, 1.0f, -1.5f,
    };
    uint64_t r = rng_next(s) % 4;

    if (r == 0)
        return special[rng_next(s) % (sizeof(special) / sizeof(special[0]))];
    if (r == 1)   /* any bit pattern whose magnitude is below 2^31 */
        for (;;) {
            uint32_t u = (uint32_t)rng_next(s);
            float f;

            memcpy(&f, &u, sizeof(f));
            if (fabsf(f) < 0x1p31f)
                return f;
        }
    return rand_grad(s);
}

static bool same_float(float a, float b)
{
    return isnan(a) ? isnan(b) : !memcmp(&a, &b, sizeof(a));
}

/* Conversions and sums at lengths 0..67 and 1003, at offsets 0..3 into the buffers, on
 * accumulators that are either small or near the int64 edge (sums that just fit). */
static void test_vec_exact(void **state)
{
    enum { MAXN = 1003 + 3 };
    static float g[MAXN], f32a[MAXN], f32b[MAXN];
    static int64_t acc[MAXN], ref[MAXN], fx[MAXN], x[MAXN];
    static float out[MAXN];
    /* powers of two take a multiplication instead of the division (exact.c) */
    static const double divs[] = { 1, 2, 3, 64, 96, 1024, 0.5, 1e6 };
    uint64_t s = 11;
    bool range, bad;

    for (size_t n = 0; n <= 1003; n = n == 67 ? 1003 : n + 1) {
        size_t o = n % 4;

        for (size_t i = 0; i < n + o; i++) {
            g[i] = edge_float(&s);
            acc[i] = ref[i] = rng_next(&s) % 3 ? (int64_t)rng_next(&s) >> 2
                                               : (int64_t)rng_next(&s) >> 20;
            x[i] = (int64_t)rng_next(&s) >> 2;
            f32a[i] = edge_float(&s);
            f32b[i] = f32a[i];
        }
        assert_int_equal(ts_fixed_from_f32(g + o, n, fx + o, NULL), TS_OK);
        for (size_t i = 0; i < n; i++)
            if (fx[o + i] != ref_fixed(g[o + i], &bad))
                fail_msg("n %zu: fixed(%a) = %lld, want %lld", n, (double)g[o + i],
                         (long long)fx[o + i], (long long)ref_fixed(g[o + i], &bad));
        assert_int_equal(ref_add(ref + o, NULL, g + o, n, &range) < 0,
                         ts_fixed_add_f32(acc + o, g + o, n, NULL) == TS_OK);
        assert_memory_equal(acc, ref, (n + o) * sizeof(int64_t));
        assert_int_equal(ref_add(ref + o, x + o, NULL, n, &range) < 0,
                         ts_fixed_add(acc + o, x + o, n, NULL) == TS_OK);
        assert_memory_equal(acc, ref, (n + o) * sizeof(int64_t));
        for (size_t di = 0; di < sizeof(divs) / sizeof(divs[0]); di++) {
            double d = divs[di];

            ts_fixed_to_f32(acc + o, n, d, out + o);
            for (size_t i = 0; i < n; i++)
                if (!same_float(out[o + i], ref_to_f32(acc[o + i], d)))
                    fail_msg("n %zu: to_f32(%lld) / %g = %a, want %a", n, (long long)acc[o + i],
                             d, (double)out[o + i], (double)ref_to_f32(acc[o + i], d));
        }
        ts_f32_add(f32a + o, g + o, n);
        for (size_t i = 0; i < n; i++)
            if (!same_float(f32a[o + i], f32b[o + i] + g[o + i]))
                fail_msg("n %zu: f32_add element %zu", n, i);
    }
}

/* Refused values and overflows in random places: the error and the element it names are the
 * reference's, and the accumulator is unchanged. */
static void test_vec_exact_errors(void **state)
{
    static const float badv[] = { NAN, -NAN, INFINITY, -INFINITY, 0x1p31f, -0x1p31f, FLT_MAX };
    enum { MAXN = 300 };
    static float g[MAXN];
    static int64_t acc[MAXN], copy[MAXN], x[MAXN], out[MAXN];
    struct ts_err err;
    uint64_t s = 12;
    char want[48];
    bool range;

    for (int trial = 0; trial < 400; trial++) {
        size_t n = 1 + rng_next(&s) % MAXN, k = rng_next(&s) % n;
        long at;

        for (size_t i = 0; i < n; i++) {
            g[i] = rand_grad(&s);
            acc[i] = copy[i] = (int64_t)rng_next(&s) >> 3;
            x[i] = (int64_t)rng_next(&s) >> 3;
        }
        if (trial % 2) {                         /* a refused value, maybe two */
            g[k] = badv[rng_next(&s) % (sizeof(badv) / sizeof(badv[0]))];
            g[rng_next(&s) % n] = badv[rng_next(&s) % (sizeof(badv) / sizeof(badv[0]))];
        } else {                                 /* sums that leave the range */
            acc[k] = copy[k] = INT64_MAX - 3;
            x[k] = 4;
            g[k] = 1.0f;
            if (rng_next(&s) & 1) {
                size_t k2 = rng_next(&s) % n;

                acc[k2] = copy[k2] = INT64_MIN + 2;
                x[k2] = -3;
                g[k2] = -1.0f;
            }
        }
        memcpy(out, copy, n * sizeof(int64_t));
        at = ref_add(out, NULL, g, n, &range);
        memset(&err, 0, sizeof(err));
        if (at < 0) {
            assert_int_equal(ts_fixed_add_f32(acc, g, n, NULL), TS_OK);
            memcpy(acc, copy, n * sizeof(int64_t));
        } else {
            snprintf(want, sizeof(want), "element %ld", at);
            assert_int_equal(ts_fixed_add_f32(acc, g, n, &err), TS_EINVAL);
            if (!strstr(err.msg, want))
                fail_msg("trial %d: '%s' lacks '%s'", trial, err.msg, want);
            assert_memory_equal(acc, copy, n * sizeof(int64_t));
            if (range) {
                memset(&err, 0, sizeof(err));
                assert_int_equal(ts_fixed_from_f32(g, n, out, &err), TS_EINVAL);
                assert_non_null(strstr(err.msg, want));
            }
        }
        memcpy(out, copy, n * sizeof(int64_t));
        at = ref_add(out, x, NULL, n, &range);
        memset(&err, 0, sizeof(err));
        assert_int_equal(ts_fixed_add(acc, x, n, &err), at < 0 ? TS_OK : TS_EINVAL);
        if (at >= 0) {
            snprintf(want, sizeof(want), "element %ld:", at);
            assert_non_null(strstr(err.msg, want));
            assert_memory_equal(acc, copy, n * sizeof(int64_t));
        }
    }
}

/* Float pushes of exact jobs: ts_fixed_hold_f32 copies and judges (range, bound) as the
 * reference does, ts_fixed_check_f32 judges the same; below the bound of W pushes, a pair
 * converted at once, and sums of up to W terms as exact doubles (ts_fixed_pair_f64,
 * ts_fixed_add_f32_f64, ts_fixed_f64_to_f32, ts_fixed_f64_to_i64) give the bits of the int64
 * sum, at every length around the blocks, at unaligned starts, with sums up to the edges and
 * rounding ties; refused values are named as ts_fixed_from_f32 names them. */
static void test_vec_float_pushes(void **state)
{
    static const float badv[] = { NAN, -NAN, INFINITY, -INFINITY, 0x1p31f, -0x1p31f, FLT_MAX };
    static const double divs[] = { 1, 2, 3, 64, 96, 1024, 0.5, 1e6 };
    static const uint32_t ws[] = { 2, 3, 4, 5, 8, 9, 1024 };
    enum { MAXN = 1003 + 3, MAXW = 9 };
    static float g[MAXW][MAXN], held[MAXN], out[MAXN];
    static double accd[MAXN];
    static int64_t ref[MAXN], conv[MAXN];
    struct ts_err err;
    uint64_t s = 13;
    bool bad, below, below2;
    char want[48];

    assert_true(ts_fixed_f32_bound(1) == 0x1p30f && ts_fixed_f32_bound(2) == 0x1p30f);
    assert_true(ts_fixed_f32_bound(3) == 0x1p19f && ts_fixed_f32_bound(4) == 0x1p19f);
    assert_true(ts_fixed_f32_bound(5) == 0x1p18f && ts_fixed_f32_bound(1024) == 0x1p11f);
    for (size_t wi = 0; wi < sizeof(ws) / sizeof(ws[0]); wi++) {
        uint32_t w = ws[wi], terms = w < MAXW ? w : MAXW;
        float bound = ts_fixed_f32_bound(w), edge = nextafterf(bound, 0.0f);

        for (size_t n = 0; n <= 1003; n = n == 67 ? 1003 : n + 1) {
            size_t o = n % 4;
            bool ref_below = true;

            for (uint32_t t = 0; t < terms; t++)
                for (size_t i = 0; i < n + o; i++)   /* term 0 may exceed the bound */
                    g[t][i] = rng_next(&s) % 6 ? edge_float(&s) : (rng_next(&s) & 1 ? -edge
                                                                                   : edge);
            for (size_t i = o; i < n + o; i++)
                ref_below &= fabsf(g[0][i]) < bound;
            assert_int_equal(ts_fixed_hold_f32(g[0] + o, n, bound, held + o, &below, NULL),
                             TS_OK);
            assert_int_equal(below, ref_below);
            assert_memory_equal(held + o, g[0] + o, n * sizeof(float));
            assert_int_equal(ts_fixed_check_f32(g[0] + o, n, bound, &below2, NULL), TS_OK);
            assert_int_equal(below2, ref_below);
            for (uint32_t t = 0; t < terms; t++)     /* now every term below the bound */
                for (size_t i = 0; i < n + o; i++)
                    if (!(fabsf(g[t][i]) < bound))
                        g[t][i] = g[t][i] < 0 ? -edge : edge;
            for (size_t i = 0; i < n; i++) {
                ref[i] = 0;
                for (uint32_t t = 0; t < terms; t++)
                    ref[i] += ref_fixed(g[t][o + i], &bad);
            }
            if (w == 2)
                for (size_t di = 0; di < sizeof(divs) / sizeof(divs[0]); di++) {
                    ts_fixed_pair_to_f32(g[0] + o, g[1] + o, n, divs[di], out + o);
                    for (size_t i = 0; i < n; i++)
                        if (!same_float(out[o + i], ref_to_f32(ref[i], divs[di])))
                            fail_msg("n %zu: pair(%a, %a) / %g = %a, want %a", n,
                                     (double)g[0][o + i], (double)g[1][o + i], divs[di],
                                     (double)out[o + i], (double)ref_to_f32(ref[i], divs[di]));
                }
            if (w == 2)
                continue;     /* a pair's double sum rounds: not exact, never kept (part.c) */
            ts_fixed_pair_f64(g[0] + o, g[1] + o, n, accd + o);
            for (uint32_t t = 2; t + 1 < terms; t++)
                ts_fixed_add_f32_f64(accd + o, g[t] + o, n);
            for (size_t di = 0; di < sizeof(divs) / sizeof(divs[0]); di++) {
                ts_fixed_f64_to_f32(accd + o, g[terms - 1] + o, n, divs[di], out + o);
                for (size_t i = 0; i < n; i++)
                    if (!same_float(out[o + i], ref_to_f32(ref[i], divs[di])))
                        fail_msg("w %u n %zu: sum / %g = %a, want %a", w, n, divs[di],
                                 (double)out[o + i], (double)ref_to_f32(ref[i], divs[di]));
            }
            ts_fixed_add_f32_f64(accd + o, g[terms - 1] + o, n);
            memcpy(conv, accd + o, n * sizeof(double));
            ts_fixed_f64_to_i64(conv, n);
            assert_memory_equal(conv, ref, n * sizeof(int64_t));
        }
    }
    for (int trial = 0; trial < 300; trial++) {
        size_t n = 1 + rng_next(&s) % 300, k = rng_next(&s) % n, k2 = rng_next(&s) % n;

        for (size_t i = 0; i < n; i++)
            g[0][i] = rand_grad(&s);
        g[0][k] = badv[rng_next(&s) % (sizeof(badv) / sizeof(badv[0]))];
        g[0][k2] = badv[rng_next(&s) % (sizeof(badv) / sizeof(badv[0]))];
        snprintf(want, sizeof(want), "element %zu ", k < k2 ? k : k2);
        memset(&err, 0, sizeof(err));
        assert_int_equal(ts_fixed_hold_f32(g[0], n, 0x1p30f, held, &below, &err), TS_EINVAL);
        if (!strstr(err.msg, want))
            fail_msg("trial %d: '%s' lacks '%s'", trial, err.msg, want);
        memset(&err, 0, sizeof(err));
        assert_int_equal(ts_fixed_check_f32(g[0], n, 0x1p19f, &below, &err), TS_EINVAL);
        assert_non_null(strstr(err.msg, want));
    }
}

/* Every optimizer, with and without weight decay, for a few steps, at lengths around the
 * blocks, whole and through ts_optim_apply_range at an odd offset; values include zeros,
 * subnormals, infinities and large magnitudes. NaNs only need to stay NaN: the sign and
 * payload of a NaN made from two NaNs depend on operand order, which the compiler may swap
 * for a commutative operation (exact mode never feeds the optimizer a NaN: sums refuse it). */
static void test_vec_optim(void **state)
{
    static const char *const specs[] = {
        "sgd:lr=0.1", "sgd:lr=0.1,weight_decay=0.01", "momentum:lr=0.05",
        "momentum:lr=0.05,momentum=0.5,weight_decay=0.001", "adam:lr=0.001",
        "adam:lr=0.01,beta1=0.8,beta2=0.99,eps=1e-6,weight_decay=0.1",
        "nesterov:lr=0.05,momentum=0.9,weight_decay=0.001", "adamw:lr=0.001",
        "adamw:lr=0.01,beta1=0.8,weight_decay=0.1", "adagrad:lr=0.1",
        "adagrad:lr=0.05,eps=1e-6,weight_decay=0.01",
    };
    enum { MAXN = 1003 };
    static float p[MAXN], st[2 * MAXN], g[MAXN], rp[MAXN], rst[2 * MAXN];
    uint64_t s = 13;

    for (size_t k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
        struct ts_optim_cfg c;

        assert_int_equal(ts_optim_parse(specs[k], &c, NULL), TS_OK);
        for (size_t n = 1; n <= MAXN; n = n == 41 ? MAXN : n + 1) {
            size_t off = n > 8 ? 3 : 0, len = n - off - (n > 8 ? 2 : 0);

            for (size_t i = 0; i < n; i++) {
                uint64_t r = rng_next(&s) % 16;

                p[i] = rp[i] = r == 0 ? INFINITY : r == 1 ? -0.0f : r == 2 ? 1e-40f
                               : r == 3 ? 3e38f : (float)(rng_unit(&s) * 2 - 1);
                st[i] = rst[i] = 0;
                st[n + i] = rst[n + i] = 0;
            }
            for (uint64_t step = 1; step <= 3; step++) {
                for (size_t i = 0; i < n; i++)
                    g[i] = edge_float(&s) * (rng_next(&s) % 2 ? 1.0f : 1e-30f);
                ts_optim_apply_range(&c, step, p, st, n, off, g + off, len);
                ref_optim(&c, step, rp + off, rst + off, g + off, len);
                /* ref_optim's state is [m of the range, v of the range]: lay it back out. */
                for (size_t i = 0; i < len; i++) {
                    float m = rst[off + i], v = rst[off + len + i];

                    if (!same_float(p[off + i], rp[off + i]) || !same_float(st[off + i], m) ||
                        (c.kind == TS_OPTIM_ADAM && !same_float(st[n + off + i], v)))
                        fail_msg("%s n %zu step %llu element %zu: p %a m %a v %a, want %a "
                                 "%a %a", specs[k], n, (unsigned long long)step, off + i,
                                 (double)p[off + i], (double)st[off + i],
                                 (double)st[n + off + i], (double)rp[off + i], (double)m,
                                 (double)v);
                }
            }
        }
    }
}

static void test_f32_add(void **state)
{
    enum { N = 21 };
    float a[N], b[N];

    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f;
    }
    ts_f32_add(a, b, N);
    for (int i = 0; i < N; i++)
        assert_true(a[i] == (float)i + 0.5f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_add),
        cmocka_unit_test(test_vec_exact),
        cmocka_unit_test(test_vec_exact_errors),
        cmocka_unit_test(test_vec_float_pushes),
        cmocka_unit_test(test_vec_optim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
