/* ctr.c - the built-in CTR trainer (`--model ctr`; docs/embeddings.md, "The CTR trainer"):
 * a DLRM-style model whose F categorical features each go through a sparse table on the
 * shards, trained on lib/data/ctr.h's click log with a planted truth, so the AUC it reaches is
 * reported beside the best reachable.
 *
 * Step k's global batch is samples k x B .. k x B + B - 1 of the generator, cut into
 * micro-batches of m; micro-batch j belongs to slot j % W (as the MLP trainer's schedule),
 * slot r to rank r unless the job is elastic and slots changed hands. For each slot it owns
 * a worker pulls the slot's samples' rows of every table at version k, computes each
 * micro-batch (lib/model/dlrm.h), sums the dense gradients (int64 fixed point in exact mode,
 * per micro-batch, so the grouping never matters) and pushes every table's rows as the slot's
 * (one gradient row per sample and feature: the SDK merges repeats exactly); then it steps
 * the dense tensors with every slot's sums. In exact mode the result is the same for any
 * worker and shard count, and in an elastic job for any deaths: a slot whose worker died
 * mid-step is computed again by its new owner from the same values (TESSERA_ESLOTS,
 * docs/embeddings.md, "Elastic jobs with tables").
 * A job the shards kept (--keep) or restored from a snapshot goes on from the step its tensors
 * and tables are at, which must agree; a job the cluster takes back to its last snapshot (a
 * shard holding rows went) goes on from the snapshot's step (TESSERA_EROLLBACK).
 * At the end every rank computes the job's fingerprint, which it tells the master (so a job
 * whose rank 0 died still reports one): SHA-256 of the text lines "dense HEX\n" (lib/tensor's
 * params_sha256 of the six dense tensors) and "table NAME HEX\n" per table in order (each
 * table's fingerprint). Rank 0 also scores the held-out samples (ts_ctr_holdout_index) with
 * the final parameters: AUC and log-loss beside the planted model's own. */
#include "worker.h"

#include <inttypes.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/emulate.h"
#include "data/ctr.h"
#include "model/dlrm.h"
#include "tensor/fingerprint.h"
#include "util/json.h"
#include "util/proc.h"

#define CTR_EVAL_CHUNK 4096     /* held-out samples scored at a time */

struct ctr_run {
    const struct train_opts *o;
    FILE *out;                  /* rank 0's progress */
    tessera *t;
    struct ts_ctr_gen gen;
    struct ts_dlrm_shape shape;
    struct ts_dlrm *model;
    int ids[TS_DLRM_NTENSORS];
    int tables[TS_CTR_MAX_FEATURES];
    float *params[TS_DLRM_NTENSORS], *grad[TS_DLRM_NTENSORS];
    /* The sums of each slot this worker computes in a step, int64 (exact) or float, by its
     * position among the worker's slots (made when first needed; acc[0] at the start). */
    void *(*acc)[TS_DLRM_NTENSORS];
    uint64_t numel[TS_DLRM_NTENSORS];
    uint32_t *slots;                       /* the step's slots (tessera_slots) */
    const void *const **grads;             /* the step's sums by position: acc[q] */
    size_t n;                              /* the samples of the slot being computed */
    size_t nmax;                           /* the most samples a slot has (slot 0's) */
    uint64_t *ids_f;                       /* F x n: feature f's ids at ids_f + f x n */
    uint64_t *pf_ids;                      /* F x n: a later step's, for its prefetch */
    float *rows_f;                         /* F x n x dim: the pulled rows, table by table */
    float *grads_f;                        /* F x n x dim: their gradients, one per position */
    float *emb, *demb;                     /* micro x F x dim: a micro-batch's rows, grads */
    float *dense, *label;                  /* n x D, n */
    double loss;                           /* this rank's summed loss of the last step */
    uint64_t start;                        /* the step the job was at (kept, restored, or
                                            * the one an elastic worker joined at) */
    uint64_t steps;                        /* the step the run ends at */
    uint32_t rollbacks;                    /* the job went back to a snapshot this many times */
    uint32_t reslots;                      /* an elastic job's slots changed hands mid-step */
    char table_hex[TS_CTR_MAX_FEATURES][65];   /* each table's fingerprint (fingerprint()) */
};

