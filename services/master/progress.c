/* progress.c - see progress.h. */
#include "progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/names.h"

struct series {
    char id[TS_JOB_ID_MAX + 1];   /* "": free */
    int64_t heard_ms;
    size_t n;
    struct progress_point pt[PROGRESS_POINTS];
};

struct progress {
    pthread_mutex_t mu;
    struct series jobs[PROGRESS_JOBS];
};

struct progress *progress_create(void)
{
    struct progress *p = calloc(1, sizeof(*p));

    if (p)
        pthread_mutex_init(&p->mu, NULL);
    return p;
}

void progress_free(struct progress *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* job's series, or a free one (else the one heard from longest ago) made job's. mu held. */
static struct series *series_of(struct progress *p, const char *job)
{
    struct series *oldest = &p->jobs[0];

    for (size_t i = 0; i < PROGRESS_JOBS; i++) {
        if (!strcmp(p->jobs[i].id, job))
            return &p->jobs[i];
        if (!p->jobs[i].id[0] || (oldest->id[0] && p->jobs[i].heard_ms < oldest->heard_ms))
            oldest = &p->jobs[i];
    }
    memset(oldest, 0, sizeof(*oldest));
    snprintf(oldest->id, sizeof(oldest->id), "%s", job);
    return oldest;
}

void progress_note(struct progress *p, const char *job, const struct progress_point *pt,
                   int64_t now_ms)
{
    struct series *s;

    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    s = series_of(p, job);
    s->heard_ms = now_ms;
    while (s->n && s->pt[s->n - 1].step > pt->step)   /* went back: a rollback */
        s->n--;
    if (s->n && s->pt[s->n - 1].step == pt->step) {
        s->pt[s->n - 1] = *pt;   /* the same step heard again */
    } else {
        if (s->n == PROGRESS_POINTS) {   /* keep every other point */
            for (size_t i = 0; i < PROGRESS_POINTS / 2; i++)
                s->pt[i] = s->pt[2 * i + 1];
            s->n = PROGRESS_POINTS / 2;
        }
        s->pt[s->n++] = *pt;
    }
    pthread_mutex_unlock(&p->mu);
}

bool progress_last(struct progress *p, const char *job, struct progress_point *pt,
                   int64_t *heard_ms)
{
    bool found = false;

    if (!p)
        return false;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < PROGRESS_JOBS && !found; i++) {
        const struct series *s = &p->jobs[i];
        if (s->n && !strcmp(s->id, job)) {
            *pt = s->pt[s->n - 1];
            *heard_ms = s->heard_ms;
            found = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

void progress_json(struct progress *p, const char *job, struct ts_json *j)
{
    ts_json_arr(j, "points");
    if (p) {
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < PROGRESS_JOBS; i++) {
            const struct series *s = &p->jobs[i];
            if (strcmp(s->id, job))
                continue;
            for (size_t k = 0; k < s->n; k++) {
                ts_json_arr(j, NULL);
                ts_json_uint(j, NULL, s->pt[k].step);
                ts_json_num(j, NULL, s->pt[k].loss);
                ts_json_num(j, NULL, s->pt[k].accuracy);
                ts_json_num(j, NULL, s->pt[k].samples_per_s);
                ts_json_end(j);
            }
        }
        pthread_mutex_unlock(&p->mu);
    }
    ts_json_end(j);
}
