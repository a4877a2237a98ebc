/* dataplane.c - the shard's side of the data plane: listeners, one thread per worker
 * connection, PUSH/PULL frames applied to the partitions (lib/ps).
 *
 * Each connection is served in order by its own thread, so a PULL that waits for the next
 * version blocks only that worker's connection, while the other workers' pushes arrive on
 * theirs. A frame refused by lib/transport (torn, oversized, corrupted) is answered with an
 * ERROR frame and the connection is closed: after a bad frame the byte stream is not trusted,
 * and nothing from it was applied.
 *
 * Copies: a push arriving over shm is added to the aggregation straight from the ring
 * (ts_frame_recv_view), and a pull is sent straight from the partition's values. Where frames
 * carry hashes (connections that leave the host), a version's hash is computed once and reused
 * for every worker's pull of it (pull_sum). */
#include "dataplane.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/frame.h"
#include "util/log.h"

#define ACCEPT_POLL_MS 200
#define PULL_WAIT_MS 120000

struct dp_conn {
    struct dataplane *dp;
    struct ts_conn *c;
    struct shard_job *job;          /* named by the connection's HELLO */
    bool push_refused;              /* a push of the current step was refused */
    float *copy;                    /* SSP/ASP pulls: the values copied under the lock */
    size_t copy_cap;                /* floats */
    bool after_pull;                /* the last request was a PULL */
    pthread_t thread;
    struct dp_conn *next;
    atomic_bool done;
};

/* The hash of a partition's values at one version, shared by the connection threads: every
 * worker pulls the same bytes. Direct-mapped by partition address; a collision only costs a
 * recomputation. An entry is right while its version is the partition's (values change only
 * when the version moves, part.h). */
static uint64_t pull_sum(struct dataplane *dp, struct ts_part *p, uint64_t version)
{
    size_t i = ((uintptr_t)p >> 6) % DP_SUM_CACHE;
    struct dp_sum *s = &dp->sums[i];
    uint64_t sum;

    pthread_mutex_lock(&dp->sum_mu);
    if (s->part == p && s->version == version) {
        sum = s->sum;
        pthread_mutex_unlock(&dp->sum_mu);
        return sum;
    }
    pthread_mutex_unlock(&dp->sum_mu);
    sum = ts_frame_hash(p->value, p->len * sizeof(float));
    pthread_mutex_lock(&dp->sum_mu);
    *s = (struct dp_sum){ p, version, sum };
    pthread_mutex_unlock(&dp->sum_mu);
    return sum;
}

static ts_status reply_error(struct ts_conn *c, const struct ts_frame_hdr *req,
                             const struct ts_err *e)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_ERROR, .tensor = req->tensor,
                              .partition = req->partition, .step = req->step,
                              .flags = (uint32_t)e->code };
    struct ts_err ignore = { 0 };

    return ts_frame_send(c, &h, e->msg, strlen(e->msg), &ignore);
}

static ts_status on_push(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct ts_err *err)
{
    struct ts_part *p = shard_params_find(dc->dp->params, dc->job, h->tensor, h->partition);
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor,
                                .partition = h->partition, .step = h->step };
    struct ts_push in = { .rank = h->rank, .step = h->step, .encoding = h->encoding,
                          .scale_exp = TS_PUSH_SCALE_EXP(h->flags), .payload = buf,
                          .bytes = h->len };
    bool applied;

    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    if (!p)
        return ts_err_set(err, TS_ENOTFOUND, "tensor %u partition %u is not on this shard: "
                          "register the tensor, or refresh the shard map", h->tensor,
                          h->partition);
    if (ts_part_push(p, &in, &applied, err))
        return err->code;
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}

static ts_status on_pull(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct ts_part *p = shard_params_find(dc->dp->params, dc->job, h->tensor, h->partition);
    struct ts_frame_hdr out = { .type = TS_FRAME_PARAMS, .tensor = h->tensor,
                                .partition = h->partition, .dtype = 1 };
    struct ts_pull_info info;
    enum ts_mode mode = dc->job ? dc->job->job.mode : TS_MODE_BSP;
    bool copy = mode == TS_MODE_SSP || mode == TS_MODE_ASP;

    if (!p)
        return ts_err_set(err, TS_ENOTFOUND, "tensor %u partition %u is not on this shard: "
                          "register the tensor, or refresh the shard map", h->tensor,
                          h->partition);
    /* The version asked for needs the push that was refused: it would never come. */
    if ((h->flags & TS_PULL_AFTER_PUSH) && dc->push_refused)
        return ts_err_set(err, TS_ESTATE, "pull of version %" PRIu64 " refused: a push of this "
                          "step was refused (see the error before)", h->step);
    if (copy && dc->copy_cap < p->len) {
        float *c = realloc(dc->copy, p->len * sizeof(float));
        if (!c)
            return ts_err_set(err, TS_ENOMEM, "pull: no memory for a copy of %" PRIu64
                              " floats", p->len);
        dc->copy = c;
        dc->copy_cap = p->len;
    }
    if (ts_part_pull(p, h->rank, h->step, PULL_WAIT_MS, &dc->dp->stop, copy ? dc->copy : NULL,
                     &info, err))
        return err->code;
    out.step = info.version;
    out.flags = info.overflow ? TS_PARAMS_OVERFLOW : 0;
    out.rank = info.staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)info.staleness;
    /* SSP/ASP: from the copy. Otherwise straight from the partition: it cannot change before
     * this rank pushes again (part.h), so neither can its hash; version is the partition's
     * until then. */
    if (copy)
        return ts_frame_send(dc->c, &out, dc->copy, p->len * sizeof(float), err);
    if (!ts_frame_wants_hash(dc->c))
        return ts_frame_send(dc->c, &out, p->value, p->len * sizeof(float), err);
    return ts_frame_send_hashed(dc->c, &out, p->value, p->len * sizeof(float),
                                pull_sum(dc->dp, p, info.version), err);
}

