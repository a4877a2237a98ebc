/* test_verify.c - lib/verify: ULP distance at every edge (+0/-0, denormals, NaN, +-Inf,
 * adjacent floats, opposite signs); bit comparison reports one differing element with the
 * right index, values, block and hashes, folds pieces like a whole, flags NaN pairs; cosine's
 * fixed points; .npy round trips byte-identical to numpy.save and every malformed header
 * refused with the right status naming the file; KS, kstwo, smirnov, JS, mean/std,
 * histogram and PSI on cases whose answers scipy/numpy gave (the wide comparison against
 * scipy is tests/integration/test_verify_scipy.py). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "verify/internal.h"
#include "verify/verify.h"

/* |got - want| <= tol, printing both on failure (this cmocka has no assert_double_equal). */
#define assert_near(got, want, tol) near_((got), (want), (tol), #got)
static void near_(double got, double want, double tol, const char *what)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("%s = %.17g, want %.17g within %g", what, got, want, tol);
}

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double dbits(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* ---- ULP ---- */

static void ulp_both(float a, float b, uint64_t want)
{
    assert_true(ts_verify_ulp_f32(a, b) == want);
    assert_true(ts_verify_ulp_f32(b, a) == want);
}

static void test_ulp_f32(void **state)
{
    float dmin = fbits(1), dmax = fbits(0x007fffff), qnan = fbits(0x7fc00000);

    ulp_both(1.5f, 1.5f, 0);
    ulp_both(0.0f, -0.0f, 0);                              /* +0/-0: the same point */
    ulp_both(1.0f, nextafterf(1.0f, 2.0f), 1);             /* adjacent */
    ulp_both(1.0f, nextafterf(1.0f, 0.0f), 1);             /* adjacent, below a power of 2 */
    ulp_both(0.0f, dmin, 1);                               /* denormals */
    ulp_both(-0.0f, dmin, 1);
    ulp_both(-dmin, dmin, 2);                              /* across zero: one step each */
    ulp_both(dmax, FLT_MIN, 1);                            /* denormal to normal */
    ulp_both(dmin, dmax, 0x007ffffe);
    ulp_both(FLT_MAX, INFINITY, 1);                        /* infinities end the line */
    ulp_both(-FLT_MAX, -INFINITY, 1);
    ulp_both(-INFINITY, INFINITY, 2ull * 0x7f800000);
    ulp_both(-1.0f, 1.0f, 2ull * 0x3f800000);              /* opposite signs */
    ulp_both(-2.0f, 1.0f, 0x40000000ull + 0x3f800000ull);
    ulp_both(qnan, qnan, 0);                               /* same NaN bits: equal */
    ulp_both(fbits(0xffc00001), fbits(0xffc00001), 0);
    ulp_both(qnan, 1.0f, TS_VERIFY_ULP_NAN);               /* NaN vs a number */
    ulp_both(qnan, INFINITY, TS_VERIFY_ULP_NAN);
    ulp_both(qnan, fbits(0x7fc00001), TS_VERIFY_ULP_NAN);  /* different payloads */
    ulp_both(qnan, fbits(0xffc00000), TS_VERIFY_ULP_NAN);  /* different sign */
}

static void test_ulp_f64(void **state)
{
    double dmin = dbits(1);

    assert_true(ts_verify_ulp_f64(0.0, -0.0) == 0);
    assert_true(ts_verify_ulp_f64(1.0, nextafter(1.0, 2.0)) == 1);
    assert_true(ts_verify_ulp_f64(-dmin, dmin) == 2);
    assert_true(ts_verify_ulp_f64(DBL_MAX, INFINITY) == 1);
    assert_true(ts_verify_ulp_f64(-INFINITY, INFINITY) == 2 * 0x7ff0000000000000ull);
    assert_true(ts_verify_ulp_f64(-1.0, 1.0) == 2 * 0x3ff0000000000000ull);
    assert_true(ts_verify_ulp_f64(NAN, NAN) == 0);
    assert_true(ts_verify_ulp_f64(NAN, 0.0) == TS_VERIFY_ULP_NAN);
    assert_true(ts_verify_ulp_f64(-INFINITY, NAN) == TS_VERIFY_ULP_NAN);
}

/* ---- bit comparison ---- */

#define BN 1000 /* elements; with 256-float blocks: 4 blocks, the last short */

static void sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned len = 0;
    assert_int_equal(EVP_Digest(p, n, out, &len, EVP_sha256(), NULL), 1);
}

