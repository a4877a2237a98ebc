/* ctr.c - the click-log generator of ctr.h: Zipf ids through a keyed permutation, planted
 * effects from hashes, labels from each sample's own counter streams, and the AUC and log-loss
 * it is judged by. */
#include "data/ctr.h"
#include "data/splitmix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define TAG_DENSE 64u
#define TAG_LABEL 65u
#define FEISTEL_ROUNDS 4
#define CALIB_N (1u << 14)
#define SQRT3 1.73205080756887729353
#define TWO_PI 6.28318530717958647692

/* ---- counter-based draws ---- */

/* [0, 1) from the top 53 bits. */
static double unit(uint64_t *s)
{
    return (double)(ts_splitmix64(s) >> 11) * 0x1.0p-53;
}

static void le64(uint8_t *b, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(v >> (8 * k));
}

/* The start of stream `tag` of sample i. */
static uint64_t stream(const struct ts_ctr_gen *g, uint64_t i, uint32_t tag)
{
    uint8_t b[8];

    le64(b, i);
    return XXH3_64bits_withSeed(b, sizeof(b), g->cfg.seed) ^ ts_mix64((uint64_t)tag + 1);
}

/* A hidden value with mean 0 and variance 1 for (what, id): the sum of the four 16-bit
 * quarters of XXH3-64(le64(id) || le64(what), seed), each uniform, centred and scaled. No libm,
 * so these are the same bits everywhere. `what` is f * 65 + j for element j of feature f's
 * hidden vector (j = 64: its scalar effect) and 2^32 + d for dense weight d. */
