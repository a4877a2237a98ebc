/* test_part.c - lib/ps: a partition aggregates a step's pushes and applies it once; the
 * other modes (SSP, reduce), an ASP snapshot's cut, overflow skips, loss scale and sync
 * period; what part.h's accessors show. The step's sum against plain summation:
 * test_part_sums.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <stdatomic.h>

#include "codec/codec.h"
#include "util/proc.h"
#include "part_test.h"

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
    assert_int_equal(ts_part_create(j, 3, "w", 1, 500, N, "normal:0.1", 7, 0, 0, NULL, &p, NULL),
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
            assert_int_equal(push(p, order[k], step, TS_ENC_FIXED, g[order[k]],
                                          sizeof(g[0]), &applied, NULL), TS_OK);
            assert_int_equal(applied, k == 2);
        }
    assert_int_equal(read_at(p, 2, 1000, values, &v, NULL), TS_OK);
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
    assert_int_equal(ts_part_create(&j, 3, "w", 0, 0, 1500, "normal:0.1", 7, 0, 0, NULL, &whole,
                                    NULL), TS_OK);
    assert_int_equal(read_at(p, 0, 10, a, &v, NULL), TS_OK);
    assert_int_equal(read_at(whole, 0, 10, b, &v, NULL), TS_OK);
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
    assert_int_equal(push(p, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, NULL), TS_OK);
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
        { 0, 0, TS_ENC_FIXED, g0, sizeof(g0), TS_ESTATE, "already pushed" },
        { 0, 0, TS_ENC_FIXED, g1, sizeof(g1), TS_EPERM, "differs from the one counted" },
        { 1, 0, TS_ENC_FIXED, huge, sizeof(huge), TS_EINVAL, "fixed-point range" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&e, 0, sizeof(e));
        assert_int_equal(push(p, bad[i].rank, bad[i].step, bad[i].enc, bad[i].data,
                                      bad[i].bytes, &applied, &e), bad[i].want);
        assert_false(applied);
        assert_non_null(strstr(e.msg, bad[i].says));
        assert_non_null(strstr(e.msg, "tensor 3 partition 1"));
    }
    assert_int_equal(push(p, 1, 0, TS_ENC_FIXED, g1, sizeof(g1), &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(push(clean, 1, 0, TS_ENC_FIXED, g1, sizeof(g1), &applied, NULL),
                     TS_OK);
    assert_int_equal(push(clean, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, NULL),
                     TS_OK);
    assert_int_equal(read_at(p, 1, 10, a, &v, NULL), TS_OK);
    assert_int_equal(read_at(clean, 1, 10, b, &v, NULL), TS_OK);
    assert_memory_equal(a, b, sizeof(a));

    /* A step that already happened is stale. */
    memset(&e, 0, sizeof(e));
    assert_int_equal(push(p, 0, 0, TS_ENC_FIXED, g0, sizeof(g0), &applied, &e),
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
    assert_int_equal(read_at(p, 0, 10, before, &v, NULL), TS_OK);
    assert_int_equal(push(p, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(read_at(p, 1, 50, after, &v, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "1 of 2 ranks pushed"));
    /* A cancelled wait (a shard shutting down) returns at once, not after the timeout. */
    atomic_uint cancel = 1;
    memset(&e, 0, sizeof(e));
    struct ts_pull_info info;
    assert_int_equal(ts_part_pull(p, 0, 1, 0, 60000, &cancel, after, &info, &e), TS_ECANCELLED);
    assert_int_equal(push(p, 1, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(read_at(p, 1, 50, after, &v, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        assert_true(after[i] == before[i] - 2.0f);
    ts_part_free(p);
}

static struct ts_job job_mode(uint32_t workers, bool exact, const char *opt, enum ts_mode m,
                              uint32_t s)
{
    struct ts_job j = job(workers, exact, opt);
    assert_int_equal(ts_job_set_mode(&j, m, s, NULL), TS_OK);
    return j;
}

/* SSP(1): a rank two steps ahead of the slowest waits; one step ahead does not. The shard
 * records what each pull saw. */
static void ssp_bounds_the_lead(void **state)
{
    struct ts_job j = job_mode(2, false, "sgd:lr=1", TS_MODE_SSP, 1);
    struct ts_part *p = mk(&j);
    float g[N], out[N];
    struct ts_pull_info info;
    struct ts_err e = { 0 };
    bool applied;

    for (int i = 0; i < N; i++)
        g[i] = 64.0f;
    /* Rank 0 pushes steps 0 and 1 alone: each is applied on arrival. */
    assert_int_equal(push(p, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(ts_part_pull(p, 0, 1, 0, 10, NULL, out, &info, NULL), TS_OK);
    assert_int_equal(info.staleness, 1);
    assert_int_equal(info.version, 1);
    assert_int_equal(push(p, 0, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    /* Step 2 would be 2 ahead of rank 1 (still at 0): refused within the wait. */
    assert_int_equal(ts_part_pull(p, 0, 2, 0, 50, NULL, out, &info, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "slowest worker"));
    assert_int_equal(push(p, 1, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(ts_part_pull(p, 0, 2, 0, 50, NULL, out, &info, NULL), TS_OK);
    assert_int_equal(info.version, 3);
    uint64_t clock[2] = { UINT64_MAX, UINT64_MAX }, last[2] = { 0 }, most[2] = { 0 };
    struct ts_part_ranks rk = { 2, clock, last, most, 0 };
    ts_part_fold_ranks(p, &rk);
    assert_int_equal(most[0], 1);
    assert_int_equal(most[1], 0);
    assert_int_equal(clock[0], 2);   /* rank 0 pushed steps 0 and 1, rank 1 step 0 */
    assert_int_equal(clock[1], 1);
    /* Out of order is refused: rank 1 is at step 1. */
    memset(&e, 0, sizeof(e));
    assert_int_equal(push(p, 1, 3, TS_ENC_RAW, g, sizeof(g), &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "in order"));
    /* Without a copy buffer an async pull is refused (values change under it). */
    assert_int_equal(ts_part_pull(p, 1, 1, 0, 10, NULL, NULL, &info, NULL), TS_EINVAL);
    ts_part_free(p);
}

/* A restore's load for SGD, which keeps no optimizer state: zeros. */
static ts_status load_zeros(void *ctx, float *value, float *state, uint64_t *updates,
                           struct ts_err *err)
{
    (void)ctx;
    (void)state;
    (void)updates;
    (void)err;
    memset(value, 0, N * sizeof(float));
    return TS_OK;
}

/* A push made on a thread of its own: it may wait (a snapshot's cut). */
struct bg_push {
    pthread_t th;
    struct ts_part *p;
    uint32_t rank;
    uint64_t step;
    const float *g;
    ts_status st;
    atomic_bool done;
};

static void *bg_push_run(void *arg)
{
    struct bg_push *b = arg;
    bool applied;

    b->st = push(b->p, b->rank, b->step, TS_ENC_RAW, b->g, N * sizeof(float), &applied, NULL);
    atomic_store(&b->done, true);
    return NULL;
}

static void bg_push_start(struct bg_push *b, struct ts_part *p, uint32_t rank, uint64_t step,
                          const float *g)
{
    *b = (struct bg_push){ .p = p, .rank = rank, .step = step, .g = g };
    assert_int_equal(pthread_create(&b->th, NULL, bg_push_run, b), 0);
}

/* ASP, 2 ranks, p armed for the cut after each rank's pushes 0 and 1: rank 0 pushes them and
 * its push 2 waits; the copy is taken only once rank 1 has pushed its two, and rank 0's push 2
 * then goes on. */
static void cut_after_two_pushes(struct ts_part *p, const float *g)
{
    struct bg_push b;
    bool applied;

    for (uint64_t s = 0; s < 2; s++)
        assert_int_equal(push(p, 0, s, TS_ENC_RAW, g, N * sizeof(float), &applied, NULL),
                         TS_OK);
    bg_push_start(&b, p, 0, 2, g);   /* past the cut, it waits */
    ts_sleep_ms(150);
    assert_false(atomic_load(&b.done));
    assert_int_equal(push(p, 1, 0, TS_ENC_RAW, g, N * sizeof(float), &applied, NULL), TS_OK);
    assert_false(ts_part_captured(p, 10));
    assert_int_equal(push(p, 1, 1, TS_ENC_RAW, g, N * sizeof(float), &applied, NULL), TS_OK);
    assert_true(ts_part_captured(p, 1000));
    assert_int_equal(pthread_join(b.th, NULL), 0);
    assert_int_equal(b.st, TS_OK);
}

/* ASP: a snapshot armed at step s is one cut over the ranks. A rank that reaches s first
 * waits; the copy is taken when the last rank has pushed its steps below s, and holds exactly
 * those pushes; the waiting push then goes on. A disarm lets a waiting push go; a restore puts
 * every rank's clock at the step. */
static void async_snapshot_is_one_cut(void **state)
{
    struct ts_job j = job_mode(2, false, "sgd:lr=1", TS_MODE_ASP, 0);
    struct ts_part *p = mk(&j), *q = mk(&j);
    float g[N], want[N], got[N];
    const float *val, *st;
    struct ts_pull_info info;
    struct bg_push b;
    uint64_t lo, hi, updates;
    bool applied;

    (void)state;
    for (int i = 0; i < N; i++)
        g[i] = (float)(i % 5) * 64.0f;
    assert_int_equal(ts_part_arm(p, 2, NULL), TS_OK);
    cut_after_two_pushes(p, g);   /* steps 0 and 1 of each rank */
    /* The copy is the four pushes below step 2, and not rank 0's step 2. */
    for (uint32_t r = 0; r < 2; r++)
        for (uint64_t s = 0; s < 2; s++)
            assert_int_equal(push(q, r, s, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(ts_part_pull(q, 0, 0, 0, 10, NULL, want, &info, NULL), TS_OK);
    ts_part_capture(p, &val, &st, &updates);
    assert_memory_equal(val, want, sizeof(want));
    assert_int_equal(updates, 2 * 2);   /* asp: each of the four pushes below step 2 */
    assert_int_equal(ts_part_pull(p, 0, 0, 0, 10, NULL, got, &info, NULL), TS_OK);
    assert_memory_not_equal(got, want, sizeof(want));   /* step 2 was applied after */
    ts_part_steps(p, &lo, &hi);
    assert_true(lo == 2 && hi == 3);
    ts_part_disarm(p);
    /* Past step 1 already (rank 0 is at 3): nothing armed. */
    assert_int_equal(ts_part_arm(p, 1, NULL), TS_ESTATE);
    /* A disarm releases a waiting push at once. */
    assert_int_equal(ts_part_arm(p, 3, NULL), TS_OK);
    bg_push_start(&b, p, 0, 3, g);
    ts_sleep_ms(100);
    assert_false(atomic_load(&b.done));
    int64_t t0 = ts_now_ms();
    ts_part_disarm(p);
    assert_int_equal(pthread_join(b.th, NULL), 0);
    assert_int_equal(b.st, TS_OK);
    assert_true(ts_now_ms() - t0 < 2000);
    /* A restore at step 7: every rank's clock is 7, and the version counts 14 pushes. */
    assert_int_equal(ts_part_restore(p, 7, load_zeros, NULL, NULL), TS_OK);
    ts_part_steps(p, &lo, &hi);
    assert_true(lo == 7 && hi == 7);
    assert_int_equal(ts_part_version(p), 14);
    assert_int_equal(push(p, 1, 7, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    ts_part_free(q);
    ts_part_free(p);
}

/* A partition of job j syncing every 2 steps, and g a gradient of ones. A snapshot at an
 * odd step is refused (not one of its syncs), nothing armed. */
static struct ts_part *synced_by_two(const struct ts_job *j, float *g)
{
    struct ts_part *p = mk(j);
    struct ts_err e = { 0 };

    for (int i = 0; i < N; i++)
        g[i] = 1.0f;
    ts_part_set_sync(p, 2);
    assert_int_equal(ts_part_arm(p, 3, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "not one of its syncs"));
    assert_false(ts_part_captured(p, 0));
    return p;
}

/* BSP with a sync period of 2: the version counts syncs, so step s is version s / 2. A
 * snapshot falls on a sync (an odd step is refused, nothing armed), the copy is taken at
 * version 2 for step 4, and a restore at step 6 gives version 3. */
static void sync_period_snapshot_on_its_syncs(void **state)
{
    struct ts_job j = job(1, false, "sgd:lr=1");
    struct ts_err e = { 0 };
    float g[N];
    struct ts_part *p = synced_by_two(&j, g);
    uint64_t lo, hi;
    bool applied;

    (void)state;
    assert_int_equal(ts_part_arm(p, 4, NULL), TS_OK);
    assert_int_equal(push(p, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_false(ts_part_captured(p, 0));
    assert_int_equal(push(p, 0, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_true(ts_part_captured(p, 0));
    ts_part_steps(p, &lo, &hi);
    assert_true(lo == 4 && hi == 4);
    ts_part_disarm(p);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_arm(p, 2, &e), TS_ESTATE);   /* past: it is at step 4 */
    assert_non_null(strstr(e.msg, "past step 2"));
    assert_int_equal(ts_part_restore(p, 6, load_zeros, NULL, NULL), TS_OK);
    assert_int_equal(ts_part_version(p), 3);
    ts_part_free(p);
}

/* ASP with a sync period of 2: a rank's clock counts its syncs, so step s is clock s / 2 on
 * every rank. A snapshot falls on a sync; the cut is taken once both ranks pushed their syncs
 * below it, a rank's sync at it waits; a restore at step 6 puts every clock at 3. */
static void async_sync_period_snapshot_on_its_syncs(void **state)
{
    struct ts_job j = job_mode(2, false, "sgd:lr=1", TS_MODE_ASP, 0);
    float g[N];
    struct ts_part *p = synced_by_two(&j, g);
    uint64_t lo, hi;
    bool applied;

    (void)state;
    assert_int_equal(ts_part_arm(p, 4, NULL), TS_OK);
    cut_after_two_pushes(p, g);   /* syncs of steps 0-3; rank 0's of steps 4-5 waited */
    ts_part_steps(p, &lo, &hi);         /* in steps: rank 1 at 4, rank 0 at 6 */
    assert_true(lo == 4 && hi == 6);
    ts_part_disarm(p);
    assert_int_equal(ts_part_arm(p, 4, NULL), TS_ESTATE);   /* rank 0 is past it */
    assert_int_equal(ts_part_restore(p, 6, load_zeros, NULL, NULL), TS_OK);
    ts_part_steps(p, &lo, &hi);
    assert_true(lo == 6 && hi == 6);
    assert_int_equal(ts_part_version(p), 6);   /* 3 syncs of 2 ranks */
    assert_int_equal(push(p, 1, 3, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    ts_part_free(p);
}

/* Reduce: the values a pull returns are the reduced gradient, sum / batch; and the update a
 * worker makes from it equals the one a PS-mode partition makes. */
static void reduce_returns_the_mean_gradient(void **state)
{
    struct ts_job jr = job_mode(2, true, "momentum:lr=0.1", TS_MODE_REDUCE, 0);
    struct ts_job jp = job(2, true, "momentum:lr=0.1");
    struct ts_part *r = mk(&jr), *ps = mk(&jp);
    static int64_t g[2][N];
    float mine[N], mom[N] = { 0 }, red[N], theirs[N];
    struct ts_pull_info info;
    uint64_t v;
    bool applied;

    assert_int_equal(read_at(ps, 0, 10, mine, &v, NULL), TS_OK);
    for (uint32_t k = 0; k < 2; k++)
        grad(k, g[k]);
    for (uint64_t step = 0; step < 3; step++) {
        for (uint32_t k = 0; k < 2; k++) {
            assert_int_equal(push(r, k, step, TS_ENC_FIXED, g[k], sizeof(g[k]), &applied, NULL),
                             TS_OK);
            assert_int_equal(push(ps, k, step, TS_ENC_FIXED, g[k], sizeof(g[k]), &applied,
                                  NULL), TS_OK);
        }
        assert_int_equal(ts_part_pull(r, 0, step + 1, 0, 10, NULL, red, &info, NULL), TS_OK);
        ts_optim_apply(&jr.optim, step + 1, mine, mom, red, N);
    }
    assert_int_equal(read_at(ps, 3, 10, theirs, &v, NULL), TS_OK);
    assert_memory_equal(mine, theirs, sizeof(mine));
    ts_part_free(r);
    ts_part_free(ps);
}

/* A non-finite sum skips the step: values kept, version moves, every rank hears of it once.
 * Loss scale and sync period divide the sum. */
static void overflow_skips_and_scale_divides(void **state)
{
    struct ts_job j = job(2, false, "sgd:lr=1");
    struct ts_part *p = mk(&j);
    float g[N], bad[N], before[N], after[N], mid[N];
    struct ts_pull_info info;
    struct ts_push in = { .rank = 0, .step = 0, .encoding = TS_ENC_RAW, .scale_exp = 3,
                          .payload = g, .bytes = sizeof(g) };
    struct ts_err e = { 0 };
    uint64_t v;
    bool applied;

    for (int i = 0; i < N; i++) {
        g[i] = 64.0f * 8;             /* scaled by 2^3 */
        bad[i] = i == 7 ? INFINITY : g[i];
    }
    assert_int_equal(read_at(p, 0, 10, before, &v, NULL), TS_OK);
    assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    in.rank = 1;
    in.payload = bad;
    in.scale_exp = 2;                 /* ranks must agree on the scale */
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "loss scale"));
    in.scale_exp = 3;
    assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    assert_int_equal(ts_part_pull(p, 0, 1, 0, 10, NULL, after, &info, NULL), TS_OK);
    assert_true(info.overflow);
    assert_int_equal(info.version, 1);
    assert_memory_equal(before, after, sizeof(before));
    struct ts_part_ranks rk = { 0 };
    ts_part_fold_ranks(p, &rk);
    assert_int_equal(rk.skipped, 1);
    assert_int_equal(ts_part_pull(p, 0, 1, 0, 10, NULL, after, &info, NULL), TS_OK);
    assert_false(info.overflow);      /* reported once */
    /* Step 1, finite: sum 1024, / (batch 64 * 2^3) = 2 per element with lr 1. */
    in.step = 1;
    in.payload = g;
    for (uint32_t k = 0; k < 2; k++) {
        in.rank = k;
        assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    }
    assert_int_equal(ts_part_pull(p, 1, 2, 0, 10, NULL, after, &info, NULL), TS_OK);
    assert_true(info.overflow);       /* rank 1 had not pulled since the skip */
    for (int i = 0; i < N; i++)
        assert_true(after[i] == before[i] - 2.0f);
    /* A sync period of 2 halves the step. */
    ts_part_set_sync(p, 2);
    in.step = 2;
    for (uint32_t k = 0; k < 2; k++) {
        in.rank = k;
        assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    }
    memcpy(mid, after, sizeof(mid));
    assert_int_equal(read_at(p, 3, 10, after, &v, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        assert_true(after[i] == mid[i] - 1.0f);
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
    assert_int_equal(ts_job_init(&j, "a", 1, true, "sgd", 64, NULL), TS_OK);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_ASP, 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.mode"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_REDUCE, 2, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.staleness"));
    enum ts_mode m;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_mode_parse("bulk", &m, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "bsp, ssp, asp, reduce"));
    assert_int_equal(ts_mode_parse("ssp", &m, NULL), TS_OK);
    assert_int_equal(m, TS_MODE_SSP);
}

/* What the shard reads of a partition through part.h: placement, version, values in place,
 * a restore, and a snapshot capture. */
static ts_status load_ramp(void *ctx, float *value, float *state, uint64_t *updates,
                          struct ts_err *err)
{
    (void)err;
    (void)updates;   /* a snapshot without a count: the one the version implies */
    for (int i = 0; i < N; i++) {
        value[i] = (float)i * 0.5f;
        state[i] = *(const float *)ctx;  /* momentum: one state float per value */
    }
    return TS_OK;
}

static ts_status load_fails(void *ctx, float *value, float *state, uint64_t *updates,
                           struct ts_err *err)
{
    (void)ctx;
    (void)value;
    (void)state;
    *updates = 1;   /* written, then the load fails: nothing taken */
    return ts_err_set(err, TS_ECORRUPT, "chunk 3: hash mismatch");
}

static void accessors(void **state)
{
    struct ts_job j = { 0 };
    struct ts_part *p, *q;
    struct ts_err e = { 0 };
    const float *val, *st;
    float mom = 0.25f, out[N];
    struct ts_pull_info info;
    uint64_t updates;

    (void)state;
    assert_int_equal(ts_job_init(&j, "acc", 1, false, "momentum:lr=0.1,momentum=0.9", 4, &e),
                     TS_OK);
    p = mk(&j);
    assert_int_equal(ts_part_index(p), 1);
    assert_int_equal(ts_part_offset(p), 500);
    assert_int_equal(ts_part_len(p), N);
    assert_int_equal(ts_part_version(p), 0);
    /* A restore loads values and state and sets the version; a failing one leaves it. */
    assert_int_equal(ts_part_restore(p, 12, load_ramp, &mom, &e), TS_OK);
    assert_int_equal(ts_part_version(p), 12);
    assert_int_equal(ts_part_updates(p), 12);
    assert_int_equal(ts_part_pull(p, 0, 12, 0, 10, NULL, NULL, &info, NULL), TS_OK);
    val = ts_part_values(p);
    for (int i = 0; i < N; i++)
        assert_true(val[i] == (float)i * 0.5f);
    assert_int_equal(ts_part_restore(p, 99, load_fails, NULL, &e), TS_ECORRUPT);
    assert_string_equal(e.msg, "chunk 3: hash mismatch");
    assert_int_equal(ts_part_version(p), 12);
    assert_int_equal(ts_part_updates(p), 12);
    /* The capture of an armed partition is the values and state at the armed version. */
    assert_int_equal(ts_part_arm(p, 12, NULL), TS_OK);
    assert_true(ts_part_captured(p, 10));
    ts_part_capture(p, &val, &st, &updates);
    assert_int_equal(updates, 12);
    assert_int_equal(ts_part_pull(p, 0, 12, 0, 10, NULL, out, &info, NULL), TS_OK);
    assert_memory_equal(val, out, sizeof(out));
    for (int i = 0; i < N; i++)
        assert_true(st[i] == 0.25f);
    ts_part_disarm(p);
    /* BSP keeps no clocks: folding leaves the caller's arrays as they were. */
    q = mk(&j);
    uint64_t clock[1] = { UINT64_MAX }, last[1] = { 5 }, most[1] = { 6 };
    struct ts_part_ranks rk = { 1, clock, last, most, 3 };
    ts_part_fold_ranks(q, &rk);
    assert_true(clock[0] == UINT64_MAX && last[0] == 5 && most[0] == 6);
    assert_int_equal(rk.skipped, 3);   /* the most skipped: this one skipped none */
    ts_part_free(q);
    ts_part_free(p);
}

/* A push of rank r at step with payload g (n floats), as member m, retry or not. */
static ts_status push_as(struct ts_part *p, uint32_t r, uint64_t step, const float *g, size_t n,
                         uint32_t m, bool retry, uint64_t sum, struct ts_err *e)
{
    struct ts_push in = { .rank = r, .step = step, .encoding = TS_ENC_RAW, .payload = g,
                          .bytes = n * sizeof(float), .retry = retry, .member = m,
                          .payload_sum = sum };
    bool applied;

    return ts_part_push(p, &in, &applied, e);
}

/* Duplicates (part.h): a push of a counted slot and step is a retry only with the same bytes.
 * A forged push that came first makes the real one a conflict (refused, counted by the
 * caller), never a silent duplicate; a different payload after the real one is refused too,
 * within the step and after it was applied; the same bytes are the retry they always were.
 * Another member's push of the slot is an elastic hand-over, acknowledged in float mode and
 * compared in exact mode. Whatever is refused changes nothing: the step sums what was
 * counted, once. */
static void duplicates_must_carry_the_same_bytes(void **state)
{
    struct ts_job j = job(2, false, "sgd:lr=1");
    struct ts_part *p = mk(&j), *ref = mk(&j);
    static float real[N], forged[N], other[N], got[N], want[N];
    struct ts_err e = { 0 };
    uint64_t v;

    (void)state;
    for (int i = 0; i < N; i++) {
        real[i] = (float)(i % 5) * 0.25f;
        forged[i] = -real[i] - 1.0f;
        other[i] = (float)(i % 3);
    }
    /* The forger pushes rank 0's step first, as rank 0's member (7). */
    assert_int_equal(push_as(p, 0, 0, forged, N, 7, false, 0, NULL), TS_OK);
    assert_int_equal(push_as(p, 0, 0, real, N, 7, true, 0, &e), TS_EPERM);
    assert_non_null(strstr(e.msg, "differs from the one counted"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(push_as(p, 0, 0, real, N, 7, false, 0, &e), TS_EPERM);
    assert_int_equal(push_as(p, 0, 0, forged, N, 7, true, 0, NULL), TS_OK);   /* a retry */
    assert_int_equal(push_as(p, 0, 0, forged, N, 7, false, 0, NULL), TS_ESTATE);
    assert_int_equal(ts_part_version(p), 0);
    /* Another member's push of the slot: a hand-over, acknowledged and not added. */
    assert_int_equal(push_as(p, 0, 0, real, N, 9, true, 0, NULL), TS_OK);
    assert_int_equal(push_as(p, 1, 0, other, N, 8, false, 0, NULL), TS_OK);
    assert_int_equal(ts_part_version(p), 1);
    assert_int_equal(push_as(ref, 0, 0, forged, N, 0, false, 0, NULL), TS_OK);
    assert_int_equal(push_as(ref, 1, 0, other, N, 0, false, 0, NULL), TS_OK);
    assert_int_equal(read_at(p, 1, 10, got, &v, NULL), TS_OK);
    assert_int_equal(read_at(ref, 1, 10, want, &v, NULL), TS_OK);
    assert_memory_equal(got, want, sizeof(got));
    /* After the step was applied: step 0 again, other bytes refused, the same ones a retry. */
    assert_int_equal(push_as(p, 1, 0, real, N, 8, true, 0, NULL), TS_EPERM);
    assert_int_equal(push_as(p, 1, 0, other, N, 8, true, 0, NULL), TS_OK);
    /* Without a member (a caller that knows none) the bytes are compared all the same. */
    assert_int_equal(push_as(p, 1, 0, real, N, 0, true, 0, NULL), TS_EPERM);
    assert_int_equal(ts_part_version(p), 1);
    assert_int_equal(read_at(p, 1, 10, got, &v, NULL), TS_OK);
    assert_memory_equal(got, want, sizeof(got));
    ts_part_free(p);
    ts_part_free(ref);
    /* Exact mode: every owner of a slot computes the same bits, so another member's different
     * push of it is refused too; its same bytes are the hand-over they always were. */
    {
        struct ts_job je = job(2, true, "sgd:lr=1");
        struct ts_part *q = mk(&je);
        static int64_t a[N], b[N];
        struct ts_push in = { .rank = 0, .step = 0, .encoding = TS_ENC_FIXED, .payload = a,
                              .bytes = sizeof(a), .member = 7 };
        bool applied;

        grad(0, a);
        grad(1, b);
        assert_int_equal(ts_part_push(q, &in, &applied, NULL), TS_OK);
        in.member = 9;
        in.retry = true;
        in.payload = b;
        assert_int_equal(ts_part_push(q, &in, &applied, NULL), TS_EPERM);
        in.payload = a;
        assert_int_equal(ts_part_push(q, &in, &applied, NULL), TS_OK);
        assert_int_equal(ts_part_version(q), 0);
        ts_part_free(q);
    }
}

/* A payload above the whole-hash size is sampled: a different gradient (different nearly
 * everywhere) is refused; where the transport verified a checksum of the whole payload, a
 * difference in one element is refused too, whatever the samples saw. */
static void large_duplicates_are_sampled_and_checksummed(void **state)
{
    enum { BIG = 100000 };   /* 400 KB of floats: sampled */
    struct ts_job j;
    struct ts_part *p;
    float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));

    (void)state;
    assert_int_equal(ts_job_init(&j, "t", 2, false, "sgd:lr=1", 64, NULL), TS_OK);
    assert_int_equal(ts_part_create(&j, 0, "w", 0, 0, BIG, "zeros", 1, 0, 0, NULL, &p, NULL),
                     TS_OK);
    for (int i = 0; i < BIG; i++) {
        a[i] = (float)(i % 11) * 0.5f;
        b[i] = a[i] + 1.0f;
    }
    assert_int_equal(push_as(p, 0, 0, a, BIG, 3, false, 111, NULL), TS_OK);
    assert_int_equal(push_as(p, 0, 0, b, BIG, 3, true, 0, NULL), TS_EPERM);
    assert_int_equal(push_as(p, 0, 0, a, BIG, 3, true, 111, NULL), TS_OK);
    memcpy(b, a, BIG * sizeof(float));
    b[BIG / 2 + 1] += 1.0f;
    assert_int_equal(push_as(p, 0, 0, b, BIG, 3, true, 222, NULL), TS_EPERM);
    assert_int_equal(ts_part_version(p), 0);
    free(a);
    free(b);
    ts_part_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_sum_ignores_arrival_order),
        cmocka_unit_test(init_is_placement_independent),
        cmocka_unit_test(bad_pushes_change_nothing),
        cmocka_unit_test(read_waits_then_times_out),
        cmocka_unit_test(job_validation),
        cmocka_unit_test(ssp_bounds_the_lead),
        cmocka_unit_test(async_snapshot_is_one_cut),
        cmocka_unit_test(sync_period_snapshot_on_its_syncs),
        cmocka_unit_test(async_sync_period_snapshot_on_its_syncs),
        cmocka_unit_test(reduce_returns_the_mean_gradient),
        cmocka_unit_test(overflow_skips_and_scale_divides),
        cmocka_unit_test(accessors),
        cmocka_unit_test(duplicates_must_carry_the_same_bytes),
        cmocka_unit_test(large_duplicates_are_sampled_and_checksummed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
