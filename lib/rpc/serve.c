/* serve.c - see serve.h. */
#include "rpc/serve.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/http.h"
#include "util/log.h"
#include "util/proc.h"

ts_status ts_serve_advertised(const char *listen, const char *advertise, int port, char *out,
                              size_t n, struct ts_err *err)
{
    const char *colon = strrchr(listen, ':');
    int hostlen = colon ? (int)(colon - listen) : (int)strlen(listen);
    char *end;
    long p;

    if (advertise && advertise[0] && (!strchr(advertise, ':') ||
                                      advertise[strlen(advertise) - 1] == ']')) {
        snprintf(out, n, "%s:%d", advertise, port);   /* a host alone: the bound port */
        return TS_OK;
    }
    if (advertise && advertise[0]) {
        colon = strrchr(advertise, ':');
        p = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == advertise || colon[1] == '\0' || *end || p < 1 || p > 65535)
            return ts_err_set(err, TS_EINVAL, "--advertise: '%.200s' is not HOST or HOST:PORT "
                              "(the address other hosts reach this server at)", advertise);
        snprintf(out, n, "%s", advertise);
        return TS_OK;
    }
    if (hostlen == 0 || (hostlen == 7 && strncmp(listen, "0.0.0.0", 7) == 0) ||
        (hostlen == 4 && strncmp(listen, "[::]", 4) == 0))
        return ts_err_set(err, TS_EINVAL, "--advertise: required with --listen %s (every "
                          "address): name the one other hosts reach, e.g. --advertise "
                          "HOST:%d", listen, port);
    snprintf(out, n, "%.*s:%d", hostlen, listen, port);
    return TS_OK;
}

/* Splits HOST, HOST:PORT, [IPV6], [IPV6]:PORT or a bare IPv6 address into host (brackets
 * kept) and *port (-1: none); false if malformed. */
static bool split_host_port(const char *s, char *host, size_t n, int64_t *port)
{
    const char *colon, *close;
    char *end;

    *port = -1;
    if (s[0] == '[') {
        if (!(close = strchr(s, ']')) || (close[1] && close[1] != ':'))
            return false;
        colon = close[1] ? close + 1 : NULL;
        snprintf(host, n, "%.*s", (int)(close - s + 1), s);
    } else {
        colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':'))
            colon = NULL;   /* an IPv6 address without brackets, and no port */
        snprintf(host, n, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
    }
    if (colon) {
        *port = strtol(colon + 1, &end, 10);
        if (colon[1] < '0' || colon[1] > '9' || *end || *port > 65535)
            return false;
    }
    return host[0] != '\0';
}

ts_status ts_serve_metrics_addr(const char *listen, int64_t port, const char *grpc_listen,
                                char *host, size_t n, int64_t *out_port, struct ts_err *err)
{
    int64_t named = -1;
    char h[256];

    if (listen && !split_host_port(listen, h, sizeof(h), &named))
        return ts_err_set(err, TS_EINVAL, "--metrics-listen: '%.200s' is not HOST, HOST:PORT, "
                          "[IPV6] or [IPV6]:PORT (e.g. 0.0.0.0 or 10.0.0.5:9400)", listen);
    if (named >= 0 && port >= 0 && named != port)
        return ts_err_set(err, TS_EINVAL, "--metrics-listen %s names port %lld, --metrics-port "
                          "%lld: give the port once", listen, (long long)named,
                          (long long)port);
    if (listen && named < 0 && port < 0)
        return ts_err_set(err, TS_EINVAL, "--metrics-listen %s: on which port? add "
                          "--metrics-port PORT (0: a free one), or write HOST:PORT", listen);
    if (!listen && grpc_listen && strrchr(grpc_listen, ':'))   /* gRPC's HOST:PORT */
        snprintf(h, sizeof(h), "%.*s", (int)(strrchr(grpc_listen, ':') - grpc_listen),
                 grpc_listen);
    else if (!listen)
        snprintf(h, sizeof(h), "127.0.0.1");
    snprintf(host, n, "%s", h[0] ? h : "0.0.0.0");   /* gRPC's ":PORT": every address */
    *out_port = named >= 0 ? named : port;
    return TS_OK;
}

