/* test_frame.c - lib/transport/frame: the header format is exactly the documented bytes, every
 * field survives a round trip, and no damage is ever accepted silently: a flipped byte anywhere
 * in the 64-byte header, a flipped payload bit, an oversized length (refused before reading
 * the payload), a frame torn by a hang-up. The wire cases run over real tcp and shm
 * connections with the fault wrapper (fault.h) doing the damage, and check the counters. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "transport/fault.h"
#include "transport/frame.h"
#include "transport/mac.h"
#include "util/knobs.h"
#include "util/proc.h"

#define CAP 8192

static void must(ts_status st, const struct ts_err *err, const char *what)
{
    if (st != TS_OK)
        fail_msg("%s: %s: %s", what, ts_status_name(st), err->msg);
}

static struct ts_frame_hdr sample(void)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_PUSH, .tensor = 3, .partition = 0, .step = 7,
                              .dtype = 2, .encoding = 1, .rank = 5, .flags = 0x10,
                              .len = 4096, .checksum = 0x0123456789abcdefull };
    return h;
}

static void assert_hdr_equal(const struct ts_frame_hdr *a, const struct ts_frame_hdr *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->tensor, b->tensor);
    assert_int_equal(a->partition, b->partition);
    assert_true(a->step == b->step);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->encoding, b->encoding);
    assert_int_equal(a->rank, b->rank);
    assert_int_equal(a->flags, b->flags);
    assert_true(a->len == b->len);
    assert_true(a->checksum == b->checksum);
    assert_true(a->unhashed == b->unhashed);
    assert_memory_equal(&a->lr, &b->lr, sizeof(a->lr));
}

/* ---- the pure encoder and decoder ---- */

static void t_round_trip(void **state)
{
    struct ts_frame_hdr in[4] = { sample(), sample(), sample(), sample() }, out;
    struct ts_err err = { 0 };
    uint8_t b[TS_FRAME_HDR_LEN];

    /* Every field at its largest value, then distinct bytes in every field. */
    in[1] = (struct ts_frame_hdr){ TS_FRAME_TYPE_MAX, UINT32_MAX, UINT32_MAX, UINT64_MAX,
                                   UINT16_MAX, UINT16_MAX, UINT32_MAX, UINT32_MAX, TS_FRAME_MAX,
                                   UINT64_MAX, false, false, 0 };
    in[2] = (struct ts_frame_hdr){ TS_FRAME_ERROR, 0x01020304, 0x05060708,
                                   0x090a0b0c0d0e0f10ull, 0x1112, 0x1314, 0x15161718,
                                   0x191a1b1c, 0x1d1e1f, 0x2122232425262728ull, false,
                                   false, 0 };
    in[3].unhashed = true;                       /* a host-local frame: no hash */
    in[3].checksum = 0;
    in[0].lr = 0x1.2345p-7f;                     /* a push's learning rate */
    for (int i = 0; i < 4; i++) {
        memset(&out, 0xee, sizeof(out));
        ts_frame_encode(&in[i], b);
        must(ts_frame_decode(b, &out, &err), &err, "decode");
        assert_hdr_equal(&in[i], &out);
    }
}

/* The documented layout, byte for byte (docs/transport.md): little-endian at fixed offsets. */
static void t_golden_layout(void **state)
{
    struct ts_frame_hdr h = { TS_FRAME_ERROR, 0x01020304, 0x05060708, 0x090a0b0c0d0e0f10ull,
                              0x1112, 0x1314, 0x15161718, 0x191a1b1c, 0x1d1e1f,
                              0x2122232425262728ull, false, false, 0 };
    static const uint8_t want[60] = {
        'T', 'S', 'F', '1', 1, 0, 6, 0,                       /* magic, version, type */
        0x04, 0x03, 0x02, 0x01, 0x08, 0x07, 0x06, 0x05,       /* tensor, partition */
        0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09,       /* step */
        0x12, 0x11, 0x14, 0x13, 0x18, 0x17, 0x16, 0x15,       /* dtype, encoding, rank */
        0x1c, 0x1b, 0x1a, 0x19, 0, 0, 0, 0,                   /* flags, frame flags */
        0x1f, 0x1e, 0x1d, 0, 0, 0, 0, 0,                      /* len */
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,       /* checksum */
        0, 0, 0, 0,                                           /* lr: not a push */
    };
    uint8_t b[TS_FRAME_HDR_LEN];
    uint32_t check;

    ts_frame_encode(&h, b);
    assert_memory_equal(b, want, sizeof(want));
    check = (uint32_t)XXH3_64bits(b, 60);
    assert_int_equal(b[60] | b[61] << 8 | b[62] << 16 | (uint32_t)b[63] << 24, check);
}

