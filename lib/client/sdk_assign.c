/* sdk_assign.c - what a tensor's pushes carry besides a gradient: tessera_assign, the next
 * push an assignment of values (lib/ps/part.h, "Assignments"; docs/training.md,
 * "Assignments"), and tessera_set_lr, the learning rate and weight decay its updates use. The
 * pushes themselves go through sdk_step.c like any other (prepare_push, push_of, the
 * exchanges and failovers), which reads x->assign, x->lr and x->no_decay; this file sets them,
 * and disarms an assignment once a push of the tensor succeeded. */
#include "client/sdk_internal.h"

#include <math.h>

int tessera_set_lr(tessera *t, int id, float lr, int weight_decay, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (id < -1 || id >= t->ntensors)
        ts_err_set(&err, TS_EINVAL, "tensor id %d is not registered (%d tensors; -1: all)", id,
                   t->ntensors);
    else if (!(lr >= 0) || !isfinite(lr))
        ts_err_set(&err, TS_EINVAL, "lr: %g; want a finite learning rate > 0 (0: the job "
                   "optimizer's)", (double)lr);
    if (err.code)
        return sdk_fail(e, &err);
    for (int i = id < 0 ? 0 : id; i < (id < 0 ? t->ntensors : id + 1); i++) {
        t->tensors[i]->lr = lr;
        t->tensors[i]->no_decay = !weight_decay;
    }
    return sdk_ok(e);
}

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
