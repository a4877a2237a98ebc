/* test_ctr.c - lib/data/ctr: the click-log generator. Samples are a pure function of (cfg, i);
 * ids stay in range up to 2^40 rows; the Zipf sampler matches the exact pmf (chi-square for
 * small n, the head and tail masses for large n); the rank -> id map is a bijection that
 * spreads the popular ids; AUC and log-loss against hand computation and a brute-force
 * reference; the base CTR is the configured one; the planted effects have their documented
 * scale; the planted optimum has signal; bad configurations are refused naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/ctr.h"

static void init(struct ts_ctr_gen *g, const struct ts_ctr_cfg *c)
{
    struct ts_err e = { 0 };

    if (ts_ctr_init(g, c, &e) != TS_OK)
        fail_msg("ts_ctr_init: %s", e.msg);
}

struct sample {
    uint64_t ids[TS_CTR_MAX_FEATURES];
    float dense[TS_CTR_MAX_DENSE];
    float label;
    double p;
};

static void draw(const struct ts_ctr_gen *g, uint64_t i, struct sample *s)
{
    memset(s, 0, sizeof(*s));
    ts_ctr_sample(g, i, s->ids, s->dense, &s->label, &s->p);
}

/* ---- determinism ---- */

static void t_deterministic(void **state)
{
    (void)state;
    struct ts_ctr_cfg c, c2;
    struct ts_ctr_gen g1, g2, g3;
    static const uint64_t idx[] = { 0, 1, 2, 999, 1ull << 40, TS_CTR_HOLDOUT, TS_CTR_HOLDOUT + 5,
                                    UINT64_MAX };
    size_t n = sizeof(idx) / sizeof(idx[0]), differ = 0;

    ts_ctr_cfg_default(&c, 42, 8, 1000000);
    init(&g1, &c);
    init(&g2, &c);
    assert_memory_equal(&g1.bias, &g2.bias, sizeof(double));
    /* drawn in opposite orders by two gens, as two workers would */
    for (size_t k = 0; k < n; k++) {
        struct sample a, b;

        draw(&g1, idx[k], &a);
        draw(&g2, idx[n - 1 - k], &b);
        draw(&g2, idx[k], &b);
        assert_memory_equal(&a, &b, sizeof(a));
    }
    c2 = c;
    c2.seed = 43;
    init(&g3, &c2);
    for (uint64_t i = 0; i < 100; i++) {
        struct sample a, b;

        draw(&g1, i, &a);
        draw(&g3, i, &b);
        differ += memcmp(a.ids, b.ids, 8 * sizeof(uint64_t)) != 0;
        differ += memcmp(a.dense, b.dense, 4 * sizeof(float)) != 0;
    }
    assert_true(differ >= 190);   /* each of 200 comparisons may tie only by chance */
}

/* ---- ids ---- */

static void t_ids_in_range(void **state)
{
    (void)state;
    struct ts_ctr_cfg c;
    struct ts_ctr_gen g;
    uint64_t saw[2] = { 0 }, big = 0;

    ts_ctr_cfg_default(&c, 5, 3, 0);
    c.rows[0] = 2;
    c.rows[1] = 10000000;
    c.rows[2] = TS_CTR_MAX_ROWS;
    init(&g, &c);
    for (uint64_t i = 0; i < 20000; i++) {
        struct sample s;

        draw(&g, i, &s);
        assert_true(s.ids[0] < 2);
        assert_true(s.ids[1] < 10000000);
        assert_true(s.ids[2] < TS_CTR_MAX_ROWS);
        saw[s.ids[0]]++;
        big += s.ids[2] >= (1ull << 39);
        assert_true(s.label == 0.0f || s.label == 1.0f);
        assert_true(s.p > 0.0 && s.p < 1.0);
        /* the public logit, which inverts the id map, gives the same p */
        assert_true(fabs(1.0 / (1.0 + exp(-ts_ctr_logit(&g, s.ids, s.dense))) - s.p) < 1e-12);
    }
    assert_true(saw[0] > 0 && saw[1] > 0);
    assert_true(big > 5000);   /* ids reach the upper half of 2^40, not just 0..k */
}

/* ---- the Zipf sampler ---- */

/* sum_{r=1..n} r^-s: exact below 10^6, then the midpoint integral (error below 1e-12). */
static double harmonic(uint64_t n, double s)
{
    uint64_t m = n < 1000000 ? n : 1000000;
    double h = 0.0;

    for (uint64_t r = m; r >= 1; r--)
        h += pow((double)r, -s);
    if (n > m)
        h += fabs(s - 1.0) < 1e-12 ? log((n + 0.5) / (m + 0.5))
                                   : (pow(n + 0.5, 1.0 - s) - pow(m + 0.5, 1.0 - s)) / (1.0 - s);
    return h;
}

