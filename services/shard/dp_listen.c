/* dp_listen.c - the data plane's listeners and connection threads: one listener per transport
 * that can run here (or the one --transport names), an accept thread each, one thread per
 * connection that receives frames and hands them to dp_conn_serve (dataplane.c), and the
 * joining of connections that ended (reap). Start, stop and the per-transport counts that
 * `tessera status` shows are here too. */
#include "dp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_prefetch.h"
#include "testhooks.h"
#include "transport/frame.h"
#include "util/hook.h"
#include "util/log.h"
#include "util/proc.h"

#define ACCEPT_POLL_MS 200

/* A receive buffer of cap bytes (dp_guard_cap): once the connection is trusted TS_FRAME_MAX
 * bytes, whose pages are touched only as frames need them; before, a small one. */
static void *buffer_for(size_t cap, void **big, void *small)
{
    if (cap <= DP_UNTRUSTED_FRAME)
        return small;
    if (!*big)
        *big = malloc(TS_FRAME_MAX);
    return *big;
}

static void *conn_main(void *arg)
{
    struct dp_conn *dc = arg;
    struct dataplane *dp = dc->dp;
    void *big = NULL;
    _Alignas(8) char small[DP_UNTRUSTED_FRAME];
    bool hung_up = false;

    while (!atomic_load(&dp->stop) && !dp_guard_expired(dc)) {
        struct ts_frame_hdr h;
        struct ts_err err = { 0 };
        const void *in = NULL;
        size_t cap = dp_guard_cap(dc);
        void *buf = buffer_for(cap, &big, small);
        ts_status st = buf ? ts_frame_recv_view(dc->c, &h, buf, cap, 1000, &in, &err)
                           : ts_err_set(&err, TS_ENOMEM, "no memory for a receive buffer");

        if (st == TS_ETIMEDOUT)
            continue;
        if (st == TS_ECORRUPT) {
            struct ts_frame_hdr none = { 0 };
            dp_refuse_frame(dc, &err);
            dp_reply_error(dc->c, &none, &err);
            break;
        }
        if (st) {  /* the worker went away, the shard is stopping, or no memory */
            hung_up = st == TS_EUNAVAIL && !atomic_load(&dc->cut);
            break;
        }
        if (!dp_conn_serve(dc, &h, in, buf, cap, &hung_up))
            break;
    }
    dp_conn_end(dc, hung_up);
    free(big);
    return NULL;
}

/* Joins connections whose thread has ended. Called with dp->mu held. */
static void reap(struct dataplane *dp, bool all)
{
    struct dp_conn **pp = &dp->conns;

    while (*pp) {
        struct dp_conn *dc = *pp;
        if (!all && !atomic_load(&dc->done)) {
            pp = &dc->next;
            continue;
        }
        if (all)
            ts_tp_interrupt(dc->c);
        pthread_join(dc->thread, NULL);
        atomic_fetch_add(&dp->closed_in, dc->c->frames_in);
        atomic_fetch_add(&dp->closed_refused, dc->c->frames_refused);
        ts_tp_close(dc->c);
        *pp = dc->next;
        free(dc);
    }
}

/* Logs a failed accept (one peer's: refused, silent, a bad hello) at most once a second, so
 * that a local process connecting in a loop cannot flood the log; the line after a quiet
 * spell says how many were left out. Accept thread only. */
static void accept_failed(const struct dp_listener *dl, const struct ts_err *err,
                          int64_t *next_ms, unsigned *left_out)
{
    int64_t now = ts_now_ms();

    if (now < *next_ms) {
        (*left_out)++;
        return;
    }
    if (*left_out)
        ts_log(TS_WARN, "dataplane", "%s: accept: %s (%u earlier failures not shown)",
               ts_tp_listener_name(dl->l), err->msg, *left_out);
    else
        ts_log(TS_WARN, "dataplane", "%s: accept: %s", ts_tp_listener_name(dl->l), err->msg);
    *next_ms = now + 1000;
    *left_out = 0;
}

static void *accept_main(void *arg)
{
    struct dp_listener *dl = arg;
    struct dataplane *dp = dl->dp;
    int64_t log_next = 0;
    unsigned left_out = 0;

    while (!atomic_load(&dp->stop)) {
        struct ts_err err = { 0 };
        struct ts_conn *c;
        struct dp_conn *dc;
        ts_status st = ts_tp_accept(dl->l, ACCEPT_POLL_MS, &c, &err);

        if (st == TS_ETIMEDOUT || st == TS_ECANCELLED) {
            /* Idle: join the connections that ended, so that their buffers and rings do not
             * wait for the next worker to connect. */
            pthread_mutex_lock(&dp->mu);
            reap(dp, false);
            pthread_mutex_unlock(&dp->mu);
            continue;
        }
        if (st == TS_EAUTH) {   /* a local peer the kernel says may not connect (shm) */
            dp_refuse(dp, DP_REFUSED_PEER, ts_tp_listener_name(dl->l), err.msg);
            continue;
        }
        if (st) { /* a peer's bad handshake, or the system out of something */
            accept_failed(dl, &err, &log_next, &left_out);
            if (st == TS_EIO)   /* e.g. out of descriptors: do not spin */
                ts_sleep_ms(ACCEPT_POLL_MS);
            continue;
        }
        dc = calloc(1, sizeof(*dc));
        if (!dc) {
            ts_tp_close(c);
            continue;
        }
        dc->dp = dp;
        dc->c = c;
        pthread_mutex_lock(&dp->mu);
        reap(dp, false);
        if (!dp_guard_admit(dp, dc)) {
            pthread_mutex_unlock(&dp->mu);
            ts_tp_close(c);
            free(dc);
            continue;
        }
        if (pthread_create(&dc->thread, NULL, conn_main, dc) != 0) {
            pthread_mutex_unlock(&dp->mu);
            ts_log(TS_ERROR, "dataplane", "cannot start a thread for %s", c->peer);
            ts_tp_close(c);
            free(dc);
            continue;
        }
        dc->next = dp->conns;
        dp->conns = dc;
        pthread_mutex_unlock(&dp->mu);
        atomic_fetch_add(&dl->accepted, 1);
        ts_log(TS_DEBUG, "dataplane", "%s connection from %s", ts_tp_listener_name(dl->l),
               c->peer);
    }
    return NULL;
}

