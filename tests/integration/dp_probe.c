/* dp_probe.c - a hostile data-plane client for test_tls.py (docs/security.md, "The data
 * plane"): it speaks the frame format through the library, so that what the shard refuses is
 * refused for the handshake's sake, not for a malformed frame.
 *
 *   dp_probe ADDR JOB KEYHEX MODE
 *
 * ADDR: a shard's tcp data-plane address (HOST:PORT), or its rdma one as rdma:HOST:PORT
 * (tests/rdma/test_rdma_train.py); JOB: a job on it; KEYHEX: the cluster's
 * data-plane key (64 hex digits; the test reads it from the master's state). MODE:
 *   good         the handshake with worker 1's key, then a HELLO again (MAC'd): ACK expected
 *   nohandshake  a PUSH with no HELLO at all
 *   noauth       a HELLO without the handshake
 *   replay       a good handshake, recorded; then its HELLO (same nonce) and AUTH again
 *   badmac       a good handshake, then a PUSH with one payload bit flipped after its MAC
 *                was made (the fault wrapper of lib/transport/fault.h)
 *   wrongkey     the handshake with a key that is not worker 1's
 *   copy         a good handshake, then a ROWS_COPY (a head's copy of a table push, which
 *                only a chain link, keyed with the chain key, may send)
 * Prints one line: "MODE ok", or "MODE refused CODE: message" when the shard answered with
 * an ERROR, then "closed" if the shard hung up afterwards. Exit 0 when the exchange went as
 * it did (the test judges), 2 on a usage error, 1 when the probe itself failed.
 *
 * Without keys (KEYHEX "-", a plaintext cluster; tests/security):
 *   forge MEMBER RANK STEP ENC TENSORS   a HELLO naming worker MEMBER, then a push of rank
 *                RANK's step STEP (encoding ENC: 5 exact, 0 float) to partition 0 of each of
 *                tensors 0..TENSORS-1, of values a step would take, its length learned
 *                from the shard's refusal of a first, empty one; one line per tensor:
 *                "tensor T counted" or "tensor T refused CODE: message"
 *   oversize     a HELLO whose header says 256 MiB, then as much of the payload as the shard
 *                reads: refused on its header, before the shard takes the bytes in */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/fault.h"
#include "transport/frame.h"
#include "transport/mac.h"
#include "util/err.h"
#include "util/names.h"

#define WAIT_MS 10000
#define PROBE_MEMBER 1   /* the worker id the probe claims (and, with the key, proves) */

/* A tcp connection to addr; with flip, its third send (HELLO, AUTH, then the PUSH) gets one
 * payload bit flipped on the way. */
static struct ts_conn *dial(const char *addr, bool flip)
{
    struct ts_fault_cfg cfg = { .kind = TS_FAULT_CORRUPT, .nth = 3,
                                .offset = TS_FRAME_HDR_LEN + TS_FRAME_MAC_LEN + 100 };
    const char *tp = strncmp(addr, "rdma:", 5) == 0 ? "rdma" : "tcp";
    struct ts_blob b;
    struct ts_conn *c = NULL, *w = NULL;
    struct ts_err err = { 0 };

    addr += strcmp(tp, "rdma") == 0 ? 5 : 0;
    b.len = strlen(addr);
    memcpy(b.data, addr, b.len);
    if (!ts_transport_find(tp)) {
        fprintf(stderr, "dp_probe: no %s transport in this build\n", tp);
        exit(1);
    }
    if (ts_tp_connect(ts_transport_find(tp), &b, 5000, &c, &err) ||
        (flip && ts_fault_wrap(c, &cfg, &w, &err))) {
        fprintf(stderr, "dp_probe: connect %s: %s\n", addr, err.msg);
        exit(1);
    }
    return flip ? w : c;
}

