/* rpc.h - gRPC servers and clients for Tessera, on the gRPC C core with protobuf-c messages.
 *
 * Why: every Tessera service speaks gRPC so that independent tools (grpcurl, python3-grpcio,
 * @grpc/grpc-js) can call it. The gRPC C core is a completion-queue API with many sharp edges
 * (docs/rpc.md lists them); this module keeps them in one place and gives services a
 * handler table, typed messages and ts_status errors.
 *
 * Server: a service is a name and a table of methods. Unary handlers run on a completion-queue
 * thread and must not block for long; a method flagged TS_RPC_OWN_THREAD, and every streaming
 * method, runs on a thread of its own and may block (ts_rpc_send/ts_rpc_recv). Every server
 * also answers grpc.health.v1.Health (Check, Watch) and server reflection (grpc.reflection.v1
 * and v1alpha) from the descriptor set embedded at build time.
 *
 * Errors: a handler returns a ts_status and sets err; lib/rpc/status.c turns it into the gRPC
 * status code and err.msg into the status message. A non-OK status never carries a message body.
 *
 * Client: ts_rpc_unary() makes one call with a deadline, retrying with backoff while the peer is
 * UNAVAILABLE and the deadline allows. All Tessera control RPCs are idempotent or deduplicated
 * (RegisterShard by instance), which is what makes that retry safe.
 *
 * Ownership: see each function. Memory a handler puts into its response comes from the call's
 * arena (ts_rpc_alloc, ts_rpc_strdup, ts_rpc_new), from the request (which the layer frees only
 * after the reply is packed) or is static; the layer frees it after sending.
 * Threads: a server and a channel may be used from any thread; a call object belongs to the
 * handler that was given it, until the handler returns. */
#ifndef TS_RPC_RPC_H
#define TS_RPC_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sec/certs.h"
#include "util/err.h"

struct ts_rpc_server;
struct ts_rpc_call;
struct ts_rpc_channel;
struct ts_rpc_stream;

/* Method flags. */
#define TS_RPC_STREAM_OUT  0x1u /* the server sends a stream of responses (ts_rpc_send) */
#define TS_RPC_STREAM_IN   0x2u /* the client sends a stream of requests (ts_rpc_recv); req is
                                 * NULL */
#define TS_RPC_OWN_THREAD  0x4u /* a unary handler that may block: run it on its own thread */

/* A handler. Unary: req is the decoded request (borrowed, valid until return) and resp an
 * initialised empty response to fill. Streaming: resp is NULL; use ts_rpc_send/ts_rpc_recv.
 * Return TS_OK, or a status with err set: the client receives the mapped gRPC code. */
typedef ts_status (*ts_rpc_handler)(struct ts_rpc_call *call, const ProtobufCMessage *req,
                                    ProtobufCMessage *resp, struct ts_err *err);

struct ts_rpc_method {
    const char *name;                         /* "ClusterStatus" */
    ts_rpc_handler fn;
    const ProtobufCMessageDescriptor *req;    /* request type */
    const ProtobufCMessageDescriptor *resp;   /* response type */
    unsigned flags;                           /* TS_RPC_* */
    /* Who may call it (sec/certs.h TS_ROLE_* bits; ts_rpc_need_role checks before the
     * handler runs); 0: any caller the server lets in. */
    unsigned roles;
    /* The largest request it takes, in bytes (0: TS_RPC_REQUEST_MAX, 1 MiB): a larger one is
     * refused with RESOURCE_EXHAUSTED before it is decoded, and the server's receive limit is
     * the largest of its methods', so no caller makes it hold 64 MiB for a call that needs
     * a few hundred bytes. */
    uint32_t max_request;
};
#define TS_RPC_REQUEST_MAX (1u << 20)

struct ts_rpc_service {
    const char *name;                         /* full name: "tessera.v1.Master" */
    const struct ts_rpc_method *methods;      /* ends with an entry whose name is NULL */
    void *ctx;                                /* handed to handlers by ts_rpc_ctx() */
};

struct ts_rpc_server_opts {
    const char *listen;       /* "127.0.0.1:0" picks a free port; required */
    int threads;              /* completion-queue threads; 0: 2 */
    size_t max_message;       /* largest message received; 0: the largest max_request of the
                               * services' methods */
    int max_streams;          /* concurrent streaming calls; 0: 256. More get RESOURCE_EXHAUSTED */
};