void dataplane_conns(struct dataplane *dp, size_t i, uint64_t *open, uint64_t *accepted)
{
    const char *name = ts_tp_listener_name(dp->listeners[i].l);

    *open = 0;
    *accepted = atomic_load(&dp->listeners[i].accepted);
    pthread_mutex_lock(&dp->mu);
    reap(dp, false);
    for (struct dp_conn *dc = dp->conns; dc; dc = dc->next)
        *open += strcmp(ts_tp_name(dc->c), name) == 0;
    pthread_mutex_unlock(&dp->mu);
}

void dataplane_counters(struct dataplane *dp, uint64_t *in, uint64_t *refused)
{
    pthread_mutex_lock(&dp->mu);
    reap(dp, false);
    *in = atomic_load(&dp->closed_in);
    *refused = atomic_load(&dp->closed_refused);
    /* Open connections' counters belong to their threads; a racy read is fine for status. */
    for (struct dp_conn *dc = dp->conns; dc; dc = dc->next) {
        *in += dc->c->frames_in;
        *refused += dc->c->frames_refused;
    }
    pthread_mutex_unlock(&dp->mu);
}

ts_status dataplane_start(struct dataplane *dp, struct shard_params *sp, const char *host,
                          const char *only, struct ts_err *err)
{
    memset(dp, 0, sizeof(*dp));
    dp->params = sp;
    dp->max_conns = DP_DEFAULT_MAX_CONNS;
    if (dp_access_create(&dp->access, err))
        return err->code;
    if (dp_prefetch_create(&dp->prefetch, err)) {
        dp_access_free(dp->access);
        return err->code;
    }
#if TS_TEST_HOOKS
    const char *flip = ts_hook("TESSERA_TEST_FLIP_REPLICA");
    if (flip && sscanf(flip, "%u:%u", &dp->flip_tensor, &dp->flip_part) == 2) {
        dp->flip = true;
        ts_log(TS_WARN, "dataplane", "TESSERA_TEST_FLIP_REPLICA: images of tensor %u partition "
               "%u will be corrupted here (a test)", dp->flip_tensor, dp->flip_part);
    }
#endif
    pthread_mutex_init(&dp->mu, NULL);
    pthread_mutex_init(&dp->sum_mu, NULL);
    pthread_mutex_init(&dp->id_mu, NULL);
    for (size_t i = 0; ts_transports[i] && dp->n < DP_MAX_LISTENERS; i++) {
        const struct ts_transport_ops *ops = ts_transports[i];
        struct dp_listener *dl = &dp->listeners[dp->n];
        struct ts_err e = { 0 };

        if (only && only[0] && strcmp(only, ops->name) != 0)
            continue;
        if (ts_tp_probe(ops, &e)) {
            if (only && only[0])   /* asked for by name: say why it cannot run */
                return ts_err_set(err, TS_ENODEV, "data plane: --transport %s cannot run "
                                  "here: %s", only, e.msg);
            continue;
        }
        if (ts_tp_listen(ops, host, &dl->l, &dl->addr, &e)) {
            ts_log(TS_WARN, "dataplane", "%s: cannot listen: %s", ops->name, e.msg);
            continue;
        }
        dl->dp = dp;
        pthread_create(&dl->thread, NULL, accept_main, dl);
        dp->n++;
    }
    if (!dp->n)
        return ts_err_set(err, TS_ENODEV, "data plane: no transport could listen%s%s",
                          only ? " (--transport " : "", only ? only : "");
    return TS_OK;
}

/* Ends the pull waits of the connections of job (every connection: NULL); dp->mu held. */
static void cancel_waits(struct dataplane *dp, const char *job)
{
    pthread_mutex_lock(&dp->id_mu);
    for (struct dp_conn *dc = dp->conns; dc; dc = dc->next)
        if (!job || strcmp(dc->job_id, job) == 0)
            atomic_fetch_or(&dc->cancel, DP_CANCEL_END);
    pthread_mutex_unlock(&dp->id_mu);
}

void dataplane_end_job(struct dataplane *dp, const char *job)
{
    pthread_mutex_lock(&dp->mu);
    cancel_waits(dp, job);
    pthread_mutex_unlock(&dp->mu);
    dp_access_forget(dp->access, job);
}

void dataplane_stop(struct dataplane *dp)
{
    atomic_store(&dp->stop, true);
    for (size_t i = 0; i < dp->n; i++)
        pthread_join(dp->listeners[i].thread, NULL);
    pthread_mutex_lock(&dp->mu);
    cancel_waits(dp, NULL);
    reap(dp, true);
    pthread_mutex_unlock(&dp->mu);
    dp_prefetch_free(dp->prefetch);   /* after the connections: none posts any more */
    for (size_t i = 0; i < dp->n; i++)
        ts_tp_unlisten(dp->listeners[i].l);
    pthread_mutex_destroy(&dp->mu);
    pthread_mutex_destroy(&dp->sum_mu);
    pthread_mutex_destroy(&dp->id_mu);
    dp_access_free(dp->access);
}
