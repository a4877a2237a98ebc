/* client.c - blocking unary and server-streaming calls with deadlines and retry.
 *
 * Each call gets its own pluck completion queue, so any number of threads may call through one
 * channel without sharing a queue (a pluck queue allows only 6 concurrent pluckers). The
 * channel's reconnect backoff is shortened from gRPC's default (1 s initial) so that our own
 * retry on UNAVAILABLE, 20 ms doubling to 1 s with jitter, finds a server soon after it starts;
 * it polls the channel while it waits (await_ready). */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/internal.h"
#include "sec/certs.h"
#include "util/proc.h"

struct ts_rpc_channel {
    grpc_channel *ch;
    char target[256];
    bool secure;                     /* TLS (tls.c) */
};

struct ts_rpc_stream {
    struct ts_rpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    char method[192];
    bool finished, got_initial_md;
    grpc_metadata_array initial_md;
    int tag;
};

ts_status ts_rpc_channel_create(const char *target, const struct ts_rpc_channel_opts *opts,
                                struct ts_rpc_channel **out, struct ts_err *err)
{
    size_t maxmsg = opts && opts->max_message ? opts->max_message : 64u << 20;
    grpc_arg args[] = {
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
          .value.integer = (int)maxmsg },
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
          .value.integer = 50 },
        /* gRPC reads this as the least time a connection attempt (TCP connect and HTTP/2
         * handshake) may take, and also, as measured here, as the least time between two
         * attempts once one failed. At 50 ms a loaded host (the sanitizer suite on 2 cores)
         * could not finish a handshake in time, and a worker's RegisterWorker failed for its
         * whole deadline with "tcp handshaker shutdown". At 5000 ms a training worker whose
         * master was killed and restarted under it kept failing its heartbeats with the old
         * "connection refused" for 8.5-8.9 s (13 s under the sanitizers), where a new
         * channel got in at once; at 2000 ms every member is back within 0.9 s of the kill
         * (docs/membership.md, "A master that restarts"). */
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
          .value.integer = 2000 },
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
          .value.integer = 1000 },
        /* Our retry is the one retry: gRPC's own would hide attempts from the deadline math. */
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_RETRIES, .value.integer = 0 },
        { .key = NULL },   /* room for the TLS target name */
        { .key = NULL },   /* and for own_connection */
    };
    grpc_channel_args ca = { .num_args = sizeof(args) / sizeof(args[0]) - 2, .args = args };
    grpc_channel_credentials *creds;
    struct ts_rpc_channel *c;
    bool secure;
    ts_status st;

    if (!target || !target[0] || strlen(target) >= sizeof(c->target))
        return ts_err_set(err, TS_EINVAL, "target: need host:port, got '%.64s'",
                          target ? target : "");
    c = calloc(1, sizeof(*c));
    if (!c)
        return ts_err_set(err, TS_ENOMEM, "rpc channel: out of memory");
    grpc_init();
    snprintf(c->target, sizeof(c->target), "%s", target);
    if ((st = ts__channel_creds(&creds, &secure, err))) {
        ts_rpc_channel_free(c);
        return st;
    }
    c->secure = secure;
    if (secure)   /* every Tessera server's certificate names it, whatever its address */
        args[ca.num_args++] = (grpc_arg){ .type = GRPC_ARG_STRING,
                                          .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG,
                                          .value.string = TS_TLS_SERVER_NAME };
    if (opts && opts->own_connection)
        args[ca.num_args++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
                                          .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
                                          .value.integer = 1 };
    c->ch = grpc_channel_create(target, creds, &ca);
    grpc_channel_credentials_release(creds);
    *out = c;
    return TS_OK;
}

void ts_rpc_channel_free(struct ts_rpc_channel *c)
{
    if (!c)
        return;
    if (c->ch)
        grpc_channel_destroy(c->ch);
    free(c);
    grpc_shutdown();
}

const char *ts_rpc_channel_target(const struct ts_rpc_channel *c)
{
    return c->target;
}

