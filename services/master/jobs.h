/* jobs.h - the master's job table: which jobs run, how each ended, what is left to release.
 *
 * Why: a cluster lives for months and serves thousands of jobs, so every job must end and
 * give back what it holds. A job exists from its first worker's RegisterWorker (which names
 * the job, the rank and the job's worker count) and ends when no worker of it is alive:
 *   FAILED     a worker left saying it failed (Deregister, outcome FAILED);
 *   ABANDONED  otherwise, a worker died (its lease expired), unless it was the last and the
 *              training was over: in an elastic job (bsp) a worker that finished pulled the last
 *              step, so the others had nothing left to give and the job ends as IDLE or FINISHED;
 *   IDLE       otherwise, if the job asked to be kept (RegisterWorker.keep): the shards keep its
 *              parameters for a later run of the same job or a snapshot, for idle_ms at most,
 *              then it is FINISHED (sooner if no shard holds any of it: jobs_reclaim_unheld);
 *   FINISHED   every worker left saying it finished.
 * An ended job is released: the master's releaser calls Shard.ReleaseJob on every alive shard
 * (a shard refuses while a connection or an armed snapshot holds the job, and the releaser
 * retries) and drops the job's data map. Released jobs are kept as a summary (state, workers,
 * final fingerprint, times) for history_ms, at most history_max of them.
 * A worker of a job that ended but is not released yet is refused with TS_EUNAVAIL (retry);
 * a new job beyond max_jobs (jobs holding shard memory: running, idle or not yet released) is
 * TS_ENOMEM saying how to free room, and so is a new run by a caller identity (its owner,
 * ts_rpc_caller) that holds per_owner jobs already: one identity cannot take every
 * slot from the others (issue 41).
 * Like members.c, every operation takes now_ms from the caller, so tests control the clock.
 * Ownership: jobs_create returns a table freed with jobs_free; jobs_list returns a copy.
 * Threads: all functions are safe to call concurrently (one mutex). */
#ifndef TS_MASTER_JOBS_H
#define TS_MASTER_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/names.h"

#define JOBS_MAX 256                    /* the ceiling of --max-jobs (a shard holds as many) */
#define JOBS_DEFAULT_MAX 64
#define JOBS_DEFAULT_HISTORY 256
#define JOBS_DEFAULT_HISTORY_MS (24 * 3600 * 1000)
#define JOBS_DEFAULT_IDLE_MS (3600 * 1000)
/* Workers per job on the master: what it keeps of a worker is its member record (members.h)
 * and its seat here (about 60 bytes with the slot tables and seats.h's index). A training
 * job's ranks are also bounded by the shards' data plane, TS_JOB_MAX_WORKERS (lib/ps/part.h). */
#define JOBS_MAX_WORKERS 65536
#define JOBS_PAST_OWNERS 3              /* earlier owners of a slot kept (jobs_access) */
#define JOBS_OWNER_MAX 128              /* an owner's identity (TS_RPC_IDENTITY_MAX) */
/* --jobs-per-identity's default: half the most --max-jobs allows, so it never binds under the
 * default --max-jobs (one certificate or one host often runs every job of a cluster); set it
 * below --max-jobs where several identities share one. */
#define JOBS_DEFAULT_PER_OWNER (JOBS_MAX / 2)

enum job_state {
    JOB_RUNNING = 1, JOB_IDLE = 2, JOB_FINISHED = 3, JOB_FAILED = 4, JOB_ABANDONED = 5,
};

struct jobs_cfg {
    uint32_t max_jobs;                  /* 0: JOBS_DEFAULT_MAX; at most JOBS_MAX */
    uint32_t history_max;               /* 0: JOBS_DEFAULT_HISTORY */
    int64_t history_ms;                 /* 0: JOBS_DEFAULT_HISTORY_MS */
    int64_t idle_ms;                    /* 0: JOBS_DEFAULT_IDLE_MS */
    uint32_t per_owner;                 /* 0: JOBS_DEFAULT_PER_OWNER; at most JOBS_MAX */
    int64_t start_deadline_ms;          /* jobs_start_deadline; 0: none */
};

