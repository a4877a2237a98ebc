/* fuzz_seeds.c - writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus-<name>).
 *
 * Seeds are a few well-formed inputs, so that a fuzzer starts past the checksums, lengths
 * and field numbers, plus a few edge cases. They are committed; run this again after a
 * change to a format they hold:
 *     build-fuzz/bin/fuzz_seeds tests/fuzz
 * (a TESSERA_FUZZ build; it writes corpus-<name>/ under the directory given, replacing files
 * of the same names). Each seed is under 4 KiB. Files named regress-* are inputs that found
 * a bug, kept by hand; fuzz_manifest's seeds are real manifests (tests/fuzz/corpus). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/codec.h"
#include "dataplane_facts.h"
#include "handshake_facts.h"
#include "rpc_types.h"
#include "transport/frame.h"

#define MAX_SEED 4096

struct seed {
    uint8_t b[MAX_SEED];
    size_t n;
};

static const char *root;

static void put(struct seed *s, const void *p, size_t n)
{
    if (s->n + n > MAX_SEED) {
        fprintf(stderr, "fuzz_seeds: a seed over %d bytes\n", MAX_SEED);
        exit(1);
    }
    if (n)
        memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void save(const char *dir, const char *name, const struct seed *s)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, dir, name);
    if (!(f = fopen(path, "wb")) || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* ---- fuzz_frame: a byte stream, then the option byte (fuzz_frame.c, OPT_*) ---- */

enum { OPT_MEM = 0x01, OPT_VIEW = 0x02, OPT_LOCAL = 0x04, OPT_FIX = 0x08 };
#define OPT_CAP(i) ((i) << 4)
#define OPT_VIEWS(i) ((i) << 6)

/* One frame as ts_frame_send puts it on the stream: padding owed, header, payload. */
static void frame(struct seed *s, size_t *pad, struct ts_frame_hdr h, const void *p,
                  size_t len, bool unhashed)
{
    static const uint8_t zeros[8];
    uint8_t b[TS_FRAME_HDR_LEN];

    h.len = len;
    h.unhashed = unhashed;
    h.checksum = unhashed ? 0 : ts_frame_hash(p, len);
    ts_frame_encode(&h, b);
    put(s, zeros, *pad);
    put(s, b, sizeof(b));
    put(s, p, len);
    *pad = (8 - len % 8) % 8;
}

static void frames(void)
{
    struct ts_frame_hdr hello = { .type = TS_FRAME_HELLO, .rank = 1, .step = 3 };
    struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = 2, .partition = 1, .step = 7,
                                 .dtype = 0, .encoding = 1, .rank = 1 };
    struct ts_frame_hdr pull = { .type = TS_FRAME_PULL, .tensor = 2, .partition = 1, .step = 7,
                                 .flags = TS_PULL_AFTER_PUSH };
    struct ts_frame_hdr error = { .type = TS_FRAME_ERROR, .flags = TS_ESTALE };
    float g[64];
    struct seed s;
    size_t pad;
    uint8_t opt;

    for (int i = 0; i < 64; i++)
        g[i] = (float)i / 8 - 4;

    /* A worker's opening: HELLO (odd length: padding follows), PUSH, PULL; over tcp. */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, hello, "job-1", 5, false);
    frame(&s, &pad, push, g, 48, false);
    frame(&s, &pad, pull, NULL, 0, false);
    opt = 0;
    put(&s, &opt, 1);
    save("corpus-frame", "hello-push-pull-tcp", &s);

    /* The same on a host-local connection: unhashed payloads, shown in place. */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, hello, "job-1", 5, true);
    frame(&s, &pad, push, g, sizeof(g), true);
    frame(&s, &pad, pull, NULL, 0, true);
    opt = OPT_MEM | OPT_VIEW | OPT_LOCAL | OPT_VIEWS(3);
    put(&s, &opt, 1);
    save("corpus-frame", "unhashed-views-local", &s);

    /* Hashed frames viewed in place, a view too small for the second payload. */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, push, g, 40, false);
    frame(&s, &pad, push, g, 200, false);
    opt = OPT_MEM | OPT_VIEW | OPT_VIEWS(2);
    put(&s, &opt, 1);
    save("corpus-frame", "views-small", &s);

    /* An ERROR frame, then a frame torn by the hang-up (its header says 100 bytes). */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, error, "stale map", 9, false);
    frame(&s, &pad, push, g, 100, false);
    s.n -= 90;
    opt = OPT_MEM;
    put(&s, &opt, 1);
    save("corpus-frame", "error-torn", &s);

    /* Unhashed frames on a connection that leaves the host: refused. */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, push, g, 16, true);
    opt = OPT_MEM;
    put(&s, &opt, 1);
    save("corpus-frame", "unhashed-remote", &s);

    /* A payload over the receive buffer (capacity 64), then checksums left to OPT_FIX. */
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, push, g, 128, false);
    opt = OPT_CAP(2);
    put(&s, &opt, 1);
    save("corpus-frame", "over-capacity", &s);
    memset(&s, 0, sizeof(s)), pad = 0;
    frame(&s, &pad, hello, "job-2", 5, false);
    frame(&s, &pad, push, g, 24, false);
    s.b[TS_FRAME_HDR_LEN + 6] = 1; /* the padding is not zero, and both sums are off */
    s.b[20] ^= 0xff;
    opt = OPT_FIX | OPT_MEM | OPT_CAP(3);
    put(&s, &opt, 1);
    save("corpus-frame", "fix-sums", &s);
}

/* ---- fuzz_dataplane: the option byte, then records (fuzz_dataplane.c) ---- */

enum { DP_LOCAL = 1, DP_AUTH = 2, DP_HANGUP = 4 };
enum { C_SYNTH = 4, C_FD = 8 };   /* ctl bits; bits 0-1 the connection */
#define C_FD_KIND(k) ((k) << 4)
#define C_FD_SIZE(k) ((k) << 6)

/* One record: the frame type is 1 + type % 12, so type - 1 is written. */
static void rec(struct seed *s, unsigned type, uint8_t ctl, uint32_t flags, uint16_t tensor,
                uint16_t part, uint32_t step, uint8_t rank, uint8_t enc, const void *p,
                uint16_t len)
{
    uint8_t b[18] = { (uint8_t)(type - 1), ctl };

    for (int i = 0; i < 4; i++) {
        b[2 + i] = (uint8_t)(flags >> 8 * i);
        b[10 + i] = (uint8_t)(step >> 8 * i);
    }
    b[6] = (uint8_t)tensor, b[7] = (uint8_t)(tensor >> 8);
    b[8] = (uint8_t)part, b[9] = (uint8_t)(part >> 8);
    b[14] = rank, b[15] = enc;
    b[16] = (uint8_t)len, b[17] = (uint8_t)(len >> 8);
    put(s, b, sizeof(b));
    put(s, p, len);
}

