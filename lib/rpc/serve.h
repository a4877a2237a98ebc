/* serve.h - what every Tessera gRPC service does at start-up: its common options (--listen,
 * --port-file, --threads, --grace-ms), a server with its handler table on --listen, and the
 * port file a launcher waits for (util/launch.h). tessera-master, tessera-shard and
 * tessera-verify each put TS_SERVE_FLAGS in their flag table and call ts_serve_start; their
 * own start-up (membership, data plane, store) and their drain (ts_rpc_server_shutdown with
 * grace_ms) stay theirs.
 * Ownership: the server returned is the caller's, freed with ts_rpc_server_free. */
#ifndef TS_RPC_SERVE_H
#define TS_RPC_SERVE_H

#include <stdint.h>

#include "rpc/rpc.h"
#include "util/flags.h"

struct ts_serve_opts {
    const char *listen;          /* the caller's default, then --listen */
    const char *port_file;       /* --port-file; NULL: none */
    int64_t threads;             /* --threads; set the default (2) first */
    int64_t grace_ms;            /* --grace-ms: calls in flight on SIGTERM; default 5000 */
    int64_t metrics_port;        /* --metrics-port: Prometheus' /metrics; -1 (default): off */
    const char *metrics_listen;  /* --metrics-listen; NULL (default): listen's host */
    struct ts_rpc_tls tls;       /* --tls-cert, --tls-key, --tls-ca (ts_rpc_tls_setup) */
    /* --insecure: serve without mutual TLS. Without it a service that has no certificates
     * and CA refuses to start (docs/security.md, "Safe by default"). */
    bool insecure;
};
#define TS_SERVE_DEFAULTS(listen_)                                                               \
    { .listen = (listen_), .threads = 2, .grace_ms = 5000, .metrics_port = -1,                   \
      .tls.server = true }

/* The flag-table entries for o (a struct ts_serve_opts *); listen_help says its default. */
#define TS_SERVE_FLAGS(o, listen_help)                                                           \
    { "listen", TS_FLAG_STR, &(o)->listen, "ADDR", listen_help, 0, 0 },                          \
    { "port-file", TS_FLAG_STR, &(o)->port_file, "FILE", "write the bound port here", 0, 0 },    \
    { "threads", TS_FLAG_INT, &(o)->threads, "N", "completion-queue threads (default 2)", 1,     \
      64 },                                                                                      \
    { "grace-ms", TS_FLAG_INT, &(o)->grace_ms, "MS", "on SIGTERM, time for calls in flight "     \
      "(default 5000)", 0, 600000 },                                                             \
    TS_METRICS_FLAGS(&(o)->metrics_port, &(o)->metrics_listen, "the host of --listen"),        \
    { "insecure", TS_FLAG_BOOL, &(o)->insecure, NULL, "serve plaintext gRPC (or TLS without "  \
      "client certificates) and an unauthenticated data plane: anyone who reaches the ports "    \
      "may call any method and push to any job; for loopback development only. Without it "     \
      "the service needs --tls-cert, --tls-key and --tls-ca (docs/security.md)", 0, 0 },        \
    TS_TLS_FLAGS(&(o)->tls)
/* --tls-cert, --tls-key, --tls-ca, --token-file into a struct ts_rpc_tls, for any program. */
#define TS_TLS_FLAGS(t)                                                                          \
    { "tls-cert", TS_FLAG_STR, &(t)->cert, "PEM", "this process's certificate: TLS on every "   \
      "gRPC server and call (default $TESSERA_TLS_CERT; docs/security.md)", 0, 0 },             \
    { "tls-key", TS_FLAG_STR, &(t)->key, "PEM", "its private key (default $TESSERA_TLS_KEY)",   \
      0, 0 },                                                                                    \
    { "tls-ca", TS_FLAG_STR, &(t)->ca, "PEM", "the CA: a server requires client certificates " \
      "it signed (mutual TLS); a client checks servers against it (default $TESSERA_TLS_CA, "    \
      "then $TESSERA_TLS_DIR/ca.pem)", 0, 0 },                                                  \
    { "token-file", TS_FLAG_STR, &(t)->token_file, "FILE", "the admin token: admin calls need " \
      "it (or an admin certificate), and this process's calls send it (default "                 \
      "$TESSERA_TOKEN_FILE)", 0, 0 }