/* The process's /metrics server. */
static struct ts_metrics_http *metrics_http;
static pthread_mutex_t metrics_mu = PTHREAD_MUTEX_INITIALIZER;

ts_status ts_serve_metrics(const char *host, int64_t port, const char *who, struct ts_err *err)
{
    ts_status st = TS_OK;

    pthread_mutex_lock(&metrics_mu);
    if (metrics_http)
        st = ts_err_set(err, TS_EEXIST, "metrics: served already on port %u",
                        ts_metrics_http_port(metrics_http));
    else if (!(st = ts_metrics_http_start(host, (uint16_t)port, &metrics_http, err))) {
        bool v6 = strchr(host, ':') && host[0] != '[';   /* a URL brackets it */
        ts_log(TS_INFO, who, "metrics at http://%s%s%s:%u/metrics", v6 ? "[" : "", host,
               v6 ? "]" : "", ts_metrics_http_port(metrics_http));
    }
    pthread_mutex_unlock(&metrics_mu);
    return st;
}

void ts_serve_metrics_stop(void)
{
    pthread_mutex_lock(&metrics_mu);
    ts_metrics_http_stop(metrics_http);
    metrics_http = NULL;
    pthread_mutex_unlock(&metrics_mu);
}

ts_status ts_serve_start(const struct ts_serve_opts *o, struct ts_rpc_service *svc,
                         struct ts_rpc_server **out, struct ts_err *err)
{
    struct ts_rpc_server_opts so = { .listen = o->listen, .threads = (int)o->threads };
    struct ts_rpc_server *srv = NULL;
    char mhost[256];
    int64_t mport;
    ts_status st;

    struct ts_rpc_tls tls = o->tls;

    *out = NULL;
    if ((st = ts_serve_metrics_addr(o->metrics_listen, o->metrics_port, o->listen, mhost,
                                    sizeof(mhost), &mport, err)))
        return st;
    /* Told --insecure: what it was given, never what a shell exported for another cluster
     * (a client certificate of $TESSERA_TLS_DIR is no server's). */
    tls.no_env = o->insecure;
    if ((st = ts_rpc_tls_setup(&tls, err)))
        return st;
    if (!ts_rpc_tls_mutual() && !o->insecure)
        return ts_err_set(err, TS_EAUTH, "no mutual TLS: give --tls-cert, --tls-key and --tls-ca "
                          "(or $TESSERA_TLS_DIR with ca.pem; `tessera certs init DIR` makes "
                          "them), or --insecure to serve %s, which anyone who reaches the port "
                          "may call (docs/security.md)", ts_rpc_tls_mode()[0] == 'p' ?
                          "plaintext" : "TLS without client certificates");
    if ((st = ts_rpc_server_create(&so, &srv, err)) ||
        (st = ts_rpc_server_add(srv, svc, err)) || (st = ts_rpc_server_start(srv, err)) ||
        (o->port_file && (st = ts_port_file_write(o->port_file, ts_rpc_server_port(srv), err))) ||
        (mport >= 0 && (st = ts_serve_metrics(mhost, mport, svc->name, err)))) {
        ts_rpc_server_free(srv);
        return st;
    }
    if (ts_rpc_tls_plain_token())
        ts_log(TS_WARN, svc->name, "--token-file without TLS: the admin token is worthless "
               "here, since a caller sends it in the clear for anyone on the path to read and "
               "reuse; this service sends it on none of its calls. Serve TLS (--tls-cert, "
               "--tls-key, --tls-ca) or drop --token-file (docs/security.md)");
    if (!strcmp(ts_rpc_tls_mode(), "plaintext"))
        ts_log(TS_WARN, svc->name, "--insecure: plaintext gRPC and an unauthenticated data "
               "plane: anyone who reaches the ports may call any method and push to any job; "
               "for loopback development only (docs/security.md)");
    else if (!ts_rpc_tls_mutual())
        ts_log(TS_WARN, svc->name, "--insecure: TLS, but no client certificates checked (no "
               "--tls-ca): anyone who reaches the port may call any method, and the data "
               "plane is unauthenticated (docs/security.md)");
    else
        ts_log(TS_INFO, svc->name, "gRPC over TLS, client certificates required (mutual TLS)");
    *out = srv;
    return TS_OK;
}