/* Reads one reply; prints what the shard said and whether it then hung up. */
static void verdict(struct ts_conn *c, const char *mode, uint16_t want)
{
    static char buf[4096];
    struct ts_frame_hdr h;
    struct ts_err err = { 0 };
    ts_status st = ts_frame_recv(c, &h, buf, sizeof(buf) - 1, WAIT_MS, &err);

    if (st) {
        printf("%s %s: %s\n", mode, st == TS_EUNAVAIL ? "closed" : "failed", err.msg);
        return;
    }
    if (h.type == TS_FRAME_ERROR) {
        buf[h.len] = '\0';
        printf("%s refused %s: %s", mode, ts_status_name(ts_frame_error_status(&h)), buf);
        ts_err_clear(&err);
        st = ts_frame_recv(c, &h, buf, sizeof(buf) - 1, WAIT_MS, &err);
        printf("%s\n", st == TS_EUNAVAIL ? "; closed" : "; still open");
        return;
    }
    printf("%s %s (frame type %u)\n", mode, h.type == want ? "ok" : "unexpected", h.type);
}

/* HELLO with the handshake, under key; the ACK checked, AUTH sent. *hs keeps the nonces and
 * auth the AUTH payload made (for the replay). */
static ts_status handshake(struct ts_conn *c, const char *job, const uint8_t key[32],
                           struct ts_dp_hs *hs, struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .flags = TS_HELLO_AUTH }, ack;
    uint8_t payload[TS_JOB_ID_MAX + TS_DP_NONCE_LEN];
    char reply[4096];
    size_t jl = strlen(job);
    ts_status st;

    uint8_t jk[32];

    ts_dp_job_key(key, job, jk);
    ts_dp_member_key(jk, PROBE_MEMBER, hs->key);
    h.tensor = hs->member = PROBE_MEMBER;
    hs->job = job;
    if ((st = ts_dp_nonce(hs->nc, err)))
        return st;
    memcpy(payload, job, jl);
    memcpy(payload + jl, hs->nc, TS_DP_NONCE_LEN);
    if ((st = ts_frame_send(c, &h, payload, jl + TS_DP_NONCE_LEN, err)) ||
        (st = ts_frame_recv(c, &ack, reply, sizeof(reply), WAIT_MS, err)))
        return st;
    if (ack.type == TS_FRAME_ERROR) {
        reply[ack.len < sizeof(reply) ? ack.len : sizeof(reply) - 1] = '\0';
        return ts_err_set(err, ts_frame_error_status(&ack), "%s", reply);
    }
    return ts_dp_initiate_finish(c, hs, &ack, reply, err);
}

/* forge: pushes rank's step to partition 0 of tensors [0, n) on c, after a HELLO as member. */
static int forge(struct ts_conn *c, const char *job, char **arg)
{
    static char buf[4096];
    uint32_t member = (uint32_t)strtoul(arg[0], NULL, 10);
    struct ts_frame_hdr hello = { .type = TS_FRAME_HELLO, .tensor = member }, h;
    struct ts_err err = { 0 };
    long n = strtol(arg[4], NULL, 10);

    if (ts_frame_send(c, &hello, job, strlen(job), &err) ||
        ts_frame_recv(c, &h, buf, sizeof(buf) - 1, WAIT_MS, &err) || h.type != TS_FRAME_ACK) {
        buf[err.msg[0] ? 0 : h.len] = '\0';
        printf("forge hello refused: %s\n", err.msg[0] ? err.msg : buf);
        return 0;
    }
    for (long t = 0; t < n; t++) {
        struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = (uint32_t)t,
                                     .rank = (uint32_t)strtoul(arg[1], NULL, 10),
                                     .step = strtoull(arg[2], NULL, 10), .dtype = 1,
                                     .encoding = (uint16_t)strtoul(arg[3], NULL, 10) };
        unsigned long long want = 0;
        char *payload = NULL, *at;
        ts_status st;

        /* A push with no payload is refused naming the length: "... want N (M elements)". */
        if (ts_frame_send(c, &push, NULL, 0, &err) ||
            ts_frame_recv(c, &h, buf, sizeof(buf) - 1, WAIT_MS, &err))
            goto gone;
        buf[h.len] = '\0';
        if (h.type != TS_FRAME_ERROR || !(at = strstr(buf, "want ")) ||
            sscanf(at, "want %llu", &want) != 1 || !want || !(payload = malloc(want))) {
            printf("tensor %ld refused %s: %s\n", t, ts_status_name(ts_frame_error_status(&h)),
                   buf);
            continue;
        }
        /* Values a step would take (exact: fixed point of about 2^-12; float: 1e-3): a
         * forgery the shard would apply, not one its range checks refuse. */
        for (unsigned long long i = 0; i + 8 <= want && push.encoding == 5; i += 8)
            memcpy(payload + i, &(int64_t){ (int64_t)1 << 20 }, 8);
        for (unsigned long long i = 0; i + 4 <= want && push.encoding != 5; i += 4)
            memcpy(payload + i, &(float){ 1e-3f }, 4);
        st = ts_frame_send(c, &push, payload, want, &err);
        free(payload);
        if (st || ts_frame_recv(c, &h, buf, sizeof(buf) - 1, WAIT_MS, &err))
            goto gone;
        buf[h.len] = '\0';
        if (h.type == TS_FRAME_ACK)
            printf("tensor %ld counted\n", t);
        else
            printf("tensor %ld refused %s: %s\n", t, ts_status_name(ts_frame_error_status(&h)),
                   buf);
    }
    return 0;