/* A HELLO of worker member (rank) naming job j, on connection conn. */
static void hello(struct seed *s, uint8_t conn, uint8_t j, uint32_t flags, uint32_t member,
                  uint8_t rank)
{
    rec(s, TS_FRAME_HELLO, conn | C_SYNTH, flags, (uint16_t)member, 0, 0, rank, 0, &j, 1);
}

/* A step of tensor 0 (3 partitions): worker 101 pushes slots 0 and 2 (conn 0; combined: at
 * once, bsp only), 102 slot 1 (conn 1), each pulls every partition of the next version. */
static void step(struct seed *s, uint32_t at, uint8_t enc, bool combined)
{
    static const uint8_t mask[8] = { 5 }, g[4] = { 0x00, 0x00, 0x80, 0x3f };
    uint8_t m[12];

    memcpy(m, mask, 8);
    memcpy(m + 8, g, 4);
    for (uint16_t p = 0; p < 3; p++) {
        uint32_t round = p ? 0 : TS_PUSH_ROUND;
        if (combined) {
            rec(s, TS_FRAME_PUSH, 0 | C_SYNTH, TS_PUSH_SLOTS | round, 0, p, at, 0, enc, m,
                sizeof(m));
        } else {
            rec(s, TS_FRAME_PUSH, 0 | C_SYNTH, round, 0, p, at, 0, enc, g, 4);
            rec(s, TS_FRAME_PUSH, 0 | C_SYNTH, 0, 0, p, at, 2, enc, g, 4);
        }
        rec(s, TS_FRAME_PUSH, 1 | C_SYNTH, round, 0, p, at, 1, enc, g, 4);
    }
    for (uint16_t p = 0; p < 3; p++) {
        uint32_t round = TS_PULL_AFTER_PUSH | (p ? 0 : TS_PULL_ROUND);
        rec(s, TS_FRAME_PULL, 0, round, 0, p, at + 1, 0, 0, NULL, 0);
        rec(s, TS_FRAME_PULL, 1, round, 0, p, at + 1, 1, 0, NULL, 0);
    }
}

static void dataplanes(void)
{
    static const uint8_t coded[16] = { 0 }, topk[16] = { [14] = 0xb9, [15] = 0x3f };
    const uint8_t w0 = DP_FACTS_WORKER0, w1 = DP_FACTS_WORKER0 + 1;
    struct seed s;
    uint8_t opt;

    /* Two bsp steps of job "bsp" on host-local connections, then over tcp, hashed. */
    for (int local = 0; local < 2; local++) {
        memset(&s, 0, sizeof(s));
        opt = local ? DP_LOCAL : 0;
        put(&s, &opt, 1);
        hello(&s, 0, 0, 0, w0, 0);
        hello(&s, 1, 0, 0, w1, 1);
        step(&s, 0, 0, true);
        step(&s, 1, 0, false);
        save("corpus-dataplane", local ? "bsp-steps-local" : "bsp-steps-tcp", &s);
    }

    /* Job "exact": fixed-point pushes (int64), then float pushes the shard rounds. */
    memset(&s, 0, sizeof(s));
    opt = DP_LOCAL;
    put(&s, &opt, 1);
    hello(&s, 0, 1, 0, w0, 0);
    hello(&s, 1, 1, 0, w1, 1);
    step(&s, 0, 5, true);
    step(&s, 1, 6, false);
    save("corpus-dataplane", "exact-fixed", &s);

    /* Job "ssp" (elastic): pushes apply alone; pulls within the staleness bound; a BYE on
     * one connection, the other hangs up without one. */
    memset(&s, 0, sizeof(s));
    opt = DP_HANGUP;
    put(&s, &opt, 1);
    hello(&s, 0, 2, TS_HELLO_ELASTIC, w0, 0);
    hello(&s, 1, 2, TS_HELLO_ELASTIC, w1, 1);
    step(&s, 0, 0, false);
    rec(&s, TS_FRAME_PULL, 0, TS_PULL_CODED, 0, 0, 1, 0, 1, coded, sizeof(coded));
    rec(&s, TS_FRAME_PULL, 1, TS_PULL_CODED, 0, 1, 1, 1, 4, topk, sizeof(topk));
    rec(&s, TS_FRAME_BYE, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
    save("corpus-dataplane", "ssp-elastic", &s);

    /* Job "reduce": a step, then a seed of a partition (refused: none is being seeded). */
    memset(&s, 0, sizeof(s));
    opt = DP_LOCAL;
    put(&s, &opt, 1);
    hello(&s, 0, 3, 0, w0, 0);
    hello(&s, 1, 3, 0, w1, 1);
    step(&s, 0, 6, false);
    rec(&s, TS_FRAME_SEED, 0 | C_SYNTH, 0, 0, 0, 1, 0, 0, "\1\2", 2);
    save("corpus-dataplane", "reduce-seed", &s);

    /* The handshake required (mutual TLS): HELLO with a nonce, AUTH with the proof, MACs on
     * (tcp), a push; then a frame before any handshake on another connection. */
    memset(&s, 0, sizeof(s));
    opt = DP_AUTH;
    put(&s, &opt, 1);
    hello(&s, 0, 0, TS_HELLO_AUTH, w0, 0);
    rec(&s, TS_FRAME_AUTH, 0 | C_SYNTH, 0, 0, 0, 0, 0, 0, NULL, 0);
    rec(&s, TS_FRAME_PUSH, 0 | C_SYNTH, TS_PUSH_ROUND, 0, 0, 0, 0, 0, "\1", 1);
    rec(&s, TS_FRAME_PUSH, 1 | C_SYNTH, TS_PUSH_ROUND, 0, 0, 0, 1, 0, "\1", 1);
    save("corpus-dataplane", "handshake-push", &s);

    /* A chain link's handshake (the chain key), then images of the followed tensor from the
     * shard before this one (2) and from another (3); on a connection without the handshake
     * where none is required, an image of a partition this shard heads. */
    memset(&s, 0, sizeof(s));
    opt = DP_AUTH | DP_LOCAL;
    put(&s, &opt, 1);
    hello(&s, 0, 0, TS_HELLO_AUTH | TS_HELLO_CHAIN, 0, 0);
    rec(&s, TS_FRAME_AUTH, 0 | C_SYNTH, 0, 0, 0, 0, 0, 0, NULL, 0);
    rec(&s, TS_FRAME_IMAGE, 0 | C_SYNTH, 0, 1, 0, 1, DP_FACTS_OTHER, 0, "\1", 1);
    rec(&s, TS_FRAME_IMAGE, 0 | C_SYNTH, 0, 1, 1, 2, 3, 0, "\1", 1);
    save("corpus-dataplane", "chain-images", &s);
    memset(&s, 0, sizeof(s));
    opt = DP_LOCAL;
    put(&s, &opt, 1);
    hello(&s, 0, 1, 0, 0, 0);
    rec(&s, TS_FRAME_IMAGE, 0 | C_SYNTH, 0, 1, 1, 3, DP_FACTS_OTHER, 0, NULL, 0);
    rec(&s, TS_FRAME_IMAGE, 0 | C_SYNTH, 0, 0, 1, 3, DP_FACTS_OTHER, 0, NULL, 0);
    save("corpus-dataplane", "images-plain", &s);

    /* Job "shared": MAP of the large tensor, a gradient region SHAREd (a sealed memfd of
     * 64 KiB), pushes from it and pulls answered in place; a SHARE of an unsealed one. */
    memset(&s, 0, sizeof(s));
    opt = DP_LOCAL;
    put(&s, &opt, 1);
    hello(&s, 0, 4, 0, w0, 0);
    rec(&s, TS_FRAME_MAP, 0, 0, 2, 0, 0, 0, 0, NULL, 0);
    rec(&s, TS_FRAME_SHARE, 0 | C_FD | C_FD_KIND(0) | C_FD_SIZE(2), TS_SHARE_GRAD, 2, 0, 0, 0,
        0, NULL, 0);
    rec(&s, TS_FRAME_PUSH, 0, TS_PUSH_REGION | TS_PUSH_ROUND, 2, 0, 0, 0, 0, NULL, 0);
    rec(&s, TS_FRAME_PUSH, 0, TS_PUSH_REGION, 2, 0, 0, 2, 0, NULL, 0);
    rec(&s, TS_FRAME_PULL, 0, TS_PULL_REGION | TS_PULL_ROUND, 2, 0, 0, 0, 0, NULL, 0);
    rec(&s, TS_FRAME_SHARE, 1 | C_FD | C_FD_KIND(2) | C_FD_SIZE(1), TS_SHARE_GRAD, 2, 0, 0, 0,
        0, NULL, 0);
    save("corpus-dataplane", "shared-regions", &s);

    /* Refusals: a push before any HELLO, one of a slot another worker owns, the same slot and
     * step again with other bytes (a conflict), a HELLO of a job no shard holds. */
    memset(&s, 0, sizeof(s));
    opt = DP_LOCAL;
    put(&s, &opt, 1);
    rec(&s, TS_FRAME_PUSH, 2 | C_SYNTH, 0, 0, 0, 0, 0, 0, "\1", 1);
    hello(&s, 0, 0, 0, w0, 0);
    rec(&s, TS_FRAME_PUSH, 0 | C_SYNTH, TS_PUSH_ROUND, 0, 0, 0, 1, 0, "\1", 1);
    hello(&s, 1, 0, 0, w0, 0);
    rec(&s, TS_FRAME_PUSH, 1 | C_SYNTH, TS_PUSH_ROUND, 0, 1, 0, 0, 0, "\1", 1);
    rec(&s, TS_FRAME_PUSH, 1 | C_SYNTH, TS_PUSH_RETRY, 0, 1, 0, 0, 0, "\2", 1);
    hello(&s, 2, 5, 0, w1, 1);
    save("corpus-dataplane", "refusals", &s);
}

/* ---- fuzz_shm: the half, then its fields (fuzz_shm.c) ---- */

static void le(struct seed *s, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        uint8_t b = (uint8_t)(v >> 8 * i);
        put(s, &b, 1);
    }
}

