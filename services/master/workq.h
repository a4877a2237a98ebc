/* workq.h - dynamic assignment (docs/scheduler.md, "Dynamic assignment"): the master's queue of
 * a job's data, which the workers of an ASP job take as they become free (ClaimWork).
 *
 * Why: with a fixed share of the data per worker, an epoch ends when the slowest worker has
 * done its share, and asynchrony buys nothing. Handing the data out from one queue lets a
 * fast worker compute more of it, and the epoch ends when its data is done.
 *
 * A job's data is `units` units: unit u is the micro-batches the static schedule gives rank
 * u % W at global step u / W (W = the job's workers). The queue hands them out in order, in
 * grants: a grant gives rank r the units [first, first + count) as its push steps [clock,
 * clock + count) (the rank's own clock, which the shards count). A rank holds at most one
 * grant. Its next claim names its clock: the rank pushed every step below it, so the grant's
 * units below it are done; a clock inside the grant (a restarted worker) gets the rest of the
 * same grant. So a unit is one rank's one push: never handed out twice, and never done twice
 * while its worker lives or comes back. A rank whose worker died and did not come back keeps
 * its grant (its units may be half pushed, which cannot be undone in ASP): they count as
 * lost, not outstanding, so the others are not kept waiting for them.
 *
 * Durable: with a state directory every grant is written (file "work", replaced atomically,
 * state.h) before the reply that carries it, so a master killed at any instruction hands out
 * no unit twice after its restart.
 * Ownership: workq_create returns a queue table freed with workq_free.
 * Threads: every function may be called from any thread (one mutex; a claim writes the file
 * under it). */
#ifndef TS_MASTER_WORKQ_H
#define TS_MASTER_WORKQ_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"
#include "util/err.h"
#include "util/names.h"

#define WORKQ_MAX_WANT 256
#define WORKQ_MAX_UNITS (1ULL << 40)
#define WORKQ_MAX_QUEUES 256
#define WORKQ_SSP_WAIT_MS 200     /* ssp: how long a claim waits for older units to be done */

/* The caller's seat, from the job table: its job's run (JobInfo.started_unix_ms: another run
 * of the same job id starts a fresh queue), its rank and worker count, and which ranks have a
 * live worker (workers entries, borrowed for the call). */
struct workq_seat {
    const char *job;
    int64_t run_ms;
    uint32_t rank, workers;
    const bool *alive;
};

struct workq_grant {
    uint64_t first, clock;
    uint32_t count;                /* 0: nothing left to hand out, or retry */
    uint64_t units, done, outstanding, lost;
    bool retry;                    /* ssp: older units are not done; pull, then claim again */
    bool pull;                     /* ssp: granted once older units were done: pull first */
};

/* SSP over the queue (docs/scheduler.md, "SSP"): a queue made with ssp lets a rank start a
 * unit of step t (unit u is step u / W) only once every unit of the steps before t -
 * staleness is in the values it computes with: done at its previous claim (it pulled after
 * that claim), or done now and then pulled (the grant says pull). A claim whose unit is not
 * ready waits up to WORKQ_SSP_WAIT_MS for the other ranks, under the queue's lock released,
 * then gets the unit with pull, or retry (count 0; the unit stays the rank's, its place in
 * the queue: it pulls and claims again at the same clock). Units done are what the ranks'
 * later claims settled, and the lost units of dead ranks. It grants one unit at a time, so
 * that a unit is known done as soon as its rank claims the next one (a slow rank holding
 * several would hold the others back until it had done them all). A claim may so block: the
 * RPC runs on a thread of its own. */
struct workq_ssp {
    bool on;
    uint32_t staleness;
};

struct workq;

/* Reads the queues a state directory holds (s without a dir: nothing is durable). TS_ECORRUPT
 * for a file that does not parse; TS_ENOMEM. */
ts_status workq_create(struct master_state *s, struct workq **out,
                       struct ts_err *err) TS_MUST_CHECK;
void workq_free(struct workq *q);

/* A claim of up to want units (0: only the counts) by seat at its clock, for a job of units
 * units, with ssp as the queue's (the first claim of a run decides). TS_EINVAL naming `want`
 * or `units` out of range, units not a multiple of the workers, or `staleness` above
 * 1000000; TS_ESTATE naming `units` or `ssp` when the queue was made for another count or
 * setting, or `clock` when it is below the rank's grant (a clock never goes back);
 * TS_EUNAVAIL when the grant could not be made durable (nothing changed: retry). */
ts_status workq_claim(struct workq *q, const struct workq_seat *seat, uint64_t clock,
                      uint32_t want, uint64_t units, struct workq_ssp ssp,
                      struct workq_grant *g, struct ts_err *err) TS_MUST_CHECK;

/* The counts of job's queue for run run_ms, for status (alive as in workq_seat, or NULL: all
 * alive); false if it has none. */
bool workq_counts(struct workq *q, const char *job, int64_t run_ms, const bool *alive,
                  struct workq_grant *g);

#endif
