/* test_part_updates.c - a partition's optimizer update count (lib/ps/part.h, "Update count"):
 * the t of Adam's and AdamW's bias correction is the updates applied + 1, not the version, so
 * that an assignment mid-run does not move it; a state assignment that gives a count resumes
 * at that count (a checkpoint's resume); a rollback, a restore, a snapshot's capture, an image
 * and a seed carry it, and a snapshot without one restores as the version implies. Every
 * reference is ts_optim_apply_range with the t the update must have, and each case checks that
 * the t the version would give makes other bits, so that none passes by accident. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "part_test.h"

#define N 1000

static const char *const adams[] = { "adam:lr=0.01", "adamw:lr=0.01" };

static struct ts_job job(uint32_t workers, const char *opt, enum ts_mode mode)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "t", workers, false, opt, 1, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, mode, 0, NULL), TS_OK);
    return j;
}

static struct ts_part *mk(const struct ts_job *j, const char *init)
{
    struct ts_part *p;
    assert_int_equal(ts_part_create(j, 3, "w", 1, 500, N, init, 7, 0, 0, NULL, &p, NULL), TS_OK);
    return p;
}

static void given(float *v, float k)
{
    for (int i = 0; i < N; i++)
        v[i] = k * (float)(i % 13 - 6) + 0.25f;
}

/* Every rank's push of gradient g for step s (1 worker, batch 1: the update's gradient is g). */
static void gradient_step(struct ts_part *p, uint64_t s, const float *g)
{
    bool applied;
    assert_int_equal(push(p, 0, s, TS_ENC_RAW, g, N * sizeof(float), &applied, NULL), TS_OK);
    assert_true(applied);
}

/* Rank's push of an assignment of step s: values (NULL: none), with state if given, with the
 * update count if counted. */
static ts_status assign(struct ts_part *p, uint32_t rank, uint64_t s, const float *values,
                        const float *state, bool counted, uint64_t updates, bool *applied,
                        struct ts_err *e)
{
    static float both[3 * N];
    struct ts_push in = { .rank = rank, .step = s, .encoding = TS_ENC_RAW, .assign = true,
                          .has_updates = counted, .updates = updates };
    if (values) {
        memcpy(both, values, N * sizeof(float));
        if (state)
            memcpy(both + N, state, 2 * N * sizeof(float));
        in.payload = both;
        in.bytes = (state ? 3 : 1) * N * sizeof(float);
        in.state = state != NULL;
    }
    return ts_part_push(p, &in, applied, e);
}

static void values_at(struct ts_part *p, uint64_t version, float *out)
{
    uint64_t v;
    assert_int_equal(read_at(p, version, 10, out, &v, NULL), TS_OK);
    assert_int_equal(v, version);
}

/* ref (values) and st (state) after update t with gradient g: the reference. */
static void reference(const struct ts_job *j, uint64_t t, float *ref, float *st, const float *g)
{
    ts_optim_apply_range(&j->optim, t, ref, st, N, 0, g, N);
}

/* (a) Three updates, then an assignment of new values mid-run (load_state_dict without
 * optimizer state): the next update is update 4 with the optimizer state of the three, not
 * update 5 (the version), bit for bit. */
static void assignment_mid_run_keeps_the_count(void **state)
{
    static float v[N], g[N], ref[N], st[2 * N], got[N], wrong[N], wst[2 * N];
    (void)state;
    for (size_t k = 0; k < 2; k++) {
        struct ts_job j = job(1, adams[k], TS_MODE_BSP);
        struct ts_part *p = mk(&j, "normal:0.1");
        bool applied;
        values_at(p, 0, ref);
        memset(st, 0, sizeof(st));
        for (uint64_t s = 0; s < 3; s++) {
            given(g, 0.1f * (float)(s + 1));
            gradient_step(p, s, g);
            reference(&j, s + 1, ref, st, g);
        }
        assert_int_equal(ts_part_updates(p), 3);
        given(v, 1.5f);
        assert_int_equal(assign(p, 0, 3, v, NULL, false, 0, &applied, NULL), TS_OK);
        assert_true(applied);
        assert_int_equal(ts_part_version(p), 4);
        assert_int_equal(ts_part_updates(p), 3);   /* an assignment is no update */
        memcpy(ref, v, sizeof(v));
        memcpy(wrong, v, sizeof(v));
        memcpy(wst, st, sizeof(st));
        given(g, -0.3f);
        gradient_step(p, 4, g);
        reference(&j, 4, ref, st, g);
        reference(&j, 5, wrong, wst, g);   /* t from the version: what it was before */
        values_at(p, 5, got);
        assert_memory_equal(got, ref, sizeof(ref));
        assert_memory_not_equal(got, wrong, sizeof(wrong));
        assert_int_equal(ts_part_updates(p), 4);
        ts_part_free(p);
    }
}

