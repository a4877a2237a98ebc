/* ctr.h - a seeded click log for a DLRM-style CTR model, drawn on demand with a planted truth.
 *
 * No public click log is packaged for Debian, so training and tests draw one. Sample i (any
 * uint64) is a pure function of (cfg, i): there is no generator state and no file, so any
 * worker draws any sample, and any number of workers sees the same samples.
 *
 * Randomness is counter-based, as in lib/tensor and schedule.c: sample i's key is
 * XXH3-64(le64(i), cfg.seed); stream `tag` of the sample (feature f: tag f; the dense features:
 * tag 64; the label: tag 65) is splitmix64 started from key ^ mix64(tag + 1), so a rejection in
 * one feature's Zipf draw never shifts another's draws.
 *
 * A sample has F categorical ids, D dense floats and a 0/1 label:
 *   rank_f ~ Zipf(n_f, s) on 1..n_f, P(r) = r^-s / H(n_f, s), drawn by rejection-inversion
 *            (Hoermann & Derflinger 1996) in O(1) expected time for any n_f up to 2^40;
 *   id_f   = perm_f(rank_f - 1): a keyed 4-round Feistel permutation of [0, n_f) (cycle
 *            walking on the smallest even power of two >= n_f), so the popular ids are
 *            spread over the whole id range and so over shards, not 0..k;
 *   dense  = D independent N(0, 1) values (Box-Muller);
 *   logit  = bias + sum_f a_f(id_f) + dense_scale * w . dense / sqrt(D) + pair term;
 *   label  = 1 with probability p_true = sigmoid(logit), drawn from the label stream.
 * The planted effects take no memory per id: they are hashes of (seed, f, id).
 *   a_f(id)   = id_scale * shrink(rank) * z(seed, f, id),
 *   shrink(r) = r0 / (r0 + r - 1)       (1 at rank 1, r0 = cfg.shrink_rank),
 *   z         = a sum of four 16-bit uniforms of XXH3-64 of (f, id), centred and scaled to
 *               variance 1 (bounded by +-3.46; integer arithmetic, no libm);
 *   w_d       = z(seed, "dense", d);
 *   pair term = pair_scale * shrink(r_0) shrink(r_1) u_0(id_0) . u_1(id_1) / sqrt(k), a
 *               rank-k interaction of features 0 and 1 (F >= 2) through hidden k-dim
 *               embeddings u_f(id) whose elements are z(seed, f, id, j).
 * Why the shrink: Zipf with s = 1.05 puts 31% (n_f = 10^5) to 45% (10^7) of the draws on ranks
 * past 1000, ids that a training set of a few million samples shows a handful of times each. An
 * effect of full size on them could not be learnt by any model, and the gap to the planted
 * optimum would be set by the tail, not the trainer. With the effect's scale falling as 1/r
 * past r0, what the tail hides is a small part of the logit's variance, and the head, which
 * a trainer sees thousands of times, carries the signal. docs/embeddings.md ("The CTR data
 * generator") has the calibration measured against a DLRM-style model.
 *
 * The bias is not given but solved for: ts_ctr_init picks it (bisection) so that the mean
 * p_true over the 2^14 calibration samples 2^63 + j is cfg.base_ctr.
 *
 * Held-out data: samples 0 .. 2^62 - 1 are for training, ts_ctr_holdout_index(j) = 2^62 + j is
 * held-out sample j. Nothing else separates them: a trainer that reads only indices below 2^62
 * never sees a held-out sample.
 *
 * Bits: the same on every host with the same libm. The Zipf sampler, Box-Muller and the
 * sigmoid use libm's exp, log, expm1, log1p and cos, which glibc computes to within an ulp, not
 * always correctly rounded, so another libm may move a value by an ulp (and very rarely a rank).
 *
 * Ownership: struct ts_ctr_gen is a plain value the caller owns; ts_ctr_init allocates only
 * while it runs. The metrics take caller-owned arrays. Threads: a gen is read-only after
 * ts_ctr_init, so any number of threads may draw from one. */
#ifndef TS_DATA_CTR_H
#define TS_DATA_CTR_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define TS_CTR_MAX_FEATURES 64
#define TS_CTR_MAX_DENSE 64
#define TS_CTR_MAX_K 64
#define TS_CTR_MAX_ROWS (1ull << 40)
#define TS_CTR_HOLDOUT (1ull << 62)    /* the first held-out sample index */
#define TS_CTR_CALIB (1ull << 63)      /* the samples the bias is solved on */

struct ts_ctr_cfg {
    uint64_t seed;
    uint32_t features;                    /* F, 1..64 (default 8) */
    uint64_t rows[TS_CTR_MAX_FEATURES];   /* n_f, 2..2^40 each, rows[0..F) read */
    double zipf_s;                        /* Zipf exponent s > 0, at most 10 (default 1.05) */
    uint32_t dense;                       /* D, 0..64 (default 4) */
    uint32_t k;                           /* hidden interaction dimension, 1..64 (default 4) */
    double base_ctr;                      /* mean p_true, 0.01..0.99 (default 0.25) */
    double id_scale;                      /* std of a rank-1 id's effect, 0..8 (default 1) */
    double shrink_rank;                   /* r0 of shrink(r), 1..2^40 (default 10) */
    double dense_scale;                   /* ~std of the dense term, 0..8 (default 0.5) */
    double pair_scale;                    /* scale of the pair term, 0..8 (default 0.5) */
};

