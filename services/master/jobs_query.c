/* jobs_query.c - what the master's other parts read of the job table (jobs.h): a worker's
 * seat, run and slots, a job's width, owners, rosters and live ranks, whether it runs or holds
 * resources, and the listing. Each takes the table's mutex for the read and copies out; the
 * rules that change seats and owners are jobs.c's and owners.c's. */
#include "jobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

bool jobs_seat_of(struct jobs *j, uint32_t worker, char *id, size_t n, uint32_t *rank)
{
    struct job *jb;
    struct job_seat *s;

    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb))) {
        snprintf(id, n, "%s", jb->info.id);
        *rank = s->rank;
    }
    pthread_mutex_unlock(&j->mu);
    return s != NULL;
}

/* Which ranks of jb have a live worker, into alive[0..workers). mu held. */
static void alive_ranks(const struct job *jb, bool *alive)
{
    memset(alive, 0, jb->info.workers * sizeof(*alive));
    for (size_t k = 0; k < jb->nseats; k++)
        if (jb->seats[k].state == SEAT_ALIVE && jb->seats[k].rank < jb->info.workers)
            alive[jb->seats[k].rank] = true;
}

bool jobs_run_seat(struct jobs *j, uint32_t worker, bool with_alive, struct jobs_run *out)
{
    struct job *jb;
    struct job_seat *s;
    bool *alive = NULL;
    bool found;

    pthread_mutex_lock(&j->mu);
    s = job_worker_seat(j, worker, &jb);
    found = s && s->state == SEAT_ALIVE && jb->info.state == JOB_RUNNING &&
            (!with_alive || (alive = malloc(jb->info.workers * sizeof(*alive))));
    if (found) {
        if (alive)
            alive_ranks(jb, alive);
        snprintf(out->job, sizeof(out->job), "%s", jb->info.id);
        out->rank = s->rank;
        out->workers = jb->info.workers;
        out->run_ms = jb->info.started_unix_ms;
        out->alive = alive;
    }
    pthread_mutex_unlock(&j->mu);
    return found;
}

bool *jobs_alive_ranks(struct jobs *j, const char *id)
{
    bool *alive = NULL;

    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n && !alive; i++)
        if (!strcmp(j->v[i].info.id, id) && (alive = malloc(j->v[i].info.workers + 1)))
            alive_ranks(&j->v[i], alive);
    pthread_mutex_unlock(&j->mu);
    return alive;
}

int64_t jobs_run_ms(struct jobs *j, const char *id)
{
    int64_t run = 0;

    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n; i++)
        if (!strcmp(j->v[i].info.id, id) && j->v[i].info.state == JOB_RUNNING)
            run = j->v[i].info.started_unix_ms;
    pthread_mutex_unlock(&j->mu);
    return run;
}

bool jobs_worker_alive(struct jobs *j, uint32_t worker)
{
    struct job *jb;
    struct job_seat *s;
    bool alive;

    pthread_mutex_lock(&j->mu);
    s = job_worker_seat(j, worker, &jb);
    alive = s && s->state == SEAT_ALIVE;
    pthread_mutex_unlock(&j->mu);
    return alive;
}

