/* jobs.c - the master's job table; see jobs.h. One mutex guards the table, and every rule
 * about who holds which slot reads and writes the same seats and owners under it: joining,
 * leaving and dying, and at the start deadline, each handing slots out through owners.c
 * (job_reslot, job_rebalance); what dynamic assignment and priority tasks read of a worker's
 * run. The records a restart takes back are jobs_records.c's; the reads the other parts make
 * of the table (a worker's seat and slots, a job's owners, the listing) jobs_query.c's. */
#include "jobs.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"
#include "util/log.h"
#include "util/proc.h"

const char *jobs_state_name(enum job_state s)
{
    switch (s) {
    case JOB_RUNNING: return "running";
    case JOB_IDLE: return "idle";
    case JOB_FINISHED: return "finished";
    case JOB_FAILED: return "failed";
    case JOB_ABANDONED: return "abandoned";
    }
    return "unknown";
}

ts_status jobs_create(const struct jobs_cfg *cfg, struct jobs **out, struct ts_err *err)
{
    struct jobs *j = calloc(1, sizeof(*j));

    if (!j)
        return ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
    j->cfg = *cfg;
    if (!j->cfg.max_jobs)
        j->cfg.max_jobs = JOBS_DEFAULT_MAX;
    if (!j->cfg.history_max)
        j->cfg.history_max = JOBS_DEFAULT_HISTORY;
    if (!j->cfg.history_ms)
        j->cfg.history_ms = JOBS_DEFAULT_HISTORY_MS;
    if (!j->cfg.idle_ms)
        j->cfg.idle_ms = JOBS_DEFAULT_IDLE_MS;
    if (!j->cfg.per_owner)
        j->cfg.per_owner = JOBS_DEFAULT_PER_OWNER;
    if (j->cfg.max_jobs > JOBS_MAX || j->cfg.per_owner > JOBS_MAX) {
        bool max = j->cfg.max_jobs > JOBS_MAX;
        free(j);
        return ts_err_set(err, TS_EINVAL, "%s: %u, at most %d", max ? "--max-jobs"
                          : "--jobs-per-identity", max ? cfg->max_jobs : cfg->per_owner,
                          JOBS_MAX);
    }
    pthread_mutex_init(&j->mu, NULL);
    *out = j;
    return TS_OK;
}

void jobs_free(struct jobs *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->n; i++) {
        free(j->v[i].seats);
        free(j->v[i].owners);
        free(j->v[i].past);
        seat_index_free(&j->v[i].idx);
    }
    free(j->v);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* The job named id, resident or a summary; NULL if none. mu held. */
struct job *job_find(struct jobs *j, const char *id)
{
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->v[i].info.id, id) == 0)
            return &j->v[i];
    return NULL;
}

/* The job and seat of a worker, alive or not; NULL if it is in no job. mu held. */
struct job_seat *job_worker_seat(struct jobs *j, uint32_t worker, struct job **jb)
{
    for (size_t i = 0; i < j->n; i++) {
        int32_t k = seat_index_of(&j->v[i].idx, worker);
        if (k >= 0 && (size_t)k < j->v[i].nseats) {
            *jb = &j->v[i];
            return &j->v[i].seats[k];
        }
    }
    return NULL;
}

static void drop(struct jobs *j, struct job *jb)
{
    free(jb->seats);
    free(jb->owners);
    free(jb->past);
    seat_index_free(&jb->idx);
    *jb = j->v[--j->n];
}

static size_t resident(const struct jobs *j)
{
    size_t n = 0;

    for (size_t i = 0; i < j->n; i++)
        n += !j->v[i].info.released;
    return n;
}

