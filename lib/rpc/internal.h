/* internal.h - lib/rpc's cross-file pieces: the server's threads, calls and tags.
 *
 * Every event on a completion queue carries a pointer to a `struct ts__tag`; its kind says
 * which struct embeds it. Each worker thread owns one completion queue (docs/rpc.md:
 * one CQ per thread) and counts the tags outstanding on it in `live`, plus one per streaming
 * thread whose call is bound to that queue, so a queue is shut down only when nothing can
 * start a batch on it any more. */
#ifndef TS_RPC_INTERNAL_H
#define TS_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdatomic.h>

#include "rpc/rpc.h"

enum ts__tag_kind {
    TS__TAG_REQUEST,  /* a posted request for a registered method arrived (or was cancelled) */
    TS__TAG_UNKNOWN,  /* a call for a method no service registered */
    TS__TAG_FINISH,   /* the final batch of a call completed: free it */
    TS__TAG_OP,       /* a batch started by a handler thread completed: wake it */
    TS__TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER of a streaming call completed */
    TS__TAG_SHUTDOWN, /* grpc_server_shutdown_and_notify fired */
};

struct ts__tag {
    enum ts__tag_kind kind;
};

struct ts__worker {
    struct ts_rpc_server *srv;
    grpc_completion_queue *cq;
    pthread_t thread;
    atomic_int live;
    atomic_bool shutdown_seen;
    struct ts__tag shutdown_tag;
};

struct ts__method {
    const struct ts_rpc_service *svc;
    const struct ts_rpc_method *m;
    char path[192];                  /* "/tessera.v1.Master/ClusterStatus" */
    void *handle;                    /* from grpc_server_register_method */
};

/* A request posted to gRPC and waiting for a call to arrive. */
struct ts__request {
    struct ts__tag tag;
    struct ts__worker *w;
    struct ts__method *method;       /* NULL for TS__TAG_UNKNOWN */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details;
};

struct ts__arena_block {
    struct ts__arena_block *next;
    max_align_t data[];
};

struct ts_rpc_call {
    struct ts__tag finish_tag, op_tag, close_tag;
    struct ts__worker *w;
    struct ts__method *method;       /* NULL for an unknown method */
    grpc_call *call;
    gpr_timespec deadline;           /* GPR_CLOCK_MONOTONIC */
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    struct ts__arena_block *arena;
    char peer[96];
    char unknown_path[192];
    int64_t t0_ns;                   /* arrival (ts_now_ns), for tessera_rpc_duration_seconds */
    unsigned roles;                  /* the caller's certificate's (ts_rpc_peer_roles) */
    bool roles_known;

    /* Streams and own-thread calls: the handler thread waits here for its batches. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool op_done, op_ok;
    bool sent_initial_md;
    grpc_byte_buffer *recv_buf;
    atomic_bool closed;              /* RECV_CLOSE_ON_SERVER completed */
    int cancelled;                   /* written by gRPC on close */
    atomic_int refs;
};

struct ts__health_entry {
    char name[128];
    bool serving;
};

struct ts_rpc_server {
    struct ts_rpc_server_opts opts;
    grpc_server *server;
    struct ts__worker *workers;
    int nworkers;
    int port;
    bool started, stopped;
    bool mtls;                       /* client certificates required and checked (tls.c) */
    atomic_bool stopping;
    atomic_int streams;
    atomic_int calls;                /* calls accepted and not yet freed */

    const struct ts_rpc_service *services[16];
    int nservices;
    struct ts__method *methods;
    int nmethods;
    struct ts__reflection *reflection;
    struct ts_rpc_service builtin[3];   /* health, reflection v1, v1alpha, with ctx */

    pthread_mutex_t mu;              /* health table, wake generation */
    pthread_cond_t cv;
    struct ts__health_entry health[18];
    int nhealth;
    uint64_t gen;                    /* bumped on every health change and wake */
};

/* server.c */
void ts__request_post(struct ts__worker *w, struct ts__method *m);
/* call.c */
grpc_byte_buffer *ts__pack(const ProtobufCMessage *m);          /* caller destroys */
/* Decodes bb as d; NULL if the bytes do not decode. With check (requests), string fields are
 * checked first (wirecheck.c): NULL with err set to TS_EINVAL naming the field. */
ProtobufCMessage *ts__unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                             bool check, struct ts_err *err);
/* tls.c: the credentials for a server or a channel made now, from the process's TLS material
 * (resolved from the environment first if nobody set it); the caller releases *out. *mtls:
 * client certificates will be required and checked; *secure: the channel speaks TLS. */
ts_status ts__server_creds(grpc_server_credentials **out, bool *mtls,
                           struct ts_err *err) TS_MUST_CHECK;
ts_status ts__channel_creds(grpc_channel_credentials **out, bool *secure,
                            struct ts_err *err) TS_MUST_CHECK;
/* The certificate the other end of a connection showed (auth context ctx, may be NULL): a
 * server's caller or a channel's server; *out zeroed when there is none. */
void ts__peer_of(grpc_auth_context *ctx, struct ts_rpc_peer *out);
/* The metadata a call sends: the admin token, if this process has one (1 entry in *md, whose
 * value the caller unrefs after the batch), else none (0). */
size_t ts__client_md(grpc_metadata *md);
/* wirecheck.c */
ts_status ts__wire_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                         struct ts_err *err);
struct ts_rpc_call *ts__call_from_request(struct ts__request *r);
void ts__call_dispatch(struct ts_rpc_call *c);
void ts__call_unknown(struct ts_rpc_call *c);
void ts__call_finished(struct ts_rpc_call *c);           /* TS__TAG_FINISH */
void ts__call_op_done(struct ts_rpc_call *c, bool ok);   /* TS__TAG_OP */
void ts__call_closed(struct ts_rpc_call *c);             /* TS__TAG_CLOSE */
/* health.c: -1 unknown service, 0 not serving, 1 serving; *gen the generation read with it. */
int ts__health_get(struct ts_rpc_server *s, const char *service, uint64_t *gen);
extern const struct ts_rpc_method ts__health_methods[];

#endif