/* A job as ClusterStatus reports it. */
struct job_info {
    char id[TS_JOB_ID_MAX + 1];
    enum job_state state;
    uint32_t workers, alive, finished;
    bool keep, released;
    int64_t started_unix_ms, ended_unix_ms;
    char fingerprint[65];
    char reason[257];
    char owner[JOBS_OWNER_MAX + 1];     /* who started the run ("": nobody counted) */
    /* Rollback (docs/replication.md): done so far, the last one's step, one running now, the
     * job lost state it cannot get back (no snapshot), and what happened. */
    uint32_t rollbacks;
    uint64_t rollback_step;
    bool rolling_back, lost;
    char rollback_note[257];
    /* Elastic jobs (docs/elastic.md): the job hands a dead worker's slot to a live worker;
     * roster grows at every change of a slot's owner; adopted counts the slots handed on
     * after a death. */
    bool elastic;
    uint64_t roster;
    uint32_t adopted;
    uint32_t start_workers;   /* the ranks the run started with; the others join later */
    /* Balance (docs/scheduler.md): slots move between live workers by their measured speed;
     * balanced counts the slots moved so. */
    bool balance;
    uint32_t balanced;
};

/* A job's durable record (services/master/state.h): what ClusterStatus shows, and each of its
 * workers' seat (state: alive, finished, failed, dead); failed and died: this run saw a worker
 * fail or die. */
enum job_seat_state { SEAT_ALIVE, SEAT_FINISHED, SEAT_FAILED, SEAT_DEAD };
/* waiting: alive, but it came for a rank whose slot a live worker holds, and it has not yet
 * caught up (jobs_ready): it owns no slot and adopts none meanwhile (docs/elastic.md). */
struct job_seat {
    uint32_t worker, rank;
    enum job_seat_state state;
    bool waiting;
    double slot_s;            /* its measured compute seconds per slot (jobs_speed); 0: none */
};
struct job_record {
    struct job_info info;
    struct job_seat *seats;
    size_t nseats;
    uint32_t *owners;                   /* by slot: its worker, 0 none; info.workers of them */
    size_t nowners;
    bool failed, died;
};

struct jobs;

ts_status jobs_create(const struct jobs_cfg *cfg, struct jobs **out,
                      struct ts_err *err) TS_MUST_CHECK;
void jobs_free(struct jobs *j);

/* Worker `worker` (a member id) joins job id as rank of workers. Idempotent for the same
 * worker. Errors name the field: job, rank, workers (another count than the job's), elastic
 * (other than the running job's). owner (NULL or "": none, never counted) is the caller's
 * identity: a registration that starts a run (a new job, or one idle or released) records
 * it, and is TS_ENOMEM naming --jobs-per-identity when that owner holds cfg.per_owner other
 * jobs already. A rank whose worker died may be taken by a new worker: it
 * waits (struct job_seat) while a live worker holds its slot, and gets the slot back at
 * jobs_ready (docs/elastic.md). start (elastic; 0: workers): the ranks the run starts with,
 * set by the registration that starts it; the slots of the others go to them until a worker
 * joins for that rank (field start_workers). A registration that can only join a run never
 * starts one (TS_ESTATE: the job is not running): rejoin (a worker a supervisor restarted,
 * RegisterWorkerRequest.restarts), or a rank at or above start. */
ts_status jobs_join(struct jobs *j, const char *id, uint32_t worker, uint32_t rank,
                    uint32_t workers, uint32_t start, bool keep, bool elastic, bool rejoin,
                    const char *owner, int64_t now_ms, struct ts_err *err) TS_MUST_CHECK;
/* Worker `worker` left: failed or finished, with its fingerprint (64 hex digits, or "") or its
 * reason. The job's fingerprint is rank 0's; another rank's only while no rank 0 finished,
 * or one finished without a fingerprint. A worker of no job is ignored. */
void jobs_leave(struct jobs *j, uint32_t worker, bool failed, const char *fingerprint,
                const char *reason, int64_t now_ms);
/* Worker `worker` caught up (it holds a step's values that every partition agreed on): a
 * waiting seat gets its rank's slot back. Idempotent; a worker of no job is ignored. */
void jobs_ready(struct jobs *j, uint32_t worker);
/* Worker `worker` died (its lease expired, or a shard saw its connection hang up). In an
 * elastic job with a worker left its slots go to the live workers; otherwise the job is
 * abandoned once no worker is left, unless it is elastic and a worker of the run finished
 * (the training was over: it ends as if the dead worker had finished too). */
