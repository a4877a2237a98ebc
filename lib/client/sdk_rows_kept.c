/* sdk_rows_kept.c - a table's last push kept until it is applied for sure, and sent again
 * after a failover (sdk_internal.h; docs/embeddings.md, "Restarting from its own disk"). */
#include "sdk_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Room for n of esz bytes in *buf (holding *cap); false without memory. */
static bool room(void **buf, size_t *cap, size_t n, size_t esz)
{
    void *nb;

    if (n <= *cap)
        return true;
    if (!(nb = realloc(*buf, (n ? n : 1) * esz)))
        return false;
    *buf = nb;
    *cap = n;
    return true;
}

ts_status sdk_rows_keep(struct tessera *t, struct sdk_table *x, uint32_t slot, uint64_t step,
                        size_t n, const uint64_t *ids, const float *grads, struct ts_err *err)
{
    struct sdk_kept *k = NULL;

    if (t->local)
        return TS_OK;
    if (x->nkept && x->kept[0].step != step)   /* a new step: the last one's are applied */
        x->nkept = 0;
    for (size_t i = 0; i < x->nkept && !k; i++)
        if (x->kept[i].slot == slot)
            k = &x->kept[i];
    if (!k) {
        if (x->nkept == x->kept_cap) {
            size_t cap = x->kept_cap ? 2 * x->kept_cap : 1;
            struct sdk_kept *nk = realloc(x->kept, cap * sizeof(*nk));
            if (!nk)
                return ts_err_set(err, TS_ENOMEM, "table '%s': no memory to keep the push of "
                                  "step %" PRIu64, x->name, step);
            memset(nk + x->kept_cap, 0, (cap - x->kept_cap) * sizeof(*nk));
            x->kept = nk;
            x->kept_cap = cap;
        }
        k = &x->kept[x->nkept++];
    }
    if (!room((void **)&k->ids, &k->ids_cap, n, sizeof(*ids)) ||
        !room((void **)&k->grads, &k->grads_cap, n * x->dim, sizeof(*grads))) {
        x->nkept--;
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory to keep the push of step %"
                          PRIu64 " (%zu rows)", x->name, step, n);
    }
    memcpy(k->ids, ids, n * sizeof(*ids));
    memcpy(k->grads, grads, n * x->dim * sizeof(*grads));
    k->n = n;
    k->step = step;
    k->slot = slot;
    k->generation = t->rec.followed;
    return TS_OK;
}

void sdk_rows_pulled(struct sdk_table *x, uint64_t version)
{
    if (x->nkept && x->kept[0].step < version)
        x->nkept = 0;
}

ts_status sdk_rows_resend(struct tessera *t, sdk_kept_send_fn send, struct ts_err *err)
{
    size_t sent = 0;
    uint64_t step = 0;
    ts_status st;

    for (int i = 0; i < t->ntables; i++) {
        struct sdk_table *x = t->tables[i];
        for (size_t k = 0; k < x->nkept; k++) {
            if (x->kept[k].generation != t->rec.followed)
                continue;   /* the job went back since: the failing call finds that */
            st = send(t, i, &x->kept[k], err);
            if (st == TS_ESTALE) {   /* another ring: not this worker's to send again */
                memset(err, 0, sizeof(*err));
                x->nkept = 0;
                break;
            }
            if (st) {
                ts_err_prefix(err, "table '%s': its last push (step %" PRIu64 ") sent again",
                              x->name, x->kept[k].step);
                return st;
            }
            sent++;
            step = x->kept[k].step;
        }
    }
    if (sent)
        ts_log(TS_WARN, "sdk", "sent again the last push of %zu table slot(s) (step %" PRIu64
               "), flagged a retry: a shard that came back from its redo log sums what it did "
               "not apply, the others acknowledge it unchanged", sent, step);
    return TS_OK;
}

void sdk_rows_kept_free(struct sdk_table *x)
{
    for (size_t k = 0; k < x->kept_cap; k++) {
        free(x->kept[k].ids);
        free(x->kept[k].grads);
    }
    free(x->kept);
    x->kept = NULL;
    x->nkept = x->kept_cap = 0;
}
