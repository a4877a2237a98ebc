/* http.c - see http.h. */
#include "metrics/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "metrics/metrics.h"

#define REQUEST_MEMORY (16 * 1024)   /* a request line and headers past this are refused */
#define MAX_CONNECTIONS 64
#define IDLE_TIMEOUT_S 10

#define MAX_ROUTES 8

struct ts_metrics_http {
    struct MHD_Daemon *d;
    uint16_t port;
};

struct route {
    const char *path;
    char *(*fn)(void *ctx, size_t *len, const char **type);
    void *ctx;
};
static struct route routes[MAX_ROUTES];
static size_t nroutes;   /* written before any server starts */

void ts_metrics_http_route(const char *path, char *(*fn)(void *ctx, size_t *len,
                                                         const char **type), void *ctx)
{
    if (nroutes < MAX_ROUTES)
        routes[nroutes++] = (struct route){ path, fn, ctx };
}

/* The body of path: the registry's text for /metrics, or a route's; NULL with *code 404 for
 * an unknown path, 500 when it could not be made. */
static char *body_of(const char *path, size_t *len, const char **type, unsigned *code)
{
    char *text;

    *code = MHD_HTTP_OK;
    if (!strcmp(path, "/metrics")) {
        *type = "text/plain; version=0.0.4; charset=utf-8";
        text = ts_metrics_render(len);
    } else {
        size_t i = 0;
        while (i < nroutes && strcmp(routes[i].path, path))
            i++;
        if (i == nroutes) {
            *code = MHD_HTTP_NOT_FOUND;
            return NULL;
        }
        text = routes[i].fn(routes[i].ctx, len, type);
    }
    if (!text)
        *code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    return text;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *text,
                             const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                             MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ok;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    struct MHD_Response *r;
    enum MHD_Result ok;
    const char *type = NULL;
    unsigned code;
    size_t len = 0;
    char *text;

    (void)cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use GET\n",
                     "GET, HEAD");
    if (!(text = body_of(url, &len, &type, &code)))
        return reply(c, code, code == MHD_HTTP_NOT_FOUND ? "not found: try /metrics\n"
                                                         : "could not render it\n", NULL);
    if (!(r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE))) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* libmicrohttpd's own unescaping, but a path with an escaped NUL ("/%00x") becomes "": the
 * routes compare C strings, which would read "/%00x" as "/" and answer it (found by
 * tests/fuzz/fuzz_http.c). Now it matches no route: 404. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    size_t n = MHD_http_unescape(s);

    (void)cls;
    (void)c;
    if (strlen(s) != n) {
        s[0] = '\0';
        return 0;
    }
    return n;
}

/* host's address with port into *sa: its first IPv4 address, else its first IPv6 one (a
 * Prometheus target is most often IPv4); every IPv4 address for NULL or "". */
static bool resolve(const char *host, uint16_t port, struct sockaddr_storage *sa)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *res, *pick = NULL;
    char name[256];
    size_t n = host ? strlen(host) : 0;

    if (n > 2 && host[0] == '[' && host[n - 1] == ']')
        snprintf(name, sizeof(name), "%.*s", (int)(n - 2), host + 1);
    else
        snprintf(name, sizeof(name), "%s", n ? host : "");
    if (getaddrinfo(name[0] ? name : NULL, "0", &hints, &res))
        return false;
    for (size_t i = 0; i < 2 && !pick; i++)
        for (struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
            if (ai->ai_family == (i ? AF_INET6 : AF_INET) && ai->ai_addrlen <= sizeof(*sa))
                pick = ai;
    if (pick) {
        memcpy(sa, pick->ai_addr, pick->ai_addrlen);
        if (pick->ai_family == AF_INET)
            ((struct sockaddr_in *)sa)->sin_port = htons(port);
        else
            ((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
    }
    freeaddrinfo(res);
    return pick != NULL;
}

ts_status ts_metrics_http_start(const char *host, uint16_t port, struct ts_metrics_http **out,
                                struct ts_err *err)
{
    struct sockaddr_storage sa = { 0 };
    struct ts_metrics_http *h;
    const union MHD_DaemonInfo *info;
    const char *shown = host && host[0] ? host : "0.0.0.0";

    if (!resolve(host, port, &sa))
        return ts_err_set(err, TS_EINVAL, "metrics-listen: '%.200s' is no address of this host "
                          "(give an IP address, or a name that resolves)", shown);
    if (!(h = calloc(1, sizeof(*h))))
        return ts_err_set(err, TS_ENOMEM, "metrics: out of memory");
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                            (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0), port, NULL, NULL,
                            handle, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)REQUEST_MEMORY, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_UNESCAPE_CALLBACK, unescape,
                            NULL, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return ts_err_set(err, TS_EIO, "metrics-port: cannot serve HTTP on %.200s port %u (in "
                          "use, or not an address of this host? pick another port with "
                          "--metrics-port, or 0 for a free one; the address with "
                          "--metrics-listen)", shown, port);
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : port;
    *out = h;
    return TS_OK;
}

uint16_t ts_metrics_http_port(const struct ts_metrics_http *h)
{
    return h->port;
}

void ts_metrics_http_stop(struct ts_metrics_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