/* Creates a server; nothing listens until ts_rpc_server_start(). The caller owns *out and frees
 * it with ts_rpc_server_free(). Calls grpc_init(); block signals before this (util/proc.h). */
ts_status ts_rpc_server_create(const struct ts_rpc_server_opts *o, struct ts_rpc_server **out,
                               struct ts_err *err) TS_MUST_CHECK;

/* Adds a service before start. svc and its method table are borrowed and must outlive the
 * server (in practice: static). TS_EEXIST for a name added twice. */
ts_status ts_rpc_server_add(struct ts_rpc_server *s, const struct ts_rpc_service *svc,
                            struct ts_err *err) TS_MUST_CHECK;

/* Binds the listen address and starts the threads; every added service, and "", become SERVING
 * in health. TS_EUNAVAIL when the address cannot be bound (in use, bad host). */
ts_status ts_rpc_server_start(struct ts_rpc_server *s, struct ts_err *err) TS_MUST_CHECK;

/* The bound port (after start), e.g. to print it when the listen port was 0. */
int ts_rpc_server_port(const struct ts_rpc_server *s);

/* Health status of one service ("" is the server as a whole). Health.Watch streams see it. */
void ts_rpc_server_set_serving(struct ts_rpc_server *s, const char *service, bool serving);

/* Stops: health goes NOT_SERVING, no new calls are accepted, calls in flight get up to grace_ms
 * to finish (streams see ts_rpc_done() turn true), the rest are cancelled; then the threads are
 * joined. Safe to call once; ts_rpc_server_free() calls it if it was not called. */
void ts_rpc_server_shutdown(struct ts_rpc_server *s, int grace_ms);

void ts_rpc_server_free(struct ts_rpc_server *s);

/* ---- inside a handler ---- */

void *ts_rpc_ctx(const struct ts_rpc_call *call);           /* the service's ctx */
const char *ts_rpc_method_name(const struct ts_rpc_call *call);
const char *ts_rpc_peer(struct ts_rpc_call *call);          /* "ipv4:127.0.0.1:5432"; call-owned */
/* Milliseconds until the client's deadline (INT64_MAX when none). */
int64_t ts_rpc_deadline_left_ms(const struct ts_rpc_call *call);
/* True once the client cancelled, the deadline passed, or the server is shutting down. */
bool ts_rpc_done(const struct ts_rpc_call *call);

/* Arena memory, zeroed, freed by the layer after the response is sent. Aborts on ENOMEM (an
 * arena allocation is small and bounded by the handler). */
void *ts_rpc_alloc(struct ts_rpc_call *call, size_t n);
char *ts_rpc_strdup(struct ts_rpc_call *call, const char *s);
/* A message of type d, initialised, in the arena. */
void *ts_rpc_new(struct ts_rpc_call *call, const ProtobufCMessageDescriptor *d);
/* A call with no RPC behind it, for code that builds messages with the three functions above
 * outside a handler (the master's state file) and shares builders with handlers: only those
 * may be given it. Asked about its caller (ts_rpc_peer, ts_rpc_caller, ts_rpc_peer_roles,
 * ts_rpc_peer_identity, ts_rpc_need_role), it answers for a call that has none: no peer, no
 * certificate, and any call allowed. NULL when out of memory; ts_rpc_scratch_free frees it,
 * arena and all. */
struct ts_rpc_call *ts_rpc_scratch_new(void);
void ts_rpc_scratch_free(struct ts_rpc_call *call);

/* Streaming handlers only. ts_rpc_send blocks until the message is written; TS_ECANCELLED when
 * the call is over (client gone, deadline, shutdown). msg is borrowed. */
ts_status ts_rpc_send(struct ts_rpc_call *call, const ProtobufCMessage *msg,
                      struct ts_err *err) TS_MUST_CHECK;
/* Receives the next request of a TS_RPC_STREAM_IN call. On TS_OK *msg is the message (caller
 * frees with protobuf_c_message_free_unpacked(*msg, NULL)) or NULL when the client half-closed.
 * TS_EINVAL for bytes that do not decode, TS_ECANCELLED when the call is over. */
ts_status ts_rpc_recv(struct ts_rpc_call *call, ProtobufCMessage **msg,
                      struct ts_err *err) TS_MUST_CHECK;
