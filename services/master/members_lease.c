/* members_lease.c - members declared dead when their lease runs out, in time order; a master
 * that did not run, or that hears no member at all, declares nobody dead for it; a shard that
 * keeps a redo log held away for the restart grace first, there and when it is reported gone
 * (ts_members_shard_gone; ts_members_declare_dead for the other reports); workers' leases
 * renewed by the shards that serve them. See members.h (ts_members_expire,
 * ts_members_vouched) and leaseq.h; the queue's entries are made in members_table.c.
 *
 * The reaper runs twenty times a lease (main.c). It used to scan every member each time:
 * about 19 MB of member records at 10,000 workers (docs/scaling.md). Now it pops only the
 * queue's entries that came due, checks each against its member (a heartbeat moved the
 * deadline on: put back at the new one), and counts the alive members and their shortest
 * lease for the deaf check only after one of them changed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "members_internal.h"
#include "util/log.h"

/* ---- the restart grace: a shard that keeps a redo log, found gone, is held away ---- */

/* Whether the restart grace may hold e's place: a shard on the ring (a joining one heads
 * nothing, so its death sends no job back) that keeps a redo log, with the grace on and one
 * replica (a chain's next shard takes over at once, which is better than waiting). */
static bool grace_holds(const struct ts_members *m, const struct ts_member *e)
{
    return e->kind == TS_MEMBER_SHARD && e->redo_log && !e->joining &&
           m->cfg.shard_grace_ms > 0 && m->cfg.replicas <= 1;
}

bool members_hold_place(struct ts_members *m, struct ts_member *e, int64_t now_ms,
                        const char *why)
{
    if (!grace_holds(m, e))
        return false;
    if (e->away_ms)   /* away already: the grace runs from the first time, not again */
        return now_ms - e->away_ms <= (int64_t)m->cfg.shard_grace_ms;
    e->away_ms = now_ms ? now_ms : 1;   /* 0 means not away */
    m->shard_aways++;
    ts_log(TS_WARN, "master", "shard %u (%s): %s: away; its place on the ring is kept for %u "
           "ms for a process restarted on its redo log", e->id, e->addr, why,
           m->cfg.shard_grace_ms);
    members_lease_queue(m, e);   /* due again when the grace ends */
    return true;
}

bool ts_members_declare_dead(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                             const char *instance, const char *why)
{
    struct ts_member *e;
    bool done = false;

    pthread_mutex_lock(&m->mu);
    if ((e = members_find_id(members_table_of(m, kind), id)) && e->state == TS_MEMBER_ALIVE &&
        (!instance || !strcmp(e->instance, instance))) {
        members_declare_dead(m, e, why);
        done = true;
    }
    pthread_mutex_unlock(&m->mu);
    return done;
}

enum ts_members_gone ts_members_shard_gone(struct ts_members *m, uint32_t id,
                                           const char *instance, const char *why,
                                           int64_t now_ms, int64_t *left_ms)
{
    enum ts_members_gone r = TS_GONE_NOT;
    struct ts_member *e;
    char past[TS_MEMBERS_MAX_REASON + 120];

    pthread_mutex_lock(&m->mu);
    if ((e = members_find_id(&m->shards, id)) && e->state == TS_MEMBER_ALIVE &&
        (!instance || !strcmp(e->instance, instance))) {
        if (members_hold_place(m, e, now_ms, why)) {
            r = TS_GONE_AWAY;
            if (left_ms)
                *left_ms = e->away_ms + (int64_t)m->cfg.shard_grace_ms - now_ms;
        } else {
            if (e->away_ms) {   /* first, so that the death kept for status holds it */
                snprintf(past, sizeof(past), "away for %" PRId64 " ms, past the restart grace "
                         "of %u ms, and %.*s", now_ms - e->away_ms, m->cfg.shard_grace_ms,
                         TS_MEMBERS_MAX_REASON, why);
                why = past;
            }
            members_declare_dead(m, e, why);
            r = TS_GONE_DEAD;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* Declares dead the members whose lease ran out by now_ms, but for shards whose place the
 * restart grace holds (marked away instead, and declared dead once it passed); returns how
 * many were declared dead. mu held. */
static int expire_due(struct ts_members *m, int64_t now_ms,
                      void (*dead)(void *ctx, uint32_t worker), void *ctx)
{
    struct leaseq_entry x;
    char why[240];
    int n = 0;

    while (leaseq_pop_due(&m->leases, now_ms, &x)) {
        struct ts_member *e = members_find_id(members_table_of(m, x.kind), x.id);
        if (!e)
            continue;                  /* forgotten since */
        if (e->lease_due_ms == x.due_ms)
            e->lease_due_ms = 0;       /* its earliest entry: gone now */
        if (e->state != TS_MEMBER_ALIVE)
            continue;
        if (now_ms < members_lease_due(m, e)) {
            members_lease_queue(m, e);               /* heard since, or in grace */
            continue;
        }
        if (e->away_ms)
            snprintf(why, sizeof(why), "silent for %" PRId64 " ms and away for %" PRId64 " ms, "
                     "past the restart grace of %u ms: no process came back on its redo log",
                     now_ms - e->last_heartbeat_ms, now_ms - e->away_ms,
                     m->cfg.shard_grace_ms);
        else if (members_first_lease(m, e))
            snprintf(why, sizeof(why), "no heartbeat within %u ms of registering (the default "
                     "lease; it asked for %u ms)", m->cfg.default_lease_ms, e->lease_ms);
        else
            snprintf(why, sizeof(why), "silent for %" PRId64 " ms, past its %u ms lease",
                     now_ms - e->last_heartbeat_ms, e->lease_ms);
        if (!e->away_ms && members_hold_place(m, e, now_ms, why))
            continue;
        n++;
        m->expired[e->kind == TS_MEMBER_WORKER]++;
        members_declare_dead(m, e, why);
        if (e->kind == TS_MEMBER_WORKER && dead)
            dead(ctx, e->id);
    }
    return n;
}

/* ---- workers vouched for by the shards (docs/scaling.md) ---- */

size_t ts_members_vouched(struct ts_members *m, const uint32_t *ids, const uint64_t *steps,
                          size_t n, int64_t now_ms)
{
    size_t renewed = 0;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        struct ts_member *e = members_find_id(&m->workers, ids[i]);
        if (!e || e->state != TS_MEMBER_ALIVE)
            continue;
        if (now_ms > e->last_heartbeat_ms)
            e->last_heartbeat_ms = now_ms;
        e->vouched_ms = now_ms;
        if (steps && steps[i] > e->clock)
            e->clock = steps[i];
        e->heard = true;   /* its frames came: no registration without a process behind it */
        renewed++;
    }
    m->worker_vouches += renewed;
    pthread_mutex_unlock(&m->mu);
    return renewed;
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
    const struct roster *shards = members_roster(m, TS_MEMBER_SHARD),
                        *workers = members_roster(m, TS_MEMBER_WORKER);
    int64_t silent = now_ms - m->last_heard_ms;
    /* (a kind with none alive has UINT32_MAX) */
    int64_t lease = shards->min_lease_ms < workers->min_lease_ms ? shards->min_lease_ms
                                                                 : workers->min_lease_ms;
    size_t alive = shards->alive + workers->alive;

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

