/* test_sdk.c - the SDK (include/tessera.h) on master "local": the same partitions (lib/ps) in
 * this process, so the step's arithmetic is tested without a cluster: SGD and momentum updates
 * from known gradients, exact mode's bits whatever the partition size, sync periods, fp16
 * compression and top-k with its error feedback, and dynamic loss scaling (an overflowed step
 * skipped, the scale halved). The same paths against real shards are the integration tests' (test_train,
 * test_modes, test_pull_compress). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

#define N 1000

static tessera *open_local(struct tessera_options *o)
{
    struct tessera_error e = { 0 };
    tessera *t = NULL;

    o->master = "local";
    o->rank = 0;
    o->workers = 1;
    if (tessera_connect(o, &t, &e) != TESSERA_OK)
        fail_msg("tessera_connect: %s", e.message);
    return t;
}

static int reg(tessera *t, const char *name, uint64_t n, const char *init, uint64_t pbytes)
{
    struct tessera_error e = { 0 };
    int id = -1;

    if (tessera_register(t, name, &n, 1, init, 7, 0, 0, pbytes, &id, &e) != TESSERA_OK)
        fail_msg("tessera_register %s: %s", name, e.message);
    return id;
}

/* One step of the one tensor: every element's gradient is g. */
static void step(tessera *t, uint64_t s, float g, float *p)
{
    static float grad[N];
    const void *grads[1] = { grad };
    float *params[1] = { p };
    struct tessera_error e = { 0 };

    for (int i = 0; i < N; i++)
        grad[i] = g;
    if (tessera_step(t, s, grads, params, &e) != TESSERA_OK)
        fail_msg("tessera_step %llu: %s", (unsigned long long)s, e.message);
}

static void all_equal(const float *p, float want)
{
    for (int i = 0; i < N; i++)
        if (p[i] != want)
            fail_msg("element %d is %.9g, want %.9g", i, p[i], want);
}

static void sgd_updates_add_up(void **state)
{
    struct tessera_options o = { .optimizer = "sgd:lr=0.5", .batch = 2, .job = "sgd" };
    tessera *t = open_local(&o);
    float p[N], q[N];
    struct tessera_stats st;
    struct tessera_error e = { 0 };
    int id = reg(t, "w", N, "zeros", 0);

    (void)state;
    assert_string_equal(tessera_transport(t), "local");
    assert_int_equal(tessera_numel(t, id), N);
    assert_int_equal(tessera_version(t, id), 0);
    step(t, 0, 1.0f, p);            /* w -= lr * g / batch */
    all_equal(p, -0.25f);
    step(t, 1, 3.0f, p);
    all_equal(p, -1.0f);
    assert_int_equal(tessera_pull(t, id, 2, q, &e), TESSERA_OK);
    assert_memory_equal(p, q, sizeof(p));
    tessera_stats(t, &st);
    assert_int_equal(st.steps, 2);
    assert_int_equal(st.steps_skipped, 0);
    tessera_close(t);
}

static void momentum_keeps_its_velocity(void **state)
{
    struct tessera_options o = { .optimizer = "momentum:lr=0.1,momentum=0.9", .batch = 1,
                                 .job = "mom" };
    tessera *t = open_local(&o);
    float p[N];

    (void)state;
    reg(t, "w", N, "zeros", 0);
    step(t, 0, 1.0f, p);            /* v = 1, w = -0.1 */
    for (int i = 0; i < N; i++)
        assert_true(fabsf(p[i] + 0.1f) < 1e-7f);
    step(t, 1, 1.0f, p);            /* v = 0.9 + 1 = 1.9, w = -0.1 - 0.19 */
    for (int i = 0; i < N; i++)
        assert_true(fabsf(p[i] + 0.29f) < 1e-6f);
    tessera_close(t);
}

/* Exact mode: the parameters do not depend on how the tensor is cut (4 KiB partitions or
 * one), step after step. */