/* Any damage to any header byte is refused, and the output is left alone. */
static void t_every_header_byte(void **state)
{
    static const uint8_t masks[] = { 0x01, 0x80, 0xff, 0x5a };
    struct ts_frame_hdr h = sample(), out, untouched;
    uint8_t good[TS_FRAME_HDR_LEN], b[TS_FRAME_HDR_LEN];

    ts_frame_encode(&h, good);
    memset(&untouched, 0xee, sizeof(untouched));
    for (int i = 0; i < TS_FRAME_HDR_LEN; i++) {
        for (size_t m = 0; m < sizeof(masks); m++) {
            struct ts_err err = { 0 };

            memcpy(b, good, sizeof(b));
            b[i] ^= masks[m];
            out = untouched;
            if (ts_frame_decode(b, &out, &err) != TS_ECORRUPT)
                fail_msg("byte %d ^ 0x%02x accepted", i, masks[m]);
            assert_memory_equal(&out, &untouched, sizeof(out));
            assert_true(strncmp(err.msg, "frame: ", 7) == 0);
        }
    }
}

/* Re-seals a hand-edited header, so that a field check (not the header check) is reached. */
static void reseal(uint8_t *b)
{
    uint32_t c = (uint32_t)XXH3_64bits(b, 60);

    for (int i = 0; i < 4; i++)
        b[60 + i] = (uint8_t)(c >> (8 * i));
}

static void expect_refused(const uint8_t *b, const char *needle)
{
    struct ts_frame_hdr out;
    struct ts_err err = { 0 };

    assert_int_equal(ts_frame_decode(b, &out, &err), TS_ECORRUPT);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not name '%s'", err.msg, needle);
}

static void t_field_messages(void **state)
{
    struct ts_frame_hdr h = sample();
    uint8_t b[TS_FRAME_HDR_LEN];

    ts_frame_encode(&h, b);
    b[0] = 'X';
    expect_refused(b, "magic 0x31465358 is not TSF1");
    ts_frame_encode(&h, b);
    b[4] = 2;
    expect_refused(b, "version 2");
    ts_frame_encode(&h, b);
    b[20] ^= 1;                                  /* step */
    expect_refused(b, "header check");
    h.type = 0;
    ts_frame_encode(&h, b);
    expect_refused(b, "type 0 unknown");
    h.type = TS_FRAME_TYPE_MAX + 1;
    ts_frame_encode(&h, b);
    {
        char want[32];
        snprintf(want, sizeof(want), "type %d unknown", TS_FRAME_TYPE_MAX + 1);
        expect_refused(b, want);
    }
    h = sample();
    ts_frame_encode(&h, b);
    b[36] = 4;                                   /* bits 0, 1: UNHASHED, MAC; the rest reserved */
    reseal(b);
    expect_refused(b, "reserved");
    h.type = TS_FRAME_PULL;                      /* a learning rate outside a push */
    ts_frame_encode(&h, b);
    b[56] = 1;
    reseal(b);
    expect_refused(b, "outside a push");
    h = sample();
    ts_frame_encode(&h, b);
    b[36] = 1;                                   /* unhashed, yet a checksum */
    reseal(b);
    expect_refused(b, "unhashed frame with a checksum");
    h.len = (uint64_t)TS_FRAME_MAX + 1;
    ts_frame_encode(&h, b);
    expect_refused(b, "length 268435457 over the maximum");
}

/* ---- over real connections, damaged by the fault wrapper ---- */

struct wire {
    struct ts_conn *tx;       /* the fault wrapper around the connecting side */
    struct ts_conn *rx;       /* the accepting side */
};

