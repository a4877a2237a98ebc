/* sdk_assign.c - what a tensor's pushes carry besides a gradient: tessera_assign, the next
 * push an assignment of values (lib/ps/part.h, "Assignments"; docs/training.md,
 * "Assignments") with the optimizer's state and update count or without, and tessera_set_lr,
 * the learning rate and weight decay its updates use; and tessera_pull_state, what a
 * checkpoint reads back (the state and the update count). The
 * pushes themselves go through sdk_wire.c like any other (prepare_push, push_of, the
 * exchanges and failovers), which reads x->assign, x->lr and x->no_decay; this file sets them,
 * and disarms an assignment once a push of the tensor succeeded. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transport/frame.h"

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
    sdk_assign_clear(x);
    x->assign = true;
    x->assign_values = values;
    return sdk_ok(e);
}

/* tessera_assign_state, and with counted the update count too. */
static int assign_state(tessera *t, int id, const float *values, const float *state,
                        bool counted, uint64_t updates, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    size_t slen = ts_optim_state_len(t->job.optim.kind);
    struct sdk_tensor *x;
    int rc;

    if (!values || !state) {
        ts_err_set(&err, TS_EINVAL, "assign: values and state are both required (the rank "
                   "that gives them; the others call tessera_assign with NULL)");
        return sdk_fail(e, &err);
    }
    if ((rc = tessera_assign(t, id, values, e)))
        return rc;
    x = t->tensors[id];
    x->assign_counted = counted;
    x->assign_updates = updates;
    if (!slen)
        return rc;
    if (!(x->assign_buf = malloc(x->numel * (1 + slen) * sizeof(float)))) {
        sdk_assign_clear(x);
        ts_err_set(&err, TS_ENOMEM, "assign: no memory for tensor '%s' and its state", x->name);
        return sdk_fail(e, &err);
    }
    for (uint32_t p = 0; p < x->nparts; p++) {   /* as each partition's push carries them */
        uint64_t off, len;
        float *at;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        at = x->assign_buf + off * (1 + slen);
        memcpy(at, values + off, len * sizeof(float));
        for (size_t k = 0; k < slen; k++)
            memcpy(at + len * (1 + k), state + k * x->numel + off, len * sizeof(float));
    }
    return sdk_ok(e);
}

int tessera_assign_state(tessera *t, int id, const float *values, const float *state,
                         struct tessera_error *e)
{
    return assign_state(t, id, values, state, false, 0, e);
}

int tessera_assign_state_updates(tessera *t, int id, const float *values, const float *state,
                                 uint64_t updates, struct tessera_error *e)
{
    return assign_state(t, id, values, state, true, updates, e);
}

uint64_t sdk_assign_bytes(const struct tessera *t, const struct sdk_tensor *x)
{
    return x->numel * (1 + ts_optim_state_len(t->job.optim.kind)) * sizeof(float);
}

void sdk_assign_clear(struct sdk_tensor *x)
{
    x->assign = false;
    x->assign_counted = false;
    x->assign_values = NULL;
    free(x->assign_buf);
    x->assign_buf = NULL;
}

void sdk_assign_done(struct tessera *t, int first, int last)
{
    for (int i = first; i < last; i++)
        if (t->tensors[i]->active)
            sdk_assign_clear(t->tensors[i]);
}

/* Partition p's state, slen components of len floats, into out's [k][numel] layout. */
static void scatter_state(const struct sdk_tensor *x, size_t slen, uint64_t off, uint64_t len,
                          const float *part, float *out)
{
    for (size_t k = 0; k < slen; k++)
        memcpy(out + k * x->numel + off, part + k * len, len * sizeof(float));
}

/* tessera_pull_state; with updates, the tensor's update count too (every partition's, which
 * must agree), read even where the optimizer keeps no state. */
