/* fuzz_http.c - libFuzzer target: the services' HTTP endpoint (lib/metrics/http.c over
 * libmicrohttpd), the one port every service opens for Prometheus and the master's page.
 *
 * Whoever reaches the port may send anything: http.c promises that GET and HEAD of /metrics
 * and of the routes a program added are served, another method is 405 with an Allow header,
 * another path 404, and a request line and headers past 16 KiB are refused (431 or 414),
 * and the service goes on either way. A real server runs on a free port of 127.0.0.1 (made
 * once, with a few metrics and two routes: one that answers, one that fails, as the master's
 * page can); each run is one connection that sends a request, closes its sending side and
 * reads the reply to its end.
 *
 * input[0]: bit 0 the rest is sent as it is (raw); else it is a request to build: lines
 * split at '\n', the first the method, the second the target, then header lines up to an
 * empty one, then a body; the request is "METHOD TARGET HTTP/1.1", CRLF after each line and
 * an empty line, then the body. A target "*b" is "/metrics?q=" and 256 * b 'q's, a header
 * line "*b" is "X-Fill: " and 256 * b 'f's: requests past the 16 KiB limit from inputs of a
 * few bytes (libFuzzer's inputs stay under 4 KiB). bit 1: a Content-Length header of the
 * body's size is added.
 *
 * Checked: the server answers within 5 s; what comes back, if anything, begins with an
 * HTTP/1 reply (after any 100 Continue): a status line of a known code, headers of "Name:
 * value", a body of its Content-Length (none after a HEAD); a built request that is clean (a
 * method and a target of printable bytes without spaces, header lines with a name and a
 * colon) gets a reply (unless its line and headers nearly fill the 16 KiB: FULL_BYTES), and
 * it is the one http.c promises for its method and path, or one of libmicrohttpd's refusals
 * (400, 413, 414, 417, 431). http.c runs under ASan and UBSan;
 * libmicrohttpd is Debian's, not instrumented: ASan sees its heap through malloc alone.
 * $TESSERA_FUZZ_TRACE set: each reply's status line on stderr.
 * Seeds: tests/fuzz/corpus-http (written by fuzz_seeds). */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/http.h"
#include "metrics/metrics.h"
#include "util/log.h"
#include "util/proc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLY_MS 5000              /* a reply, or the end of one, takes longer: a hang */
#define REPLY_MAX (1 << 20)
/* http.c gives each connection 16 KiB (REQUEST_MEMORY). A request line and headers that
 * leave less than about 1 KiB of it get no reply at all from libmicrohttpd, which has no room
 * left to make one (a 414 or 431 comes only past the limit): the connection is closed. */
#define FULL_BYTES (15 * 1024)

static struct ts_metrics_http *server;   /* for the life of the process */
static uint16_t port;
/* A request is made in one buffer kept from run to run (grown, never shrunk): a run that
 * builds 60 KiB of headers would otherwise fault in fresh pages for them every time. */
static uint8_t *req_buf;
static size_t req_cap;

static char *page(void *ctx, size_t *len, const char **type)
{
    static const char body[] = "<html><body>fuzz</body></html>\n";
    char *p = malloc(sizeof(body));

    if (!p)
        return NULL;
    memcpy(p, body, sizeof(body));
    *len = sizeof(body) - 1;
    *type = "text/html; charset=utf-8";
    return p;
}