/* The accept half: how, the ring's size selector, seals, the memfd's and the map size's
 * offsets in pages, silent connections, then both rings' head and tail, then the sizes of a
 * receive, a view and a send on the accepted connection. */
static void shm_accept(const char *name, uint8_t how, uint8_t rsel, uint8_t seals,
                       int8_t size_off, int8_t map_off, uint8_t silent, const uint64_t ctr[4])
{
    struct seed s = { .n = 0 };
    uint8_t b[7] = { 0, how, rsel, seals, (uint8_t)size_off, (uint8_t)map_off, silent };

    put(&s, b, sizeof(b));
    for (int i = 0; i < 4; i++)
        le(&s, ctr ? ctr[i] : 0, 8);
    le(&s, 16, 2);
    le(&s, 8, 2);
    le(&s, 32, 2);
    save("corpus-shm", name, &s);
}

enum { SO_WRITE, SO_HEAD, SO_TAIL, SO_TXTAIL, SO_FLAGS, SO_RECV, SO_VIEW, SO_SEND, SO_INTR,
       SO_FDS };

static void shms(void)
{
    static const uint64_t hostile[4] = { 100, 0, UINT64_MAX - 9, UINT64_MAX - 9 };
    const uint8_t sealed = 0x1 | 0x2 | 0x10;   /* shrink, grow, seal: as shm_connect does */
    struct seed s;

    shm_accept("accept-good", 0, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-good-1m", 0, 4, sealed, 0, 0, 0, NULL);
    shm_accept("accept-counters", 0, 0, sealed, 0, 0, 0, hostile);
    shm_accept("accept-no-fd", 1 << 2, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-pipe", 2 << 2, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-no-hello", 1, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-short-hello", 2, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-bad-magic", 0x10, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-map-size", 0x20, 0, sealed, 0, 1, 0, NULL);
    shm_accept("accept-header-ring", 0x40, 0, sealed, 0, 0, 0, NULL);
    shm_accept("accept-unsealed", 0, 0, 0, 0, 0, 0, NULL);
    shm_accept("accept-write-sealed", 0, 0, 0x1 | 0x8, 0, 0, 0, NULL);
    shm_accept("accept-memfd-short", 0, 0, sealed, -1, 0, 0, NULL);
    shm_accept("accept-silent-flood", 0x80, 0, sealed, 0, 0, 70, NULL);

    /* Rings: 16 bytes written and published, received; 8 viewed; a send of 32. */
    memset(&s, 0, sizeof(s));
    le(&s, 1, 1);
    le(&s, 0, 8);
    le(&s, SO_WRITE, 1), le(&s, 0, 2), le(&s, 24, 1);
    put(&s, "0123456789abcdefghijklmn", 24);
    le(&s, SO_HEAD, 1), le(&s, 0, 1), le(&s, 24, 2);
    le(&s, SO_RECV, 1), le(&s, 16, 2), le(&s, 0, 1);
    le(&s, SO_VIEW, 1), le(&s, 8, 2);
    le(&s, SO_SEND, 1), le(&s, 32, 2);
    save("corpus-shm", "rings-basic", &s);

    /* Counters about to wrap, the tail a few bytes before the ring's end: a receive and a
     * view across it. */
    memset(&s, 0, sizeof(s));
    le(&s, 1, 1);
    le(&s, UINT64_MAX - 5, 8);
    le(&s, SO_HEAD, 1), le(&s, 0, 1), le(&s, 40, 2);
    le(&s, SO_VIEW, 1), le(&s, 20, 2);
    le(&s, SO_RECV, 1), le(&s, 20, 2), le(&s, 0xff, 1);
    le(&s, SO_SEND, 1), le(&s, 4000, 2);
    save("corpus-shm", "rings-wrap", &s);

    /* A head past the ring's size ahead of the tail, a tail ahead of the head, our tx tail
     * ahead of what we wrote; a receive, a view and a send against each. */
    memset(&s, 0, sizeof(s));
    le(&s, 1, 1);
    le(&s, 1000, 8);
    le(&s, SO_HEAD, 1), le(&s, 0, 1), le(&s, 65535, 2);
    le(&s, SO_HEAD, 1), le(&s, 0x80, 1), le(&s, 1000 + 70000, 8);
    le(&s, SO_RECV, 1), le(&s, 100, 2), le(&s, 0, 1);
    le(&s, SO_TAIL, 1), le(&s, 0, 1), le(&s, 10, 2);
    le(&s, SO_VIEW, 1), le(&s, 100, 2);
    le(&s, SO_TXTAIL, 1), le(&s, 0, 1), le(&s, 100, 2);
    le(&s, SO_SEND, 1), le(&s, 65535, 2);
    save("corpus-shm", "rings-hostile", &s);

    /* An interrupt, then a receive with nothing there; the peer's closed flags. */
    memset(&s, 0, sizeof(s));
    le(&s, 1, 1);
    le(&s, 7, 8);
    le(&s, SO_INTR, 1);
    le(&s, SO_RECV, 1), le(&s, 1, 2), le(&s, 0xff, 1);
    le(&s, SO_FLAGS, 1), le(&s, 3, 1);
    le(&s, SO_RECV, 1), le(&s, 1, 2), le(&s, 0xff, 1);
    le(&s, SO_SEND, 1), le(&s, 1, 2);
    save("corpus-shm", "rings-closed", &s);

    /* Descriptors beside the stream, as a SHARE brings them: one with the magic (taken),
     * none, one with a wrong magic, one with half a magic. */
    memset(&s, 0, sizeof(s));
    le(&s, 1, 1);
    le(&s, 0, 8);
    le(&s, SO_FDS, 1), le(&s, 1, 1);
    le(&s, SO_FDS, 1), le(&s, 0, 1);
    le(&s, SO_FDS, 1), le(&s, 1 | 4, 1);
    le(&s, SO_FDS, 1), le(&s, 1 | 8, 1);
    save("corpus-shm", "rings-fds", &s);

    /* A peer's address: the listener's own, with more after it, another path of this host,
     * a blob that is not an address. */
    memset(&s, 0, sizeof(s));
    put(&s, "\2\3", 2);
    save("corpus-shm", "address-own", &s);
    put(&s, " x", 2);
    save("corpus-shm", "address-more", &s);
    memset(&s, 0, sizeof(s));
    put(&s, "\2\1/tmp", 6);
    save("corpus-shm", "address-tmp", &s);
    memset(&s, 0, sizeof(s));
    put(&s, "\2\0boot ns /dev/null", 20);
    save("corpus-shm", "address-foreign", &s);
}

/* ---- fuzz_master: the options byte, then records (method, flags, length, request) ---- */

/* One request of method `name` (its index in master.proto), flags (bit 0: the admin token). */
static void mreq(struct seed *s, const char *name, uint8_t flags, const ProtobufCMessage *m)
{
    const ProtobufCServiceDescriptor *d = &tessera__v1__master__descriptor;
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t b[4] = { 0, flags, (uint8_t)len, (uint8_t)(len >> 8) }, *p = malloc(len + 1);
    unsigned i;

    for (i = 0; i < d->n_methods && strcmp(d->methods[i].name, name); i++)
        ;
    if (i == d->n_methods || !p || len > 0xffff) {
        fprintf(stderr, "fuzz_seeds: no Master method %s\n", name);
        exit(1);
    }
    b[0] = (uint8_t)i;
    protobuf_c_message_pack(m, p);
    put(s, b, 4);
    put(s, p, len);
    free(p);
}

static void masters(void)
{
    Tessera__V1__DataPlaneEndpoint ep = TESSERA__V1__DATA_PLANE_ENDPOINT__INIT, *eps[1] = { &ep };
    Tessera__V1__RegisterShardRequest rs = TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
    Tessera__V1__RegisterWorkerRequest rw = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    Tessera__V1__HeartbeatRequest hb = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    Tessera__V1__DeregisterRequest dr = TESSERA__V1__DEREGISTER_REQUEST__INIT;
    Tessera__V1__GetShardMapRequest gm = TESSERA__V1__GET_SHARD_MAP_REQUEST__INIT;
    Tessera__V1__ClusterStatusRequest cs = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;
    Tessera__V1__JobAccessRequest ja = TESSERA__V1__JOB_ACCESS_REQUEST__INIT;
    Tessera__V1__ClaimWorkRequest cw = TESSERA__V1__CLAIM_WORK_REQUEST__INIT;
    Tessera__V1__SubmitTaskRequest st = TESSERA__V1__SUBMIT_TASK_REQUEST__INIT;
    Tessera__V1__TaskInfo done = TESSERA__V1__TASK_INFO__INIT;
    Tessera__V1__ReportUnreachableRequest ru = TESSERA__V1__REPORT_UNREACHABLE_REQUEST__INIT;
    Tessera__V1__ReportLostRequest rl = TESSERA__V1__REPORT_LOST_REQUEST__INIT;
    Tessera__V1__CreateSnapshotRequest cr = TESSERA__V1__CREATE_SNAPSHOT_REQUEST__INIT;
    Tessera__V1__CollectGarbageRequest gc = TESSERA__V1__COLLECT_GARBAGE_REQUEST__INIT;
    Tessera__V1__DataChecksum dc = TESSERA__V1__DATA_CHECKSUM__INIT, *dcs[1] = { &dc };
    Tessera__V1__CheckDataRequest cd = TESSERA__V1__CHECK_DATA_REQUEST__INIT;
    uint8_t sha[32] = { 9 };
    char *jobs[2] = { "job-1", "gone" };
    struct seed s;
    uint8_t opt = 0;

    /* Two shards and two workers of one job: heartbeats, the map, the status, JobAccess, a
     * worker leaving finished and one failing, the status again. */
    memset(&s, 0, sizeof(s));
    put(&s, &opt, 1);
    ep.transport = "tcp";
    ep.address = (ProtobufCBinaryData){ 15, (uint8_t *)"127.0.0.1:40001" };
    rs.addr = "127.0.0.1:7001";
    rs.instance = "shard-a";
    rs.n_data_planes = 1;
    rs.data_planes = eps;
    mreq(&s, "RegisterShard", 0, &rs.base);
    rs.addr = "127.0.0.1:7002";
    rs.instance = "shard-b";
    mreq(&s, "RegisterShard", 0, &rs.base);
    rw.host = "127.0.0.1";
    rw.pid = 100;
    rw.instance = "worker-a";
    rw.job = "job-1";
    rw.workers = 2;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.pid = 101;
    rw.instance = "worker-b";
    rw.rank = 1;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    hb.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    hb.id = 1;
    hb.clock = 5;
    hb.has_progress = true;
    hb.loss = 0.5;
    hb.accuracy = 0.8;
    mreq(&s, "Heartbeat", 0, &hb.base);
    hb = (Tessera__V1__HeartbeatRequest)TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    hb.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD;
    hb.id = 1;
    hb.n_jobs = 2;
    hb.jobs = jobs;
    mreq(&s, "Heartbeat", 0, &hb.base);
    mreq(&s, "GetShardMap", 0, &gm.base);
    mreq(&s, "ClusterStatus", 0, &cs.base);
    ja.shard_id = 1;
    ja.job = "job-1";
    mreq(&s, "JobAccess", 0, &ja.base);
    dr.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    dr.id = 1;
    dr.reason = "finished";
    dr.outcome = TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FINISHED;
    mreq(&s, "Deregister", 0, &dr.base);
    dr.id = 2;
    dr.reason = "out of memory \xc3\xa9t\xc3\xa9";
    dr.outcome = TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FAILED;
    mreq(&s, "Deregister", 0, &dr.base);
    mreq(&s, "ClusterStatus", 0, &cs.base);
    save("corpus-master", "members-and-jobs", &s);

    /* An elastic job: its workers claim work, an admin submits a task, a worker's heartbeat
     * brings it done, a shard reports a worker gone, then a shard unreachable. */
    memset(&s, 0, sizeof(s));
    opt = 1;
    put(&s, &opt, 1);
    rs.addr = "127.0.0.1:7001";
    rs.instance = "shard-a";
    mreq(&s, "RegisterShard", 0, &rs.base);
    rw = (Tessera__V1__RegisterWorkerRequest)TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    rw.host = "127.0.0.1";
    rw.instance = "worker-a";
    rw.job = "job-e";
    rw.workers = 2;
    rw.elastic = true;
    rw.balance = true;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.instance = "worker-b";
    rw.rank = 1;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    cw.worker_id = 1;
    cw.want = 4;
    cw.units = 100;
    mreq(&s, "ClaimWork", 0, &cw.base);
    st.job = "job-e";
    st.kind = 1;
    mreq(&s, "SubmitTask", 1, &st.base);
    hb = (Tessera__V1__HeartbeatRequest)TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    hb.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    hb.id = 2;
    hb.has_speed = true;
    hb.slot_seconds = 0.25;
    hb.speed_slots = 1;
    mreq(&s, "Heartbeat", 0, &hb.base);
    done.id = 1;
    done.kind = 1;
    done.state = 3;
    done.worker = 2;
    done.accuracy = 0.5;
    hb.task_done = &done;
    mreq(&s, "Heartbeat", 0, &hb.base);
    ru.worker_id = 1;
    ru.reporter = "shard 1";
    mreq(&s, "ReportUnreachable", 0, &ru.base);
    ru.worker_id = 0;
    ru.shard_id = 1;
    mreq(&s, "ReportUnreachable", 0, &ru.base);
    mreq(&s, "ClusterStatus", 0, &cs.base);
    save("corpus-master", "elastic-work-tasks", &s);

    /* Joining an elastic job that starts with 2 of its 3 ranks: rank 2 before the run began
     * (refused: a joiner never starts a run of its own), ranks 0 and 1 start it, rank 2
     * joins, then the status. */
    memset(&s, 0, sizeof(s));
    opt = 0;
    put(&s, &opt, 1);
    rs = (Tessera__V1__RegisterShardRequest)TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
    rs.n_data_planes = 1;
    rs.data_planes = eps;
    rs.addr = "127.0.0.1:7001";
    rs.instance = "shard-a";
    mreq(&s, "RegisterShard", 0, &rs.base);
    rw = (Tessera__V1__RegisterWorkerRequest)TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    rw.host = "127.0.0.1";
    rw.job = "job-w";
    rw.workers = 3;
    rw.start_workers = 2;
    rw.elastic = true;
    rw.instance = "worker-c";
    rw.rank = 2;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.instance = "worker-a";
    rw.rank = 0;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.instance = "worker-b";
    rw.rank = 1;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.instance = "worker-c";
    rw.rank = 2;
    mreq(&s, "RegisterWorker", 0, &rw.base);
    mreq(&s, "ClusterStatus", 0, &cs.base);
    save("corpus-master", "elastic-join", &s);

    /* What an admin may do and what a member claims to be, on a running job: a shard and
     * two workers of job-1 registered with secrets; snapshots and garbage (no store here)
     * with and without the token, a loss report of job-1 and of a job that is not running;
     * data checksums from rank 0, the same from rank 1 and another map from rank 1; a claim
     * of work and JobAccess with a wrong secret, then right; a shard registering at another's
     * address, then with the token. */
    memset(&s, 0, sizeof(s));
    opt = 0;
    put(&s, &opt, 1);
    rs = (Tessera__V1__RegisterShardRequest)TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
    rs.n_data_planes = 1;
    rs.data_planes = eps;
    rs.addr = "127.0.0.1:7001";
    rs.instance = "shard-a";
    rs.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"0123456789abcdef" };
    mreq(&s, "RegisterShard", 0, &rs.base);
    rw = (Tessera__V1__RegisterWorkerRequest)TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    rw.host = "127.0.0.1";
    rw.pid = 200;
    rw.instance = "worker-a";
    rw.job = "job-1";
    rw.workers = 2;
    rw.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"worker-a-secret!" };
    mreq(&s, "RegisterWorker", 0, &rw.base);
    rw.pid = 201;
    rw.instance = "worker-b";
    rw.rank = 1;
    rw.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"worker-b-secret!" };
    mreq(&s, "RegisterWorker", 0, &rw.base);
    cr.job = "job-1";
    cr.message = "by hand";
    mreq(&s, "CreateSnapshot", 1, &cr.base);
    mreq(&s, "CreateSnapshot", 0, &cr.base);
    mreq(&s, "CollectGarbage", 1, &gc.base);
    rl.job = "job-1";
    rl.shard_id = 1;
    rl.generation = 0;
    mreq(&s, "ReportLost", 1, &rl.base);
    rl.job = "gone";
    rl.generation = 1;
    mreq(&s, "ReportLost", 0, &rl.base);
    dc.name = "train[0:1000)";
    dc.sha256 = (ProtobufCBinaryData){ 32, sha };
    cd.job = "job-1";
    cd.n_checksums = 1;
    cd.checksums = dcs;
    mreq(&s, "CheckData", 0, &cd.base);
    cd.rank = 1;
    mreq(&s, "CheckData", 0, &cd.base);
    sha[0] = 10;
    mreq(&s, "CheckData", 0, &cd.base);
    cw = (Tessera__V1__ClaimWorkRequest)TESSERA__V1__CLAIM_WORK_REQUEST__INIT;
    cw.worker_id = 1;
    cw.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"worker-b-secret!" };
    cw.want = 2;
    cw.units = 10;
    mreq(&s, "ClaimWork", 0, &cw.base);
    cw.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"worker-a-secret!" };
    mreq(&s, "ClaimWork", 0, &cw.base);
    ja = (Tessera__V1__JobAccessRequest)TESSERA__V1__JOB_ACCESS_REQUEST__INIT;
    ja.shard_id = 1;
    ja.job = "job-1";
    ja.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"fedcba9876543210" };
    mreq(&s, "JobAccess", 0, &ja.base);
    ja.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"0123456789abcdef" };
    mreq(&s, "JobAccess", 0, &ja.base);
    rs.instance = "shard-z";   /* its address is asked which process serves there */
    rs.secret = (ProtobufCBinaryData){ 16, (uint8_t *)"fedcba9876543210" };
    mreq(&s, "RegisterShard", 0, &rs.base);
    mreq(&s, "RegisterShard", 1, &rs.base);
    save("corpus-master", "admin-and-claims", &s);
}

