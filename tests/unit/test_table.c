/* test_table.c - lib/table: a shard's rows of a sparse embedding table. Rows created on first
 * touch with the same bits in any order and any store; exact steps with the same bits for any
 * rank order, worker count and split over stores; the optimizers' row updates and their lazy
 * state; the budget; refused pushes that change nothing; the fingerprint's bytes and order;
 * the dirty list; pulls that wait for their step; ranks pushing from their own threads;
 * captures for snapshots and their loading back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "table/table.h"

#define BIG_ID 0x7fffffffffffff00ull    /* plus up to 22 in xpush: below 2^63 */

static struct ts_job job(uint32_t workers, bool exact, double batch, enum ts_mode mode)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "emb-job", workers, exact, "sgd", batch, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, mode, mode == TS_MODE_SSP ? 1 : 0, NULL), TS_OK);
    return j;
}

static struct ts_table *mk(const struct ts_job *j, const char *name, uint32_t dim,
                           const char *init, uint64_t seed, const char *opt,
                           struct ts_table_budget *b)
{
    struct ts_table_cfg c = { .name = name, .dim = dim, .max_id = 0x7fffffffffffffffull,
                              .init = init, .seed = seed, .optimizer = opt };
    struct ts_table *t;
    struct ts_err e = { 0 };

    if (ts_table_create(j, &c, b, &t, &e))
        fail_msg("ts_table_create: %s", e.msg);
    return t;
}

/* A push of float gradients: rounded by the table (TS_ENC_FIXED_F32) in exact jobs, whose
 * tables this file names with an "x", raw in float jobs. */
static ts_status push(struct ts_table *t, uint32_t rank, uint64_t step, const uint64_t *ids,
                      size_t n, const float *g, struct ts_err *e)
{
    bool exact = strchr(ts_table_name(t), 'x') != NULL;
    struct ts_row_push in = { .rank = rank, .step = step, .n = n, .ids = ids, .grad = g,
                              .encoding = exact ? TS_ENC_FIXED_F32 : TS_ENC_RAW };
    bool applied;

    return ts_table_push(t, &in, &applied, e);
}

static void push_ok(struct ts_table *t, uint32_t rank, uint64_t step, const uint64_t *ids,
                    size_t n, const float *g)
{
    struct ts_err e = { 0 };

    if (push(t, rank, step, ids, n, g, &e))
        fail_msg("push rank %u step %llu: %s", rank, (unsigned long long)step, e.msg);
}

static void row(struct ts_table *t, uint64_t id, float *v, float *st, struct ts_row_meta *m)
{
    struct ts_err e = { 0 };

    if (ts_table_row(t, id, v, st, m, &e))
        fail_msg("row %llu: %s", (unsigned long long)id, e.msg);
}

static void sha(struct ts_table *const *s, size_t n, char hex[65])
{
    struct ts_err e = { 0 };

    if (ts_table_sha256(s, n, hex, &e))
        fail_msg("sha256: %s", e.msg);
}

/* ---- configuration ---- */

static void t_config(void **state)
{
    static const struct {
        const char *name;
        uint32_t dim;
        uint64_t max_id;
        const char *init, *opt, *field;
    } bad[] = {
        { "", 8, 100, "zeros", "sgd", "table.name" },
        { "a b", 8, 100, "zeros", "sgd", "table.name" },
        { "emb", 0, 100, "zeros", "sgd", "table.dim" },
        { "emb", TS_TABLE_DIM_MAX + 1, 100, "zeros", "sgd", "table.dim" },
        { "emb", 8, 0x8000000000000000ull, "zeros", "sgd", "table.max_id" },
        { "emb", 8, 100, "xavier", "sgd", "table.init" },
        { "emb", 8, 100, "assigned", "sgd", "table.init" },
        { "emb", 8, 100, "normal:x", "sgd", "table.init" },
        { "emb", 8, 100, NULL, "sgd", "table.init" },
        { "emb", 8, 100, "zeros", "momentum", "table.optimizer" },
        { "emb", 8, 100, "zeros", "adam:lr=0", "table.optimizer" },
        { "emb", 8, 100, "zeros", NULL, "table.optimizer" },
    };
    struct ts_job j = job(1, true, 1, TS_MODE_BSP), red = job(1, false, 1, TS_MODE_REDUCE);
    struct ts_table *t = (struct ts_table *)&j;
    struct ts_err e = { 0 };

    (void)state;
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        struct ts_table_cfg c = { .name = bad[k].name, .dim = bad[k].dim,
                                  .max_id = bad[k].max_id, .init = bad[k].init,
                                  .optimizer = bad[k].opt };
        ts_err_clear(&e);
        assert_int_equal(ts_table_create(&j, &c, NULL, &t, &e), TS_EINVAL);
        if (strncmp(e.msg, bad[k].field, strlen(bad[k].field)))
            fail_msg("case %zu: '%s' does not start with %s", k, e.msg, bad[k].field);
        assert_ptr_equal(t, (struct ts_table *)&j);       /* out untouched */
    }
    struct ts_table_cfg c = { .name = "emb", .dim = 8, .max_id = 100, .init = "zeros",
                              .optimizer = "adagrad" };
    ts_err_clear(&e);
    assert_int_equal(ts_table_create(&red, &c, NULL, &t, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.mode"));
    assert_int_equal(ts_table_create(&j, &c, NULL, &t, NULL), TS_OK);
    assert_string_equal(ts_table_name(t), "emb");
    assert_int_equal(ts_table_dim(t), 8);
    /* record: 32-byte header, 8 values, 8 adagrad sums; and 2 map slots of 16 bytes */
    assert_int_equal(ts_table_row_bytes(t), 32 + 8 * 4 * 2 + 32);
    ts_table_free(t);
    c.dim = 3;                          /* sgd: 32 + 3 * 4 = 44 bytes, rounded up to 48 */
    c.optimizer = "sgd";
    assert_int_equal(ts_table_create(&j, &c, NULL, &t, NULL), TS_OK);
    assert_int_equal(ts_table_row_bytes(t), 48 + 32);
    ts_table_free(t);
    ts_table_free(NULL);
}

/* ---- initial values ---- */

/* What table.h says row id starts as. */
static void documented_init(const char *init, uint64_t seed, const char *name, uint64_t id,
                            uint32_t dim, float *out)
{
    uint8_t le[8];

    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)(id >> (8 * b));
    assert_int_equal(ts_tensor_init(init, XXH3_64bits_withSeed(le, 8, seed), name, 0, 0, 0, dim,
                                    out, NULL), TS_OK);
}

/* Rows created by pushes in different orders and steps, in different stores, and absent rows
 * read by a pull, all have the bits table.h documents, which depend on the id, the seed and
 * the name. */
