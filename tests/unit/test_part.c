/* test_part.c - lib/ps: a partition aggregates a step's pushes and applies it once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "ps/part.h"

#define N 1000

static struct ts_job job(uint32_t workers, bool exact, const char *opt)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "t", workers, exact, opt, 64, NULL), TS_OK);
    return j;
}

static struct ts_part *mk(const struct ts_job *j)
{
    struct ts_part *p;
    assert_int_equal(ts_part_create(j, 3, "w", 1, 500, N, "normal:0.1", 7, 0, 0, &p, NULL),
                     TS_OK);
    return p;
}

/* rank r's gradient sum, in fixed point: varied magnitudes so that float sums would round
 * differently in different orders. */
static void grad(uint32_t r, int64_t *out)
{
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = (float)((i % 7 - 3) * (int)(r + 1)) * (i % 3 ? 1e-3f : 37.5f) + 1e-7f * (float)r;
    struct ts_err e = { 0 };
    if (ts_fixed_from_f32(g, N, out, &e))
        fail_msg("%s", e.msg);
}

static void run_order(const uint32_t *order, float *values)
{
    struct ts_job j = job(3, true, "adam:lr=0.01");
    struct ts_part *p = mk(&j);
    static int64_t g[3][N];
    uint64_t v;
    bool applied;

    for (uint32_t r = 0; r < 3; r++)
        grad(r, g[r]);
    for (uint64_t step = 0; step < 2; step++)
        for (int k = 0; k < 3; k++) {
            assert_int_equal(ts_part_push(p, order[k], step, TS_ENC_FIXED, g[order[k]],
                                          sizeof(g[0]), &applied, NULL), TS_OK);
            assert_int_equal(applied, k == 2);
        }
    assert_int_equal(ts_part_read(p, 2, 1000, values, &v, NULL), TS_OK);
    assert_int_equal(v, 2);
    ts_part_free(p);
}

static void exact_sum_ignores_arrival_order(void **state)
{
    static const uint32_t orders[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
                                           { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
    float first[N], other[N];

    run_order(orders[0], first);
    for (int o = 1; o < 6; o++) {
        run_order(orders[o], other);
        assert_memory_equal(first, other, sizeof(first));
    }
}

static void init_is_placement_independent(void **state)
{
    struct ts_job j = job(1, true, "sgd");
    struct ts_part *p = mk(&j), *whole;
    float a[N], b[1500];
    uint64_t v;

    /* Partition 1 covers elements 500..1499 of the tensor; a partition holding the whole
     * tensor must have the very same values there. */
    assert_int_equal(ts_part_create(&j, 3, "w", 0, 0, 1500, "normal:0.1", 7, 0, 0, &whole,
                                    NULL), TS_OK);
    assert_int_equal(ts_part_read(p, 0, 10, a, &v, NULL), TS_OK);
    assert_int_equal(ts_part_read(whole, 0, 10, b, &v, NULL), TS_OK);
    assert_memory_equal(a, b + 500, sizeof(a));
    ts_part_free(p);
    ts_part_free(whole);
}

/* Every bad push is refused and leaves the partition as it was: the step, completed
 * afterwards by good pushes, gives the same values as a partition that never saw them. */
static void bad_pushes_change_nothing(void **state)
{
    struct ts_job j = job(2, true, "momentum:lr=0.1");
    struct ts_part *p = mk(&j), *clean = mk(&j);
    static int64_t g0[N], g1[N], huge[N];
    float a[N], b[N];
    struct ts_err e;
    uint64_t v;
    bool applied;

    grad(0, g0);
    grad(1, g1);
    for (int i = 0; i < N; i++)
        huge[i] = INT64_MAX - 5;
    assert_int_equal(ts_part_push(p, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, NULL), TS_OK);
    struct {
        uint32_t rank;
        uint64_t step;
        unsigned enc;
        const void *data;
        size_t bytes;
        ts_status want;
        const char *says;
    } bad[] = {
        { 2, 0, TS_ENC_FIXED, g1, sizeof(g1), TS_EINVAL, "rank" },
        { 1, 0, TS_ENC_RAW, g1, sizeof(g1), TS_EINVAL, "encoding" },
        { 1, 0, TS_ENC_FIXED, g1, sizeof(g1) - 8, TS_EINVAL, "payload" },
        { 1, 1, TS_ENC_FIXED, g1, sizeof(g1), TS_EINVAL, "step" },
        { 0, 0, TS_ENC_FIXED, g1, sizeof(g1), TS_ESTATE, "already pushed" },
        { 1, 0, TS_ENC_FIXED, huge, sizeof(huge), TS_EINVAL, "fixed-point range" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&e, 0, sizeof(e));
        assert_int_equal(ts_part_push(p, bad[i].rank, bad[i].step, bad[i].enc, bad[i].data,
                                      bad[i].bytes, &applied, &e), bad[i].want);
        assert_false(applied);
        assert_non_null(strstr(e.msg, bad[i].says));
        assert_non_null(strstr(e.msg, "tensor 3 partition 1"));
    }
    assert_int_equal(ts_part_push(p, 1, 0, TS_ENC_FIXED, g1, sizeof(g1), &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(ts_part_push(clean, 1, 0, TS_ENC_FIXED, g1, sizeof(g1), &applied, NULL),
                     TS_OK);
    assert_int_equal(ts_part_push(clean, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, NULL),
                     TS_OK);
    assert_int_equal(ts_part_read(p, 1, 10, a, &v, NULL), TS_OK);
    assert_int_equal(ts_part_read(clean, 1, 10, b, &v, NULL), TS_OK);
    assert_memory_equal(a, b, sizeof(a));

    /* A step that already happened is stale. */
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, &e),
                     TS_ESTATE);
    ts_part_free(p);
    ts_part_free(clean);
}

static void read_waits_then_times_out(void **state)
{
    struct ts_job j = job(2, false, "sgd:lr=1");
    struct ts_part *p = mk(&j);
    float g[N], before[N], after[N];
    struct ts_err e = { 0 };
    uint64_t v;
    bool applied;

    for (int i = 0; i < N; i++)
        g[i] = 64.0f; /* sum 128 over 2 ranks, / batch 64 = 2 per element, lr 1 */
    assert_int_equal(ts_part_read(p, 0, 10, before, &v, NULL), TS_OK);
    assert_int_equal(ts_part_push(p, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(ts_part_read(p, 1, 50, after, &v, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "1 of 2 ranks pushed"));
    /* A cancelled wait (a shard shutting down) returns at once, not after the timeout. */
    atomic_bool cancel = true;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_wait(p, 1, 60000, &cancel, &v, &e), TS_ECANCELLED);
    assert_int_equal(ts_part_push(p, 1, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(ts_part_read(p, 1, 50, after, &v, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        assert_true(after[i] == before[i] - 2.0f);
    ts_part_free(p);
}

static void job_validation(void **state)
{
    struct ts_job j;
    struct ts_err e = { 0 };

    assert_int_equal(ts_job_init(&j, "", 1, true, "sgd", 64, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.id"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_init(&j, "a b", 1, true, "sgd", 64, &e), TS_EINVAL);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_init(&j, "a", 0, true, "sgd", 64, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.workers"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_init(&j, "a", 1, true, "sgd", 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.batch"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_init(&j, "a", 1, true, "rmsprop", 64, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.optimizer"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_sum_ignores_arrival_order),
        cmocka_unit_test(init_is_placement_independent),
        cmocka_unit_test(bad_pushes_change_nothing),
        cmocka_unit_test(read_waits_then_times_out),
        cmocka_unit_test(job_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
