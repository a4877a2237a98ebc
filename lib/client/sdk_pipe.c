/* sdk_pipe.c - a step's requests to each shard and its replies back at the same time, on the
 * connections whose bytes leave the host.
 *
 * Why: sdk_exchange.c's plain exchange sends every push, then every pull request, then reads the
 * replies. A shard serves a connection in order, so a worker's link carries pushes up with
 * nothing coming down, then parameters down with nothing going up, and a step costs at least
 * 2 x size / link rate (docs/transport.md, "Push and pull at once"). Here each shard
 * connection gets a sender thread and a reader thread. The sender sends, partition by
 * partition in the plain exchange's order, each push and right behind it the pull of the same
 * partition; the reader reads the ACK and the PARAMS as they come. A shard answers partition
 * k's pull once every worker pushed k, while the pushes of the partitions after k are still
 * going up, so both directions of every link are busy together. The sender stays at most
 * SDK_PIPE_WINDOW partitions ahead of the replies, so that no flow runs ahead of the others
 * that gate its downloads. What is summed, and in which order, does not change: only when the
 * bytes move.
 *
 * Not for shared memory, where both directions are memory copies on the same cores and the
 * plain exchange's single thread is cheaper (auto mode), nor for a step of several slots
 * (an elastic worker's takeover: one slot's gradients are encoded at a time).
 *
 * Threads: every thread reads the handle; each writes only its own struct pipe_conn and the
 * per-partition fields of the partitions its shard heads (x->overflow[p], x->have[p]);
 * t->conns.broken is atomic. What the replies said is merged once all are joined. The caller's
 * thread waits for them in slices (SDK_WAIT_SLICE_MS) and ticks between them: an interrupt
 * (Ctrl-C in Python, whose check works in that thread only) cuts every connection, which
 * ends the threads at once, and the exchange is TS_ECANCELLED. */
#include "client/sdk_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/knobs.h"
#include "util/proc.h"

#define SDK_PIPE_MIN_BYTES (256 << 10)   /* below this, two threads per shard cost more */
/* A step's sender sends partition k's push only once the pull of partition k - WINDOW is
 * back. A shard answers a partition's pull when every worker pushed it, so the slowest of the
 * flows into a shard gates everyone's downloads; unbounded, a worker's fast flows ran ahead
 * while its downloads waited on others' slow ones (a trace: uploads done 280 ms before the
 * last download, at 0.5 R). Held back, the fast flows leave their link to the slow ones.
 * Measured (bench/multihost, 1 Gbit/s, 64 MiB): no window 0.70 R, 1: 0.52, 2: 0.77-0.79,
 * 3: 0.79, 4: 0.76. */
#define SDK_PIPE_WINDOW 2

/* The threads still running, for the caller's wait. */
struct pipe_live {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t running;
};

struct pipe_conn {
    struct tessera *t;
    struct pipe_live *live;
    uint32_t s;                   /* the shard slot */
    int first, last;
    bool push;
    float *const *params;
    uint32_t flags;
    pthread_t sender, reader;
    bool sender_made, reader_made;
    /* SDK_PIPE_WINDOW (steps, which push and pull): mu guards pulled and stop. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned pulled;              /* pull replies read (or given up on: stop) */
    bool stop;
    ts_status send_st, read_st, refused;
    struct ts_err send_err, read_err, refused_err;
    struct step_reads acc;
};

ts_status sdk_pipe_mode(struct tessera *t, struct ts_err *err)
{
    ts_status st;

    if ((st = ts_knob_check(TS_KNOB_PIPELINE, err)))
        return st;
    t->pipe = ts_knob_is(TS_KNOB_PIPELINE, "on") ? SDK_PIPE_ON
              : ts_knob_is(TS_KNOB_PIPELINE, "off") ? SDK_PIPE_OFF : SDK_PIPE_AUTO;
    return TS_OK;
}

bool sdk_pipe_pays(const struct tessera *t, int first, int last, bool push,
                   float *const *params)
{
    uint64_t bytes = 0;
    bool leaves = false;

    if (t->pipe == SDK_PIPE_OFF || sdk_npush(t) > 1 || t->conns.nshards < 1)
        return false;
    if (t->pipe == SDK_PIPE_ON)
        return true;
    for (size_t s = 0; s < t->conns.nshards; s++)
        leaves |= !(t->conns.shards[s].conn->local_in && t->conns.shards[s].conn->local_out);
    for (int i = first; leaves && i < last; i++) {
        const struct sdk_tensor *x = t->tensors[i];
        if (x->active)
            bytes += x->numel * ((push ? sdk_push_bytes(t) : 0) +
                                 (params ? sizeof(float) : 0));
    }
    return leaves && bytes >= SDK_PIPE_MIN_BYTES;
}