/* Room for workers' slot owners and their past, all none. */
ts_status job_owners_alloc(struct job *jb, uint32_t workers, struct ts_err *err)
{
    uint32_t *o = realloc(jb->owners, (workers + 1) * sizeof(*o));
    uint32_t *p = o ? realloc(jb->past, ((size_t)workers * JOBS_PAST_OWNERS + 1) * sizeof(*p))
                    : NULL;

    if (o)
        jb->owners = o;
    if (p)
        jb->past = p;
    if (!o || !p)
        return ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
    memset(o, 0, workers * sizeof(*o));
    memset(p, 0, (size_t)workers * JOBS_PAST_OWNERS * sizeof(*p));
    return TS_OK;
}

/* The jobs owner holds (resident, owned by it) other than except; mu held. */
static size_t owned(const struct jobs *j, const char *owner, const struct job *except)
{
    size_t n = 0;

    for (size_t i = 0; i < j->n; i++)
        n += &j->v[i] != except && !j->v[i].info.released &&
             !strcmp(j->v[i].info.owner, owner);
    return n;
}

/* Whether a registration for jb (NULL: a new job) by owner starts a run beyond owner's quota;
 * err set if so. mu held. */
static ts_status owner_quota(struct jobs *j, const struct job *jb, const char *owner,
                             struct ts_err *err)
{
    size_t n;

    if (!owner || !owner[0] || (jb && jb->info.state == JOB_RUNNING && !jb->info.released))
        return TS_OK;   /* nobody to count, or it joins a run under way */
    if ((n = owned(j, owner, jb)) < j->cfg.per_owner)
        return TS_OK;
    return ts_err_set(err, TS_ENOMEM, "job: identity '%s' holds %zu jobs on this cluster, its "
                      "quota (--jobs-per-identity %u); wait for one to end (tessera status "
                      "lists them) or raise --jobs-per-identity", owner, n, j->cfg.per_owner);
}

/* A new run of a job, begun at now_ms: no seats yet, no slot owned. */
static ts_status start_run(struct job *jb, uint32_t workers, uint32_t start, bool keep,
                           bool elastic, int64_t now_ms, struct ts_err *err)
{
    ts_status st = job_owners_alloc(jb, workers, err);

    if (st)
        return st;
    jb->info.elastic = elastic;
    jb->info.roster = 0;
    jb->info.adopted = jb->info.balanced = 0;
    jb->info.balance = false;
    jb->info.start_workers = start && start < workers ? start : workers;
    if ((st = seat_index_reset(&jb->idx, workers, jb->info.start_workers, err)))
        return st;
    jb->gone_left = false;
    jb->begun_ms = now_ms;
    jb->overdue_ms = 0;
    jb->nseats = 0;
    jb->failed = jb->died = jb->fp_rank0 = false;
    jb->info.state = JOB_RUNNING;
    jb->info.workers = workers;
    jb->info.alive = jb->info.finished = 0;
    jb->info.keep = keep;
    jb->info.ended_unix_ms = 0;
    jb->info.fingerprint[0] = jb->info.reason[0] = '\0';
    return TS_OK;
}