static void test_bits_identical(void **state)
{
    struct ts_verify_bits_opts o = { .block_bytes = 1024, .sha256 = true };
    struct ts_verify_block bk[4];
    struct ts_verify_bits r;
    float *a = malloc(BN * sizeof(float)), *b = malloc(BN * sizeof(float));
    uint8_t want[32];

    for (int i = 0; i < BN; i++)
        a[i] = b[i] = (float)i * 0.25f - 7.0f;
    a[5] = b[5] = fbits(0x7fc00123); /* a NaN with equal bits is equal */
    assert_int_equal(ts_verify_nblocks(BN, &o), 4);
    assert_int_equal(ts_verify_bits_compare(a, b, BN, &o, &r, bk, NULL), TS_OK);
    assert_true(r.n == BN && r.ndiff == 0 && r.nnan == 0 && !r.has_diff);
    assert_true(r.nblocks == 4 && r.nblocks_diff == 0 && r.max_ulp == 0 && r.max_abs == 0);
    for (int k = 0; k < 4; k++) {
        size_t m = k < 3 ? 256 : BN - 768;
        assert_true(bk[k].first == (uint64_t)k * 256 && bk[k].n == m && bk[k].ndiff == 0);
        sha256(a + k * 256, m * 4, want);
        assert_memory_equal(bk[k].sha_a, want, 32);
        assert_memory_equal(bk[k].sha_b, want, 32);
    }
    free(a);
    free(b);
}

static void test_bits_one_diff(void **state)
{
    struct ts_verify_bits_opts o = { .block_bytes = 1024, .sha256 = true };
    struct ts_verify_block bk[4];
    struct ts_verify_bits r;
    float *a = malloc(BN * sizeof(float)), *b = malloc(BN * sizeof(float));
    uint8_t want[32];

    for (int i = 0; i < BN; i++)
        a[i] = b[i] = sinf((float)i);
    b[517] = nextafterf(nextafterf(a[517], 9.0f), 9.0f); /* 2 ULP up */
    assert_int_equal(ts_verify_bits_compare(a, b, BN, &o, &r, bk, NULL), TS_OK);
    assert_true(r.ndiff == 1 && r.nnan == 0 && r.has_diff);
    assert_true(r.first_index == 517);
    assert_true(r.first_a == (double)a[517] && r.first_b == (double)b[517]);
    assert_true(r.max_ulp == 2 && r.max_ulp_index == 517);
    assert_true(r.max_abs == fabs((double)b[517] - (double)a[517]) && r.max_abs > 0);
    assert_true(r.max_rel == r.max_abs / fmax(fabs((double)a[517]), fabs((double)b[517])));
    assert_true(r.nblocks == 4 && r.nblocks_diff == 1);
    for (int k = 0; k < 4; k++) {
        assert_true(bk[k].ndiff == (k == 2 ? 1u : 0u));
        assert_true(bk[k].max_ulp == (k == 2 ? 2u : 0u));
        assert_int_equal(memcmp(bk[k].sha_a, bk[k].sha_b, 32) == 0, k != 2);
    }
    sha256(b + 512, 256 * 4, want);
    assert_memory_equal(bk[2].sha_b, want, 32);

    /* The same fed in pieces of whole blocks folds to the same result. */
    struct ts_verify_bits p;
    ts_verify_bits_init(&p);
    assert_int_equal(ts_verify_bits_update(&p, a, b, 512, &o, NULL, NULL), TS_OK);
    assert_int_equal(ts_verify_bits_update(&p, a + 512, b + 512, BN - 512, &o, bk, NULL),
                     TS_OK);
    assert_true(p.n == BN && p.ndiff == 1 && p.first_index == 517 && p.max_ulp_index == 517);
    assert_true(bk[0].first == 512 && bk[0].ndiff == 1);
    free(a);
    free(b);
}

