/* jobs_records.c - the job table's records (jobs.h, struct job_record): jobs_export copies
 * every job out for the master's state file, jobs_restore fills a restarted master's empty
 * table back from them. The table and its rules are jobs.c's; see jobs_internal.h.
 * Ownership: jobs_export's records are malloc'd, each with its own seats and owners, and
 * freed with jobs_records_free; jobs_restore copies what it takes and keeps no pointer into
 * the records. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

ts_status jobs_export(struct jobs *j, struct job_record **out, size_t *n, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&j->mu);
    *n = 0;
    if (!(*out = calloc(j->n + 1, sizeof(**out))))
        st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
    for (size_t i = 0; !st && i < j->n; i++) {
        const struct job *jb = &j->v[i];
        struct job_record *r = &(*out)[(*n)++];
        r->info = jb->info;
        r->failed = jb->failed;
        r->died = jb->died;
        if (jb->nseats && !(r->seats = malloc(jb->nseats * sizeof(*r->seats))))
            st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
        else if (jb->nseats)
            memcpy(r->seats, jb->seats, (r->nseats = jb->nseats) * sizeof(*r->seats));
        if (!st && jb->owners && !(r->owners = malloc(jb->info.workers * sizeof(*r->owners))))
            st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
        else if (!st && jb->owners)
            memcpy(r->owners, jb->owners, (r->nowners = jb->info.workers) * sizeof(*r->owners));
    }
    pthread_mutex_unlock(&j->mu);
    if (st) {
        jobs_records_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return st;
}

void jobs_records_free(struct job_record *r, size_t n)
{
    for (size_t i = 0; r && i < n; i++) {
        free(r[i].seats);
        free(r[i].owners);
    }
    free(r);
}

/* Indexes a restored job's seats and slot owners (seats.h). */
static ts_status index_restored(struct job *jb, struct ts_err *err)
{
    uint32_t w = jb->info.workers;
    ts_status st = seat_index_reset(&jb->idx, w, jb->info.start_workers ? jb->info.start_workers
                                                                       : w, err);

    for (size_t k = 0; !st && k < jb->nseats; k++)
        st = seat_index_add(&jb->idx, jb->seats[k].worker, (uint32_t)k, jb->seats[k].rank,
                            jb->seats[k].state == SEAT_ALIVE, err);
    for (uint32_t k = 0; !st && k < w; k++)
        seat_index_move(&jb->idx, 0, jb->owners[k]);
    return st;
}

/* Checks a record to restore against those already restored; mu held. */
static ts_status check_record(struct jobs *j, const struct job_record *r, struct ts_err *err)
{
    struct job *other;
    ts_status st;

    if ((st = ts_job_id_check("job", r->info.id, err)))
        return st;
    if (job_find(j, r->info.id))
        return ts_err_set(err, TS_EINVAL, "job: '%s' twice", r->info.id);
    if (r->info.state < JOB_RUNNING || r->info.state > JOB_ABANDONED)
        return ts_err_set(err, TS_EINVAL, "job '%s': state %d", r->info.id, r->info.state);
    if (r->nowners && r->nowners != r->info.workers)
        return ts_err_set(err, TS_EINVAL, "job '%s': %zu slot owners for %u workers", r->info.id,
                          r->nowners, r->info.workers);
    for (size_t k = 0; k < r->nseats; k++)
        if (job_worker_seat(j, r->seats[k].worker, &other))
            return ts_err_set(err, TS_EINVAL, "job '%s': worker %u is in job '%s' too",
                              r->info.id, r->seats[k].worker, other->info.id);
    return TS_OK;
}

ts_status jobs_restore(struct jobs *j, const struct job_record *r, size_t n, int64_t now_ms,
                       char (*rerun)[TS_JOB_ID_MAX + 1], size_t max, size_t *nrerun,
                       struct ts_err *err)
{
    ts_status st = TS_OK;

    *nrerun = 0;
    pthread_mutex_lock(&j->mu);
    if (j->n) {
        pthread_mutex_unlock(&j->mu);
        return ts_err_set(err, TS_ESTATE, "jobs: restore into a table in use");
    }
    if (n > j->cap) {
        struct job *v = realloc(j->v, n * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&j->mu);
            return ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
        }
        j->v = v;
        j->cap = n;
    }
    for (size_t i = 0; !st && i < n; i++) {
        struct job *jb = &j->v[j->n];
        if ((st = check_record(j, &r[i], err)))
            break;
        memset(jb, 0, sizeof(*jb));
        jb->info = r[i].info;
        jb->failed = r[i].failed;
        jb->died = r[i].died;
        jb->idle_since_ms = jb->ended_ms = jb->begun_ms = now_ms;   /* the deadline too */
        if (r[i].nseats && !(jb->seats = malloc(r[i].nseats * sizeof(*jb->seats)))) {
            st = ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
            break;
        }
        if (r[i].nseats)
            memcpy(jb->seats, r[i].seats, r[i].nseats * sizeof(*jb->seats));
        jb->nseats = jb->cap = r[i].nseats;
        if ((st = job_owners_alloc(jb, jb->info.workers, err))) {
            free(jb->seats);
            free(jb->owners);
            free(jb->past);
            break;
        }
        if (r[i].nowners)
            memcpy(jb->owners, r[i].owners, r[i].nowners * sizeof(*jb->owners));
        if ((st = index_restored(jb, err))) {
            free(jb->seats);
            free(jb->owners);
            free(jb->past);
            seat_index_free(&jb->idx);
            break;
        }
        if (jb->info.rolling_back) {
            jb->info.rolling_back = false;
            if (*nrerun < max)
                snprintf(rerun[(*nrerun)++], TS_JOB_ID_MAX + 1, "%s", jb->info.id);
        }
        j->n++;
    }
    if (st) {
        for (size_t i = 0; i < j->n; i++) {
            free(j->v[i].seats);
            free(j->v[i].owners);
            free(j->v[i].past);
            seat_index_free(&j->v[i].idx);
        }
        j->n = 0;
        *nrerun = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}