/* gpr's monotonic clock has its own origin, so convert through the time left. */
static gpr_timespec deadline_at(int64_t ms_mono)
{
    int64_t left = ms_mono - ts_now_ms();
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(left > 0 ? left : 0, GPR_TIMESPAN));
}

static void cq_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
}

/* Waits for tag on a pluck queue; the call's own deadline bounds it. */
static bool pluck(grpc_completion_queue *cq, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* Waits ms between two attempts, or less if the channel gets READY first. The wait polls the
 * channel: an attempt that fails fast (UNAVAILABLE while the channel is in TRANSIENT_FAILURE)
 * leaves gRPC's next connection attempt running in the background, and in a process that
 * serves nothing (a worker, the CLI) no thread polls it but a caller's or gRPC's backup
 * poller (every 5 s). A TLS handshake needs several round trips, each of them a poll, within
 * the 2 s a connection attempt has (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS): a worker whose master
 * was restarted under it failed every attempt so, and was declared dead past its lease. */
static void await_ready(struct ts_rpc_channel *c, int64_t ms)
{
    int64_t until = ts_now_ms() + ms;
    grpc_connectivity_state s = grpc_channel_check_connectivity_state(c->ch, 1);
    grpc_completion_queue *cq;
    int tag = 0;

    /* A channel READY already got its UNAVAILABLE from the server itself (a master not yet
     * primary, a shard still loading): that is no news, so wait the whole backoff. */
    if (s == GRPC_CHANNEL_READY) {
        ts_sleep_ms(ms);
        return;
    }
    cq = grpc_completion_queue_create_for_pluck(NULL);
    while (s != GRPC_CHANNEL_READY && ts_now_ms() < until) {
        /* Completes when the state leaves s, or at the deadline (not a success, ignored). */
        grpc_channel_watch_connectivity_state(c->ch, s, deadline_at(until), cq, &tag);
        pluck(cq, &tag);
        s = grpc_channel_check_connectivity_state(c->ch, 0);
    }
    cq_destroy(cq);
}

/* What to try when a connection failed the way a TLS mismatch makes it fail. */
static const char *tls_hint(const struct ts_rpc_channel *c, grpc_status_code code,
                            const char *msg)
{
    if (code != GRPC_STATUS_UNAVAILABLE)
        return "";
    if (!c->secure && (strstr(msg, "Socket closed") || strstr(msg, "handshaker shutdown")))
        return " (if the server speaks TLS, it closes plaintext connections: set "
               "TESSERA_TLS_DIR, or --tls-ca, --tls-cert and --tls-key; docs/security.md)";
    if (c->secure && (strstr(msg, "andshake") || strstr(msg, "SSL")))
        return " (the TLS handshake failed: is the server's certificate signed by this "
               "process's CA, and its own by the server's? docs/security.md)";
    return "";
}

/* gRPC's account of a connection nobody accepted ("failed to connect to all addresses; last
 * error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused"),
 * said in a few words; msg as it is otherwise. */
static const char *plain_words(grpc_status_code code, const char *msg)
{
    if (code != GRPC_STATUS_UNAVAILABLE)
        return msg;
    if (strstr(msg, "Connection refused"))
        return "nothing listens there (connection refused)";
    if (strstr(msg, "DNS resolution failed") || strstr(msg, "Name or service not known"))
        return "the host name does not resolve";
    if (strstr(msg, "No route to host") || strstr(msg, "Network is unreachable"))
        return "the host cannot be reached (no route)";
    return msg;
}

static ts_status status_error(const struct ts_rpc_channel *c, const char *method,
                              grpc_status_code code, grpc_slice details, struct ts_err *err)
{
    char *msg = grpc_slice_to_c_string(details);
    const char *m = strrchr(method, '/');
    ts_status st = ts_rpc_status_from_code(code);

    ts_err_set(err, st, "%s at %s: %s: %s%s", m ? m + 1 : method, c->target,
               ts_rpc_code_name(code), plain_words(code, msg), tls_hint(c, code, msg));
    gpr_free(msg);
    return st;
}

/* One attempt. Returns the gRPC code; on OK *resp is set, and *peer (if not NULL) to the
 * certificate of the server that answered. */
static grpc_status_code attempt(struct ts_rpc_channel *c, const char *method,
                                grpc_byte_buffer *send, const ProtobufCMessageDescriptor *d,
                                ProtobufCMessage **resp, int64_t deadline_ms,
                                struct ts_rpc_peer *peer, struct ts_err *err)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice path = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path,
                                               NULL, deadline_at(deadline_ms), NULL);
    grpc_metadata_array init_md, trail_md;
    grpc_byte_buffer *recv = NULL;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    grpc_metadata md;
    int tag = 0;

    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = ts__client_md(&md);
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK || !pluck(cq, &tag)) {
        code = GRPC_STATUS_INTERNAL;
        details = grpc_slice_from_static_string("the call could not be started");
    }
    if (code == GRPC_STATUS_OK) {
        *resp = recv ? ts__unpack(d, recv, false, NULL) : NULL;
        if (!*resp) {
            code = GRPC_STATUS_INTERNAL;
            grpc_slice_unref(details);
            details = grpc_slice_from_static_string("the reply does not decode");
        }
    }
    if (code != GRPC_STATUS_OK) {
        status_error(c, method, code, details, err);
    } else if (peer) {
        /* The call's auth context is its connection's: the server that sent this reply. */
        grpc_auth_context *ctx = grpc_call_auth_context(call);
        ts__peer_of(ctx, peer);
        grpc_auth_context_release(ctx);
    }
    if (recv)
        grpc_byte_buffer_destroy(recv);
    if (ops[0].data.send_initial_metadata.count)
        grpc_slice_unref(md.value);
    grpc_slice_unref(details);
    grpc_slice_unref(path);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_call_unref(call);
    cq_destroy(cq);
    return code;
}

