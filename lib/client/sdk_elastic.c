/* sdk_elastic.c - the SDK's side of elastic jobs (docs/elastic.md): the slots this worker
 * computes, the copy of a step's parameters it recomputes from when a dead worker's slot
 * comes to it mid-step, finding the step to go on from after the slots changed hands, and
 * telling the master when a worker that joined or came back caught up.
 *
 * Why a copy: a partition moves to the next version as soon as every slot's push is in, and
 * a bsp shard keeps only the newest values. When a worker dies after pushing some partitions
 * of a step, those may be at the next version already, while the slot's owner-to-be still
 * has to compute the dead worker's gradient of that step, from that step's values. So each
 * step's values are copied before the step is sent (one memcpy of the parameters), and the
 * parameters are pulled into the worker's own pages rather than mapped from a shard, where
 * they would change under the computation. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/proc.h"

/* Rounds of pulls to find a version that no partition is past (each waits for the step under
 * way), before giving up: the job moves a step per round at most. */
#define CATCH_UP_TRIES 1000

size_t tessera_slots(tessera *t, uint32_t *slots, size_t max)
{
    uint64_t roster;
    size_t n = 0;

    if (t->elastic && t->ms)
        n = ts_membership_slots(t->ms, &roster, slots, max);
    if (!n && max) {   /* before the master said otherwise: its own rank's */
        slots[0] = t->rank;
        n = 1;
    }
    return n;
}

/* The median of the ring: one slow step (rank 0's evaluation at an epoch's end, a page
 * fault storm) does not move slots. */
static double median(const double *v, unsigned n)
{
    double s[5];

    for (unsigned i = 0; i < n; i++) {   /* insertion sort: five at most */
        unsigned k = i;
        for (; k && s[k - 1] > v[i]; k--)
            s[k] = s[k - 1];
        s[k] = v[i];
    }
    return n ? s[n / 2] : 0;
}

void sdk_elastic_measure(struct tessera *t, size_t n)
{
    unsigned ring = sizeof(t->el.busy_s) / sizeof(t->el.busy_s[0]);
    double m;

    if (!t->elastic || !t->ms || !t->el.busy_from_ns || !n)
        return;
    t->el.busy_s[t->el.nbusy++ % ring] =
        (double)(ts_now_ns() - t->el.busy_from_ns) / 1e9 / (double)n;
    t->el.busy_from_ns = 0;
    m = median(t->el.busy_s, t->el.nbusy < ring ? t->el.nbusy : ring);
    if (m > 0)   /* the master takes at most an hour a slot */
        ts_membership_set_speed(t->ms, m < 3600 ? m : 3600, (uint32_t)n);
}

void sdk_elastic_done(struct tessera *t, ts_status st)
{
    t->el.busy_from_ns = !st || st == TS_ESLOTS ? ts_now_ns() : 0;
}

ts_status sdk_elastic_keep(struct tessera *t, float *const *params, struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        if (!x->prev && !(x->prev = malloc(x->numel * sizeof(float) + 1)))
            return ts_err_set(err, TS_ENOMEM, "tensor '%s': no memory for a copy of its "
                              "values (elastic jobs keep one)", x->name);
        memcpy(x->prev, params[i], x->numel * sizeof(float));
    }
    return TS_OK;
}

ts_status sdk_elastic_check(struct tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                            struct ts_err *err)
{
    uint32_t mine[TS_JOB_MAX_WORKERS];
    uint64_t roster;
    size_t m = ts_membership_slots(t->ms, &roster, mine, TS_JOB_MAX_WORKERS);

    for (size_t i = 0; i < m; i++) {
        size_t k = 0;
        while (k < n && slots[k] != mine[i])
            k++;
        if (k == n) {
            t->rec.resume_step = step;
            return ts_err_set(err, TS_ESLOTS, "step %" PRIu64 ": slot %u is this worker's now "
                              "(roster %" PRIu64 " of job '%s'); this worker computes the step "
                              "again with it", step, mine[i], roster, t->job.id);
        }
    }
    return TS_OK;
}

/* Pulls every tensor at one version from `from` on, the first that no partition is past,
 * into params; *at receives it. */
static ts_status catch_up(struct tessera *t, uint64_t from, float *const *params, uint64_t *at,
                          struct ts_err *err)
{
    uint64_t v = from;
    ts_status st;

