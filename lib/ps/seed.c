/* seed.c - a reduce partition that lost every copy, created afresh and seeded by its ranks
 * (part.h, "Seeding"; docs/replication.md, "Reduce jobs that lose every copy").
 *
 * In reduce mode the parameters live on the workers; a shard holds only the step's sum and,
 * once every rank pushed, the reduced gradient of the version (the "values"). Ranks are at
 * most one version apart: a rank pushes step v only after it pulled version v of every
 * partition, and version v + 1 needs every rank's push of step v. So when every copy of a
 * partition is lost, each rank still holds version v or v + 1 of it (what it pulled last),
 * and a rank that pulled v + 1 holds its values. A fresh copy waits until every rank said
 * which version it holds (a SEED, or implicitly a push of step v: the rank pulled v); then it
 * is at the newest of them, with the values of a rank that holds it, and the ranks behind
 * pull them as if nothing had happened. The pushes of the step in progress are sent again by
 * ranks that fail over, which they do anyway. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "part_internal.h"
#include "util/proc.h"

#define SEED_WAIT_MS 30000   /* a push to a seeding partition waits this long for every rank */

struct ts_seed {
    uint8_t *said;          /* per rank: reported */
    uint64_t *at;           /* per rank: the version it holds */
    uint32_t nsaid;
    uint64_t top;           /* the newest version reported */
    bool values;            /* p->value holds version top (a rank sent them) */
    bool overflow;          /* version top was a skipped step */
    bool failed;            /* every rank said, and version top's values were not among it */
    uint32_t replicas;      /* the map's copies per partition: what the failure advises */
};

static void seed_free(struct ts_seed *s)
{
    if (s) {
        free(s->said);
        free(s->at);
        free(s);
    }
}

ts_status ts_part_seed_begin(struct ts_part *p, uint32_t replicas, struct ts_err *err)
{
    struct ts_seed *s;

    if (p->job->mode != TS_MODE_REDUCE)
        return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: only a reduce partition is "
                          "seeded by its ranks (mode %s)", p->tensor_id, p->index,
                          ts_mode_name(p->job->mode));
    if (!(s = calloc(1, sizeof(*s))) || !(s->said = calloc(p->job->workers, 1)) ||
        !(s->at = calloc(p->job->workers, sizeof(uint64_t)))) {
        seed_free(s);
        return ts_err_set(err, TS_ENOMEM, "tensor %u partition %u: out of memory", p->tensor_id,
                          p->index);
    }
    s->replicas = replicas;
    pthread_mutex_lock(&p->mu);
    seed_free(p->seed);
    p->seed = s;
    pthread_mutex_unlock(&p->mu);
    return TS_OK;
}

/* Every rank said: the partition is at the newest version reported, and each rank behind it
 * hears at its pull whether that step was skipped. Called with mu held. */
static void seeded(struct ts_part *p)
{
    struct ts_seed *s = p->seed;

    if (!s->values && s->top > 0) {
        for (uint32_t r = 0; r < p->job->workers; r++)
            if (s->at[r] < s->top) {   /* someone needs the values nobody sent */
                s->failed = true;
                pthread_cond_broadcast(&p->cv);
                return;
            }
    }
    if (!s->values)   /* no rank pulls this version again: zero, as a fresh partition */
        memset(p->value, 0, p->len * sizeof(float));
    p->version = p->visible = s->top;
    p->updates = s->top;   /* a reduce job never assigns: every version was an update */
    part_step_reset(p);
    part_marks_clear(p);
    for (uint32_t r = 0; r < p->job->workers; r++)
        p->overflow[r] = s->overflow && s->at[r] < s->top;
    seed_free(s);
    p->seed = NULL;
    pthread_cond_broadcast(&p->cv);
}

/* Rank's report, under mu; values: len floats of its version, or NULL (an implicit report,
 * or a version it holds no values of). Refused, nothing changed, if it contradicts what the
 * others said. */
