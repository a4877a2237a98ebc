/* sdk_step.c - the SDK's push, pull and step (the public API's top): which tensors move
 * (sync sums), their pushes readied (sdk_wire.c) and exchanged (sdk_exchange.c), and after a
 * broken connection the decision to send the step again once recovery has reconnected
 * (sdk_fail_over), to follow a rollback or an elastic job's new slots; on the way back the
 * reduce-mode optimizer and the loss scale (docs/modes.md). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "util/log.h"

static ts_status check_id(const struct tessera *t, int id, struct ts_err *err)
{
    if (id < 0 || id >= t->ntensors)
        return ts_err_set(err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                          t->ntensors);
    return TS_OK;
}

/* An exchange of tensors [first, last), for sdk_fail_over to do again. */
struct exchange_args {
    int first, last;
    bool push;
    float *const *params;
};

static ts_status exchange_again(struct tessera *t, void *ctx, struct ts_err *err)
{
    const struct exchange_args *a = ctx;

    return sdk_exchange_once(t, a->first, a->last, a->push, a->params, err);
}

/* An exchange of tensors [first, last) that ended with st, gone again to the new heads
 * (sdk_fail_over). */
static ts_status fail_over(struct tessera *t, const char *what, uint64_t n, int first,
                           int last, bool push, float *const *params, ts_status st,
                           struct ts_err *err)
{
    struct exchange_args a = { first, last, push, params };

    return sdk_fail_over(t, what, n, st, exchange_again, &a, err);
}

/* Exact mode with float pushes: the shards round each value, and one out of range would be
 * refused by its partition's shard after other shards took theirs, leaving the step half
 * pushed. So each gradient is checked here first, as tessera_to_fixed would check it (one
 * read of it), and a value out of range fails the step before anything is sent. (Float
 * pushes rule out sync periods: every tensor is pushed every step.) */
static ts_status check_f32(const struct tessera *t, const struct sdk_tensor *x, const void *g,
                           struct ts_err *err)
{
    bool below;   /* a bound of 2^31 is the range itself: nothing more to learn */
    ts_status st;

    if (!t->push_f32 || x->assign || !(st = ts_fixed_check_f32(g, x->numel, 0x1p31f, &below, err)))
        return TS_OK;
    ts_err_prefix(err, "tensor '%s'", x->name);
    return st;
}

int tessera_push(tessera *t, int id, uint64_t step, const void *grad, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err) || check_f32(t, t->tensors[id], grad, &err))
        return sdk_fail(e, &err);
    sdk_only(t, id, step, 0);
    t->nstep = 1;
    t->step_slots = &t->rank;
    sdk_prepare_push(t, id, grad);
    if (sdk_follow_rollback(t, "push of step", step, NULL,
                            fail_over(t, "push of step", step, id, id + 1, true, NULL,
                                      sdk_exchange_once(t, id, id + 1, true, NULL, &err), &err),
                            &err))
        return sdk_fail(e, &err);
    sdk_assign_done(t, id, id + 1);
    return sdk_ok(e);
}

int tessera_pull(tessera *t, int id, uint64_t version, float *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err))
        return sdk_fail(e, &err);
    if (t->job.mode == TS_MODE_REDUCE) {
        /* The parameters live here; the shards hold only sums. */
        struct sdk_tensor *x = t->tensors[id];
        if (version != x->local_version) {
            ts_err_set(&err, TS_ESTATE, "reduce mode: this worker holds tensor %d at version %"
                       PRIu64 " only, not %" PRIu64, id, x->local_version, version);
            return sdk_fail(e, &err);
        }
        memcpy(out, x->value, x->numel * sizeof(float));
        return sdk_ok(e);
    }
    sdk_only(t, id, 0, version);
    if (sdk_follow_rollback(t, "pull of version", version, NULL,
                            fail_over(t, "pull of version", version, id, id + 1, false, &out,
                                      sdk_exchange_once(t, id, id + 1, false, &out, &err),
                                      &err), &err))
        return sdk_fail(e, &err);
    return sdk_ok(e);
}

/* Sync periods: which tensors move at global step `step`, each at its own step. A tensor with
 * a period K > 1 adds this step's gradient to its running sum, and moves that sum every Kth
 * step. */