static int fail(struct ctr_run *r, const struct tessera_error *e, const char *what)
{
    fprintf(stderr, "tessera-worker: rank %u: %s: %s\n", r->o->sdk.rank, what, e->message);
    return 1;
}

/* After a call answered TESSERA_EROLLBACK: the dense tensors of the step the job went back
 * to (the tables' rows are the shards'), *k that step. A pull answered TESSERA_EROLLBACK
 * means another rollback came meanwhile (a shard that joined just after the first): its
 * step's. 0, or 1 after saying why. */
static int pull_after_rollback(struct ctr_run *r, uint64_t *k)
{
    struct tessera_error e;
    int rc;

    do {
        *k = tessera_resume_step(r->t);
        r->rollbacks++;
        rc = 0;
        for (int i = 0; i < TS_DLRM_NTENSORS && !rc; i++)
            rc = tessera_pull(r->t, r->ids[i], *k, r->params[i], &e);
    } while (rc == TESSERA_EROLLBACK);
    return rc ? fail(r, &e, "pull after the rollback") : 0;
}

/* A step's call that failed: TESSERA_EROLLBACK (the job went back to its last snapshot) or
 * TESSERA_ESLOTS (an elastic job's slots changed hands; a table call's is followed by
 * tessera_elastic_recover, `table`; tessera_step_slots did that itself): the caller goes on
 * from tessera_resume_step. Else 1 after saying why. */
static int step_fail(struct ctr_run *r, uint64_t k, bool table, const struct tessera_error *e,
                     const char *what)
{
    struct tessera_error re;

    if (e->code == TESSERA_EROLLBACK) {
        if (r->o->sdk.rank == 0)
            fprintf(r->out, "%s\n", e->message);
        return TESSERA_EROLLBACK;
    }
    if (e->code != TESSERA_ESLOTS)
        return fail(r, e, what);
    if (table && tessera_elastic_recover(r->t, k, r->params, &re))
        return fail(r, &re, "slots");
    fprintf(stderr, "tessera-worker: rank %u: step %" PRIu64 ": %s: %s\n", r->o->sdk.rank, k,
            what, e->message);
    return TESSERA_ESLOTS;
}

static int fail_err(struct ctr_run *r, const struct ts_err *err, const char *what)
{
    struct tessera_error e = { .code = (int)err->code };

    snprintf(e.message, sizeof(e.message), "%s", err->msg);
    return fail(r, &e, what);
}

/* The samples of a slot in a step: whole micro-batches j with j % W == slot. */
static size_t slot_samples(const struct train_opts *o, uint32_t slot)
{
    uint32_t mbs = o->batch / o->micro, w = o->sdk.workers;

    return (size_t)(mbs / w + (slot < mbs % w)) * o->micro;
}

/* Whether the shards hold tensors or tables at another step than the first tensor's (said).
 * In an elastic job a table may be a step ahead: every slot pushed its rows of the step under
 * way, and the tensors wait for a slot's push of it. */
static bool mixed(struct ctr_run *r)
{
    uint64_t want = tessera_version(r->t, r->ids[0]), v;
    const char *what = NULL;
    char name[32];

    for (int i = 1; !what && i < TS_DLRM_NTENSORS; i++)
        if ((v = tessera_version(r->t, r->ids[i])) != want)
            what = ts_dlrm_tensor(&r->shape, i).name;
    for (uint32_t f = 0; !what && f < r->o->ctr_features; f++)
        if ((v = tessera_table_version(r->t, r->tables[f])) != want &&
            (!r->o->sdk.elastic || v != want + 1)) {
            snprintf(name, sizeof(name), "table emb%u", f);
            what = name;
        }
    if (what)
        fprintf(stderr, "tessera-worker: %s is at step %" PRIu64 ", %s at %" PRIu64 ": the "
                "shards hold a mixed state; restart the cluster\n", what, v,
                ts_dlrm_tensor(&r->shape, 0).name, want);
    return what != NULL;
}