void jobs_dead(struct jobs *j, uint32_t worker, int64_t now_ms);
/* The start deadline (docs/elastic.md, "A rank that never came"): in each running elastic
 * job whose run began cfg.start_deadline_ms ago or more (its first registration, or the
 * master's restart), the slot of a rank that never registered goes to
 * the live workers as a dead worker's does, counted in adopted: a process that died before it
 * registered would otherwise leave a slot nobody computes. A worker that registers for such a
 * rank later waits and takes its slot back as a restarted one does. Called periodically. */
void jobs_start_deadline(struct jobs *j, int64_t now_ms);

/* Slots (docs/elastic.md). A job of W workers has W slots, slot k being the share of every
 * step that the schedule gives rank k. Slot k belongs to rank k's worker while it is alive;
 * in an elastic job a dead worker's slot goes to the live worker owning the fewest (the
 * lowest rank on a tie) and back to rank k when a new worker takes that rank and has caught
 * up (jobs_ready): a new owner must hold the values of the step under way, which a process
 * that just started does not (docs/elastic.md, "Coming back"). */
/* The slots worker owns (ascending, at most max into slots) and its job's roster: returns
 * how many it owns (more than max: call again with room for them), or -1 if the worker is in
 * no running job. */
int jobs_slots(struct jobs *j, uint32_t worker, uint64_t *roster, uint32_t *slots, size_t max);
/* Running elastic jobs with a roster above 0: ids and rosters (at most max); how many. */
size_t jobs_rosters(struct jobs *j, char (*ids)[TS_JOB_ID_MAX + 1], uint64_t *rosters,
                    size_t max);
/* Job id's slot owners (at most max, by slot); how many (0 if no such job). */
/* Balance (docs/scheduler.md). jobs_balance: the run of worker's job moves slots between
 * its live workers by their speed (RegisterWorkerRequest.balance; elastic jobs only).
 * jobs_speed: worker measured slot_s seconds per slot over steps of `slots` slots. Refused
 * with TS_EINVAL naming the field (nothing changes) for a slot_s not above 0 or above 3600 or
 * a count outside 1..the job's slots; else kept, and in a job with balance the slots are
 * spread again when that cuts the predicted step time by more than JOBS_BALANCE_GAIN, at most
 * every JOBS_BALANCE_MS. A worker in no running job: ignored. */
#define JOBS_BALANCE_GAIN 0.1
#define JOBS_BALANCE_MS 1000
void jobs_balance(struct jobs *j, uint32_t worker);
ts_status jobs_speed(struct jobs *j, uint32_t worker, double slot_s, int64_t slots,
                     int64_t now_ms, struct ts_err *err);

size_t jobs_owners(struct jobs *j, const char *id, uint32_t *owners, size_t max);
/* Job id's slots (its workers count), 0 for a job not in the table. */
uint32_t jobs_width(struct jobs *j, const char *id);
/* What a shard binds job id's data-plane connections with (JobAccess): its slot owners as
 * jobs_owners (*n of them, at most max), each slot's past owners (JOBS_PAST_OWNERS per slot
 * into past, newest first, 0 none), its roster and whether it is elastic. TS_ENOTFOUND,
 * nothing written, for a job that holds no resources (never started, or released). */
ts_status jobs_access(struct jobs *j, const char *id, uint32_t *owners, uint32_t *past,
                      size_t max, size_t *n, uint64_t *roster, bool *elastic,
                      struct ts_err *err) TS_MUST_CHECK;
/* Moves idle jobs past idle_ms to FINISHED, forgets summaries past the history limits, and
 * copies into ids (at most max) the jobs that ended and are not released yet; returns how
 * many. */