static void t_zipf_small(void **state)
{
    (void)state;
    static const double ss[] = { 0.5, 1.0, 1.05, 2.0 };
    enum { N = 50, DRAWS = 200000 };

    for (size_t k = 0; k < sizeof(ss) / sizeof(ss[0]); k++) {
        struct ts_zipf z;
        uint64_t st = 12345 + k, count[N + 1] = { 0 };
        double h = harmonic(N, ss[k]), chi2 = 0.0;

        ts_zipf_init(&z, N, ss[k]);
        for (int d = 0; d < DRAWS; d++) {
            uint64_t r = ts_zipf_draw(&z, &st);

            assert_true(r >= 1 && r <= N);
            count[r]++;
        }
        for (int r = 1; r <= N; r++) {
            double e = DRAWS * pow(r, -ss[k]) / h;

            chi2 += (count[r] - e) * (count[r] - e) / e;
        }
        /* 49 degrees of freedom: mean 49, sd 9.9; 110 is passed with p < 1e-7 */
        if (chi2 > 110.0)
            fail_msg("s = %g: chi-square %.1f over 49 degrees of freedom", ss[k], chi2);
    }
}

/* count of DRAWS with probability p within 5 binomial standard deviations */
static void near(const char *what, uint64_t count, double p, double draws)
{
    double e = draws * p, sd = sqrt(draws * p * (1.0 - p));

    if (fabs((double)count - e) > 5.0 * sd)
        fail_msg("%s: %llu draws, %.1f expected (sd %.1f)", what, (unsigned long long)count, e, sd);
}

static void t_zipf_large(void **state)
{
    (void)state;
    static const uint64_t ns[] = { 10000000, TS_CTR_MAX_ROWS };
    enum { DRAWS = 200000 };

    for (size_t k = 0; k < 2; k++) {
        struct ts_zipf z;
        uint64_t st = 777 + k, r1 = 0, r10 = 0, tail = 0, n = ns[k], m = 1000000;
        double s = 1.05, h = harmonic(n, s);

        ts_zipf_init(&z, n, s);
        for (int d = 0; d < DRAWS; d++) {
            uint64_t r = ts_zipf_draw(&z, &st);

            assert_true(r >= 1 && r <= n);
            r1 += r == 1;
            r10 += r == 10;
            tail += r > m;
        }
        near("rank 1", r1, 1.0 / h, DRAWS);
        near("rank 10", r10, pow(10.0, -s) / h, DRAWS);
        near("ranks past 10^6", tail, 1.0 - harmonic(m, s) / h, DRAWS);
    }
}

/* ---- the rank -> id map ---- */

static void t_bijection(void **state)
{
    (void)state;
    static const uint64_t ns[] = { 2, 3, 5, 50, 1000, 1023, 1024, 1025, 6000 };

    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        struct ts_ctr_cfg c;
        struct ts_ctr_gen g;
        uint64_t n = ns[k], low = 0;
        uint8_t *hit = calloc(n, 1);

        assert_non_null(hit);
        ts_ctr_cfg_default(&c, 9 + k, 2, n);
        init(&g, &c);
        for (uint64_t r = 1; r <= n; r++) {
            uint64_t id = ts_ctr_row(&g, 1, r);

            assert_true(id < n);
            assert_int_equal(hit[id], 0);
            hit[id] = 1;
            if (r <= 10)
                low += id < n / 10;
        }
        /* every id hit once (n hits, none twice); the ten most popular are not 0..9 */
        if (n >= 1000)
            assert_true(low < 10);
        free(hit);
    }
}

/* ---- metrics ---- */

static double auc(const float *s, const float *y, size_t n)
{
    struct ts_ctr_scored *scratch = malloc((n ? n : 1) * sizeof(*scratch));
    double a;

    assert_non_null(scratch);
    a = ts_ctr_auc(s, y, n, scratch);
    free(scratch);
    return a;
}