static char *broken(void *ctx, size_t *len, const char **type)
{
    return NULL;   /* http.c answers 500 */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const labels[2] = { "job-1", "ok" };
    struct ts_err err = { 0 };

    ts_log_set_level(TS_ERROR);
    ts_counter_add(ts_metric_child(ts_metrics_family("tessera_fuzz_requests_total", "requests",
                                                     TS_METRIC_COUNTER, "job_id,outcome", NULL,
                                                     0), labels), 3);
    ts_histogram_observe(ts_metric_one(ts_metrics_family("tessera_fuzz_seconds", "latency",
                                                         TS_METRIC_HISTOGRAM, NULL, NULL, 0),
                                       NULL), 0.002);
    ts_metrics_http_route("/", page, NULL);
    ts_metrics_http_route("/api/status", broken, NULL);
    if (ts_metrics_http_start("127.0.0.1", 0, &server, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    port = ts_metrics_http_port(server);
    if (!(req_buf = malloc(req_cap = 64 << 10)))
        abort();
    return 0;
}

/* ---- one exchange ---- */

/* Sends req and reads the reply until the server closes, into *out (malloc'd, *n bytes). */
static void exchange(const uint8_t *req, size_t len, char **out, size_t *n)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    /* Each run from another loopback address: the end that closes first (this one, to mark
     * the request's end) keeps its port in TIME_WAIT for a minute, and one address's ports
     * would run out at a few thousand runs a second. */
    static uint32_t runs;
    uint32_t k = runs++ % (254u << 16);
    struct sockaddr_in from = { .sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(0x7f000000u | (1 + (k >> 16)) << 16 |
                                                         (k & 0xffff)) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int64_t until = ts_now_ms() + REPLY_MS;
    size_t sent = 0, cap = 4096;
    char *buf = malloc(cap + 1);

    if (fd < 0 || !buf || bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0)
        abort();
    /* libFuzzer's timer (SIGALRM) interrupts calls: a connect goes on regardless. */
    while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EISCONN) {
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (errno != EINTR && errno != EALREADY && errno != EINPROGRESS) {
            fprintf(stderr, "fuzz_http: connecting to the server: %s\n", strerror(errno));
            abort();
        }
        poll(&p, 1, 100);
    }
    *n = 0;
    /* The request, then the reply: the server may answer (a 431) before it read it all. */
    while (sent < len) {
        ssize_t w = send(fd, req + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            break;   /* reset: the server closed on a request it refused */
        if (ts_now_ms() > until)
            abort(); /* the server reads nothing for seconds */
        poll(&p, 1, 100);
    }
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t r;

        if (ts_now_ms() > until)
            abort(); /* no end of the reply within REPLY_MS: a hang */
        if (poll(&p, 1, 100) <= 0)
            continue;
        r = recv(fd, buf + *n, cap - *n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;   /* the end (or a reset) */
        if ((*n += (size_t)r) == cap) {
            if (cap >= REPLY_MAX || !(buf = realloc(buf, 2 * cap + 1)))
                abort();
            cap *= 2;
        }
    }
    close(fd);
    buf[*n] = '\0';
    *out = buf;
}

/* ---- the reply ---- */

struct reply {
    int code;
    bool allow_get;                /* an Allow header that names GET */
    const char *body;
    size_t body_len;
};

/* Parses one reply at p (n bytes) into r; the bytes it took, 0 if it is not a reply. */
static size_t parse(const char *p, size_t n, bool head, struct reply *r)
{
    static const int known[] = { 100, 200, 400, 404, 405, 413, 414, 417, 431, 500, 501, 505 };
    const char *end = memmem(p, n, "\r\n\r\n", 4), *hdr_end, *line, *eol;
    long clen = -1;
    bool ok = false;

    memset(r, 0, sizeof(*r));
    if (!end || n < 12 || memcmp(p, "HTTP/1.", 7) || !isdigit((unsigned char)p[9]) ||
        !isdigit((unsigned char)p[10]) || !isdigit((unsigned char)p[11]))
        return 0;
    r->code = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        ok |= r->code == known[i];
    if (!ok)
        return 0;
    hdr_end = end + 2;   /* past the last header's CRLF */
    line = memmem(p, (size_t)(hdr_end - p), "\r\n", 2) + 2;   /* after the status line */
    for (; line < hdr_end; line = eol + 2) {
        const char *colon;
        eol = memmem(line, (size_t)(hdr_end - line), "\r\n", 2);
        colon = memchr(line, ':', (size_t)(eol - line));
        if (!colon || colon == line)
            return 0; /* a header line that is not Name: value */
        if (!strncasecmp(line, "Content-Length:", 15))
            clen = strtol(line + 15, NULL, 10);
        if (!strncasecmp(line, "Allow:", 6) && memmem(line, (size_t)(eol - line), "GET", 3))
            r->allow_get = true;
    }
    r->body = end + 4;
    if (head || r->code == 100)
        return (size_t)(r->body - p);
    if (clen < 0 || (size_t)clen > n - (size_t)(r->body - p))
        return 0; /* no length, or a body longer than what came: cut */
    r->body_len = (size_t)clen;
    return (size_t)(r->body - p) + (size_t)clen;
}

/* ---- a request to build ---- */

static bool clean_token(const char *s, size_t n)
{
    if (!n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)s[i]))
            return false;
    return true;
}

struct built {
    const uint8_t *b;
    size_t n;
    bool clean;                    /* see the header */
    bool full;                     /* its line and headers fill libmicrohttpd's memory */
    bool head, get;
    char path[256];                /* the target up to '?' (clean requests) */
};

static void put(struct built *o, const void *p, size_t k)
{
    o->b = req_buf;
    if (!k)
        return;
    if (o->n + k > req_cap) {
        req_cap = 2 * (o->n + k);
        if (!(req_buf = realloc(req_buf, req_cap)))
            abort();
    }
    memcpy(req_buf + o->n, p, k);
    o->n += k;
    o->b = req_buf;
}

/* k bytes of c. */
static void fill(struct built *o, char c, size_t k)
{
    char b[256];

    memset(b, c, sizeof(b));
    for (; k; k -= k < sizeof(b) ? k : sizeof(b))
        put(o, b, k < sizeof(b) ? k : sizeof(b));
}

/* The next line of [*p, end) (without its '\n'), *p moved past it. */
static const char *line_of(const char **p, const char *end, size_t *len)
{
    const char *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));

    *len = (size_t)((nl ? nl : end) - s);
    *p = nl ? nl + 1 : end;
    return s;
}