static ts_status unary(struct ts_rpc_channel *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int deadline_ms, bool retry, struct ts_rpc_peer *peer,
                       struct ts_err *err)
{
    int64_t now = ts_now_ms(), deadline = now + (deadline_ms > 0 ? deadline_ms : 1);
    int64_t backoff = 20;
    grpc_byte_buffer *packed = ts__pack(req);
    grpc_status_code code;

    for (;;) {
        struct ts_err e = { 0 };
        int64_t sleep_ms;
        /* Sending consumes a byte buffer's contents: each attempt gets its own copy. */
        grpc_byte_buffer *send = grpc_byte_buffer_copy(packed);

        code = attempt(c, method, send, resp_desc, resp, deadline, peer, &e);
        grpc_byte_buffer_destroy(send);
        now = ts_now_ms();
        /* Jitter in [backoff/2, backoff) keeps a restarted master from a thundering herd. */
        sleep_ms = backoff / 2 + (int64_t)((uint64_t)rand() % (uint64_t)(backoff / 2 + 1));
        if (code != GRPC_STATUS_UNAVAILABLE || now + sleep_ms >= deadline || !retry) {
            if (code != GRPC_STATUS_OK)
                ts_err_set(err, e.code, "%s", e.msg);
            break;
        }
        await_ready(c, sleep_ms);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    grpc_byte_buffer_destroy(packed);
    return ts_rpc_status_from_code(code);
}

ts_status ts_rpc_unary(struct ts_rpc_channel *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int deadline_ms, struct ts_err *err)
{
    return unary(c, method, req, resp_desc, resp, deadline_ms, true, NULL, err);
}

ts_status ts_rpc_unary_once(struct ts_rpc_channel *c, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                            int deadline_ms, struct ts_err *err)
{
    return unary(c, method, req, resp_desc, resp, deadline_ms, false, NULL, err);
}

ts_status ts_rpc_unary_peer(struct ts_rpc_channel *c, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                            int deadline_ms, struct ts_rpc_peer *peer, struct ts_err *err)
{
    return unary(c, method, req, resp_desc, resp, deadline_ms, false, peer, err);
}

ts_status ts_rpc_stream_open(struct ts_rpc_channel *c, const char *method,
                             const ProtobufCMessage *req, int deadline_ms,
                             struct ts_rpc_stream **out, struct ts_err *err)
{
    struct ts_rpc_stream *s = calloc(1, sizeof(*s));
    grpc_byte_buffer *send;
    grpc_slice path;
    grpc_op ops[3];
    grpc_metadata md;