static void t_init_deterministic(void **state)
{
    enum { D = 16 };
    static const uint64_t a0[] = { 900, BIG_ID }, a1[] = { 5, 7 };
    static const uint64_t b0[] = { 5, 7, 900, BIG_ID }, all[] = { 7, BIG_ID, 5, 900 };
    static float zero[4 * D];
    struct ts_job j = job(1, true, 1, TS_MODE_BSP);
    struct ts_table *a = mk(&j, "emb-x", D, "normal:0.1", 42, "sgd", NULL);
    struct ts_table *b = mk(&j, "emb-x", D, "normal:0.1", 42, "sgd", NULL);
    struct ts_table *c = mk(&j, "emb-x", D, "normal:0.1", 42, "sgd", NULL);
    struct ts_table *other_seed = mk(&j, "emb-x", D, "normal:0.1", 43, "sgd", NULL);
    struct ts_table *other_name = mk(&j, "emb-y", D, "normal:0.1", 42, "sgd", NULL);
    float va[D], vb[D], pulled[4 * D], want[D], o[4 * D];

    (void)state;
    push_ok(a, 0, 0, a0, 2, zero);         /* a: 900 and BIG_ID first, then 5 and 7 */
    push_ok(a, 0, 1, a1, 2, zero);
    push_ok(b, 0, 0, b0, 4, zero);         /* b: all four at once */
    assert_int_equal(ts_table_pull(c, 0, 0, 0, all, 4, pulled, NULL), TS_OK);
    assert_int_equal(ts_table_count(c), 0);            /* a pull creates nothing */
    for (size_t k = 0; k < 4; k++) {
        row(a, all[k], va, NULL, NULL);
        row(b, all[k], vb, NULL, NULL);
        documented_init("normal:0.1", 42, "emb-x", all[k], D, want);
        assert_memory_equal(va, want, sizeof(want));
        assert_memory_equal(vb, want, sizeof(want));
        assert_memory_equal(pulled + k * D, want, sizeof(want));
    }
    assert_true(pulled[0] != 0 && memcmp(pulled, pulled + 2 * D, D * sizeof(float)));
    assert_int_equal(ts_table_pull(other_seed, 0, 0, 0, all, 4, o, NULL), TS_OK);
    assert_true(memcmp(o, pulled, sizeof(o)));
    assert_int_equal(ts_table_pull(other_name, 0, 0, 0, all, 4, o, NULL), TS_OK);
    assert_true(memcmp(o, pulled, sizeof(o)));
    ts_table_free(a);
    ts_table_free(b);
    ts_table_free(c);
    ts_table_free(other_seed);
    ts_table_free(other_name);
}

/* ---- exact steps: any rank order, worker count, split over stores ---- */

enum { XD = 8, XRANKS = 3, XSTEPS = 4, XIDS = 40, XN = XIDS + 1 };

/* rank r's ids at step s, ascending: about half of 0..XIDS-1, each shared with some of the
 * other ranks and not others, and one near 2^63 that ranks 0 and 2 share; and its gradients,
 * of magnitudes from 1e-7 to 40, so that float sums would round differently by order. */
static size_t xpush(uint32_t r, uint64_t s, uint64_t *ids, float *g)
{
    size_t n = 0;

    for (uint64_t id = 0; id < XIDS; id++)
        if ((id * 7 + s * 3 + r * 5) % 3 == 0 || id % 11 == s % 11)
            ids[n++] = id;
    ids[n++] = BIG_ID + r % 2;
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < XD; j++)
            g[i * XD + j] = (float)((int)(j % 5) - 2) * (j % 2 ? 1e-3f : 17.25f) *
                            (float)(r + 1) + 1e-7f * (float)(s + 1) -
                            3e-5f * (float)(ids[i] % 97) * (float)(j + 1);
    return n;
}

/* Runs XSTEPS steps of XRANKS ranks, pushing in rank order `order`, over `nstores` stores
 * (id % nstores picks one); returns the fingerprint. */
static void run_split(const uint32_t *order, size_t nstores, char hex[65])
{
    struct ts_job j = job(XRANKS, true, 32, TS_MODE_BSP);
    struct ts_table *s[3];
    uint64_t ids[XN], sub[XN];
    float g[XN * XD], gs[XN * XD];

    for (size_t k = 0; k < nstores; k++)
        s[k] = mk(&j, "emb-x", XD, "uniform:0.05", 7, "adam:lr=0.01", NULL);
    for (uint64_t step = 0; step < XSTEPS; step++)
        for (uint32_t o = 0; o < XRANKS; o++) {
            uint32_t r = order[o];
            size_t n = xpush(r, step, ids, g);

            for (size_t k = 0; k < nstores; k++) {
                size_t m = 0;

                for (size_t i = 0; i < n; i++)
                    if (ids[i] % nstores == k) {
                        sub[m] = ids[i];
                        memcpy(gs + m * XD, g + i * XD, XD * sizeof(float));
                        m++;
                    }
                push_ok(s[k], r, step, sub, m, gs);
            }
        }
    sha(s, nstores, hex);
    for (size_t k = 0; k < nstores; k++) {
        assert_int_equal(ts_table_step(s[k]), XSTEPS);
        ts_table_free(s[k]);
    }
}

/* One worker pushing, each step, every rank's gradients summed in fixed point (int64). */
static void run_one_worker(char hex[65])
{
    struct ts_job j = job(1, true, 32, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "emb-x", XD, "uniform:0.05", 7, "adam:lr=0.01", NULL);
    uint64_t ids[XN], all[XRANKS * XN];
    float g[XN * XD];
    static int64_t sum[XRANKS * XN * XD];

    for (uint64_t step = 0; step < XSTEPS; step++) {
        size_t n = 0;

        memset(sum, 0, sizeof(sum));
        for (uint32_t r = 0; r < XRANKS; r++) {
            size_t m = xpush(r, step, ids, g);

            for (size_t i = 0; i < m; i++) {   /* insert ids[i] into the sorted union */
                size_t at = 0;
                int64_t x[XD];

                while (at < n && all[at] < ids[i])
                    at++;
                if (at == n || all[at] != ids[i]) {
                    memmove(all + at + 1, all + at, (n - at) * sizeof(*all));
                    memmove(sum + (at + 1) * XD, sum + at * XD, (n - at) * XD * sizeof(*sum));
                    memset(sum + at * XD, 0, XD * sizeof(*sum));
                    all[at] = ids[i];
                    n++;
                }
                assert_int_equal(ts_fixed_from_f32(g + i * XD, XD, x, NULL), TS_OK);
                assert_int_equal(ts_fixed_add(sum + at * XD, x, XD, NULL), TS_OK);
            }
        }
        struct ts_row_push in = { .rank = 0, .step = step, .n = n, .ids = all, .grad = sum,
                                  .encoding = TS_ENC_FIXED };
        bool applied = false;
        assert_int_equal(ts_table_push(t, &in, &applied, NULL), TS_OK);
        assert_true(applied);
    }
    sha(&t, 1, hex);
    ts_table_free(t);
}