static int setup(struct ctr_run *r)
{
    const struct train_opts *o = r->o;
    struct ts_ctr_cfg cfg;
    struct ts_err err = { 0 };
    struct tessera_error e;
    size_t e_row, cap;

    ts_ctr_cfg_default(&cfg, o->seed, o->ctr_features, o->ctr_rows);
    r->shape = (struct ts_dlrm_shape){ o->ctr_features, o->ctr_dim, cfg.dense, 64, 32 };
    if (ts_ctr_init(&r->gen, &cfg, &err) ||
        ts_dlrm_create(&r->shape, (int)(o->micro > CTR_EVAL_CHUNK ? o->micro : CTR_EVAL_CHUNK),
                       &r->model, &err))
        return fail_err(r, &err, "model");
    r->acc = calloc(o->sdk.workers, sizeof(*r->acc));
    r->slots = calloc(o->sdk.workers, sizeof(*r->slots));
    r->grads = calloc(o->sdk.workers, sizeof(*r->grads));
    if (!r->acc || !r->slots || !r->grads)
        return fprintf(stderr, "tessera-worker: out of memory\n"), 1;
    if (sdk_connect_delayed(&o->sdk, o->delay_ms, &r->t, &e))
        return fail(r, &e, "connect");
    for (int i = 0; i < TS_DLRM_NTENSORS; i++) {
        struct ts_mlp_tensor d = ts_dlrm_tensor(&r->shape, i);
        uint64_t shape[2] = { d.rows, d.cols };
        size_t esz = o->sdk.exact ? sizeof(int64_t) : sizeof(float);
        if (tessera_register(r->t, d.name, shape, d.cols > 1 ? 2 : 1, d.init, o->seed, d.fan_in,
                             d.fan_out, o->partition_bytes, &r->ids[i], &e))
            return fail(r, &e, "register");
        r->numel[i] = d.rows * d.cols;
        r->params[i] = malloc(r->numel[i] * sizeof(float));
        r->grad[i] = malloc(r->numel[i] * sizeof(float));
        r->acc[0][i] = malloc(r->numel[i] * esz);
        if (!r->params[i] || !r->grad[i] || !r->acc[0][i])
            return fprintf(stderr, "tessera-worker: out of memory\n"), 1;
    }
    for (uint32_t f = 0; f < o->ctr_features; f++) {
        struct tessera_table_spec spec = TESSERA_TABLE_SPEC_INIT;
        char name[32];
        snprintf(name, sizeof(name), "emb%u", f);
        spec.name = name;
        spec.dim = o->ctr_dim;
        spec.max_id = o->ctr_rows - 1;
        spec.init = "normal:0.01";
        spec.seed = o->seed;
        spec.optimizer = o->table_optimizer;
        spec.ttl_steps = o->row_ttl_steps;
        spec.ttl_seconds = o->row_ttl_seconds;
        if (tessera_table_register(r->t, &spec, &r->tables[f], &e))
            return fail(r, &e, "register table");
    }
    /* An elastic worker may join a job under way (a respawned rank): every tensor at the
     * newest step, which the tables are at too (tessera.h, tessera_join). */
    r->start = tessera_version(r->t, r->ids[0]);
    if (o->sdk.elastic && tessera_join(r->t, r->params, &r->start, &e))
        return fail(r, &e, "join");
    /* A job at the step it was registered at (a new one, kept, or restored from a snapshot):
     * every tensor and table there (a running elastic job moved on meanwhile). */
    if (r->start == tessera_version(r->t, r->ids[0]) && mixed(r))
        return 1;
    for (int i = 0; !o->sdk.elastic && i < TS_DLRM_NTENSORS; i++)
        if (tessera_pull(r->t, r->ids[i], r->start, r->params[i], &e))
            return fail(r, &e, "pull");
    r->nmax = slot_samples(o, 0);
    /* room for a slot's samples or a chunk of held-out ones, whichever is more */
    cap = (r->nmax > CTR_EVAL_CHUNK ? r->nmax : CTR_EVAL_CHUNK) + 1;
    e_row = (size_t)o->ctr_features * o->ctr_dim;
    r->ids_f = malloc(cap * o->ctr_features * sizeof(uint64_t));
    r->pf_ids = malloc((r->nmax + 1) * o->ctr_features * sizeof(uint64_t));
    r->rows_f = malloc(cap * e_row * sizeof(float));
    r->grads_f = malloc(cap * e_row * sizeof(float));
    r->emb = malloc(cap * e_row * sizeof(float));
    r->demb = malloc(((size_t)o->micro + 1) * e_row * sizeof(float));
    r->dense = malloc(cap * (cfg.dense + 1) * sizeof(float));
    r->label = malloc(cap * sizeof(float));
    if (!r->ids_f || !r->pf_ids || !r->rows_f || !r->grads_f || !r->emb || !r->demb || !r->dense || !r->label)
        return fprintf(stderr, "tessera-worker: out of memory\n"), 1;
    return 0;
}