static ts_status plan_step(struct tessera *t, uint64_t step, const void *const *grads,
                           struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        const void *g = grads[i];
        ts_status st;

        x->active = (step + 1) % x->sync_every == 0;
        x->tstep = step / x->sync_every;
        x->pull_version = x->tstep + 1;
        if (x->sync_every > 1) {
            if (t->job.exact)
                st = ts_fixed_add(x->acc, g, x->numel, err);
            else
                ts_f32_add(x->acc, g, x->numel), st = TS_OK;
            if (st) {
                ts_err_prefix(err, "tensor '%s' (summed over its sync period)", x->name);
                return st;
            }
            g = x->acc;
        }
        if (x->active && t->nstep == 1)   /* several slots: next_slot readies each */
            sdk_prepare_push(t, i, g);
    }
    return TS_OK;
}

/* After a step's replies: sync sums restart, reduce mode applies the reduced gradients, the
 * loss scale follows GradScaler. */
static void finish_step(struct tessera *t, float *const *params)
{
    if (t->clip.max > 0 && t->job.mode == TS_MODE_REDUCE)
        sdk_clip_reduced(t);
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        size_t slen = ts_optim_state_len(t->job.optim.kind);

        if (!x->active)
            continue;
        sdk_assign_clear(x);
        if (x->sync_every > 1)
            memset(x->acc, 0, x->numel * sdk_elem_bytes(t));
        if (t->job.mode != TS_MODE_REDUCE)
            continue;
        /* The shard's own update, partition by partition, with the same code: the bits of a
         * PS-mode run. A partition whose sum overflowed is skipped, as a shard skips it. Its
         * t is the step + 1: a reduce job never assigns (bsp only), so every step counts, a
         * skipped one too, as a shard's update count does (lib/ps/part.h, "Update count"). */
        struct ts_optim_cfg cfg = t->job.optim;
        if (x->lr > 0)
            cfg.lr = x->lr;
        if (x->no_decay)
            cfg.weight_decay = 0;
        for (uint32_t p = 0; p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            if (!x->overflow[p])
                ts_optim_apply_range(&cfg, x->tstep + 1, x->value + off,
                                     x->state + slen * off, len, 0, x->rgrad + off, len);
        }
        x->local_version = x->tstep + 1;
        memcpy(params[i], x->value, x->numel * sizeof(float));
    }
    if (t->step_overflow) {
        t->stats.steps_skipped++;
        if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && t->scale_exp > -126)
            t->scale_exp--;
        t->good_steps = 0;
    } else if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && ++t->good_steps == LOSS_GROWTH_STEPS) {
        if (t->scale_exp < 127)
            t->scale_exp++;
        t->good_steps = 0;
    }
    t->stats.steps++;
    t->stats.staleness_last = t->step_stale;
    if (t->step_stale > t->stats.staleness_max)
        t->stats.staleness_max = t->step_stale;
}

/* Slots a step may push: 1..workers of them, ascending, each below workers; more than one
 * only where each slot's push is the caller's gradient alone (no sync sums, no top-k). */
static ts_status check_slots(const struct tessera *t, size_t n, const uint32_t *slots,
                             struct ts_err *err)
{
    if (n < 1 || n > t->job.workers || !slots)
        return ts_err_set(err, TS_EINVAL, "slots: %zu of them, want 1..%u (the job's workers)",
                          n, t->job.workers);
    for (size_t k = 0; k < n; k++)
        if (slots[k] >= t->job.workers || (k && slots[k] <= slots[k - 1]))
            return ts_err_set(err, TS_EINVAL, "slots[%zu]: %u; want ascending slots below %u",
                              k, slots[k], t->job.workers);
    for (int i = 0; n > 1 && i < t->ntensors; i++)
        if (t->tensors[i]->sync_every > 1 || t->tensors[i]->residual)
            return ts_err_set(err, TS_EINVAL, "slots: %zu, but tensor '%s' has a sync period or "
                              "top-k compression, whose state is one worker's own; push one "
                              "slot", n, t->tensors[i]->name);
    return TS_OK;
}