static void t_exact_split(void **state)
{
    static const uint32_t orders[][XRANKS] = { { 0, 1, 2 }, { 2, 1, 0 }, { 1, 2, 0 } };
    char ref[65], hex[65], one[65];

    (void)state;
    run_split(orders[0], 1, ref);
    for (size_t o = 0; o < 3; o++)
        for (size_t k = 1; k <= 3; k++) {
            run_split(orders[o], k, hex);
            if (strcmp(hex, ref))
                fail_msg("order %zu, %zu stores: %s, want %s", o, k, hex, ref);
        }
    run_one_worker(one);
    assert_string_equal(one, ref);
}

/* Float mode, the same pushes: another fingerprint (the bits are exact mode's own), and the
 * stores merge into the one-store fingerprint too. */
static void t_float_split(void **state)
{
    struct ts_job j = job(2, false, 4, TS_MODE_BSP);
    struct ts_table *one = mk(&j, "emb", XD, "uniform:0.05", 7, "adagrad:lr=0.1", NULL);
    struct ts_table *s[2] = { mk(&j, "emb", XD, "uniform:0.05", 7, "adagrad:lr=0.1", NULL),
                              mk(&j, "emb", XD, "uniform:0.05", 7, "adagrad:lr=0.1", NULL) };
    uint64_t ids[XN], sub[XN];
    float g[XN * XD], gs[XN * XD];
    char a[65], b[65];

    (void)state;
    for (uint64_t step = 0; step < 3; step++)
        for (uint32_t r = 0; r < 2; r++) {
            size_t n = xpush(r, step, ids, g);

            push_ok(one, r, step, ids, n, g);
            for (size_t k = 0; k < 2; k++) {
                size_t m = 0;

                for (size_t i = 0; i < n; i++)
                    if (ids[i] % 2 == k) {
                        sub[m] = ids[i];
                        memcpy(gs + m * XD, g + i * XD, XD * sizeof(float));
                        m++;
                    }
                push_ok(s[k], r, step, sub, m, gs);
            }
        }
    sha(&one, 1, a);
    sha(s, 2, b);
    assert_string_equal(a, b);
    ts_table_free(one);
    ts_table_free(s[0]);
    ts_table_free(s[1]);
}

/* ---- optimizers, lazy state ---- */

/* One worker, batch 2, rows 1 and 2 of dim 2 starting at 0.5 (const:0.5). Step 0 touches
 * both, step 1 only row 1, step 2 both again: row 2's state and count stay through step 1, and
 * its update at step 2 is its second (Adam's t = 2). */
static void run_lazy(const char *opt, float v1[2], float v2[2], float s2_after0[4],
                     float s2_after1[4], struct ts_row_meta *m2)
{
    static const uint64_t both[] = { 1, 2 }, first[] = { 1 };
    static const float g0[] = { 1.0f, -2.0f, 0.5f, 4.0f }, g1[] = { 3.0f, 1.0f };
    static const float g2[] = { -1.0f, 0.25f, 2.0f, -0.5f };
    struct ts_job j = job(1, false, 2, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "emb", 2, "const:0.5", 1, opt, NULL);
    float v2_after0[2], v2_after1[2];

    push_ok(t, 0, 0, both, 2, g0);
    row(t, 2, v2_after0, s2_after0, NULL);
    push_ok(t, 0, 1, first, 1, g1);
    row(t, 2, v2_after1, s2_after1, m2);
    assert_memory_equal(v2_after0, v2_after1, sizeof(v2_after0));   /* untouched: same */
    assert_int_equal(m2->updates, 1);
    assert_int_equal(m2->step, 0);
    push_ok(t, 0, 2, both, 2, g2);
    row(t, 1, v1, NULL, NULL);
    row(t, 2, v2, NULL, m2);
    ts_table_free(t);
}

static void t_sgd(void **state)
{
    float v1[2], v2[2], a[4], b[4];
    struct ts_row_meta m;

    (void)state;
    run_lazy("sgd:lr=0.5", v1, v2, a, b, &m);
    /* p -= 0.5 * g / 2 per step: row 1: 0.5 - 0.25 * (1 + 3 - 1), 0.5 - 0.25 * (-2 + 1 + 0.25);
     * row 2: 0.5 - 0.25 * (0.5 + 2), 0.5 - 0.25 * (4 - 0.5) (all exact in float) */
    assert_true(v1[0] == -0.25f && v1[1] == 0.6875f);
    assert_true(v2[0] == -0.125f && v2[1] == -0.375f);
    assert_int_equal(m.updates, 2);
    assert_int_equal(m.step, 2);
}

static void t_adagrad(void **state)
{
    float v1[2], v2[2], a[4], b[4];
    struct ts_row_meta m;

    (void)state;
    run_lazy("adagrad:lr=0.5", v1, v2, a, b, &m);
    /* Row 2, gradients g/2: step 0 (0.25, 2): s = g^2, p -= 0.5 * g / |g| = 0.5 -+ 0.5, so
     * 0 and 0 (eps 1e-10 vanishes next to |g|); the sums 0.0625 and 4 stay through step 1. */
    assert_true(a[0] == 0.0625f && a[1] == 4.0f);
    assert_memory_equal(a, b, 2 * sizeof(float));
    /* step 2 (1, -0.25): s = 1.0625, 4.0625; p = 0 - 0.5 * 1 / sqrt(1.0625),
     * 0 + 0.5 * 0.25 / sqrt(4.0625), in float */
    float s0 = 0.0625f + 1.0f, s1 = 4.0f + 0.0625f;
    float want0 = 0.0f - 0.5f * (1.0f / (sqrtf(s0) + 1e-10f));
    float want1 = 0.0f - 0.5f * (-0.25f / (sqrtf(s1) + 1e-10f));
    assert_true(v2[0] == want0 && v2[1] == want1);
    assert_true(fabsf(v2[0] + 0.48507125f) < 1e-7f && fabsf(v2[1] - 0.06201737f) < 1e-7f);
    /* Row 1 got 3 updates; its first moved it by lr, to 0 and 1. */
    assert_true(v1[0] != 0.5f && v1[1] != 0.5f);
    assert_int_equal(m.updates, 2);
}

/* Adam's update of one element, float, as optim.c's header writes it, at t. */
static float adam_el(float p, float *mm, float *vv, float g, int t)
{
    double b1t = 1, b2t = 1;

    for (int k = 0; k < t; k++) {
        b1t *= (double)0.9f;      /* the float betas, in double (optim.c) */
        b2t *= (double)0.999f;
    }
    *mm = 0.9f * *mm + (1.0f - 0.9f) * g;
    *vv = 0.999f * *vv + (1.0f - 0.999f) * g * g;
    return p - 0.01f * (*mm / (float)(1.0 - b1t)) / (sqrtf(*vv / (float)(1.0 - b2t)) + 1e-8f);
}