static void exact_bits_whatever_the_partitions(void **state)
{
    static const uint64_t pbytes[2] = { 4096, 0 };
    static float g[2 * N], p[2][2 * N];
    static int64_t fx[2 * N];
    uint64_t n = 2 * N;

    (void)state;
    for (int k = 0; k < 2; k++) {
        struct tessera_options o = { .optimizer = "adam:lr=0.01", .batch = 4, .exact = 1,
                                     .job = k ? "exact-one" : "exact-4k" };
        tessera *t = open_local(&o);
        struct tessera_error e = { 0 };
        const void *grads[1] = { fx };
        float *params[1] = { p[k] };
        int id = -1;

        assert_int_equal(tessera_register(t, "w", &n, 1, "normal:0.1", 11, 0, 0, pbytes[k],
                                          &id, &e), TESSERA_OK);
        for (uint64_t s = 0; s < 5; s++) {
            for (uint64_t i = 0; i < n; i++)
                g[i] = sinf((float)(i * 7 + s * 13)) * 0.01f;
            assert_int_equal(tessera_to_fixed(g, n, fx, &e), TESSERA_OK);
            if (tessera_step(t, s, grads, params, &e) != TESSERA_OK)
                fail_msg("step %llu: %s", (unsigned long long)s, e.message);
        }
        tessera_close(t);
    }
    assert_memory_equal(p[0], p[1], sizeof(p[0]));
}

/* sync_every w=3: the gradient is summed locally for 3 steps, the parameters stay, then one
 * update with the mean of the three. */
static void sync_period_sums_then_updates(void **state)
{
    struct tessera_options o = { .optimizer = "sgd:lr=1", .batch = 1, .sync_every = "w=3",
                                 .job = "sync" };
    tessera *t = open_local(&o);
    float p[N] = { 0 };   /* the values of step 0 (zeros): between syncs they stay */

    (void)state;
    reg(t, "w", N, "zeros", 0);
    step(t, 0, 1.0f, p);
    all_equal(p, 0.0f);
    step(t, 1, 2.0f, p);
    all_equal(p, 0.0f);
    step(t, 2, 3.0f, p);
    all_equal(p, -2.0f);            /* -(1 + 2 + 3) / 3 */
    tessera_close(t);
}

/* fp16 on the wire: a gradient fp16 cannot hold is rounded, push by push (the dense codecs
 * keep no residual in the SDK), and the wire carries half the bytes. */
static void fp16_rounds_each_push(void **state)
{
    struct tessera_options o = { .optimizer = "sgd:lr=1", .batch = 1, .compress = "fp16",
                                 .job = "fp16" };
    tessera *t = open_local(&o);
    const float g = 1.0f + 0x1p-12f;   /* between fp16's 1 and 1 + 2^-10 */
    float p[N];
    struct tessera_stats st;

    (void)state;
    reg(t, "w", N, "zeros", 0);
    step(t, 0, g, p);
    all_equal(p, -1.0f);               /* the rounded gradient, not g */
    step(t, 1, g, p);
    all_equal(p, -2.0f);
    tessera_stats(t, &st);
    assert_int_equal(st.bytes_raw, 2 * N * sizeof(float));
    assert_int_equal(st.bytes_pushed, st.bytes_raw / 2);
    tessera_close(t);
}

/* Top-k keeps what it did not send (error feedback): with k half the elements, the larger
 * half goes first; the rest waits in the residual and goes once it is the larger. */
static void topk_feeds_back_what_it_dropped(void **state)
{
    struct tessera_options o = { .optimizer = "sgd:lr=1", .batch = 1, .compress = "topk:0.5",
                                 .job = "topk" };
    tessera *t = open_local(&o);
    static float g[N], p[N];
    const void *grads[1] = { g };
    float *params[1] = { p };
    struct tessera_error e = { 0 };

    (void)state;
    reg(t, "w", N, "zeros", 0);
    for (int i = 0; i < N; i++)
        g[i] = i < N / 2 ? 2.0f : 1.5f;
    assert_int_equal(tessera_step(t, 0, grads, params, &e), TESSERA_OK);
    for (int i = 0; i < N; i++)        /* the 2s went; the 1.5s wait */
        assert_true(p[i] == (i < N / 2 ? -2.0f : 0.0f));
    assert_int_equal(tessera_step(t, 1, grads, params, &e), TESSERA_OK);
    for (int i = 0; i < N; i++)        /* 1.5 + 1.5 = 3 beats 2: the second half goes */
        assert_true(p[i] == (i < N / 2 ? -2.0f : -3.0f));
    tessera_close(t);
}

