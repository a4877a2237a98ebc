/* frame.c - the data-plane frame: a 64-byte little-endian header and a checksummed payload.
 *
 * Every field is written and read byte by byte at a fixed offset (the table below and
 * docs/transport.md), never by casting a struct onto the wire, so padding, alignment and host
 * byte order cannot leak into the format. Two checksums guard a frame: XXH3-64 of the payload,
 * and the low 32 bits of XXH3-64 over the header's first 60 bytes. The second one exists
 * because a flipped bit in `len`, `tensor` or `step` is as harmful as one in the payload: the
 * payload hash alone would vouch for gradient bytes applied to the wrong tensor.
 *
 * Receiving refuses before trusting: the header is decoded and validated, and the length is
 * checked against the caller's capacity and TS_FRAME_MAX, before a payload byte is read.
 *
 * On a host-local connection the payload hash is skipped (header bit UNHASHED, checksum 0):
 * between two processes of one host nothing alters bytes on the way, and what a hash would
 * catch there, a torn frame, the transport reports itself (docs/transport.md). */
#include "transport/frame.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "transport/mac.h"
#include "util/knobs.h"

#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t on the stack */
#include <xxhash.h>

/* Byte offsets of the header fields; the unused bits of 36 must be zero, and 56 outside a
 * PUSH. */
enum {
    OFF_MAGIC = 0,      /* u32 "TSF1" */
    OFF_VERSION = 4,    /* u16 */
    OFF_TYPE = 6,       /* u16 enum ts_frame_type */
    OFF_TENSOR = 8,     /* u32 */
    OFF_PARTITION = 12, /* u32 */
    OFF_STEP = 16,      /* u64 */
    OFF_DTYPE = 24,     /* u16 */
    OFF_ENCODING = 26,  /* u16 */
    OFF_RANK = 28,      /* u32 */
    OFF_FLAGS = 32,     /* u32 */
    OFF_FFLAGS = 36,    /* u32 frame flags: FF_UNHASHED; other bits zero */
    OFF_LEN = 40,       /* u64 payload bytes */
    OFF_CHECKSUM = 48,  /* u64 XXH3-64 of the payload */
    OFF_LR = 56,        /* f32 bits: a PUSH's learning rate (0: the job's); else zero */
    OFF_HCHECK = 60,    /* u32 low half of XXH3-64 of bytes [0, 60) */
};

#define FF_UNHASHED 0x1u   /* no payload hash: host-local connections, or MAC'd frames */
#define FF_MAC 0x2u        /* a TS_FRAME_MAC_LEN-byte MAC follows the header (mac.h) */

static uint32_t lr_bits(float lr)
{
    uint32_t u;

    memcpy(&u, &lr, sizeof(u));
    return u;
}

static float lr_float(uint32_t u)
{
    float lr;

    memcpy(&lr, &u, sizeof(lr));
    return lr;
}

/* The payload of a frame arrives right behind its header; waiting longer than this for its
 * first byte means the sender stopped mid-frame. */
#define PAYLOAD_WAIT_MS TS_TP_STALL_MS
/* The payload is received and hashed a piece at a time, so the hash reads bytes still in the
 * core's cache rather than a second pass over the whole payload from memory. */
#define PIECE (256u << 10)
/* Headers and payloads start at multiples of FRAME_ALIGN in the stream (frame.h). */
#define FRAME_ALIGN 8u
#define PAD_AFTER(len) ((uint8_t)((FRAME_ALIGN - (len) % FRAME_ALIGN) % FRAME_ALIGN))

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t header_check(const uint8_t *b)
{
    return (uint32_t)XXH3_64bits(b, OFF_HCHECK);
}

void ts_frame_encode(const struct ts_frame_hdr *h, uint8_t out[TS_FRAME_HDR_LEN])
{
    memset(out, 0, TS_FRAME_HDR_LEN);
    put32(out + OFF_MAGIC, TS_FRAME_MAGIC);
    put16(out + OFF_VERSION, TS_FRAME_VERSION);
    put16(out + OFF_TYPE, h->type);
    put32(out + OFF_TENSOR, h->tensor);
    put32(out + OFF_PARTITION, h->partition);
    put64(out + OFF_STEP, h->step);
    put16(out + OFF_DTYPE, h->dtype);
    put16(out + OFF_ENCODING, h->encoding);
    put32(out + OFF_RANK, h->rank);
    put32(out + OFF_FLAGS, h->flags);
    put32(out + OFF_FFLAGS, (h->unhashed ? FF_UNHASHED : 0) | (h->mac ? FF_MAC : 0));
    put64(out + OFF_LEN, h->len);
    put64(out + OFF_CHECKSUM, h->checksum);
    put32(out + OFF_LR, h->type == TS_FRAME_PUSH ? lr_bits(h->lr) : 0);
    put32(out + OFF_HCHECK, header_check(out));
}