/* Samples first .. first + count - 1 into ids_f (feature-major, stride `stride`), dense and
 * label at position `at`. */
static void draw(struct ctr_run *r, uint64_t first, size_t count, size_t at, size_t stride)
{
    uint64_t ids[TS_CTR_MAX_FEATURES];
    uint32_t nd = r->gen.cfg.dense;

    for (size_t i = 0; i < count; i++) {
        ts_ctr_sample(&r->gen, first + i, ids, r->dense + (at + i) * nd, r->label + at + i, NULL);
        for (uint32_t f = 0; f < r->gen.cfg.features; f++)
            r->ids_f[f * stride + at + i] = ids[f];
    }
}

/* Sample i's rows (of n pulled per table, feature-major) into out as the model wants them:
 * its F rows one after another. */
static void gather(const struct ctr_run *r, size_t i, size_t n, float *out)
{
    uint32_t dim = r->o->ctr_dim;

    for (uint32_t f = 0; f < r->o->ctr_features; f++)
        memcpy(out + (size_t)f * dim, r->rows_f + ((size_t)f * n + i) * dim,
               dim * sizeof(float));
}

/* Announces this rank's rows of step k to the shards (--prefetch-depth), to be read from
 * their disk tiers while this step computes. */
static int prefetch(struct ctr_run *r, uint64_t k, uint32_t slot)
{
    const struct train_opts *o = r->o;
    uint32_t m = o->micro, mbs = o->batch / m, F = o->ctr_features;
    uint64_t ids[TS_CTR_MAX_FEATURES];
    struct tessera_error e;
    size_t at = 0, n = slot_samples(o, slot);

    for (uint32_t j = slot; j < mbs; j += o->sdk.workers)
        for (uint32_t i = 0; i < m; i++, at++) {
            ts_ctr_sample(&r->gen, k * o->batch + (uint64_t)j * m + i, ids, NULL, NULL, NULL);
            for (uint32_t f = 0; f < F; f++)
                r->pf_ids[(size_t)f * n + at] = ids[f];
        }
    for (uint32_t f = 0; f < F; f++)
        if (tessera_prefetch_rows(r->t, r->tables[f], n, r->pf_ids + (size_t)f * n, &e))
            return fail(r, &e, "prefetch rows");
    return 0;
}

/* The sums of the slot at position q of this step's slots (made at its first use; NULL: out
 * of memory). */
static void **sums_of(struct ctr_run *r, size_t q)
{
    size_t esz = r->o->sdk.exact ? sizeof(int64_t) : sizeof(float);

    for (int i = 0; i < TS_DLRM_NTENSORS; i++)
        if (!r->acc[q][i] && !(r->acc[q][i] = malloc(r->numel[i] * esz)))
            return NULL;
    return r->acc[q];
}

/* Slot `slot` of step k: its samples, micro-batch by micro-batch, their rows at version k,
 * the dense gradients summed into acc and the rows' gradients pushed as the slot's. */