/* Waits until ts_rpc_done() or until woken by ts_rpc_server_wake(), at most ms. For streams
 * that send on change (Health.Watch). */
void ts_rpc_wait(struct ts_rpc_call *call, int ms);
void ts_rpc_server_wake(struct ts_rpc_server *s);

/* ---- client ---- */

struct ts_rpc_channel_opts {
    size_t max_message;       /* largest message received; 0: the largest max_request of the
                               * services' methods */
    /* A connection of its own, not shared with this process's other channels to the same
     * target (gRPC shares them by default), as a separate process has: for measuring what a
     * connection costs a server (bench_rpc_latency --conns). */
    bool own_connection;
};

/* A channel to target ("127.0.0.1:7070"). Connects lazily. The caller owns *out, frees it with
 * ts_rpc_channel_free(). opts may be NULL. Calls grpc_init(). */
ts_status ts_rpc_channel_create(const char *target, const struct ts_rpc_channel_opts *opts,
                                struct ts_rpc_channel **out, struct ts_err *err) TS_MUST_CHECK;
void ts_rpc_channel_free(struct ts_rpc_channel *ch);
const char *ts_rpc_channel_target(const struct ts_rpc_channel *ch);

/* One unary call of method ("/tessera.v1.Master/ClusterStatus") with a deadline of deadline_ms
 * (> 0) for the whole call including retries; UNAVAILABLE is retried with exponential backoff
 * (20 ms doubling to 1 s, jittered) while the deadline allows. On TS_OK *resp is the response:
 * the caller frees it with protobuf_c_message_free_unpacked(*resp, NULL). On failure err says
 * the method, the target and the server's message. */
ts_status ts_rpc_unary(struct ts_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int deadline_ms, struct ts_err *err) TS_MUST_CHECK;

/* ts_rpc_unary without the retry: one attempt, UNAVAILABLE returned at once. For a long call
 * to a peer that may die meanwhile (a snapshot write), where retrying until the deadline
 * would only hold the caller. */
ts_status ts_rpc_unary_once(struct ts_rpc_channel *ch, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                            int deadline_ms, struct ts_err *err) TS_MUST_CHECK;

/* Who answered a call, as the certificate it showed on the connection says (tls.c). */
struct ts_rpc_peer {
    bool tls;                               /* it showed one: the channel speaks TLS */
    unsigned roles;                         /* sec/certs.h TS_ROLE_* */
    char identity[TS_MEMBER_MAX + 1];       /* the member it names; "": none */
};
/* ts_rpc_unary_once that also says who answered: on TS_OK *peer is the certificate of the
 * server that sent the reply (all zero on a plaintext channel). For a caller that must know
 * which member listens at an address before it trusts the address (the master's probe of a
 * registering shard, docs/security.md). */
ts_status ts_rpc_unary_peer(struct ts_rpc_channel *ch, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                            int deadline_ms, struct ts_rpc_peer *peer,
                            struct ts_err *err) TS_MUST_CHECK;

/* A server-streaming call: sends req, then ts_rpc_stream_read() returns the responses. No retry
 * (a stream may have been partly consumed). The caller owns *out: ts_rpc_stream_free(). */
ts_status ts_rpc_stream_open(struct ts_rpc_channel *ch, const char *method,
                             const ProtobufCMessage *req, int deadline_ms,
                             struct ts_rpc_stream **out, struct ts_err *err) TS_MUST_CHECK;
/* On TS_OK *resp is the next message (free with protobuf_c_message_free_unpacked) or NULL at
 * the end of a stream the server finished with OK. */
ts_status ts_rpc_stream_read(struct ts_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                             ProtobufCMessage **resp, struct ts_err *err) TS_MUST_CHECK;
/* Cancels the call if it is still running, and frees it. NULL is a no-op. */
void ts_rpc_stream_free(struct ts_rpc_stream *st);

/* ---- TLS and the admin token (tls.c; docs/security.md) ---- */

#define TS_RPC_TOKEN_MAX 256

/* PEM files and the admin token's file; NULL or "": not given. server: the process serves
 * (ts_serve_start sets it): a token without TLS is kept to check callers, with a warning,
 * where a client refuses it (below). */
