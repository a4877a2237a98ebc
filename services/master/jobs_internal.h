/* jobs_internal.h - what jobs.c (the job table), owners.c (who owns each slot of a job) and
 * jobs_records.c (the table's records: export, and restore after a restart) share: a job's
 * record, the table, the look-ups jobs.c keeps for the others and the slot rules jobs.c
 * calls. Not for the rest of the master: jobs.h is its interface. Every function here runs
 * with the table's mutex held.
 * Ownership: the table owns each job's seats, owners, past and index (freed by jobs_free);
 * the pointers these functions return are borrowed, valid while the mutex is held. */
#ifndef TS_MASTER_JOBS_INTERNAL_H
#define TS_MASTER_JOBS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "jobs.h"
#include "seats.h"

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
     * (reslot gives out the slots of ranks that never came), 0 before. */
    int64_t begun_ms, overdue_ms;
    /* The seats indexed (seats.h): by worker, by rank, the ranks that came, each worker's
     * slots; and whether a hand-out of dead or late slots found nobody to take some
     * (reslot_rank must then hand them out when a worker comes). */
    struct seat_index idx;
    bool gone_left;
};

struct jobs {
    pthread_mutex_t mu;
    struct jobs_cfg cfg;
    struct job *v;
    size_t n, cap;
};

/* The job named id, resident or a summary; NULL if none (jobs.c). */
struct job *job_find(struct jobs *j, const char *id);
/* The job (*jb) and seat of a worker, alive or not; NULL if it is in no job (jobs.c). */
struct job_seat *job_worker_seat(struct jobs *j, uint32_t worker, struct job **jb);
/* Room for workers' slot owners and their past, all none (jobs.c); on TS_ENOMEM, what was
 * grown is kept in jb, for the caller to free. */
ts_status job_owners_alloc(struct job *jb, uint32_t workers, struct ts_err *err);

/* The alive seat of worker, or of rank (worker 0); NULL if none. */
struct job_seat *job_alive_seat(struct job *jb, uint32_t worker, uint32_t rank);
/* Whether a live seat that caught up holds slot k: a worker that comes for rank k then waits
 * until it caught up too (jobs_ready). */
bool job_held(struct job *jb, uint32_t k);
/* Spreads jb's slots over the live workers that caught up by their speed when that cuts the
 * predicted step time by more than min_gain; whether any moved (the caller grows the
 * roster). */
bool job_rebalance(struct job *jb, double min_gain);
/* Hands out jb's slots (docs/elastic.md): every rank's own slot first, then the slots of the
 * dead and the late; the roster grows when a slot changes hands. */
void job_reslot(struct job *jb);
/* job_reslot after a new seat of rank (its registration), in O(1) unless it must do more;
 * all_came: the last starting rank just came. */
void job_reslot_rank(struct job *jb, uint32_t rank, bool all_came);

#endif
