/* jobs_internal.h - the master's job table as jobs.c and jobs_balance.c share it; the rest of
 * the master uses jobs.h. */
#ifndef TS_MASTER_JOBS_INTERNAL_H
#define TS_MASTER_JOBS_INTERNAL_H

#include <pthread.h>

#include "jobs.h"

struct job {
    struct job_info info;
    struct job_seat *seats;
    size_t nseats, cap;
    uint32_t *owners;                   /* by slot (info.workers): its worker, 0 none */
    /* By slot, JOBS_PAST_OWNERS each: the workers that owned it before, newest first, 0 none
     * (this run; not kept across a master restart). A shard takes a slot's push from its
     * owner or one of these: a step a slot changed hands in may carry either's (JobAccess). */
    uint32_t *past;
    bool failed, died;                  /* this run: a worker failed, a worker died */
    bool fp_rank0;                      /* info.fingerprint is rank 0's own (this run) */
    int64_t idle_since_ms, ended_ms;    /* monotonic */
    int64_t held_ms;                    /* a shard last said it holds the job (jobs_note_held) */
    int64_t balanced_ms;                /* the last time slots moved for speed */
    /* The start deadline (jobs_start_deadline): it counts from begun_ms (monotonic: the run's
     * first registration, or the master's restart); overdue_ms is the deadline once it passed
     * (jobs_reslot_locked gives out the slots of ranks that never came), 0 before. */
    int64_t begun_ms, overdue_ms;
};

struct jobs {
    pthread_mutex_t mu;
    struct jobs_cfg cfg;
    struct job *v;
    size_t n, cap;
};

/* Slot k of jb goes to worker w (0: none); the owner it had joins its past. mu held. */
void jobs_owner_set(struct job *jb, uint32_t k, uint32_t w);
/* Hands out jb's slots (jobs.h, docs/elastic.md); the roster grows when a slot changes hands.
 * mu held. */
void jobs_reslot_locked(struct job *jb);

/* The job and seat of a worker, alive or not; NULL if it is in no job. mu held. */
struct job_seat *jobs_seat_locked(struct jobs *j, uint32_t worker, struct job **jb);
/* Alive and caught up: it may own slots (struct job_seat). */
bool jobs_seat_ready(const struct job_seat *s);
/* jobs_balance.c: spreads the slots over the live workers that caught up by their speed
 * (schedule.h) when that cuts the predicted step time by more than min_gain; whether any
 * moved (the caller grows the roster). mu held. */
bool jobs_rebalance_locked(struct job *jb, double min_gain);

#endif