/* The wire of state "tcp" (loopback: host-local), "tcp-remote" (loopback taken for another
 * host: TESSERA_TCP_LOOPBACK=remote, hashed) or "shm". */
static struct wire wire_open(void **state, const struct ts_fault_cfg *cfg)
{
    bool remote = strcmp((const char *)*state, "tcp-remote") == 0;
    const struct ts_transport_ops *t = ts_transport_find(remote ? "tcp" : (const char *)*state);
    struct ts_listener *l = NULL;
    struct ts_blob addr = { 0 };
    struct ts_conn *raw = NULL;
    struct ts_err err = { 0 };
    struct wire w = { 0 };

    assert_non_null(t);
    if (ts_tp_probe(t, &err) == TS_ENODEV) {
        print_message("skipped: transport %s cannot run here: %s\n", t->name, err.msg);
        skip();
    }
    if (remote)
        setenv("TESSERA_TCP_LOOPBACK", "remote", 1);
    ts_knob_reread();
    must(ts_tp_listen(t, "127.0.0.1", &l, &addr, &err), &err, "listen");
    must(ts_tp_connect(t, &addr, 5000, &raw, &err), &err, "connect");
    must(ts_tp_accept(l, 5000, &w.rx, &err), &err, "accept");
    unsetenv("TESSERA_TCP_LOOPBACK");
    ts_knob_reread();
    ts_tp_unlisten(l);
    must(ts_fault_wrap(raw, cfg, &w.tx, &err), &err, "fault wrap");
    return w;
}

static void wire_close(struct wire *w)
{
    ts_tp_close(w->tx);
    ts_tp_close(w->rx);
}

static void send_sample(struct wire *w, size_t len, ts_status want)
{
    static uint8_t payload[CAP];
    struct ts_frame_hdr h = sample();
    struct ts_err err = { 0 };

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 31 + 7);
    assert_int_equal(ts_frame_send(w->tx, &h, payload, len, &err), want);
}

static ts_status recv_one(struct wire *w, struct ts_frame_hdr *h, struct ts_err *err)
{
    static uint8_t buf[CAP];

    return ts_frame_recv(w->rx, h, buf, sizeof(buf), 5000, err);
}

static void t_wire_ok(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE, .delay_ms = 1 };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr want = sample(), got;
    struct ts_err err = { 0 };
    const size_t lens[] = { 0, 1, 4096, CAP };

    for (size_t i = 0; i < 4; i++) {
        send_sample(&w, lens[i], TS_OK);
        must(recv_one(&w, &got, &err), &err, "recv");
        want.len = lens[i];
        want.checksum = got.checksum;
        want.unhashed = got.unhashed;
        assert_hdr_equal(&want, &got);
        /* shm and loopback tcp never leave the host: no hash; another host's tcp hashes
         * (docs/transport.md). */
        assert_true(w.rx->local_in == (strcmp((const char *)*state, "tcp-remote") != 0));
        assert_true(got.unhashed == w.rx->local_in && (got.checksum == 0) == got.unhashed);
    }
    assert_true(w.rx->frames_in == 4 && w.rx->frames_refused == 0);
    assert_true(w.rx->bytes_in == 4 * TS_FRAME_HDR_LEN + 1 + 4096 + CAP);
    assert_true(w.tx->bytes_out == w.rx->bytes_in);
    /* Timeouts are not refusals, and leave the stream in step. */
    assert_int_equal(ts_frame_recv(w.rx, &got, NULL, 0, 20, &err), TS_ETIMEDOUT);
    assert_true(w.rx->frames_refused == 0);
    wire_close(&w);
}

static void t_wire_payload_flip(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_CORRUPT, .nth = 2,
                                .offset = TS_FRAME_HDR_LEN + 1000, .mask = 0x10 };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };

    send_sample(&w, 4096, TS_OK);
    send_sample(&w, 4096, TS_OK);              /* the wrapper flips one bit of this one */
    must(recv_one(&w, &got, &err), &err, "first frame");
    assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "payload checksum mismatch (tensor 3 partition 0 step 7"));
    assert_true(w.rx->frames_in == 1 && w.rx->frames_refused == 1);
    wire_close(&w);
}