/* Magic and version come first so that a foreign peer or a newer format is named as such; the
 * header check then vouches for every other field before any of them is interpreted. */
ts_status ts_frame_decode(const uint8_t in[TS_FRAME_HDR_LEN], struct ts_frame_hdr *h,
                          struct ts_err *err)
{
    uint32_t magic = get32(in + OFF_MAGIC), want = get32(in + OFF_HCHECK), got;
    uint16_t version = get16(in + OFF_VERSION), type = get16(in + OFF_TYPE);
    uint64_t len = get64(in + OFF_LEN);
    uint32_t ff = get32(in + OFF_FFLAGS);

    if (magic != TS_FRAME_MAGIC)
        return ts_err_set(err, TS_ECORRUPT, "frame: magic 0x%08" PRIx32 " is not TSF1 (not a "
                          "Tessera data-plane peer, or the stream is out of step)", magic);
    if (version != TS_FRAME_VERSION)
        return ts_err_set(err, TS_ECORRUPT, "frame: version %u, this build speaks %u (upgrade "
                          "both sides, or the header is corrupted)", version, TS_FRAME_VERSION);
    got = header_check(in);
    if (got != want)
        return ts_err_set(err, TS_ECORRUPT, "frame: header check 0x%08" PRIx32 ", computed "
                          "0x%08" PRIx32 ": header corrupted in transit", want, got);
    if (type == 0 || type > TS_FRAME_TYPE_MAX)
        return ts_err_set(err, TS_ECORRUPT, "frame: type %u unknown (want 1..%d)", type,
                          TS_FRAME_TYPE_MAX);
    if ((ff & ~(FF_UNHASHED | FF_MAC)) || (type != TS_FRAME_PUSH && get32(in + OFF_LR)))
        return ts_err_set(err, TS_ECORRUPT, "frame: reserved header bits (offset 36, or 56 "
                          "outside a push) are not zero");
    if ((ff & FF_UNHASHED) && get64(in + OFF_CHECKSUM))
        return ts_err_set(err, TS_ECORRUPT, "frame: unhashed frame with a checksum");
    if (len > TS_FRAME_MAX)
        return ts_err_set(err, TS_ECORRUPT, "frame: length %" PRIu64 " over the maximum %u "
                          "(tensor %" PRIu32 ")", len, TS_FRAME_MAX, get32(in + OFF_TENSOR));
    h->type = type;
    h->tensor = get32(in + OFF_TENSOR);
    h->partition = get32(in + OFF_PARTITION);
    h->step = get64(in + OFF_STEP);
    h->dtype = get16(in + OFF_DTYPE);
    h->encoding = get16(in + OFF_ENCODING);
    h->rank = get32(in + OFF_RANK);
    h->flags = get32(in + OFF_FLAGS);
    h->len = len;
    h->checksum = get64(in + OFF_CHECKSUM);
    h->unhashed = (ff & FF_UNHASHED) != 0;
    h->mac = (ff & FF_MAC) != 0;
    h->lr = lr_float(get32(in + OFF_LR));
    return TS_OK;
}

bool ts_frame_wants_hash(const struct ts_conn *c)
{
    return !c->local_out || ts_knob_is(TS_KNOB_FRAME_HASH, "always");
}

uint64_t ts_frame_hash(const void *payload, size_t len)
{
    return XXH3_64bits(payload, len);
}

/* The frame's payload is the n pieces one after another; sum: their hash, or NULL to compute
 * it if the connection wants one. */
#if TS_TEST_HOOKS
static _Thread_local bool die_halfway;

void ts_frame_test_die_halfway(void)
{
    die_halfway = true;
}
#endif

