/* part.c - see part.h. */
#include "ps/part_internal.h"

#include "codec/codec.h"
#include "util/proc.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOLD_MS 30000         /* SSP/ASP: the longest a push past an armed snapshot waits */

uint64_t ts_part_mem(const struct ts_job *job, uint64_t len)
{
    uint64_t slen = job->mode == TS_MODE_REDUCE ? 0 : ts_optim_state_len(job->optim.kind);
    uint64_t per_worker = 3 + sizeof(struct part_mark) +
                          (async_mode(job) ? 3 * sizeof(uint64_t) : 0);

    /* What ts_part_create allocates below: values, state, the sum, one apply block, the
     * per-rank flags and clocks. */
    return sizeof(struct ts_part) + len * sizeof(float) * (1 + slen) +
           len * (job->exact ? sizeof(int64_t) : sizeof(float)) +
           (len < APPLY_BLOCK ? len : APPLY_BLOCK) * sizeof(float) + job->workers * per_worker;
}

ts_status ts_part_create(const struct ts_job *job, uint32_t tensor_id, const char *name,
                         uint32_t index, uint64_t offset, uint64_t len, const char *init,
                         uint64_t seed, uint64_t fan_in, uint64_t fan_out, float *storage,
                         struct ts_part **out, struct ts_err *err)
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
    p->sync_every = 1;
    p->t_shift = ts_init_assigned(init) ? -1 : 0;
    /* REDUCE: the values are the reduced gradient, zero until the first step; no state. */
    if (storage) {
        p->value = storage;
        p->value_owned = false;
        if (job->mode == TS_MODE_REDUCE)
            memset(storage, 0, len * sizeof(float));
    } else {
        p->value = job->mode == TS_MODE_REDUCE ? calloc(len + 1, sizeof(float))
                                               : malloc(len * sizeof(float) + 1);
        p->value_owned = true;
    }
    p->state = calloc(job->mode == TS_MODE_REDUCE ? 1 : slen * len + 1, sizeof(float));
    p->grad = malloc((len < APPLY_BLOCK ? len : APPLY_BLOCK) * sizeof(float) + 1);
    p->pushed = calloc(job->workers, 1);
    p->marks = calloc(job->workers, sizeof(*p->marks));
    p->overflow = calloc(job->workers, 1);
    p->applied_by = calloc(job->workers, 1);
    if (async_mode(job)) {
        p->clock = calloc(job->workers, sizeof(uint64_t));
        p->stale_last = calloc(job->workers, sizeof(uint64_t));
        p->stale_max = calloc(job->workers, sizeof(uint64_t));
    }
    if (job->exact)
        p->acc_fixed = calloc(len, sizeof(int64_t));
    else
        p->acc_f32 = calloc(len, sizeof(float));
    if (!p->value || !p->state || !p->grad || !p->pushed || !p->marks || !p->overflow ||
        !p->applied_by ||
        (!p->acc_fixed && !p->acc_f32) ||
        (async_mode(job) && (!p->clock || !p->stale_last || !p->stale_max))) {
        ts_part_free(p);
        return ts_err_set(err, TS_ENOMEM, "tensor '%s' partition %u: %" PRIu64
                          " elements do not fit in memory", name, index, len);
    }
    if (ts_init_assigned(init) && job->mode != TS_MODE_BSP)
        st = ts_err_set(err, TS_EINVAL, "init: assigned needs mode bsp, where a step can be "
                        "an assignment (this job: %s); give tensor '%s' an initializer",
                        ts_mode_name(job->mode), name);
    else
        st = job->mode == TS_MODE_REDUCE
             ? ts_init_check(init, err)
             : ts_tensor_init(init, seed, name, fan_in, fan_out, offset, len, p->value, err);
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
    part_seed_drop(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    if (p->value_owned)
        free(p->value);
    free(p->state);
    free(p->grad);
    free(p->pushed);
    free(p->marks);
    free(p->overflow);
    free(p->applied_by);
    free(p->clock);
    free(p->stale_last);
    free(p->stale_max);
    free(p->acc_fixed);
    free(p->acc_f32);
    free(p->assign_state);
    free(p);
}