static ts_status note(struct ts_part *p, uint32_t rank, uint64_t version, const float *values,
                      bool overflow, struct ts_err *err)
{
    struct ts_seed *s = p->seed;
    uint64_t lo = version, hi = version;

    if (rank >= p->job->workers)
        return ts_err_set(err, TS_EINVAL, "rank: %u is not below the job's %u workers", rank,
                          p->job->workers);
    if (s->said[rank] && s->at[rank] == version && (!values || s->values || version < s->top))
        return TS_OK;   /* said already (a worker that failed over twice) */
    for (uint32_t r = 0; r < p->job->workers; r++)
        if (s->said[r] && r != rank) {
            lo = s->at[r] < lo ? s->at[r] : lo;
            hi = s->at[r] > hi ? s->at[r] : hi;
        }
    if (hi - lo > 1)
        return ts_err_set(err, TS_EINVAL, "version: rank %u holds version %" PRIu64 " of tensor "
                          "%u partition %u, but the ranks that said so far hold %" PRIu64
                          "..%" PRIu64 " (they are never more than one version apart)", rank,
                          version, p->tensor_id, p->index, lo, hi);
    if (values && version == s->top && s->values &&
        memcmp(values, p->value, p->len * sizeof(float)))
        return ts_err_set(err, TS_ECORRUPT, "values: rank %u's version %" PRIu64 " of tensor %u "
                          "partition %u differs from another rank's", rank, version,
                          p->tensor_id, p->index);
    if (version > s->top || !s->nsaid) {
        s->top = version;
        s->values = false;
    }
    if (values && version == s->top && !s->values) {
        memcpy(p->value, values, p->len * sizeof(float));
        s->values = true;
        s->overflow = overflow;
    }
    s->nsaid += !s->said[rank];
    s->said[rank] = 1;
    s->at[rank] = version;
    if (s->nsaid == p->job->workers)
        seeded(p);
    return TS_OK;
}

ts_status ts_part_seed(struct ts_part *p, uint32_t rank, uint64_t version, const float *values,
                       bool overflow, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&p->mu);
    if (p->seed && !p->seed->failed)
        st = note(p, rank, version, values, overflow, err);
    pthread_mutex_unlock(&p->mu);
    return st;
}

bool ts_part_seeding(struct ts_part *p)
{
    bool on;

    pthread_mutex_lock(&p->mu);
    on = p->seed != NULL;
    pthread_mutex_unlock(&p->mu);
    return on;
}

void part_seed_drop(struct ts_part *p)
{
    seed_free(p->seed);
    p->seed = NULL;
}

bool part_seed_failed(const struct ts_part *p)
{
    return p->seed->failed;
}

ts_status part_seed_error(const struct ts_part *p, struct ts_err *err)
{
    const struct ts_seed *s = p->seed;

    /* The advice names a replica count the cluster does not run already. */
    if (s->failed && s->replicas <= 1)
        return ts_err_set(err, TS_ESTATE, "tensor %u partition %u lost every copy and no rank "
                          "that pulled its version %" PRIu64 " sent it again: the reduce job "
                          "cannot go on (run with --replicas 2 or more)", p->tensor_id, p->index,
                          s->top);
    if (s->failed)
        return ts_err_set(err, TS_ESTATE, "tensor %u partition %u lost every copy (the cluster "
                          "runs --replicas %u) and no rank that pulled its version %" PRIu64
                          " sent it again: the reduce job cannot go on (run with --replicas "
                          "%u to survive %u shards failing at once)", p->tensor_id, p->index,
                          s->replicas, s->top, s->replicas + 1, s->replicas);
    return ts_err_set(err, TS_ETIMEDOUT, "tensor %u partition %u lost every copy and waits for "
                      "its ranks to say which version they hold: %u of %u did (a worker that "
                      "does not fail over, or is gone, keeps it waiting)", p->tensor_id,
                      p->index, p->seed->nsaid, p->job->workers);
}

ts_status part_seed_push(struct ts_part *p, uint32_t rank, uint64_t step, struct ts_err *err)
{
    int64_t until = ts_now_ms() + SEED_WAIT_MS;
    ts_status st;

    if (!p->seed->failed && (rank >= p->job->workers || !p->seed->said[rank]) &&
        (st = note(p, rank, step, NULL, false, err)))
        return st;
    while (p->seed && !p->seed->failed && !p->moved && ts_now_ms() < until) {
        struct timespec ts;

        ts_abstime_ms(&ts, 100);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    if (p->seed && !p->moved)
        return part_seed_error(p, err);
    return TS_OK;
}