static void test_bits_special(void **state)
{
    float a[6] = { 0.0f, 1.0f, 2.0f, INFINITY, -3.0f, 5.0f };
    float b[6] = { -0.0f, fbits(0x7fc00000), 2.0f, FLT_MAX, 3.0f, 5.0f };
    struct ts_verify_bits r;
    struct ts_err err = { 0 };
    struct ts_verify_bits_opts bad = { .block_bytes = 6 };

    assert_int_equal(ts_verify_bits_compare(a, b, 6, NULL, &r, NULL, NULL), TS_OK);
    assert_true(r.ndiff == 4 && r.nnan == 1);             /* -0, NaN, FLT_MAX, 3 */
    assert_true(r.first_index == 0 && r.first_a == 0.0 && signbit(r.first_b));
    assert_true(r.max_ulp == 2ull * 0x40400000);          /* -3 to 3 */
    assert_true(r.max_ulp_index == 4);
    assert_true(isinf(r.max_abs) && isinf(r.max_rel));    /* Inf vs FLT_MAX */

    /* Only -0 vs +0: differs in bits, 0 ULP, 0 abs. */
    assert_int_equal(ts_verify_bits_compare(a, b, 1, NULL, &r, NULL, NULL), TS_OK);
    assert_true(r.ndiff == 1 && r.max_ulp == 0 && r.max_abs == 0 && r.max_rel == 0);

    /* f64 */
    double da[3] = { 1.0, 2.0, -4.0 }, db[3] = { 1.0, nextafter(2.0, 3.0), -4.0 };
    struct ts_verify_bits_opts o64 = { .dtype = TS_VERIFY_F64 };
    assert_int_equal(ts_verify_bits_compare(da, db, 3, &o64, &r, NULL, NULL), TS_OK);
    assert_true(r.ndiff == 1 && r.first_index == 1 && r.max_ulp == 1 && r.first_b == db[1]);

    assert_int_equal(ts_verify_bits_compare(a, b, 6, &bad, &r, NULL, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "block_bytes"));
}

/* The dispatching kernel (AVX2 on CPUs that have it) must give the portable kernel's figures
 * exactly, on bit patterns with NaNs, infinities, denormals and zeros of both signs. */
static void test_walk_kernels_agree(void **state)
{
    static const uint32_t special[] = { 0x00000000, 0x80000000, 0x00000001, 0x807fffff,
                                        0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
                                        0x7f7fffff, 0x3f800000, 0xbf800000, 0x00800000 };
    uint32_t a[1031], b[1031];
    uint64_t s = 12345;

    for (int round = 0; round < 200; round++) {
        size_t n = (size_t)(round * 37 % 1031) + 1;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(s >> 32);
            a[i] = (r & 7) == 0 ? special[(r >> 3) % 12] : r;
            switch ((r >> 8) % 4) {
            case 0: b[i] = a[i]; break;                                   /* equal */
            case 1: b[i] = a[i] + ((r >> 12) & 3); break;                 /* a few ULP */
            case 2: b[i] = special[(r >> 16) % 12]; break;
            default: b[i] = (uint32_t)(s >> 7); break;                    /* anything */
            }
            if (round % 2) { /* no infinities: max_rel must then come from the lanes */
                a[i] = (a[i] & 0x7fffffffu) == 0x7f800000u ? 0x80000000u : a[i];
                b[i] = (b[i] & 0x7fffffffu) == 0x7f800000u ? 0x80000000u : b[i];
            }
        }
        struct ts__verify_walk w1 = { 0 }, w2 = { 0 };
        ts__verify_walk32(a, b, n, &w1);
        ts__verify_walk32_scalar(a, b, n, &w2);
        assert_true(w1.ndiff == w2.ndiff && w1.nnan == w2.nnan && w1.max_ulp == w2.max_ulp);
        assert_memory_equal(&w1.max_abs, &w2.max_abs, sizeof(double));
        assert_memory_equal(&w1.max_rel, &w2.max_rel, sizeof(double));
        assert_true(round % 2 == 0 || isfinite(w1.max_rel));
    }
}

/* ---- cosine ---- */

static void test_cosine(void **state)
{
    float a[13], b[13], z[13] = { 0 };
    double da[4] = { 1, 2, 3, 4 }, db[4] = { -1, -2, -3, -4 };

    for (int i = 0; i < 13; i++) {
        a[i] = (float)(i + 1) * 0.37f - 2.0f;
        b[i] = -a[i];
    }
    assert_true(ts_verify_cosine_f32(a, a, 13) == 1.0);
    assert_true(ts_verify_cosine_f32(a, b, 13) == -1.0);
    assert_true(ts_verify_cosine_f32(z, z, 13) == 1.0);   /* both zero: identical */
    assert_true(ts_verify_cosine_f32(a, z, 13) == 0.0);
    assert_true(ts_verify_cosine_f32(a, a, 0) == 1.0);
    float x[2] = { 1, 0 }, y[2] = { 0, 1 };
    assert_true(ts_verify_cosine_f32(x, y, 2) == 0.0);
    b[3] = NAN;
    assert_true(isnan(ts_verify_cosine_f32(a, b, 13)));
    b[3] = INFINITY;
    assert_true(isnan(ts_verify_cosine_f32(a, b, 13)));
    assert_true(ts_verify_cosine_f64(da, db, 4) == -1.0);
    assert_true(ts_verify_cosine_f64(da, da, 4) == 1.0);
}