static size_t state_floats(const struct ts_part *p)
{
    return ts_optim_state_len(p->job->optim.kind) * p->len;
}

/* Whether the partition is exactly at step: its version times its sync period (BSP: the
 * version counts syncs), every rank's clock times it (SSP, ASP: a clock counts a rank's
 * syncs; the pushes of every step below it applied, none of a later one). Called with mu
 * held. */
static bool at_step(const struct ts_part *p, uint64_t step)
{
    if (!async_mode(p->job))
        return p->version * p->sync_every == step;
    for (uint32_t r = 0; r < p->job->workers; r++)
        if (p->clock[r] * p->sync_every != step)
            return false;
    return true;
}

/* Takes the armed copy if the partition is at the armed step. Called with mu held. */
static void capture(struct ts_part *p)
{
    if (!p->snap_armed || p->snap_ready || !at_step(p, p->snap_step))
        return;
    memcpy(p->snap_value, p->value, p->len * sizeof(float));
    memcpy(p->snap_state, p->state, state_floats(p) * sizeof(float));
    p->snap_updates = p->updates;
    p->snap_ready = true;
    pthread_cond_broadcast(&p->cv);
}

void ts_part_set_sync(struct ts_part *p, uint32_t sync_every)
{
    p->sync_every = sync_every ? sync_every : 1;
}

void part_step_reset(struct ts_part *p)
{
    p->npushed = 0;
    p->acc_form = TS_ACC_I64;
    p->check_finite = false;
    p->assigning = false;
    p->assign_from = 0;
    free(p->assign_state);
    p->assign_state = NULL;
    p->assign_counted = false;
    memset(p->pushed, 0, p->job->workers);
    p->holding = p->held = false;
    p->napplied = 0;
    memset(p->applied_by, 0, p->job->workers);
}

/* A step was applied: the next version, pullers woken. Called with mu held. */
static void step_done(struct ts_part *p)
{
    p->version++;
    part_step_reset(p);
    capture(p);
    pthread_cond_broadcast(&p->cv);
}

/* Where an assignment's values wait for the step to complete: the accumulator's memory,
 * which a step that assigns does not sum into (len int64 or len floats: room for len floats). */
static float *assign_buf(struct ts_part *p)
{
    return p->job->exact ? (float *)(void *)p->acc_fixed : p->acc_f32;
}

/* The step is complete: g = sum / (batch * sync_every * 2^scale_exp), then one optimizer
 * step, update updates + 1 (REDUCE: g itself becomes the values, which the workers' optimizers
 * apply as that update), next version. Called with mu held. A block at a time, so that the
 * gradient, the sums it came from and the values it updates stay in cache:
 * one pass over memory. Element i depends only on element i, so the bits are those of
 * whole-array passes. `last` and `alone` as in part_block_grad. A float sum that is not finite
 * skips the update: the values stay and the ranks that pushed it hear of it at their next
 * pull (`rank` is the pusher in SSP and ASP, where an update is one rank's). */
void part_divisors(const struct ts_part *p, double *fdiv, float *inv)
{
    double divisor = p->job->batch * p->sync_every;

    *fdiv = ldexp(divisor, p->scale_exp);
    *inv = (float)(1.0 / divisor) * ldexpf(1.0f, -p->scale_exp);
}

