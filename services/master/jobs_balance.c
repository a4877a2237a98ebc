/* jobs_balance.c - the job table's side of balance (docs/scheduler.md): the workers' measured
 * speeds and moving slots by them. The schedule itself is schedule.c's. Also the start
 * deadline (docs/elastic.md), the other reason slots move between live workers without a
 * death: the slot of a rank that never came. */
#include "jobs_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "util/log.h"

bool jobs_rebalance_locked(struct job *jb, double min_gain)
{
    struct sched_seat *v = malloc((jb->nseats + 1) * sizeof(*v));
    uint32_t *was = malloc((jb->info.workers + 1) * sizeof(*was));
    struct sched_move mv[8];
    size_t n = 0, moved;
    double before;

    if (!v || !was) {
        free(v);
        free(was);
        return false;
    }
    memcpy(was, jb->owners, jb->info.workers * sizeof(*was));
    for (size_t s = 0; s < jb->nseats; s++)
        if (jobs_seat_ready(&jb->seats[s]))
            v[n++] = (struct sched_seat){ jb->seats[s].worker, jb->seats[s].rank,
                                          jb->seats[s].slot_s };
    before = sched_makespan(jb->owners, jb->info.workers, v, n);
    moved = sched_balance(jb->owners, jb->info.workers, v, n, min_gain, mv, 8);
    for (size_t k = 0; k < moved && k < 8; k++)
        ts_log(TS_INFO, "master", "job %s: balance: slot %u moves from worker %u to worker %u",
               jb->info.id, mv[k].slot, mv[k].from, mv[k].to);
    if (moved)
        ts_log(TS_INFO, "master", "job %s: balance: %zu slot(s) moved; predicted step %.1f ms, "
               "was %.1f ms", jb->info.id, moved,
               1e3 * sched_makespan(jb->owners, jb->info.workers, v, n), 1e3 * before);
    jb->info.balanced += (uint32_t)moved;
    for (uint32_t k = 0; k < jb->info.workers; k++) {   /* the past of the slots that moved */
        uint32_t now = jb->owners[k];
        if (now != was[k]) {
            jb->owners[k] = was[k];
            jobs_owner_set(jb, k, now);
        }
    }
    free(v);
    free(was);
    return moved > 0;
}

void jobs_balance(struct jobs *j, uint32_t worker)
{
    struct job *jb;

    pthread_mutex_lock(&j->mu);
    if (jobs_seat_locked(j, worker, &jb) && jb->info.state == JOB_RUNNING && jb->info.elastic &&
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
    if ((s = jobs_seat_locked(j, worker, &jb)) && jb->info.state == JOB_RUNNING) {
        if ((uint64_t)slots > jb->info.workers) {
            st = ts_err_set(err, TS_EINVAL, "speed_slots: %" PRId64 ", but job '%s' has %u "
                            "slots; want 1..%u", slots, jb->info.id, jb->info.workers,
                            jb->info.workers);
        } else {
            s->slot_s = slot_s;
            if (jb->info.balance && now_ms - jb->balanced_ms >= JOBS_BALANCE_MS &&
                s->state == SEAT_ALIVE && jobs_rebalance_locked(jb, JOBS_BALANCE_GAIN)) {
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
                jobs_reslot_locked(jb);
                break;
            }
    }
    pthread_mutex_unlock(&j->mu);
}
