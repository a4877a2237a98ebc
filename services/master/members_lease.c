/* members_lease.c - members declared dead when their lease runs out, in time order; a master
 * that did not run, or that hears no member at all, declares nobody dead for it. See
 * members.h (ts_members_expire) and leaseq.h.
 *
 * The reaper runs twenty times a lease (main.c). It used to scan every member each time:
 * about 19 MB of member records at 10,000 workers (docs/scaling.md). Now it pops only the
 * queue's entries that came due, checks each against its member (a heartbeat moved the
 * deadline on: put back at the new one), and counts the alive members and their shortest
 * lease for the deaf check only after one of them changed. */
#include <inttypes.h>
#include <stdio.h>

#include "members_internal.h"
#include "util/log.h"

/* A worker never heard since it registered gets the default lease at most: a registration
 * with a long lease and no heartbeat would hold its job's slot so long. */
static bool first_lease(const struct ts_members *m, const struct ts_member *e)
{
    return e->kind == TS_MEMBER_WORKER && !e->heard && e->lease_ms > m->cfg.default_lease_ms;
}

/* The first time e may be declared dead: silent past its lease, and out of any grace. */
static int64_t lease_due(const struct ts_members *m, const struct ts_member *e)
{
    uint32_t lease = first_lease(m, e) ? m->cfg.default_lease_ms : e->lease_ms;
    int64_t due = e->last_heartbeat_ms + (int64_t)lease + 1;

    return e->grace_until_ms > due ? e->grace_until_ms : due;
}

/* Queues e's lease unless an entry at or before its due is queued already. */
static void queue(struct ts_members *m, struct ts_member *e)
{
    int64_t due = lease_due(m, e);

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
    m->roster_stale = true;
    if (s == TS_MEMBER_ALIVE)
        queue(m, e);
}

void members_lease_queue_all(struct ts_members *m)
{
    struct table *tables[2] = { &m->shards, &m->workers };

    m->lease_rescan = false;
    m->roster_stale = true;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < tables[k]->n; i++)
            if (tables[k]->v[i].state == TS_MEMBER_ALIVE)
                queue(m, &tables[k]->v[i]);
}

/* Declares dead the members whose lease ran out by now_ms; returns how many. mu held. */
static int expire_due(struct ts_members *m, int64_t now_ms,
                      void (*dead)(void *ctx, uint32_t worker), void *ctx)
{
    struct leaseq_entry x;
    char why[160];
    int n = 0;

    while (leaseq_pop_due(&m->leases, now_ms, &x)) {
        struct ts_member *e = members_find_id(members_table_of(m, x.kind), x.id);
        if (!e)
            continue;                  /* forgotten since */
        if (e->lease_due_ms == x.due_ms)
            e->lease_due_ms = 0;       /* its earliest entry: gone now */
        if (e->state != TS_MEMBER_ALIVE)
            continue;
        if (now_ms < lease_due(m, e)) {
            queue(m, e);               /* heard since, or in grace */
            continue;
        }
        n++;
        m->expired[e->kind == TS_MEMBER_WORKER]++;
        if (first_lease(m, e))
            snprintf(why, sizeof(why), "no heartbeat within %u ms of registering (the default "
                     "lease; it asked for %u ms)", m->cfg.default_lease_ms, e->lease_ms);
        else
            snprintf(why, sizeof(why), "silent for %" PRId64 " ms, past its %u ms lease",
                     now_ms - e->last_heartbeat_ms, e->lease_ms);
        members_declare_dead(m, e, why);
        if (e->kind == TS_MEMBER_WORKER && dead)
            dead(ctx, e->id);
    }
    return n;
}

/* Every alive member's silence up to now is the master's own, not theirs: each gets a lease
 * from now before it can be declared dead; returns how many. mu held. */
