/* test_part_assign.c - what a push carries besides a gradient (lib/ps/part.h): assignments, a
 * step whose pushes set the values instead of a gradient (an "assigned" tensor's Adam counts
 * from its assignment, as torch.optim does from the model's weights), and the step's learning
 * rate and weight decay switch; what is refused, and that a refusal changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "part_test.h"

#define N 1000

static struct ts_job job(uint32_t workers, bool exact, const char *opt, const char *mode)
{
    struct ts_job j;
    enum ts_mode m;
    assert_int_equal(ts_job_init(&j, "t", workers, exact, opt, 1, NULL), TS_OK);
    assert_int_equal(ts_mode_parse(mode, &m, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, m, 0, NULL), TS_OK);
    return j;
}

static struct ts_part *mk(const struct ts_job *j, const char *init)
{
    struct ts_part *p;
    assert_int_equal(ts_part_create(j, 3, "w", 1, 500, N, init, 7, 0, 0, NULL, &p, NULL), TS_OK);
    return p;
}

static ts_status assign(struct ts_part *p, uint32_t rank, uint64_t step, const float *v,
                        bool *applied, struct ts_err *e)
{
    struct ts_push in = { .rank = rank, .step = step, .encoding = TS_ENC_RAW, .payload = v,
                          .bytes = v ? N * sizeof(float) : 0, .assign = true };
    return ts_part_push(p, &in, applied, e);
}

static void values_of(struct ts_part *p, uint64_t version, float *out)
{
    uint64_t v;
    assert_int_equal(read_at(p, version, 10, out, &v, NULL), TS_OK);
    assert_int_equal(v, version);
}

static void given(float *v, float k)
{
    for (int i = 0; i < N; i++)
        v[i] = k * (float)(i % 13 - 6) + 0.25f;
}

/* Float and exact: the assignment of step 0 makes version 1 the given values, whichever rank
 * gives them and in whatever order the ranks push. */
static void assignment_is_the_next_version(void **state)
{
    static float v[N], got[N];
    (void)state;
    given(v, 0.5f);
    for (int exact = 0; exact < 2; exact++) {
        struct ts_job j = job(3, exact, "momentum:lr=0.1", "bsp");
        struct ts_part *p = mk(&j, "assigned");
        bool applied;
        values_of(p, 0, got);
        for (int i = 0; i < N; i++)
            assert_true(got[i] == 0.0f);
        assert_int_equal(assign(p, 2, 0, NULL, &applied, NULL), TS_OK);
        assert_false(applied);
        assert_int_equal(assign(p, 0, 0, v, &applied, NULL), TS_OK);
        assert_false(applied);
        assert_int_equal(assign(p, 1, 0, NULL, &applied, NULL), TS_OK);
        assert_true(applied);
        values_of(p, 1, got);
        assert_memory_equal(got, v, sizeof(v));
        ts_part_free(p);
    }
}

/* Adam on an "assigned" tensor: the first gradient after the assignment is update 1, so the
 * values are those of ts_optim_apply(t = 1) from the given ones, torch.optim.Adam's first
 * step; a tensor initialised otherwise counts its versions from 0, as before. */