int jobs_slots(struct jobs *j, uint32_t worker, uint64_t *roster, uint32_t *slots, size_t max)
{
    struct job *jb;
    struct job_seat *s;
    int n = -1;

    pthread_mutex_lock(&j->mu);
    if ((s = job_worker_seat(j, worker, &jb)) && jb->info.state == JOB_RUNNING &&
        s->state == SEAT_ALIVE) {
        uint32_t load = seat_index_load(&jb->idx, worker);
        n = 0;
        *roster = jb->info.roster;
        if (load == 1 && s->rank < jb->info.workers && jb->owners[s->rank] == worker) {
            if (max)   /* its own slot alone, as a worker almost always has: no scan */
                slots[0] = s->rank;
            n = 1;
        } else {
            for (uint32_t k = 0; k < jb->info.workers; k++)
                if (jb->owners[k] == worker && (size_t)n++ < max)
                    slots[n - 1] = k;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

size_t jobs_rosters(struct jobs *j, char (*ids)[TS_JOB_ID_MAX + 1], uint64_t *rosters,
                    size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->n && n < max; i++)
        if (j->v[i].info.state == JOB_RUNNING && j->v[i].info.elastic && j->v[i].info.roster) {
            snprintf(ids[n], TS_JOB_ID_MAX + 1, "%s", j->v[i].info.id);
            rosters[n++] = j->v[i].info.roster;
        }
    pthread_mutex_unlock(&j->mu);
    return n;
}

uint32_t jobs_width(struct jobs *j, const char *id)
{
    struct job *jb;
    uint32_t w;

    pthread_mutex_lock(&j->mu);
    w = (jb = job_find(j, id)) ? jb->info.workers : 0;
    pthread_mutex_unlock(&j->mu);
    return w;
}

size_t jobs_owners(struct jobs *j, const char *id, uint32_t *owners, size_t max)
{
    struct job *jb;
    size_t n = 0;

    pthread_mutex_lock(&j->mu);
    if ((jb = job_find(j, id)) && jb->owners)
        for (; n < jb->info.workers && n < max; n++)
            owners[n] = jb->owners[n];
    pthread_mutex_unlock(&j->mu);
    return n;
}

ts_status jobs_access(struct jobs *j, const char *id, uint32_t *owners, uint32_t *past,
                      size_t max, size_t *n, uint64_t *roster, bool *elastic,
                      struct ts_err *err)
{
    struct job *jb;
    ts_status st = TS_OK;

    pthread_mutex_lock(&j->mu);
    if (!(jb = job_find(j, id)) || jb->info.released) {
        st = ts_err_set(err, TS_ENOTFOUND, "job: '%s' holds no resources (never started, or "
                        "ended and released)", id);
    } else {
        for (*n = 0; jb->owners && *n < jb->info.workers && *n < max; (*n)++)
            owners[*n] = jb->owners[*n];
        if (*n)
            memcpy(past, jb->past, *n * JOBS_PAST_OWNERS * sizeof(*past));
        *roster = jb->info.roster;
        *elastic = jb->info.elastic;
    }
    pthread_mutex_unlock(&j->mu);
    return st;
}

bool jobs_running(struct jobs *j, const char *id)
{
    struct job *jb;
    bool r;

    pthread_mutex_lock(&j->mu);
    r = (jb = job_find(j, id)) && jb->info.state == JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    return r;
}

bool jobs_holds(struct jobs *j, const char *id)
{
    struct job *jb;
    bool holds;

    pthread_mutex_lock(&j->mu);
    holds = (jb = job_find(j, id)) && !jb->info.released;
    pthread_mutex_unlock(&j->mu);
    return holds;
}

static int by_listing(const void *a, const void *b)
{
    const struct job_info *x = a, *y = b;

    if (x->released != y->released)
        return x->released ? 1 : -1;
    if (!x->released)
        return x->started_unix_ms < y->started_unix_ms ? -1
                                                       : x->started_unix_ms > y->started_unix_ms;
    return x->ended_unix_ms > y->ended_unix_ms ? -1 : x->ended_unix_ms < y->ended_unix_ms;
}

ts_status jobs_list(struct jobs *j, struct job_info **out, size_t *n, struct ts_err *err)
{
    pthread_mutex_lock(&j->mu);
    *out = malloc((j->n + 1) * sizeof(**out));
    if (!*out) {
        pthread_mutex_unlock(&j->mu);
        return ts_err_set(err, TS_ENOMEM, "jobs: out of memory");
    }
    for (size_t i = 0; i < j->n; i++)
        (*out)[i] = j->v[i].info;
    *n = j->n;
    pthread_mutex_unlock(&j->mu);
    qsort(*out, *n, sizeof(**out), by_listing);
    return TS_OK;
}
