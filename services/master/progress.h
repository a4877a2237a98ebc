/* progress.h - each job's training progress as its rank 0 reports it in heartbeats, for the
 * master's status page (page.c; docs/observability.md).
 *
 * A job keeps at most PROGRESS_POINTS points (step, loss, accuracy, samples/s); when full,
 * every other point goes, so the whole run stays plotted at half the resolution. At most
 * PROGRESS_JOBS jobs: a new one takes the place of the one heard from longest ago.
 * Ownership: progress_create returns a store freed with progress_free; fixed memory.
 * Threads: every call locks. */
#ifndef TS_MASTER_PROGRESS_H
#define TS_MASTER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "util/json.h"

#define PROGRESS_POINTS 512
#define PROGRESS_JOBS 32

struct progress_point {
    uint64_t step;
    double loss, accuracy, samples_per_s;   /* accuracy NaN: none at that step */
};

struct progress;

struct progress *progress_create(void);   /* NULL: out of memory (the page shows none) */
void progress_free(struct progress *p);
/* A report of job's rank 0 (p NULL: nothing). A step below the last point's is a job that
 * went back (a rollback): the points past it go. */
void progress_note(struct progress *p, const char *job, const struct progress_point *pt,
                   int64_t now_ms);
/* job's last point into *pt and when it was heard into *heard_ms; false: none. */
bool progress_last(struct progress *p, const char *job, struct progress_point *pt,
                   int64_t *heard_ms);
/* job's points as the member "points" of j's current object: [[step, loss, accuracy,
 * samples_per_s], ...] (none: []). */
void progress_json(struct progress *p, const char *job, struct ts_json *j);

#endif