static size_t pardon(struct ts_members *m, int64_t now_ms)
{
    struct table *tables[2] = { &m->shards, &m->workers };
    size_t alive = 0;

    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < tables[k]->n; i++) {
            struct ts_member *e = &tables[k]->v[i];
            if (e->state != TS_MEMBER_ALIVE)
                continue;
            e->grace_until_ms = now_ms + e->lease_ms;
            alive++;
        }
    return alive;
}

/* cfg.deaf_max_ms: whether the master hears no member now, which it takes for a cut of its
 * own network, not for the death of them all: two alive members or more, none heard for
 * longer than half the shortest lease among them (each beats every third of its lease, so
 * with two alive someone is heard that often), and not for longer than cfg.deaf_max_ms. The
 * members' beats are spread over a third of a lease, so the master must suspect itself
 * before the first of them runs out, not once the last has. Says so once when it begins,
 * and when it ends, pardoning every alive member. mu held. */
static bool deaf(struct ts_members *m, int64_t now_ms)
{
    int64_t lease, silent = now_ms - m->last_heard_ms;
    size_t alive;

    if (m->roster_stale) {
        struct table *tables[2] = { &m->shards, &m->workers };
        m->alive_n = 0;
        m->alive_min_lease_ms = UINT32_MAX;
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < tables[k]->n; i++)
                if (tables[k]->v[i].state == TS_MEMBER_ALIVE) {
                    m->alive_n++;
                    if (tables[k]->v[i].lease_ms < m->alive_min_lease_ms)
                        m->alive_min_lease_ms = tables[k]->v[i].lease_ms;
                }
        m->roster_stale = false;
    }
    alive = m->alive_n;
    lease = m->alive_min_lease_ms;
    if (m->cfg.deaf_max_ms > 0 && alive >= 2 && silent > lease / 2 &&
        silent <= m->cfg.deaf_max_ms) {
        if (!m->deaf)
            ts_log(TS_WARN, "master", "no member heard for %" PRId64 " ms, all %zu alive ones "
                   "at once: taking it for a cut of the master's own network, not %zu deaths; "
                   "no member is declared dead until one is heard again (or %" PRId64 " ms "
                   "pass)", silent, alive, alive, m->cfg.deaf_max_ms);
        m->deaf = true;
        m->deaf_since_ms = m->last_heard_ms;
        return true;
    }
    if (m->deaf && silent <= lease / 2) {
        alive = pardon(m, now_ms);   /* not in ts_log's arguments: a level may skip them */
        ts_log(TS_WARN, "master", "a member is heard again after %" PRId64 " ms: every alive "
               "one (%zu) gets a lease of grace", now_ms - m->deaf_since_ms, alive);
        m->deaf = false;
        return true;   /* this round's verdicts would be on the deaf time */
    }
    if (m->deaf)
        ts_log(TS_WARN, "master", "no member heard for %" PRId64 " ms, past %" PRId64 " ms: "
               "leases decide again", silent, m->cfg.deaf_max_ms);
    m->deaf = false;
    return false;
}

int ts_members_expire(struct ts_members *m, int64_t now_ms,
                      void (*dead)(void *ctx, uint32_t worker), void *ctx)
{
    int n;
    int64_t gap;

    pthread_mutex_lock(&m->mu);
    gap = m->last_expire_ms ? now_ms - m->last_expire_ms : 0;
    m->last_expire_ms = now_ms;
    if (m->cfg.pause_ms > 0 && gap > m->cfg.pause_ms) {
        size_t alive = pardon(m, now_ms);
        ts_log(TS_WARN, "master", "the master did not run for %" PRId64 " ms (paused, or its "
               "host froze): its %zu alive members get a lease of grace, not a verdict on "
               "silence it could not hear", gap, alive);
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    if (deaf(m, now_ms)) {
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    if (m->lease_rescan)
        members_lease_queue_all(m);
    n = expire_due(m, now_ms, dead, ctx);
    if (n)
        members_prune(&m->workers);
    pthread_mutex_unlock(&m->mu);
    return n;
}