static int pull_state(tessera *t, int id, uint64_t version, float *out, uint64_t *updates,
                      struct tessera_error *e)
{
    struct ts_err err = { 0 };
    size_t slen = ts_optim_state_len(t->job.optim.kind);
    struct sdk_tensor *x;
    float *tmp = NULL;
    ts_status st = TS_OK, first = TS_OK;
    uint64_t seen = 0;

    if (id < 0 || id >= t->ntensors)
        st = ts_err_set(&err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                        t->ntensors);
    else if (t->job.mode != TS_MODE_BSP)
        st = ts_err_set(&err, TS_ENOTSUP, "optimizer state: job '%s' is mode %s; it is read "
                        "in mode bsp only", t->job.id, ts_mode_name(t->job.mode));
    else if (!t->local)
        st = sdk_usable(t, &err);
    if (st)
        return sdk_fail(e, &err);
    x = t->tensors[id];
    if (updates)
        *updates = 0;
    if ((!slen && !updates) || !x->nparts)
        return sdk_ok(e);
    /* A partition's state, then its count (TS_PARAMS_UPDATES). */
    if (!(tmp = malloc((x->partition_bytes / sizeof(float) + 1) * slen * sizeof(float) +
                       TS_UPDATES_LEN))) {
        ts_err_set(&err, TS_ENOMEM, "optimizer state: out of memory");
        return sdk_fail(e, &err);
    }
    /* Every request goes out before a reply is read, as a pull's do (sdk_exchange.c). */
    for (uint32_t p = 0; !t->local && !st && p < x->nparts; p++) {
        struct ts_frame_hdr h = { .type = TS_FRAME_PULL, .tensor = (uint32_t)id, .partition = p,
                                  .step = version, .rank = t->rank, .flags = TS_PULL_STATE };
        st = ts_frame_send(t->conns.shards[x->owner[p]].conn, &h, NULL, 0, &err);
        sdk_note_broken(t, x->owner[p], st);
    }
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint64_t off, len, u = 0;
        struct ts_err pe = { 0 };
        struct reply_info ri = { 0 };
        ts_status r;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        if (t->local) {
            r = ts_part_read_state(x->parts[p], version, tmp, &u, &pe);
        } else {
            r = sdk_read_reply(t, x->owner[p], TS_FRAME_PARAMS, (uint32_t)id, p, tmp,
                               len * slen * sizeof(float) + TS_UPDATES_LEN, &ri, &pe);
            if (!r && !(ri.flags & TS_PARAMS_UPDATES))
                r = ts_err_set(&pe, TS_ECORRUPT, "shard %u: partition %u's state came without "
                               "its update count", t->conns.shards[x->owner[p]].id, p);
            if (!r)
                u = ts_updates_get((const uint8_t *)(tmp + len * slen));
        }
        if (!r && updates && p && u != seen)
            r = ts_err_set(&pe, TS_ESTATE, "partition %u is at update %" PRIu64 ", partition 0 "
                           "at %" PRIu64 " (a tensor's partitions count the same steps)", p, u,
                           seen);
        if (!r) {
            scatter_state(x, slen, off, len, tmp, out);
            seen = u;
        } else if (!first) {
            first = ts_err_set(&err, r, "tensor '%s': %s", x->name, pe.msg);
        }
        if (sdk_transport_failed(r))
            st = r;
    }
    free(tmp);
    if (st || first)
        return sdk_fail(e, &err);
    if (updates)
        *updates = seen;
    return sdk_ok(e);
}

int tessera_pull_state(tessera *t, int id, uint64_t version, float *out,
                       struct tessera_error *e)
{
    return pull_state(t, id, version, out, NULL, e);
}

int tessera_pull_state_updates(tessera *t, int id, uint64_t version, float *out,
                               uint64_t *updates, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (!updates) {
        ts_err_set(&err, TS_EINVAL, "updates: required (tessera_pull_state reads the state "
                   "alone)");
        return sdk_fail(e, &err);
    }
    return pull_state(t, id, version, out, updates, e);
}