ts_status jobs_join(struct jobs *j, const char *id, uint32_t worker, uint32_t rank,
                    uint32_t workers, uint32_t start, bool keep, bool elastic, bool rejoin,
                    const char *owner, int64_t now_ms, struct ts_err *err)
{
    struct job *jb, *other;
    struct job_seat *s;
    bool came = false;
    ts_status st;

    if ((st = ts_job_id_check("job", id, err)))
        return st;
    if (workers < 1 || workers > JOBS_MAX_WORKERS)
        return ts_err_set(err, TS_EINVAL, "workers: %u, want 1..%d", workers, JOBS_MAX_WORKERS);
    if (rank >= workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below workers %u", rank, workers);
    if (start > workers || (start && start < workers && !elastic))
        return ts_err_set(err, TS_EINVAL, "start_workers: %u, want 1..%u (workers), and below "
                          "workers only in an elastic job", start, workers);
    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &other))) {   /* a retried RegisterWorker */
        st = strcmp(other->info.id, id) ? ts_err_set(err, TS_EEXIST, "job: worker %u is in "
                                                     "job '%s' already", worker, other->info.id)
             : s->rank != rank ? ts_err_set(err, TS_EINVAL, "rank: %u, but worker %u is rank %u "
                                            "of job '%s'", rank, worker, s->rank, id)
                               : TS_OK;
        struct job_seat *now = !st && s->state == SEAT_DEAD ? job_alive_seat(other, 0, s->rank)
                                                            : NULL;
        if (now)
            st = ts_err_set(err, TS_EEXIST, "rank: %u of job '%s' is worker %u now (it came "
                            "while this worker was declared dead)", s->rank, id, now->worker);
        if (!st && s->state == SEAT_DEAD && other->info.state == JOB_RUNNING) {
            /* Declared dead, and back (it was stopped or cut off): its rank again. */
            s->waiting = other->info.elastic && job_held(other, s->rank);   /* not itself: dead */
            s->state = SEAT_ALIVE;
            seat_index_alive(&other->idx, s->rank, (uint32_t)(s - other->seats));
            other->info.alive++;
            ts_log(TS_INFO, "master", "job %s: worker %u (rank %u) is back", id, worker,
                   s->rank);
            job_reslot(other);
        }
        pthread_mutex_unlock(&j->mu);
        return st;
    }
    jb = job_find(j, id);
    if (jb && jb->info.state > JOB_IDLE && !jb->info.released) {
        st = ts_err_set(err, TS_EUNAVAIL, "job: '%s' has %s and the shards are freeing it; "
                        "retry in a moment", id, jobs_state_name(jb->info.state));
    } else if (jb && jb->info.state == JOB_RUNNING && workers != jb->info.workers) {
        st = ts_err_set(err, TS_EINVAL, "workers: %u, but job '%s' runs with %u", workers, id,
                        jb->info.workers);
    } else if (jb && jb->info.state == JOB_RUNNING && elastic != jb->info.elastic) {
        st = ts_err_set(err, TS_EINVAL, "elastic: %s, but job '%s' runs %s", elastic ? "on" :
                        "off", id, jb->info.elastic ? "elastic" : "without elastic workers");
    } else if (owner_quota(j, jb, owner, err)) {
        st = TS_ENOMEM;
    } else if (!jb && resident(j) >= j->cfg.max_jobs) {
        st = ts_err_set(err, TS_ENOMEM, "job: the cluster holds %zu jobs, its --max-jobs; wait "
                        "for one to end (tessera status lists them) or raise --max-jobs",
                        resident(j));
    }
    /* A restarted worker, or a rank at or above start_workers (tessera train --join), only
     * joins a run: a run it started would wait for ranks nobody starts, as a joiner or a
     * restarted rank 0 that came just after the job ended did for 120 s. */
    if (!st && (rejoin || (start && start < workers && rank >= start)) &&
        (!jb || jb->info.state == JOB_IDLE || jb->info.released))
        st = rejoin ? ts_err_set(err, TS_ESTATE, "restarts: rank %u was restarted to rejoin "
                                 "job '%s', but the job is not running: it ended meanwhile "
                                 "(tessera status shows how)", rank, id)
                    : ts_err_set(err, TS_ESTATE, "rank: %u joins job '%s' (it starts with "
                                 "ranks below %u), but the job is not running: it ended, or "
                                 "has not started; start it first (tessera status lists the "
                                 "jobs)", rank, id, start);
    if (!st && jb && jb->info.state == JOB_RUNNING && (s = job_alive_seat(jb, 0, rank)))
        st = ts_err_set(err, TS_EEXIST, "rank: %u of job '%s' is worker %u, alive", rank, id,
                        s->worker);
    if (!st && !jb) {
        struct job *v = j->v;
        if (j->n == j->cap &&
            !(v = realloc(j->v, (j->cap ? 2 * j->cap : 16) * sizeof(*v))))
            st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
        if (!st) {
            j->v = v;
            j->cap = j->n == j->cap ? (j->cap ? 2 * j->cap : 16) : j->cap;
            jb = &j->v[j->n++];
            memset(jb, 0, sizeof(*jb));
            snprintf(jb->info.id, sizeof(jb->info.id), "%s", id);
            jb->info.started_unix_ms = ts_unix_ms();
            snprintf(jb->info.owner, sizeof(jb->info.owner), "%s", owner ? owner : "");
            if ((st = start_run(jb, workers, start, keep, elastic, now_ms, err)))
                j->n--;
            else
                ts_log(TS_INFO, "master", "job %s: running (%u workers%s%s)", id, workers,
                       elastic ? ", elastic" : "", keep ? ", kept when finished" : "");
        }
    } else if (!st && (jb->info.state == JOB_IDLE || jb->info.released)) {
        if (!(st = start_run(jb, workers, start, keep, elastic, now_ms, err))) {
            jb->info.released = false;
            jb->info.started_unix_ms = ts_unix_ms();
            snprintf(jb->info.owner, sizeof(jb->info.owner), "%s", owner ? owner : "");
            ts_log(TS_INFO, "master", "job %s: running again (%u workers)", id, workers);
        }
    }
    if (!st && jb->nseats == jb->cap) {
        struct job_seat *v = realloc(jb->seats, (jb->cap ? 2 * jb->cap : 4) * sizeof(*v));
        if (!v)
            st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
        else
            jb->seats = v, jb->cap = jb->cap ? 2 * jb->cap : 4;
    }
    if (!st)
        came = seat_index_all_came(&jb->idx);
    if (!st && !(st = seat_index_add(&jb->idx, worker, (uint32_t)jb->nseats, rank, true, err))) {
        jb->seats[jb->nseats++] = (struct job_seat){ worker, rank, SEAT_ALIVE,
                                                     elastic && job_held(jb, rank), 0 };
        jb->info.alive++;
        job_reslot_rank(jb, rank, !came && seat_index_all_came(&jb->idx));
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

/* A job with no worker alive ends (or idles); mu held. */
static void settle(struct job *jb, int64_t now_ms)
{
    if (jb->info.state != JOB_RUNNING || jb->info.alive)
        return;
    if (jb->failed)
        jb->info.state = JOB_FAILED;
    else if (jb->died)
        jb->info.state = JOB_ABANDONED;
    else if (jb->info.keep)
        jb->info.state = JOB_IDLE;
    else
        jb->info.state = JOB_FINISHED;
    if (jb->info.state == JOB_IDLE) {
        jb->idle_since_ms = now_ms;
    } else {
        jb->ended_ms = now_ms;
        jb->info.ended_unix_ms = ts_unix_ms();
    }
    ts_log(jb->info.state == JOB_FINISHED || jb->info.state == JOB_IDLE ? TS_INFO : TS_WARN,
           "master", "job %s: %s%s%s", jb->info.id, jobs_state_name(jb->info.state),
           jb->info.reason[0] ? ": " : "", jb->info.reason);
}

/* Whether the run's training is over (mu held): an elastic job is bsp (docs/elastic.md), whose
 * step completes only once every slot was pushed, and a worker finishes only after it pulled
 * the values of the last step; so once one finished, every step of the run is in the
 * parameters, and a worker that dies after that takes nothing with it. Not so in ssp, asp or
 * reduce, where a worker that finished says nothing of the others' steps; a job without
 * elastic workers may be any of them. */
static bool trained(const struct job *jb)
{
    return jb->info.elastic && jb->info.finished;
}

/* The seat's worker is gone as `to`; mu held. */
static void vacate(struct job *jb, struct job_seat *s, enum job_seat_state to, const char *why,
                   int64_t now_ms)
{
    if (s->state != SEAT_ALIVE)
        return;
    s->state = to;
    seat_index_gone(&jb->idx, s->rank, (uint32_t)(s - jb->seats));
    jb->info.alive--;
    if (to == SEAT_FINISHED)
        jb->info.finished++;
    if (to == SEAT_FAILED)
        jb->failed = true;
    /* An elastic job with a worker left goes on: the dead worker's slots move. */
    if (to == SEAT_DEAD && jb->info.elastic && jb->info.alive) {
        ts_log(TS_WARN, "master", "job %s: rank %u (worker %u): %s; its slots move", jb->info.id,
               s->rank, s->worker, why);
        job_reslot(jb);
        return;
    }
    /* The last worker died after another finished the training (issue 44): the parameters
     * are whole, so the job ends as if it had finished too: idle if kept, else finished. */
    if (to == SEAT_DEAD && trained(jb)) {
        ts_log(TS_WARN, "master", "job %s: rank %u (worker %u): %s, after %u worker%s finished "
               "the training: nothing is lost", jb->info.id, s->rank, s->worker, why,
               jb->info.finished, jb->info.finished == 1 ? "" : "s");
        settle(jb, now_ms);
        return;
    }
    if (to == SEAT_DEAD)
        jb->died = true;
    if (to != SEAT_FINISHED && !jb->info.reason[0])
        snprintf(jb->info.reason, sizeof(jb->info.reason), "rank %u: %s", s->rank, why);
    settle(jb, now_ms);
}

/* Whether a rank-0 worker of jb finished: its fingerprint is the job's. */
static bool rank0_finished(const struct job *jb)
{
    for (size_t i = 0; i < jb->nseats; i++)
        if (jb->seats[i].rank == 0 && jb->seats[i].state == SEAT_FINISHED)
            return true;
    return false;
}

void jobs_leave(struct jobs *j, uint32_t worker, bool failed, const char *fingerprint,
                const char *reason, int64_t now_ms)
{
    struct job *jb;
    struct job_seat *s;

    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb))) {
        /* Rank 0's, as `tessera train` prints it: in asp and ssp the workers end on different
         * values. Another rank's stands in while rank 0 has given none and has not finished
         * (it died) or finished without one. Rank 0 may have given its own from a seat
         * declared dead (its lease ran out under load while it trained on): it stays. */
        if (!failed && fingerprint && strlen(fingerprint) == 64 &&
            (s->rank == 0 || !jb->info.fingerprint[0] ||
             (!jb->fp_rank0 && !rank0_finished(jb)))) {
            snprintf(jb->info.fingerprint, sizeof(jb->info.fingerprint), "%s", fingerprint);
            jb->fp_rank0 |= s->rank == 0;
        }
        vacate(jb, s, failed ? SEAT_FAILED : SEAT_FINISHED,
               reason && reason[0] ? reason : "failed", now_ms);
    }
    pthread_mutex_unlock(&j->mu);
}