static void t_wire_header_flip(void **state)
{
    for (uint64_t off = 0; off < TS_FRAME_HDR_LEN; off += 9) {
        struct ts_fault_cfg cfg = { .kind = TS_FAULT_CORRUPT, .nth = 1, .offset = off };
        struct wire w = wire_open(state, &cfg);
        struct ts_frame_hdr got;
        struct ts_err err = { 0 };

        send_sample(&w, 100, TS_OK);
        assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
        assert_true(w.rx->frames_refused == 1 && w.rx->frames_in == 0);
        wire_close(&w);
    }
}

/* A header announcing more than the buffer (or TS_FRAME_MAX) is refused on the header alone:
 * no payload follows here, so a receiver that tried to read one would wait, not refuse. */
static void t_wire_oversized(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr h = sample(), got;
    uint8_t b[TS_FRAME_HDR_LEN];
    struct ts_err err = { 0 };

    h.len = CAP + 1;
    ts_frame_encode(&h, b);
    must(ts_tp_send(w.tx, b, sizeof(b), NULL, 0, &err), &err, "send header");
    assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "over the receive buffer's 8192 bytes"));
    assert_true(w.rx->bytes_in == TS_FRAME_HDR_LEN && w.rx->frames_refused == 1);

    h.len = (uint64_t)TS_FRAME_MAX + 1;
    ts_frame_encode(&h, b);
    must(ts_tp_send(w.tx, b, sizeof(b), NULL, 0, &err), &err, "send header");
    ts_err_clear(&err);
    assert_int_equal(ts_frame_recv(w.rx, &got, NULL, SIZE_MAX, 5000, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "over the maximum"));
    assert_true(w.rx->bytes_in == 2 * TS_FRAME_HDR_LEN && w.rx->frames_refused == 2);
    wire_close(&w);
}

/* The sender hangs up mid-frame: in the payload, then in the header. */
static void t_wire_torn(void **state)
{
    const uint64_t keep[] = { TS_FRAME_HDR_LEN + 1000, 30 };

    for (int i = 0; i < 2; i++) {
        struct ts_fault_cfg cfg = { .kind = TS_FAULT_TRUNCATE, .nth = 2, .keep = keep[i] };
        struct wire w = wire_open(state, &cfg);
        struct ts_frame_hdr got;
        struct ts_err err = { 0 };

        send_sample(&w, 4096, TS_OK);
        send_sample(&w, 4096, TS_EUNAVAIL);
        must(recv_one(&w, &got, &err), &err, "first frame");
        assert_int_equal(recv_one(&w, &got, &err), TS_EUNAVAIL);
        if (i == 0) {
            assert_non_null(strstr(err.msg, "torn"));
            assert_true(w.rx->frames_refused == 1);
        }
        send_sample(&w, 10, TS_EUNAVAIL);      /* the wrapper stays hung up */
        wire_close(&w);
    }
}

static void t_wire_drop(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_DROP, .nth = 1 };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };

    send_sample(&w, 10, TS_EUNAVAIL);
    assert_int_equal(recv_one(&w, &got, &err), TS_EUNAVAIL);
    assert_true(w.rx->frames_in == 0 && w.rx->frames_refused == 0);
    wire_close(&w);
}

static void t_send_refuses(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr h = sample();
    struct ts_err err = { 0 };
    uint8_t one = 0;

    h.type = 0;
    assert_int_equal(ts_frame_send(w.tx, &h, &one, 1, &err), TS_EINVAL);
    h = sample();
    ts_err_clear(&err);
    assert_int_equal(ts_frame_send(w.tx, &h, &one, (size_t)TS_FRAME_MAX + 1, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "over the maximum"));
    assert_true(w.tx->bytes_out == 0);
    wire_close(&w);
}

struct late_recv {
    struct ts_conn *c;
    struct ts_frame_hdr h;
    uint8_t buf[CAP];
    ts_status st;
    struct ts_err err;
};

static void *late_recv_main(void *arg)
{
    struct late_recv *r = arg;

    r->st = ts_frame_recv(r->c, &r->h, r->buf, sizeof(r->buf), -1, &r->err);
    return NULL;
}

/* An interrupt that lands between a frame's header and payload must not split the frame: the
 * frame arrives whole and the interrupt cancels the next wait instead. */
