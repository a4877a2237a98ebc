/* access.c - what callers outside lib/ps may read of a partition (part.h): fields fixed at
 * creation without the lock, the rest under it; and the restore of a new one. */
#include "ps/part_internal.h"

uint32_t ts_part_index(const struct ts_part *p)
{
    return p->index;
}

uint64_t ts_part_offset(const struct ts_part *p)
{
    return p->offset;
}

uint64_t ts_part_len(const struct ts_part *p)
{
    return p->len;
}

uint64_t ts_part_version(struct ts_part *p)
{
    uint64_t v;

    pthread_mutex_lock(&p->mu);
    v = p->version;
    pthread_mutex_unlock(&p->mu);
    return v;
}

ts_status ts_part_restore(struct ts_part *p, uint64_t version,
                          ts_status (*load)(void *ctx, float *value, float *state,
                                            struct ts_err *err),
                          void *ctx, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&p->mu);
    if (!(st = load(ctx, p->value, p->state, err)))
        p->version = version;
    pthread_mutex_unlock(&p->mu);
    return st;
}

const float *ts_part_values(const struct ts_part *p)
{
    return p->value;
}

void ts_part_fold_ranks(struct ts_part *p, struct ts_part_ranks *r)
{
    pthread_mutex_lock(&p->mu);
    r->skipped = p->skipped > r->skipped ? p->skipped : r->skipped;
    for (uint32_t k = 0; p->clock && k < r->n; k++) {
        r->clock[k] = p->clock[k] < r->clock[k] ? p->clock[k] : r->clock[k];
        r->stale_last[k] = p->stale_last[k] > r->stale_last[k] ? p->stale_last[k]
                                                                : r->stale_last[k];
        r->stale_max[k] = p->stale_max[k] > r->stale_max[k] ? p->stale_max[k] : r->stale_max[k];
    }
    pthread_mutex_unlock(&p->mu);
}

void ts_part_capture(const struct ts_part *p, const float **value, const float **state)
{
    *value = p->snap_value;
    *state = p->snap_state;
}