/* ---- npy ---- */

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "/tmp/test_verify_%d_%s", (int)getpid(), name);
}

static void test_npy_roundtrip(void **state)
{
    char path[128];
    uint64_t shapes[][3] = { { 0 }, { 5 }, { 2, 3, 4 } };
    int ndims[] = { 0, 1, 3 };
    struct ts_err err = { 0 };

    tmp_path(path, sizeof(path), "rt.npy");
    for (int s = 0; s < 3; s++)
        for (int dt = TS_VERIFY_F32; dt <= TS_VERIFY_F64; dt++) {
            struct ts_verify_array a = { .dtype = dt, .ndim = ndims[s], .n = 1 }, b;
            size_t es = ts_verify_dtype_size(dt);
            for (int i = 0; i < ndims[s]; i++)
                a.n *= (a.shape[i] = shapes[s][i]);
            a.data = malloc(a.n * es);
            for (uint64_t i = 0; i < a.n * es; i++)
                ((unsigned char *)a.data)[i] = (unsigned char)(i * 37 + 11);
            assert_int_equal(ts_verify_npy_write(path, &a, &err), TS_OK);
            assert_int_equal(ts_verify_npy_read(path, &b, &err), TS_OK);
            assert_true(b.dtype == a.dtype && b.ndim == a.ndim && b.n == a.n);
            assert_memory_equal(b.shape, a.shape, sizeof(uint64_t) * (size_t)a.ndim);
            assert_memory_equal(b.data, a.data, a.n * es);
            ts_verify_array_fini(&a);
            ts_verify_array_fini(&b);
        }

    /* The header numpy.save writes for shape (2, 3, 4) '<f8', byte for byte. */
    FILE *f = fopen(path, "rb");
    char head[128];
    const char *want = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }";
    assert_non_null(f);
    assert_int_equal(fread(head, 1, sizeof(head), f), sizeof(head));
    fclose(f);
    assert_memory_equal(head, "\x93NUMPY\x01\x00\x76\x00", 10);   /* header len 118 */
    assert_memory_equal(head + 10, want, strlen(want));
    assert_true(head[127] == '\n' && head[126] == ' ');
    unlink(path);

    /* Raw float32. */
    float x[3] = { 1.5f, -0.0f, NAN };
    struct ts_verify_array r;
    assert_int_equal(ts_verify_raw_write_f32(path, x, 3, &err), TS_OK);
    assert_int_equal(ts_verify_raw_read_f32(path, &r, &err), TS_OK);
    assert_true(r.n == 3 && r.ndim == 1 && r.dtype == TS_VERIFY_F32);
    assert_memory_equal(r.data, x, sizeof(x));
    ts_verify_array_fini(&r);
    f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    assert_int_equal(ts_verify_raw_read_f32(path, &r, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
    ts_err_clear(&err);
    assert_int_equal(ts_verify_npy_read("/nonexistent/x.npy", &r, &err), TS_ENOTFOUND);
}

/* Builds a v1.0 .npy image with the given dict and data bytes. */
static size_t image(char *buf, const char *dict, size_t data)
{
    size_t hl = strlen(dict);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, hl);
    memset(buf + 10 + hl, 0, data);
    return 10 + hl + data;
}

static void expect(const char *dict, size_t data, ts_status code, const char *words)
{
    char buf[512];
    size_t len = image(buf, dict, data);
    struct ts_verify_array a;
    struct ts_err err = { 0 };

    assert_int_equal(ts_verify_npy_parse(buf, len, "m.npy", &a, &err), code);
    if (code == TS_OK) {
        ts_verify_array_fini(&a);
        return;
    }
    assert_non_null(strstr(err.msg, "m.npy"));
    if (!strstr(err.msg, words))
        fail_msg("want '%s' in '%s'", words, err.msg);
}