static void t_adam(void **state)
{
    float v1[2], v2[2], a[4], b[4];
    struct ts_row_meta m;

    (void)state;
    run_lazy("adam:lr=0.01", v1, v2, a, b, &m);
    /* Row 2's second update has t = 2 (its own count), although the table is at step 2. */
    float p0 = 0.5f, p1 = 0.5f, m0 = 0, m1 = 0, q0 = 0, q1 = 0;
    p0 = adam_el(p0, &m0, &q0, 0.25f, 1);
    p1 = adam_el(p1, &m1, &q1, 2.0f, 1);
    assert_true(fabsf(p0 - 0.49f) < 1e-6f && fabsf(p1 - 0.49f) < 1e-6f);  /* first: by lr */
    assert_true(a[0] == m0 && a[1] == m1 && a[2] == q0 && a[3] == q1);   /* m0 m1 v0 v1 */
    assert_memory_equal(a, b, sizeof(a));                                /* lazy */
    p0 = adam_el(p0, &m0, &q0, 1.0f, 2);
    p1 = adam_el(p1, &m1, &q1, -0.25f, 2);
    if (v2[0] != p0 || v2[1] != p1)
        fail_msg("row 2: %a %a, want %a %a", (double)v2[0], (double)v2[1], (double)p0,
                 (double)p1);
    float t3 = 0.5f, mm = 0, vv = 0;   /* t = 3 would give other bits: the count matters */
    t3 = adam_el(adam_el(t3, &mm, &vv, 0.25f, 1), &mm, &vv, 1.0f, 3);
    assert_true(t3 != v2[0]);
    assert_int_equal(m.updates, 2);
}

/* ---- budget ---- */

static void t_budget(void **state)
{
    static const uint64_t r3[] = { 10, 11, 12 }, r3b[] = { 12, 13, 14, 15 }, r2[] = { 13, 14 };
    static const uint64_t old[] = { 10, 14 }, one[] = { 99 };
    static float g[8 * 4];
    struct ts_job j = job(2, false, 1, TS_MODE_BSP);
    struct ts_table_budget b;
    struct ts_table *t, *u;
    uint64_t rb;
    struct ts_err e = { 0 };
    char before[65], after[65];

    (void)state;
    t = mk(&j, "emb", 4, "zeros", 1, "adam", NULL);
    rb = ts_table_row_bytes(t);
    ts_table_free(t);
    ts_table_budget_init(&b, 5 * rb);
    t = mk(&j, "emb", 4, "zeros", 1, "adam", &b);
    u = mk(&j, "emb2", 4, "zeros", 1, "adam", &b);
    push_ok(t, 0, 0, r3, 3, g);                    /* 3 rows to come: charged at once */
    push_ok(t, 1, 0, r3, 3, g);                    /* the same rows: nothing more */
    assert_int_equal(ts_table_budget_used(&b), 3 * rb);
    assert_int_equal(ts_table_count(t), 3);
    sha(&t, 1, before);
    /* 12 exists; 13, 14, 15 would make 6 rows > 5: refused whole */
    assert_int_equal(push(t, 0, 1, r3b, 4, g, &e), TS_ENOMEM);
    assert_non_null(strstr(e.msg, "table 'emb'"));
    char lim[32];
    snprintf(lim, sizeof(lim), "%llu bytes", (unsigned long long)(5 * rb));
    assert_non_null(strstr(e.msg, lim));
    assert_int_equal(ts_table_budget_used(&b), 3 * rb);
    assert_int_equal(ts_table_count(t), 3);
    sha(&t, 1, after);
    assert_string_equal(before, after);
    push_ok(t, 0, 1, r2, 2, g);                    /* up to the budget exactly */
    assert_int_equal(ts_table_budget_used(&b), 5 * rb);
    ts_err_clear(&e);
    assert_int_equal(push(t, 1, 1, one, 1, g, &e), TS_ENOMEM);   /* one more: refused */
    assert_int_equal(push(u, 0, 0, one, 1, g, NULL), TS_ENOMEM); /* shared with emb2 */
    push_ok(t, 1, 1, old, 2, g);                   /* rows that exist or are coming: fine */
    assert_int_equal(ts_table_count(t), 5);
    assert_int_equal(ts_table_step(t), 2);
    assert_int_equal(ts_table_budget_used(&b), 5 * rb);
    ts_table_free(t);                              /* its bytes go back */
    assert_int_equal(ts_table_budget_used(&b), 0);
    push_ok(u, 0, 0, one, 1, g);
    assert_int_equal(ts_table_budget_used(&b), rb);
    ts_table_free(u);
    assert_int_equal(ts_table_budget_used(&b), 0);
}

/* ---- bad input ---- */

/* Bad pushes between two good ones of an exact step change nothing: the table ends as a twin
 * that got only the good ones, in rows, fingerprint, count, dirty list and step. */