static void adam_counts_from_the_assignment(void **state)
{
    struct ts_job j = job(1, false, "adam:lr=0.01", "bsp");
    struct ts_part *p = mk(&j, "assigned");
    static float v[N], g[N], want[N], st[2 * N], got[N];
    bool applied;
    (void)state;
    given(v, 1.5f);
    given(g, -0.125f);
    assert_int_equal(assign(p, 0, 0, v, &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(push(p, 0, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    assert_true(applied);
    memcpy(want, v, sizeof(v));
    memset(st, 0, sizeof(st));
    ts_optim_apply(&j.optim, 1, want, st, g, N);
    values_of(p, 2, got);
    assert_memory_equal(got, want, sizeof(want));
    ts_part_free(p);
}

/* An assignment with no values anywhere (a frozen parameter's step) leaves the values and the
 * optimizer state exactly as they were: the next gradient step gives the bits of a partition
 * that never saw it (momentum's state included). */
static void no_values_keeps_everything(void **state)
{
    struct ts_job j = job(2, true, "momentum:lr=0.1,weight_decay=0.5", "bsp");
    struct ts_part *p = mk(&j, "normal:0.1"), *ref = mk(&j, "normal:0.1");
    static float g[N], a[N], b[N];
    static int64_t fx[N];
    bool applied;
    (void)state;
    given(g, 0.01f);
    assert_int_equal(ts_fixed_from_f32(g, N, fx, NULL), TS_OK);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(push(p, (uint32_t)r, 0, TS_ENC_FIXED, fx, sizeof(fx), &applied, NULL),
                         TS_OK);
        assert_int_equal(push(ref, (uint32_t)r, 0, TS_ENC_FIXED, fx, sizeof(fx), &applied,
                              NULL), TS_OK);
    }
    values_of(p, 1, a);
    for (int r = 0; r < 2; r++)
        assert_int_equal(assign(p, (uint32_t)r, 1, NULL, &applied, NULL), TS_OK);
    assert_true(applied);
    values_of(p, 2, b);
    assert_memory_equal(a, b, sizeof(a));   /* frozen: weight decay did not move it */
    for (int r = 0; r < 2; r++) {
        assert_int_equal(push(p, (uint32_t)r, 2, TS_ENC_FIXED, fx, sizeof(fx), &applied, NULL),
                         TS_OK);
        assert_int_equal(push(ref, (uint32_t)r, 1, TS_ENC_FIXED, fx, sizeof(fx), &applied,
                              NULL), TS_OK);
    }
    values_of(p, 3, a);
    values_of(ref, 2, b);
    assert_memory_equal(a, b, sizeof(a));
    ts_part_free(p);
    ts_part_free(ref);
}

/* Refused, each naming what is wrong, and then the step completes as if it had not come. */
static void bad_assignments_change_nothing(void **state)
{
    struct ts_job j = job(2, true, "sgd:lr=0.1", "bsp");
    struct ts_part *p = mk(&j, "assigned"), *mixed = mk(&j, "assigned");
    static float v[N], w[N], got[N];
    static int64_t fx[N];
    struct ts_push bad_enc = { .rank = 1, .step = 0, .encoding = TS_ENC_FIXED, .payload = fx,
                               .bytes = sizeof(fx), .assign = true };
    struct ts_push short_v = { .rank = 1, .step = 0, .encoding = TS_ENC_RAW, .payload = v,
                               .bytes = sizeof(v) - 4, .assign = true };
    struct ts_push scaled = { .rank = 1, .step = 0, .encoding = TS_ENC_RAW, .assign = true,
                              .scale_exp = 3 };
    struct ts_err e = { 0 };
    bool applied;
    (void)state;
    given(v, 2.0f);
    given(w, 3.0f);
    assert_int_equal(assign(p, 0, 0, v, &applied, NULL), TS_OK);
    memset(&e, 0, sizeof(e));
    assert_int_equal(assign(p, 1, 0, w, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "which rank 0's assignment gave already"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &bad_enc, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "raw float32 values"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &short_v, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "payload"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &scaled, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "unscaled"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(push(p, 1, 0, TS_ENC_FIXED, fx, sizeof(fx), &applied, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "every rank assigns at the same step"));
    assert_int_equal(assign(p, 1, 0, NULL, &applied, NULL), TS_OK);
    assert_true(applied);
    values_of(p, 1, got);
    assert_memory_equal(got, v, sizeof(v));

    /* Gradients first, then an assignment: refused the same way. */
    assert_int_equal(push(mixed, 0, 0, TS_ENC_FIXED, fx, sizeof(fx), &applied, NULL), TS_OK);
    memset(&e, 0, sizeof(e));
    assert_int_equal(assign(mixed, 1, 0, v, &applied, &e), TS_ESTATE);
    assert_false(applied);
    ts_part_free(p);
    ts_part_free(mixed);

    /* Not bsp: "assigned" is refused at creation, an assignment at the push. */
    struct ts_job a = job(2, false, "sgd:lr=0.1", "asp");
    struct ts_part *q;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_create(&a, 3, "w", 1, 500, N, "assigned", 7, 0, 0, NULL, &q, &e),
                     TS_EINVAL);
    assert_non_null(strstr(e.msg, "assigned needs mode bsp"));
    q = mk(&a, "zeros");
    memset(&e, 0, sizeof(e));
    assert_int_equal(assign(q, 0, 0, v, &applied, &e), TS_ENOTSUP);
    assert_non_null(strstr(e.msg, "mode asp"));
    ts_part_free(q);
}

/* A push's learning rate and weight decay switch make the step's update: the bits of the
 * optimizer with that lr and no decay; ranks that disagree are refused by name. */
static void push_lr_and_decay(void **state)
{
    struct ts_job j = job(2, false, "adamw:lr=0.01,weight_decay=0.1", "bsp");
    struct ts_part *p = mk(&j, "assigned");
    static float v[N], g[N], want[N], st[2 * N], got[N];
    struct ts_push in = { .step = 1, .encoding = TS_ENC_RAW, .payload = g, .bytes = sizeof(g),
                          .lr = 0.003f, .no_decay = true };
    struct ts_optim_cfg cfg = j.optim;
    struct ts_err e = { 0 };
    bool applied;
    (void)state;
    given(v, 1.5f);
    given(g, -0.125f);
    assert_int_equal(assign(p, 0, 0, v, &applied, NULL), TS_OK);
    assert_int_equal(assign(p, 1, 0, NULL, &applied, NULL), TS_OK);
    in.rank = 0;
    assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    in.rank = 1;
    in.lr = 0.004f;
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "need the same learning rate"));
    in.lr = 0.003f;
    in.no_decay = false;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);
    in.no_decay = true;
    in.lr = -1;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "finite float > 0"));
    in.lr = 0.003f;
    assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    assert_true(applied);
    /* The sum of two pushes of g over batch 1 is 2g: what the optimizer gets. */
    for (int i = 0; i < N; i++)
        g[i] = g[i] + g[i];
    memcpy(want, v, sizeof(v));
    memset(st, 0, sizeof(st));
    cfg.lr = 0.003f;
    cfg.weight_decay = 0;
    ts_optim_apply(&cfg, 1, want, st, g, N);
    values_of(p, 2, got);
    assert_memory_equal(got, want, sizeof(want));
    ts_part_free(p);
}

