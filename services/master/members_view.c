/* members_view.c - the membership table copied out and back in (members.h): views of it
 * (ts_members_view for GetShardMap, ts_members_view_page for a status listing a page of the
 * workers), ts_members_restore, which fills a restarted master's empty table from the
 * view its state file kept, and a shard's address and registration looked up for a report. The table itself is members.c's; see members_internal.h.
 * Ownership: a view's shards and workers are malloc'd copies the caller frees with
 * ts_members_view_free; ts_members_restore copies what it takes from its view. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "members_internal.h"
#include "placement/ring.h"

static ts_status copy_table(const struct table *t, bool alive_only, struct ts_member **out,
                            size_t *n, struct ts_err *err)
{
    *n = 0;
    *out = malloc((t->n + 1) * sizeof(**out));
    if (!*out)
        return ts_err_set(err, TS_ENOMEM, "members: out of memory");
    for (size_t i = 0; i < t->n; i++)
        if (!alive_only || t->v[i].state == TS_MEMBER_ALIVE)
            (*out)[(*n)++] = t->v[i];
    return TS_OK;
}

/* The workers of ids above after, max at most (0: all), into v; and the counts of all. */
static ts_status copy_workers(const struct table *t, uint32_t after, size_t max,
                              struct ts_members_view *v, struct ts_err *err)
{
    size_t lo = 0, hi = t->n, n;

    for (size_t i = 0; i < t->n; i++)
        v->workers_in[t->v[i].state < 4 ? t->v[i].state : 0]++;
    while (lo < hi) {   /* the first id above after (the table is by id) */
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].id <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    n = t->n - lo;
    if (max && n > max) {
        n = max;
        v->workers_next = t->v[lo + n - 1].id;
    }
    if (!(v->workers = malloc((n + 1) * sizeof(*v->workers))))
        return ts_err_set(err, TS_ENOMEM, "members: out of memory");
    if (n)   /* t->v is NULL while no worker ever registered */
        memcpy(v->workers, t->v + lo, n * sizeof(*v->workers));
    v->nworkers = n;
    return TS_OK;
}

/* v's fields but the members, zeroed first; mu held. */
static void view_head(struct ts_members *m, struct ts_members_view *v)
{
    memset(v, 0, sizeof(*v));
    v->epoch = m->epoch;
    v->vnodes = m->cfg.vnodes;
    v->replicas = m->cfg.replicas ? m->cfg.replicas : 1;
    v->ring_digest = ts_ring_digest(m->ring);
    v->default_lease_ms = m->cfg.default_lease_ms;
    v->shard_failures = m->shard_failures;
    v->shard_aways = m->shard_aways;
    v->shard_expiries = m->expired[0];
    v->worker_expiries = m->expired[1];
    v->worker_beats = m->worker_beats;
    v->worker_vouches = m->worker_vouches;
}

ts_status ts_members_view(struct ts_members *m, bool alive_only, struct ts_members_view *v,
                          struct ts_err *err)
{
    ts_status st;

    if (!alive_only)
        return ts_members_view_page(m, 0, 0, v, err);
    pthread_mutex_lock(&m->mu);
    view_head(m, v);
    st = copy_table(&m->shards, true, &v->shards, &v->nshards, err);
    pthread_mutex_unlock(&m->mu);
    if (st)
        ts_members_view_free(v);
    return st;
}

ts_status ts_members_view_page(struct ts_members *m, uint32_t after, size_t max,
                               struct ts_members_view *v, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&m->mu);
    view_head(m, v);
    st = copy_table(&m->shards, false, &v->shards, &v->nshards, err);
    if (!st)
        st = copy_workers(&m->workers, after, max, v, err);
    pthread_mutex_unlock(&m->mu);
    if (st)
        ts_members_view_free(v);
    return st;
}

void ts_members_view_free(struct ts_members_view *v)
{
    free(v->shards);
    free(v->workers);
    v->shards = v->workers = NULL;
}

