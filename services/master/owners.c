/* owners.c - who owns each slot of a job (docs/elastic.md, "Slots"): a rank's own slot, the
 * slots of dead and late workers handed to the live worker owning the fewest, and slots moved
 * by the workers' speed (the schedule itself is schedule.c's). jobs.c calls it on every
 * change of a seat; see jobs_internal.h. The seat questions go through the job's index
 * (seats.h), so a hand-out after a registration is O(1). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"
#include "schedule.h"
#include "util/log.h"

/* Slot k of jb goes to worker w (0: none); the owner it had joins its past. mu held. */
static void set_owner(struct job *jb, uint32_t k, uint32_t w)
{
    uint32_t *past = &jb->past[(size_t)k * JOBS_PAST_OWNERS];

    if (jb->owners[k] && jb->owners[k] != w) {
        memmove(past + 1, past, (JOBS_PAST_OWNERS - 1) * sizeof(*past));
        past[0] = jb->owners[k];
    }
    seat_index_move(&jb->idx, jb->owners[k], w);
    jb->owners[k] = w;
}

/* The alive seat of worker, or of rank (worker 0); NULL if none. mu held. */
struct job_seat *job_alive_seat(struct job *jb, uint32_t worker, uint32_t rank)
{
    int32_t k = worker ? seat_index_of(&jb->idx, worker) : seat_index_rank(&jb->idx, rank);

    if (k < 0 || (size_t)k >= jb->nseats || jb->seats[k].state != SEAT_ALIVE)
        return NULL;
    return &jb->seats[k];
}

/* Worker's seat in this job, alive or not; NULL if none (worker 0: none). mu held. */
static struct job_seat *seat_in(struct job *jb, uint32_t worker)
{
    int32_t k = seat_index_of(&jb->idx, worker);

    return k >= 0 && (size_t)k < jb->nseats ? &jb->seats[k] : NULL;
}

/* Alive and caught up: it may own slots (struct job_seat). */
static bool seat_ready(const struct job_seat *s)
{
    return s && s->state == SEAT_ALIVE && !s->waiting;
}

static bool seat_dead(struct job *jb, uint32_t worker)
{
    struct job_seat *s = seat_in(jb, worker);

    return s && s->state == SEAT_DEAD;
}

/* Whether a live seat that caught up holds slot k (mu held): a worker that comes for rank k
 * then waits until it caught up too (jobs_ready). */
bool job_held(struct job *jb, uint32_t k)
{
    return seat_ready(seat_in(jb, jb->owners[k]));
}

/* Whether unowned slot k goes to the live workers meanwhile, evenly (mu held): its rank is
 * one the run did not start with, and every rank it started with has come; or the start
 * deadline passed (jobs_start_deadline), and nobody waits for a rank that never came. */
static bool late(struct job *jb, uint32_t k)
{
    uint32_t start = jb->info.start_workers ? jb->info.start_workers : jb->info.workers;

    if (jb->overdue_ms)
        return true;
    if (k < start)   /* 0: a state file from before start_workers, every rank */
        return false;
    return seat_index_all_came(&jb->idx);
}

/* Whether any live seat caught up (mu held). Only when none did may a waiting one take slots:
 * nobody else is left to compute them. */
static bool any_ready(struct job *jb)
{
    for (size_t s = 0; s < jb->nseats; s++)
        if (seat_ready(&jb->seats[s]))
            return true;
    return false;
}

/* Spreads jb's slots over the live workers that caught up by their speed (schedule.h) when
 * that cuts the predicted step time by more than min_gain; whether any moved (the caller grows
 * the roster). mu held. */
bool job_rebalance(struct job *jb, double min_gain)
{
    struct sched_seat *v = malloc((jb->nseats + 1) * sizeof(*v));
    uint32_t *was = malloc((jb->info.workers + 1) * sizeof(*was));
    struct sched_move mv[8];
    size_t n = 0, moved;
    double before;

    if (!v || !was) {
        free(v);
        free(was);
        return false;
    }
    memcpy(was, jb->owners, jb->info.workers * sizeof(*was));
    for (size_t s = 0; s < jb->nseats; s++)
        if (seat_ready(&jb->seats[s]))
            v[n++] = (struct sched_seat){ jb->seats[s].worker, jb->seats[s].rank,
                                          jb->seats[s].slot_s };
    before = sched_makespan(jb->owners, jb->info.workers, v, n);
    moved = sched_balance(jb->owners, jb->info.workers, v, n, min_gain, mv, 8);
    for (size_t k = 0; k < moved && k < 8; k++)
        ts_log(TS_INFO, "master", "job %s: balance: slot %u moves from worker %u to worker %u",
               jb->info.id, mv[k].slot, mv[k].from, mv[k].to);
    if (moved)
        ts_log(TS_INFO, "master", "job %s: balance: %zu slot(s) moved; predicted step %.1f ms, "
               "was %.1f ms", jb->info.id, moved,
               1e3 * sched_makespan(jb->owners, jb->info.workers, v, n), 1e3 * before);
    jb->info.balanced += (uint32_t)moved;
    for (uint32_t k = 0; k < jb->info.workers; k++) {   /* the past of the slots that moved */
        uint32_t now = jb->owners[k];
        if (now != was[k]) {
            jb->owners[k] = was[k];
            set_owner(jb, k, now);
        }
    }
    free(v);
    free(was);
    return moved > 0;
}