static void t_auc_hand(void **state)
{
    (void)state;
    const float tied[] = { 0.3f, 0.3f, 0.3f, 0.3f }, y4[] = { 0, 1, 0, 1 };
    const float up[] = { 0.1f, 0.9f, 0.2f, 0.8f }, down[] = { 0.9f, 0.1f, 0.8f, 0.2f };
    const float mix[] = { 0.1f, 0.4f, 0.4f, 0.8f };   /* pos 0.4 and 0.8, neg 0.1 and 0.4 */
    const float ones[] = { 1, 1, 1, 1 };
    const float nan_s[] = { NAN, 0.5f, NAN }, nan_y[] = { 0, 1, 1 };

    assert_true(auc(tied, y4, 4) == 0.5);
    assert_true(auc(up, y4, 4) == 1.0);
    assert_true(auc(down, y4, 4) == 0.0);
    assert_true(auc(mix, y4, 4) == 3.5 / 4.0);   /* 1 + 0.5 + 1 + 1 of 4 pairs */
    assert_true(isnan(auc(up, ones, 4)));
    assert_true(isnan(auc(up, y4, 0)));
    /* NaN ranks below numbers: the positive 0.5 beats the negative NaN; NaN vs NaN ties */
    assert_true(auc(nan_s, nan_y, 3) == 1.5 / 2.0);
}

static void t_auc_brute(void **state)
{
    (void)state;
    uint64_t st = 99;

    for (int round = 0; round < 20; round++) {
        size_t n = 50 + 23 * (size_t)round;
        float s[600], y[600];
        double w = 0.0, pairs = 0.0;

        for (size_t i = 0; i < n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = (float)((st >> 33) % 17) / 16.0f;   /* few values: many ties */
            y[i] = ((st >> 20) % 3 == 0) ? 1.0f : 0.0f;
            if (round % 2)
                y[i] = s[i] + (float)((st >> 40) % 9) / 16.0f > 0.8f ? 1.0f : 0.0f;
        }
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                if (y[i] > 0.5f && y[j] < 0.5f) {
                    pairs += 1.0;
                    w += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
                }
        assert_true(pairs > 0);
        assert_true(fabs(auc(s, y, n) - w / pairs) < 1e-12);
    }
}

static void t_logloss(void **state)
{
    (void)state;
    const float p[] = { 0.9f, 0.2f, 0.0f, 1.0f }, y[] = { 1, 0, 1, 1 };
    double want = -(log((double)0.9f) + log(1.0 - (double)0.2f) + log(1e-7) + log(1.0 - 1e-7)) / 4;

    assert_true(fabs(ts_ctr_logloss(p, y, 4) - want) < 1e-12);
    assert_true(fabs(ts_ctr_logloss(p, y, 1) + log((double)0.9f)) < 1e-12);
    assert_true(ts_ctr_logloss(p, y, 0) == 0.0);
}

/* ---- the planted model ---- */

static void t_base_ctr(void **state)
{
    (void)state;
    static const double want[] = { 0.25, 0.05 };

    for (int k = 0; k < 2; k++) {
        struct ts_ctr_cfg c;
        struct ts_ctr_gen g;
        double sp = 0.0, sy = 0.0;
        enum { N = 100000 };

        ts_ctr_cfg_default(&c, 3 + k, 8, 10000000);
        c.base_ctr = want[k];
        init(&g, &c);
        for (uint64_t i = 0; i < N; i++) {
            struct sample s;

            draw(&g, i, &s);
            sp += s.p;
            sy += s.label;
        }
        if (fabs(sp / N - want[k]) > 0.01 || fabs(sy / N - want[k]) > 0.01)
            fail_msg("base CTR %g: mean p_true %.4f, mean label %.4f", want[k], sp / N, sy / N);
    }
}

static void t_optimum(void **state)
{
    (void)state;
    struct ts_ctr_cfg c;
    struct ts_ctr_gen g;
    struct ts_err e = { 0 };
    double a, ll, base = -(0.25 * log(0.25) + 0.75 * log(0.75));

    ts_ctr_cfg_default(&c, 11, 8, 1000000);
    init(&g, &c);
    assert_int_equal(ts_ctr_optimum(&g, ts_ctr_holdout_index(0), 100000, &a, &ll, &e), TS_OK);
    if (!(a > 0.7 && a < 1.0) || !(ll < base - 0.05))
        fail_msg("optimum AUC %.4f, log-loss %.4f (a constant 0.25: %.4f)", a, ll, base);
    assert_int_equal(ts_ctr_optimum(&g, 0, 0, &a, &ll, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "ctr.optimum"));
    ts_err_clear(&e);
    assert_int_equal(ts_ctr_optimum(&g, UINT64_MAX, 2, &a, &ll, &e), TS_EINVAL);
    assert_true(ts_ctr_holdout_index(7) == (1ull << 62) + 7);
}

/* The effects as documented: with every scale 0 the click probability is base_ctr for every
 * sample (the optimum is then a coin: AUC 0.5); an id's effect has variance
 * (id_scale * shrink(rank))^2, shrink(r) = r0 / (r0 + r - 1), bounded by 3.47 of it. */