/* Names the connection's job. The reply (ACK or ERROR) tells the worker whether it exists. */
static ts_status on_hello(struct dp_conn *dc, const struct ts_frame_hdr *h, const char *buf,
                          struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK };
    char id[65];

    if (h->len == 0 || h->len >= sizeof(id))
        return ts_err_set(err, TS_EINVAL, "hello: job id of 1..64 bytes required");
    memcpy(id, buf, h->len);
    id[h->len] = '\0';
    dc->job = shard_params_job(dc->dp->params, id);
    if (!dc->job)
        return ts_err_set(err, TS_ENOTFOUND, "hello: job '%s' has no tensors on this shard: "
                          "register them first", id);
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}

static void *conn_main(void *arg)
{
    struct dp_conn *dc = arg;
    struct dataplane *dp = dc->dp;
    void *buf = malloc(TS_FRAME_MAX); /* pages are touched only as frames need them */

    while (buf && !atomic_load(&dp->stop)) {
        struct ts_frame_hdr h;
        struct ts_err err = { 0 };
        const void *in = NULL;
        ts_status st = ts_frame_recv_view(dc->c, &h, buf, TS_FRAME_MAX, 1000, &in, &err);

        if (st == TS_ETIMEDOUT)
            continue;
        if (st == TS_ECORRUPT) {
            struct ts_frame_hdr none = { 0 };
            ts_log(TS_WARN, "dataplane", "%s; closing the connection, nothing applied",
                   err.msg);
            reply_error(dc->c, &none, &err);
            break;
        }
        if (st)
            break; /* the worker went away or the shard is stopping */
        if (h.type == TS_FRAME_PUSH) {
            if (dc->after_pull) /* a new step's pushes begin */
                dc->push_refused = dc->after_pull = false;
            st = on_push(dc, &h, in, &err);
            dc->push_refused |= st != TS_OK;
        } else if (h.type == TS_FRAME_PULL) {
            dc->after_pull = true;
            st = on_pull(dc, &h, &err);
        }
        else if (h.type == TS_FRAME_HELLO)
            st = on_hello(dc, &h, in, &err);
        else
            st = ts_err_set(&err, TS_EINVAL, "frame type %u is not a request", h.type);
        /* Done with the payload: let the worker reuse its place in the ring. */
        ts_frame_release(dc->c);
        if (st == TS_EUNAVAIL || st == TS_ECANCELLED)
            break;
        if (st && reply_error(dc->c, &h, &err))
            break;
    }
    free(buf);
    free(dc->copy);
    atomic_store(&dc->done, true);
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
            dc->c->ops->interrupt(dc->c);
        pthread_join(dc->thread, NULL);
        atomic_fetch_add(&dp->closed_in, dc->c->frames_in);
        atomic_fetch_add(&dp->closed_refused, dc->c->frames_refused);
        ts_tp_close(dc->c);
        *pp = dc->next;
        free(dc);
    }
}

static void *accept_main(void *arg)
{
    struct dp_listener *dl = arg;
    struct dataplane *dp = dl->dp;

    while (!atomic_load(&dp->stop)) {
        struct ts_err err = { 0 };
        struct ts_conn *c;
        struct dp_conn *dc;

        if (dl->l->ops->accept(dl->l, ACCEPT_POLL_MS, &c, &err))
            continue;
        dc = calloc(1, sizeof(*dc));
        if (!dc) {
            ts_tp_close(c);
            continue;
        }
        dc->dp = dp;
        dc->c = c;
        pthread_mutex_lock(&dp->mu);
        reap(dp, false);
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
        ts_log(TS_DEBUG, "dataplane", "%s connection from %s", dl->l->ops->name, c->peer);
    }
    return NULL;
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
    pthread_mutex_init(&dp->mu, NULL);
    pthread_mutex_init(&dp->sum_mu, NULL);
    for (size_t i = 0; ts_transports[i] && dp->n < DP_MAX_LISTENERS; i++) {
        const struct ts_transport_ops *ops = ts_transports[i];
        struct dp_listener *dl = &dp->listeners[dp->n];
        struct ts_err e = { 0 };

        if ((only && only[0] && strcmp(only, ops->name) != 0) || ops->probe(&e))
            continue;
        if (ops->listen(host, &dl->l, &dl->addr, &e)) {
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

void dataplane_stop(struct dataplane *dp)
{
    atomic_store(&dp->stop, true);
    for (size_t i = 0; i < dp->n; i++)
        pthread_join(dp->listeners[i].thread, NULL);
    pthread_mutex_lock(&dp->mu);
    reap(dp, true);
    pthread_mutex_unlock(&dp->mu);
    for (size_t i = 0; i < dp->n; i++)
        ts_tp_unlisten(dp->listeners[i].l);
    pthread_mutex_destroy(&dp->mu);
    pthread_mutex_destroy(&dp->sum_mu);
}
