/* test_codec_delta.c - lib/codec's pull compression (delta.c): a worker's copy and the shard's
 * mirror of it stay equal bit for bit over many pulls with every codec, error feedback brings
 * the copy to the values once they stop moving, and a delta that would not be finite is
 * refused with the mirror untouched (the caller then resyncs in full). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"

#define N 4099       /* not a multiple of the kernels' blocks, so tails run */
#define PULLS 200

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_sym(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

struct ends {
    float value[N], mirror[N], copy[N], scratch[N], wscratch[N];
    unsigned char wire[8 * N + 8];
};

/* One pull: the shard encodes and moves its mirror, the payload is checked as a worker checks
 * it, the worker applies it to its copy. Returns whether the delta went (else a full resync,
 * which copies the values to both ends as the data plane does). */
static bool pull(struct ends *e, const struct ts_codec *c)
{
    size_t bytes = 0;

    if (!ts_codec_delta_encode(c, e->value, e->mirror, N, e->scratch, e->wire, &bytes)) {
        memcpy(e->mirror, e->value, sizeof(e->value));
        memcpy(e->copy, e->value, sizeof(e->value));
        return false;
    }
    assert_int_equal(bytes, ts_codec_max_bytes(c, N));
    assert_int_equal(ts_codec_check(c->kind, e->wire, bytes, N, NULL), TS_OK);
    ts_codec_delta_apply(c->kind, e->wire, bytes, N, e->copy, e->wscratch);
    return true;
}

static double max_err(const struct ends *e)
{
    double m = 0;

    for (int i = 0; i < N; i++)
        m = fmax(m, fabs((double)e->copy[i] - e->value[i]));
    return m;
}

/* SGD-like drift: every pull the values move by a small random step; copy == mirror after
 * each pull, bit for bit, and the copy never strays far; then the values stop and the copy
 * converges to them (error feedback). */
static void run_codec(const char *spec, double stray, double settled)
{
    struct ts_codec c;
    struct ends *e = calloc(1, sizeof(*e));
    uint64_t s = 42;

    assert_non_null(e);
    assert_int_equal(ts_codec_parse(spec, &c, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        e->value[i] = 0.05f * rng_sym(&s);
    memcpy(e->mirror, e->value, sizeof(e->value));   /* the first pull went in full */
    memcpy(e->copy, e->value, sizeof(e->value));
    for (int k = 0; k < PULLS; k++) {
        for (int i = 0; i < N; i++)
            e->value[i] += 1e-3f * rng_sym(&s);
        assert_true(pull(e, &c));
        assert_memory_equal(e->copy, e->mirror, sizeof(e->copy));
        assert_true(max_err(e) <= stray);
    }
    for (int k = 0; k < 60; k++) {
        assert_true(pull(e, &c));
        assert_memory_equal(e->copy, e->mirror, sizeof(e->copy));
    }
    if (max_err(e) > settled)
        fail_msg("%s: copy is %g away from the values after they stopped, want <= %g", spec,
                 max_err(e), settled);
    free(e);
}

/* fp16 cannot carry a delta below 2^-25 (its subnormals end there): it settles within that. */
static void t_fp16(void **st) { (void)st; run_codec("fp16", 1e-3, 1e-7); }
static void t_bf16(void **st) { (void)st; run_codec("bf16", 1e-3, 1e-8); }
static void t_int8(void **st) { (void)st; run_codec("int8", 1e-3, 1e-8); }
/* top-k moves only 5% a pull: the copy strays further, and needs 20 pulls to catch up. */
static void t_topk(void **st) { (void)st; run_codec("topk:0.05", 0.05, 1e-8); }
static void t_none(void **st) { (void)st; run_codec("none", 1e-8, 0); }

/* A delta beyond fp16's range is refused with the mirror untouched; the full resync after it
 * leaves both ends equal again and the next delta goes. */
static void t_overflow_resyncs(void **st)
{
    struct ts_codec c;
    struct ends *e = calloc(1, sizeof(*e));
    float before[N];

    (void)st;
    assert_non_null(e);
    assert_int_equal(ts_codec_parse("fp16", &c, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        e->value[i] = e->mirror[i] = e->copy[i] = (float)i * 1e-3f;
    e->value[17] = 1e6f;
    memcpy(before, e->mirror, sizeof(before));
    size_t bytes = 12345;
    assert_false(ts_codec_delta_encode(&c, e->value, e->mirror, N, e->scratch, e->wire,
                                       &bytes));
    assert_memory_equal(e->mirror, before, sizeof(before));
    assert_int_equal(bytes, 12345);
    assert_false(pull(e, &c));                        /* resync in full */
    assert_memory_equal(e->copy, e->value, sizeof(e->copy));
    e->value[3] += 0.25f;
    assert_true(pull(e, &c));
    assert_memory_equal(e->copy, e->mirror, sizeof(e->copy));
    assert_true(e->copy[3] == e->value[3]);           /* 0.25 is exact in fp16 */
    e->value[5] = NAN;                                /* a value that is not finite */
    assert_false(ts_codec_delta_encode(&c, e->value, e->mirror, N, e->scratch, e->wire,
                                       &bytes));
    free(e);
}

/* A copy that is not the mirror (a worker that lost a reply) drifts for good under deltas:
 * what the data plane's copy tokens exist to rule out. */
static void t_mismatch_never_heals(void **st)
{
    struct ts_codec c;
    struct ends *e = calloc(1, sizeof(*e));
    uint64_t s = 7;

    (void)st;
    assert_non_null(e);
    assert_int_equal(ts_codec_parse("int8", &c, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        e->value[i] = e->mirror[i] = e->copy[i] = rng_sym(&s);
    e->copy[9] += 0.5f;                               /* one reply the worker never applied */
    for (int k = 0; k < 50; k++)
        assert_true(pull(e, &c));
    assert_true(fabsf(e->copy[9] - e->value[9]) >= 0.49f);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_fp16),
        cmocka_unit_test(t_bf16),
        cmocka_unit_test(t_int8),
        cmocka_unit_test(t_topk),
        cmocka_unit_test(t_none),
        cmocka_unit_test(t_overflow_resyncs),
        cmocka_unit_test(t_mismatch_never_heals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
