/* sdk_clip.c - a step clipped by global norm, as DDP's clip_grad_norm_ of the averaged gradient
 * (lib/ps/part.h, "Clipping"; docs/training.md, "Clipping by global norm").
 *
 * The averaged gradient exists only on the shards, a partition at a time, so a clipped step is
 * three exchanges: the gradients pushed held (summed, not applied); every partition's sum of
 * squares pulled and added up here, tensor by tensor and partition by partition, so that every
 * rank computes the same coefficient bits whatever the worker and shard count; then every
 * rank's apply carrying the coefficient, with the step's pulls behind it. The last apply runs
 * the update. A shard lost on the way makes the whole step go again on the new heads (a held
 * sum is not replicated: a new head has only the pushes sent to it again), the pushes as
 * retries that the partitions already holding them acknowledge, and the coefficient reused
 * once computed: a rank that sent any apply has it, and no partition can apply before every
 * rank's apply, so the norms are never needed again once one went out. */
#include "client/sdk_internal.h"

#include <math.h>

#include "transport/frame.h"

ts_status sdk_clip_check(const struct tessera *t, float max_norm, struct ts_err *err)
{
    if (!(max_norm > 0 && max_norm <= 3.4e38f))
        return ts_err_set(err, TS_EINVAL, "max_norm: %g; clipping takes a finite norm > 0",
                          (double)max_norm);
    if (t->job.mode != TS_MODE_BSP && t->job.mode != TS_MODE_REDUCE)
        return ts_err_set(err, TS_ENOTSUP, "clipping: job '%s' is mode %s; clipping by global "
                          "norm needs a synchronous mode, bsp or reduce (in ssp and asp each "
                          "push is an update of its own)", t->job.id, ts_mode_name(t->job.mode));
    if (t->elastic || t->dynamic)
        return ts_err_set(err, TS_ENOTSUP, "clipping: not in an elastic or dynamic job (each "
                          "rank's apply is needed; a slot that changes hands would leave the "
                          "step held)");
    for (int i = 0; i < t->ntensors; i++) {
        const struct sdk_tensor *x = t->tensors[i];
        if (x->sync_every > 1)
            return ts_err_set(err, TS_EINVAL, "clipping: tensor '%s' syncs every %u steps; a "
                              "clipped step needs every tensor's gradient", x->name,
                              x->sync_every);
    }
    return TS_OK;
}

/* Every partition's sum of squares of the held step, added in (tensor, partition) order. */
static ts_status norms_local(struct tessera *t, double *sum, struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; !x->assign && p < x->nparts; p++) {
            double v;
            ts_status st = ts_part_norm(x->parts[p], t->rank, x->tstep, 0, t->timeout_ms, NULL,
                                        &v, err);
            if (st)
                return st;
            *sum += v;
        }
    }
    return TS_OK;
}

static ts_status norms_remote(struct tessera *t, double *sum, struct ts_err *err)
{
    bool begun[MAX_SHARDS] = { false };
    ts_status st = TS_OK, first_err = TS_OK;

    if ((st = sdk_usable(t, err)))
        return st;
    for (int i = 0; !st && i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; !st && !x->assign && p < x->nparts; p++) {
            struct ts_frame_hdr h = { .type = TS_FRAME_PULL, .tensor = (uint32_t)i,
                                      .partition = p, .step = x->tstep, .dtype = 1,
                                      .rank = t->rank, .flags = TS_PULL_NORM };
            if (!begun[x->owner[p]])
                h.flags |= TS_PULL_ROUND;
            begun[x->owner[p]] = true;
            st = ts_frame_send(t->conns.shards[x->owner[p]].conn, &h, NULL, 0, err);
            sdk_note_broken(t, x->owner[p], st);
        }
    }
    /* Every reply is read, a refused one remembered, so the streams stay in step. */
    for (int i = 0; !st && i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; !st && !x->assign && p < x->nparts; p++) {
            uint8_t v[TS_NORM_LEN];
            struct reply_info ri = { 0 };
            struct ts_err e = { 0 };
            ts_status r = sdk_read_reply(t, x->owner[p], TS_FRAME_PARAMS, (uint32_t)i, p, v,
                                         sizeof(v), &ri, &e);
            if (!r && !(ri.flags & TS_PARAMS_NORM))
                r = ts_err_set(&e, TS_ECORRUPT, "shard %u: tensor %d partition %u: the reply "
                               "to a norm pull is not a norm (flags 0x%x)",
                               t->conns.shards[x->owner[p]].id, i, p, ri.flags);
            if (!r)
                *sum += ts_norm_get(v);
            if (r && !first_err) {
                first_err = r;
                ts_err_set(err, r, "%s", e.msg);
            }
            if (sdk_transport_failed(r))
                st = r;
        }
    }
    return st ? st : first_err;
}

