/* sdk_exchange.c - one exchange of the active tensors of a step, without failover: every
 * request out before any reply is read (so the shards work in parallel and a step costs one
 * round trip), or where the bytes leave the host each shard's requests and replies at once
 * (sdk_pipe.c), or in a local run the partitions in this process (sdk_wire.c). Recovery
 * (sdk_failover.c) pulls with it after a rollback; what to send again after a failover is the
 * step's to decide (sdk_step.c). */
#include "client/sdk_internal.h"

#include <string.h>

#include "transport/frame.h"

/* Sends a PUSH or a PULL (sdk_send_one) for every partition of the active tensors of
 * [first, last); begun: by shard slot, whether one of that kind went already. */
static ts_status send_all(struct tessera *t, int first, int last, bool push, uint32_t flags,
                          bool *begun, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int i = first; !st && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++)
            st = sdk_send_one(t, i, p, push, flags, &begun[x->owner[p]], err);
    }
    return st;
}

/* Reads the replies to send_all's requests, in order: ACKs, or PARAMS into params[i - first].
 * A refused request is remembered (the first in err) and reading goes on, so the streams stay
 * in step; a transport error ends it. */
static ts_status read_all(struct tessera *t, int first, int last, float *const *params,
                          ts_status *first_err, struct ts_err *err)
{
    struct step_reads acc = { 0 };
    ts_status st = TS_OK;

    for (int i = first; !st && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++) {
            struct ts_err e = { 0 };
            ts_status r = sdk_read_one(t, i, p, params ? params[i - first] : NULL, &acc, &e);
            if (r && !*first_err) {
                *first_err = r;
                ts_err_set(err, r, "%s", e.msg);
            }
            if (sdk_transport_failed(r))
                st = r;
        }
    }
    sdk_reads_merge(t, &acc);
    return st;
}

/* The active tensors of [first, last) (arrays indexed from first): pushes (if push, of every
 * slot of the step) and pulls (if params). Remote: every request goes out before any reply is
 * read, so the shards work in parallel and a step costs one round trip; or, where the bytes
 * leave the host, each shard's requests and replies flow at once (sdk_pipe.c). */
ts_status sdk_exchange_once(struct tessera *t, int first, int last, bool push,
                            float *const *params, struct ts_err *err)
{
    uint32_t flags = push ? TS_PULL_AFTER_PUSH : 0;
    bool pushed[MAX_SHARDS] = { false }, pulled[MAX_SHARDS] = { false };
    ts_status st = TS_OK, first_err = TS_OK;

    if (t->local)
        return sdk_exchange_local(t, first, last, push, params, err);
    if ((st = sdk_usable(t, err)))
        return st;
    for (int i = first; i < last; i++)
        if (t->tensors[i]->active) {
            struct sdk_tensor *x = t->tensors[i];
            t->wait.step = push ? x->tstep : x->pull_version ? x->pull_version - 1 : 0;
            break;
        }
    if (sdk_pipe_pays(t, first, last, push, params))
        return sdk_pipe_exchange(t, first, last, push, params, flags, err);
    for (size_t k = 0; push && !st && k < sdk_npush(t); k++) {
        sdk_next_slot(t, first, last, k);
        st = send_all(t, first, last, true, 0, pushed, err);
    }
    if (!st && params)
        st = send_all(t, first, last, false, flags, pulled, err);
    for (size_t k = 0; push && !st && k < sdk_npush(t); k++)
        st = read_all(t, first, last, NULL, &first_err, err);
    if (!st && params)
        st = read_all(t, first, last, params, &first_err, err);
    return st ? st : first_err;
}

/* Readies tensor id alone, at its own step `tstep` (pull: version `version`): the exchange
 * that follows covers [id, id + 1) only. */
void sdk_only(struct tessera *t, int id, uint64_t tstep, uint64_t version)
{
    t->tensors[id]->active = true;
    t->tensors[id]->tstep = tstep;
    t->tensors[id]->pull_version = version;
}

ts_status sdk_pull_all(struct tessera *t, uint64_t step, float *const *params,
                       struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        sdk_only(t, i, 0, step / x->sync_every);
        if (x->acc)   /* a sum since the last sync of steps that are undone */
            memset(x->acc, 0, x->numel * sdk_elem_bytes(t));
    }
    return sdk_exchange_once(t, 0, t->ntensors, false, params, err);
}

