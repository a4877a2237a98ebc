/* call.c - one server call from arrival to its final status.
 *
 * A plain unary call runs on the completion-queue thread that received it: decode, handler,
 * one final batch {initial metadata, message, status, close} whose completion frees the call.
 * Streaming calls and TS_RPC_OWN_THREAD calls get a thread of their own, so a handler may block
 * in ts_rpc_send/ts_rpc_recv: each of those starts one batch and waits until the queue thread
 * reports it done (TS__TAG_OP). A streaming call also posts RECV_CLOSE_ON_SERVER at once, so a
 * client that goes away is noticed (TS__TAG_CLOSE); it holds two references, the handler
 * thread's and the close tag's, and is freed when both are gone. */
#include <ctype.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"
#include "rpc/internal.h"
#include "util/log.h"
#include "util/proc.h"

grpc_byte_buffer *ts__pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    grpc_byte_buffer *bb;

    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

ProtobufCMessage *ts__unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                             bool check, struct ts_err *err)
{
    grpc_byte_buffer_reader r;
    ProtobufCMessage *m = NULL;
    grpc_slice s;

    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    if (!check || !ts__wire_check(d, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), err))
        m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

struct ts_rpc_call *ts__call_from_request(struct ts__request *r)
{
    struct ts_rpc_call *c = calloc(1, sizeof(*c));

    if (!c)
        abort();
    c->w = r->w;
    c->method = r->method;
    c->call = r->call;
    c->deadline = gpr_convert_clock_type(r->deadline, GPR_CLOCK_MONOTONIC);
    c->md = r->md; /* moved: the elements belong to the call, which we keep */
    grpc_metadata_array_init(&r->md);
    c->payload = r->payload;
    r->payload = NULL;
    if (!r->method) {
        size_t n = GRPC_SLICE_LENGTH(r->details.method);
        if (n >= sizeof(c->unknown_path))
            n = sizeof(c->unknown_path) - 1;
        memcpy(c->unknown_path, GRPC_SLICE_START_PTR(r->details.method), n);
    }
    c->t0_ns = ts_now_ns();
    c->finish_tag.kind = TS__TAG_FINISH;
    c->op_tag.kind = TS__TAG_OP;
    c->close_tag.kind = TS__TAG_CLOSE;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    atomic_init(&c->refs, 1);
    atomic_fetch_add(&c->w->srv->calls, 1);
    return c;
}

