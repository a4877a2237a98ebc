/* test_part_clip.c - clipping by global norm in a partition (lib/ps/part.h, "Clipping"): a
 * held step is summed and not applied, its sum of squares is that of the averaged gradient,
 * and the update, once every rank's apply came, is the optimizer's on gradient times coef;
 * exact mode gives the same norm and bits for one worker or two; every misuse is refused with
 * nothing changed. References are computed here with ts_optim_apply_range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "part_test.h"
#include "tensor/tensor.h"

#define N 5000   /* more than one apply block */

static struct ts_job job(uint32_t workers, bool exact, enum ts_mode mode)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "t", workers, exact, "momentum:lr=0.1,momentum=0.9", 2,
                                 NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, mode, 0, NULL), TS_OK);
    return j;
}

static struct ts_part *mk(const struct ts_job *j)
{
    struct ts_part *p;
    assert_int_equal(ts_part_create(j, 2, "w", 0, 0, N, "normal:0.1", 5, 0, 0, NULL, &p,
                                    NULL), TS_OK);
    return p;
}

static void gradient(float *g, float k)
{
    for (int i = 0; i < N; i++)
        g[i] = k * (float)((i * 7) % 23 - 11) / 8.0f;
}

static ts_status hold(struct ts_part *p, uint32_t rank, uint64_t s, unsigned enc, const void *g,
                      size_t bytes, bool *applied, struct ts_err *e)
{
    struct ts_push in = { .rank = rank, .step = s, .encoding = enc, .payload = g,
                          .bytes = bytes, .hold = true };
    return ts_part_push(p, &in, applied, e);
}

static ts_status apply(struct ts_part *p, uint32_t rank, uint64_t s, float coef, bool retry,
                       bool *applied, struct ts_err *e)
{
    struct ts_push in = { .rank = rank, .step = s, .apply = true, .coef = coef,
                          .retry = retry };
    return ts_part_push(p, &in, applied, e);
}

static double norm(struct ts_part *p, uint64_t s, int ms, ts_status want)
{
    double sumsq = -1;
    struct ts_err e = { 0 };
    assert_int_equal(ts_part_norm(p, 0, s, 0, ms, NULL, &sumsq, &e), want);
    return sumsq;
}

static void values(struct ts_part *p, uint64_t version, float *out)
{
    uint64_t v;
    assert_int_equal(read_at(p, version, 10, out, &v, NULL), TS_OK);
    assert_int_equal(v, version);
}

/* Float, two ranks: the sum of squares is the averaged gradient's, and the update uses it
 * times coef, once both ranks applied with the same coef. */
static void held_step_applies_clipped(void **state)
{
    (void)state;
    struct ts_job j = job(2, false, TS_MODE_BSP);
    struct ts_part *p = mk(&j);
    static float g0[N], g1[N], g[N], v0[N], ref[N], st[N], got[N];
    double want = 0, fdiv;
    float inv, coef = 0.375f;
    bool applied;
    struct ts_err e = { 0 };

    gradient(g0, 1.0f);
    gradient(g1, -0.25f);
    values(p, 0, v0);
    fdiv = 2.0;
    inv = (float)(1.0 / fdiv);
    for (int i = 0; i < N; i++) {
        g[i] = (g0[i] + g1[i]) * inv;
        want += (double)g[i] * g[i];
    }
    assert_int_equal(hold(p, 0, 0, TS_ENC_RAW, g0, sizeof(g0), &applied, NULL), TS_OK);
    assert_false(applied);
    norm(p, 0, 20, TS_ETIMEDOUT);            /* rank 1 has not pushed */
    assert_int_equal(hold(p, 1, 0, TS_ENC_RAW, g1, sizeof(g1), &applied, NULL), TS_OK);
    assert_false(applied);                   /* held: not applied */
    assert_true(norm(p, 0, 10, TS_OK) == want);
    assert_int_equal(ts_part_version(p), 0);

    assert_int_equal(apply(p, 0, 0, coef, false, &applied, NULL), TS_OK);
    assert_false(applied);
    /* Another coef from rank 1 is refused, nothing changed; rank 0 again with another: EPERM;
     * a retry of rank 0's own: a duplicate. */
    assert_int_equal(apply(p, 1, 0, 0.5f, false, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "coef"));
    assert_int_equal(apply(p, 0, 0, 0.5f, true, &applied, NULL), TS_EPERM);
    assert_int_equal(apply(p, 0, 0, coef, true, &applied, NULL), TS_OK);
    assert_false(applied);
    assert_int_equal(ts_part_version(p), 0);
    assert_int_equal(apply(p, 1, 0, coef, false, &applied, NULL), TS_OK);
    assert_true(applied);

    memcpy(ref, v0, sizeof(ref));
    memset(st, 0, sizeof(st));
    for (int i = 0; i < N; i++)
        g[i] *= coef;
    ts_optim_apply_range(&j.optim, 1, ref, st, N, 0, g, N);
    values(p, 1, got);
    assert_memory_equal(got, ref, sizeof(ref));
    /* The step is gone: its norm too; a retry of an apply is a duplicate. */
    norm(p, 0, 10, TS_ESTATE);
    assert_int_equal(apply(p, 1, 0, coef, true, &applied, NULL), TS_OK);
    assert_false(applied);
    ts_part_free(p);
}

