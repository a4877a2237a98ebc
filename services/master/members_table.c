/* members_table.c - the membership table's arrays: members in id order (a heartbeat finds
 * its member by binary search), a hash index by instance (a registration finds its instance
 * in O(1)), and the departed forgotten oldest first. See members_internal.h; every function
 * here runs with the table's mutex held. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "members_internal.h"

/* ---- the table ---- */

struct table *members_table_of(struct ts_members *m, enum ts_member_kind k)
{
    return k == TS_MEMBER_SHARD ? &m->shards : &m->workers;
}

static size_t slot_of(const struct table *t, const char *instance)
{
    return (size_t)XXH3_64bits(instance, strlen(instance)) & (t->index_cap - 1);
}

struct ts_member *members_find_instance(struct table *t, const char *instance)
{
    if (!t->index_cap)
        return NULL;
    for (size_t s = slot_of(t, instance); t->index[s]; s = (s + 1) & (t->index_cap - 1))
        if (strcmp(t->v[t->index[s] - 1].instance, instance) == 0)
            return &t->v[t->index[s] - 1];
    return NULL;
}

static void index_put(struct table *t, const struct ts_member *e)
{
    size_t s = slot_of(t, e->instance);

    while (t->index[s])
        s = (s + 1) & (t->index_cap - 1);
    t->index[s] = (uint32_t)(e - t->v) + 1;
}

/* The member with this id, or NULL. */
struct ts_member *members_find_id(struct table *t, uint32_t id)
{
    size_t lo = 0, hi = t->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && t->v[lo].id == id ? &t->v[lo] : NULL;
}

/* Gives back the room of forgotten members: without it the table and its index stay as large
 * as they ever were (a member is about 1.9 KiB: a job of 10,000 workers left 31 MB behind for
 * good). Capacities come down to under four times what is left; a failed allocation keeps
 * the larger block. The index is rebuilt by the caller. */
static void shrink(struct table *t)
{
    size_t cap = t->cap, icap = t->index_cap;

    while (cap / 2 >= 16 && t->n <= cap / 4)
        cap /= 2;
    if (cap < t->cap) {
        struct ts_member *v = realloc(t->v, cap * sizeof(*v));
        if (v) {
            t->v = v;
            t->cap = cap;
        }
    }
    while (icap / 2 >= 64 && 4 * t->n <= icap / 2)
        icap /= 2;
    if (icap < t->index_cap) {
        uint32_t *idx = calloc(icap, sizeof(*idx));
        if (idx) {
            free(t->index);
            t->index = idx;
            t->index_cap = icap;
        }
    }
}

/* Forgets the oldest departed (left or dead) workers once more than TS_MEMBERS_KEEP_DEPARTED
 * are kept, down to half that (so the rebuild is paid once per many departures). Moves
 * members: call it last, with no member pointer held. */
void members_prune(struct table *t)
{
    size_t k = 0, gone = 0, drop;

    for (size_t i = 0; i < t->n; i++)
        gone += t->v[i].state != TS_MEMBER_ALIVE;
    if (gone <= TS_MEMBERS_KEEP_DEPARTED)
        return;
    drop = gone - TS_MEMBERS_KEEP_DEPARTED / 2;
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].state != TS_MEMBER_ALIVE && drop) {
            drop--;
            continue;
        }
        t->v[k++] = t->v[i];
    }
    t->n = k;
    shrink(t);
    memset(t->index, 0, t->index_cap * sizeof(*t->index));
    for (size_t i = 0; i < t->n; i++)
        index_put(t, &t->v[i]);
}

/* Indexes the member just appended (its instance set), growing the index to stay half empty. */
ts_status members_index_add(struct table *t, const struct ts_member *e, struct ts_err *err)
{
    if (2 * t->n > t->index_cap) {
        size_t cap = t->index_cap ? 2 * t->index_cap : 64;
        uint32_t *idx = calloc(cap, sizeof(*idx));
        if (!idx)
            return ts_err_set(err, TS_ENOMEM, "members: out of memory");
        free(t->index);
        t->index = idx;
        t->index_cap = cap;
        for (size_t i = 0; i < t->n; i++)
            index_put(t, &t->v[i]);
        return TS_OK;
    }
    index_put(t, e);
    return TS_OK;
}