/* Loss scaling: the SDK multiplies by the scale (2^16) before fp16; a gradient of 2 becomes
 * Inf, so the step is skipped (parameters unchanged) and the scale halves; the next step's
 * update is divided back by its scale. */
static void loss_scaling_skips_an_overflow(void **state)
{
    struct tessera_options o = { .optimizer = "sgd:lr=1", .batch = 1, .compress = "fp16",
                                 .loss_scale = TESSERA_LOSS_SCALE_SDK, .job = "amp" };
    tessera *t = open_local(&o);
    float p[N];
    struct tessera_stats st;

    (void)state;
    reg(t, "w", N, "zeros", 0);
    assert_true(tessera_loss_scale(t) == 65536.0f);
    step(t, 0, 2.0f, p);               /* 2 * 2^16 is beyond fp16's 65504 */
    all_equal(p, 0.0f);
    tessera_stats(t, &st);
    assert_int_equal(st.steps_skipped, 1);
    assert_true(tessera_loss_scale(t) == 32768.0f);
    step(t, 1, 1.0f, p);               /* 1 * 2^15 fits */
    all_equal(p, -1.0f);
    tessera_stats(t, &st);
    assert_int_equal(st.steps_skipped, 1);
    assert_true(tessera_loss_scale(t) == 32768.0f);
    tessera_close(t);
}

/* The schema: one row per field, in the struct's order, each where offsetof says and every
 * name, keyword and flag unique; tessera_options_set and _get agree on every row. */
static void schema_rows_cover_the_struct(void **state)
{
    size_t n, end = sizeof(size_t);
    const struct tessera_option *r = tessera_options_schema(&n);

    (void)state;
    assert_true(n >= 25);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r[i].offset, (end + r[i].bytes - 1) / r[i].bytes * r[i].bytes);
        end = r[i].offset + r[i].bytes;
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(r[i].name, r[j].name);
            if (r[i].flag && r[j].flag)
                assert_string_not_equal(r[i].flag, r[j].flag);
            if (r[i].keyword && r[j].keyword)
                assert_string_not_equal(r[i].keyword, r[j].keyword);
        }
        assert_non_null(r[i].help);
    }
    assert_int_equal((end + 7) / 8 * 8, sizeof(struct tessera_options));
}

static void options_set_and_get_by_any_name(void **state)
{
    struct tessera_options o = TESSERA_OPTIONS_INIT;
    struct tessera_error e = { 0 };
    size_t n;
    const struct tessera_option *r = tessera_options_schema(&n);
    char buf[64];

    (void)state;
    assert_int_equal(tessera_options_set(&o, "--compress-pull", "fp16", &e), 0);
    assert_string_equal(o.pull_compress, "fp16");
    assert_int_equal(tessera_options_set(&o, "compress_pull", "int8", &e), 0);
    assert_string_equal(o.pull_compress, "int8");
    assert_int_equal(tessera_options_set(&o, "staleness", "7", &e), 0);
    assert_int_equal(o.staleness, 7);
    assert_int_equal(tessera_options_set(&o, "data_seed", "18446744073709551615", &e), 0);
    assert_true(o.data_seed == UINT64_MAX);
    assert_int_equal(tessera_options_set(&o, "loss_scale", "caller", &e), 0);
    assert_int_equal(o.loss_scale, TESSERA_LOSS_SCALE_CALLER);
    assert_int_equal(tessera_options_set(&o, "batch", "64", &e), 0);
    assert_true(o.batch == 64.0);
    /* refused, naming the option as given, and o unchanged */
    assert_int_equal(tessera_options_set(&o, "--staleness", "1000001", &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "--staleness: '1000001'"));
    assert_int_equal(tessera_options_set(&o, "staleness", "-1", &e), TESSERA_EINVAL);
    assert_int_equal(tessera_options_set(&o, "exact", "yes", &e), TESSERA_EINVAL);
    assert_int_equal(tessera_options_set(&o, "exact_push", "int8", &e), TESSERA_EINVAL);
    assert_int_equal(tessera_options_set(&o, "no_such", "1", &e), TESSERA_EINVAL);
    assert_int_equal(o.staleness, 7);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, "loss_scale")) {
            assert_int_equal(tessera_options_get(&o, &r[i], buf, sizeof(buf)), 1);
            assert_string_equal(buf, "caller");
        } else if (!strcmp(r[i].name, "keep")) {
            assert_int_equal(tessera_options_get(&o, &r[i], buf, sizeof(buf)), 0);
        }
}

