/* sdk_work.c - the SDK's side of the master's schedule (docs/scheduler.md): claiming the next
 * units of an ASP job's data from the master's queue (services/master/workq.h), waiting out a
 * master that restarts; and the priority tasks the master hands this worker
 * (services/master/tasks.h). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/proc.h"

/* How long a claim waits for a master that is down, restarting or forgot this worker. */
#define CLAIM_WAIT_MS 60000
#define CLAIM_RETRY_MS 200

/* master "local": one worker, every unit its own, in order (unit u is step u). */
static void claim_local(uint64_t step, uint32_t want, uint64_t units, struct tessera_work *out)
{
    uint64_t left = step < units ? units - step : 0;

    *out = (struct tessera_work){ .first = step, .step = step, .units = units,
                                  .count = (uint32_t)(want < left ? want : left),
                                  .done = step < units ? step : units };
    out->outstanding = out->count;
}

int tessera_claim_work(tessera *t, uint64_t step, uint32_t want, uint64_t units,
                       struct tessera_work *out, struct tessera_error *e)
{
    Tessera__V1__ClaimWorkResponse *r = NULL;
    struct ts_err err = { 0 };
    int64_t until = ts_now_ms() + CLAIM_WAIT_MS;
    ts_status st;

    if (t->job.mode != TS_MODE_ASP) {
        ts_err_set(&err, TS_ENOTSUP, "dynamic assignment: job '%s' is %s; it takes mode asp, "
                   "or ssp with tessera_options.dynamic set (the queue bounds staleness then; "
                   "bsp: use balance)", t->job.id, ts_mode_name(t->job.mode));
        return sdk_fail(e, &err);
    }
    if (t->local) {
        claim_local(step, want, units, out);
        return sdk_ok(e);
    }
    for (;;) {
        ts_err_clear(&err);
        st = ts_membership_claim(t->ms, step, want, units, t->dynamic_ssp, t->ssp_staleness,
                                 &r, &err);
        /* Down or restarting (UNAVAILABLE), or restarted without this registration (NOT_FOUND:
         * the heartbeat registers it again): wait, saying so once. */
        if ((st != TS_EUNAVAIL && st != TS_ENOTFOUND) || ts_now_ms() > until)
            break;
        if (st == TS_ENOTFOUND && ts_membership_beat(t->ms, &(struct ts_err){ 0 }))
            ts_log(TS_DEBUG, "sdk", "claim: registering again");
        if (until - ts_now_ms() > CLAIM_WAIT_MS - CLAIM_RETRY_MS - 50)
            ts_log(TS_WARN, "sdk", "claim of job %s's units: %s; trying again for up to %d s",
                   t->job.id, err.msg, CLAIM_WAIT_MS / 1000);
        ts_sleep_ms(CLAIM_RETRY_MS);
    }
    if (st)
        return sdk_fail(e, &err);
    *out = (struct tessera_work){ .first = r->first, .step = r->clock, .count = r->count,
                                  .units = r->units, .done = r->done,
                                  .outstanding = r->outstanding, .lost = r->lost,
                                  .retry = r->retry, .pull = r->pull };
    tessera__v1__claim_work_response__free_unpacked(r, NULL);
    return sdk_ok(e);
}

int tessera_next_task(tessera *t, struct tessera_task *task)
{
    struct ts_task k;

    if (t->local || !t->ms || !ts_membership_task(t->ms, &k))
        return 0;
    *task = (struct tessera_task){ k.id, k.kind };
    return 1;
}

int tessera_task_done(tessera *t, const struct tessera_task_result *r,
                      struct tessera_error *e)
{
    Tessera__V1__TaskInfo info = TESSERA__V1__TASK_INFO__INIT;
    const char *fp = r->fingerprint ? r->fingerprint : "";
    struct ts_err err = { 0 };

    if (!r->id)
        ts_err_set(&err, TS_EINVAL, "id: 0; want the id tessera_next_task gave");
    else if (!r->failed && !(r->accuracy >= 0 && r->accuracy <= 1))
        ts_err_set(&err, TS_EINVAL, "accuracy: %g; want 0..1", r->accuracy);
    else if (!r->failed && !(r->loss >= 0 && isfinite(r->loss)))
        ts_err_set(&err, TS_EINVAL, "loss: %g; want a finite loss >= 0", r->loss);
    else if (fp[0] && (strlen(fp) != 64 || strspn(fp, "0123456789abcdef") != 64))
        ts_err_set(&err, TS_EINVAL, "fingerprint: want 64 lowercase hex digits or NULL");
    if (err.code)
        return sdk_fail(e, &err);
    if (t->local || !t->ms)
        return sdk_ok(e);
    info.id = r->id;
    info.state = r->failed ? TESSERA__V1__TASK_STATE__TASK_STATE_FAILED
                           : TESSERA__V1__TASK_STATE__TASK_STATE_DONE;
    info.step = r->step;
    info.accuracy = r->accuracy;
    info.loss = r->loss;
    info.fingerprint = (char *)fp;
    info.error = (char *)(r->error ? r->error : "");
    ts_membership_task_done(t->ms, &info);
    return sdk_ok(e);
}
