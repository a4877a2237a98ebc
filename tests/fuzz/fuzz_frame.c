/* fuzz_frame.c - libFuzzer target: the data-plane frame parser (lib/transport/frame.h).
 *
 * Frames come off sockets from peers nothing has vetted at this layer, so frame.c must refuse
 * any malformed stream without crashing, leaking, reading out of bounds or waiting, and must
 * never return a frame its checks did not pass. Each input is used twice:
 *   1. ts_frame_decode on its first TS_FRAME_HDR_LEN bytes: an accepted header encodes back to
 *      exactly those bytes (every field is kept, reserved ones are zero); a refusal names it.
 *   2. The receive path: all but the last byte are what a peer sent before hanging up. Frames
 *      are received until the first failure, which must be a counted refusal (TS_ECORRUPT) or
 *      the hang-up (TS_EUNAVAIL), never a wait; every frame returned must hold what it says.
 * The last byte (OPT_*) picks the connection: the real tcp backend on one end of a socketpair
 * (ts_tcp_adopt), or an in-memory backend that shows payloads in place as the shm ring does,
 * host-local or not, or tcp keyed for frame MACs; ts_frame_recv or ts_frame_recv_view; the
 * receive buffer's capacity; and whether header checks and payload hashes are made right
 * first, so that mutations reach what the checksums guard (lengths, padding, types, the
 * frames behind the first).
 * Seeds: tests/fuzz/corpus-frame (written by fuzz_seeds). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xxhash.h>

#include "transport/frame.h"
#include "transport/mac.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    OPT_MEM = 0x01,   /* the in-memory backend, else tcp over a socketpair */
    OPT_VIEW = 0x02,  /* receive with ts_frame_recv_view */
    OPT_LOCAL = 0x04, /* in-memory: local_in, as on shm (unhashed frames allowed); tcp: the
                       * connection has MAC keys (mac.h), as after a handshake */
    OPT_FIX = 0x08,   /* make header checks, payload hashes and padding right first */
    /* bits 4-5: the receive buffer's capacity (caps below); bits 6-7: view_max (views) */
};

/* Header fields fix() rewrites (frame.c's table; docs/transport.md). */
enum { OFF_FFLAGS = 36, OFF_LEN = 40, OFF_CHECKSUM = 48, OFF_HCHECK = 60 };

#define WAIT_MS 100          /* the peer has hung up: a wait for the first byte never runs out */
#define SNDBUF (1 << 20)     /* the kernel caps it (wmem_max); inputs beyond are cut */

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Makes each header's check and each payload's hash right and zeroes the padding in front of
 * each header, frame after frame, as far as whole headers go. */
static void fix(uint8_t *s, size_t n)
{
    size_t at = 0, pad = 0;

    while (at + pad <= n && n - at - pad >= TS_FRAME_HDR_LEN) {
        uint8_t *h = s + at + pad;
        size_t body = n - at - pad - TS_FRAME_HDR_LEN;
        uint64_t len = get_le(h + OFF_LEN, 8);

        memset(s + at, 0, pad);
        if (len <= body)
            put_le(h + OFF_CHECKSUM, get_le(h + OFF_FFLAGS, 4) & 1 ? 0
                   : ts_frame_hash(h + TS_FRAME_HDR_LEN, (size_t)len), 8);
        put_le(h + OFF_HCHECK, (uint32_t)XXH3_64bits(h, OFF_HCHECK), 4);
        if (len > body)
            break;
        at += pad + TS_FRAME_HDR_LEN + (size_t)len;
        pad = (8 - (size_t)(len % 8)) % 8;
    }
}

/* ---- an in-memory connection: replays a byte stream whose sender has hung up ---- */

struct mem_conn {
    struct ts_conn base;
    uint8_t *data;         /* a copy of exactly len bytes, so that ASan sees an overread */
    size_t len, pos;
    size_t held;           /* bytes of the view not yet released */
};

static ts_status mem_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    struct mem_conn *c = (struct mem_conn *)base;
    size_t k = n < c->len - c->pos ? n : c->len - c->pos;

    if (c->held)
        abort(); /* transport.h: a view is released before the next receive */
    if (n && c->pos == c->len)
        return ts_err_set(e, TS_EUNAVAIL, "mem recv: peer closed");
    memcpy(buf, c->data + c->pos, k);
    c->pos += k;
    if (k < n)
        return ts_err_set(e, TS_EUNAVAIL, "mem recv: peer closed after %zu of %zu bytes (torn)",
                          k, n);
    return TS_OK;
}

static ts_status mem_recv_view(struct ts_conn *base, size_t n, const void **p, struct ts_err *e)
{
    struct mem_conn *c = (struct mem_conn *)base;

    if (c->held || n == 0 || n > c->base.view_max)
        abort(); /* outside transport.h's contract for recv_view */
    if (c->len - c->pos < n) {
        c->pos = c->len;
        return ts_err_set(e, TS_EUNAVAIL, "mem view: peer closed before %zu bytes (torn)", n);
    }
    *p = c->data + c->pos;
    c->held = n;
    return TS_OK;
}