static void t_bad_input(void **state)
{
    static const uint64_t ids[] = { 1, 2 }, late[] = { 2, 3 };
    static const float g[] = { 0.5f, 1.0f, -0.25f, 2.0f }, gl[] = { 1.0f, 1.0f, 1.5e9f,
                                                                     1.5e9f };
    static const float big[] = { 1.0f, 1.0f, 1.6e9f, 1.0f };   /* 3: 1.5e9 + 1.6e9 > 2^31 */
    static const uint64_t out_of_range[] = { 1, 1001 }, unsorted[] = { 2, 1 }, dup[] = { 2, 2 };
    static const uint64_t over[] = { 1, 3 };
    struct ts_job j = job(2, true, 2, TS_MODE_BSP);
    struct ts_table_cfg c = { .name = "emb-x", .dim = 2, .max_id = 1000, .init = "normal:1",
                              .seed = 3, .optimizer = "adam" };
    struct ts_table *t, *twin;
    float nan_g[] = { 1.0f, NAN, 0, 0 }, inf_g[] = { 1.0f, 0, 0, -INFINITY };
    float huge[] = { 0x1p31f, 0, 0, 0 };
    struct ts_err e = { 0 };
    char a[65], b[65];
    uint64_t *d1, *d2;
    size_t n1, n2;

    (void)state;
    assert_int_equal(ts_table_create(&j, &c, NULL, &t, NULL), TS_OK);
    assert_int_equal(ts_table_create(&j, &c, NULL, &twin, NULL), TS_OK);
    push_ok(t, 0, 0, late, 2, gl);
    push_ok(twin, 0, 0, late, 2, gl);
    static const struct {
        const uint64_t *ids;
        size_t n;
        uint32_t rank;
        uint64_t step;
        int grad;        /* 0 g, 1 nan, 2 inf, 3 2^31, 4 big (sum overflow) */
        ts_status want;
        const char *says;
    } bad[] = {
        { out_of_range, 2, 1, 0, 0, TS_EINVAL, "ids[1]: 1001 is outside" },
        { unsorted, 2, 1, 0, 0, TS_EINVAL, "ids[1]: 1 after 2" },
        { dup, 2, 1, 0, 0, TS_EINVAL, "ids[1]: 2 after 2" },
        { ids, 2, 1, 0, 1, TS_EINVAL, "row 1 (ids[0]): exact mode: gradient element 1 is nan" },
        { ids, 2, 1, 0, 2, TS_EINVAL, "row 2 (ids[1])" },
        { ids, 2, 1, 0, 3, TS_EINVAL, "row 1 (ids[0])" },
        { over, 2, 1, 0, 4, TS_EINVAL, "row 3 (ids[1]) element 0: the step's sum leaves" },
        { ids, 2, 2, 0, 0, TS_EINVAL, "rank: 2 is not below" },
        { ids, 2, 1, 1, 0, TS_EINVAL, "step: 1, but the table is at step 0" },
        { ids, 2, 0, 0, 0, TS_ESTATE, "rank 0 already pushed step 0" },
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        const float *gr = bad[k].grad == 0 ? g : bad[k].grad == 1 ? nan_g
                          : bad[k].grad == 2 ? inf_g : bad[k].grad == 3 ? huge : big;
        ts_err_clear(&e);
        if (push(t, bad[k].rank, bad[k].step, bad[k].ids, bad[k].n, gr, &e) != bad[k].want ||
            !strstr(e.msg, bad[k].says) || strncmp(e.msg, "table 'emb-x': ", 15))
            fail_msg("case %zu: %s (want %s)", k, e.msg, bad[k].says);
    }
    struct ts_row_push raw = { .rank = 1, .step = 0, .n = 2, .ids = ids, .grad = g,
                               .encoding = TS_ENC_RAW };
    bool applied = true;
    assert_int_equal(ts_table_push(t, &raw, &applied, NULL), TS_EINVAL);
    assert_false(applied);
    assert_int_equal(ts_table_step(t), 0);
    assert_int_equal(ts_table_count(t), 0);
    push_ok(t, 1, 0, ids, 2, g);
    push_ok(twin, 1, 0, ids, 2, g);
    assert_int_equal(push(t, 1, 0, ids, 2, g, NULL), TS_ESTATE);      /* applied already */
    sha(&t, 1, a);
    sha(&twin, 1, b);
    assert_string_equal(a, b);
    assert_int_equal(ts_table_step(t), 1);
    assert_int_equal(ts_table_count(t), 3);
    assert_int_equal(ts_table_dirty_take(t, &d1, &n1, NULL), TS_OK);
    assert_int_equal(ts_table_dirty_take(twin, &d2, &n2, NULL), TS_OK);
    assert_int_equal(n1, 3);
    assert_int_equal(n2, 3);
    assert_memory_equal(d1, d2, 3 * sizeof(*d1));
    free(d1);
    free(d2);
    /* float jobs refuse NaN too */
    struct ts_job fj = job(1, false, 1, TS_MODE_BSP);
    struct ts_table *f = mk(&fj, "emb", 2, "zeros", 1, "sgd", NULL);
    ts_err_clear(&e);
    assert_int_equal(push(f, 0, 0, ids, 2, nan_g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "is nan"));
    assert_int_equal(ts_table_count(f), 0);
    ts_table_free(f);
    ts_table_free(t);
    ts_table_free(twin);
}

/* ---- fingerprint ---- */

/* The bytes table.h documents, hashed here by hand, for rows created out of order. */
static void t_fingerprint(void **state)
{
    static const uint64_t a[] = { 9 }, b[] = { 3, 5 }, only3[] = { 3 };
    static const float g[] = { 1, 2, 3, 4 };
    struct ts_job j = job(1, false, 1, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "emb", 2, "uniform:1", 5, "sgd", NULL);
    struct ts_table *s2[2] = { mk(&j, "emb", 2, "uniform:1", 5, "sgd", NULL),
                               mk(&j, "emb", 2, "uniform:1", 5, "sgd", NULL) };
    struct ts_table *odd = mk(&j, "emb", 3, "uniform:1", 5, "sgd", NULL);
    const uint64_t want_ids[] = { 3, 5, 9 };
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned len;
    char hex[65], mine[65];
    struct ts_err e = { 0 };

    (void)state;
    push_ok(t, 0, 0, a, 1, g);
    push_ok(t, 0, 1, b, 2, g);
    assert_int_equal(EVP_DigestInit_ex(c, EVP_sha256(), NULL), 1);
    EVP_DigestUpdate(c, "emb", 4);
    EVP_DigestUpdate(c, "\x02\0\0\0", 4);
    EVP_DigestUpdate(c, "\x03\0\0\0\0\0\0\0", 8);
    for (int k = 0; k < 3; k++) {
        float v[2];
        uint8_t id[8] = { (uint8_t)want_ids[k] };

        row(t, want_ids[k], v, NULL, NULL);
        EVP_DigestUpdate(c, id, 8);
        EVP_DigestUpdate(c, v, sizeof(v));     /* little-endian host */
    }
    EVP_DigestFinal_ex(c, md, &len);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++)
        snprintf(mine + 2 * i, 3, "%02x", md[i]);
    sha(&t, 1, hex);
    assert_string_equal(hex, mine);
    /* rows 3 and 9 in one store, 5 in another: the same */
    push_ok(s2[0], 0, 0, a, 1, g);
    push_ok(s2[1], 0, 0, b + 1, 1, g + 2);
    push_ok(s2[0], 0, 1, only3, 1, g);
    push_ok(s2[1], 0, 1, NULL, 0, NULL);
    sha(s2, 2, hex);
    assert_string_equal(hex, mine);
    struct ts_table *twice[2] = { t, s2[0] };      /* rows 3 and 9 in both */
    assert_int_equal(ts_table_sha256(twice, 2, hex, &e), TS_ECORRUPT);
    assert_non_null(strstr(e.msg, "row 3 is in store 0 and store 1"));
    struct ts_table *same[2] = { t, t }, *mixed[2] = { t, odd };
    assert_int_equal(ts_table_sha256(same, 2, hex, NULL), TS_EINVAL);
    assert_int_equal(ts_table_sha256(mixed, 2, hex, NULL), TS_EINVAL);
    ts_table_free(t);
    ts_table_free(s2[0]);
    ts_table_free(s2[1]);
    ts_table_free(odd);
}

/* ---- dirty rows ---- */

