/* sdk_overlap.c - tessera_step in pieces, for trainers that hide communication behind compute
 * (python/tessera/torch.py's overlap): the pushes of a subset of the tensors, as soon as their
 * gradients exist, and the pulls of a subset, in the order the next forward pass needs them.
 * Each call is one exchange with every shard concerned (frames out before replies are read,
 * as tessera_step's), failing over as a step does, and following a rollback into params. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <string.h>

#include "util/log.h"

/* What a step in pieces cannot do: everything tessera_step does besides the exchange itself
 * (sync sums, reduce mode's update, the loss scale, elastic slots) is refused, by name. */
static ts_status check_some(struct tessera *t, const char *what, size_t n, const int *ids,
                            struct ts_err *err)
{
    if (t->job.mode == TS_MODE_REDUCE)
        return ts_err_set(err, TS_ENOTSUP, "%s: mode reduce applies the optimizer in "
                          "tessera_step; use it", what);
    if (t->elastic)
        return ts_err_set(err, TS_ENOTSUP, "%s: an elastic job steps by slots "
                          "(tessera_step_slots); use it", what);
    if (t->loss_mode != TESSERA_LOSS_SCALE_NONE)
        return ts_err_set(err, TS_ENOTSUP, "%s: loss scaling follows whole steps "
                          "(tessera_step); use it", what);
    if (n < 1 || !ids)
        return ts_err_set(err, TS_EINVAL, "%s: n: %zu tensor ids, want 1..%d", what, n,
                          t->ntensors);
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= t->ntensors || (k && ids[k] <= ids[k - 1]))
            return ts_err_set(err, TS_EINVAL, "%s: ids[%zu]: %d; want ascending registered "
                              "tensor ids (0..%d)", what, k, ids[k], t->ntensors - 1);
        if (t->tensors[ids[k]]->sync_every > 1)
            return ts_err_set(err, TS_ENOTSUP, "%s: tensor '%s' has a sync period, summed "
                              "by tessera_step; use it", what, t->tensors[ids[k]]->name);
    }
    return sdk_check_names(t, err);
}

/* Marks ids (ascending) the active tensors of [ids[0], ids[n - 1] + 1), at step `step`. */
static void activate(struct tessera *t, uint64_t step, size_t n, const int *ids)
{
    for (int i = ids[0]; i <= ids[n - 1]; i++)
        t->tensors[i]->active = false;
    for (size_t k = 0; k < n; k++) {
        struct sdk_tensor *x = t->tensors[ids[k]];
        x->active = true;
        x->tstep = step;
        x->pull_version = step + 1;
    }
}

/* tessera_push_some and tessera_step_some (pull: each partition's pull behind its push, into
 * params): the checks, then one exchange. fn names the call in errors, what the step in logs. */
static int push_some(tessera *t, const char *fn, const char *what, uint64_t step, size_t n,
                     const int *ids, const void *const *grads, float *const *params, bool pull,
                     struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st = check_some(t, fn, n, ids, &err);

    for (size_t k = 0; !st && k < n; k++)
        if ((!t->tensors[ids[k]]->assign && (!grads || !grads[ids[k]])) ||
            (pull && (!params || !params[ids[k]])))
            st = ts_err_set(&err, TS_EINVAL, "%s: %s[%d]: NULL", fn,
                            !grads || !grads[ids[k]] ? "grads" : "params", ids[k]);
    for (size_t k = 0; !st && k < n; k++)
        st = sdk_check_push(t, ids[k], grads ? grads[ids[k]] : NULL, &err);
    if (st)
        return sdk_fail(e, &err);
    activate(t, step, n, ids);
    t->nstep = 1;
    t->step_slots = &t->rank;
    for (size_t k = 0; k < n; k++)
        sdk_prepare_push(t, ids[k], grads ? grads[ids[k]] : NULL);
    st = sdk_exchange(t, what, step, ids[0], ids[n - 1] + 1, true,
                      pull ? params + ids[0] : NULL, &err);
    t->nstep = 0;
    if (!st)
        sdk_assign_done(t, ids[0], ids[n - 1] + 1);
    if ((st = sdk_follow_rollback(t, what, step, params, st, &err)))
        return sdk_fail(e, &err);
    if (pull && t->ms)
        ts_membership_set_clock(t->ms, step + 1);
    return sdk_ok(e);
}

int tessera_push_some(tessera *t, uint64_t step, size_t n, const int *ids,
                      const void *const *grads, float *const *params, struct tessera_error *e)
{
    return push_some(t, "tessera_push_some", "push of step", step, n, ids, grads, params, false,
                     e);
}

int tessera_step_some(tessera *t, uint64_t step, size_t n, const int *ids,
                      const void *const *grads, float *const *params, struct tessera_error *e)
{
    return push_some(t, "tessera_step_some", "step", step, n, ids, grads, params, true, e);
}

int tessera_pull_some(tessera *t, uint64_t version, size_t n, const int *ids,
                      float *const *params, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st = check_some(t, "tessera_pull_some", n, ids, &err);

    for (size_t k = 0; !st && k < n; k++)
        if (!params || !params[ids[k]])
            st = ts_err_set(&err, TS_EINVAL, "tessera_pull_some: params[%d]: NULL", ids[k]);
    if (!st && version == 0)
        st = ts_err_set(&err, TS_EINVAL, "tessera_pull_some: version 0: pull the initial "
                        "values with tessera_pull");
    if (st)
        return sdk_fail(e, &err);
    activate(t, version - 1, n, ids);
    st = sdk_exchange(t, "pull of version", version, ids[0], ids[n - 1] + 1, false,
                      params + ids[0], &err);
    if ((st = sdk_follow_rollback(t, "pull of version", version, params, st, &err)))
        return sdk_fail(e, &err);
    if (t->ms)
        ts_membership_set_clock(t->ms, version);
    return sdk_ok(e);
}