static void t_wire_interrupt_mid_frame(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr h = sample(), got;
    struct late_recv *r = calloc(1, sizeof(*r));
    uint8_t b[TS_FRAME_HDR_LEN], payload[100];
    struct ts_err err = { 0 };
    pthread_t th;

    memset(payload, 0x42, sizeof(payload));
    h.len = sizeof(payload);
    h.checksum = XXH3_64bits(payload, sizeof(payload));
    ts_frame_encode(&h, b);
    must(ts_tp_send(w.tx, b, sizeof(b), NULL, 0, &err), &err, "send header");
    ts_tp_interrupt(w.rx);
    r->c = w.rx;
    assert_int_equal(pthread_create(&th, NULL, late_recv_main, r), 0);
    ts_sleep_ms(30);
    must(ts_tp_send(w.tx, payload, sizeof(payload), NULL, 0, &err), &err, "send payload");
    pthread_join(th, NULL);
    must(r->st, &r->err, "frame across an interrupt");
    assert_int_equal(r->buf[99], 0x42);
    assert_int_equal(ts_frame_recv(w.rx, &got, NULL, 0, -1, &err), TS_ECANCELLED);
    free(r);
    wire_close(&w);
}

/* TESSERA_FRAME_HASH=always hashes even where the path is host-local. */
static void t_wire_hash_always(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };

    setenv("TESSERA_FRAME_HASH", "always", 1);
    ts_knob_reread();
    send_sample(&w, 4096, TS_OK);
    unsetenv("TESSERA_FRAME_HASH");
    ts_knob_reread();
    must(recv_one(&w, &got, &err), &err, "recv");
    assert_true(!got.unhashed && got.checksum != 0);
    wire_close(&w);
}

/* A receiver whose own path leaves the host refuses an unhashed frame, whatever the sender
 * claims: here the receiving side's local_in is cleared, as a backend between hosts sets it.
 * And a sender that corrupts (fault CORRUPT) hashes even on a host-local path. */
static void t_wire_unhashed_refused(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct ts_fault_cfg never = { .kind = TS_FAULT_CORRUPT, .nth = UINT64_MAX };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };
    struct ts_conn *fc = NULL;
    static uint8_t buf[CAP];

    if (!w.rx->local_in) {
        print_message("skipped on tcp: tcp always hashes, so there is no unhashed frame to "
                      "refuse (docs/transport.md)\n");
        wire_close(&w);
        skip();
    }
    must(ts_fault_wrap(w.rx, &never, &fc, &err), &err, "wrap");
    assert_true(fc->local_in && !fc->local_out && ts_frame_wants_hash(fc));
    assert_false(ts_frame_wants_hash(w.tx));
    w.rx = fc;                                    /* receives through it; closing closes both */
    w.rx->local_in = false;
    send_sample(&w, 4096, TS_OK);
    assert_int_equal(ts_frame_recv(w.rx, &got, buf, sizeof(buf), 5000, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "unhashed payload on a connection that leaves the host"));
    assert_true(w.rx->frames_refused == 1 && w.rx->frames_in == 0);
    wire_close(&w);
}

/* ts_frame_recv_view: in place where the backend can (shm: also across the ring's end, thanks
 * to its double mapping), into the buffer otherwise or when the payload exceeds the ring. */
static const size_t view_lens[] = { 0, 1, 40000, 65536, 100000, 39999, 4096, 65535, 333 };
#define VIEW_ROUNDS 3
#define VIEW_N (sizeof(view_lens) / sizeof(view_lens[0]))

struct view_tx {
    struct ts_conn *c;
    const uint8_t *src;
    ts_status st;
    struct ts_err err;
};

static void *view_tx_main(void *arg)
{
    struct view_tx *v = arg;

    for (int r = 0; r < VIEW_ROUNDS && !v->st; r++)
        for (size_t i = 0; i < VIEW_N && !v->st; i++) {
            struct ts_frame_hdr h = sample();
            v->st = ts_frame_send(v->c, &h, v->src + i, view_lens[i], &v->err);
        }
    return NULL;
}

