/* sdk_wait.c - the SDK's waits for a shard's reply: in slices, so that a trainer's interrupt
 * (Ctrl-C in Python: tessera_set_interrupt) ends a step blocked on a missing rank at once, and
 * so that a long wait says what it waits for ("waiting for rank 1") instead of nothing for
 * two minutes (a wait on a shard the master dropped from the map ends as soon as this worker
 * hears of it: sdk_follow_epoch in sdk_failover.c). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

#define WAIT_SAY_MS 5000      /* a wait this long is logged, and again every WAIT_AGAIN_MS */
#define WAIT_AGAIN_MS 15000
#define WAIT_ASK_MS 1000      /* the master's status, for the log: no longer than this */

int tessera_set_interrupt(tessera *t, int (*check)(void *arg), void *arg)
{
    t->wait.interrupt = check;
    t->wait.interrupt_arg = arg;
    return TESSERA_OK;
}

ts_status sdk_usable(const struct tessera *t, struct ts_err *err)
{
    if (!t->wait.interrupted)
        return TS_OK;
    return ts_err_set(err, TS_ECANCELLED, "an interrupted call left replies in flight on this "
                      "handle: close it (tessera_close) and connect again");
}

/* The ranks of the job whose last reported step is below the one waited for, from the
 * master's status: "rank 1 (worker 7, at step 3)", or why it cannot say. */
static void missing_ranks(struct tessera *t, char *out, size_t n)
{
    Tessera__V1__ClusterStatusResponse *cs = NULL;
    struct ts_err e = { 0 };
    size_t at = 0;

    snprintf(out, n, "the other ranks (the master's status did not say which)");
    if (!t->master || ts_master_status(t->master, WAIT_ASK_MS, &cs, &e))
        return;
    for (size_t j = 0; j < cs->n_jobs; j++) {
        const Tessera__V1__JobInfo *job = cs->jobs[j];
        if (strcmp(job->id, t->job.id) != 0 ||
            job->state != TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING)
            continue;
        for (size_t r = 0; r < job->n_slot_owners && at < n - 1; r++) {
            uint32_t id = job->slot_owners[r];
            const Tessera__V1__WorkerInfo *w = NULL;
            if (r == t->rank)
                continue;
            for (size_t k = 0; id && k < cs->n_workers && !w; k++)
                if (cs->workers[k]->id == id)
                    w = cs->workers[k];
            if (w && w->clock > t->wait.step)
                continue;   /* it pushed this step already */
            if (!w)
                at += (size_t)snprintf(out + at, n - at, "%srank %zu (never registered)",
                                       at ? ", " : "", r);
            else
                at += (size_t)snprintf(out + at, n - at, "%srank %zu (worker %u on %s pid %u, "
                                       "last at step %" PRIu64 ")", at ? ", " : "", r, id,
                                       w->host, w->pid, w->clock);
        }
    }
    if (!at && cs->n_jobs)
        snprintf(out, n, "the shards (every rank reported this step)");
    protobuf_c_message_free_unpacked(&cs->base, NULL);
}

ts_status sdk_wait_tick(struct tessera *t, int64_t start, int64_t *said, const char *what,
                        struct ts_err *err)
{
    int64_t now = ts_now_ms();

    if (t->wait.interrupt && t->wait.interrupt(t->wait.interrupt_arg)) {
        t->wait.interrupted = true;
        return ts_err_set(err, TS_ECANCELLED, "interrupted while waiting for %s (step %" PRIu64
                          ")", what, t->wait.step);
    }
    if (now - start >= WAIT_SAY_MS && (!*said || now - *said >= WAIT_AGAIN_MS)) {
        char who[512];
        missing_ranks(t, who, sizeof(who));
        ts_log(TS_WARN, "sdk", "job '%s' step %" PRIu64 ": waiting %.0f s for %s", t->job.id,
               t->wait.step, (double)(now - start) / 1e3, who);
        *said = now;
    }
    return TS_OK;
}

ts_status sdk_recv(struct tessera *t, uint32_t s, struct ts_frame_hdr *h, void *buf, size_t cap,
                   uint32_t tensor, uint32_t part, struct ts_err *err)
{
    int64_t start = ts_now_ms(), said = 0;

    for (;;) {
        int64_t now = ts_now_ms(), left = start + t->timeout_ms - now;
        int slice = (int)(left < SDK_WAIT_SLICE_MS ? (left > 0 ? left : 0) : SDK_WAIT_SLICE_MS);
        ts_status st = ts_frame_recv(t->conns.shards[s].conn, h, buf, cap, slice, err);
        char what[32];

        if (st != TS_ETIMEDOUT)
            return st;
        if (ts_now_ms() - start >= t->timeout_ms)
            return ts_err_set(err, TS_ETIMEDOUT, "shard %u: no reply for tensor %u partition %u "
                              "within %d ms (the step waits for every rank's push: is one "
                              "stopped? timeout_ms sets the wait)", t->conns.shards[s].id, tensor,
                              part, t->timeout_ms);
        memset(err, 0, sizeof(*err));
        if (t->wait.pipe_busy)   /* a reader thread of sdk_pipe.c: the caller's thread ticks */
            continue;
        snprintf(what, sizeof(what), "shard %u", t->conns.shards[s].id);
        if ((st = sdk_wait_tick(t, start, &said, what, err)))
            return st;
        if (t->conns.shards[s].left_epoch)   /* its connection was shut down: say why */
            return ts_err_set(err, TS_EUNAVAIL, "shard %u left the shard map (epoch %" PRIu64
                              ") while this worker waited for its reply for tensor %u "
                              "partition %u", t->conns.shards[s].id,
                              (uint64_t)t->conns.shards[s].left_epoch, tensor, part);
    }
}