void part_apply(struct ts_part *p, uint32_t rank, const void *last, bool alone)
{
    struct ts_optim_cfg cfg = p->job->optim;   /* this step's: its pushes' lr and decay */
    double fdiv;
    float inv;
    bool skip = p->check_finite && !p->job->exact && !part_sums_finite(p);

    if (p->lr > 0)
        cfg.lr = p->lr;
    if (p->no_decay)
        cfg.weight_decay = 0;
    part_divisors(p, &fdiv, &inv);
    if (p->job->exact && p->acc_form != TS_ACC_I64 && !last)
        part_to_i64(p);
    for (uint64_t off = 0; !skip && off < p->len; off += APPLY_BLOCK) {
        size_t n = p->len - off < APPLY_BLOCK ? (size_t)(p->len - off) : APPLY_BLOCK;

        part_block_grad(p, last, alone, off, n, fdiv, inv);
        for (size_t i = 0; p->holding && i < n; i++)   /* clipped: torch's g.mul_(coef) */
            p->grad[i] *= p->coef;
        if (p->job->mode == TS_MODE_REDUCE)
            memcpy(p->value + off, p->grad, n * sizeof(float));
        else
            ts_optim_apply_range(&cfg, p->updates + 1, p->value, p->state, p->len, off,
                                 p->grad, n);
    }
    /* A skipped step spends its t all the same, as the version it moves on did before the
     * count was kept apart (docs/training.md, "Assignments"): a run's bits stay as they were. */
    p->updates++;
    if (skip) {
        if (p->job->mode == TS_MODE_REDUCE)
            memset(p->value, 0, p->len * sizeof(float));
        p->skipped++;
        if (async_mode(p->job))     /* the update was this rank's alone */
            p->overflow[rank] = 1;
        else
            memset(p->overflow, 1, p->job->workers);
    }
    step_done(p);
}

/* An assignment step is complete: the values one rank gave (none: they stay) are version
 * v + 1; no optimizer, its state untouched and its update count too, unless the assignment
 * gave them. Called with mu held. */
static void apply_assign(struct ts_part *p)
{
    if (p->assign_from)
        memcpy(p->value, assign_buf(p), p->len * sizeof(float));
    if (p->assign_state)
        memcpy(p->state, p->assign_state, state_floats(p) * sizeof(float));
    if (p->assign_counted)
        p->updates = p->assign_updates;
    step_done(p);
}

/* A combined push's mask, before anything reads the partition's flags with it (part.h:
 * ts_push.slots). */
static ts_status check_slots(const struct ts_part *p, const struct ts_push *in,
                             struct ts_err *err)
{
    uint64_t m = in->slots;

    if (!m)
        return TS_OK;
    if (p->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_EINVAL, "slots: 0x%" PRIx64 ": a push of several slots needs "
                          "mode bsp (this job: %s)", m, ts_mode_name(p->job->mode));
    if (!(m & (m - 1)))
        return ts_err_set(err, TS_EINVAL, "slots: 0x%" PRIx64 " names one slot: push it alone "
                          "(slots 0, its slot as the rank)", m);
    if (p->job->workers < 64 && (m >> p->job->workers))
        return ts_err_set(err, TS_EINVAL, "slots: 0x%" PRIx64 ": slot %d is not below the job's "
                          "%u slots", m, 63 - __builtin_clzll(m), p->job->workers);
    if (in->rank != (uint32_t)__builtin_ctzll(m))
        return ts_err_set(err, TS_EINVAL, "rank: %u, but the lowest of slots 0x%" PRIx64 " is %d "
                          "(a combined push names its lowest slot as its rank)", in->rank, m,
                          __builtin_ctzll(m));
    if (in->encoding == TS_ENC_FIXED_F32)
        return ts_err_set(err, TS_EINVAL, "encoding: %u (float) for slots 0x%" PRIx64 ": a "
                          "combined push in exact mode is int64 fixed point (%u), since "
                          "rounding the slots' float sum would not give the bits of rounding "
                          "each slot's floats", in->encoding, m, TS_ENC_FIXED);
    return TS_OK;
}

/* How many of the push's slots (checked by check_slots) the partition counted this step.
 * Called with mu held; BSP and REDUCE. */
static uint32_t slots_counted(const struct ts_part *p, const struct ts_push *in)
{
    uint32_t n = 0;

    if (!in->slots)
        return p->pushed[in->rank];
    for (uint64_t m = in->slots; m; m &= m - 1)
        n += p->pushed[__builtin_ctzll(m)];
    return n;
}

/* Whether every slot of the push (checked by check_slots) was counted for its step already:
 * a step below the rank's clock (SSP, ASP) or the version (BSP, REDUCE), or the current one
 * with its slots pushed. Called with mu held. */
static bool counted(const struct ts_part *p, const struct ts_push *in)
{
    if (in->rank >= p->job->workers)
        return false;
    if (async_mode(p->job))
        return in->step < p->clock[in->rank];
    return in->step < p->version ||
           (in->step == p->version && slots_counted(p, in) == ts_push_nslots(in));
}