static double hidden(uint64_t seed, uint64_t what, uint64_t id)
{
    uint8_t b[16];
    uint64_t h;
    uint32_t sum;

    le64(b, id);
    le64(b + 8, what);
    h = XXH3_64bits_withSeed(b, sizeof(b), seed);
    sum = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
          (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
    /* each quarter is (q + 0.5) / 2^16, uniform on (0, 1) with variance 1/12 */
    return (((double)sum + 2.0) * 0x1.0p-16 - 2.0) * SQRT3;
}

#define WHAT_EFFECT 64u
#define WHAT_DENSE (1ull << 32)

/* ---- Zipf by rejection-inversion (Hoermann & Derflinger 1996) ----
 * h(x) = x^-s is the unnormalised pmf on the reals, H its antiderivative
 * (x^(1-s) - 1) / (1 - s), which tends to ln x as s -> 1: the helpers below keep both forms in
 * one expression without cancellation near s = 1. A uniform u on (H(1.5) - 1, H(n + 0.5)] is
 * inverted to x = H^-1(u) and rounded to k; k is accepted when u falls under h(k)'s share
 * of [H(k - 0.5), H(k + 0.5)], which makes P(k) proportional to h(k) exactly. At most 1.015
 * tries on average were measured for n from 2 to 2^40 and s from 0.1 to 10. */

static double log1p_over_x(double x)   /* log(1 + x) / x */
{
    if (fabs(x) > 1e-8)
        return log1p(x) / x;
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

static double expm1_over_x(double x)   /* (e^x - 1) / x */
{
    if (fabs(x) > 1e-8)
        return expm1(x) / x;
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

static double zipf_h(double s, double x)
{
    return exp(-s * log(x));
}

static double zipf_H(double s, double x)
{
    double lx = log(x);

    return expm1_over_x((1.0 - s) * lx) * lx;
}

static double zipf_Hinv(double s, double u)
{
    double t = u * (1.0 - s);

    if (t < -1.0)   /* only by rounding at the range's end: H^-1 is +inf there */
        t = -1.0;
    return exp(log1p_over_x(t) * u);
}

void ts_zipf_init(struct ts_zipf *z, uint64_t n, double s)
{
    z->n = n;
    z->s = s;
    z->h_x1 = zipf_H(s, 1.5) - 1.0;
    z->h_n = zipf_H(s, (double)n + 0.5);
    z->accept = 2.0 - zipf_Hinv(s, zipf_H(s, 2.5) - zipf_h(s, 2.0));
}

uint64_t ts_zipf_draw(const struct ts_zipf *z, uint64_t *state)
{
    for (;;) {
        double u = z->h_n + unit(state) * (z->h_x1 - z->h_n);
        double x = zipf_Hinv(z->s, u);
        uint64_t k;

        if (!(x >= 1.0))
            k = 1;
        else if (x + 0.5 >= (double)z->n)
            k = z->n;
        else
            k = (uint64_t)(x + 0.5);
        if ((double)k - x <= z->accept || u >= zipf_H(z->s, (double)k + 0.5) - zipf_h(z->s, (double)k))
            return k;
    }
}

/* ---- the rank -> id bijection ---- */

static uint64_t round_fn(uint64_t key, int r, uint64_t half)
{
    return ts_mix64(half ^ (key + (uint64_t)(r + 1) * TS_GOLDEN));
}

static uint64_t feistel(uint64_t key, uint32_t hb, uint64_t x)
{
    uint64_t mask = (1ull << hb) - 1, l = x >> hb, r = x & mask;

    for (int k = 0; k < FEISTEL_ROUNDS; k++) {
        uint64_t t = l ^ (round_fn(key, k, r) & mask);

        l = r;
        r = t;
    }
    return (l << hb) | r;
}

static uint64_t feistel_inv(uint64_t key, uint32_t hb, uint64_t x)
{
    uint64_t mask = (1ull << hb) - 1, l = x >> hb, r = x & mask;

    for (int k = FEISTEL_ROUNDS - 1; k >= 0; k--) {
        uint64_t t = r ^ (round_fn(key, k, l) & mask);

        r = l;
        l = t;
    }
    return (l << hb) | r;
}

uint64_t ts_ctr_row(const struct ts_ctr_gen *g, uint32_t f, uint64_t rank)
{
    uint64_t x = rank - 1;

    /* Cycle walking: a permutation of the 2^(2 hb) >= n values, followed from x until it is
     * back inside [0, n), is a permutation of [0, n); the domain is under 4n, so under 4 steps
     * are needed on average. */
    do
        x = feistel(g->perm_key[f], g->perm_half[f], x);
    while (x >= g->cfg.rows[f]);
    return x;
}

static uint64_t rank_of(const struct ts_ctr_gen *g, uint32_t f, uint64_t id)
{
    uint64_t x = id;

    do
        x = feistel_inv(g->perm_key[f], g->perm_half[f], x);
    while (x >= g->cfg.rows[f]);
    return x + 1;
}

/* ---- the planted model ---- */

static double shrink(const struct ts_ctr_gen *g, uint64_t rank)
{
    return g->cfg.shrink_rank / (g->cfg.shrink_rank + (double)(rank - 1));
}

/* The logit but the bias, from the ranks and ids of a sample. */
static double logit_nobias(const struct ts_ctr_gen *g, const uint64_t *rank, const uint64_t *ids,
                           const float *dense)
{
    const struct ts_ctr_cfg *c = &g->cfg;
    double z = 0.0;

    for (uint32_t f = 0; f < c->features; f++)
        z += c->id_scale * shrink(g, rank[f]) * hidden(c->seed, (uint64_t)f * 65 + WHAT_EFFECT,
                                                       ids[f]);
    for (uint32_t d = 0; d < c->dense; d++)
        z += g->w[d] * dense[d];
    if (c->features >= 2 && c->pair_scale > 0.0) {
        double dot = 0.0;

        for (uint32_t j = 0; j < c->k; j++)
            dot += hidden(c->seed, j, ids[0]) * hidden(c->seed, 65 + j, ids[1]);
        z += c->pair_scale * shrink(g, rank[0]) * shrink(g, rank[1]) * dot / sqrt((double)c->k);
    }
    return z;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* The sample's ranks, ids and dense values (dense may be NULL only when D = 0). */
static void draw_x(const struct ts_ctr_gen *g, uint64_t i, uint64_t *rank, uint64_t *ids,
                   float *dense)
{
    const struct ts_ctr_cfg *c = &g->cfg;

    for (uint32_t f = 0; f < c->features; f++) {
        uint64_t st = stream(g, i, f);

        rank[f] = ts_zipf_draw(&g->zipf[f], &st);
        ids[f] = ts_ctr_row(g, f, rank[f]);
    }
    if (c->dense > 0) {
        uint64_t st = stream(g, i, TAG_DENSE);

        /* Box-Muller, both outputs of a pair used */
        for (uint32_t d = 0; d < c->dense; d += 2) {
            double u1 = (double)((ts_splitmix64(&st) >> 11) + 1) * 0x1.0p-53;   /* (0, 1] */
            double u2 = unit(&st), r = sqrt(-2.0 * log(u1));

            dense[d] = (float)(r * cos(TWO_PI * u2));
            if (d + 1 < c->dense)
                dense[d + 1] = (float)(r * sin(TWO_PI * u2));
        }
    }
}

void ts_ctr_sample(const struct ts_ctr_gen *g, uint64_t i, uint64_t *ids, float *dense,
                   float *label, double *p_true)
{
    uint64_t rank[TS_CTR_MAX_FEATURES];
    float dn[TS_CTR_MAX_DENSE];
    double p;

    draw_x(g, i, rank, ids, dn);
    p = sigmoid(g->bias + logit_nobias(g, rank, ids, dn));
    if (dense)
        memcpy(dense, dn, g->cfg.dense * sizeof(float));
    if (label) {
        uint64_t st = stream(g, i, TAG_LABEL);

        *label = unit(&st) < p ? 1.0f : 0.0f;
    }
    if (p_true)
        *p_true = p;
}

double ts_ctr_logit(const struct ts_ctr_gen *g, const uint64_t *ids, const float *dense)
{
    uint64_t rank[TS_CTR_MAX_FEATURES];

    for (uint32_t f = 0; f < g->cfg.features; f++)
        rank[f] = rank_of(g, f, ids[f]);
    return g->bias + logit_nobias(g, rank, ids, dense);
}

/* ---- configuration ---- */

void ts_ctr_cfg_default(struct ts_ctr_cfg *cfg, uint64_t seed, uint32_t features, uint64_t rows)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->seed = seed;
    cfg->features = features;
    for (uint32_t f = 0; f < TS_CTR_MAX_FEATURES && f < features; f++)
        cfg->rows[f] = rows;
    cfg->zipf_s = 1.05;
    cfg->dense = 4;
    cfg->k = 4;
    cfg->base_ctr = 0.25;
    cfg->id_scale = 1.0;
    cfg->shrink_rank = 10.0;
    cfg->dense_scale = 0.5;
    cfg->pair_scale = 0.5;
}

/* v in [lo, hi], NaN refused. */
static ts_status range(const char *name, double v, double lo, double hi, bool open_lo,
                       struct ts_err *err)
{
    if (!(open_lo ? v > lo : v >= lo) || !(v <= hi))
        return ts_err_set(err, TS_EINVAL, "ctr.%s: %g is outside %s%g..%g", name, v,
                          open_lo ? "(" : "", lo, hi);
    return TS_OK;
}

ts_status ts_ctr_check(const struct ts_ctr_cfg *c, struct ts_err *err)
{
    if (c->features < 1 || c->features > TS_CTR_MAX_FEATURES)
        return ts_err_set(err, TS_EINVAL, "ctr.features: %u is outside 1..%u", c->features,
                          TS_CTR_MAX_FEATURES);
    for (uint32_t f = 0; f < c->features; f++)
        if (c->rows[f] < 2 || c->rows[f] > TS_CTR_MAX_ROWS)
            return ts_err_set(err, TS_EINVAL, "ctr.rows[%u]: %llu is outside 2..2^40", f,
                              (unsigned long long)c->rows[f]);
    if (c->dense > TS_CTR_MAX_DENSE)
        return ts_err_set(err, TS_EINVAL, "ctr.dense: %u is outside 0..%u", c->dense,
                          TS_CTR_MAX_DENSE);
    if (c->k < 1 || c->k > TS_CTR_MAX_K)
        return ts_err_set(err, TS_EINVAL, "ctr.k: %u is outside 1..%u", c->k, TS_CTR_MAX_K);
    if (range("zipf_s", c->zipf_s, 0.0, 10.0, true, err) ||
        range("base_ctr", c->base_ctr, 0.01, 0.99, false, err) ||
        range("id_scale", c->id_scale, 0.0, 8.0, false, err) ||
        range("shrink_rank", c->shrink_rank, 1.0, (double)TS_CTR_MAX_ROWS, false, err) ||
        range("dense_scale", c->dense_scale, 0.0, 8.0, false, err) ||
        range("pair_scale", c->pair_scale, 0.0, 8.0, false, err))
        return TS_EINVAL;
    return TS_OK;
}

ts_status ts_ctr_init(struct ts_ctr_gen *out, const struct ts_ctr_cfg *cfg, struct ts_err *err)
{
    struct ts_ctr_gen g;
    double *z, lo = -40.0, hi = 40.0;
    uint64_t rank[TS_CTR_MAX_FEATURES], ids[TS_CTR_MAX_FEATURES];
    float dense[TS_CTR_MAX_DENSE];
    ts_status st;

    if ((st = ts_ctr_check(cfg, err)) != TS_OK)
        return st;
    memset(&g, 0, sizeof(g));
    g.cfg = *cfg;
    for (uint32_t f = 0; f < cfg->features; f++) {
        uint32_t bits = 64 - (uint32_t)__builtin_clzll(cfg->rows[f] - 1);   /* n - 1 >= 1 */

        ts_zipf_init(&g.zipf[f], cfg->rows[f], cfg->zipf_s);
        g.perm_key[f] = ts_mix64(cfg->seed ^ ts_mix64(((uint64_t)f << 32) | 0x7065726dull));
        g.perm_half[f] = (bits + 1) / 2;
    }
    for (uint32_t d = 0; d < cfg->dense; d++)
        g.w[d] = cfg->dense_scale * hidden(cfg->seed, WHAT_DENSE + d, 0) / sqrt((double)cfg->dense);

    /* The bias: mean sigmoid(z + b) rises with b, so bisection on the calibration samples. */
    z = malloc(CALIB_N * sizeof(*z));
    if (!z)
        return ts_err_set(err, TS_ENOMEM, "ctr: no memory for %u calibration logits", CALIB_N);
    for (uint32_t j = 0; j < CALIB_N; j++) {
        draw_x(&g, TS_CTR_CALIB + j, rank, ids, dense);
        z[j] = logit_nobias(&g, rank, ids, dense);
    }
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi), sum = 0.0;

        for (uint32_t j = 0; j < CALIB_N; j++)
            sum += sigmoid(z[j] + mid);
        if (sum / CALIB_N < cfg->base_ctr)
            lo = mid;
        else
            hi = mid;
    }
    free(z);
    g.bias = 0.5 * (lo + hi);
    *out = g;
    return TS_OK;
}

/* ---- metrics ---- */

static int cmp_scored(const void *a, const void *b)
{
    float x = ((const struct ts_ctr_scored *)a)->score, y = ((const struct ts_ctr_scored *)b)->score;
    bool xn = isnan(x), yn = isnan(y);

    if (xn || yn)
        return (int)yn - (int)xn;   /* NaN first, NaNs tied */
    return (x > y) - (x < y);
}

double ts_ctr_auc(const float *score, const float *label, size_t n, struct ts_ctr_scored *scratch)
{
    uint64_t n1 = 0, n0 = 0, twice_u = 0;

    for (size_t i = 0; i < n; i++) {
        scratch[i].score = score[i];
        scratch[i].label = label[i];
    }
    qsort(scratch, n, sizeof(*scratch), cmp_scored);
    /* Per group of tied scores: each positive beats every negative below the group, and ties
     * with the group's negatives count a half; so 2U = sum of pos * (2 neg_below + neg_in).
     * Integers: exact for any n below 2^31. */
    for (size_t i = 0, j; i < n; i = j) {
        uint64_t pos = 0, neg = 0;

        for (j = i; j < n && cmp_scored(&scratch[i], &scratch[j]) == 0; j++) {
            if (scratch[j].label > 0.5f)
                pos++;
            else
                neg++;
        }
        twice_u += pos * (2 * n0 + neg);
        n1 += pos;
        n0 += neg;
    }
    if (n1 == 0 || n0 == 0)
        return NAN;
    return (double)twice_u / 2.0 / ((double)n1 * (double)n0);
}

double ts_ctr_logloss(const float *p, const float *label, size_t n)
{
    double sum = 0.0;

    if (n == 0)
        return 0.0;
    for (size_t i = 0; i < n; i++) {
        double q = p[i];

        if (!(q >= 1e-7))   /* NaN too */
            q = 1e-7;
        if (q > 1.0 - 1e-7)
            q = 1.0 - 1e-7;
        sum -= label[i] > 0.5f ? log(q) : log(1.0 - q);
    }
    return sum / (double)n;
}

ts_status ts_ctr_optimum(const struct ts_ctr_gen *g, uint64_t first, size_t n, double *auc,
                         double *logloss, struct ts_err *err)
{
    uint64_t ids[TS_CTR_MAX_FEATURES];
    float *p, *y;
    struct ts_ctr_scored *scratch;

    if (n == 0 || first + (uint64_t)n - 1 < first)
        return ts_err_set(err, TS_EINVAL, "ctr.optimum: %zu samples from %llu: want 1 or more, "
                          "ending at or below 2^64 - 1", n, (unsigned long long)first);
    p = malloc(n * sizeof(*p));
    y = malloc(n * sizeof(*y));
    scratch = malloc(n * sizeof(*scratch));
    if (!p || !y || !scratch) {
        free(p);
        free(y);
        free(scratch);
        return ts_err_set(err, TS_ENOMEM, "ctr.optimum: no memory for %zu samples", n);
    }
    for (size_t i = 0; i < n; i++) {
        double pt;

        ts_ctr_sample(g, first + i, ids, NULL, &y[i], &pt);
        p[i] = (float)pt;
    }
    *auc = ts_ctr_auc(p, y, n, scratch);
    *logloss = ts_ctr_logloss(p, y, n);
    free(p);
    free(y);
    free(scratch);
    return TS_OK;
}