/* The Zipf sampler of one feature: rejection-inversion over 1..n for exponent s. */
struct ts_zipf {
    uint64_t n;
    double s;
    double h_x1;       /* H(1.5) - 1: the lower end of the inverted range */
    double h_n;        /* H(n + 0.5): its upper end */
    double accept;     /* 2 - H^-1(H(2.5) - h(2)): below it a draw is accepted at once */
};

struct ts_ctr_gen {
    struct ts_ctr_cfg cfg;
    double bias;                                  /* solved by ts_ctr_init */
    struct ts_zipf zipf[TS_CTR_MAX_FEATURES];
    uint64_t perm_key[TS_CTR_MAX_FEATURES];       /* Feistel round keys derive from it */
    uint32_t perm_half[TS_CTR_MAX_FEATURES];      /* bits of each Feistel half */
    double w[TS_CTR_MAX_DENSE];                   /* dense weights, scaled */
};

/* The defaults above for `features` features with `rows` rows each (rows[] is filled up to
 * 64 entries; ts_ctr_check judges both values). */
void ts_ctr_cfg_default(struct ts_ctr_cfg *cfg, uint64_t seed, uint32_t features, uint64_t rows);
/* TS_EINVAL naming the first bad field: "ctr.features: 0 is outside 1..64",
 * "ctr.rows[3]: 1 is outside 2..2^40", "ctr.zipf_s: ...", and so on for every field. */
ts_status ts_ctr_check(const struct ts_ctr_cfg *cfg, struct ts_err *err) TS_MUST_CHECK;
/* Checks cfg, derives the samplers and keys, and solves the bias; *g is written only on TS_OK.
 * TS_EINVAL (ts_ctr_check), TS_ENOMEM. Takes about 25 ms for F = 8 (2^14 samples). */
ts_status ts_ctr_init(struct ts_ctr_gen *g, const struct ts_ctr_cfg *cfg,
                      struct ts_err *err) TS_MUST_CHECK;

/* Sample i: ids[0..F) (id_f in [0, n_f)), dense[0..D), *label 0 or 1, and *p_true, the planted
 * click probability. Any output pointer but ids may be NULL when D = 0 or it is not wanted. */
void ts_ctr_sample(const struct ts_ctr_gen *g, uint64_t i, uint64_t *ids, float *dense,
                   float *label, double *p_true);
/* Held-out sample j: TS_CTR_HOLDOUT + j (j < 2^62). */
static inline uint64_t ts_ctr_holdout_index(uint64_t j) { return TS_CTR_HOLDOUT + j; }

/* Feature f's row id of Zipf rank r (1..n_f), the bijection above; and the planted logit of a
 * sample's ids and dense values (what p_true is the sigmoid of; dense may be NULL if D = 0). */
uint64_t ts_ctr_row(const struct ts_ctr_gen *g, uint32_t f, uint64_t rank);
double ts_ctr_logit(const struct ts_ctr_gen *g, const uint64_t *ids, const float *dense);

/* The Zipf sampler alone (the caller checks 2 <= n <= 2^40 and 0 < s <= 10): a draw in 1..n
 * from the splitmix64 stream *state, which advances by one step per try. */
void ts_zipf_init(struct ts_zipf *z, uint64_t n, double s);
uint64_t ts_zipf_draw(const struct ts_zipf *z, uint64_t *state);

/* ---- metrics ---- */

/* One scored sample, the scratch of ts_ctr_auc. */
struct ts_ctr_scored {
    float score;
    float label;
};

/* ROC AUC of score against label (positive when label > 0.5) over n samples: the Mann-Whitney
 * U of the positives' ranks (tied scores share their average rank) over n1 * n0, in
 * O(n log n), exact for n below 2^31. NaN scores rank below every number, tied with each
 * other. scratch: n entries of the caller's, overwritten. NaN when either class is empty. */
double ts_ctr_auc(const float *score, const float *label, size_t n,
                  struct ts_ctr_scored *scratch);
/* Mean binary cross-entropy (natural log) of probabilities p, each clamped to
 * [1e-7, 1 - 1e-7], against label (positive when > 0.5). 0 for n = 0. */
double ts_ctr_logloss(const float *p, const float *label, size_t n);
/* The planted model's own AUC and log-loss on samples first .. first + n - 1 (scored by
 * p_true): the best any model can reach on that set in expectation. TS_EINVAL for n = 0 or a
 * range past 2^64, TS_ENOMEM. */
ts_status ts_ctr_optimum(const struct ts_ctr_gen *g, uint64_t first, size_t n, double *auc,
                         double *logloss, struct ts_err *err) TS_MUST_CHECK;

#endif