/* Counts the push's slots as pushed this step. Called with mu held. */
static void count_slots(struct ts_part *p, const struct ts_push *in)
{
    p->pushed[in->rank] = 1;
    for (uint64_t m = in->slots; m; m &= m - 1)
        p->pushed[__builtin_ctzll(m)] = 1;
}

/* An assignment's form (part.h: ts_push.assign). */
static ts_status check_assign_form(const struct ts_part *p, const struct ts_push *in,
                                   struct ts_err *err)
{
    if (p->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_ENOTSUP, "assign: job '%s' is mode %s; a step can be an "
                          "assignment in mode bsp only", p->job->id, ts_mode_name(p->job->mode));
    if (p->sync_every > 1)
        return ts_err_set(err, TS_EINVAL, "assign: tensor %u syncs every %u steps; an "
                          "assignment needs a tensor that moves every step", p->tensor_id,
                          p->sync_every);
    if (in->slots || in->scale_exp)
        return ts_err_set(err, TS_EINVAL, "assign: an assignment is one rank's (no slots) and "
                          "unscaled (no loss scale)");
    if (in->state && !in->bytes)
        return ts_err_set(err, TS_EINVAL, "assign: optimizer state comes with the values "
                          "(the rank that gives them); the others send neither");
    if (in->has_updates && !in->bytes)
        return ts_err_set(err, TS_EINVAL, "assign: an update count comes with the values "
                          "(the rank that gives them); the others send neither");
    if (in->encoding != TS_ENC_RAW)
        return ts_err_set(err, TS_EINVAL, "encoding: %u; an assignment carries raw float32 "
                          "values (%u), in exact mode too", in->encoding, TS_ENC_RAW);
    if (in->state && in->bytes != (p->len + state_floats(p)) * sizeof(float))
        return ts_err_set(err, TS_EINVAL, "payload: %zu bytes of values and optimizer state for "
                          "tensor %u partition %u, want %zu (%" PRIu64 " elements, %zu state "
                          "floats each)", in->bytes, p->tensor_id, p->index,
                          (size_t)((p->len + state_floats(p)) * sizeof(float)), p->len,
                          ts_optim_state_len(p->job->optim.kind));
    if (!in->state && in->bytes && in->bytes != p->len * sizeof(float))
        return ts_err_set(err, TS_EINVAL, "payload: %zu bytes of values for tensor %u partition "
                          "%u, want %zu (%" PRIu64 " elements) or none", in->bytes,
                          p->tensor_id, p->index, (size_t)(p->len * sizeof(float)), p->len);
    return TS_OK;
}

/* What a push is, whatever the partition's step: its rank, scale, encoding and length. */
static ts_status check_form(const struct ts_part *p, const struct ts_push *in,
                            struct ts_err *err)
{
    size_t want_bytes = p->len * (in->encoding == TS_ENC_FIXED ? sizeof(int64_t)
                                                                : sizeof(float));

    if (in->rank >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", in->rank,
                          p->job->workers);
    if (in->assign)
        return check_assign_form(p, in, err);
    if (!(in->lr >= 0 && in->lr <= 3.4e38f))
        return ts_err_set(err, TS_EINVAL, "lr: %g; a push's learning rate is a finite float > 0 "
                          "(0: the job's optimizer's)", (double)in->lr);
    if (in->scale_exp < -126 || in->scale_exp > 127)
        return ts_err_set(err, TS_EINVAL, "loss scale: 2^%d is outside 2^-126..2^127",
                          in->scale_exp);
    if (p->job->exact && in->encoding != TS_ENC_FIXED && in->encoding != TS_ENC_FIXED_F32)
        return ts_err_set(err, TS_EINVAL, "encoding: %u, this job (exact mode) takes %u "
                          "(fixed point) or %u (float, rounded to fixed point by the shard)",
                          in->encoding, TS_ENC_FIXED, TS_ENC_FIXED_F32);
    if (!p->job->exact && in->encoding >= TS_ENC_FIXED)
        return ts_err_set(err, TS_EINVAL, "encoding: %u, this job (float mode) takes raw float "
                          "or a compressed encoding (docs/compression.md)", in->encoding);
    if (in->encoding == TS_ENC_FIXED || in->encoding == TS_ENC_FIXED_F32 ||
        in->encoding == TS_ENC_RAW) {
        if (in->bytes != want_bytes)
            return ts_err_set(err, TS_EINVAL, "payload: %zu bytes for tensor %u partition %u, "
                              "want %zu (%" PRIu64 " elements)", in->bytes, p->tensor_id,
                              p->index, want_bytes, p->len);
        return TS_OK;
    }
    return ts_codec_check(in->encoding, in->payload, in->bytes, p->len, err);
}