/* Whether any live seat caught up, found once per hand-out and only if asked (*memo: -1 until
 * then). */
static bool caught_up(struct job *jb, int *memo)
{
    if (*memo < 0)
        *memo = any_ready(jb);
    return *memo > 0;
}

/* Slot k goes to its rank's own worker, once that caught up (or while nobody has); whether a
 * holder changed (a first owner changes nothing). mu held. */
static bool home_slot(struct job *jb, uint32_t k, int *memo)
{
    struct job_seat *home = job_alive_seat(jb, 0, k);
    bool changed = false;

    if (home && jb->owners[k] != home->worker && (!home->waiting || !caught_up(jb, memo))) {
        if (jb->owners[k]) {
            ts_log(TS_INFO, "master", "job %s: slot %u goes back to rank %u (worker %u)",
                   jb->info.id, k, k, home->worker);
            changed = true;
        }
        set_owner(jb, k, home->worker);
    }
    return changed;
}

/* An elastic job's slots whose worker died, and late ones (a rank that never came), go to the
 * live worker that owns the fewest (the lowest rank on a tie); whether any did. Sets
 * gone_left if one found nobody to take it. mu held. */
static bool adopt_gone(struct job *jb, int *memo)
{
    bool changed = false;

    jb->gone_left = false;
    for (uint32_t k = 0; k < jb->info.workers; k++) {
        struct job_seat *best = NULL;
        uint32_t least = UINT32_MAX;
        bool gone = jb->owners[k] ? seat_dead(jb, jb->owners[k]) : late(jb, k);
        if (!gone)
            continue;
        for (size_t s = 0; s < jb->nseats; s++) {
            uint32_t load;
            if (jb->seats[s].state != SEAT_ALIVE || (jb->seats[s].waiting && caught_up(jb, memo)))
                continue;
            load = seat_index_load(&jb->idx, jb->seats[s].worker);
            if (load < least || (load == least && jb->seats[s].rank < best->rank))
                best = &jb->seats[s], least = load;
        }
        if (!best) {
            jb->gone_left = true;
            break;   /* nobody left: the job is abandoned (settle) */
        }
        /* A late slot's first owner is a change too: that worker may have begun the step
         * without it, and the roster is what wakes it. */
        if (jb->owners[k]) {
            ts_log(TS_WARN, "master", "job %s: slot %u (worker %u died) goes to worker %u "
                   "(rank %u)", jb->info.id, k, jb->owners[k], best->worker, best->rank);
            jb->info.adopted++;
        } else if (k < (jb->info.start_workers ? jb->info.start_workers : jb->info.workers)) {
            ts_log(TS_WARN, "master", "job %s: rank %u never registered within %" PRId64 " ms: "
                   "slot %u goes to worker %u (rank %u)", jb->info.id, k, jb->overdue_ms, k,
                   best->worker, best->rank);
            jb->info.adopted++;
        } else {
            ts_log(TS_INFO, "master", "job %s: slot %u goes to worker %u (rank %u) until a "
                   "worker joins for rank %u", jb->info.id, k, best->worker, best->rank, k);
        }
        set_owner(jb, k, best->worker);
        changed = true;
    }
    return changed;
}

/* Ends a hand-out: a balanced job's slots just placed evenly go by speed (one change of the
 * roster), and the roster grows if a slot changed hands. */
static void handed(struct job *jb, bool changed)
{
    if (jb->info.elastic && jb->info.balance && job_rebalance(jb, 0.0))
        changed = true;
    if (changed)
        jb->info.roster++;
}

/* Hands out jb's slots (jobs.h, docs/elastic.md): every rank's own slot first, then the
 * slots of the dead and the late; the roster grows when a slot changes hands. O(workers)
 * with the index, plus the seats for each slot handed on. mu held. */
void job_reslot(struct job *jb)
{
    int memo = -1;
    bool changed = false;

    if (jb->info.state != JOB_RUNNING)
        return;
    for (uint32_t k = 0; k < jb->info.workers; k++)
        changed |= home_slot(jb, k, &memo);
    if (jb->info.elastic)
        changed |= adopt_gone(jb, &memo);
    handed(jb, changed);
}

/* reslot after a new seat of rank (its registration), in O(1) unless it must do more: only
 * that rank's own slot can change hands then, but for the late slots once the last starting
 * rank came (all_came), and those a hand-out found nobody for (gone_left). mu held. */
void job_reslot_rank(struct job *jb, uint32_t rank, bool all_came)
{
    int memo = -1;
    bool changed;

    if (jb->info.state != JOB_RUNNING)
        return;
    changed = home_slot(jb, rank, &memo);
    if (jb->info.elastic && (all_came || jb->gone_left))
        changed |= adopt_gone(jb, &memo);
    handed(jb, changed);
}