static void t_wire_view(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    uint8_t *src = malloc(100000 + VIEW_N), *buf = malloc(100000);
    struct view_tx v = { 0 };
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };
    struct wire w;
    const void *p;
    pthread_t th;

    setenv("TESSERA_SHM_RING", "65536", 1);     /* a small ring: payloads wrap around it */
    ts_knob_reread();
    w = wire_open(state, &cfg);
    unsetenv("TESSERA_SHM_RING");
    ts_knob_reread();
    for (size_t i = 0; i < 100000 + VIEW_N; i++)
        src[i] = (uint8_t)(i * 131 + 17);
    v.c = w.tx;
    v.src = src;
    assert_int_equal(pthread_create(&th, NULL, view_tx_main, &v), 0);
    for (int r = 0; r < VIEW_ROUNDS; r++)
        for (size_t i = 0; i < VIEW_N; i++) {
            must(ts_frame_recv_view(w.rx, &got, buf, 100000, 5000, &p, &err), &err, "view");
            assert_true(got.len == view_lens[i]);
            if (got.len)
                assert_memory_equal(p, src + i, got.len);
            assert_true((p == buf) == (!w.rx->view_max || got.len == 0 ||
                                        got.len > w.rx->view_max));
            /* In place, behind payloads of odd lengths too: readable as int64s. */
            assert_true(((uintptr_t)p & 7) == 0);
            ts_frame_release(w.rx);
        }
    pthread_join(th, NULL);
    must(v.st, &v.err, "send");
    assert_true(w.rx->frames_in == VIEW_ROUNDS * VIEW_N && w.rx->frames_refused == 0);
    wire_close(&w);
    free(src);
    free(buf);
}

/* Views refuse what copies refuse: a corrupted payload (hashed, the wrapper corrupts) and a
 * payload torn by a hang-up (unhashed: the bytes never all arrive). */
static void t_wire_view_refuses(void **state)
{
    struct ts_fault_cfg flip = { .kind = TS_FAULT_CORRUPT, .nth = 1,
                                 .offset = TS_FRAME_HDR_LEN + 10 };
    struct ts_fault_cfg cut = { .kind = TS_FAULT_TRUNCATE, .nth = 1,
                                .keep = TS_FRAME_HDR_LEN + 1000 };
    static uint8_t buf[CAP];
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };
    const void *p = NULL;
    struct wire w = wire_open(state, &flip);

    send_sample(&w, 4096, TS_OK);
    assert_int_equal(ts_frame_recv_view(w.rx, &got, buf, sizeof(buf), 5000, &p, &err),
                     TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "payload checksum mismatch"));
    assert_true(w.rx->frames_refused == 1 && w.rx->view_held == 0);
    wire_close(&w);

    w = wire_open(state, &cut);   /* on shm the cut frame is unhashed */
    send_sample(&w, 4096, TS_EUNAVAIL);
    ts_err_clear(&err);
    assert_int_equal(ts_frame_recv_view(w.rx, &got, buf, sizeof(buf), 5000, &p, &err),
                     TS_EUNAVAIL);
    assert_non_null(strstr(err.msg, "torn"));
    assert_true(w.rx->frames_refused == 1 && w.rx->frames_in == 0);
    wire_close(&w);
}

/* The padding in front of a header (frame.h, "Alignment") must be zeros: anything else means
 * the stream is out of step, and the frame is refused. */
static void t_wire_pad_refused(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    struct ts_frame_hdr h = sample(), got;
    uint8_t b[7 + TS_FRAME_HDR_LEN];
    struct ts_err err = { 0 };

    send_sample(&w, 5, TS_OK);             /* owes 3 bytes of padding */
    must(recv_one(&w, &got, &err), &err, "recv");
    memset(b, 0, sizeof(b));
    b[1] = 0xaa;
    h.len = 0;
    ts_frame_encode(&h, b + 3);
    must(ts_tp_send(w.tx, b, 3 + TS_FRAME_HDR_LEN, NULL, 0, &err), &err, "send");
    assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "padding byte 1 before the header is 0xaa"));
    assert_true(w.rx->frames_in == 1 && w.rx->frames_refused == 1);
    wire_close(&w);
}

/* A payload sent in pieces (ts_frame_sendv) arrives as one frame, its hash over all of them
 * (tcp; TESSERA_FRAME_HASH=always on shm is t_wire_hash_always's), the same bytes. */