/* Partition p of x's sum of squares, in element order, as lib/ps/clip.c computes it. */
static double sumsq_of(const float *g, uint64_t n)
{
    double sum = 0;

    for (uint64_t i = 0; i < n; i++)
        sum += (double)g[i] * g[i];
    return sum;
}

/* torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1. A norm that is not
 * finite does not clip (a float step whose sum is not finite is skipped by the shards where
 * loss scaling is on, as GradScaler skips it). */
static float coefficient(double total, float max_norm)
{
    double c = (double)max_norm / (total + 1e-6);

    return isfinite(total) && c < 1.0 ? (float)c : 1.0f;
}

/* Makes the tensors that are assigned this step (assign) or the others active: an assigned
 * tensor (a frozen parameter, a buffer: no gradient, as torch's clip_grad_norm_ skips them)
 * is neither held nor counted in the norm, and has no apply. */
static void activate(struct tessera *t, bool assign)
{
    for (int i = 0; i < t->ntensors; i++)
        t->tensors[i]->active = t->tensors[i]->assign == assign;
}

/* The exchanges once (the norms only while no coefficient was computed): every push, the
 * gradients held; the norms; the gradients' applies with their pulls; the assigned tensors'
 * pulls. Every tensor is active again after it. */
static ts_status clip_once(struct tessera *t, float max_norm, float *const *params,
                           bool *have_coef, double *total, struct ts_err *err)
{
    double sum = 0;
    ts_status st;

    t->clip.phase = SDK_CLIP_HOLD;
    st = sdk_exchange_once(t, 0, t->ntensors, true, NULL, err);
    if (!st && !*have_coef) {
        st = t->local ? norms_local(t, &sum, err) : norms_remote(t, &sum, err);
        if (!st) {
            *total = sqrt(sum);
            t->clip.coef = coefficient(*total, max_norm);
            *have_coef = true;
        }
    }
    if (!st) {
        t->clip.phase = SDK_CLIP_APPLY;
        activate(t, false);
        st = sdk_exchange_once(t, 0, t->ntensors, true, params, err);
    }
    t->clip.phase = SDK_CLIP_OFF;
    if (!st) {
        activate(t, true);
        st = sdk_exchange_once(t, 0, t->ntensors, false, params, err);
    }
    for (int i = 0; i < t->ntensors; i++)
        t->tensors[i]->active = true;
    return st;
}

/* What clip_once needs again after a failover. */
struct clip_args {
    float max_norm;
    float *const *params;
    bool have_coef;
    double *total;
};

static ts_status clip_again(struct tessera *t, void *ctx, struct ts_err *err)
{
    struct clip_args *a = ctx;

    return clip_once(t, a->max_norm, a->params, &a->have_coef, a->total, err);
}

ts_status sdk_clip_exchange(struct tessera *t, uint64_t step, float max_norm,
                            float *const *params, double *total, struct ts_err *err)
{
    struct clip_args a = { max_norm, params, false, total };

    return sdk_fail_over(t, "clipped step", step, clip_again(t, &a, err),
                         clip_again, &a, err);
}

void sdk_clip_reduced(struct tessera *t)
{
    double sum = 0;

    for (int i = 0; i < t->ntensors; i++) {
        const struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            sum += sumsq_of(x->rgrad + off, len);
        }
    }
    /* A partition whose sum was not finite was skipped and pulled as zeros; in bsp its norm
     * made the total not finite, which does not clip: the same here. */
    t->clip.total = t->step_overflow ? INFINITY : sqrt(sum);
    t->clip.coef = coefficient(t->clip.total, t->clip.max);
    if (t->clip.coef == 1.0f)
        return;
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint64_t k = 0; x->active && k < x->numel; k++)
            x->rgrad[k] *= t->clip.coef;
        /* Scaled in place: no longer the version's values, which a failover's SEED offers a
         * rank behind (sdk_failover.c); it says the version alone, and a rank that needs
         * the values fails saying so rather than clip a mix of scaled and raw values. */
        for (uint32_t p = 0; x->active && p < x->nparts; p++)
            x->torn[p] = true;
    }
}