/* Whether a push of good form comes at its step: the current one, its slots not counted
 * yet, its loss scale the step's. */
static ts_status check_step(const struct ts_part *p, const struct ts_push *in,
                            struct ts_err *err)
{
    uint32_t had;

    if (async_mode(p->job)) {
        if (in->step != p->clock[in->rank])
            return ts_err_set(err, in->step < p->clock[in->rank] ? TS_ESTATE : TS_EINVAL,
                              "step: %" PRIu64 " but rank %u of tensor %u partition %u is at "
                              "step %" PRIu64 " (each rank pushes its steps in order)", in->step,
                              in->rank, p->tensor_id, p->index, p->clock[in->rank]);
        return TS_OK;
    }
    if (in->step != p->version)
        return ts_err_set(err, in->step < p->version ? TS_ESTATE : TS_EINVAL,
                          "step: %" PRIu64 " but tensor %u partition %u is at version %" PRIu64
                          " (%s takes only the current step)", in->step, p->tensor_id,
                          p->index, p->version, ts_mode_name(p->job->mode));
    had = slots_counted(p, in);
    if (had && in->slots && in->retry)
        return ts_err_set(err, TS_ESLOTS, "slots 0x%" PRIx64 ": %u of these %u were counted "
                          "already for step %" PRIu64 " of tensor %u partition %u (pushed by "
                          "another worker: their owner changed during the step); nothing "
                          "added: ask the master for this worker's slots and push them one by "
                          "one", in->slots, had, ts_push_nslots(in), in->step, p->tensor_id,
                          p->index);
    if (had)
        return ts_err_set(err, TS_ESTATE, "rank %u%s already pushed step %" PRIu64
                          " of tensor %u partition %u", in->rank,
                          in->slots ? " (or another slot of the combined push)" : "", in->step,
                          p->tensor_id, p->index);
    if (p->npushed && p->assigning != in->assign)
        return ts_err_set(err, TS_ESTATE, "step %" PRIu64 " of tensor %u partition %u: rank %u "
                          "pushed %s, but the step's earlier pushes were %s: every rank assigns "
                          "at the same step (load_state_dict on every rank)", in->step,
                          p->tensor_id, p->index, in->rank,
                          in->assign ? "an assignment" : "a gradient",
                          p->assigning ? "an assignment" : "gradients");
    if (in->assign && in->bytes && p->assign_from)
        return ts_err_set(err, TS_EINVAL, "assign: rank %u sent values for step %" PRIu64
                          " of tensor %u partition %u, which rank %u's assignment gave "
                          "already (one rank gives the values, the others none)", in->rank,
                          in->step, p->tensor_id, p->index, p->assign_from - 1);
    if (p->npushed && !p->assigning && (in->lr != p->lr || in->no_decay != p->no_decay))
        return ts_err_set(err, TS_EINVAL, "lr: rank %u pushed step %" PRIu64 " with lr %g%s, "
                          "others with %g%s: a step's pushes need the same learning rate and "
                          "decay", in->rank, in->step, (double)in->lr,
                          in->no_decay ? ", no decay" : "", (double)p->lr,
                          p->no_decay ? ", no decay" : "");
    if (p->npushed && in->scale_exp != p->scale_exp)
        return ts_err_set(err, TS_EINVAL, "loss scale: rank %u pushed step %" PRIu64 " scaled by "
                          "2^%d, the others by 2^%d (every rank must use the same scale)",
                          in->rank, in->step, in->scale_exp, p->scale_exp);
    return TS_OK;
}