static void t_wire_pieces(void **state)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &cfg);
    static uint8_t payload[CAP], buf[CAP];
    struct ts_frame_hdr h = sample(), got;
    struct ts_err err = { 0 };

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 13 + 5);
    struct iovec pieces[4] = { { payload, 72 }, { payload + 72, 0 }, { payload + 72, 4093 },
                               { payload + 72 + 4093, 3 } };
    must(ts_frame_sendv(w.tx, &h, pieces, 4, &err), &err, "sendv");
    must(ts_frame_recv(w.rx, &got, buf, sizeof(buf), 5000, &err), &err, "recv");
    assert_int_equal(got.len, 72 + 4093 + 3);
    assert_memory_equal(buf, payload, got.len);
    assert_true(got.unhashed == w.rx->local_in);
    if (!got.unhashed)
        assert_true(got.checksum == ts_frame_hash(payload, got.len));
    /* The next frame starts in step (the odd length's padding was sent). */
    send_sample(&w, 16, TS_OK);
    must(recv_one(&w, &got, &err), &err, "recv after");
    assert_int_equal(got.len, 16);
    assert_true(w.rx->frames_refused == 0);
    /* A piece with bytes but no address is refused before anything is sent. */
    pieces[1] = (struct iovec){ NULL, 8 };
    assert_int_equal(ts_frame_sendv(w.tx, &h, pieces, 2, &err), TS_EINVAL);
    wire_close(&w);
}

/* Frame MACs (mac.h): both ends keyed, frames of every size round-trip through copies and
 * views; a flipped bit anywhere (header, MAC, payload) is refused as a MAC mismatch, nothing
 * returned; a frame without a MAC, a replay of an earlier frame, or one under another key is
 * refused too. */
static void mac_pair(struct wire *w, uint8_t key_b)
{
    uint8_t a[TS_DP_KEY_LEN], b[TS_DP_KEY_LEN];
    struct ts_err err = { 0 };

    memset(a, 0xa5, sizeof(a));
    memset(b, key_b, sizeof(b));
    must(ts_frame_mac_start(w->tx, a, b, &err), &err, "mac tx");
    must(ts_frame_mac_start(w->rx, b, a, &err), &err, "mac rx");
    assert_int_equal(ts_frame_mac_start(w->rx, a, b, &err), TS_ESTATE);
}

static void t_wire_mac(void **state)
{
    struct ts_fault_cfg none = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &none);
    struct ts_frame_hdr want = sample(), got;
    struct ts_err err = { 0 };
    const size_t lens[] = { 0, 1, 4096, CAP };
    uint8_t *buf = malloc(CAP);
    const void *p;

    mac_pair(&w, 0x5a);
    for (size_t i = 0; i < 4; i++) {
        send_sample(&w, lens[i], TS_OK);
        must(i % 2 ? ts_frame_recv_view(w.rx, &got, buf, CAP, 5000, &p, &err)
                   : recv_one(&w, &got, &err), &err, "recv");
        ts_frame_release(w.rx);
        want.len = lens[i];
        want.checksum = 0;
        want.unhashed = true;          /* the MAC covers more than a hash */
        assert_hdr_equal(&want, &got);
        assert_true(got.mac);
    }
    assert_true(w.rx->frames_in == 4 && w.rx->frames_refused == 0);
    assert_true(w.tx->bytes_out == w.rx->bytes_in);
    assert_true(w.rx->bytes_in == 4 * (TS_FRAME_HDR_LEN + TS_FRAME_MAC_LEN) + 1 + 4096 + CAP);
    wire_close(&w);
    free(buf);
}