/* ---- fuzz_shard_rpc: the options byte, then records as fuzz_master's ---- */

static void sreq(struct seed *s, const char *name, uint8_t flags, const ProtobufCMessage *m)
{
    const ProtobufCServiceDescriptor *d = &tessera__v1__shard__descriptor;
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t b[4] = { 0, flags, (uint8_t)len, (uint8_t)(len >> 8) }, *p = malloc(len + 1);
    unsigned i;

    for (i = 0; i < d->n_methods && strcmp(d->methods[i].name, name); i++)
        ;
    if (i == d->n_methods || !p || len > 0xffff) {
        fprintf(stderr, "fuzz_seeds: no Shard method %s\n", name);
        exit(1);
    }
    b[0] = (uint8_t)i;
    protobuf_c_message_pack(m, p);
    put(s, b, 4);
    put(s, p, len);
    free(p);
}

static void shard_rpcs(void)
{
    Tessera__V1__JobSpec js = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TensorSpec ts = TESSERA__V1__TENSOR_SPEC__INIT;
    Tessera__V1__RegisterTensorRequest rt = TESSERA__V1__REGISTER_TENSOR_REQUEST__INIT;
    Tessera__V1__ShardStatusRequest ss = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
    Tessera__V1__PartitionDigestsRequest pd = TESSERA__V1__PARTITION_DIGESTS_REQUEST__INIT;
    Tessera__V1__ArmSnapshotRequest as = TESSERA__V1__ARM_SNAPSHOT_REQUEST__INIT;
    Tessera__V1__WriteSnapshotRequest ws = TESSERA__V1__WRITE_SNAPSHOT_REQUEST__INIT;
    Tessera__V1__ReleaseJobRequest rj = TESSERA__V1__RELEASE_JOB_REQUEST__INIT;
    Tessera__V1__RollbackJobRequest rb = TESSERA__V1__ROLLBACK_JOB_REQUEST__INIT;
    Tessera__V1__MoveTablesRequest mt = TESSERA__V1__MOVE_TABLES_REQUEST__INIT;
    uint64_t shape[2] = { 8, 40 };
    struct seed s;
    uint8_t opt = 0;

    /* A bsp job's two tensors registered (one again, as every worker does), the status with
     * and without the map's epoch, the digests, a snapshot armed, written (no store) and
     * disarmed, the job released. */
    memset(&s, 0, sizeof(s));
    put(&s, &opt, 1);
    js.id = "job-1";
    js.workers = 2;
    js.optimizer = "momentum:lr=0.05,momentum=0.9";
    js.batch = 32;
    ts.name = "layer0.weight";
    ts.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ts.n_shape = 2;
    ts.shape = shape;
    ts.initializer = "xavier";
    ts.seed = 1;
    ts.partition_bytes = 256;
    rt.job = &js;
    rt.tensor = &ts;
    rt.fan_in = 40;
    rt.fan_out = 8;
    rt.map_epoch = 5;
    sreq(&s, "RegisterTensor", 0, &rt.base);
    sreq(&s, "RegisterTensor", 0, &rt.base);
    ts.name = "layer0.bias";
    ts.n_shape = 1;
    ts.initializer = "zeros";
    ts.partition_auto = true;
    rt.tensor_id = 1;
    sreq(&s, "RegisterTensor", 0, &rt.base);
    sreq(&s, "ShardStatus", 0, &ss.base);
    ss.map_epoch = 5;
    sreq(&s, "ShardStatus", 0, &ss.base);
    pd.job = "job-1";
    sreq(&s, "PartitionDigests", 0, &pd.base);
    as.job = "job-1";
    sreq(&s, "ArmSnapshot", 1, &as.base);
    ws.job = "job-1";
    ws.wait_ms = 10;
    sreq(&s, "WriteSnapshot", 1, &ws.base);
    as.disarm = true;
    sreq(&s, "ArmSnapshot", 1, &as.base);
    rj.job = "job-1";
    sreq(&s, "ReleaseJob", 1, &rj.base);
    sreq(&s, "ReleaseJob", 0, &rj.base);
    sreq(&s, "ShardStatus", 0, &ss.base);
    save("corpus-shard_rpc", "register-snapshot-release", &s);

    /* Modes and their limits: an ssp job, a reduce job, a tensor over the memory budget, the
     * same id with another shape; a rollback checked, fenced (no store) and reopened; a
     * join's hold and move (no store). */
    memset(&s, 0, sizeof(s));
    put(&s, &opt, 1);
    js.id = "job-s";
    js.mode = TESSERA__V1__TRAIN_MODE__TRAIN_MODE_SSP;
    js.staleness = 2;
    js.optimizer = "sgd:lr=0.1";
    ts.name = "w";
    ts.n_shape = 2;
    ts.partition_auto = false;
    ts.placement_salt = 7;
    rt.tensor_id = 0;
    rt.sync_every = 2;
    sreq(&s, "RegisterTensor", 0, &rt.base);
    js.id = "job-r";
    js.mode = TESSERA__V1__TRAIN_MODE__TRAIN_MODE_REDUCE;
    js.staleness = 0;
    js.exact = true;
    sreq(&s, "RegisterTensor", 0, &rt.base);
    shape[0] = 1 << 20;
    ts.partition_bytes = 1 << 20;
    rt.tensor_id = 1;
    ts.name = "huge";
    sreq(&s, "RegisterTensor", 0, &rt.base);
    shape[0] = 9;
    ts.name = "w";
    rt.tensor_id = 0;
    sreq(&s, "RegisterTensor", 0, &rt.base);
    rb.job = "job-r";
    rb.snapshot_id = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    rb.step = 4;
    rb.generation = 1;
    rb.map_epoch = 5;
    rb.check = true;
    sreq(&s, "RollbackJob", 1, &rb.base);
    rb.check = false;
    sreq(&s, "RollbackJob", 1, &rb.base);
    rb.open = true;
    sreq(&s, "RollbackJob", 1, &rb.base);
    /* A join's hold and move: armed with the tables held, moved (no store), disarmed. */
    as.job = "job-s";
    as.disarm = false;
    as.step = 3;
    as.hold_tables = true;
    sreq(&s, "ArmSnapshot", 1, &as.base);
    mt.job = "job-s";
    mt.snapshot_id = rb.snapshot_id;
    mt.step = 3;
    mt.map_epoch = 5;
    sreq(&s, "MoveTables", 1, &mt.base);
    mt.map_epoch = 0;
    sreq(&s, "MoveTables", 1, &mt.base);
    as.disarm = true;
    sreq(&s, "ArmSnapshot", 1, &as.base);
    pd.job = "job-s";
    sreq(&s, "PartitionDigests", 0, &pd.base);
    sreq(&s, "ShardStatus", 0, &ss.base);
    save("corpus-shard_rpc", "modes-limits-rollback", &s);
}