/* (b) A state assignment with a count (a checkpoint of a run 7 updates in) into a fresh job's
 * "assigned" tensor: the next update is update 8 from that state; ts_part_read_state gives the
 * count back with the state. Without a count the tensor keeps its own (here 0: update 1).
 * A count from a rank without values is refused, nothing changed. */
static void state_assignment_sets_the_count(void **state)
{
    static float v[N], ms[2 * N], g[N], g2[N], ref[N], st[2 * N], got[N], wrong[N], wst[2 * N];
    struct ts_err e = { 0 };
    uint64_t u = 99;
    bool applied;
    (void)state;
    given(v, 0.75f);
    given(ms, 0.01f);
    for (int i = 0; i < N; i++)
        ms[N + i] = 1e-4f * (float)(i % 7 + 1);   /* v, the second moment, > 0 */
    given(g, 0.2f);
    for (int i = 0; i < N; i++)
        g2[i] = g[i] + g[i];   /* two ranks push g, batch 1 */
    for (size_t k = 0; k < 2; k++) {
        struct ts_job j = job(2, adams[k], TS_MODE_BSP);
        struct ts_part *p = mk(&j, "assigned"), *own = mk(&j, "assigned");
        memset(&e, 0, sizeof(e));
        assert_int_equal(assign(p, 1, 0, NULL, NULL, true, 7, &applied, &e), TS_EINVAL);
        assert_non_null(strstr(e.msg, "update count comes with the values"));
        assert_int_equal(assign(p, 1, 0, NULL, NULL, false, 0, &applied, NULL), TS_OK);
        assert_int_equal(assign(p, 0, 0, v, ms, true, 7, &applied, NULL), TS_OK);
        assert_true(applied);
        assert_int_equal(ts_part_updates(p), 7);
        assert_int_equal(ts_part_read_state(p, 1, st, &u, NULL), TS_OK);
        assert_int_equal(u, 7);
        assert_memory_equal(st, ms, sizeof(ms));
        for (uint32_t r = 0; r < 2; r++)
            assert_int_equal(push(p, r, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
        memcpy(ref, v, sizeof(v));
        memcpy(wrong, v, sizeof(v));
        memcpy(wst, ms, sizeof(ms));
        reference(&j, 8, ref, st, g2);
        reference(&j, 1, wrong, wst, g2);   /* what the version gave: t restarted */
        values_at(p, 2, got);
        assert_memory_equal(got, ref, sizeof(ref));
        assert_memory_not_equal(got, wrong, sizeof(wrong));
        assert_int_equal(ts_part_read_state(p, 2, st, &u, NULL), TS_OK);
        assert_int_equal(u, 8);

        /* No count: the state, and this job's own count (none yet), so update 1. */
        assert_int_equal(assign(own, 0, 0, v, ms, false, 0, &applied, NULL), TS_OK);
        assert_int_equal(assign(own, 1, 0, NULL, NULL, false, 0, &applied, NULL), TS_OK);
        assert_int_equal(ts_part_updates(own), 0);
        for (uint32_t r = 0; r < 2; r++)
            assert_int_equal(push(own, r, 1, TS_ENC_RAW, g, sizeof(g), &applied, NULL), TS_OK);
        values_at(own, 2, got);
        assert_memory_equal(got, wrong, sizeof(wrong));
        ts_part_free(p);
        ts_part_free(own);
    }
}

/* What a rollback or restore loads: values, state and (counted) the count. */
struct saved {
    float value[N], state[2 * N];
    bool counted;
    uint64_t updates;
};

static ts_status load_saved(void *ctx, float *value, float *state, uint64_t *updates,
                            struct ts_err *err)
{
    const struct saved *s = ctx;
    (void)err;
    memcpy(value, s->value, sizeof(s->value));
    memcpy(state, s->state, sizeof(s->state));
    if (s->counted)
        *updates = s->updates;
    return TS_OK;
}

/* (c) A snapshot's capture after a mid-run assignment holds the count (2 updates at version
 * 4); the run goes on, then rolls back to it: the count is 2 again and the next update is
 * update 3, bit for bit. A snapshot without a count (written before it existed) restores as
 * the version implies: version 4 of an "assigned" tensor, less its step-0 assignment, 3. */
static void rollback_and_restore_carry_the_count(void **state)
{
    static struct saved snap;
    static float v[N], g[N], ref[N], st[2 * N], got[N], wrong[N], wst[2 * N];
    const float *cv, *cs;
    uint64_t cu = 0;
    bool applied;
    (void)state;
    for (size_t k = 0; k < 2; k++) {
        struct ts_job j = job(1, adams[k], TS_MODE_BSP);
        struct ts_part *p = mk(&j, "assigned"), *fresh = mk(&j, "assigned");
        given(v, 0.5f);
        assert_int_equal(assign(p, 0, 0, v, NULL, false, 0, &applied, NULL), TS_OK);
        for (uint64_t s = 1; s < 3; s++) {
            given(g, 0.05f * (float)s);
            gradient_step(p, s, g);
        }
        given(v, -0.5f);
        assert_int_equal(assign(p, 0, 3, v, NULL, false, 0, &applied, NULL), TS_OK);
        assert_int_equal(ts_part_arm(p, 4, NULL), TS_OK);
        assert_true(ts_part_captured(p, 10));
        ts_part_capture(p, &cv, &cs, &cu);
        assert_int_equal(cu, 2);
        memcpy(snap.value, cv, sizeof(snap.value));
        memcpy(snap.state, cs, sizeof(snap.state));
        snap.counted = true;
        snap.updates = cu;
        ts_part_disarm(p);
        for (uint64_t s = 4; s < 6; s++) {
            given(g, 0.07f * (float)s);
            gradient_step(p, s, g);
        }
        assert_int_equal(ts_part_updates(p), 4);
        assert_int_equal(ts_part_rollback(p, 4, 1, load_saved, &snap, NULL), TS_OK);
        assert_int_equal(ts_part_version(p), 4);
        assert_int_equal(ts_part_updates(p), 2);
        given(g, 0.11f);
        assert_int_equal(push(p, 0, 4, TS_ENC_RAW, g, sizeof(g), &applied, NULL),
                         TS_EROLLBACK);   /* made before the rollback (generation 0) */
        struct ts_push in = { .rank = 0, .step = 4, .encoding = TS_ENC_RAW, .payload = g,
                              .bytes = sizeof(g), .gen = 1 };
        assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
        memcpy(ref, snap.value, sizeof(ref));
        memcpy(st, snap.state, sizeof(st));
        memcpy(wrong, snap.value, sizeof(wrong));
        memcpy(wst, snap.state, sizeof(wst));
        reference(&j, 3, ref, st, g);
        reference(&j, 4, wrong, wst, g);   /* t from the version */
        struct ts_pull_info info;
        assert_int_equal(ts_part_pull(p, 0, 5, 1, 10, NULL, got, &info, NULL), TS_OK);
        assert_memory_equal(got, ref, sizeof(ref));
        assert_memory_not_equal(got, wrong, sizeof(wrong));

        /* A restore with the count takes it; one without, the version's. */
        assert_int_equal(ts_part_restore(fresh, 4, load_saved, &snap, NULL), TS_OK);
        assert_int_equal(ts_part_updates(fresh), 2);
        snap.counted = false;
        assert_int_equal(ts_part_rollback(fresh, 4, 1, load_saved, &snap, NULL), TS_OK);
        assert_int_equal(ts_part_updates(fresh), 3);
        assert_int_equal(ts_part_rollback(fresh, 0, 2, load_saved, &snap, NULL), TS_OK);
        assert_int_equal(ts_part_updates(fresh), 0);   /* never below 0 */
        ts_part_free(p);
        ts_part_free(fresh);
    }
}

/* (d) An image carries the count: a follower loaded with the image of a head whose count is
 * not its version (an assignment mid-run) holds the head's count and makes the head's bits at
 * the next update. A reduce partition seeded by its ranks takes the seeded version as its
 * count (a reduce job never assigns). */
static void images_and_seeds_carry_the_count(void **state)
{
    static float v[N], g[N], a[N], b[N];
    (void)state;
    for (size_t k = 0; k < 2; k++) {
        struct ts_job j = job(1, adams[k], TS_MODE_BSP);
        struct ts_part *head = mk(&j, "normal:0.1"), *follower = mk(&j, "normal:0.1");
        size_t n = ts_part_image_bytes(head);
        char *img = malloc(n);
        uint64_t version;
        bool applied;
        for (uint64_t s = 0; s < 2; s++) {
            given(g, 0.3f * (float)(s + 1));
            gradient_step(head, s, g);
        }
        given(v, 2.0f);
        assert_int_equal(assign(head, 0, 2, v, NULL, false, 0, &applied, NULL), TS_OK);
        assert_int_equal(ts_part_image(head, img, n, &version, NULL), TS_OK);
        assert_int_equal(version, 3);
        assert_int_equal(ts_part_load_image(follower, img, n, NULL), TS_OK);
        assert_int_equal(ts_part_version(follower), 3);
        assert_int_equal(ts_part_updates(follower), 2);
        given(g, -0.4f);
        gradient_step(head, 3, g);
        gradient_step(follower, 3, g);
        values_at(head, 4, a);
        values_at(follower, 4, b);
        assert_memory_equal(a, b, sizeof(a));
        free(img);
        ts_part_free(head);
        ts_part_free(follower);
    }

    struct ts_job r = job(2, "adam:lr=0.01", TS_MODE_REDUCE);
    struct ts_part *p = mk(&r, "zeros");
    given(v, 0.125f);
    assert_int_equal(ts_part_seed_begin(p, 1, NULL), TS_OK);
    assert_int_equal(ts_part_seed(p, 0, 5, v, false, NULL), TS_OK);
    assert_int_equal(ts_part_seed(p, 1, 4, NULL, false, NULL), TS_OK);
    assert_false(ts_part_seeding(p));
    assert_int_equal(ts_part_version(p), 5);
    assert_int_equal(ts_part_updates(p), 5);
    ts_part_free(p);
}

/* Without assignments past step 0 the count is the version (less the assignment of step 0 of
 * an "assigned" tensor), in every mode: the t every update had before the count. */
static void without_assignments_the_count_is_the_version(void **state)
{
    static float g[N], v[N];
    const enum ts_mode modes[] = { TS_MODE_BSP, TS_MODE_ASP, TS_MODE_REDUCE };
    bool applied;
    (void)state;
    given(g, 0.01f);
    for (size_t m = 0; m < 3; m++) {
        struct ts_job j = job(1, "adam:lr=0.01", modes[m]);
        struct ts_part *p = mk(&j, "zeros");
        for (uint64_t s = 0; s < 4; s++) {
            gradient_step(p, s, g);
            assert_int_equal(ts_part_updates(p), ts_part_version(p));
        }
        ts_part_free(p);
    }
    struct ts_job j = job(1, "adam:lr=0.01", TS_MODE_BSP);
    struct ts_part *p = mk(&j, "assigned");
    given(v, 1.0f);
    assert_int_equal(assign(p, 0, 0, v, NULL, false, 0, &applied, NULL), TS_OK);
    for (uint64_t s = 1; s < 4; s++) {
        gradient_step(p, s, g);
        assert_int_equal(ts_part_updates(p), ts_part_version(p) - 1);
    }
    ts_part_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(assignment_mid_run_keeps_the_count),
        cmocka_unit_test(state_assignment_sets_the_count),
        cmocka_unit_test(rollback_and_restore_carry_the_count),
        cmocka_unit_test(images_and_seeds_carry_the_count),
        cmocka_unit_test(without_assignments_the_count_is_the_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