ts_status members_append(struct table *t, struct ts_member **out, struct ts_err *err)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct ts_member *v = realloc(t->v, cap * sizeof(*v));
        if (!v)
            return ts_err_set(err, TS_ENOMEM, "members: out of memory");
        t->v = v;
        t->cap = cap;
    }
    *out = &t->v[t->n++];
    memset(*out, 0, sizeof(**out));
    (*out)->id = ++t->next_id;
    return TS_OK;
}

/* ---- members' states, and their leases queued (members_lease.c pops them) ---- */

/* A worker never heard since it registered gets the default lease at most: a registration
 * with a long lease and no heartbeat would hold its job's slot so long. */
bool members_first_lease(const struct ts_members *m, const struct ts_member *e)
{
    return e->kind == TS_MEMBER_WORKER && !e->heard && e->lease_ms > m->cfg.default_lease_ms;
}

/* The first time e may be declared dead: silent past its lease, and out of any grace; a
 * shard away (members_lease.c), once its restart grace has passed. */
int64_t members_lease_due(const struct ts_members *m, const struct ts_member *e)
{
    uint32_t lease = members_first_lease(m, e) ? m->cfg.default_lease_ms : e->lease_ms;
    int64_t due = e->away_ms ? e->away_ms + (int64_t)m->cfg.shard_grace_ms + 1
                             : e->last_heartbeat_ms + (int64_t)lease + 1;

    return e->grace_until_ms > due ? e->grace_until_ms : due;
}

/* Queues e's lease unless an entry at or before its due is queued already. */
void members_lease_queue(struct ts_members *m, struct ts_member *e)
{
    int64_t due = members_lease_due(m, e);

    if (e->lease_due_ms && e->lease_due_ms <= due)
        return;
    if (leaseq_push(&m->leases, due, e->kind, e->id, NULL))
        m->lease_rescan = true;
    else
        e->lease_due_ms = due;
}

void members_set_state(struct ts_members *m, struct ts_member *e, enum ts_member_state s)
{
    e->state = s;
    m->roster[e->kind == TS_MEMBER_WORKER].stale = true;
    if (s == TS_MEMBER_ALIVE)
        members_lease_queue(m, e);
    else
        e->away_ms = 0;   /* away is a state of alive shards alone */
}

void members_lease_queue_all(struct ts_members *m)
{
    struct table *tables[2] = { &m->shards, &m->workers };

    m->lease_rescan = false;
    m->roster[0].stale = m->roster[1].stale = true;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < tables[k]->n; i++)
            if (tables[k]->v[i].state == TS_MEMBER_ALIVE)
                members_lease_queue(m, &tables[k]->v[i]);
}

const struct roster *members_roster(struct ts_members *m, enum ts_member_kind kind)
{
    struct roster *r = &m->roster[kind == TS_MEMBER_WORKER];
    const struct table *t = members_table_of(m, kind);

    if (!r->stale)
        return r;
    *r = (struct roster){ .min_lease_ms = UINT32_MAX };
    for (size_t i = 0; i < t->n; i++) {
        const struct ts_member *e = &t->v[i];
        if (e->state != TS_MEMBER_ALIVE)
            continue;
        r->alive++;
        if (e->lease_ms < r->min_lease_ms)
            r->min_lease_ms = e->lease_ms;
        if (e->lease_ms > r->max_lease_ms)
            r->max_lease_ms = e->lease_ms;
    }
    return r;
}

/* Whether worker e may rest (HeartbeatResponse.rest_ms) at now_ms: a shard vouched for it
 * within the last half of its lease (shards beat every third of theirs: a half leaves room
 * for a beat a little late), and every alive shard beats at least as often as the worker
 * must, so that frames a shard answered reach the master as a vouch before the worker's next
 * own beat would have been due. mu held. */
uint32_t members_rest_for(struct ts_members *m, const struct ts_member *e, int64_t now_ms)
{
    const struct roster *shards;

    if (!m->cfg.rest_ms || !e->vouched_ms || now_ms - e->vouched_ms > e->lease_ms / 2)
        return 0;
    shards = members_roster(m, TS_MEMBER_SHARD);
    if (!shards->alive || shards->max_lease_ms > e->lease_ms)
        return 0;
    return m->cfg.rest_ms > e->lease_ms / 3 ? m->cfg.rest_ms : e->lease_ms / 3;
}