static void t_dirty(void **state)
{
    static const uint64_t s0[] = { 5, 3000000000000ull }, s1[] = { 5, 9 }, s2[] = { 1 };
    static const float g[] = { 1, 1, 1, 1 };
    struct ts_job j = job(1, false, 1, TS_MODE_ASP);
    struct ts_table *t = mk(&j, "emb", 2, "zeros", 1, "sgd", NULL);
    uint64_t *d;
    size_t n;

    (void)state;
    push_ok(t, 0, 0, s0, 2, g);
    assert_int_equal(ts_table_dirty_take(t, &d, &n, NULL), TS_OK);
    assert_int_equal(n, 2);
    assert_true(d[0] == 5 && d[1] == 3000000000000ull);
    free(d);
    assert_int_equal(ts_table_dirty_take(t, &d, &n, NULL), TS_OK);
    assert_int_equal(n, 0);
    assert_null(d);
    push_ok(t, 0, 1, s1, 2, g);                    /* 5 and 9, then 1, then 9 again */
    push_ok(t, 0, 2, s2, 1, g);
    push_ok(t, 0, 3, s1 + 1, 1, g);
    assert_int_equal(ts_table_dirty_take(t, &d, &n, NULL), TS_OK);
    assert_int_equal(n, 3);
    assert_true(d[0] == 1 && d[1] == 5 && d[2] == 9);
    free(d);
    ts_table_free(t);
}

/* ---- pulls and modes ---- */

struct puller {
    struct ts_table *t;
    uint64_t id;
    float v[2];
    ts_status st;
};

static void *pull_main(void *arg)
{
    struct puller *p = arg;

    p->st = ts_table_pull(p->t, 1, 1, 10000, &p->id, 1, p->v, NULL);
    return NULL;
}

/* BSP: a pull of step 1 waits for both ranks' pushes of step 0 and sees them applied. */
static void t_pull_bsp(void **state)
{
    static const uint64_t id[] = { 4 };
    static const float g[] = { 2, 4 };
    struct ts_job j = job(2, false, 2, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "emb", 2, "zeros", 1, "sgd:lr=1", NULL);
    struct puller p = { .t = t, .id = 4, .st = TS_EINTERNAL };
    struct ts_err e = { 0 };
    pthread_t th;
    float v[2];

    (void)state;
    push_ok(t, 0, 0, id, 1, g);
    assert_int_equal(ts_table_pull(t, 0, 1, 30, id, 1, v, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "1 of 2 ranks pushed"));
    assert_int_equal(pthread_create(&th, NULL, pull_main, &p), 0);
    push_ok(t, 1, 0, id, 1, g);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(p.st, TS_OK);
    assert_true(p.v[0] == -2.0f && p.v[1] == -4.0f);      /* 0 - 1 * (2 + 2) / 2 */
    assert_int_equal(ts_table_pull(t, 2, 1, 0, id, 1, v, NULL), TS_EINVAL);
    ts_table_free(t);
}

/* A push sent again (ts_row_push.retry: a worker after a failover, a head copying a push
 * down): what the table has from the rank is acknowledged unchanged, bit for bit, while the
 * same push unflagged is refused; a later step stays refused; ts_table_wait waits as a pull. */
static void t_retry(void **state)
{
    static const uint64_t ids[] = { 3, 9 };
    static const float g[] = { 1, 2, 3, 4 };
    struct ts_job j = job(2, true, 2, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "embx", 2, "normal:0.1", 5, "adam:lr=0.01", NULL);
    struct ts_row_push in = { .rank = 0, .step = 0, .n = 2, .ids = ids, .grad = g,
                              .encoding = TS_ENC_FIXED_F32 };
    struct ts_err e = { 0 };
    char before[65], after[65];
    bool applied = true;

    (void)state;
    assert_int_equal(ts_table_pushed_step(t), 0);
    push_ok(t, 0, 0, ids, 2, g);
    /* a push of step 0 is in: the table reaches step 1 once it applies (a join's hold) */
    assert_int_equal(ts_table_step(t), 0);
    assert_int_equal(ts_table_pushed_step(t), 1);
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_ESTATE);   /* unflagged */
    in.retry = true;
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_OK);       /* had it */
    assert_false(applied);
    assert_int_equal(ts_table_wait(t, 1, 20, &e), TS_ETIMEDOUT);        /* rank 1 to come */
    push_ok(t, 1, 0, ids, 2, g);
    assert_int_equal(ts_table_wait(t, 1, 0, &e), TS_OK);
    assert_int_equal(ts_table_pushed_step(t), 1);   /* applied, nothing of step 1 in */
    assert_int_equal(ts_table_sha256(&t, 1, before, &e), TS_OK);
    in.rank = 1;   /* step 0 applied: both ranks' retries of it are taken unchanged */
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_OK);
    assert_false(applied);
    assert_int_equal(ts_table_sha256(&t, 1, after, &e), TS_OK);
    assert_string_equal(before, after);
    in.step = 2;   /* a step still to come is no retry */
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_EINVAL);
    in.step = 1;   /* the first push of step 1, flagged: taken */
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_OK);
    in.ids = (const uint64_t[]){ 9, 3 };   /* a retry is checked as any push */
    assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_EINVAL);
    ts_table_free(t);
}

/* An elastic slot redone by its new owner (table.h, "Elastic jobs"): a pull of version s on a
 * table at step s + 1 reads the rows as step s found them (a row the step created: its initial
 * values, a row its lifetime sweep dropped: its values before), and rows the step did not
 * touch as they are; two versions back, or after a restore, the newest. */
static void t_version_before(void **state)
{
    static const uint64_t ids[] = { 3, 9 }, all[] = { 9, 5, 3 };
    static const float g[] = { 1, 2, 3, 4 };
    struct ts_job j = job(2, true, 2, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "embx", 2, "normal:0.1", 5, "adagrad:lr=0.1", NULL);
    struct ts_table_cfg c = { .name = "ttlx", .dim = 2, .max_id = 100, .init = "zeros",
                              .seed = 1, .optimizer = "sgd:lr=1", .ttl_steps = 1 };
    struct ts_table *l;
    struct ts_err e = { 0 };
    float v0[6], v1[6], v[6];

    (void)state;
    assert_int_equal(ts_table_pull(t, 0, 0, 0, all, 3, v0, &e), TS_OK);   /* initial values */
    push_ok(t, 0, 0, ids, 1, g);    /* row 3 by rank 0, row 9 by rank 1 */
    push_ok(t, 1, 0, ids + 1, 1, g + 2);
    assert_int_equal(ts_table_pull(t, 0, 1, 0, all, 3, v1, &e), TS_OK);
    assert_true(memcmp(v0, v1, sizeof(v0)) != 0);
    assert_int_equal(ts_table_pull(t, 0, 0, 0, all, 3, v, &e), TS_OK);   /* version 0 again */
    assert_memory_equal(v, v0, sizeof(v));
    push_ok(t, 0, 1, ids + 1, 1, g);   /* step 1 touches row 9 only */
    push_ok(t, 1, 1, NULL, 0, NULL);
    assert_int_equal(ts_table_pull(t, 0, 1, 0, all, 3, v, &e), TS_OK);   /* version 1 */
    assert_memory_equal(v, v1, sizeof(v));
    assert_int_equal(ts_table_pull(t, 0, 0, 0, all, 3, v, &e), TS_OK);   /* gone: the newest */
    assert_memory_equal(v + 2, v1 + 2, 4 * sizeof(float));               /* rows 5 and 3 */
    assert_true(memcmp(v, v1, 2 * sizeof(float)) != 0);                  /* row 9 moved on */
    ts_table_free(t);

    /* A step whose sweep dropped rows keeps their values as they were before it too. */
    assert_int_equal(ts_table_create(&j, &c, NULL, &l, &e), TS_OK);
    push_ok(l, 0, 0, ids, 1, g);
    push_ok(l, 1, 0, NULL, 0, NULL);
    assert_int_equal(ts_table_pull(l, 0, 1, 0, all, 3, v1, &e), TS_OK);   /* version 1 */
    push_ok(l, 0, 1, ids + 1, 1, g);   /* step 1 creates row 9; its sweep drops row 3 */
    push_ok(l, 1, 1, NULL, 0, NULL);
    assert_int_equal(ts_table_count(l), 1);
    assert_int_equal(ts_table_pull(l, 0, 2, 0, all, 3, v, &e), TS_OK);   /* version 2 */
    assert_true(v[0] == -0.5f && v[1] == -1.0f);   /* row 9 now */
    assert_true(v[4] == 0 && v[5] == 0);           /* row 3 gone: its initial zeros */
    assert_true(v1[4] == -0.5f && v1[5] == -1.0f);
    assert_int_equal(ts_table_pull(l, 0, 1, 0, all, 3, v, &e), TS_OK);   /* version 1 */
    assert_memory_equal(v, v1, sizeof(v));          /* row 9's zeros, row 3 as it was */
    ts_table_free(l);
}