size_t jobs_due(struct jobs *j, int64_t now_ms, char (*ids)[TS_JOB_ID_MAX + 1], size_t max);
/* Every alive shard released job id (and its data map is dropped): it is a summary now. */
void jobs_released(struct jobs *j, const char *id, int64_t now_ms);
/* True if job id is running (not idle, not ended). */
bool jobs_running(struct jobs *j, const char *id);
/* The job (id, n bytes) and rank of worker's seat; false if it holds none. */
bool jobs_seat_of(struct jobs *j, uint32_t worker, char *id, size_t n, uint32_t *rank);
/* For dynamic assignment (workq.h) and priority tasks (tasks.h): a live worker's seat in its
 * running job, its run (JobInfo.started_unix_ms) and, with_alive, which ranks have
 * a live worker (alive: malloc'd, workers entries, the caller frees it; else NULL). false,
 * nothing written, for a worker with no live seat in a running job. */
struct jobs_run {
    char job[TS_JOB_ID_MAX + 1];
    uint32_t rank, workers;
    int64_t run_ms;
    bool *alive;
};
bool jobs_run_seat(struct jobs *j, uint32_t worker, bool with_alive, struct jobs_run *out);
/* A running job's run (JobInfo.started_unix_ms); 0 if no job of that id runs. */
int64_t jobs_run_ms(struct jobs *j, const char *id);
/* Whether worker has a live seat in a job. */
bool jobs_worker_alive(struct jobs *j, uint32_t worker);
/* Which ranks of job id have a live worker (malloc'd, the job's workers entries; the caller
 * frees it); NULL for an unknown job or no memory. */
bool *jobs_alive_ranks(struct jobs *j, const char *id);
/* How many jobs the shards hold now (running, or idle and not yet released). */
size_t jobs_resident(struct jobs *j);
/* True if job id holds resources now (running, idle, or ended and not released). */
bool jobs_holds(struct jobs *j, const char *id);
/* A shard's heartbeat says it holds job id: jobs_holds, and the time is noted for
 * jobs_reclaim_unheld. */
bool jobs_note_held(struct jobs *j, const char *id, int64_t now_ms);
/* Idle jobs that no shard has said it holds for grace_ms (since they went idle, or since one
 * last did) are FINISHED: a kept job with nothing kept (it never registered a tensor, or
 * every copy went) would hold a --max-jobs slot for --idle-job-ms (issue 41). grace_ms: a
 * few heartbeats of the slowest shard (its lease); 0 leaves every idle job alone (no shard
 * to ask). Returns how many. */
size_t jobs_reclaim_unheld(struct jobs *j, int64_t now_ms, int64_t grace_ms);

/* A rollback of running job id begins, for a loss found after `seen` rollbacks; *generation:
 * which one it will be. TS_ENOTFOUND if the job is not running; TS_EEXIST if one runs
 * already, one ran since the loss was seen (it restored that partition), or the job is
 * marked lost. */
ts_status jobs_rollback_begin(struct jobs *j, const char *id, uint32_t seen,
                              uint32_t *generation, struct ts_err *err) TS_MUST_CHECK;
/* It ended: done at step (ok), or not; lost marks the job as beyond recovery (its workers
 * fail with note). */
void jobs_rollback_end(struct jobs *j, const char *id, bool ok, bool lost, uint64_t step,
                       const char *note);
/* Every job: resident ones first (by start), then summaries (newest end first). *out is
 * malloc'd (caller frees), *n entries. */
ts_status jobs_list(struct jobs *j, struct job_info **out, size_t *n,
                    struct ts_err *err) TS_MUST_CHECK;
const char *jobs_state_name(enum job_state s);

/* Every job as a record: *out malloc'd, freed with jobs_records_free. */
ts_status jobs_export(struct jobs *j, struct job_record **out, size_t *n,
                      struct ts_err *err) TS_MUST_CHECK;
void jobs_records_free(struct job_record *r, size_t n);
/* A restarted master's empty table takes the records (copied). Times kept in the monotonic
 * clock (idle since, ended at) start again at now_ms. A rollback that was running is not:
 * rolling_back is cleared and the job's id is written into rerun (up to max; *nrerun of
 * them), for the master to request it again. TS_ESTATE if the table is not empty; TS_EINVAL
 * for a record that cannot be (a bad id, a worker in two jobs), the table left empty. */
ts_status jobs_restore(struct jobs *j, const struct job_record *r, size_t n, int64_t now_ms,
                       char (*rerun)[TS_JOB_ID_MAX + 1], size_t max, size_t *nrerun,
                       struct ts_err *err) TS_MUST_CHECK;

#endif