struct ts_rpc_tls {
    const char *cert, *key, *ca, *token_file;
    bool server;
    /* Take nothing from the environment, only the members given: a process told --insecure
     * (none given: plaintext), whatever a shell exported for another cluster. */
    bool no_env;
};

/* Sets the TLS material of every server and channel this process makes from now on: each
 * member not given comes from $TESSERA_TLS_CERT, $TESSERA_TLS_KEY, $TESSERA_TLS_CA, else from
 * $TESSERA_TLS_DIR's client.pem, client.key and ca.pem; none at all is plaintext (the token:
 * from $TESSERA_TOKEN_FILE; none: no token). Without a
 * call, the first server or channel resolves the environment alone. Reads and checks the
 * files now: TS_EINVAL for a certificate without its key (or the key of another), TS_EIO
 * naming a file that cannot be read, TS_ECORRUPT for one that is not PEM.
 * Servers: with a certificate, TLS; with a CA too, mutual TLS (every client must show a
 * certificate the CA signed; ts_rpc_need_role checks its role). Channels: TLS when a CA or a
 * certificate is set, checking the server's certificate names TS_TLS_SERVER_NAME.
 * The admin token: every call this process makes over TLS sends it ("authorization: Bearer
 * ..."), and its servers' admin methods (ts_rpc_method.roles naming TS_ROLE_ADMIN) accept a
 * caller that sends it as admin; set, it guards them on plaintext and TLS servers too. It is
 * never sent in the clear: a client (t->server false, or no call: the environment) with a
 * token and neither a certificate nor a CA fails here, and every channel after, with TS_EINVAL
 * saying to use TLS or drop the token; a server keeps it to check callers and sends it on no
 * call (ts_rpc_tls_plain_token). */
ts_status ts_rpc_tls_setup(const struct ts_rpc_tls *t, struct ts_err *err) TS_MUST_CHECK;
/* Whether this process holds a token but no TLS (a server's case above): it is worthless
 * then, since any caller that sends it shows it to the network. */
bool ts_rpc_tls_plain_token(void);
/* What servers made now serve: "mtls", "tls" or "plaintext"; ts_rpc_tls_mutual: "mtls". */
const char *ts_rpc_tls_mode(void);
bool ts_rpc_tls_mutual(void);
/* The roles (sec/certs.h TS_ROLE_*) of this process's own certificate; 0 without one. */
unsigned ts_rpc_tls_roles(void);
/* Inside a handler: the roles of the caller's certificate (0: none shown). */
unsigned ts_rpc_peer_roles(struct ts_rpc_call *call);
/* Inside a handler: the member the caller's certificate names (sec/certs.h, "Member
 * identities") into buf (n bytes; TS_MEMBER_MAX + 1 hold any); returns false, with buf "",
 * when it shows no certificate or one that names no member (or names one badly). Reads the
 * certificate itself: for registrations, not for every heartbeat. */
bool ts_rpc_peer_identity(struct ts_rpc_call *call, char *buf, size_t n);
/* Inside a handler: who the caller is, for quotas (docs/security.md, "Quotas"): under mutual
 * TLS the member its certificate names (ts_rpc_peer_identity), else its subject CN
 * ("CN=worker.tessera"), otherwise the host part of its address ("127.0.0.1", "[::1]",
 * "unix:/path"); "local" for a call with no caller. At most TS_RPC_IDENTITY_MAX bytes into out
 * (n bytes), cut if longer. */
#define TS_RPC_IDENTITY_MAX 128
void ts_rpc_caller(struct ts_rpc_call *call, char *out, size_t n);
/* TS_OK if the caller may make a call open to `roles`: its certificate has one of them, or it
 * sent this process's admin token and roles has TS_ROLE_ADMIN. A server that checks no client
 * certificates (plaintext, TLS without a CA) takes every caller for any member role, and for
 * an admin too while it has no token. Else TS_EAUTH (no credential, or a wrong token) or
 * TS_EPERM (a certificate without the role), naming the method and what it needs. */
ts_status ts_rpc_need_role(struct ts_rpc_call *call, unsigned roles,
                           struct ts_err *err) TS_MUST_CHECK;

/* ---- status codes (status.c) ---- */

/* The gRPC status code for s (grpc_status_code values), and back. */
int ts_rpc_code_from_status(ts_status s);
ts_status ts_rpc_status_from_code(int grpc_code);
const char *ts_rpc_code_name(int grpc_code);

#endif
