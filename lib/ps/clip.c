/* clip.c - clipping by global norm in a partition (part.h, "Clipping"): a held step's sum of
 * squares, the ranks' applies that carry the coefficient, and the norm pull. Called with the
 * partition's mu held, except ts_part_norm, which takes it. */
#include "ps/part_internal.h"

#include <inttypes.h>
#include <string.h>

ts_status part_clip_check(const struct ts_part *p, const struct ts_push *in, struct ts_err *err)
{
    if (!in->hold) {
        if (p->npushed && p->holding)
            return ts_err_set(err, TS_ESTATE, "step %" PRIu64 " of tensor %u partition %u: rank "
                              "%u pushed it unclipped, the step's earlier pushes held it for "
                              "clipping: every rank clips the same steps", in->step,
                              p->tensor_id, p->index, in->rank);
        return TS_OK;
    }
    if (p->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_ENOTSUP, "hold: job '%s' is mode %s; clipping by global norm "
                          "needs mode bsp (reduce: clip the reduced gradient each worker "
                          "pulls)", p->job->id, ts_mode_name(p->job->mode));
    if (in->assign || in->slots)
        return ts_err_set(err, TS_EINVAL, "hold: a clipped step's pushes are gradients of one "
                          "rank each (no assignment, no slots)");
    if (p->npushed && !p->holding)
        return ts_err_set(err, TS_ESTATE, "step %" PRIu64 " of tensor %u partition %u: rank %u "
                          "pushed it for clipping, the step's earlier pushes did not: every "
                          "rank clips the same steps", in->step, p->tensor_id, p->index,
                          in->rank);
    return TS_OK;
}

void part_clip_hold(struct ts_part *p)
{
    double fdiv, sum = 0;
    float inv;

    part_divisors(p, &fdiv, &inv);
    if (p->job->exact && p->acc_form != TS_ACC_I64)
        part_to_i64(p);
    /* The gradient the update will see, a block at a time, as part_apply computes it (a
     * reduce job's workers sum theirs the same way: lib/client/sdk_clip.c). */
    for (uint64_t off = 0; off < p->len; off += APPLY_BLOCK) {
        size_t n = p->len - off < APPLY_BLOCK ? (size_t)(p->len - off) : APPLY_BLOCK;

        part_block_grad(p, NULL, false, off, n, fdiv, inv);
        for (size_t i = 0; i < n; i++)
            sum += (double)p->grad[i] * p->grad[i];
    }
    p->sumsq = sum;
    p->held = true;
    pthread_cond_broadcast(&p->cv);
}

ts_status part_clip_apply(struct ts_part *p, const struct ts_push *in, bool *applied,
                          struct ts_err *err)
{
    uint32_t r = in->rank;

    *applied = false;
    if (p->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_ENOTSUP, "apply: job '%s' is mode %s; clipping needs bsp",
                          p->job->id, ts_mode_name(p->job->mode));
    if (r >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", r,
                          p->job->workers);
    if (!(in->coef >= 0.0f && in->coef <= 1.0f))
        return ts_err_set(err, TS_EINVAL, "coef: %g; a clipping coefficient is in 0..1 "
                          "(min(1, max_norm / (norm + 1e-6)))", (double)in->coef);
    if (in->step < p->version && in->retry)   /* applied before a failover: a duplicate */
        return TS_OK;
    if (in->step != p->version)
        return ts_err_set(err, in->step < p->version ? TS_ESTATE : TS_EINVAL, "apply of step %"
                          PRIu64 ", but the partition is at version %" PRIu64, in->step,
                          p->version);
    if (!p->holding || !p->pushed[r])
        return ts_err_set(err, TS_ESTATE, "apply of step %" PRIu64 " by rank %u before its "
                          "push of the step for clipping (hold)", in->step, r);
    if (p->applied_by[r] && in->coef == p->coef)
        return in->retry ? TS_OK
                         : ts_err_set(err, TS_ESTATE, "rank %u already applied step %" PRIu64,
                                      r, in->step);
    if (p->applied_by[r])
        return ts_err_set(err, TS_EPERM, "apply of step %" PRIu64 " by rank %u again with "
                          "coef %.9g, not the %.9g it gave", in->step, r, (double)in->coef,
                          (double)p->coef);
    if (p->napplied && in->coef != p->coef)
        return ts_err_set(err, TS_EINVAL, "coef: rank %u clips step %" PRIu64 " by %.9g, the "
                          "others by %.9g: every rank computes it from the same norms",
                          r, in->step, (double)in->coef, (double)p->coef);
    p->applied_by[r] = 1;
    p->coef = in->coef;
    if (++p->napplied == p->job->workers) {
        part_apply(p, r, NULL, false);
        *applied = true;
    }
    return TS_OK;
}

ts_status ts_part_norm(struct ts_part *p, uint32_t rank, uint64_t step, uint32_t gen, int ms,
                       const atomic_uint *cancel, double *sumsq, struct ts_err *err)
{
    ts_status st;

    if (rank >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", rank,
                          p->job->workers);
    if (p->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_EINVAL, "norm: job '%s' is mode %s; clipping needs bsp",
                          p->job->id, ts_mode_name(p->job->mode));
    pthread_mutex_lock(&p->mu);
    st = part_wait(p, step, true, gen, ms, cancel, err);
    if (!st && p->version > step)
        st = ts_err_set(err, TS_ESTATE, "tensor %u partition %u: the gradient norm of step %"
                        PRIu64 " is gone (at version %" PRIu64 ": the step was applied, or "
                        "not held for clipping)", p->tensor_id, p->index, step, p->version);
    if (!st)
        *sumsq = p->sumsq;
    pthread_mutex_unlock(&p->mu);
    return st;
}