gone:
    printf("forge closed: %s\n", err.msg);
    return 0;
}

/* oversize: a HELLO header claiming 256 MiB, then the payload for as long as the shard reads. */
static int oversize(struct ts_conn *c)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_HELLO };
    struct ts_err err = { 0 };
    ts_status st;

    /* One send of the whole frame: the transport writes until the shard hangs up. */
    {
        char *big = malloc(TS_FRAME_MAX);
        if (!big)
            return 1;
        memset(big, 'x', TS_FRAME_MAX);
        st = ts_frame_send(c, &h, big, TS_FRAME_MAX, &err);
        free(big);
    }
    if (st)
        printf("oversize cut: %s\n", err.msg);
    else
        verdict(c, "oversize", TS_FRAME_ACK);
    return 0;
}

static int hex_key(const char *s, uint8_t key[32])
{
    if (strlen(s) != 64)
        return -1;
    for (int i = 0; i < 32; i++)
        if (sscanf(s + 2 * i, "%2hhx", &key[i]) != 1)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static uint8_t grad[4096];
    struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = 0, .partition = 0,
                                 .step = 0, .dtype = 0 };
    struct ts_frame_hdr hello = { .type = TS_FRAME_HELLO, .tensor = PROBE_MEMBER };
    struct ts_err err = { 0 };
    struct ts_dp_hs hs = { 0 };
    uint8_t key[32], other[32];
    const char *mode;
    struct ts_conn *c;

    if (argc == 10 && !strcmp(argv[3], "-") && !strcmp(argv[4], "forge")) {
        c = dial(argv[1], false);
        return forge(c, argv[2], argv + 5);
    }
    if (argc == 5 && !strcmp(argv[3], "-") && !strcmp(argv[4], "oversize")) {
        c = dial(argv[1], false);
        return oversize(c);
    }
    if (argc != 5 || hex_key(argv[3], key)) {
        fprintf(stderr, "usage: dp_probe ADDR JOB KEYHEX(64) good|nohandshake|noauth|replay|"
                        "badmac|wrongkey|copy\n"
                        "       dp_probe ADDR JOB - forge MEMBER RANK STEP ENC TENSORS\n"
                        "       dp_probe ADDR JOB - oversize\n");
        return 2;
    }
    mode = argv[4];
    memset(grad, 0x7f, sizeof(grad));   /* huge gradients, were they applied */
    memset(other, 0x42, sizeof(other));
    c = dial(argv[1], !strcmp(mode, "badmac"));
    if (!strcmp(mode, "nohandshake")) {
        if (ts_frame_send(c, &push, grad, sizeof(grad), &err))
            goto fail;
        verdict(c, mode, TS_FRAME_ACK);
    } else if (!strcmp(mode, "noauth")) {
        if (ts_frame_send(c, &hello, argv[2], strlen(argv[2]), &err))
            goto fail;
        verdict(c, mode, TS_FRAME_ACK);
    } else if (!strcmp(mode, "wrongkey")) {
        ts_status st = handshake(c, argv[2], other, &hs, &err);
        if (st == TS_OK)
            verdict(c, mode, TS_FRAME_ACK);   /* not reached: the shard's proof fails here */
        else
            printf("%s refused %s: %s\n", mode, ts_status_name(st), err.msg);
    } else if (!strcmp(mode, "good") || !strcmp(mode, "badmac") || !strcmp(mode, "replay") ||
               !strcmp(mode, "copy")) {
        if (handshake(c, argv[2], key, &hs, &err))
            goto fail;
        if (!strcmp(mode, "copy")) {
            struct ts_frame_hdr copy = { .type = TS_FRAME_ROWS_COPY, .step = 0, .dtype = 1,
                                         .flags = TS_PUSH_RETRY };
            uint8_t head[8] = { 2 };   /* "from shard 2", no rows */
            if (ts_frame_send(c, &copy, head, sizeof(head), &err))
                goto fail;
            verdict(c, mode, TS_FRAME_ACK);
        } else if (!strcmp(mode, "good")) {
            if (ts_frame_send(c, &hello, argv[2], strlen(argv[2]), &err))
                goto fail;
            verdict(c, mode, TS_FRAME_ACK);
        } else if (!strcmp(mode, "badmac")) {
            if (!c->mac) {
                fprintf(stderr, "dp_probe: the shard did not turn MACs on (TESSERA_DATA_MAC?)\n");
                return 1;
            }
            if (ts_frame_send(c, &push, grad, sizeof(grad), &err))
                goto fail;
            verdict(c, mode, TS_FRAME_ACK);
        } else {   /* replay: the same HELLO and the recorded AUTH on a new connection */
            struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .flags = TS_HELLO_AUTH,
                                      .tensor = PROBE_MEMBER }, ack;
            struct ts_frame_hdr auth = { .type = TS_FRAME_AUTH };
            uint8_t payload[TS_JOB_ID_MAX + TS_DP_NONCE_LEN], old_ns[TS_DP_NONCE_LEN];
            uint8_t tag[TS_DP_TAG_LEN];
            char reply[4096];
            size_t jl = strlen(argv[2]);

            /* the AUTH the first connection sent: the initiator's proof over its nonces */
            memcpy(old_ns, hs.ns, sizeof(old_ns));
            ts_tp_close(c);
            c = dial(argv[1], false);
            memcpy(payload, argv[2], jl);
            memcpy(payload + jl, hs.nc, TS_DP_NONCE_LEN);
            if (ts_frame_send(c, &h, payload, jl + TS_DP_NONCE_LEN, &err) ||
                ts_frame_recv(c, &ack, reply, sizeof(reply), WAIT_MS, &err))
                goto fail;
            if (ack.type != TS_FRAME_ACK || ack.len != TS_DP_ACK_LEN) {
                printf("%s unexpected (frame type %u)\n", mode, ack.type);
                return 0;
            }
            printf("%s: the shard's nonce is %s\n", mode,
                   memcmp(reply, old_ns, sizeof(old_ns)) ? "new" : "the same as before");
            /* the AUTH payload the first connection sent, as an eavesdropper recorded it */
            ts_dp_proof(&hs, true, tag);
            if (ts_frame_send(c, &auth, tag, sizeof(tag), &err))
                goto fail;
            verdict(c, mode, TS_FRAME_ACK);
        }
    } else {
        fprintf(stderr, "dp_probe: unknown mode %s\n", mode);
        return 2;
    }
    ts_tp_close(c);
    return 0;
fail:
    fprintf(stderr, "dp_probe %s: %s\n", mode, err.msg);
    return 1;
}