/* ASP applies each push at once, SSP bounds pulls by the slowest clock. */
static void t_async(void **state)
{
    static const uint64_t id[] = { 4 };
    static const float g[] = { 2, 4 };
    struct ts_job aj = job(2, false, 2, TS_MODE_ASP), sj = job(2, false, 2, TS_MODE_SSP);
    struct ts_table *a = mk(&aj, "emb", 2, "zeros", 1, "sgd:lr=1", NULL);
    struct ts_table *s = mk(&sj, "emb", 2, "zeros", 1, "sgd:lr=1", NULL);
    float v[2];

    (void)state;
    push_ok(a, 0, 0, id, 1, g);
    assert_int_equal(ts_table_pull(a, 1, 5, 0, id, 1, v, NULL), TS_OK);
    assert_true(v[0] == -1.0f && v[1] == -2.0f);
    push_ok(a, 0, 1, id, 1, g);                            /* rank 0 runs ahead */
    assert_int_equal(push(a, 0, 1, id, 1, g, NULL), TS_ESTATE);
    assert_int_equal(push(a, 1, 1, id, 1, g, NULL), TS_EINVAL);   /* rank 1 is at step 0 */
    assert_int_equal(ts_table_step(a), 0);
    assert_int_equal(ts_table_pushed_step(a), 2);   /* the fastest rank's clock */
    /* SSP, staleness 1: rank 0 at step 2 may read step 2 only once rank 1 reached 1 */
    push_ok(s, 0, 0, id, 1, g);
    push_ok(s, 0, 1, id, 1, g);
    assert_int_equal(ts_table_pull(s, 0, 2, 20, id, 1, v, NULL), TS_ETIMEDOUT);
    assert_int_equal(ts_table_pull(s, 0, 1, 0, id, 1, v, NULL), TS_OK);
    push_ok(s, 1, 0, id, 1, g);
    assert_int_equal(ts_table_pull(s, 0, 2, 0, id, 1, v, NULL), TS_OK);
    assert_true(v[0] == -3.0f && v[1] == -6.0f);
    ts_table_free(a);
    ts_table_free(s);
}

/* Ranks on their own threads, as a shard's connection threads call the table: each pushes a
 * step, then pulls the next (waiting for the others), as a trainer does. The bits are those of
 * the same pushes made one after another. */
struct ranker {
    struct ts_table *t;
    uint32_t rank;
    ts_status st;
};

static void *rank_main(void *arg)
{
    struct ranker *k = arg;
    uint64_t ids[XN];
    float g[XN * XD], out[XN * XD];
    bool applied;

    for (uint64_t s = 0; !k->st && s < XSTEPS; s++) {
        struct ts_row_push in = { .rank = k->rank, .step = s, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_FIXED_F32 };

        in.n = xpush(k->rank, s, ids, g);
        if (!(k->st = ts_table_push(k->t, &in, &applied, NULL)))
            k->st = ts_table_pull(k->t, k->rank, s + 1, 10000, ids, in.n, out, NULL);
    }
    return NULL;
}

/* Captures for snapshots: at the armed step (at once, or when a step's update reaches it),
 * incremental (the rows changed since the last) or full, records equal to the rows; a capture
 * past its step refused; one dropped gives its rows back to the next; and the records loaded
 * into two other stores, split by id, hash as the table. */
static bool odd(void *ctx, uint64_t id)
{
    return (id & 1) == (uint64_t)(uintptr_t)ctx;
}

static struct ts_table_capture take(struct ts_table *t, uint64_t step, bool want_ready)
{
    struct ts_table_capture c = { 0 };
    struct ts_err e = { 0 };
    bool ready = false;

    if (ts_table_capture_take(t, step, &c, &ready, &e))
        fail_msg("take %llu: %s", (unsigned long long)step, e.msg);
    assert_int_equal(ready, want_ready);
    return c;
}