static void mem_release(struct ts_conn *base, size_t n)
{
    struct mem_conn *c = (struct mem_conn *)base;

    if (n != c->held)
        abort(); /* frame.c releases exactly the view it holds */
    c->pos += n;
    c->held = 0;
}

static void mem_nothing(struct ts_conn *base)
{
}

static void mem_close(struct ts_conn *base)
{
    struct mem_conn *c = (struct mem_conn *)base;

    free(c->data);
    free(c);
}

static const struct ts_transport_ops mem_ops = {
    .name = "fuzzmem",
    .recv = mem_recv,
    .recv_view = mem_recv_view,
    .release = mem_release,
    .interrupt = mem_nothing,
    .shutdown = mem_nothing,
    .close = mem_close,
};

static struct ts_conn *mem_open(const uint8_t *s, size_t n, bool local, size_t view_max)
{
    struct mem_conn *c = calloc(1, sizeof(*c));

    if (!c || !(c->data = malloc(n ? n : 1)))
        abort();
    memcpy(c->data, s, n);
    c->len = n;
    c->base.ops = &mem_ops;
    strcpy(c->base.peer, "fuzzmem");
    c->base.local_in = c->base.local_out = local;
    c->base.view_max = view_max;
    return &c->base;
}

/* The tcp backend on one end of a socketpair; the input is written into the other end, which
 * is then closed, so the reader sees the bytes and then the hang-up. */
static struct ts_conn *tcp_open(const uint8_t *s, size_t n)
{
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    int sv[2], buf = SNDBUF;
    size_t done = 0;
    ssize_t r;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    if (sv[0] > 256 || sv[1] > 256)
        abort(); /* descriptors leak: every input closes both */
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    while (done < n) {
        r = write(sv[1], s + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* the buffer is full: the rest is cut, as a hang-up mid-stream would */
        done += (size_t)r;
    }
    close(sv[1]);
    if (ts_tcp_adopt(sv[0], &c, &err) != TS_OK)
        abort();
    return c;
}

/* Receives frames until the first failure; checks each frame and the failure. */
static void receive(struct ts_conn *c, bool view, size_t cap)
{
    uint8_t *buf = malloc(cap ? cap : 1);

    if (!buf)
        abort();
    for (;;) {
        struct ts_frame_hdr h;
        struct ts_err err = { 0 };
        const void *p = NULL;
        uint64_t in = c->frames_in, refused = c->frames_refused;
        ts_status st = view ? ts_frame_recv_view(c, &h, buf, cap, WAIT_MS, &p, &err)
                            : ts_frame_recv(c, &h, buf, cap, WAIT_MS, &err);

        if (st != TS_OK) {
            if (st == TS_ECORRUPT ? c->frames_refused != refused + 1 : st != TS_EUNAVAIL)
                abort(); /* a refusal is counted; anything else is the hang-up, not a wait */
            if (!err.msg[0] || c->frames_in != in)
                abort();
            break;
        }
        if (!view)
            p = buf;
        if (c->frames_in != in + 1 || c->frames_refused != refused || h.type == 0 ||
            h.type > TS_FRAME_TYPE_MAX || h.len > cap || (h.len && !p))
            abort();
        /* What frame.c vouched for: the payload hash, or a host-local path without one. */
        if (h.unhashed ? !c->local_in || h.checksum
                       : ts_frame_hash(p, (size_t)h.len) != h.checksum)
            abort();
        (void)ts_frame_error_status(&h);
    }
    ts_frame_release(c);
    free(buf);
}

static void decode_header(const uint8_t *data, size_t size)
{
    struct ts_frame_hdr h;
    struct ts_err err = { 0 };
    uint8_t again[TS_FRAME_HDR_LEN];

    if (size < TS_FRAME_HDR_LEN)
        return;
    if (ts_frame_decode(data, &h, &err) != TS_OK) {
        if (err.code != TS_ECORRUPT || strncmp(err.msg, "frame: ", 7) != 0)
            abort();
        return;
    }
    ts_frame_encode(&h, again);
    if (memcmp(again, data, TS_FRAME_HDR_LEN) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t views[4] = { 0, 8, 64, 1 << 20 };
    unsigned opt;
    size_t n, cap;
    uint8_t *s;
    struct ts_conn *c;

    decode_header(data, size);
    if (size == 0)
        return 0;
    opt = data[size - 1];
    n = size - 1;
    if (!(s = malloc(n ? n : 1)))
        abort();
    memcpy(s, data, n);
    if (opt & OPT_FIX)
        fix(s, n);
    switch ((opt >> 4) & 3) {
    case 0: cap = n; break;  /* room for any frame the stream can hold */
    case 1: cap = 0; break;
    case 2: cap = 64; break;
    default: cap = 4096; break;
    }
    c = opt & OPT_MEM ? mem_open(s, n, opt & OPT_LOCAL, views[(opt >> 6) & 3]) : tcp_open(s, n);
    if (!(opt & OPT_MEM) && (opt & OPT_LOCAL)) {
        static const uint8_t key[TS_DP_KEY_LEN] = { 7 };
        if (ts_frame_mac_start(c, key, key, NULL))
            abort();
    }
    receive(c, opt & OPT_VIEW, cap);
    ts_tp_close(c);
    free(s);
    return 0;
}
