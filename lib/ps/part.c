/* part.c - see part.h. */
#include "ps/part.h"

#include "util/proc.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define APPLY_BLOCK 4096      /* elements per block of apply(): 48 KiB of gradients and sums */

ts_status ts_job_init(struct ts_job *j, const char *id, uint32_t workers, bool exact,
                      const char *optimizer, double batch, struct ts_err *err)
{
    struct ts_err e = { 0 };

    memset(j, 0, sizeof(*j));
    if (!id || !id[0] || strlen(id) >= sizeof(j->id))
        return ts_err_set(err, TS_EINVAL, "job.id: 1..%zu bytes required", sizeof(j->id) - 1);
    for (const char *p = id; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return ts_err_set(err, TS_EINVAL, "job.id: only letters, digits, '.', '_', '-'");
    if (workers < 1 || workers > TS_JOB_MAX_WORKERS)
        return ts_err_set(err, TS_EINVAL, "job.workers: %u is outside 1..%d", workers,
                          TS_JOB_MAX_WORKERS);
    if (!(batch >= 1 && batch < 1e12))
        return ts_err_set(err, TS_EINVAL, "job.batch: %g is not a batch size (>= 1)", batch);
    if (!optimizer || strlen(optimizer) >= sizeof(j->optimizer))
        return ts_err_set(err, TS_EINVAL, "job.optimizer: required, under %zu bytes",
                          sizeof(j->optimizer));
    if (ts_optim_parse(optimizer, &j->optim, &e))
        return ts_err_set(err, TS_EINVAL, "job.optimizer: %s", e.msg);
    snprintf(j->id, sizeof(j->id), "%s", id);
    snprintf(j->optimizer, sizeof(j->optimizer), "%s", optimizer);
    j->workers = workers;
    j->exact = exact;
    j->batch = batch;
    return TS_OK;
}

bool ts_job_equal(const struct ts_job *a, const struct ts_job *b)
{
    return strcmp(a->id, b->id) == 0 && a->workers == b->workers && a->exact == b->exact &&
           strcmp(a->optimizer, b->optimizer) == 0 && a->batch == b->batch;
}

ts_status ts_part_create(const struct ts_job *job, uint32_t tensor_id, const char *name,
                         uint32_t index, uint64_t offset, uint64_t len, const char *init,
                         uint64_t seed, uint64_t fan_in, uint64_t fan_out, struct ts_part **out,
                         struct ts_err *err)
{
    struct ts_part *p = calloc(1, sizeof(*p));
    size_t slen = ts_optim_state_len(job->optim.kind);
    ts_status st;

    if (!p)
        return ts_err_set(err, TS_ENOMEM, "partition: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->job = job;
    p->tensor_id = tensor_id;
    p->index = index;
    p->offset = offset;
    p->len = len;
    p->value = malloc(len * sizeof(float));
    p->state = calloc(slen * len + 1, sizeof(float));
    p->grad = malloc((len < APPLY_BLOCK ? len : APPLY_BLOCK) * sizeof(float) + 1);
    p->pushed = calloc(job->workers, 1);
    if (job->exact)
        p->acc_fixed = calloc(len, sizeof(int64_t));
    else
        p->acc_f32 = calloc(len, sizeof(float));
    if (!p->value || !p->state || !p->grad || !p->pushed || (!p->acc_fixed && !p->acc_f32)) {
        ts_part_free(p);
        return ts_err_set(err, TS_ENOMEM, "tensor '%s' partition %u: %" PRIu64
                          " elements do not fit in memory", name, index, len);
    }
    st = ts_tensor_init(init, seed, name, fan_in, fan_out, offset, len, p->value, err);
    if (st) {
        ts_part_free(p);
        return st;
    }
    *out = p;
    return TS_OK;
}

void ts_part_free(struct ts_part *p)
{
    if (!p)
        return;
    ts_part_disarm(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->value);
    free(p->state);
    free(p->grad);
    free(p->pushed);
    free(p->acc_fixed);
    free(p->acc_f32);
    free(p);
}

static size_t state_floats(const struct ts_part *p)
{
    return ts_optim_state_len(p->job->optim.kind) * p->len;
}

/* Takes the armed copy if version is the armed step. Called with mu held. */
static void capture(struct ts_part *p)
{
    if (!p->snap_armed || p->snap_ready || p->version != p->snap_step)
        return;
    memcpy(p->snap_value, p->value, p->len * sizeof(float));
    memcpy(p->snap_state, p->state, state_floats(p) * sizeof(float));
    p->snap_ready = true;
    pthread_cond_broadcast(&p->cv);
}

/* All ranks are in: g = sum / batch, one optimizer step, next version. Called with mu held.
 * A block at a time (the gradient, the sums it came from and the values it updates stay in
 * cache), the sums zeroed as they are read: one pass over memory instead of three. Element
 * i depends only on element i, so the bits are those of whole-array passes. */
static void apply(struct ts_part *p)
{
    float inv = (float)(1.0 / p->job->batch);

    for (uint64_t off = 0; off < p->len; off += APPLY_BLOCK) {
        size_t n = p->len - off < APPLY_BLOCK ? (size_t)(p->len - off) : APPLY_BLOCK;

        if (p->job->exact) {
            ts_fixed_to_f32(p->acc_fixed + off, n, p->job->batch, p->grad);
            memset(p->acc_fixed + off, 0, n * sizeof(int64_t));
        } else {
            for (size_t i = 0; i < n; i++)
                p->grad[i] = p->acc_f32[off + i] * inv;
            memset(p->acc_f32 + off, 0, n * sizeof(float));
        }
        ts_optim_apply_range(&p->job->optim, p->version + 1, p->value, p->state, p->len, off,
                             p->grad, n);
    }
    p->version++;
    p->npushed = 0;
    memset(p->pushed, 0, p->job->workers);
    capture(p);
    pthread_cond_broadcast(&p->cv);
}

static ts_status check_push(const struct ts_part *p, uint32_t rank, uint64_t step,
                            unsigned encoding, size_t bytes, struct ts_err *err)
{
    unsigned want_enc = p->job->exact ? TS_ENC_FIXED : TS_ENC_RAW;
    size_t want_bytes = p->len * (p->job->exact ? sizeof(int64_t) : sizeof(float));

    if (rank >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", rank,
                          p->job->workers);
    if (encoding != want_enc)
        return ts_err_set(err, TS_EINVAL, "encoding: %u, this job (%s mode) takes %u", encoding,
                          p->job->exact ? "exact" : "float", want_enc);
    if (bytes != want_bytes)
        return ts_err_set(err, TS_EINVAL, "payload: %zu bytes for tensor %u partition %u, "
                          "want %zu (%" PRIu64 " elements)", bytes, p->tensor_id, p->index,
                          want_bytes, p->len);
    if (step != p->version)
        return ts_err_set(err, step < p->version ? TS_ESTATE : TS_EINVAL,
                          "step: %" PRIu64 " but tensor %u partition %u is at version %" PRIu64
                          " (BSP takes only the current step)", step, p->tensor_id, p->index,
                          p->version);
    if (p->pushed[rank])
        return ts_err_set(err, TS_ESTATE, "rank %u already pushed step %" PRIu64
                          " of tensor %u partition %u", rank, step, p->tensor_id, p->index);
    return TS_OK;
}

ts_status ts_part_push(struct ts_part *p, uint32_t rank, uint64_t step, unsigned encoding,
                       const void *payload, size_t bytes, bool *applied, struct ts_err *err)
{
    ts_status st;

    *applied = false;
    pthread_mutex_lock(&p->mu);
    st = check_push(p, rank, step, encoding, bytes, err);
    if (!st && p->job->exact)
        st = ts_fixed_add(p->acc_fixed, payload, p->len, err);
    else if (!st)
        ts_f32_add(p->acc_f32, payload, p->len);
    if (!st) {
        p->pushed[rank] = 1;
        if (++p->npushed == p->job->workers) {
            apply(p);
            *applied = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (st) /* element indices in err count from the partition's first element */
        ts_err_prefix(err, "tensor %u partition %u (from element %" PRIu64 ")", p->tensor_id,
                      p->index, p->offset);
    return st;
}

ts_status ts_part_wait(struct ts_part *p, uint64_t want, int ms, const atomic_bool *cancel,
                       uint64_t *version, struct ts_err *err)
{
    int64_t until = ts_now_ms() + ms;
    ts_status st = TS_OK;

    pthread_mutex_lock(&p->mu);
    while (p->version < want && !st) {
        /* Slices of 100 ms, so that a cancel (a shard shutting down) is seen soon. */
        int64_t now = ts_now_ms(), slice = until - now < 100 ? until - now : 100;
        struct timespec ts;

        if (cancel && atomic_load(cancel))
            st = ts_err_set(err, TS_ECANCELLED, "tensor %u partition %u: wait for version %"
                            PRIu64 " cancelled", p->tensor_id, p->index, want);
        else if (slice <= 0)
            st = ts_err_set(err, TS_ETIMEDOUT,
                            "tensor %u partition %u: version %" PRIu64 " did not come within %d "
                            "ms (at %" PRIu64 ", %u of %u ranks pushed)", p->tensor_id, p->index,
                            want, ms, p->version, p->npushed, p->job->workers);
        if (st)
            break;
        ts_abstime_ms(&ts, slice);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    if (!st)
        *version = p->version;
    pthread_mutex_unlock(&p->mu);
    return st;
}

ts_status ts_part_read(struct ts_part *p, uint64_t want, int ms, float *out, uint64_t *version,
                       struct ts_err *err)
{
    ts_status st = ts_part_wait(p, want, ms, NULL, version, err);

    if (st)
        return st;
    pthread_mutex_lock(&p->mu);
    memcpy(out, p->value, p->len * sizeof(float));
    *version = p->version;
    pthread_mutex_unlock(&p->mu);
    return TS_OK;
}

ts_status ts_part_arm(struct ts_part *p, uint64_t step, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&p->mu);
    if (p->version > step) {
        st = ts_err_set(err, TS_ESTATE, "tensor %u partition %u: at version %" PRIu64
                        ", past step %" PRIu64, p->tensor_id, p->index, p->version, step);
    } else {
        if (!p->snap_value)
            p->snap_value = malloc(p->len * sizeof(float));
        if (!p->snap_state)
            p->snap_state = malloc(state_floats(p) * sizeof(float) + 1);
        if (!p->snap_value || !p->snap_state) {
            st = ts_err_set(err, TS_ENOMEM, "tensor %u partition %u: no memory for a snapshot "
                            "copy", p->tensor_id, p->index);
        } else {
            p->snap_armed = true;
            p->snap_ready = false;
            p->snap_step = step;
            capture(p);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

bool ts_part_captured(struct ts_part *p, int ms)
{
    int64_t until = ts_now_ms() + ms;
    bool ready;

    pthread_mutex_lock(&p->mu);
    while (p->snap_armed && !p->snap_ready && ts_now_ms() < until) {
        struct timespec ts;
        int64_t left = until - ts_now_ms();

        ts_abstime_ms(&ts, left < 100 ? (left > 0 ? left : 1) : 100);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    ready = p->snap_armed && p->snap_ready;
    pthread_mutex_unlock(&p->mu);
    return ready;
}

void ts_part_disarm(struct ts_part *p)
{
    pthread_mutex_lock(&p->mu);
    free(p->snap_value);
    free(p->snap_state);
    p->snap_value = p->snap_state = NULL;
    p->snap_armed = p->snap_ready = false;
    pthread_mutex_unlock(&p->mu);
}