static void t_planted(void **state)
{
    (void)state;
    struct ts_ctr_cfg c;
    struct ts_ctr_gen g;
    struct ts_err e = { 0 };
    double a, ll, sum2 = 0.0;
    enum { RANKS = 4000 };

    ts_ctr_cfg_default(&c, 21, 4, 1000);
    c.id_scale = c.dense_scale = c.pair_scale = 0.0;
    init(&g, &c);
    for (uint64_t i = 0; i < 1000; i++) {
        struct sample s;

        draw(&g, i, &s);
        assert_true(fabs(s.p - 0.25) < 1e-9);
    }
    assert_int_equal(ts_ctr_optimum(&g, 0, 1000, &a, &ll, &e), TS_OK);
    assert_true(a == 0.5);

    ts_ctr_cfg_default(&c, 22, 1, 1000000);
    c.dense = 0;
    c.id_scale = 2.0;
    init(&g, &c);
    for (uint64_t r = 1; r <= RANKS; r++) {
        uint64_t id = ts_ctr_row(&g, 0, r);
        double sh = c.shrink_rank / (c.shrink_rank + (double)(r - 1));
        double v = (ts_ctr_logit(&g, &id, NULL) - g.bias) / (c.id_scale * sh);

        assert_true(fabs(v) <= 3.4642);
        sum2 += v * v;
    }
    if (fabs(sum2 / RANKS - 1.0) > 0.1)
        fail_msg("effect / (id_scale shrink): mean square %.3f, want 1", sum2 / RANKS);
}

/* ---- configuration ---- */

static void refused(const struct ts_ctr_cfg *c, const char *want)
{
    struct ts_err e = { 0 };
    struct ts_ctr_gen g;

    memset(&g, 0xab, sizeof(g));
    assert_int_equal(ts_ctr_check(c, &e), TS_EINVAL);
    if (strncmp(e.msg, want, strlen(want)) != 0)
        fail_msg("got '%s', want it to start '%s'", e.msg, want);
    ts_err_clear(&e);
    assert_int_equal(ts_ctr_init(&g, c, &e), TS_EINVAL);
    assert_int_equal(((uint8_t *)&g)[0], 0xab);   /* *g untouched */
}

static void t_check(void **state)
{
    (void)state;
    struct ts_ctr_cfg ok, c;
    struct ts_err e = { 0 };

    ts_ctr_cfg_default(&ok, 1, 8, 100000);
    assert_int_equal(ts_ctr_check(&ok, &e), TS_OK);

#define BAD(field, value, want) do { c = ok; c.field = value; refused(&c, want); } while (0)
    BAD(features, 0, "ctr.features: 0 is outside 1..64");
    BAD(features, 65, "ctr.features: 65 is outside 1..64");
    BAD(rows[3], 1, "ctr.rows[3]: 1 is outside 2..2^40");
    BAD(rows[7], TS_CTR_MAX_ROWS + 1, "ctr.rows[7]: 1099511627777 is outside 2..2^40");
    BAD(zipf_s, 0.0, "ctr.zipf_s: 0 is outside (0..10");
    BAD(zipf_s, NAN, "ctr.zipf_s: nan");
    BAD(zipf_s, 11.0, "ctr.zipf_s: 11");
    BAD(dense, 65, "ctr.dense: 65 is outside 0..64");
    BAD(k, 0, "ctr.k: 0 is outside 1..64");
    BAD(k, 65, "ctr.k: 65");
    BAD(base_ctr, 0.0, "ctr.base_ctr: 0 is outside 0.01..0.99");
    BAD(base_ctr, 1.0, "ctr.base_ctr: 1 ");
    BAD(id_scale, -1.0, "ctr.id_scale: -1 is outside 0..8");
    BAD(shrink_rank, 0.5, "ctr.shrink_rank: 0.5 is outside 1..");
    BAD(dense_scale, 9.0, "ctr.dense_scale: 9 is outside 0..8");
    BAD(pair_scale, NAN, "ctr.pair_scale: nan");
#undef BAD
    /* rows past features are not looked at */
    c = ok;
    c.features = 2;
    c.rows[2] = 0;
    assert_int_equal(ts_ctr_check(&c, &e), TS_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_deterministic),
        cmocka_unit_test(t_ids_in_range),
        cmocka_unit_test(t_zipf_small),
        cmocka_unit_test(t_zipf_large),
        cmocka_unit_test(t_bijection),
        cmocka_unit_test(t_auc_hand),
        cmocka_unit_test(t_auc_brute),
        cmocka_unit_test(t_logloss),
        cmocka_unit_test(t_base_ctr),
        cmocka_unit_test(t_optimum),
        cmocka_unit_test(t_planted),
        cmocka_unit_test(t_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