/* ---- fuzz_http: the options byte, then a request (built, or raw) ---- */

static void http(const char *name, uint8_t opt, const char *req)
{
    struct seed s = { .n = 0 };

    put(&s, &opt, 1);
    put(&s, req, strlen(req));
    save("corpus-http", name, &s);
}

static void https(void)
{
    http("get-metrics", 0, "GET\n/metrics\nHost: 127.0.0.1\nAccept: text/plain\n");
    http("head-metrics", 0, "HEAD\n/metrics\nHost: 127.0.0.1\n");
    http("get-page", 0, "GET\n/\nHost: x\n");
    http("get-route-fails", 0, "GET\n/api/status?since=0\nHost: x\n");
    http("get-unknown", 0, "GET\n/metrics/../etc/passwd\nHost: x\n");
    http("get-query", 0, "GET\n/metrics?name[]=a&x=%00%ff\nHost: x\n");
    http("post-body", 2, "POST\n/metrics\nHost: x\nContent-Type: text/plain\n\nhello");
    http("delete", 0, "DELETE\n/\nHost: x\n");
    http("expect-continue", 2, "PUT\n/metrics\nHost: x\nExpect: 100-continue\n\n12345678");
    http("keepalive-pipelined", 0, "GET\n/metrics\nHost: x\nConnection: keep-alive\n\n"
         "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    http("huge-header", 0, "GET\n/metrics\nHost: x\n*\x50\n");
    http("huge-target", 0, "GET\n*\x48\nHost: x\n");
    http("raw-http10", 1, "GET /metrics HTTP/1.0\r\n\r\n");
    http("raw-no-version", 1, "GET /metrics\r\n\r\n");
    http("raw-chunked", 1, "POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
         "\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    http("raw-garbage", 1, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
}

/* ---- fuzz_rpc: the type's index, then the message ---- */

/* find, when not NULL: an edge case, byte `to` put at find's offset `at` in the message (bytes
 * no encoder writes: a NUL, invalid UTF-8). */
static void message(const char *name, const ProtobufCMessage *m, const char *find, size_t at,
                    uint8_t to)
{
    const ProtobufCMessageDescriptor *types[64];
    size_t n = fuzz_rpc_types(types, 64), len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(len ? len : 1);
    struct seed s = { .n = 0 };
    uint8_t idx;

    for (idx = 0; idx < n && types[idx] != m->descriptor; idx++)
        ;
    if (idx == n || !b) {
        fprintf(stderr, "fuzz_seeds: %s is not a request type\n", m->descriptor->name);
        exit(1);
    }
    protobuf_c_message_pack(m, b);
    if (find) {
        uint8_t *p = memmem(b, len, find, strlen(find));
        if (!p || at >= strlen(find))
            exit(1);
        p[at] = to;
    }
    put(&s, &idx, 1);
    put(&s, b, len);
    save("corpus-rpc", name, &s);
    free(b);
}

static void rpcs(void)
{
    Tessera__V1__DataPlaneEndpoint ep[2] = { TESSERA__V1__DATA_PLANE_ENDPOINT__INIT,
                                             TESSERA__V1__DATA_PLANE_ENDPOINT__INIT };
    Tessera__V1__DataPlaneEndpoint *eps[2] = { &ep[0], &ep[1] };
    Tessera__V1__RegisterShardRequest rs = TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
    Tessera__V1__RegisterWorkerRequest rw = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    Tessera__V1__HeartbeatRequest hb = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    Tessera__V1__DeregisterRequest dr = TESSERA__V1__DEREGISTER_REQUEST__INIT;
    Tessera__V1__DataChecksum dc[2] = { TESSERA__V1__DATA_CHECKSUM__INIT,
                                        TESSERA__V1__DATA_CHECKSUM__INIT };
    Tessera__V1__DataChecksum *dcs[2] = { &dc[0], &dc[1] };
    Tessera__V1__CheckDataRequest cd = TESSERA__V1__CHECK_DATA_REQUEST__INIT;
    Tessera__V1__CompareRequest cmp = TESSERA__V1__COMPARE_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckRequest hc = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    static uint8_t sha[2][32] = { { 1, 2, 3 }, { 4, 5, 6 } };

    ep[0].transport = "tcp";
    ep[0].address = (ProtobufCBinaryData){ 15, (uint8_t *)"127.0.0.1:40001" };
    ep[1].transport = "shm";
    ep[1].address = (ProtobufCBinaryData){ 12, (uint8_t *)"boot:ns:name" };
    rs.addr = "127.0.0.1:7001";
    rs.instance = "shard-7001-1";
    rs.lease_ms = 3000;
    rs.n_data_planes = 2;
    rs.data_planes = eps;
    message("register-shard", &rs.base, NULL, 0, 0);
    message("register-shard-nul", &rs.base, "7001-1", 4, 0);

    rw.host = "127.0.0.1";
    rw.pid = 4242;
    rw.instance = "worker-4242";
    rw.role = "verify";
    rw.addr = "127.0.0.1:7100";
    rw.job = "job-1";
    rw.workers = 2;
    message("register-worker", &rw.base, NULL, 0, 0);
    message("register-worker-utf8", &rw.base, "worker-4242", 8, 0xc3);

    hb.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    hb.id = 1;
    hb.known_epoch = 2;
    hb.clock = 10;
    hb.loss_scale = 1024;
    message("heartbeat-worker", &hb.base, NULL, 0, 0);
    hb.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD;
    hb.moves_epoch = 2;
    message("heartbeat-shard", &hb.base, NULL, 0, 0);

    dr.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    dr.id = 1;
    dr.reason = "finished";
    message("deregister", &dr.base, NULL, 0, 0);

    dc[0].name = "train[0:1000)";
    dc[0].sha256 = (ProtobufCBinaryData){ 32, sha[0] };
    dc[0].file = "train-images-idx3-ubyte.gz";
    dc[1].name = "train[1000:2000)";
    dc[1].sha256 = (ProtobufCBinaryData){ 32, sha[1] };
    cd.job = "job-1";
    cd.n_checksums = 2;
    cd.checksums = dcs;
    message("check-data", &cd.base, NULL, 0, 0);

    cmp.a = "HEAD";
    cmp.b = "live";
    cmp.level = "bits";
    cmp.job = "job-1";
    message("compare", &cmp.base, NULL, 0, 0);

    hc.service = "tessera.v1.Master";
    message("health-check", &hc.base, NULL, 0, 0);
}

/* ---- fuzz_codec: encoding, n (little-endian u16), the payload ---- */

static void codec(const char *name, unsigned enc, uint16_t n, const void *p, size_t len)
{
    struct seed s = { .n = 0 };
    uint8_t hdr[3] = { (uint8_t)enc, (uint8_t)n, (uint8_t)(n >> 8) };

    put(&s, hdr, 3);
    put(&s, p, len);
    save("corpus-codec", name, &s);
}

static void codecs(void)
{
    static const char *const specs[] = { "none", "fp16", "bf16", "int8", "topk:0.25" };
    uint8_t out[1024];
    float g[100];
    size_t bytes;
    uint32_t bad[5] = { 2, 5, 3, 0x3f800000, 0x40000000 }; /* k 2, indices 5 3, 1.0f 2.0f */

    for (int i = 0; i < 100; i++)
        g[i] = (i % 7 - 3) * 0.37f + (i == 42 ? 70000.0f : 0);
    for (unsigned k = 0; k < 5; k++) {
        struct ts_codec c;
        char name[32];

        if (ts_codec_parse(specs[k], &c, NULL))
            exit(1);
        ts_codec_encode(&c, g, 100, 1.0f, NULL, out, &bytes);
        snprintf(name, sizeof(name), "%s-100", k == 4 ? "topk" : specs[k]);
        codec(name, c.kind, 100, out, bytes);
    }
    /* Edge cases: TOPK indices out of order, an index past n, n = 0, an encoding past TOPK. */
    codec("topk-unordered", TS_CODEC_TOPK, 8, bad, sizeof(bad));
    bad[1] = 2, bad[2] = 9;
    codec("topk-past-n", TS_CODEC_TOPK, 8, bad, sizeof(bad));
    memset(out, 0, 4);
    codec("topk-empty", TS_CODEC_TOPK, 0, out, 4);
    codec("enc-5", 5, 4, out, 16);
}

/* ---- fuzz_handshake: side byte, the ACK's flags (4 bytes), the peer's payload ---- */

static void handshake(const char *name, uint8_t side, uint32_t flags, const void *p, size_t n)
{
    struct seed s = { .n = 0 };

    put(&s, &side, 1);
    put(&s, &flags, 4);
    put(&s, p, n);
    save("corpus-handshake", name, &s);
}

static void handshakes(void)
{
    struct ts_dp_hs hs;
    uint8_t ack[TS_DP_ACK_LEN], proof[TS_DP_TAG_LEN];

    handshake_facts(&hs);
    ts_dp_proof(&hs, true, proof);
    handshake("accept-good-mac", 1, 1, proof, sizeof(proof));
    handshake("accept-good", 1, 0, proof, sizeof(proof));
    proof[7] ^= 1;
    handshake("accept-flipped", 1, 1, proof, sizeof(proof));
    handshake("accept-short", 1, 0, proof, 31);
    memcpy(ack, hs.ns, TS_DP_NONCE_LEN);
    ts_dp_proof(&hs, false, ack + TS_DP_NONCE_LEN);
    handshake("initiate-good-mac", 0, TS_ACK_AUTH | TS_ACK_MAC, ack, sizeof(ack));
    handshake("initiate-good", 0, TS_ACK_AUTH, ack, sizeof(ack));
    handshake("initiate-no-auth-flag", 0, TS_ACK_MAC, ack, sizeof(ack));
    handshake("initiate-long", 0, TS_ACK_AUTH, ack, sizeof(ack) - 1);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR (tests/fuzz)\n");
        return 2;
    }
    root = argv[1];
    frames();
    rpcs();
    codecs();
    handshakes();
    dataplanes();
    shms();
    masters();
    shard_rpcs();
    https();
    return 0;
}