/* Puts restored members into the empty table t: ids ascending, indexed, a fresh lease. */
static ts_status restore_table(struct table *t, const struct ts_member *v, size_t n,
                               uint32_t reserve, int64_t now_ms, int64_t grace_ms,
                               struct ts_err *err)
{
    ts_status st = TS_OK;

    for (size_t i = 0; !st && i < n; i++) {
        struct ts_member *e;
        if (!v[i].id || (t->n && v[i].id <= t->v[t->n - 1].id) ||
            members_find_instance(t, v[i].instance))
            return ts_err_set(err, TS_EINVAL, "%s %u: ids must ascend, instances differ",
                              kind_name(v[i].kind), v[i].id);
        if (!(st = members_append(t, &e, err))) {
            *e = v[i];
            e->last_heartbeat_ms = now_ms;
            e->grace_until_ms = now_ms + grace_ms;
            e->heard = true;   /* it was alive under the master that kept it */
            e->away_ms = 0;    /* not kept: this master's leases decide again */
            e->lease_due_ms = 0;   /* queued by the caller, in this master's queue */
            st = members_index_add(t, e, err);
        }
    }
    t->next_id = t->reserved = t->n && t->v[t->n - 1].id > reserve ? t->v[t->n - 1].id : reserve;
    return st;
}

ts_status ts_members_restore(struct ts_members *m, const struct ts_members_view *v,
                             const struct ts_members_clock *c, int64_t now_ms, int64_t grace_ms,
                             struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&m->mu);
    if (m->shards.n || m->workers.n) {
        pthread_mutex_unlock(&m->mu);
        return ts_err_set(err, TS_ESTATE, "members: restore into a table in use");
    }
    if ((st = restore_table(&m->shards, v->shards, v->nshards, c->shard_ids, now_ms, grace_ms,
                            err)) ||
        (st = restore_table(&m->workers, v->workers, v->nworkers, c->worker_ids, now_ms,
                            grace_ms, err))) {
        m->shards.n = m->workers.n = 0;
        m->shards.next_id = m->shards.reserved = m->workers.next_id = m->workers.reserved = 0;
        for (struct table *t = &m->shards; t; t = t == &m->shards ? &m->workers : NULL)
            if (t->index)
                memset(t->index, 0, t->index_cap * sizeof(*t->index));
    } else {
        m->epoch = v->epoch > c->epoch ? v->epoch : c->epoch;
        m->shard_failures = v->shard_failures;
        members_lease_queue_all(m);
        members_new_epoch(m, "the master restarted with its state");
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* ---- lookups for a report (rpc.c, report_unreachable) ---- */

ts_status ts_members_shard_addr(struct ts_members *m, uint32_t id,
                                char addr[TS_MEMBERS_MAX_ADDR + 1],
                                char instance[TS_MEMBERS_MAX_INSTANCE + 1], bool *alive,
                                struct ts_err *err)
{
    struct ts_member *e;
    ts_status st = TS_OK;

    if (id == 0)
        return ts_err_set(err, TS_EINVAL, "shard_id: required");
    pthread_mutex_lock(&m->mu);
    if (!(e = members_find_id(&m->shards, id))) {
        st = ts_err_set(err, TS_ENOTFOUND, "shard_id: no shard %u is registered", id);
    } else {
        memcpy(addr, e->addr, sizeof(e->addr));
        memcpy(instance, e->instance, sizeof(e->instance));
        *alive = e->state == TS_MEMBER_ALIVE;
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

uint64_t ts_members_shard_registered(struct ts_members *m, uint32_t id)
{
    struct ts_member *e;
    uint64_t epoch = 0;

    pthread_mutex_lock(&m->mu);
    if ((e = members_find_id(&m->shards, id)) && e->state == TS_MEMBER_ALIVE)
        epoch = e->registered_epoch;
    pthread_mutex_unlock(&m->mu);
    return epoch;
}