static ts_status send_frame(struct ts_conn *c, struct ts_frame_hdr *h, const struct iovec *pc,
                            size_t n, const uint64_t *sum, struct ts_err *err)
{
    uint8_t b[FRAME_ALIGN - 1 + TS_FRAME_HDR_LEN + TS_FRAME_MAC_LEN] = { 0 };
    size_t pad = c->tx_pad, len = 0, head;
    struct ts_mac_dir *mac = ts__mac_tx(c);
    ts_status st;

    for (size_t i = 0; i < n; i++) {
        if (pc[i].iov_len && !pc[i].iov_base)
            return ts_err_set(err, TS_EINVAL, "frame send: payload NULL with length %zu",
                              pc[i].iov_len);
        len += pc[i].iov_len;
    }
    /* Refuse here what the peer would refuse, so the error names the sender's mistake. */
    if (h->type == 0 || h->type > TS_FRAME_TYPE_MAX)
        return ts_err_set(err, TS_EINVAL, "frame send: type %u unknown (want 1..%d)", h->type,
                          TS_FRAME_TYPE_MAX);
    if (len > TS_FRAME_MAX)
        return ts_err_set(err, TS_EINVAL, "frame send: payload of %zu bytes over the maximum "
                          "%u (tensor %" PRIu32 "): split it into partitions", len, TS_FRAME_MAX,
                          h->tensor);
    h->len = len;
    h->mac = mac != NULL;
    h->unhashed = h->mac || !ts_frame_wants_hash(c);   /* a MAC covers more than a hash */
    if (h->unhashed) {
        h->checksum = 0;
    } else if (sum) {
        h->checksum = *sum;
    } else {
        XXH3_state_t hs;

        XXH3_64bits_reset(&hs);
        for (size_t i = 0; i < n; i++)
            XXH3_64bits_update(&hs, pc[i].iov_base, pc[i].iov_len);
        h->checksum = XXH3_64bits_digest(&hs);
    }
    ts_frame_encode(h, b + pad); /* the previous payload's padding first (frame.h) */
    head = pad + TS_FRAME_HDR_LEN;
    if (mac) {   /* the MAC right behind the header, so a receiver can view the payload */
        ts__mac_begin(mac);
        ts__mac_add(mac, b + pad, TS_FRAME_HDR_LEN);
        for (size_t i = 0; i < n; i++)
            ts__mac_add(mac, pc[i].iov_base, pc[i].iov_len);
        if (!ts__mac_end(mac, b + head))
            return ts_err_set(err, TS_EINTERNAL, "frame send: libcrypto could not MAC it");
        head += TS_FRAME_MAC_LEN;
    }
#if TS_TEST_HOOKS
    if (die_halfway && len >= 8) {   /* ts_frame_test_die_halfway */
        size_t half = pc[0].iov_len < len / 2 ? pc[0].iov_len : len / 2;
        ts_status sent = ts_tp_send(c, b, head, pc[0].iov_base, half, err);

        (void)sent;   /* dying either way */
        raise(SIGKILL);
    }
#endif
    /* The header with the first piece, then one send per further piece: on the byte stream
     * they follow each other as one send's would. */
    st = ts_tp_send(c, b, head, n ? pc[0].iov_base : NULL, n ? pc[0].iov_len : 0, err);
    for (size_t i = 1; st == TS_OK && i < n; i++)
        if (pc[i].iov_len)
            st = ts_tp_send(c, NULL, 0, pc[i].iov_base, pc[i].iov_len, err);
    if (st == TS_OK) {
        c->bytes_out += head - pad + len;
        c->tx_pad = PAD_AFTER(len);
    }
    return st;
}

ts_status ts_frame_send(struct ts_conn *c, struct ts_frame_hdr *h, const void *payload,
                        size_t len, struct ts_err *err)
{
    struct iovec one = { (void *)payload, len };

    return send_frame(c, h, &one, 1, NULL, err);
}

ts_status ts_frame_sendv(struct ts_conn *c, struct ts_frame_hdr *h, const struct iovec *pieces,
                         size_t n, struct ts_err *err)
{
    return send_frame(c, h, pieces, n, NULL, err);
}

ts_status ts_frame_send_hashed(struct ts_conn *c, struct ts_frame_hdr *h, const void *payload,
                               size_t len, uint64_t sum, struct ts_err *err)
{
    struct iovec one = { (void *)payload, len };

    return send_frame(c, h, &one, 1, &sum, err);
}

/* Reads the payload of a frame whose header has been consumed and returns its XXH3-64 in
 * *sum. An interrupt here must not leave half a frame in the stream: finish the frame, then
 * hand the interrupt on to the next recv (see the interrupt contract in transport.h). */