/* An assignment with the optimizer's state (a checkpoint's resume): the next update starts
 * from that state; ts_part_read_state gives it back at its version only; state without
 * values, or of the wrong length, is refused. */
static void assignment_with_state(void **state)
{
    struct ts_job j = job(2, false, "momentum:lr=0.5,momentum=0.5", "bsp");
    struct ts_part *p = mk(&j, "assigned");
    static float both[2 * N], got[N], st[N], g[N];
    struct ts_push in = { .rank = 0, .step = 0, .encoding = TS_ENC_RAW, .payload = both,
                          .bytes = sizeof(both), .assign = true, .state = true };
    struct ts_err e = { 0 };
    bool applied;
    (void)state;
    given(both, 1.0f);
    for (int i = 0; i < N; i++)
        both[N + i] = 4.0f;   /* the momentum buffer */
    in.bytes = sizeof(float) * N;
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);   /* state missing */
    in.bytes = sizeof(both);
    in.payload = NULL;
    in.bytes = 0;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);   /* no values */
    assert_non_null(strstr(e.msg, "comes with the values"));
    in.payload = both;
    in.bytes = sizeof(both);
    assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
    assert_int_equal(assign(p, 1, 0, NULL, &applied, NULL), TS_OK);
    assert_true(applied);
    assert_int_equal(ts_part_read_state(p, 1, st, NULL, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        assert_true(st[i] == 4.0f);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_read_state(p, 0, st, NULL, &e), TS_ESTATE);
    memset(g, 0, sizeof(g));
    for (uint32_t r = 0; r < 2; r++)
        assert_int_equal(push(p, r, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
    values_of(p, 2, got);
    for (int i = 0; i < N; i++)   /* v = 0.5 * 4 + 0 = 2; p -= 0.5 * 2 */
        assert_true(got[i] == both[i] - 1.0f);
    ts_part_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(assignment_is_the_next_version),
        cmocka_unit_test(adam_counts_from_the_assignment),
        cmocka_unit_test(no_values_keeps_everything),
        cmocka_unit_test(bad_assignments_change_nothing),
        cmocka_unit_test(push_lr_and_decay),
        cmocka_unit_test(assignment_with_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