void jobs_ready(struct jobs *j, uint32_t worker)
{
    struct job *jb;
    struct job_seat *s;

    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb)) && s->state == SEAT_ALIVE && s->waiting) {
        s->waiting = false;
        ts_log(TS_INFO, "master", "job %s: worker %u (rank %u) caught up", jb->info.id, worker,
               s->rank);
        job_reslot(jb);
    }
    pthread_mutex_unlock(&j->mu);
}

void jobs_dead(struct jobs *j, uint32_t worker, int64_t now_ms)
{
    struct job *jb;
    struct job_seat *s;

    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb)))
        vacate(jb, s, SEAT_DEAD, "its lease expired or its connection broke (the process "
               "died or hung)", now_ms);
    pthread_mutex_unlock(&j->mu);
}

void jobs_balance(struct jobs *j, uint32_t worker)
{
    struct job *jb;

    pthread_mutex_lock(&j->mu);
    if (job_worker_seat(j, worker, &jb) && jb->info.state == JOB_RUNNING && jb->info.elastic &&
        !jb->info.balance) {
        jb->info.balance = true;
        ts_log(TS_INFO, "master", "job %s: slots move by the workers' speed", jb->info.id);
    }
    pthread_mutex_unlock(&j->mu);
}

ts_status jobs_speed(struct jobs *j, uint32_t worker, double slot_s, int64_t slots,
                     int64_t now_ms, struct ts_err *err)
{
    struct job *jb;
    struct job_seat *s;
    ts_status st = TS_OK;

    if (!isfinite(slot_s) || slot_s <= 0 || slot_s > 3600)
        return ts_err_set(err, TS_EINVAL, "slot_seconds: %g; want the worker's compute "
                          "seconds per slot, above 0 and at most 3600", slot_s);
    if (slots < 1 || slots > JOBS_MAX_WORKERS)
        return ts_err_set(err, TS_EINVAL, "speed_slots: %" PRId64 "; want the slots the "
                          "measured steps computed, 1..%d", slots, JOBS_MAX_WORKERS);
    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb)) && jb->info.state == JOB_RUNNING) {
        if ((uint64_t)slots > jb->info.workers) {
            st = ts_err_set(err, TS_EINVAL, "speed_slots: %" PRId64 ", but job '%s' has %u "
                            "slots; want 1..%u", slots, jb->info.id, jb->info.workers,
                            jb->info.workers);
        } else {
            s->slot_s = slot_s;
            if (jb->info.balance && now_ms - jb->balanced_ms >= JOBS_BALANCE_MS &&
                s->state == SEAT_ALIVE && job_rebalance(jb, JOBS_BALANCE_GAIN)) {
                jb->balanced_ms = now_ms;
                jb->info.roster++;
            }
        }
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

void jobs_start_deadline(struct jobs *j, int64_t now_ms)
{
    if (j->cfg.start_deadline_ms <= 0)
        return;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n; i++) {
        struct job *jb = &j->v[i];
        if (jb->info.state != JOB_RUNNING || !jb->info.elastic || jb->overdue_ms ||
            now_ms - jb->begun_ms < j->cfg.start_deadline_ms)
            continue;
        jb->overdue_ms = j->cfg.start_deadline_ms;
        /* Only for a slot nobody holds: handing out a balanced job's slots also spreads them
         * by speed, which must wait for JOBS_BALANCE_MS and JOBS_BALANCE_GAIN otherwise. */
        for (uint32_t k = 0; k < jb->info.workers; k++)
            if (!jb->owners[k]) {
                job_reslot(jb);
                break;
            }
    }
    pthread_mutex_unlock(&j->mu);
}