/* A place in a connection's partitions: tensor i, partition p. */
struct cursor {
    int i;
    uint32_t p;
};

/* The first cursor, for next_part. */
static struct cursor cursor_start(const struct pipe_conn *c)
{
    return (struct cursor){ c->first, UINT32_MAX };
}

/* Moves k to the next active partition of [first, last) that c's shard heads, in the plain
 * exchange's order; false when there is none. */
static bool next_part(const struct pipe_conn *c, struct cursor *k)
{
    for (k->p++; k->i < c->last; k->i++, k->p = 0) {
        const struct sdk_tensor *x = c->t->tensors[k->i];
        for (; x->active && k->p < x->nparts; k->p++)
            if (x->owner[k->p] == c->s)
                return true;
    }
    return false;
}

static void *thread_done(struct pipe_conn *c)
{
    pthread_mutex_lock(&c->live->mu);
    c->live->running--;
    pthread_cond_signal(&c->live->cv);
    pthread_mutex_unlock(&c->live->mu);
    return NULL;
}

/* The sender: each partition's push, then its pull, no more than SDK_PIPE_WINDOW partitions
 * ahead of the pulls read. After a failure the connection is cut, so that the reader, waiting
 * for replies that will not come, stops too. */
static void *pipe_send(void *arg)
{
    struct pipe_conn *c = arg;
    struct tessera *t = c->t;
    bool pushed = false, begun = false;
    unsigned sent = 0;

    for (struct cursor k = cursor_start(c); !c->send_st && next_part(c, &k); sent++) {
        if (c->push && c->params) {
            pthread_mutex_lock(&c->mu);
            while (!c->stop && sent >= c->pulled + SDK_PIPE_WINDOW)
                pthread_cond_wait(&c->cv, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
        if (c->push)
            c->send_st = sdk_send_one(t, k.i, k.p, true, 0, &pushed, &c->send_err);
        if (!c->send_st && c->params)
            c->send_st = sdk_send_one(t, k.i, k.p, false, c->flags, &begun, &c->send_err);
    }
    if (c->send_st)
        ts_tp_shutdown(t->conns.shards[c->s].conn);
    return thread_done(c);
}

/* One reply: a refusal is remembered (the first) and reading goes on, as the streams stay in
 * step; a transport error ends the connection's reading and cuts it, so that the sender stops
 * too. Returns whether to go on. */
static bool pipe_read_one(struct pipe_conn *c, int i, uint32_t p, float *params)
{
    struct ts_err e = { 0 };
    ts_status r = sdk_read_one(c->t, i, p, params, &c->acc, &e);

    if (r && !c->refused) {
        c->refused = r;
        c->refused_err = e;
    }
    if (sdk_transport_failed(r)) {
        c->read_st = r;
        c->read_err = e;
        ts_tp_shutdown(c->t->conns.shards[c->s].conn);
        return false;
    }
    return true;
}

static void *pipe_read(void *arg)
{
    struct pipe_conn *c = arg;

    for (struct cursor k = cursor_start(c); next_part(c, &k);) {
        if (c->push && !pipe_read_one(c, k.i, k.p, NULL))
            break;
        if (c->params && !pipe_read_one(c, k.i, k.p, c->params[k.i - c->first]))
            break;
        pthread_mutex_lock(&c->mu);
        c->pulled++;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->mu);
    c->stop = true;   /* a sender waiting on the window must not wait for a reader gone */
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return thread_done(c);
}

/* Waits for the threads in slices, ticking between them (sdk_wait_tick); an interrupt cuts
 * every connection of cs, so that the threads end, and is returned once they have. */
static ts_status wait_threads(struct tessera *t, struct pipe_live *live, struct pipe_conn *cs,
                              size_t n, struct ts_err *err)
{
    int64_t start = ts_now_ms(), said = 0;
    ts_status st = TS_OK;
    char what[48];

    snprintf(what, sizeof(what), "%zu shard%s", n, n == 1 ? "" : "s");
    pthread_mutex_lock(&live->mu);
    while (live->running) {
        struct timespec at;

        ts_abstime_ms(&at, SDK_WAIT_SLICE_MS);
        if (pthread_cond_timedwait(&live->cv, &live->mu, &at) != ETIMEDOUT || st)
            continue;
        pthread_mutex_unlock(&live->mu);
        if ((st = sdk_wait_tick(t, start, &said, what, err)))
            for (size_t k = 0; k < n; k++)
                ts_tp_shutdown(t->conns.shards[cs[k].s].conn);
        pthread_mutex_lock(&live->mu);
    }
    pthread_mutex_unlock(&live->mu);
    return st;
}

/* The outcome, as the plain exchange gives it: a transport error first (the lowest slot's;
 * the send's before the read's, which it caused), else the first refusal, else TS_OK. */
static ts_status outcome(struct tessera *t, struct pipe_conn *cs, size_t n, struct ts_err *err)
{
    for (size_t k = 0; k < n; k++)
        sdk_reads_merge(t, &cs[k].acc);
    for (size_t k = 0; k < n; k++) {
        if (cs[k].send_st) {
            *err = cs[k].send_err;
            return cs[k].send_st;
        }
        if (cs[k].read_st) {
            *err = cs[k].read_err;
            return cs[k].read_st;
        }
    }
    for (size_t k = 0; k < n; k++)
        if (cs[k].refused) {
            *err = cs[k].refused_err;
            return cs[k].refused;
        }
    return TS_OK;
}

ts_status sdk_pipe_exchange(struct tessera *t, int first, int last, bool push,
                            float *const *params, uint32_t flags, struct ts_err *err)
{
    struct pipe_conn *cs = calloc(t->conns.nshards, sizeof(*cs));
    struct pipe_live live = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    size_t n = 0;
    ts_status st = TS_OK, waited;

    if (!cs)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %zu shard connections",
                          t->conns.nshards);
    if (push && sdk_npush(t) == 1)
        sdk_next_slot(t, first, last, 0);
    for (uint32_t s = 0; s < t->conns.nshards; s++) {
        struct cursor k;
        cs[n] = (struct pipe_conn){ .t = t, .live = &live, .s = s, .first = first, .last = last,
                                    .push = push, .params = params, .flags = flags };
        k = cursor_start(&cs[n]);
        if (!next_part(&cs[n], &k))
            continue;   /* only the shards that head a partition of it */
        pthread_mutex_init(&cs[n].mu, NULL);
        pthread_cond_init(&cs[n].cv, NULL);
        n++;
    }
    t->wait.pipe_busy = true;
    for (size_t k = 0; !st && k < n; k++) {
        int rc;

        pthread_mutex_lock(&live.mu);
        live.running += 2;   /* counted before they start: each counts itself out */
        pthread_mutex_unlock(&live.mu);
        rc = pthread_create(&cs[k].reader, NULL, pipe_read, &cs[k]);
        cs[k].reader_made = rc == 0;
        if (!rc && (rc = pthread_create(&cs[k].sender, NULL, pipe_send, &cs[k])) != 0)
            ts_tp_shutdown(t->conns.shards[cs[k].s].conn);   /* its reader would wait forever */
        cs[k].sender_made = rc == 0;
        if (rc) {
            pthread_mutex_lock(&live.mu);
            live.running -= 2 - cs[k].reader_made;
            pthread_mutex_unlock(&live.mu);
            st = ts_err_set(err, TS_ENOMEM, "starting the threads of shard %u's connection: %s",
                            t->conns.shards[cs[k].s].id, strerror(rc));
        }
    }
    /* Threads not started leave their connections untouched and their results empty. */
    waited = wait_threads(t, &live, cs, n, st ? NULL : err);
    for (size_t k = 0; k < n; k++) {
        if (cs[k].sender_made)
            pthread_join(cs[k].sender, NULL);
        if (cs[k].reader_made)
            pthread_join(cs[k].reader, NULL);
    }
    t->wait.pipe_busy = false;
    if (!st)
        st = waited ? waited : outcome(t, cs, n, err);
    for (size_t k = 0; k < n; k++) {
        pthread_mutex_destroy(&cs[k].mu);
        pthread_cond_destroy(&cs[k].cv);
    }
    free(cs);
    return st;
}