static ts_status recv_payload(struct ts_conn *c, uint8_t *buf, size_t len, bool hash,
                              uint64_t *sum, struct ts_err *err)
{
    struct ts_mac_dir *mac = ts__mac_rx(c);
    XXH3_state_t hs;
    struct ts_err e = { 0 };
    bool cancelled = false;
    ts_status st = TS_OK;
    size_t got = 0, k;

    XXH3_64bits_reset(&hs);
    while (got < len) {
        k = len - got < PIECE ? len - got : PIECE;
        st = ts_tp_recv(c, buf + got, k, PAYLOAD_WAIT_MS, &e);
        if (st == TS_ECANCELLED) {
            cancelled = true;
            ts_err_clear(&e);
            continue;
        }
        if (st != TS_OK)
            break;
        if (hash)
            XXH3_64bits_update(&hs, buf + got, k);
        if (mac)
            ts__mac_add(mac, buf + got, k);
        got += k;
    }
    if (cancelled)
        ts_tp_interrupt(c);
    if (st == TS_ETIMEDOUT)
        return ts_err_set(err, TS_EUNAVAIL, "frame: torn: no payload byte for %d ms after %zu "
                          "of %zu bytes (peer %s)", PAYLOAD_WAIT_MS, got, len, c->peer);
    if (st != TS_OK)
        return ts_err_set(err, st, "frame: torn: payload cut after %zu of %zu bytes: %s", got,
                          len, e.msg);
    *sum = hash ? XXH3_64bits_digest(&hs) : 0;
    return TS_OK;
}

static ts_status refuse_as(struct ts_conn *c, enum ts_frame_refusal why, ts_status st)
{
    c->frames_refused++;
    c->refusal = (uint8_t)why;
    return st;
}

/* Most refusals: a frame whose bytes are not what they should be. */
static ts_status refuse(struct ts_conn *c, ts_status st)
{
    return refuse_as(c, st == TS_ECORRUPT ? TS_FRAME_REFUSED_CORRUPT : TS_FRAME_REFUSED_TORN, st);
}

void ts_frame_release(struct ts_conn *c)
{
    if (c->view_held) {
        ts_tp_release(c, c->view_held);
        c->view_held = 0;
    }
}

/* Receives and validates a header (and the MAC behind it, kept in tag); a frame whose
 * payload would not fit cap is refused. On a MAC'd connection the MAC of the frame is begun
 * over its header. */
static ts_status recv_head(struct ts_conn *c, struct ts_frame_hdr *d, size_t cap, int ms,
                           uint8_t tag[TS_FRAME_MAC_LEN], struct ts_err *err)
{
    uint8_t b[FRAME_ALIGN - 1 + TS_FRAME_HDR_LEN];
    struct ts_mac_dir *mac = ts__mac_rx(c);
    struct ts_err e = { 0 };
    size_t pad = c->rx_pad;
    ts_status st;

    ts_frame_release(c);
    /* A timeout, an interrupt or a hang-up between frames is not a refused frame. The padding
     * owed by the previous payload comes in the same read as the header (frame.h). */
    if ((st = ts_tp_recv(c, b, pad + TS_FRAME_HDR_LEN, ms, err)))
        return st;
    c->rx_pad = 0;
    c->bytes_in += TS_FRAME_HDR_LEN;
    for (size_t i = 0; i < pad; i++)
        if (b[i])
            return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: padding byte %zu before the "
                                        "header is 0x%02x, not 0 (peer %s)", i, b[i], c->peer));
    if ((st = ts_frame_decode(b + pad, d, err)))
        return refuse(c, st);
    /* Only our own state decides whether a MAC is due, never the peer's word. An ERROR frame
     * without one is let through: it can only end the connection, and says why. */
    if (mac && !d->mac && d->type != TS_FRAME_ERROR)
        return refuse_as(c, TS_FRAME_REFUSED_MAC,
                         ts_err_set(err, TS_ECORRUPT, "frame: type %u without a MAC on an "
                                    "authenticated connection (peer %s): refused, nothing "
                                    "applied", d->type, c->peer));
    if (!mac && d->mac)
        return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: a MAC on a connection that has "
                                    "no keys (peer %s)", c->peer));
    if (d->mac) {
        if ((st = ts_tp_recv(c, tag, TS_FRAME_MAC_LEN, PAYLOAD_WAIT_MS, &e)))
            return refuse(c, ts_err_set(err, st == TS_ETIMEDOUT ? TS_EUNAVAIL : st, "frame: "
                                        "torn: no MAC behind the header: %s", e.msg));
        c->bytes_in += TS_FRAME_MAC_LEN;
        ts__mac_begin(mac);
        ts__mac_add(mac, b + pad, TS_FRAME_HDR_LEN);
    }
    /* Only our own path decides whether a hash may be missing, never the peer's word. */
    if (d->unhashed && !c->local_in && !d->mac)
        return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: unhashed payload on a "
                                    "connection that leaves the host (tensor %" PRIu32
                                    ", peer %s)", d->tensor, c->peer));
    if (d->len > cap)
        return refuse_as(c, TS_FRAME_REFUSED_OVERSIZE,
                         ts_err_set(err, TS_ECORRUPT, "frame: length %" PRIu64 " over the "
                                    "receive buffer's %zu bytes (tensor %" PRIu32 " partition "
                                    "%" PRIu32 " step %" PRIu64 ")", d->len, cap, d->tensor,
                                    d->partition, d->step));
    c->rx_pad = PAD_AFTER(d->len); /* the payload follows at once; a cut one ends the stream */
    return TS_OK;
}