/* --advertise, for the servers that register (shards, the verify service): into a const char *
 * that defaults to NULL; ts_serve_advertised makes the address from it. */
#define TS_ADVERTISE_FLAG(p)                                                                     \
    { "advertise", TS_FLAG_STR, (p), "HOST[:PORT]", "address to register, which other hosts "   \
      "reach (default: the listen host; the port: the bound one; give it when listening on "     \
      "0.0.0.0)", 0, 0 }
/* --metrics-port and --metrics-listen, for any program (the worker too): into an int64_t that
 * defaults to -1 and a const char * that defaults to NULL; host_help names the default host. */
#define TS_METRICS_FLAGS(port, listen, host_help)                                                \
    { "metrics-port", TS_FLAG_INT, (port), "PORT", "serve Prometheus metrics on "               \
      "http://HOST:PORT/metrics, HOST as --metrics-listen says (0: a free port, logged; "         \
      "default: off; docs/observability.md)", 0, 65535 },                                        \
    { "metrics-listen", TS_FLAG_STR, (listen), "HOST[:PORT]", "the address /metrics listens on " \
      "(default: " host_help "; 0.0.0.0: every IPv4 address); a PORT here is --metrics-port", \
      0, 0 }

/* Sets the process's TLS material from o->tls (ts_rpc_tls_setup), creates the server on o->listen
 * with o->threads, adds svc (its ctx set by the caller), starts it, logs whether it serves
 * plaintext, TLS or mutual TLS, and writes o->port_file; with a metrics port (--metrics-port,
 * or one in --metrics-listen), serves /metrics too (ts_serve_metrics_addr, ts_serve_metrics).
 * TS_EINVAL, with nothing started, for flags ts_serve_metrics_addr refuses. TS_EAUTH, with
 * nothing started, for a service that would
 * serve without mutual TLS and was not given --insecure: the message says what to give. On
 * failure nothing is left running and *out is NULL. */
ts_status ts_serve_start(const struct ts_serve_opts *o, struct ts_rpc_service *svc,
                         struct ts_rpc_server **out, struct ts_err *err) TS_MUST_CHECK;

/* The address a server registers, into out (n bytes): `advertise` when set (HOST:PORT, or a
 * HOST alone, or [IPv6] alone, which takes the bound port), else listen's host with the bound
 * port. TS_EINVAL for a malformed advertise, or a wildcard listen host (0.0.0.0, [::]) without
 * one: other hosts could not reach it. */
ts_status ts_serve_advertised(const char *listen, const char *advertise, int port, char *out,
                              size_t n, struct ts_err *err) TS_MUST_CHECK;

/* Where /metrics listens, from --metrics-listen (listen: HOST, HOST:PORT, [IPV6] or
 * [IPV6]:PORT; NULL: grpc_listen's host, or 127.0.0.1 for a program that serves no gRPC
 * (grpc_listen NULL): the endpoint is as exposed as the service, no more) and --metrics-port
 * (port; -1: not given). On TS_OK, host (n bytes) and *out_port: -1 when metrics are off.
 * TS_EINVAL naming the flags for a malformed --metrics-listen, two different ports, or a
 * --metrics-listen with no port anywhere. */
ts_status ts_serve_metrics_addr(const char *listen, int64_t port, const char *grpc_listen,
                                char *host, size_t n, int64_t *out_port,
                                struct ts_err *err) TS_MUST_CHECK;
/* Serves the process's metrics on host (ts_metrics_http_start), port (>= 0; 0: a free one),
 * and logs the address; `who` names the program in the log. Once per process (a second
 * call: TS_EEXIST). A program calls ts_serve_metrics_stop before it frees what its
 * collectors read. */
ts_status ts_serve_metrics(const char *host, int64_t port, const char *who,
                           struct ts_err *err) TS_MUST_CHECK;
void ts_serve_metrics_stop(void);

#endif