    if (!s)
        return ts_err_set(err, TS_ENOMEM, "rpc stream: out of memory");
    s->ch = c;
    grpc_metadata_array_init(&s->initial_md);
    snprintf(s->method, sizeof(s->method), "%s", method);
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    path = grpc_slice_from_copied_string(method);
    s->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, path, NULL,
                                       deadline_at(ts_now_ms() + deadline_ms), NULL);
    grpc_slice_unref(path);
    send = ts__pack(req);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = ts__client_md(&md);
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(s->call, ops, 3, &s->tag, NULL) != GRPC_CALL_OK) {
        if (ops[0].data.send_initial_metadata.count)
            grpc_slice_unref(md.value);
        grpc_byte_buffer_destroy(send);
        ts_rpc_stream_free(s);
        return ts_err_set(err, TS_EINTERNAL, "%s: the call could not be started", method);
    }
    pluck(s->cq, &s->tag); /* a failure here shows up as the status on the first read */
    if (ops[0].data.send_initial_metadata.count)
        grpc_slice_unref(md.value);
    grpc_byte_buffer_destroy(send);
    *out = s;
    return TS_OK;
}

/* Reads the final status; returns it as a ts_status with err set when not OK. */
static ts_status stream_status(struct ts_rpc_stream *s, struct ts_err *err)
{
    grpc_metadata_array trail;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op op = { .op = GRPC_OP_RECV_STATUS_ON_CLIENT };
    ts_status st = TS_OK;

    grpc_metadata_array_init(&trail);
    op.data.recv_status_on_client.trailing_metadata = &trail;
    op.data.recv_status_on_client.status = &code;
    op.data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(s->call, &op, 1, &s->tag, NULL) == GRPC_CALL_OK)
        pluck(s->cq, &s->tag);
    s->finished = true;
    if (code != GRPC_STATUS_OK)
        st = status_error(s->ch, s->method, code, details, err);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trail);
    return st;
}

ts_status ts_rpc_stream_read(struct ts_rpc_stream *s, const ProtobufCMessageDescriptor *d,
                             ProtobufCMessage **resp, struct ts_err *err)
{
    grpc_byte_buffer *recv = NULL;
    grpc_op ops[2];
    size_t n = 0;
    ts_status st;

    if (s->finished) {
        *resp = NULL;
        return TS_OK;
    }
    memset(ops, 0, sizeof(ops));
    if (!s->got_initial_md) { /* as the C++ ClientReader does: with the first read */
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
        s->got_initial_md = true;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &recv;
    if (grpc_call_start_batch(s->call, ops, n, &s->tag, NULL) == GRPC_CALL_OK)
        pluck(s->cq, &s->tag);
    if (!recv) {
        if ((st = stream_status(s, err)))
            return st;
        *resp = NULL;
        return TS_OK;
    }
    *resp = ts__unpack(d, recv, false, NULL);
    grpc_byte_buffer_destroy(recv);
    if (!*resp)
        return ts_err_set(err, TS_ECORRUPT, "%s: a reply does not decode as %s", s->method,
                          d->name);
    return TS_OK;
}

void ts_rpc_stream_free(struct ts_rpc_stream *s)
{
    if (!s)
        return;
    if (!s->finished) {
        grpc_call_cancel(s->call, NULL);
        stream_status(s, NULL);
    }
    grpc_call_unref(s->call);
    grpc_metadata_array_destroy(&s->initial_md);
    cq_destroy(s->cq);
    free(s);
}
