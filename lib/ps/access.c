/* access.c - what callers outside lib/ps may read of a partition (part.h): fields fixed at
 * creation without the lock, the rest under it; and the restore of a new one. */
#include "ps/part_internal.h"

#include <inttypes.h>

#include <string.h>

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

uint64_t ts_part_updates(struct ts_part *p)
{
    uint64_t u;

    pthread_mutex_lock(&p->mu);
    u = p->updates;
    pthread_mutex_unlock(&p->mu);
    return u;
}

uint64_t part_updates_implied(const struct ts_part *p, uint64_t version)
{
    return version == 0 && p->t_shift < 0 ? 0 : (uint64_t)((int64_t)version + p->t_shift);
}

/* The version of the partition at step: the syncs up to step, one per sync period (BSP,
 * REDUCE); in SSP and ASP the pushes that make every rank's clock that. */
static uint64_t version_at(const struct ts_part *p, uint64_t step)
{
    return step / p->sync_every * (async_mode(p->job) ? p->job->workers : 1);
}

/* The partition at step (version_at), and in SSP and ASP every rank's clock at the syncs up to
 * step. Called with mu held. */
static void set_step(struct ts_part *p, uint64_t step)
{
    p->version = p->visible = version_at(p, step);
    for (uint32_t r = 0; async_mode(p->job) && r < p->job->workers; r++)
        p->clock[r] = step / p->sync_every;
}

/* load into p, then p at step with the update count load gave (or the one step implies).
 * Called with mu held. */
static ts_status load_at(struct ts_part *p, uint64_t step, ts_part_load_fn load, void *ctx,
                         struct ts_err *err)
{
    uint64_t updates = part_updates_implied(p, version_at(p, step));
    ts_status st;

    if (!(st = load(ctx, p->value, p->state, &updates, err))) {
        set_step(p, step);
        p->updates = updates;
    }
    return st;
}

ts_status ts_part_restore(struct ts_part *p, uint64_t version, ts_part_load_fn load, void *ctx,
                          struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&p->mu);
    st = load_at(p, version, load, ctx, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

ts_status ts_part_rollback(struct ts_part *p, uint64_t version, uint32_t generation,
                           ts_part_load_fn load, void *ctx, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&p->mu);
    if (!(st = load_at(p, version, load, ctx, err))) {
        p->gen = generation;
        part_step_reset(p);
        part_marks_clear(p);
        memset(p->overflow, 0, p->job->workers);
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void ts_part_set_generation(struct ts_part *p, uint32_t generation)
{
    pthread_mutex_lock(&p->mu);
    p->gen = generation;
    pthread_mutex_unlock(&p->mu);
}

const float *ts_part_values(const struct ts_part *p)
{
    return p->value;
}

ts_status ts_part_read_state(struct ts_part *p, uint64_t version, float *out, uint64_t *updates,
                             struct ts_err *err)
{
    size_t n = ts_optim_state_len(p->job->optim.kind) * p->len;
    ts_status st = TS_OK;

    pthread_mutex_lock(&p->mu);
    if (p->job->mode != TS_MODE_BSP)
        st = ts_err_set(err, TS_ENOTSUP, "optimizer state: job '%s' is mode %s; it is read in "
                        "mode bsp only", p->job->id, ts_mode_name(p->job->mode));
    else if (p->version != version)
        st = ts_err_set(err, TS_ESTATE, "optimizer state of version %" PRIu64 ": tensor %u "
                        "partition %u is at version %" PRIu64 " (read it after the step's "
                        "pull, before the next push)", version, p->tensor_id, p->index,
                        p->version);
    else if (n)
        memcpy(out, p->state, n * sizeof(float));
    if (!st && updates)
        *updates = p->updates;
    pthread_mutex_unlock(&p->mu);
    return st;
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

void ts_part_capture(const struct ts_part *p, const float **value, const float **state,
                     uint64_t *updates)
{
    *value = p->snap_value;
    *state = p->snap_state;
    *updates = p->snap_updates;
}
