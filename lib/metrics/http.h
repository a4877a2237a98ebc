/* http.h - a service's HTTP endpoint for Prometheus: GET /metrics (docs/observability.md).
 *
 * libmicrohttpd, its own thread: a scrape renders the registry (metrics.h), which reads
 * atomics and takes no lock a step holds, so it never blocks training. Only GET and HEAD of
 * /metrics (and of the routes a program adds) are served: another method is 405 with an
 * Allow header, another path 404, and a
 * request whose line and headers pass 16 KiB is refused by libmicrohttpd (431 or 414); one
 * that fills those 16 KiB so nearly that no reply fits (about the last KiB) gets its
 * connection closed without one (tests/fuzz/fuzz_http.c, FULL_BYTES). The service goes on
 * either way. Plain HTTP, no authentication: bind it where only the
 * Prometheus you trust reaches (docs/observability.md); a service binds it to its gRPC
 * listen host unless told otherwise (rpc/serve.h, --metrics-listen).
 * Ownership: ts_metrics_http_start returns a server freed by ts_metrics_http_stop.
 * Threads: start and stop from one thread; requests are served on the server's. */
#ifndef TS_METRICS_HTTP_H
#define TS_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct ts_metrics_http;

/* Another path served with GET and HEAD beside /metrics, for every server of the process
 * (the master's status page): fn(ctx) returns the body, malloc'd (the server frees it), its
 * length in *len and its Content-Type in *type; NULL: 500. At most 8 routes; register them
 * before ts_metrics_http_start. */
void ts_metrics_http_route(const char *path, char *(*fn)(void *ctx, size_t *len,
                                                         const char **type), void *ctx);

/* Listens on host, port `port` (0: a free one, see ts_metrics_http_port). host: an IPv4 or
 * IPv6 address (brackets allowed: "[::1]") or a name, whose first IPv4 address is taken
 * (else its first IPv6 one); NULL or "": every IPv4 address. TS_EINVAL naming the host if
 * it does not resolve; TS_EIO naming the address if it cannot be bound. */
ts_status ts_metrics_http_start(const char *host, uint16_t port, struct ts_metrics_http **out,
                                struct ts_err *err) TS_MUST_CHECK;
uint16_t ts_metrics_http_port(const struct ts_metrics_http *h);
void ts_metrics_http_stop(struct ts_metrics_http *h);   /* NULL: nothing */

#endif