static void test_npy_malformed(void **state)
{
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";

    expect(ok, 24, TS_OK, NULL);
    expect("{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(3L,)}", 24, TS_OK, NULL);
    expect("{'shape': (), 'descr': '|f4', 'fortran_order': False}", 4, TS_OK, NULL);
    expect(ok, 20, TS_ECORRUPT, "truncated");
    expect(ok, 28, TS_ECORRUPT, "trailing");
    expect("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, TS_EINVAL,
           "fortran_order is True");
    expect("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", 24, TS_EINVAL,
           "big-endian");
    expect("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", 24, TS_EINVAL,
           "'<i4' not supported");
    expect("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", 24,
           TS_EINVAL, "structured");
    expect("{'descr': '<f4', 'shape': (6,), }", 24, TS_ECORRUPT, "lacks 'fortran_order'");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 24,
           TS_ECORRUPT, "unknown");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", 24, TS_ECORRUPT,
           "1-tuple");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", 24, TS_ECORRUPT,
           "non-negative");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", 24, TS_ECORRUPT,
           "after the dict");
    expect("{'descr': '<f4', 'fortran_order': Nope, 'shape': (6,), }", 24, TS_ECORRUPT,
           "True or False");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': "
           "(99999999999, 99999999999, 99999999999), }", 0, TS_ECORRUPT, "overflows");

    char buf[512];
    size_t len = image(buf, ok, 24);
    struct ts_verify_array a;
    struct ts_err err = { 0 };
    buf[1] = 'n';
    assert_int_equal(ts_verify_npy_parse(buf, len, "m.npy", &a, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "magic"));
    buf[1] = 'N';
    buf[6] = 9;
    ts_err_clear(&err);
    assert_int_equal(ts_verify_npy_parse(buf, len, "m.npy", &a, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "version 9.0"));
    buf[6] = 1;
    buf[9] = 0x7f; /* header length past the end */
    ts_err_clear(&err);
    assert_int_equal(ts_verify_npy_parse(buf, len, "m.npy", &a, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "header length"));
}

/* ---- statistics: answers from scipy 1.10.1 / numpy 1.24 ---- */

static void test_ks(void **state)
{
    double a[5] = { 1, 2, 3, 4, 5 }, b[5] = { 6, 7, 8, 9, 10 };
    double c[5] = { 0.5, 1.5, 2.5, 2.5, 4 }, d[7] = { 1, 2, 2.5, 3, 3, 3.5, 6 };
    struct ts_verify_ks r;
    struct ts_err err = { 0 };

    assert_int_equal(ts_verify_ks_2samp(a, 5, b, 5, TS_VERIFY_KS_AUTO, &r, NULL), TS_OK);
    assert_true(r.statistic == 1.0 && r.method == TS_VERIFY_KS_EXACT);
    assert_true(r.pvalue == 0.007936507936507936);        /* 2 / C(10, 5) */
    assert_int_equal(ts_verify_ks_2samp(a, 5, a, 5, TS_VERIFY_KS_AUTO, &r, NULL), TS_OK);
    assert_true(r.statistic == 0 && r.pvalue == 1.0);
    /* Ties within and across samples; unequal sizes. */
    assert_int_equal(ts_verify_ks_2samp(c, 5, d, 7, TS_VERIFY_KS_AUTO, &r, NULL), TS_OK);
    assert_true(r.statistic == 0.37142857142857144 && r.location == 2.5 && r.sign == 1);
    assert_near(r.pvalue, 0.7373737373737375, 1e-15);
    assert_int_equal(ts_verify_ks_2samp(c, 5, d, 7, TS_VERIFY_KS_ASYMP, &r, NULL), TS_OK);
    assert_true(r.statistic == 0.3714285714285715 && r.method == TS_VERIFY_KS_ASYMP);
    assert_near(r.pvalue, 0.6739514091350824, 1e-15);

    d[4] = NAN;
    assert_int_equal(ts_verify_ks_2samp(c, 5, d, 7, TS_VERIFY_KS_AUTO, &r, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "b[4] is NaN"));
    ts_err_clear(&err);
    assert_int_equal(ts_verify_ks_2samp(c, 0, d, 7, TS_VERIFY_KS_AUTO, &r, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "empty"));

    assert_near(ts_verify_kstwo_sf(10, 0.3), 0.27053557479999946, 1e-15);
    assert_near(ts_verify_kstwo_sf(1000, 0.05), 0.013012074781090332, 1e-17);
    assert_true(ts_verify_kstwo_sf(10, 0.01) == 1.0 && ts_verify_kstwo_sf(10, 1.0) == 0.0);
    assert_true(isnan(ts_verify_kstwo_sf(0, 0.5)));
    assert_true(ts_verify_smirnov_sf(5, 0.3) == 0.34282);
    assert_near(ts_verify_smirnov_sf(100, 0.2), 0.0002775963664037337, 1e-19);
    assert_true(isnan(ts_verify_smirnov_sf(5, 1.5)));
}

