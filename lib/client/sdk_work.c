/* sdk_work.c - the SDK's side of the master's schedule (docs/scheduler.md): claiming the next
 * units of an ASP job's data from the master's queue (services/master/workq.h), waiting out a
 * master that restarts (sdk_master_again, which the data check and the elastic heartbeats use
 * too); and the priority tasks the master hands this worker (services/master/tasks.h). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/proc.h"

/* How long a call waits for a master that is down, restarting or forgot this worker. */
#define MASTER_WAIT_MS 60000
#define MASTER_RETRY_MS 200

struct sdk_master_wait sdk_master_wait(void)
{
    return (struct sdk_master_wait){ .until = ts_now_ms() + MASTER_WAIT_MS };
}

bool sdk_master_again(struct tessera *t, ts_status st, bool notfound, struct sdk_master_wait *w,
                      const char *what, const struct ts_err *err)
{
    if ((st != TS_EUNAVAIL && (st != TS_ENOTFOUND || !notfound)) || ts_now_ms() > w->until)
        return false;
    if (st == TS_ENOTFOUND && t->ms && ts_membership_beat(t->ms, &(struct ts_err){ 0 }))
        ts_log(TS_DEBUG, "sdk", "%s: registering again", what);
    if (!w->warned)
        ts_log(TS_WARN, "sdk", "%s: %s; trying again for up to %d s", what, err->msg,
               MASTER_WAIT_MS / 1000);
    w->warned = true;
    ts_sleep_ms(MASTER_RETRY_MS);
    return true;
}

ts_status sdk_master_beat(struct tessera *t, const unsigned *caught_up, struct ts_err *err)
{
    struct sdk_master_wait w = sdk_master_wait();
    ts_status st;

    do {
        ts_err_clear(err);
        st = caught_up ? ts_membership_caught_up(t->ms, *caught_up, err)
                       : ts_membership_beat(t->ms, err);
    } while (sdk_master_again(t, st, false, &w, caught_up ? "caught-up heartbeat" : "heartbeat",
                              err));
    return st;
}

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
    struct sdk_master_wait w = sdk_master_wait();
    char what[TS_JOB_ID_MAX + 32];
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
    snprintf(what, sizeof(what), "claim of job %s's units", t->job.id);
    do {   /* down or restarting, or restarted without this registration: wait */
        ts_err_clear(&err);
        st = ts_membership_claim(t->ms, step, want, units, t->dynamic_ssp, t->ssp_staleness,
                                 &r, &err);
    } while (sdk_master_again(t, st, true, &w, what, &err));
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