int tessera_step(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                 struct tessera_error *e)
{
    return tessera_step_slots(t, step, 1, &t->rank, &grads, params, e);
}

int tessera_step_clip(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                      float max_norm, double *total_norm, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    int rc;

    if (sdk_clip_check(t, max_norm, &err))
        return sdk_fail(e, &err);
    t->clip.max = max_norm;
    t->clip.total = 0;
    rc = tessera_step(t, step, grads, params, e);
    t->clip.max = 0;
    if (total_norm)
        *total_norm = t->clip.total;
    return rc;
}

int tessera_step_slots(tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                       const void *const *const *grads, float *const *params,
                       struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st = check_slots(t, n, slots, &err);
    bool sent = false;
    /* Clipped by the shards (bsp); a reduce job's workers clip in finish_step. */
    bool held = t->clip.max > 0 && t->job.mode == TS_MODE_BSP;

    if (!st)
        sdk_elastic_measure(t, n);
    t->step_overflow = false;
    t->step_stale = 0;
    t->nstep = n;
    t->step_slots = slots;
    t->step_grads = grads;
    t->newest = 0;
    if (!st)
        st = sdk_check_names(t, &err);
    if (!st && t->elastic && !(st = sdk_elastic_check(t, step, n, slots, &err)))
        st = sdk_elastic_keep(t, params, &err);
    for (size_t k = 0; !st && k < n; k++)
        for (int i = 0; !st && i < t->ntensors; i++)
            st = check_f32(t, t->tensors[i], grads[k][i], &err);
    if (!st)
        st = plan_step(t, step, grads[0], &err);
    if (!st) {
        sdk_combine_plan(t, step, n, slots, grads);
        sent = true;
        st = held ? sdk_clip_exchange(t, step, t->clip.max, params, &t->clip.total, &err)
                  : sdk_exchange_once(t, 0, t->ntensors, true, params, &err);
    }
    if (!held)   /* a clipped step fails over whole (sdk_clip.c) */
        st = fail_over(t, "step", step, 0, t->ntensors, true, params, st, &err);
    /* State was lost: the cluster takes the job back to its last snapshot, and so do we. */
    st = sdk_follow_rollback(t, "step", step, params, st, &err);
    /* Elastic: the slots changed hands, or the job went on past this worker's step. */
    if (t->elastic && sent && (st == TS_ESLOTS || (!st && t->newest > step + 1))) {
        memset(&err, 0, sizeof(err));
        st = sdk_elastic_recover(t, step, params, false, &err);
    }
    sdk_combine_done(t, step, st == TS_OK);
    t->nstep = 0;
    sdk_elastic_done(t, st);
    if (st)
        return sdk_fail(e, &err);
    finish_step(t, params);
    if (t->ms) {
        struct ts_worker_report r = { t->stats.staleness_last, t->stats.staleness_max,
                                      t->stats.steps_skipped, tessera_loss_scale(t) };
        ts_membership_set_clock(t->ms, step + 1);
        ts_membership_set_report(t->ms, &r);
    }
    return sdk_ok(e);
}

uint64_t tessera_resume_step(const tessera *t)
{
    return t->rec.resume_step;
}

float tessera_loss_scale(const tessera *t)
{
    return t->loss_mode == TESSERA_LOSS_SCALE_NONE ? 1.0f : ldexpf(1.0f, t->scale_exp);
}

void tessera_stats(const tessera *t, struct tessera_stats *out)
{
    *out = t->stats;
    out->loss_scale = tessera_loss_scale(t);
    out->failovers = t->rec.failovers;
}

/* For sdk_overlap.c (tessera_push_some, tessera_pull_some): tensor i's push of grad checked
 * (check_f32) and readied, and the exchange of the active tensors of [first, last) with its
 * failovers. */
ts_status sdk_check_push(struct tessera *t, int i, const void *grad, struct ts_err *err)
{
    return check_f32(t, t->tensors[i], grad, err);
}

ts_status sdk_exchange(struct tessera *t, const char *what, uint64_t n, int first, int last,
                       bool push, float *const *params, struct ts_err *err)
{
    return fail_over(t, what, n, first, last, push, params,
                     sdk_exchange_once(t, first, last, push, params, err), err);
}