static void test_js_moments(void **state)
{
    double p[2] = { 1, 0 }, q[2] = { 0, 1 }, u[3] = { 1, 2, 3 }, neg[3] = { 1, -1, 3 };
    double x[4] = { 1, 2, 3, 4 }, m, s, js;
    struct ts_err err = { 0 };

    assert_int_equal(ts_verify_js_distance(u, u, 3, 0, &js, NULL), TS_OK);
    assert_true(js == 0);
    assert_int_equal(ts_verify_js_distance(p, q, 2, 2.0, &js, NULL), TS_OK);
    assert_near(js, 1.0, 1e-15);                  /* disjoint: the maximum */
    assert_int_equal(ts_verify_js_distance(p, q, 2, 0, &js, NULL), TS_OK);
    assert_near(js, sqrt(log(2.0)), 1e-15);
    assert_int_equal(ts_verify_js_distance(u, neg, 3, 0, &js, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "q[1]"));
    ts_err_clear(&err);
    assert_int_equal(ts_verify_js_distance(u, u, 3, 1.0, &js, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "base"));

    assert_int_equal(ts_verify_mean_std(x, 4, 0, &m, &s, NULL), TS_OK);
    assert_true(m == 2.5 && s == sqrt(1.25));
    assert_int_equal(ts_verify_mean_std(x, 4, 1, &m, &s, NULL), TS_OK);
    assert_true(s == sqrt(5.0 / 3.0));
    assert_int_equal(ts_verify_mean_std(x, 1, 1, &m, &s, &err), TS_EINVAL);
    x[2] = INFINITY;
    ts_err_clear(&err);
    assert_int_equal(ts_verify_mean_std(x, 4, 0, &m, NULL, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "x[2] is infinite"));
}

static void test_hist_psi(void **state)
{
    double a[5] = { 0, 1, 2, 3, 4 }, b[3] = { 4, 4, 2 }, e[5], one[2] = { 7, 7 }, psi;
    double ref[100], same[100], shifted[100];
    uint64_t ca[4], cb[4];

    /* numpy.histogram(a, 4, range=(0, 4)) = [1, 1, 1, 2]: the last bin is closed. */
    assert_int_equal(ts_verify_histogram(a, 5, b, 3, 4, e, ca, cb, NULL), TS_OK);
    assert_true(e[0] == 0 && e[1] == 1 && e[4] == 4);
    assert_true(ca[0] == 1 && ca[1] == 1 && ca[2] == 1 && ca[3] == 2);
    assert_true(cb[0] == 0 && cb[1] == 0 && cb[2] == 1 && cb[3] == 2);
    /* One distinct value: the range widens to +-0.5. */
    assert_int_equal(ts_verify_histogram(one, 2, one, 1, 1, e, ca, cb, NULL), TS_OK);
    assert_true(e[0] == 6.5 && e[1] == 7.5 && ca[0] == 2 && cb[0] == 1);
    assert_int_equal(ts_verify_histogram(a, 5, b, 3, 0, e, ca, cb, NULL), TS_EINVAL);

    for (int i = 0; i < 100; i++) {
        ref[i] = same[99 - i] = i;
        shifted[i] = i + 50;
    }
    assert_int_equal(ts_verify_psi(ref, 100, same, 100, 0, &psi, NULL), TS_OK);
    assert_true(psi == 0);
    assert_int_equal(ts_verify_psi(ref, 100, shifted, 100, 0, &psi, NULL), TS_OK);
    assert_true(psi > 0.25);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ulp_f32),        cmocka_unit_test(test_ulp_f64),
        cmocka_unit_test(test_bits_identical), cmocka_unit_test(test_bits_one_diff),
        cmocka_unit_test(test_bits_special),   cmocka_unit_test(test_walk_kernels_agree),
        cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_npy_roundtrip),  cmocka_unit_test(test_npy_malformed),
        cmocka_unit_test(test_ks),             cmocka_unit_test(test_js_moments),
        cmocka_unit_test(test_hist_psi),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