/* The payload's hash, or its MAC (tag: the one received; the MAC of the frame was fed its
 * header and payload). */
static ts_status check_sum(struct ts_conn *c, const struct ts_frame_hdr *d, uint64_t sum,
                           const uint8_t tag[TS_FRAME_MAC_LEN], struct ts_err *err)
{
    uint8_t want[TS_FRAME_MAC_LEN];

    if (d->mac) {
        if (ts__mac_end(ts__mac_rx(c), want) && CRYPTO_memcmp(want, tag, sizeof(want)) == 0)
            return TS_OK;
        return refuse_as(c, TS_FRAME_REFUSED_MAC,
                         ts_err_set(err, TS_ECORRUPT, "frame: MAC mismatch (type %u tensor %"
                                    PRIu32 " partition %" PRIu32 " step %" PRIu64 ", peer %s):"
                                    " forged, replayed or corrupted; refused, nothing applied",
                                    d->type, d->tensor, d->partition, d->step, c->peer));
    }
    if (d->unhashed || sum == d->checksum)
        return TS_OK;
    return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: payload checksum mismatch (tensor %"
                                PRIu32 " partition %" PRIu32 " step %" PRIu64 ", %" PRIu64
                                " bytes, peer %s)", d->tensor, d->partition, d->step, d->len,
                                c->peer));
}

ts_status ts_frame_recv(struct ts_conn *c, struct ts_frame_hdr *h, void *buf, size_t cap,
                        int ms, struct ts_err *err)
{
    struct ts_frame_hdr d;
    uint8_t tag[TS_FRAME_MAC_LEN];
    uint64_t sum = 0;
    ts_status st;

    if ((st = recv_head(c, &d, cap, ms, tag, err)))
        return st;
    if ((st = recv_payload(c, buf, (size_t)d.len, !d.unhashed, &sum, err)))
        return refuse(c, st);
    c->bytes_in += d.len;
    if ((st = check_sum(c, &d, sum, tag, err)))
        return st;
    c->frames_in++;
    *h = d;
    return TS_OK;
}

ts_status ts_frame_recv_view(struct ts_conn *c, struct ts_frame_hdr *h, void *buf, size_t cap,
                             int ms, const void **payload, struct ts_err *err)
{
    struct ts_frame_hdr d;
    struct ts_err e = { 0 };
    uint8_t tag[TS_FRAME_MAC_LEN];
    const void *p = NULL;
    ts_status st;

    if (!c->view_max) {
        if ((st = ts_frame_recv(c, h, buf, cap, ms, err)) == TS_OK)
            *payload = buf;
        return st;
    }
    if ((st = recv_head(c, &d, cap, ms, tag, err)))
        return st;
    if (d.len == 0 || d.len > c->view_max) {
        uint64_t sum = 0;
        if ((st = recv_payload(c, buf, (size_t)d.len, !d.unhashed, &sum, err)))
            return refuse(c, st);
        p = buf;
        c->bytes_in += d.len;
        if ((st = check_sum(c, &d, sum, tag, err)))
            return st;
    } else {
        /* The whole payload in place. A frame torn by the sender never fills it: the wait
         * ends with TS_EUNAVAIL when the peer closes, dies or stalls. */
        if ((st = ts_tp_recv_view(c, (size_t)d.len, &p, &e)))
            return refuse(c, ts_err_set(err, st, "frame: torn: payload of %" PRIu64 " bytes "
                                        "cut: %s", d.len, e.msg));
        c->view_held = (size_t)d.len;
        c->bytes_in += d.len;
        if (d.mac)
            ts__mac_add(ts__mac_rx(c), p, (size_t)d.len);
        if ((st = check_sum(c, &d, d.unhashed ? 0 : XXH3_64bits(p, (size_t)d.len), tag,
                            err))) {
            ts_frame_release(c);
            return st;
        }
    }
    c->frames_in++;
    *h = d;
    *payload = p;
    return TS_OK;
}

ts_status ts_frame_error_status(const struct ts_frame_hdr *h)
{
    return h->flags > 0 && h->flags <= TS_EPERM ? (ts_status)h->flags : TS_EINTERNAL;
}