static int compute_slot(struct ctr_run *r, uint64_t k, uint32_t slot, void **acc)
{
    const struct train_opts *o = r->o;
    uint32_t dim = o->ctr_dim, F = o->ctr_features, m = o->micro;
    uint32_t mbs = o->batch / m, w = o->sdk.workers;
    size_t e_row = (size_t)F * dim, at = 0;
    struct tessera_error e;

    r->n = slot_samples(o, slot);
    for (uint32_t j = slot; j < mbs; j += w, at += m)
        draw(r, k * o->batch + (uint64_t)j * m, m, at, r->n);
    for (uint32_t f = 0; f < F; f++)
        if (tessera_pull_rows(r->t, r->tables[f], k, r->n, r->ids_f + (size_t)f * r->n,
                              r->rows_f + (size_t)f * r->n * dim, &e))
            return step_fail(r, k, true, &e, "pull rows");
    /* The step D ahead, and at the run's first step the ones between (this worker's own
     * slot's: a hint). */
    for (uint64_t d = k == r->start ? 1 : o->prefetch_depth;
         slot == o->sdk.rank && d <= o->prefetch_depth; d++)
        if (k + d < r->steps && prefetch(r, k + d, slot))
            return 1;
    for (int i = 0; i < TS_DLRM_NTENSORS; i++)
        memset(acc[i], 0, r->numel[i] * (o->sdk.exact ? sizeof(int64_t) : sizeof(float)));
    for (size_t s = 0; s < r->n; s += m) {
        for (size_t i = 0; i < m; i++)
            gather(r, s + i, r->n, r->emb + i * e_row);
        double loss = ts_dlrm_grad(r->model, r->params, r->emb,
                                   r->dense + s * r->gen.cfg.dense, r->label + s, (int)m,
                                   r->grad, r->demb);
        if (!isfinite(loss)) {
            fprintf(stderr, "tessera-worker: rank %u: step %" PRIu64 ": the loss is not "
                    "finite (%g)\n", o->sdk.rank, k, loss);
            return 1;
        }
        if (slot == o->sdk.rank)
            r->loss += loss;
        for (int i = 0; i < TS_DLRM_NTENSORS; i++) {
            if (!o->sdk.exact) {
                float *a = acc[i];
                for (uint64_t x = 0; x < r->numel[i]; x++)
                    a[x] += r->grad[i][x];
            } else if (tessera_fixed_add_f32(acc[i], r->grad[i], (size_t)r->numel[i], &e)) {
                return fail(r, &e, "gradient");
            }
        }
        /* each position's row gradient, table by table */
        for (size_t i = 0; i < m; i++)
            for (uint32_t f = 0; f < F; f++)
                memcpy(r->grads_f + ((size_t)f * r->n + s + i) * dim,
                       r->demb + i * e_row + (size_t)f * dim, dim * sizeof(float));
    }
    for (uint32_t f = 0; f < F; f++)
        if (tessera_push_rows_slot(r->t, r->tables[f], k, slot, r->n,
                                   r->ids_f + (size_t)f * r->n,
                                   r->grads_f + (size_t)f * r->n * dim, &e))
            return step_fail(r, k, true, &e, "push rows");
    return 0;
}

/* Step k: each slot this worker owns (its rank's alone outside elastic jobs), then the dense
 * tensors' step of those slots. */
static int step(struct ctr_run *r, uint64_t k)
{
    size_t ns = tessera_slots(r->t, r->slots, r->o->sdk.workers);
    struct tessera_error e;
    int rc;

    r->loss = 0;
    for (size_t q = 0; q < ns; q++) {
        void **acc = sums_of(r, q);
        if (!acc)
            return fprintf(stderr, "tessera-worker: out of memory\n"), 1;
        if ((rc = compute_slot(r, k, r->slots[q], acc)))
            return rc;
        r->grads[q] = (const void *const *)acc;
    }
    if (tessera_step_slots(r->t, k, ns, r->slots, r->grads, r->params, &e))
        return step_fail(r, k, false, &e, "step");
    return 0;
}

/* The held-out AUC and log-loss of the parameters at version `version`. */
static int evaluate(struct ctr_run *r, uint64_t version, double *auc, double *logloss)
{
    const struct train_opts *o = r->o;
    size_t total = o->eval_samples, e_row = (size_t)o->ctr_features * o->ctr_dim;
    float *p = malloc(total * sizeof(float)), *y = malloc(total * sizeof(float));
    struct ts_ctr_scored *scratch = malloc(total * sizeof(*scratch));
    struct tessera_error e;
    int rc = 0;

    if (!p || !y || !scratch) {
        fprintf(stderr, "tessera-worker: out of memory for %zu held-out samples\n", total);
        rc = 1;
    }
    for (size_t s = 0; !rc && s < total; s += CTR_EVAL_CHUNK) {
        size_t n = total - s < CTR_EVAL_CHUNK ? total - s : CTR_EVAL_CHUNK;
        draw(r, ts_ctr_holdout_index(s), n, 0, n);
        for (uint32_t f = 0; !rc && f < o->ctr_features; f++)
            if (tessera_pull_rows(r->t, r->tables[f], version, n, r->ids_f + (size_t)f * n,
                                  r->rows_f + (size_t)f * n * o->ctr_dim, &e))
                rc = fail(r, &e, "pull rows");
        for (size_t i = 0; !rc && i < n; i++)
            gather(r, i, n, r->emb + i * e_row);
        if (!rc)
            ts_dlrm_predict(r->model, r->params, r->emb, r->dense, (int)n, p + s);
        memcpy(y + s, r->label, n * sizeof(float));
    }
    if (!rc) {
        *auc = ts_ctr_auc(p, y, total, scratch);
        *logloss = ts_ctr_logloss(p, y, total);
    }
    free(p);
    free(y);
    free(scratch);
    return rc;
}