    for (int k = 0; k < CATCH_UP_TRIES; k++) {
        t->newest = 0;
        /* The map may move under the pull (a shard that died, or came back and joined while
         * this worker was away): fail over as a step does. Not doing so ended a job whose
         * worker met a shard demoted to a replica here ("not the head of its chain"). */
        st = sdk_pull_all_over(t, "catch-up pull at step", v, v, params, err);
        if (st == TS_ESLOTS) {   /* woken again: learn the slots, pull again */
            if ((st = sdk_master_beat(t, NULL, err)))
                return st;
            continue;
        }
        if (st)
            return st;
        if (t->newest <= v) {
            *at = v;
            return TS_OK;
        }
        v = t->newest;
    }
    return ts_err_set(err, TS_ETIMEDOUT, "job '%s': %d rounds of pulls found no step that the "
                      "partitions agree on (from %" PRIu64 " to %" PRIu64 ")", t->job.id,
                      CATCH_UP_TRIES, from, v);
}

/* catch_up, then tells the master so: a worker that came for a rank whose slot a live worker
 * holds gets the slot only then, because a new owner must hold the values of the step under
 * way, and a process that just started or was away does not (docs/elastic.md, "Coming
 * back"). */
static ts_status rejoin(struct tessera *t, uint64_t from, float *const *params, uint64_t *at,
                        struct ts_err *err)
{
    unsigned reg = ts_membership_registrations(t->ms);   /* elastic: never local */
    ts_status st = catch_up(t, from, params, at, err);

    t->el.registrations_seen = reg;   /* registered again meanwhile: the next recovery sees it */
    if (st)
        return st;
    /* A test hook: test_master_restart.py kills the master here. */
    sdk_test_hold("TESSERA_TEST_HOLD_JOIN", "the join");
    return sdk_master_beat(t, &reg, err);
}

ts_status sdk_elastic_recover(struct tessera *t, uint64_t step, float *const *params, bool held,
                              struct ts_err *err)
{
    unsigned was = ts_membership_registrations(t->ms);
    uint64_t at = step, newest = t->newest;
    const char *why;
    ts_status st;

    if ((st = sdk_master_beat(t, NULL, err)))   /* the slots as the master has them now */
        return st;
    if (ts_membership_registrations(t->ms) != was || t->el.registrations_seen != was) {
        /* Declared dead while it was away (stopped, or cut off): others did its slots. */
        why = "this worker was declared dead and joined again";
        ts_log(TS_WARN, "sdk", "step %" PRIu64 ": %s, as worker %u", step, why,
               ts_membership_id(t->ms));
        if (!(st = sdk_hello_or_remap(t, err)))
            st = rejoin(t, step, params, &at, err);
    } else if (newest > step + 1) {
        why = "the job went on without this worker";
        st = catch_up(t, newest, params, &at, err);
    } else {
        why = "a worker died or came back";
        for (int i = 0; !held && i < t->ntensors; i++)
            memcpy(params[i], t->tensors[i]->prev, t->tensors[i]->numel * sizeof(float));
    }
    if (st)
        return st;
    t->rec.resume_step = at;
    return ts_err_set(err, TS_ESLOTS, "step %" PRIu64 ": the slots of job '%s' changed hands "
                      "(%s); training goes on from step %" PRIu64 ", with this worker's "
                      "slots as they are now", step, t->job.id, why, at);
}

int tessera_elastic_recover(tessera *t, uint64_t step, float *const *params,
                            struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st;

    if (!t->elastic || !t->ms)
        st = ts_err_set(&err, TS_EINVAL, "job '%s' is not elastic: no slot changes hands",
                        t->job.id);
    else if (!params)
        st = ts_err_set(&err, TS_EINVAL, "params: required (by tensor id)");
    else
        st = sdk_elastic_recover(t, step, params, true, &err);
    return st && st != TS_ESLOTS ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_join(tessera *t, float *const *params, uint64_t *step, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    uint64_t v = 0;
    ts_status st;

    for (int i = 0; i < t->ntensors; i++)
        if (t->tensors[i]->version > v)
            v = t->tensors[i]->version;
    if (t->elastic) {
        st = rejoin(t, v, params, step, &err);
    } else {
        *step = v;
        st = sdk_pull_all(t, v, params, &err);
    }
    return st ? sdk_fail(e, &err) : sdk_ok(e);
}
