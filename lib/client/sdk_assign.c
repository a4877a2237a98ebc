/* sdk_assign.c - tessera_assign: a tensor's next push sets its values instead of a gradient
 * (lib/ps/part.h, "Assignments"; docs/training.md, "Assignments"). The push itself goes
 * through sdk_step.c like any other (prepare_push, push_of, the exchanges and failovers), which
 * reads x->assign; this file arms it and disarms it once a push of the tensor succeeded. */
#include "client/sdk_internal.h"

int tessera_assign(tessera *t, int id, const float *values, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct sdk_tensor *x;

    if (id < 0 || id >= t->ntensors) {
        ts_err_set(&err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                   t->ntensors);
        return sdk_fail(e, &err);
    }
    x = t->tensors[id];
    if (t->job.mode != TS_MODE_BSP)
        ts_err_set(&err, TS_ENOTSUP, "assign: job '%s' is mode %s; a step can be an assignment "
                   "in mode bsp only", t->job.id, ts_mode_name(t->job.mode));
    else if (t->elastic)
        ts_err_set(&err, TS_ENOTSUP, "assign: job '%s' is elastic, where a worker may push "
                   "several slots at once; assignments are for jobs of fixed ranks", t->job.id);
    else if (x->sync_every > 1)
        ts_err_set(&err, TS_EINVAL, "assign: tensor '%s' syncs every %u steps; an assignment "
                   "needs a tensor that moves every step", x->name, x->sync_every);
    if (err.code)
        return sdk_fail(e, &err);
    x->assign = true;
    x->assign_values = values;
    return sdk_ok(e);
}

void sdk_assign_done(struct tessera *t, int first, int last)
{
    for (int i = first; i < last; i++)
        if (t->tensors[i]->active) {
            t->tensors[i]->assign = false;
            t->tensors[i]->assign_values = NULL;
        }
}
