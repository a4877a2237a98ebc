/* jobs_work.c - what dynamic assignment (workq.h) and priority tasks (tasks.h) read of the
 * job table: a worker's seat in its run, which ranks of the run have a live worker, a running
 * job's run and whether a worker is alive in a job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_internal.h"

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
    s = jobs_seat_locked(j, worker, &jb);
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
    s = jobs_seat_locked(j, worker, &jb);
    alive = s && s->state == SEAT_ALIVE;
    pthread_mutex_unlock(&j->mu);
    return alive;
}