static void call_free(struct ts_rpc_call *c)
{
    atomic_fetch_sub(&c->w->srv->calls, 1);
    grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    while (c->arena) {
        struct ts__arena_block *b = c->arena;
        c->arena = b->next;
        free(b);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void call_unref(struct ts_rpc_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        call_free(c);
}

static const char *path_of(const struct ts_rpc_call *c)
{
    return c->method ? c->method->path : c->unknown_path;
}

/* Every server's calls by method and final status, and their durations from arrival to the
 * final status (docs/observability.md). */
static struct {
    pthread_once_t once;
    struct ts_metric_family *calls, *secs;
} call_metrics = { PTHREAD_ONCE_INIT, NULL, NULL };

static void register_call_metrics(void)
{
    call_metrics.calls = ts_metrics_family("tessera_rpc_requests_total", "gRPC calls served, by "
                                           "method and final status code", TS_METRIC_COUNTER,
                                           "method,code", NULL, 0);
    call_metrics.secs = ts_metrics_family("tessera_rpc_duration_seconds", "gRPC calls served: "
                                          "time from arrival to the final status, by method",
                                          TS_METRIC_HISTOGRAM, "method", NULL, 0);
}

/* Counts c, ending with st. An unknown method counts as "unknown", not under whatever path
 * its caller made up. */
static void count_call(const struct ts_rpc_call *c, ts_status st)
{
    const char *method = c->method ? c->method->path + 1 : "unknown";
    const char *labels[2] = { method, ts_rpc_code_name(ts_rpc_code_from_status(st)) };

    pthread_once(&call_metrics.once, register_call_metrics);
    ts_counter_add(ts_metric_child(call_metrics.calls, labels), 1);
    ts_histogram_observe(ts_metric_one(call_metrics.secs, method),
                         (double)(ts_now_ns() - c->t0_ns) / 1e9);
}

/* Starts the final batch. with_close: the call has no close tag posted yet (unary), so the
 * batch includes RECV_CLOSE_ON_SERVER and its completion (TS__TAG_FINISH) frees the call. */
static grpc_call_error start_final(struct ts_rpc_call *c, ts_status st, const char *msg,
                                   const ProtobufCMessage *resp, bool with_close,
                                   grpc_byte_buffer **sent)
{
    size_t len = msg ? strlen(msg) : 0;
    grpc_op ops[4];
    grpc_slice details;
    grpc_call_error e;
    size_t n = 0;

    /* HTTP/2 forbids a field value that ends in whitespace, and grpc-js drops such a
     * grpc-message whole: a message cut at a space to fit ts_err.msg reached Node empty. */
    while (len && isspace((unsigned char)msg[len - 1]))
        len--;
    details = grpc_slice_from_copied_buffer(msg ? msg : "", len);

    memset(ops, 0, sizeof(ops));
    *sent = NULL;
    if (!c->sent_initial_md)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_initial_md = true;
    if (st == TS_OK && resp) {
        *sent = ts__pack(resp);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = *sent;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ts_rpc_code_from_status(st);
    ops[n++].data.send_status_from_server.status_details = &details;
    if (with_close) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    }
    if (st != TS_OK)
        ts_log(TS_DEBUG, "rpc", "%s: %s: %s", path_of(c),
               ts_rpc_code_name(ts_rpc_code_from_status(st)), msg);
    count_call(c, st);
    atomic_fetch_add(&c->w->live, 1);
    e = grpc_call_start_batch(c->call, ops, n, with_close ? &c->finish_tag : &c->op_tag, NULL);
    grpc_slice_unref(details); /* not retained past start_batch (notes) */
    if (e != GRPC_CALL_OK)
        atomic_fetch_sub(&c->w->live, 1);
    return e;
}

/* Finishes a call that has no close tag; the completion frees it. */
static void finish_unary(struct ts_rpc_call *c, ts_status st, const char *msg,
                         const ProtobufCMessage *resp)
{
    grpc_byte_buffer *sent;

    if (start_final(c, st, msg, resp, true, &sent) != GRPC_CALL_OK) {
        ts_log(TS_ERROR, "rpc", "%s: cannot send the reply", path_of(c));
        if (sent)
            grpc_byte_buffer_destroy(sent);
        call_free(c);
        return;
    }
    /* The batch holds its own reference to the message's slices. */
    if (sent)
        grpc_byte_buffer_destroy(sent);
}

void ts__call_finished(struct ts_rpc_call *c)
{
    call_free(c);
}

/* Whether a request of len bytes is within its method's limit (ts_rpc_method.max_request). */
static ts_status within_limit(const struct ts_rpc_method *m, size_t len, struct ts_err *err)
{
    size_t most = m->max_request ? m->max_request : TS_RPC_REQUEST_MAX;

    if (len <= most)
        return TS_OK;
    return ts_err_set(err, TS_ENOMEM, "request: %zu bytes of %s, over the %zu this method "
                      "takes", len, m->req->name, most);
}

static ts_status decode(struct ts_rpc_call *c, ProtobufCMessage **req, struct ts_err *err)
{
    const ProtobufCMessageDescriptor *d = c->method->m->req;
    ts_status st;

    if (!c->payload)
        return ts_err_set(err, TS_EINVAL, "request: no %s message was sent", d->name);
    if ((st = within_limit(c->method->m, grpc_byte_buffer_length(c->payload), err)))
        return st;
    *req = ts__unpack(d, c->payload, true, err);
    if (!*req)
        return ts_err_set(err, TS_EINVAL, "request: bytes do not decode as %s", d->name);
    return TS_OK;
}

/* Runs the handler of a unary call and sends its reply. The response lives in the arena; the
 * request is freed only after the reply is packed, so a reply may point into its request (a
 * handler that echoes a string it was sent). */
static void run_unary(struct ts_rpc_call *c)
{
    const struct ts_rpc_method *m = c->method->m;
    ProtobufCMessage *req = NULL, *resp = NULL;
    struct ts_err err = { 0 };
    ts_status st = decode(c, &req, &err);

    if (!st) {
        resp = ts_rpc_new(c, m->resp);
        st = m->fn(c, req, resp, &err);
        if (st && !err.msg[0])
            ts_err_set(&err, st, "%s failed (%s)", m->name, ts_status_name(st));
    }
    finish_unary(c, st, err.msg, resp); /* packs resp before it returns */
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}

static bool run_op(struct ts_rpc_call *c, grpc_op *ops, size_t n)
{
    bool ok;

    pthread_mutex_lock(&c->mu);
    c->op_done = false;
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(&c->w->live, 1);
    if (grpc_call_start_batch(c->call, ops, n, &c->op_tag, NULL) != GRPC_CALL_OK) {
        atomic_fetch_sub(&c->w->live, 1);
        return false;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->op_done)
        pthread_cond_wait(&c->cv, &c->mu);
    ok = c->op_ok;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

void ts__call_op_done(struct ts_rpc_call *c, bool ok)
{
    pthread_mutex_lock(&c->mu);
    c->op_done = true;
    c->op_ok = ok;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void ts__call_closed(struct ts_rpc_call *c)
{
    struct ts_rpc_server *s = c->w->srv;

    atomic_store(&c->closed, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv); /* ts_rpc_wait() sleeps there */
    pthread_mutex_unlock(&s->mu);
    call_unref(c);
}

static void *thread_main(void *arg)
{
    struct ts_rpc_call *c = arg;
    struct ts__worker *w = c->w;
    unsigned flags = c->method->m->flags;
    struct ts_err err = { 0 };
    ts_status st;

    if (!(flags & (TS_RPC_STREAM_IN | TS_RPC_STREAM_OUT))) {
        run_unary(c); /* frees c when the batch completes */
    } else {
        ProtobufCMessage *req = NULL;
        grpc_byte_buffer *sent;

        st = (flags & TS_RPC_STREAM_IN) ? TS_OK : decode(c, &req, &err);
        if (!st)
            st = c->method->m->fn(c, req, NULL, &err);
        if (st && !err.msg[0])
            ts_err_set(&err, st, "%s failed (%s)", c->method->m->name, ts_status_name(st));
        if (req)
            protobuf_c_message_free_unpacked(req, NULL);
        pthread_mutex_lock(&c->mu);
        c->op_done = false;
        pthread_mutex_unlock(&c->mu);
        if (start_final(c, st, err.msg, NULL, false, &sent) == GRPC_CALL_OK) {
            pthread_mutex_lock(&c->mu);
            while (!c->op_done)
                pthread_cond_wait(&c->cv, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
        atomic_fetch_sub(&w->srv->streams, 1);
        call_unref(c);
    }
    atomic_fetch_sub(&w->live, 1); /* this thread's own count: last, so the queue outlives us */
    return NULL;
}

void ts__call_dispatch(struct ts_rpc_call *c)
{
    unsigned flags = c->method->m->flags;
    struct ts__worker *w = c->w;
    pthread_attr_t attr;
    pthread_t t;
    bool stream = flags & (TS_RPC_STREAM_IN | TS_RPC_STREAM_OUT);
    struct ts_err e = { 0 };

    if (c->method->m->roles && ts_rpc_need_role(c, c->method->m->roles, &e)) {
        finish_unary(c, e.code, e.msg, NULL);
        return;
    }
    if (!(flags & (TS_RPC_STREAM_IN | TS_RPC_STREAM_OUT | TS_RPC_OWN_THREAD))) {
        run_unary(c);
        return;
    }
    if (stream) {
        grpc_op op = { .op = GRPC_OP_RECV_CLOSE_ON_SERVER };
        if (atomic_fetch_add(&w->srv->streams, 1) >= w->srv->opts.max_streams) {
            atomic_fetch_sub(&w->srv->streams, 1);
            finish_unary(c, TS_ENOMEM, "too many open streams on this server; retry later",
                         NULL);
            return;
        }
        op.data.recv_close_on_server.cancelled = &c->cancelled;
        atomic_store(&c->refs, 2);
        atomic_fetch_add(&w->live, 1);
        if (grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL) != GRPC_CALL_OK)
            abort(); /* only a bug can make the first batch of a fresh call fail */
    }
    atomic_fetch_add(&w->live, 1);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, thread_main, c) != 0) {
        ts_log(TS_ERROR, "rpc", "%s: cannot start a handler thread", c->method->path);
        atomic_fetch_sub(&w->live, 1);
        if (stream) {
            atomic_fetch_sub(&w->srv->streams, 1);
            grpc_call_cancel(c->call, NULL); /* completes the close tag, which drops a ref */
            call_unref(c);
        } else {
            finish_unary(c, TS_ENOMEM, "server out of threads; retry later", NULL);
        }
    }
    pthread_attr_destroy(&attr);
}

void ts__call_unknown(struct ts_rpc_call *c)
{
    char msg[256];

    snprintf(msg, sizeof(msg),
             "method %s is not served here (server reflection lists what is)", c->unknown_path);
    finish_unary(c, TS_ENOTSUP, msg, NULL);
}

/* ---- the handler's view ---- */

void *ts_rpc_ctx(const struct ts_rpc_call *c)
{
    return c->method->svc->ctx;
}

const char *ts_rpc_method_name(const struct ts_rpc_call *c)
{
    return c->method ? c->method->m->name : c->unknown_path;
}

const char *ts_rpc_peer(struct ts_rpc_call *c)
{
    if (!c->peer[0]) {   /* a scratch call has no peer: "?" */
        char *p = c->call ? grpc_call_get_peer(c->call) : NULL;
        snprintf(c->peer, sizeof(c->peer), "%s", p ? p : "?");
        gpr_free(p);
    }
    return c->peer;
}

int64_t ts_rpc_deadline_left_ms(const struct ts_rpc_call *c)
{
    gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    gpr_timespec left;

    if (gpr_time_cmp(c->deadline, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return INT64_MAX;
    left = gpr_time_sub(c->deadline, now);
    return left.tv_sec * 1000 + left.tv_nsec / 1000000;
}

bool ts_rpc_done(const struct ts_rpc_call *c)
{
    return atomic_load(&c->closed) || atomic_load(&c->w->srv->stopping) ||
           ts_rpc_deadline_left_ms(c) <= 0;
}

void *ts_rpc_alloc(struct ts_rpc_call *c, size_t n)
{
    struct ts__arena_block *b = calloc(1, sizeof(*b) + n);

    if (!b)
        abort();
    b->next = c->arena;
    c->arena = b;
    return b->data;
}

struct ts_rpc_call *ts_rpc_scratch_new(void)
{
    return calloc(1, sizeof(struct ts_rpc_call));
}

void ts_rpc_scratch_free(struct ts_rpc_call *c)
{
    while (c && c->arena) {
        struct ts__arena_block *b = c->arena;
        c->arena = b->next;
        free(b);
    }
    free(c);
}

char *ts_rpc_strdup(struct ts_rpc_call *c, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(ts_rpc_alloc(c, n), s, n);
}

void *ts_rpc_new(struct ts_rpc_call *c, const ProtobufCMessageDescriptor *d)
{
    ProtobufCMessage *m = ts_rpc_alloc(c, d->sizeof_message);
    d->message_init(m);
    return m;
}

ts_status ts_rpc_send(struct ts_rpc_call *c, const ProtobufCMessage *msg, struct ts_err *err)
{
    grpc_op ops[2];
    size_t n = 0;
    bool ok;

    if (atomic_load(&c->closed))
        return ts_err_set(err, TS_ECANCELLED, "%s: the call is over", path_of(c));
    memset(ops, 0, sizeof(ops));
    if (!c->sent_initial_md)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_initial_md = true;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = ts__pack(msg);
    ok = run_op(c, ops, n);
    grpc_byte_buffer_destroy(ops[n - 1].data.send_message.send_message);
    if (!ok)
        return ts_err_set(err, TS_ECANCELLED, "%s: the call is over", path_of(c));
    return TS_OK;
}

ts_status ts_rpc_recv(struct ts_rpc_call *c, ProtobufCMessage **msg, struct ts_err *err)
{
    grpc_op op = { .op = GRPC_OP_RECV_MESSAGE };
    ts_status st;

    c->recv_buf = NULL;
    op.data.recv_message.recv_message = &c->recv_buf;
    if (!run_op(c, &op, 1))
        return ts_err_set(err, TS_ECANCELLED, "%s: the call is over", path_of(c));
    if (!c->recv_buf) {
        *msg = NULL;
        return TS_OK;
    }
    if ((st = within_limit(c->method->m, grpc_byte_buffer_length(c->recv_buf), err))) {
        grpc_byte_buffer_destroy(c->recv_buf);
        c->recv_buf = NULL;
        return st;
    }
    *msg = ts__unpack(c->method->m->req, c->recv_buf, true, err);
    grpc_byte_buffer_destroy(c->recv_buf);
    c->recv_buf = NULL;
    if (!*msg)
        return ts_err_set(err, TS_EINVAL, "request: bytes do not decode as %s",
                          c->method->m->req->name);
    return TS_OK;
}

void ts_rpc_wait(struct ts_rpc_call *c, int ms)
{
    struct ts_rpc_server *s = c->w->srv;
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                      gpr_time_from_millis(ms, GPR_TIMESPAN));
    uint64_t gen;

    pthread_mutex_lock(&s->mu);
    gen = s->gen;
    while (!ts_rpc_done(c) && s->gen == gen &&
           gpr_time_cmp(gpr_now(GPR_CLOCK_REALTIME), until) < 0) {
        struct timespec ts = { .tv_sec = until.tv_sec, .tv_nsec = until.tv_nsec };
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
}