/* The job's fingerprint (the file's comment) at version, and the dense one alone. */
static int fingerprint(struct ctr_run *r, uint64_t version, char hex[65], char dense[65])
{
    struct ts_fp_tensor fp[TS_DLRM_NTENSORS];
    struct tessera_error e;
    struct ts_err err = { 0 };
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned len = 0;
    char line[128];
    int rc = 0;

    for (int i = 0; i < TS_DLRM_NTENSORS; i++)
        fp[i] = (struct ts_fp_tensor){ ts_dlrm_tensor(&r->shape, i).name, r->params[i],
                                       r->numel[i] };
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 ||
        ts_params_sha256(fp, TS_DLRM_NTENSORS, dense, &err))
        rc = fail_err(r, &err, "fingerprint");
    if (!rc) {
        snprintf(line, sizeof(line), "dense %s\n", dense);
        EVP_DigestUpdate(c, line, strlen(line));
    }
    for (uint32_t f = 0; !rc && f < r->o->ctr_features; f++) {
        char *th = r->table_hex[f];
        if (tessera_table_sha256(r->t, r->tables[f], version, th, &e)) {
            rc = fail(r, &e, "table fingerprint");
            break;
        }
        snprintf(line, sizeof(line), "table emb%u %s\n", f, th);
        EVP_DigestUpdate(c, line, strlen(line));
    }
    if (!rc) {
        EVP_DigestFinal_ex(c, md, &len);
        for (unsigned i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
    }
    EVP_MD_CTX_free(c);
    return rc;
}

/* steps: the final step; ran: how many of them this run did. */
static void report(struct ctr_run *r, uint64_t steps, uint64_t ran, double secs,
                   const char *hex, const char *dense, double auc, double logloss,
                   double best_auc, double best_logloss, uint64_t rows)
{
    const struct train_opts *o = r->o;
    double sps = secs > 0 ? (double)ran * o->batch / secs : 0;
    struct ts_json j;

    fprintf(r->out, "done: %" PRIu64 " steps, held-out AUC %.4f (planted optimum %.4f), "
            "log-loss %.4f (optimum %.4f) on %" PRIu64 " samples, %.0f samples/s, %s over %s\n",
            steps, auc, best_auc, logloss, best_logloss, o->eval_samples, sps,
            o->sdk.exact ? "exact" : "float", tessera_transport(r->t));
    fprintf(r->out, "table rows %" PRIu64 " over %u tables\n", rows, o->ctr_features);
    fprintf(r->out, "params_sha256 %s\n", hex);
    if (!o->json)
        return;
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "job", o->sdk.job);
    ts_json_str(&j, "model", "ctr");
    ts_json_str(&j, "params_sha256", hex);
    ts_json_str(&j, "dense_sha256", dense);
    ts_json_obj(&j, "table_sha256");   /* what params_sha256 hashes with dense_sha256 */
    for (uint32_t f = 0; f < o->ctr_features; f++) {
        char name[16];
        snprintf(name, sizeof(name), "emb%u", f);
        ts_json_str(&j, name, r->table_hex[f]);
    }
    ts_json_end(&j);
    ts_json_num(&j, "auc", auc);
    ts_json_num(&j, "logloss", logloss);
    ts_json_num(&j, "optimum_auc", best_auc);
    ts_json_num(&j, "optimum_logloss", best_logloss);
    ts_json_uint(&j, "eval_samples", o->eval_samples);
    ts_json_uint(&j, "steps", steps);
    ts_json_uint(&j, "start_step", r->start);
    ts_json_uint(&j, "rollbacks", r->rollbacks);
    ts_json_uint(&j, "reslots", r->reslots);
    ts_json_uint(&j, "table_rows", rows);
    ts_json_num(&j, "samples_per_s", sps);
    ts_json_bool(&j, "exact", o->sdk.exact);
    ts_json_str(&j, "transport", tessera_transport(r->t));
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