/* One rule, two audiences: the trainers' flags or the fields. */
static void rules_name_flags_or_fields(void **state)
{
    struct tessera_options o = TESSERA_OPTIONS_INIT;
    struct tessera_error e = { 0 };

    (void)state;
    o.batch = 64, o.workers = 1, o.dynamic = 1;
    assert_int_equal(tessera_options_check(&o, TESSERA_OPTIONS_NAME_FLAGS, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "--dynamic needs --mode asp or ssp"));
    assert_int_equal(tessera_options_check(&o, 0, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "dynamic needs mode asp or ssp"));
    o.dynamic = 0, o.balance = 1, o.workers = 4, o.master = "x:1";
    assert_int_equal(tessera_options_check(&o, TESSERA_OPTIONS_NAME_FLAGS, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "--balance needs an elastic job"));
    o.elastic = 1;
    assert_int_equal(tessera_options_check(&o, 0, &e), TESSERA_OK);
    /* the elastic rule: bsp, no sync periods, no top-k, no compressed pulls */
    assert_true(tessera_options_can_be_elastic(&o));
    o.pull_compress = "none";
    assert_true(tessera_options_can_be_elastic(&o));
    o.pull_compress = "fc1.weight=int8";
    assert_false(tessera_options_can_be_elastic(&o));
    o.pull_compress = NULL, o.compress = "topk:0.1";
    assert_false(tessera_options_can_be_elastic(&o));
    assert_int_equal(tessera_options_check(&o, 0, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "elastic: needs mode bsp"));
}

/* size: 0 is this header's struct; a newer header's struct is taken while the fields this
 * SDK lacks are unset, refused once one is set; a size below the first versioned struct's
 * is refused. */
static void options_size_versions(void **state)
{
    struct {
        struct tessera_options o;
        char newer[16];
    } big;
    struct tessera_options o = { .batch = 64, .workers = 1 };
    struct tessera_error e = { 0 };
    tessera *t = NULL;

    (void)state;
    assert_int_equal(tessera_options_check(&o, 0, &e), TESSERA_OK);   /* size 0 */
    memset(&big, 0, sizeof(big));
    big.o.size = sizeof(big), big.o.batch = 64, big.o.workers = 1;
    assert_int_equal(tessera_options_check(&big.o, 0, &e), TESSERA_OK);
    assert_int_equal(tessera_connect(&big.o, &t, &e), TESSERA_OK);
    tessera_close(t);
    big.newer[3] = 1;
    assert_int_equal(tessera_connect(&big.o, &t, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "newer tessera.h"));
    o.size = 16;
    assert_int_equal(tessera_options_check(&o, 0, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "options.size"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sgd_updates_add_up),
        cmocka_unit_test(momentum_keeps_its_velocity),
        cmocka_unit_test(exact_bits_whatever_the_partitions),
        cmocka_unit_test(sync_period_sums_then_updates),
        cmocka_unit_test(fp16_rounds_each_push),
        cmocka_unit_test(topk_feeds_back_what_it_dropped),
        cmocka_unit_test(loss_scaling_skips_an_overflow),
        cmocka_unit_test(schema_rows_cover_the_struct),
        cmocka_unit_test(options_set_and_get_by_any_name),
        cmocka_unit_test(rules_name_flags_or_fields),
        cmocka_unit_test(options_size_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