size_t jobs_due(struct jobs *j, int64_t now_ms, char (*ids)[TS_JOB_ID_MAX + 1], size_t max)
{
    size_t n = 0, summaries = 0;

    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n; i++) {
        struct job *jb = &j->v[i];
        if (jb->info.state == JOB_IDLE && now_ms - jb->idle_since_ms > j->cfg.idle_ms) {
            jb->info.state = JOB_FINISHED;
            jb->ended_ms = now_ms;
            jb->info.ended_unix_ms = ts_unix_ms();
            ts_log(TS_INFO, "master", "job %s: idle for %" PRId64 " ms (--idle-job-ms): "
                   "finished", jb->info.id, now_ms - jb->idle_since_ms);
        }
    }
    /* Summaries: drop those past history_ms, then the oldest beyond history_max. */
    for (size_t i = 0; i < j->n;)
        if (j->v[i].info.released && now_ms - j->v[i].ended_ms > j->cfg.history_ms)
            drop(j, &j->v[i]);
        else
            summaries += j->v[i++].info.released;
    while (summaries > j->cfg.history_max) {
        struct job *oldest = NULL;
        for (size_t i = 0; i < j->n; i++)
            if (j->v[i].info.released && (!oldest || j->v[i].ended_ms < oldest->ended_ms))
                oldest = &j->v[i];
        drop(j, oldest);
        summaries--;
    }
    for (size_t i = 0; i < j->n && n < max; i++)
        if (j->v[i].info.state > JOB_IDLE && !j->v[i].info.released)
            snprintf(ids[n++], TS_JOB_ID_MAX + 1, "%s", j->v[i].info.id);
    pthread_mutex_unlock(&j->mu);
    return n;
}