static void run_free(struct ctr_run *r)
{
    for (int i = 0; i < TS_DLRM_NTENSORS; i++) {
        free(r->params[i]);
        free(r->grad[i]);
        for (uint32_t q = 0; r->acc && q < r->o->sdk.workers; q++)
            free(r->acc[q][i]);
    }
    free(r->acc);
    free(r->slots);
    free(r->grads);
    free(r->ids_f);
    free(r->pf_ids);
    free(r->rows_f);
    free(r->grads_f);
    free(r->emb);
    free(r->demb);
    free(r->dense);
    free(r->label);
    ts_dlrm_free(r->model);
}

int train_ctr(const struct train_opts *o)
{
    struct ctr_run r = { .o = o, .out = o->json ? stderr : stdout };
    uint64_t steps = o->steps ? o->steps : 1000, rows = 0;
    double auc = NAN, logloss = NAN, best_auc = NAN, best_logloss = NAN;
    char hex[65] = "", dense[65] = "";
    struct ts_err err = { 0 };
    int64_t t0;
    int rc;

    ts_mlp_single_thread();
    if ((rc = setup(&r)))
        goto out;
    if (o->sdk.rank == 0)
        fprintf(r.out, "ctr: %u features of %" PRIu64 " rows (dim %u, %s), %u dense, MLP "
                "%u-64-32-1, batch %u (micro %u) over %u workers, %" PRIu64 " steps\n",
                o->ctr_features, o->ctr_rows, o->ctr_dim, o->table_optimizer,
                r.gen.cfg.dense, o->ctr_features * o->ctr_dim + r.gen.cfg.dense, o->batch,
                o->micro, o->sdk.workers, steps);
    if (r.start > steps) {
        fprintf(stderr, "tessera-worker: job '%s' is at step %" PRIu64 ", past --steps %" PRIu64
                "\n", o->sdk.job, r.start, steps);
        rc = 1;
        goto out;
    }
    if (r.start && o->sdk.rank == 0)
        fprintf(r.out, "resuming at step %" PRIu64 "\n", r.start);
    t0 = ts_now_ms();
    r.steps = steps;
    for (uint64_t k = r.start; k < steps;) {
        if (o->slow_ms)   /* testing: a slow worker */
            ts_sleep_ms(o->slow_ms);
        if ((rc = step(&r, k)) == TESSERA_ESLOTS) {
            /* the slots changed hands: the step the SDK names, with the slots as they are */
            k = tessera_resume_step(r.t);
            r.reslots++;
            rc = 0;
            continue;
        }
        if (rc == TESSERA_EROLLBACK) {
            if ((rc = pull_after_rollback(&r, &k)))
                goto out;
            continue;
        }
        if (rc)
            goto out;
        k++;
        if (o->sdk.rank == 0 && (k % 100 == 0 || k == steps))
            fprintf(stderr, "step %" PRIu64 "/%" PRIu64 ": loss %.4f (rank 0's samples)\n", k,
                    steps, slot_samples(o, o->sdk.rank)
                               ? r.loss / (double)slot_samples(o, o->sdk.rank) : 0.0);
    }
    double secs = (double)(ts_now_ms() - t0) / 1000.0;
    uint64_t ran = steps > r.start ? steps - r.start : 0;
    /* Every rank: what it tells the master, so a job whose rank 0 died still has one. */
    if ((rc = fingerprint(&r, steps, hex, dense)))
        goto out;
    if (o->sdk.rank == 0) {
        struct tessera_error e;
        for (uint32_t f = 0; f < o->ctr_features; f++) {
            uint64_t n = 0;
            if (tessera_table_rows(r.t, r.tables[f], steps, &n, &e)) {
                rc = fail(&r, &e, "table rows");
                goto out;
            }
            rows += n;
        }
        if ((rc = evaluate(&r, steps, &auc, &logloss)))
            goto out;
        if (ts_ctr_optimum(&r.gen, ts_ctr_holdout_index(0), o->eval_samples, &best_auc,
                           &best_logloss, &err)) {
            rc = fail_err(&r, &err, "optimum");
            goto out;
        }
        report(&r, steps, ran, secs, hex, dense, auc, logloss, best_auc, best_logloss, rows);
    }
out:
    if (r.t)
        tessera_set_result(r.t, rc != 0, rc ? "the CTR trainer failed (its stderr says why)"
                                            : hex);
    tessera_close(r.t);
    run_free(&r);
    return rc;
}