/* Exact mode: one worker pushing the sum, or two pushing their own, hold the same norm and
 * end on the same bits. */
static void exact_norm_is_the_same_for_any_worker_count(void **state)
{
    (void)state;
    struct ts_job j1 = job(1, true, TS_MODE_BSP), j2 = job(2, true, TS_MODE_BSP);
    struct ts_part *p1 = mk(&j1), *p2 = mk(&j2);
    static float g0[N], g1[N], a[N], b[N];
    static int64_t x0[N], x1[N], sum[N];
    bool applied;
    double n1, n2;

    gradient(g0, 1.5f);
    gradient(g1, 0.125f);
    assert_int_equal(ts_fixed_from_f32(g0, N, x0, NULL), TS_OK);
    assert_int_equal(ts_fixed_from_f32(g1, N, x1, NULL), TS_OK);
    memcpy(sum, x0, sizeof(sum));
    assert_int_equal(ts_fixed_add(sum, x1, N, NULL), TS_OK);
    assert_int_equal(hold(p1, 0, 0, TS_ENC_FIXED, sum, sizeof(sum), &applied, NULL), TS_OK);
    assert_int_equal(hold(p2, 1, 0, TS_ENC_FIXED_F32, g1, sizeof(g1), &applied, NULL), TS_OK);
    assert_int_equal(hold(p2, 0, 0, TS_ENC_FIXED_F32, g0, sizeof(g0), &applied, NULL), TS_OK);
    n1 = norm(p1, 0, 10, TS_OK);
    n2 = norm(p2, 0, 10, TS_OK);
    assert_memory_equal(&n1, &n2, sizeof(n1));
    assert_true(n1 > 0);
    assert_int_equal(apply(p1, 0, 0, 0.25f, false, &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(apply(p2, 1, 0, 0.25f, false, &applied, NULL), TS_OK);
    assert_int_equal(apply(p2, 0, 0, 0.25f, false, &applied, NULL), TS_OK);
    assert_true(applied);
    values(p1, 1, a);
    values(p2, 1, b);
    assert_memory_equal(a, b, sizeof(a));
    ts_part_free(p1);
    ts_part_free(p2);
}

/* Misuse is refused and changes nothing: the step goes on as if it had not come. */
static void misuse_is_refused(void **state)
{
    (void)state;
    struct ts_job j = job(2, false, TS_MODE_BSP), ja = job(2, false, TS_MODE_ASP);
    struct ts_part *p = mk(&j), *pa = mk(&ja);
    static float g[N], v0[N], v1[N];
    bool applied;
    struct ts_err e = { 0 };

    gradient(g, 1.0f);
    values(p, 0, v0);
    /* An apply before the rank's held push; a coef out of range. */
    assert_int_equal(apply(p, 0, 0, 0.5f, false, &applied, &e), TS_ESTATE);
    assert_int_equal(hold(p, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    ts_err_clear(&e);
    assert_int_equal(apply(p, 0, 0, 1.5f, false, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "coef"));
    /* The other rank pushes unclipped: refused. Then held, as it should. */
    ts_err_clear(&e);
    assert_int_equal(push(p, 1, 0, TS_ENC_RAW, g, sizeof(g), &applied, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "clips the same steps"));
    assert_int_equal(hold(p, 1, 0, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(apply(p, 0, 1, 1.0f, false, &applied, NULL), TS_EINVAL);   /* a step ahead */
    assert_int_equal(apply(p, 0, 0, 1.0f, false, &applied, NULL), TS_OK);
    assert_int_equal(apply(p, 0, 0, 1.0f, false, &applied, NULL), TS_ESTATE);   /* twice */
    assert_int_equal(apply(p, 1, 0, 1.0f, false, &applied, NULL), TS_OK);
    assert_true(applied);
    values(p, 1, v1);
    assert_memory_not_equal(v0, v1, sizeof(v0));
    /* Unclipped steps go on as before; a step's first push decides. */
    assert_int_equal(push(p, 0, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(hold(p, 1, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_ESTATE);
    assert_int_equal(push(p, 1, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_true(applied);
    norm(p, 1, 10, TS_ESTATE);
    /* Not in asp. */
    ts_err_clear(&e);
    assert_int_equal(hold(pa, 0, 0, TS_ENC_RAW, g, sizeof(g), &applied, &e), TS_ENOTSUP);
    assert_non_null(strstr(e.msg, "bsp"));
    ts_part_free(p);
    ts_part_free(pa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(held_step_applies_clipped),
        cmocka_unit_test(exact_norm_is_the_same_for_any_worker_count),
        cmocka_unit_test(misuse_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