static void build(const uint8_t *in, size_t size, bool content_length, struct built *o)
{
    const char *p = (const char *)in, *end = p + size, *method, *target;
    size_t mlen, tlen, at;

    memset(o, 0, sizeof(*o));
    method = line_of(&p, end, &mlen);
    target = line_of(&p, end, &tlen);
    o->clean = clean_token(method, mlen) && clean_token(target, tlen) &&
               (target[0] == '/' || target[0] == '*');
    put(o, method, mlen);
    put(o, " ", 1);
    at = o->n;
    if (tlen >= 2 && target[0] == '*') {   /* "/metrics?q=" and 256 * byte 1 'q's */
        put(o, "/metrics?q=", 11);
        fill(o, 'q', 256 * (size_t)(uint8_t)target[1]);
    } else {
        put(o, target, tlen);
    }
    tlen = o->n - at;
    snprintf(o->path, sizeof(o->path), "%.*s", (int)(tlen < 255 ? tlen : 255),
             (const char *)o->b + at);
    o->path[strcspn(o->path, "?")] = '\0';
    put(o, " HTTP/1.1\r\n", 11);
    while (p < end) {   /* header lines, until an empty one */
        size_t k;
        const char *h = line_of(&p, end, &k), *colon = memchr(h, ':', k);

        if (!k)
            break;
        at = o->n;
        if (k >= 2 && h[0] == '*') {   /* "X-Fill: " and 256 * byte 1 'f's */
            put(o, "X-Fill: ", 8);
            fill(o, 'f', 256 * (size_t)(uint8_t)h[1]);
        } else {
            o->clean &= colon && colon > h && clean_token(h, (size_t)(colon - h)) &&
                        !memchr(h, '\r', k);
            put(o, h, k);
        }
        put(o, "\r\n", 2);
    }
    if (content_length) {
        char cl[40];
        int k = snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", (size_t)(end - p));
        put(o, cl, (size_t)k);
    }
    put(o, "\r\n", 2);
    o->full = o->n >= FULL_BYTES;
    put(o, p, (size_t)(end - p));
    o->get = mlen == 3 && !memcmp(method, "GET", 3);
    o->head = mlen == 4 && !memcmp(method, "HEAD", 4);
}

/* What http.c promises a clean request r got. */
static void promised(const struct built *q, const struct reply *r)
{
    bool known = !strcmp(q->path, "/metrics") || !strcmp(q->path, "/") ||
                 !strcmp(q->path, "/api/status");

    if (r->code == 400 || r->code == 413 || r->code == 414 || r->code == 431 ||
        r->code == 417)
        return;   /* libmicrohttpd's own refusals of what it will not parse */
    if (!q->get && !q->head) {
        if (r->code != 405 || !r->allow_get)
            abort(); /* another method: 405 with Allow */
        return;
    }
    if (!known && r->code != 404)
        abort();
    if (!strcmp(q->path, "/api/status") && r->code != 500)
        abort();
    if ((!strcmp(q->path, "/metrics") || !strcmp(q->path, "/")) && r->code != 200)
        abort();
    if (q->get && !strcmp(q->path, "/metrics") &&
        (r->body_len < 7 || memcmp(r->body, "# HELP ", 7)))
        abort(); /* the registry's text */
}

/* The reply at p to request q: parse()'s, where a request not built clean may also be a HEAD
 * as libmicrohttpd reads it ("HEAD " with a space, say), answered without a body. */
static size_t reply_at(const struct built *q, const char *p, size_t n, struct reply *r)
{
    size_t k = parse(p, n, q->head, r);

    return k || q->clean ? k : parse(p, n, true, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct built q = { 0 };
    struct reply r;
    char *out;
    size_t n, at = 0, k = 0;

    if (size < 1)
        return 0;
    if (data[0] & 1) {
        q.b = data + 1;   /* sent as it came */
        q.n = size - 1;
    } else {
        build(data + 1, size - 1, (data[0] & 2) != 0, &q);
    }
    exchange(q.b, q.n, &out, &n);
    if (getenv("TESSERA_FUZZ_TRACE"))
        fprintf(stderr, "%s request, %zu bytes of reply: %.*s\n", q.clean ? "clean" : "other",
                n, (int)strcspn(out, "\r\n"), out);
    /* The reply to this request: after any 100 Continue, well formed, the one promised. What
     * follows it answers what the body held (pipelined requests), or nothing. */
    while (at < n && (k = reply_at(&q, out + at, n - at, &r)) && r.code == 100)
        at += k;
    if (at < n && !k)
        abort(); /* bytes that are not a reply */
    if (q.clean && at == n && !q.full)
        abort(); /* a clean request went unanswered */
    if (q.clean && at < n)
        promised(&q, &r);
    free(out);
    return 0;
}