static void t_wire_mac_refuses(void **state)
{
    /* a bit flipped in the header (after its check is made good again it would pass the
     * header check: the flips here hit the MAC and the payload too), the MAC, the payload */
    const uint64_t offs[] = { TS_FRAME_HDR_LEN + 3, TS_FRAME_HDR_LEN + TS_FRAME_MAC_LEN + 100 };
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };

    for (size_t i = 0; i < 2; i++) {
        struct ts_fault_cfg flip = { .kind = TS_FAULT_CORRUPT, .nth = 2, .offset = offs[i] };
        struct wire w = wire_open(state, &flip);
        mac_pair(&w, 0x5a);
        send_sample(&w, 4096, TS_OK);
        send_sample(&w, 4096, TS_OK);
        must(recv_one(&w, &got, &err), &err, "first");
        ts_err_clear(&err);
        assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "MAC mismatch"));
        assert_true(w.rx->frames_in == 1 && w.rx->frames_refused == 1);
        wire_close(&w);
    }
    {   /* another key on the sending side */
        struct ts_fault_cfg none = { .kind = TS_FAULT_NONE };
        struct wire w = wire_open(state, &none);
        uint8_t k1[TS_DP_KEY_LEN], k2[TS_DP_KEY_LEN];
        memset(k1, 1, sizeof(k1));
        memset(k2, 2, sizeof(k2));
        ts_err_clear(&err);
        must(ts_frame_mac_start(w.tx, k1, k1, &err), &err, "tx");
        must(ts_frame_mac_start(w.rx, k1, k2, &err), &err, "rx");
        send_sample(&w, 100, TS_OK);
        assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "MAC mismatch"));
        wire_close(&w);
    }
    {   /* no MAC where one is due; a MAC where none is */
        struct ts_fault_cfg none = { .kind = TS_FAULT_NONE };
        struct wire w = wire_open(state, &none);
        uint8_t k[TS_DP_KEY_LEN] = { 3 };
        ts_err_clear(&err);
        must(ts_frame_mac_start(w.rx, k, k, &err), &err, "rx");
        send_sample(&w, 100, TS_OK);
        assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "without a MAC on an authenticated connection"));
        wire_close(&w);
        ts_err_clear(&err);
        w = wire_open(state, &none);
        must(ts_frame_mac_start(w.tx, k, k, &err), &err, "tx");
        send_sample(&w, 100, TS_OK);
        assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "no keys"));
        wire_close(&w);
    }
}

/* A frame sent again later (the same bytes: a replay) fails: the MAC's IV is the frame's
 * number on the connection. The sender's MACs start over to make the very same bytes. */
static void t_wire_mac_replay(void **state)
{
    struct ts_fault_cfg none = { .kind = TS_FAULT_NONE };
    struct wire w = wire_open(state, &none);
    uint8_t a[TS_DP_KEY_LEN], b[TS_DP_KEY_LEN];
    struct ts_frame_hdr got;
    struct ts_err err = { 0 };

    memset(a, 0xa5, sizeof(a));
    memset(b, 0x5a, sizeof(b));
    must(ts_frame_mac_start(w.tx, a, b, &err), &err, "tx");
    must(ts_frame_mac_start(w.rx, b, a, &err), &err, "rx");
    send_sample(&w, 256, TS_OK);
    must(recv_one(&w, &got, &err), &err, "original");
    ts_frame_mac_free(w.tx);
    must(ts_frame_mac_start(w.tx, a, b, &err), &err, "tx again");
    send_sample(&w, 256, TS_OK);               /* frame 0's bytes, as frame 1 */
    assert_int_equal(recv_one(&w, &got, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "MAC mismatch"));
    wire_close(&w);
}

#define EACH(f) { #f "/tcp", f, NULL, NULL, "tcp" }, { #f "/shm", f, NULL, NULL, "shm" }, \
                { #f "/tcp-remote", f, NULL, NULL, "tcp-remote" }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_round_trip),
        cmocka_unit_test(t_golden_layout),
        cmocka_unit_test(t_every_header_byte),
        cmocka_unit_test(t_field_messages),
        EACH(t_wire_ok),
        EACH(t_wire_pieces),
        EACH(t_wire_payload_flip),
        EACH(t_wire_header_flip),
        EACH(t_wire_oversized),
        EACH(t_wire_torn),
        EACH(t_wire_drop),
        EACH(t_send_refuses),
        EACH(t_wire_interrupt_mid_frame),
        EACH(t_wire_hash_always),
        EACH(t_wire_unhashed_refused),
        EACH(t_wire_view),
        EACH(t_wire_pad_refused),
        EACH(t_wire_view_refuses),
        EACH(t_wire_mac),
        EACH(t_wire_mac_refuses),
        EACH(t_wire_mac_replay),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