static void t_capture(void **state)
{
    struct ts_job j = job(1, true, 4, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "xcap", 4, "normal:0.1", 3, "adagrad:lr=0.5", NULL);
    uint64_t ids[100], two[2] = { 5, 200 }, nine[1] = { 9 };
    float g[100 * 4], v[4], st[4];
    struct ts_row_meta meta;
    struct ts_err e = { 0 };
    size_t rb = ts_table_record_bytes(t);
    bool armed;

    (void)state;
    assert_int_equal(rb, 24 + 4 * 4 * 2);
    for (int i = 0; i < 100; i++)
        ids[i] = (uint64_t)i + 1;
    for (int i = 0; i < 400; i++)
        g[i] = (float)(i % 7) - 3.0f;
    push_ok(t, 0, 0, ids, 100, g);
    /* at the table's step: taken at once, every changed row, ascending, as stored */
    assert_int_equal(ts_table_arm(t, 1, false, &armed, &e), TS_OK);
    assert_true(armed);
    assert_true(ts_table_captured(t, 1));
    struct ts_table_capture c1 = take(t, 1, true);
    assert_int_equal(c1.n, 100);
    for (size_t k = 0; k < c1.n; k++) {
        const uint8_t *r = c1.records + k * rb;
        uint64_t id, upd, step;
        memcpy(&id, r, 8);
        memcpy(&upd, r + 8, 8);
        memcpy(&step, r + 16, 8);
        assert_int_equal(id, k + 1);
        row(t, id, v, st, &meta);
        assert_int_equal(upd, meta.updates);
        assert_int_equal(step, meta.step);
        assert_memory_equal(r + 24, v, sizeof(v));
        assert_memory_equal(r + 24 + sizeof(v), st, sizeof(st));
    }
    assert_int_equal(c1.rows, 100);
    /* incremental: only the rows step 1 changed; all the rows the table held counted (200
     * is new) */
    push_ok(t, 0, 1, two, 2, g);
    assert_false(ts_table_capture_pending(t, 2));
    assert_int_equal(ts_table_arm(t, 2, false, &armed, &e), TS_OK);
    assert_true(ts_table_capture_pending(t, 2));
    assert_false(ts_table_capture_pending(t, 3));
    struct ts_table_capture c2 = take(t, 2, true);
    assert_false(ts_table_capture_pending(t, 2));
    assert_int_equal(c2.n, 2);
    assert_int_equal(c2.rows, 101);
    /* past its step: nothing armed; armed ahead: taken by the update that reaches it */
    assert_int_equal(ts_table_arm(t, 1, false, &armed, &e), TS_OK);
    assert_false(armed);
    assert_int_equal(ts_table_arm(t, 3, false, &armed, &e), TS_OK);
    assert_true(armed);
    struct ts_table_capture none = take(t, 3, false);
    assert_int_equal(none.n, 0);
    push_ok(t, 0, 2, nine, 1, g);
    struct ts_table_capture c3 = take(t, 3, true);
    assert_int_equal(c3.n, 1);
    assert_int_equal(c3.rows, 101);   /* as the update that reached step 3 left them */
    /* written nowhere (the snapshot failed): its rows come back in the next capture */
    ts_table_capture_undo(t, &c3);
    push_ok(t, 0, 3, two, 1, g);
    assert_int_equal(ts_table_arm(t, 4, false, &armed, &e), TS_OK);
    struct ts_table_capture c4 = take(t, 4, true);
    assert_int_equal(c4.n, 2);   /* 5 again and 9 given back */
    /* a full one: every row */
    assert_int_equal(ts_table_arm(t, 4, true, &armed, &e), TS_OK);
    ts_table_disarm(t);   /* dropped before taken: nothing handed out */
    assert_int_equal(ts_table_arm(t, 4, true, &armed, &e), TS_OK);
    struct ts_table_capture full = take(t, 4, true);
    assert_int_equal(full.n, ts_table_count(t));
    /* nothing changed since: an incremental capture at once, of no rows */
    assert_int_equal(ts_table_arm(t, 4, false, &armed, &e), TS_OK);
    struct ts_table_capture empty = take(t, 4, true);
    assert_int_equal(empty.n, 0);
    /* loaded oldest first into two stores split by id, as on a restore to two shards: the
     * same rows, the same fingerprint, at the same step */
    struct ts_table *a = mk(&j, "xcap", 4, "normal:0.1", 3, "adagrad:lr=0.5", NULL);
    struct ts_table *b = mk(&j, "xcap", 4, "normal:0.1", 3, "adagrad:lr=0.5", NULL);
    const struct ts_table_capture *runs[] = { &c1, &c2, &c3, &c4 };
    for (size_t k = 0; k < 4; k++) {
        assert_int_equal(ts_table_load(a, runs[k]->records, runs[k]->n, odd, (void *)1, &e),
                         TS_OK);
        assert_int_equal(ts_table_load(b, runs[k]->records, runs[k]->n, odd, (void *)0, &e),
                         TS_OK);
    }
    assert_int_equal(ts_table_set_step(a, 4, &e), TS_OK);
    assert_int_equal(ts_table_set_step(b, 4, &e), TS_OK);
    char want[65], got[65];
    struct ts_table *both[2] = { a, b };
    sha(&t, 1, want);
    sha(both, 2, got);
    assert_string_equal(got, want);
    /* and from the full run alone */
    struct ts_table *f = mk(&j, "xcap", 4, "normal:0.1", 3, "adagrad:lr=0.5", NULL);
    assert_int_equal(ts_table_load(f, full.records, full.n, NULL, NULL, &e), TS_OK);
    sha(&f, 1, got);
    assert_string_equal(got, want);
    /* the step goes on from there: the same push on the table and its restored copy */
    push_ok(t, 0, 4, two, 2, g);
    assert_int_equal(ts_table_set_step(f, 4, &e), TS_OK);
    push_ok(f, 0, 4, two, 2, g);
    sha(&t, 1, want);
    sha(&f, 1, got);
    assert_string_equal(got, want);
    /* a record past max_id is refused, nothing loaded */
    struct ts_table_cfg small = { .name = "xcap", .dim = 4, .max_id = 50, .init = "zeros",
                                  .seed = 3, .optimizer = "adagrad:lr=0.5" };
    struct ts_table *s;
    assert_int_equal(ts_table_create(&j, &small, NULL, &s, &e), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_table_load(s, c1.records, c1.n, NULL, NULL, &e), TS_ECORRUPT);
    assert_int_equal(ts_table_count(s), 0);
    struct ts_table_capture *all[] = { &c1, &c2, &c3, &c4, &full };
    for (size_t k = 0; k < 5; k++)
        free(all[k]->records);
    ts_table_free(s);
    ts_table_free(f);
    ts_table_free(a);
    ts_table_free(b);
    ts_table_free(t);
}

static void t_threads(void **state)
{
    static const uint32_t order[XRANKS] = { 0, 1, 2 };
    struct ts_job j = job(XRANKS, true, 32, TS_MODE_BSP);
    struct ts_table *t = mk(&j, "emb-x", XD, "uniform:0.05", 7, "adam:lr=0.01", NULL);
    struct ranker k[XRANKS];
    pthread_t th[XRANKS];
    char ref[65], hex[65];

    (void)state;
    for (uint32_t r = 0; r < XRANKS; r++) {
        k[r] = (struct ranker){ .t = t, .rank = r, .st = TS_OK };
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &k[r]), 0);
    }
    for (uint32_t r = 0; r < XRANKS; r++) {
        assert_int_equal(pthread_join(th[r], NULL), 0);
        assert_int_equal(k[r].st, TS_OK);
    }
    assert_int_equal(ts_table_step(t), XSTEPS);
    sha(&t, 1, hex);
    run_split(order, 1, ref);
    assert_string_equal(hex, ref);
    ts_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_config),
        cmocka_unit_test(t_init_deterministic),
        cmocka_unit_test(t_exact_split),
        cmocka_unit_test(t_float_split),
        cmocka_unit_test(t_threads),
        cmocka_unit_test(t_sgd),
        cmocka_unit_test(t_adagrad),
        cmocka_unit_test(t_adam),
        cmocka_unit_test(t_budget),
        cmocka_unit_test(t_bad_input),
        cmocka_unit_test(t_fingerprint),
        cmocka_unit_test(t_dirty),
        cmocka_unit_test(t_pull_bsp),
        cmocka_unit_test(t_retry),
        cmocka_unit_test(t_version_before),
        cmocka_unit_test(t_async),
        cmocka_unit_test(t_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
