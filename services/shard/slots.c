/* slots.c - the shard's part in elastic jobs (docs/elastic.md): telling a job's workers that
 * its slots changed hands, and telling the master that a worker hung up.
 *
 * A worker waiting in a pull for a step that needs a dead worker's slot would wait forever:
 * the live worker that takes the slot must first hear of it, and its own connection is the
 * one blocked. So when the slots of a job change hands (the master's roster grows, heard in
 * this shard's heartbeat, or this shard saw a worker hang up), every connection of the job is
 * woken: its waiting pull, and every pull after it until the worker's next push, is answered
 * TS_ESLOTS; the worker asks the master for its slots and sends the step again. An extra wake
 * costs a worker one more round trip; a missed one would cost the job, so wakes are counted
 * per connection and a pull compares counts before it waits. */
#include "dp_internal.h"

#include <stdio.h>
#include <string.h>

#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

/* Whether the job's slots moved since this connection last looked (or `again`); if so, takes
 * the wake: its count seen, the cancel bit cleared. */
static bool take_wake(struct dp_conn *dc, bool again)
{
    unsigned w = atomic_load(&dc->wakes);

    if (!again && w == dc->wakes_seen)
        return false;
    dc->wakes_seen = w;
    atomic_fetch_and(&dc->cancel, ~DP_CANCEL_WAKE);
    return true;
}

ts_status dp_slots_moved(struct dp_conn *dc, struct ts_err *err)
{
    if (!take_wake(dc, dc->reslot))
        return TS_OK;
    dc->reslot = true;
    return ts_err_set(err, TS_ESLOTS, "job '%s': its slots changed hands (a worker died or came "
                      "back): ask the master for this worker's slots and send the step again",
                      dc->job ? dc->job->job.id : "?");
}

ts_status dp_slots_woken(struct dp_conn *dc, struct ts_err *err)
{
    if (!take_wake(dc, false))
        return TS_OK;
    return ts_err_set(err, TS_ESLOTS, "job '%s': its slots changed hands (a worker died or came "
                      "back) while this pull of rows waited: ask the master for this worker's "
                      "slots and compute the step again", dc->job ? dc->job->job.id : "?");
}

bool dp_slots_rewait(struct dp_conn *dc)
{
    if (atomic_load(&dc->cancel) & DP_CANCEL_END)
        return false;
    atomic_fetch_and(&dc->cancel, ~DP_CANCEL_WAKE);
    return true;
}

/* Wakes every connection of job whose roster is below roster (every one: roster 0); dp->mu
 * held (the list of connections). */
static void wake(struct dataplane *dp, const char *job, uint64_t roster)
{
    pthread_mutex_lock(&dp->id_mu);
    for (struct dp_conn *dc = dp->conns; dc; dc = dc->next) {
        uint64_t had = atomic_load(&dc->roster);
        if (strcmp(dc->job_id, job) != 0 || (roster && had >= roster))
            continue;
        if (roster)
            atomic_store(&dc->roster, roster);
        atomic_fetch_add(&dc->wakes, 1);   /* before the bit: dp_slots_moved */
        atomic_fetch_or(&dc->cancel, DP_CANCEL_WAKE);
    }
    pthread_mutex_unlock(&dp->id_mu);
}

void dataplane_roster(struct dataplane *dp, const char *job, uint64_t roster)
{
    if (!roster)
        return;
    dp_access_roster(dp->access, job, roster);   /* before the wake: pushes ask again */
    pthread_mutex_lock(&dp->mu);
    wake(dp, job, roster);
    pthread_mutex_unlock(&dp->mu);
}

bool dp_slots_peer_gone(struct dp_conn *dc, void *buf, size_t cap)
{
    int64_t until = ts_now_ms() + DP_GONE_MS;

    while (ts_now_ms() < until && !atomic_load(&dc->dp->stop)) {
        struct ts_frame_hdr h;
        struct ts_err e = { 0 };
        ts_status st = ts_frame_recv(dc->c, &h, buf, cap, 50, &e);
        if (st == TS_EUNAVAIL)
            return true;
        if (st && st != TS_ETIMEDOUT)
            return false;
        dc->bye |= !st && h.type == TS_FRAME_BYE;
    }
    return false;
}

void dp_slots_lost(struct dp_conn *dc)
{
    struct dataplane *dp = dc->dp;
    struct ts_cluster *cl = atomic_load(&dp->cluster);
    struct ts_membership *ms;
    char job[TS_JOB_ID_MAX + 1];

    if (!dc->worker || dc->bye || !dc->job)
        return;
    /* Gone silent (a link cut, its host gone: the liveness timeout), not closed: nothing is
     * known of the worker's process, whose heartbeats the master may well hear. Its lease
     * decides, not this connection (docs/elastic.md). */
    if (dc->c->silent) {
        ts_log(TS_WARN, "dataplane", "worker %u of job %s went silent (no answer within %d "
               "ms): its lease decides whether it is dead", dc->worker, dc->job->job.id,
               TS_TP_LIVENESS_MS);
        return;
    }
    snprintf(job, sizeof(job), "%s", dc->job->job.id);
    ms = atomic_load(&dp->membership);
    if (ms && ts_membership_registrations(ms) != dc->registration) {
        /* Begun before this shard was declared dead and registered again (a stalled shard
         * woken): its workers dropped it on purpose, and may say goodbye to it no more. */
        ts_log(TS_WARN, "dataplane", "worker %u of job %s hung up on a connection begun before "
               "this shard registered again: not reported (its lease decides)", dc->worker,
               job);
    } else {
        ts_log(TS_WARN, "dataplane", "worker %u of job %s hung up without a goodbye: telling "
               "the master", dc->worker, job);
        /* The master first, so that the workers woken next find the new slots there. */
        if (cl)
            ts_cluster_report_worker(cl, dc->worker, atomic_load(&dp->self), dc->hello_epoch,
                                     "its data-plane connection hung up");
    }
    /* dataplane_stop holds mu while it joins this thread: give way to it. */
    while (pthread_mutex_trylock(&dp->mu)) {
        if (atomic_load(&dp->stop))
            return;
        ts_sleep_ms(1);
    }
    wake(dp, job, 0);
    pthread_mutex_unlock(&dp->mu);
}
