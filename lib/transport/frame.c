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
 * checked against the caller's capacity and TS_FRAME_MAX, before a payload byte is read. */
#include "transport/frame.h"

#include <inttypes.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY     /* XXH3_state_t on the stack */
#include <xxhash.h>

/* Byte offsets of the header fields; 36 and 56 are reserved and must be zero. */
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
    OFF_RSVD1 = 36,     /* u32, zero */
    OFF_LEN = 40,       /* u64 payload bytes */
    OFF_CHECKSUM = 48,  /* u64 XXH3-64 of the payload */
    OFF_RSVD2 = 56,     /* u32, zero */
    OFF_HCHECK = 60,    /* u32 low half of XXH3-64 of bytes [0, 60) */
};

/* The payload of a frame arrives right behind its header; waiting longer than this for its
 * first byte means the sender stopped mid-frame. */
#define PAYLOAD_WAIT_MS TS_TP_STALL_MS
/* The payload is received and hashed a piece at a time, so the hash reads bytes still in the
 * core's cache rather than a second pass over the whole payload from memory. */
#define PIECE (256u << 10)

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
    put64(out + OFF_LEN, h->len);
    put64(out + OFF_CHECKSUM, h->checksum);
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
    if (get32(in + OFF_RSVD1) || get32(in + OFF_RSVD2))
        return ts_err_set(err, TS_ECORRUPT, "frame: reserved header bytes (offsets 36, 56) "
                          "are not zero");
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
    return TS_OK;
}

ts_status ts_frame_send(struct ts_conn *c, struct ts_frame_hdr *h, const void *payload,
                        size_t len, struct ts_err *err)
{
    uint8_t b[TS_FRAME_HDR_LEN];
    ts_status st;

    /* Refuse here what the peer would refuse, so the error names the sender's mistake. */
    if (h->type == 0 || h->type > TS_FRAME_TYPE_MAX)
        return ts_err_set(err, TS_EINVAL, "frame send: type %u unknown (want 1..%d)", h->type,
                          TS_FRAME_TYPE_MAX);
    if (len > TS_FRAME_MAX)
        return ts_err_set(err, TS_EINVAL, "frame send: payload of %zu bytes over the maximum "
                          "%u (tensor %" PRIu32 "): split it into partitions", len, TS_FRAME_MAX,
                          h->tensor);
    if (len && !payload)
        return ts_err_set(err, TS_EINVAL, "frame send: payload NULL with length %zu", len);
    h->len = len;
    h->checksum = XXH3_64bits(payload, len);
    ts_frame_encode(h, b);
    st = ts_tp_send(c, b, sizeof(b), payload, len, err);
    if (st == TS_OK)
        c->bytes_out += sizeof(b) + len;
    return st;
}

/* Reads the payload of a frame whose header has been consumed and returns its XXH3-64 in
 * *sum. An interrupt here must not leave half a frame in the stream: finish the frame, then
 * hand the interrupt on to the next recv (see the interrupt contract in transport.h). */
static ts_status recv_payload(struct ts_conn *c, uint8_t *buf, size_t len, uint64_t *sum,
                              struct ts_err *err)
{
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
        XXH3_64bits_update(&hs, buf + got, k);
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
    *sum = XXH3_64bits_digest(&hs);
    return TS_OK;
}

static ts_status refuse(struct ts_conn *c, ts_status st)
{
    c->frames_refused++;
    return st;
}

ts_status ts_frame_recv(struct ts_conn *c, struct ts_frame_hdr *h, void *buf, size_t cap,
                        int ms, struct ts_err *err)
{
    uint8_t b[TS_FRAME_HDR_LEN];
    struct ts_frame_hdr d;
    uint64_t sum = 0;
    ts_status st;

    /* A timeout, an interrupt or a hang-up between frames is not a refused frame. */
    if ((st = ts_tp_recv(c, b, sizeof(b), ms, err)))
        return st;
    c->bytes_in += sizeof(b);
    if ((st = ts_frame_decode(b, &d, err)))
        return refuse(c, st);
    if (d.len > cap)
        return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: length %" PRIu64 " over the "
                                    "receive buffer's %zu bytes (tensor %" PRIu32 " partition "
                                    "%" PRIu32 " step %" PRIu64 ")", d.len, cap, d.tensor,
                                    d.partition, d.step));
    if ((st = recv_payload(c, buf, (size_t)d.len, &sum, err)))
        return refuse(c, st);
    c->bytes_in += d.len;
    if (sum != d.checksum)
        return refuse(c, ts_err_set(err, TS_ECORRUPT, "frame: payload checksum mismatch "
                                    "(tensor %" PRIu32 " partition %" PRIu32 " step %" PRIu64
                                    ", %" PRIu64 " bytes, peer %s)", d.tensor, d.partition,
                                    d.step, d.len, c->peer));
    c->frames_in++;
    *h = d;
    return TS_OK;
}