/* The slowest rank's clock. Called with mu held (SSP/ASP). */
static uint64_t min_clock(const struct ts_part *p)
{
    uint64_t m = UINT64_MAX;

    for (uint32_t r = 0; r < p->job->workers; r++)
        m = p->clock[r] < m ? p->clock[r] : m;
    return m;
}

/* SSP and ASP with a snapshot armed at step s: a rank's push of step s or later waits until
 * every rank has pushed its steps below s and capture() has taken the copy, so that the copy
 * holds the pushes of those steps and no other, the same cut on every partition. At most
 * HOLD_MS: a snapshot that cannot complete (a rank or the master gone) lets training go on;
 * its copy is then never taken and the master gives the snapshot up. Called with mu held. */
static void hold_for_snapshot(struct ts_part *p, const struct ts_push *in)
{
    int64_t until = ts_now_ms() + HOLD_MS;

    while (p->snap_armed && !p->snap_ready && in->step * p->sync_every >= p->snap_step &&
           !p->moved &&
           in->gen == p->gen && ts_now_ms() < until) {
        struct timespec ts;

        ts_abstime_ms(&ts, 100);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
}

ts_status ts_part_push(struct ts_part *p, const struct ts_push *in, bool *applied,
                       struct ts_err *err)
{
    bool first = false, last = false, fuse = false;
    ts_status st;

    *applied = false;
    pthread_mutex_lock(&p->mu);
    if (async_mode(p->job))
        hold_for_snapshot(p, in);
    if (p->moved) {
        pthread_mutex_unlock(&p->mu);
        return ts_err_set(err, TS_ESTALE, "push of step %" PRIu64 " to tensor %u partition %u: "
                          "this shard no longer heads its chain; refresh the shard map",
                          in->step, p->tensor_id, p->index);
    }
    if (in->gen != p->gen) {
        uint32_t have = p->gen;
        pthread_mutex_unlock(&p->mu);
        return ts_err_set(err, TS_EROLLBACK, "push of step %" PRIu64 " to tensor %u partition "
                          "%u: made before its job went back to a snapshot (rollback %u, the "
                          "partition's is %u): continue from the snapshot's step", in->step,
                          p->tensor_id, p->index, in->gen, have);
    }
    if (p->seed && (st = part_seed_push(p, in->rank, in->step, err))) {
        pthread_mutex_unlock(&p->mu);
        return st;
    }
    if (in->apply) {   /* a rank's word on a held step (clip.c) */
        st = part_clip_apply(p, in, applied, err);
        pthread_mutex_unlock(&p->mu);
        if (st)
            ts_err_prefix(err, "tensor %u partition %u", p->tensor_id, p->index);
        return st;
    }
    if (!(st = check_slots(p, in, err)))
        st = check_form(p, in, err);
    if (!st && counted(p, in)) {
        /* Sent again: the same bytes are a duplicate, acknowledged when it says it is a retry
         * (counted before a failover) and refused by check_step otherwise; other bytes are
         * refused here (part.h, "Duplicates"). */
        st = part_mark_check(p, in, err);
        if (!st && in->retry) {
            pthread_mutex_unlock(&p->mu);
            return TS_OK;
        }
    }
    if (!st)
        st = check_step(p, in, err);
    if (!st)
        st = part_clip_check(p, in, err);
    if (!st) {
        /* SSP and ASP apply each push alone, on arrival. */
        first = async_mode(p->job) || p->npushed == 0;
        last = async_mode(p->job) || p->npushed + ts_push_nslots(in) == p->job->workers;
        if (in->assign) {
            if (in->state && state_floats(p) &&
                !(p->assign_state = malloc(state_floats(p) * sizeof(float))))
                st = ts_err_set(err, TS_ENOMEM, "assign: no memory for %zu floats of optimizer "
                                "state", state_floats(p));
            if (!st && in->bytes) {
                memcpy(assign_buf(p), in->payload, p->len * sizeof(float));
                if (p->assign_state)
                    memcpy(p->assign_state, (const float *)in->payload + p->len,
                           state_floats(p) * sizeof(float));
                p->assign_from = in->rank + 1;
                p->assign_counted = in->has_updates;
                p->assign_updates = in->updates;
            }
            p->assigning = !st;
        } else if (last && !in->hold) {   /* a held sum is read twice: kept whole */
            st = part_fusable(p, in, first, &fuse, err);
        }
        if (!st && !fuse && !in->assign)
            st = part_accumulate(p, in, first, err);
    }
    if (!st) {
        p->check_finite |= in->encoding != TS_ENC_RAW || in->scale_exp != 0;
        p->scale_exp = in->scale_exp;
        p->lr = in->lr;
        p->no_decay = in->no_decay;
        p->holding = in->hold;
        count_slots(p, in);
        part_mark_set(p, in);
        if (async_mode(p->job))
            p->clock[in->rank]++;
        else
            p->npushed += ts_push_nslots(in);
        if (last && p->assigning)
            apply_assign(p);
        else if (last && p->holding)
            part_clip_hold(p);
        else if (last)
            part_apply(p, in->rank, fuse ? in->payload : NULL, first);
        *applied = last && !p->holding;
    }
    pthread_mutex_unlock(&p->mu);
    if (st) /* element indices in err count from the partition's first element */
        ts_err_prefix(err, "tensor %u partition %u (from element %" PRIu64 ")", p->tensor_id,
                      p->index, p->offset);
    return st;
}

uint64_t ts_part_step(struct ts_part *p)
{
    uint64_t at;

    pthread_mutex_lock(&p->mu);
    at = async_mode(p->job) ? min_clock(p) : p->version;
    pthread_mutex_unlock(&p->mu);
    return at;
}

/* The newest rank's clock. Called with mu held (SSP/ASP). */
static uint64_t max_clock(const struct ts_part *p)
{
    uint64_t m = 0;

    for (uint32_t r = 0; r < p->job->workers; r++)
        m = p->clock[r] > m ? p->clock[r] : m;
    return m;
}

/* The newest step the partition reached. Called with mu held. */
static uint64_t top_step(const struct ts_part *p)
{
    return (async_mode(p->job) ? max_clock(p) : p->version) * p->sync_every;
}

void ts_part_steps(struct ts_part *p, uint64_t *lo, uint64_t *hi)
{
    pthread_mutex_lock(&p->mu);
    *lo = (async_mode(p->job) ? min_clock(p) : p->version) * p->sync_every;
    *hi = top_step(p);
    pthread_mutex_unlock(&p->mu);
}

/* Whether a pull by rank for want may be answered. Called with mu held. */
static bool pull_ready(const struct ts_part *p, uint64_t want)
{
    if (p->job->mode == TS_MODE_ASP)
        return true;
    if (p->job->mode == TS_MODE_SSP)
        return min_clock(p) + p->job->staleness >= want;
    return (p->hold ? p->visible : p->version) >= want;
}

/* Whether a norm pull of step want may be answered (clip.c): the step is held whole, or
 * the partition is past it. Called with mu held. */
static bool norm_ready(const struct ts_part *p, uint64_t want)
{
    return (p->version == want && p->held) || p->version > want;
}

ts_status part_wait(struct ts_part *p, uint64_t want, bool norm, uint32_t gen, int ms,
                    const atomic_uint *cancel, struct ts_err *err)
{
    int64_t until = ts_now_ms() + ms;

    for (;;) {
        /* Slices of 100 ms, so that a cancel (a shard shutting down) is seen soon. */
        int64_t now = ts_now_ms(), slice = until - now < 100 ? until - now : 100;
        struct timespec ts;

        if (gen != p->gen)
            return ts_err_set(err, TS_EROLLBACK, "pull of tensor %u partition %u: made before "
                              "its job went back to a snapshot (rollback %u, the partition's "
                              "is %u): continue from the snapshot's step", p->tensor_id,
                              p->index, gen, p->gen);
        if (!p->seed && (norm ? norm_ready(p, want) : pull_ready(p, want)))
            return TS_OK;
        if (p->moved)
            return ts_err_set(err, TS_ESTALE, "tensor %u partition %u: this shard no longer "
                              "heads its chain (version %" PRIu64 " will come from the new "
                              "head); refresh the shard map", p->tensor_id, p->index, want);
        if (cancel && atomic_load(cancel))
            return ts_err_set(err, TS_ECANCELLED, "tensor %u partition %u: wait for version %"
                              PRIu64 " cancelled", p->tensor_id, p->index, want);
        if (p->seed && (slice <= 0 || part_seed_failed(p)))
            return part_seed_error(p, err);
        if (slice <= 0 && norm)
            return ts_err_set(err, TS_ETIMEDOUT, "tensor %u partition %u: the gradient norm "
                              "of step %" PRIu64 " did not come within %d ms (%u of %u ranks "
                              "pushed it)", p->tensor_id, p->index, want, ms, p->npushed,
                              p->job->workers);
        if (slice <= 0) {
            if (async_mode(p->job))
                return ts_err_set(err, TS_ETIMEDOUT, "tensor %u partition %u: step %" PRIu64
                                  " waited %d ms for the slowest worker (at step %" PRIu64
                                  ", staleness bound %u)", p->tensor_id, p->index, want, ms,
                                  min_clock(p), p->job->staleness);
            if (p->version >= want)   /* held (replica.c) */
                return ts_err_set(err, TS_ETIMEDOUT, "tensor %u partition %u: version %" PRIu64
                                  " is applied but its chain did not hold it within %d ms "
                                  "(visible: %" PRIu64 ")", p->tensor_id, p->index, want, ms,
                                  p->visible);
            return ts_err_set(err, TS_ETIMEDOUT,
                              "tensor %u partition %u: version %" PRIu64 " did not come within "
                              "%d ms (at %" PRIu64 ", %u of %u ranks pushed)", p->tensor_id,
                              p->index, want, ms, p->version, p->npushed, p->job->workers);
        }
        ts_abstime_ms(&ts, slice);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
}

ts_status ts_part_pull(struct ts_part *p, uint32_t rank, uint64_t want, uint32_t gen, int ms,
                       const atomic_uint *cancel, float *out, struct ts_pull_info *info,
                       struct ts_err *err)
{
    ts_status st;

    if (rank >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", rank,
                          p->job->workers);
    if (!out && async_mode(p->job))
        return ts_err_set(err, TS_EINVAL, "pull: %s needs a copy (values change under it)",
                          ts_mode_name(p->job->mode));
    memset(info, 0, sizeof(*info));
    pthread_mutex_lock(&p->mu);
    st = part_wait(p, want, false, gen, ms, cancel, err);
    if (!st) {
        if (async_mode(p->job)) {
            uint64_t slow = min_clock(p);
            info->staleness = want > slow ? want - slow : 0;
            p->stale_last[rank] = info->staleness;
            if (info->staleness > p->stale_max[rank])
                p->stale_max[rank] = info->staleness;
        }
        if (out)
            memcpy(out, p->value, p->len * sizeof(float));
        info->version = p->version;
        info->overflow = p->overflow[rank];
        p->overflow[rank] = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

ts_status ts_part_arm(struct ts_part *p, uint64_t step, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&p->mu);
    if (p->job->mode == TS_MODE_REDUCE) {
        st = ts_err_set(err, TS_EINVAL, "tensor %u: snapshots need mode bsp, ssp or asp (this "
                        "job: mode reduce, whose parameters live on the workers)", p->tensor_id);
    } else if (step % p->sync_every) {
        st = ts_err_set(err, TS_ESTATE, "tensor %u syncs every %u steps: step %" PRIu64 " is "
                        "not one of its syncs (a snapshot falls on a multiple of every sync "
                        "period)", p->tensor_id, p->sync_every, step);
    } else if (top_step(p) > step) {
        st = ts_err_set(err, TS_ESTATE, "tensor %u partition %u: at step %" PRIu64
                        ", past step %" PRIu64, p->tensor_id, p->index, top_step(p), step);
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

bool ts_part_armed(struct ts_part *p, uint64_t step)
{
    bool armed;

    pthread_mutex_lock(&p->mu);
    armed = p->snap_armed && p->snap_step == step;
    pthread_mutex_unlock(&p->mu);
    return armed;
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
    pthread_cond_broadcast(&p->cv);     /* pushes held for the snapshot go on */
    pthread_mutex_unlock(&p->mu);
}