ts_status jobs_rollback_begin(struct jobs *j, const char *id, uint32_t seen,
                              uint32_t *generation, struct ts_err *err)
{
    struct job *jb;
    ts_status st = TS_OK;

    pthread_mutex_lock(&j->mu);
    if (!(jb = job_find(j, id)) || jb->info.state != JOB_RUNNING)
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not running", id);
    else if (jb->info.rolling_back || jb->info.lost)
        st = ts_err_set(err, TS_EEXIST, "job '%s': %s", id, jb->info.rolling_back
                        ? "a rollback runs already" : jb->info.rollback_note);
    else if (jb->info.rollbacks > seen)
        st = ts_err_set(err, TS_EEXIST, "job '%s' went back to a snapshot since the loss was "
                        "found (rollback %u, found after %u): nothing to do", id,
                        jb->info.rollbacks, seen);
    else {
        jb->info.rolling_back = true;
        *generation = jb->info.rollbacks + 1;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

void jobs_rollback_end(struct jobs *j, const char *id, bool ok, bool lost, uint64_t step,
                       const char *note)
{
    struct job *jb;

    pthread_mutex_lock(&j->mu);
    if ((jb = job_find(j, id))) {
        jb->info.rolling_back = false;
        jb->info.lost = lost;
        if (ok) {
            jb->info.rollbacks++;
            jb->info.rollback_step = step;
        }
        /* A long job id must not push the advice at the end out. */
        ts_str_fit(jb->info.rollback_note, sizeof(jb->info.rollback_note), note);
    }
    pthread_mutex_unlock(&j->mu);
}

void jobs_released(struct jobs *j, const char *id, int64_t now_ms)
{
    struct job *jb;

    pthread_mutex_lock(&j->mu);
    if ((jb = job_find(j, id)) && jb->info.state > JOB_IDLE) {
        jb->info.released = true;
        jb->ended_ms = now_ms;
        jb->nseats = 0;   /* a summary keeps no workers */
        free(jb->seats);
        jb->seats = NULL;
        jb->cap = 0;
        seat_index_free(&jb->idx);
    }
    pthread_mutex_unlock(&j->mu);
}

size_t jobs_resident(struct jobs *j)
{
    size_t n;

    pthread_mutex_lock(&j->mu);
    n = resident(j);
    pthread_mutex_unlock(&j->mu);
    return n;
}

bool jobs_note_held(struct jobs *j, const char *id, int64_t now_ms)
{
    struct job *jb;
    bool holds;

    pthread_mutex_lock(&j->mu);
    if ((holds = (jb = job_find(j, id)) && !jb->info.released))
        jb->held_ms = now_ms;
    pthread_mutex_unlock(&j->mu);
    return holds;
}

size_t jobs_reclaim_unheld(struct jobs *j, int64_t now_ms, int64_t grace_ms)
{
    size_t n = 0;

    if (grace_ms <= 0)
        return 0;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n; i++) {
        struct job *jb = &j->v[i];
        int64_t since = jb->held_ms > jb->idle_since_ms ? jb->held_ms : jb->idle_since_ms;
        if (jb->info.state != JOB_IDLE || now_ms - since <= grace_ms)
            continue;
        jb->info.state = JOB_FINISHED;
        jb->ended_ms = now_ms;
        jb->info.ended_unix_ms = ts_unix_ms();
        n++;
        ts_log(TS_INFO, "master", "job %s: kept, but no shard has held any of it for %" PRId64
               " ms: finished (nothing to keep)", jb->info.id, now_ms - since);
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}
