/* frame.h - data-plane frames: a fixed little-endian header and a checksummed payload.
 *
 * Header (TS_FRAME_HDR_LEN bytes on the wire, little-endian): magic "TSF1", version, type,
 * tensor id, partition, step, dtype, encoding, rank, flags, payload length, XXH3-64 of the
 * payload, and XXH3-64 (low 32 bits) of the header's other bytes, so that a corrupted field is
 * caught, not only a corrupted payload. ts_frame_recv refuses (and counts in the connection's
 * frames_refused) a frame whose magic, version, type, header check, length (over the caller's
 * capacity or TS_FRAME_MAX) or payload checksum is wrong: TS_ECORRUPT, with nothing returned.
 * The length is checked before a payload byte is read. A frame cut short by a hang-up (torn)
 * is TS_EUNAVAIL and also counted as refused. After a refused frame the byte stream cannot be
 * trusted: close the connection. The wire layout is in frame.c and docs/transport.md.
 *
 * Payload hashes are skipped on a host-local connection (transport.h: shm),
 * unless TESSERA_FRAME_HASH=always: the header then says "unhashed" (a bit its header check
 * covers), and a receiver accepts such a frame only where its own local_in is set.
 * A torn frame is still refused: its bytes never all arrive (docs/transport.md, "Integrity
 * on one host").
 *
 * Alignment: after a payload whose length is not a multiple of 8, the sender puts that many
 * zero bytes (1..7) in front of its next header, and the receiver skips them (refusing the
 * frame if they are not zero). Every header and payload then starts at a multiple of 8 in the
 * byte stream, so a payload shown in place (ts_frame_recv_view on the shm ring, whose start is
 * page-aligned) may be read as floats or int64s whatever frames came before it: an odd-length
 * HELLO or an fp16 push no longer misaligns every payload after it.
 * Ownership: payload buffers are the caller's. Threads: as the connection's. */
#ifndef TS_TRANSPORT_FRAME_H
#define TS_TRANSPORT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "transport/transport.h"
#include "util/hook.h"

#define TS_FRAME_MAGIC 0x31465354u   /* "TSF1" little-endian */
#define TS_FRAME_VERSION 1
#define TS_FRAME_HDR_LEN 64
#define TS_FRAME_MAX (256u << 20)    /* largest payload accepted */

enum ts_frame_type {
    TS_FRAME_HELLO = 1,     /* worker -> shard: rank in `rank`, job id as payload; flags
                             * TS_HELLO_*; an elastic worker's member id in `tensor` */
    TS_FRAME_PUSH = 2,      /* gradient for (tensor, partition, step) */
    TS_FRAME_PULL = 3,      /* ask for (tensor, partition) at version `step` */
    TS_FRAME_PARAMS = 4,    /* parameters answering a PULL; `step` is their version */
    TS_FRAME_ACK = 5,       /* a PUSH was applied to the aggregation */
    TS_FRAME_ERROR = 6,     /* `flags` holds a ts_status, the payload its message */
    /* Shared regions (region.h), on connections that can pass descriptors: */
    TS_FRAME_SHARE = 7,     /* a region of `tensor` (flags TS_SHARE_*) was passed beside the
                             * stream (ts_tp_send_fd, before this frame); no payload */
    TS_FRAME_MAP = 8,       /* worker -> shard: share `tensor`'s parameters (a SHARE answers) */
    /* Replication (docs/replication.md), on a connection from a shard to the next one in a
     * partition's chain (its HELLO names the job): */
    TS_FRAME_IMAGE = 9,     /* the partition's image (ts_part_image) at version `step`, from
                             * shard `rank`, the one before in the chain; ACK once this shard
                             * and the rest of the chain hold it */
    TS_FRAME_BYE = 10,      /* worker -> shard, no reply: closing on purpose, not a death
                             * (elastic jobs, docs/elastic.md) */
    TS_FRAME_SEED = 11,     /* worker -> shard, after a failover in a reduce job: rank `rank`
                             * holds version `step` of (tensor, partition), its values as
                             * payload (none: version 0); flags TS_SEED_*; ACK (docs/
                             * replication.md, "Reduce jobs that lose every copy") */
    TS_FRAME_AUTH = 12,     /* initiator -> acceptor: the last step of the handshake (auth.h);
                             * no reply */
    /* Sparse tables (docs/embeddings.md, "Rows on the wire"); `tensor` is the table id. */
    TS_FRAME_ROWS_PUSH = 13, /* worker -> shard: rank `rank`'s push of step `step`: `partition`
                              * ids (8 bytes LE each, strictly ascending), then their gradients
                              * (dim int64 or float32 a row, `encoding`); an ACK answers */
    TS_FRAME_ROWS_PULL = 14, /* worker -> shard: the rows of `partition` ids (the payload) at
                              * version `step`; a ROWS answers */
    TS_FRAME_ROWS = 15,      /* shard -> worker: rows (dim float32 each); answering a SCAN,
                              * `partition` ids then their rows, `step` the rows the table has */
    TS_FRAME_ROWS_SCAN = 16, /* worker -> shard: the next at most `partition` rows that exist,
                              * in ascending id, at version `step` (TS_SCAN_FIRST: from the
                              * first); for fingerprints */
    TS_FRAME_ROWS_COPY = 17, /* head -> follower, on a chain link: rank `rank`'s push of step
                              * `step` as the head took it, the part the follower holds copies
                              * of: the head's shard id and its sweep plan of the step (4
                              * bytes LE each; ts_table_sweep_plan, 0: none), then as
                              * ROWS_PUSH; an ACK once the copy has it
                              * (services/shard/rowcopy.h) */
    TS_FRAME_ROWS_PREFETCH = 18, /* worker -> shard, no reply: `partition` ids (8 bytes LE
                                  * each) the worker's next batches will pull; a shard with a
                                  * disk tier reads them into memory (a hint: never refused) */
    TS_FRAME_TYPE_MAX = 18,
};

/* HELLO flags; a HELLO's `step` is the worker's shard map epoch (0: not said). */
#define TS_HELLO_ELASTIC 0x1u   /* the worker is elastic: a hang-up without BYE is its death */
#define TS_HELLO_AUTH 0x2u      /* a handshake (auth.h): a 16-byte nonce follows the job id */
#define TS_HELLO_CHAIN 0x4u     /* from the shard before this one in a chain, keyed as such */
/* ACK flags (the ACK of a HELLO). */
#define TS_ACK_AUTH 0x1u        /* the payload is the acceptor's nonce and proof (auth.h) */
#define TS_ACK_MAC 0x2u         /* from the AUTH on, frames each way carry MACs (mac.h) */
/* SHARE flags: what the region holds. */
#define TS_SHARE_GRAD 0x1u      /* worker -> shard: the worker's gradient buffer of the tensor */
#define TS_SHARE_PARAMS 0x2u    /* shard -> worker, or shard -> the next shard of a chain: the
                                 * tensor's parameters, at their offsets */
/* IMAGE flags. */
#define TS_IMAGE_REGION 0x1u    /* the values are not in the payload: read them from the
                                 * sender's parameters, SHAREd on this connection */

/* SEED flags. */
#define TS_SEED_OVERFLOW 0x1u   /* the version was a skipped step (its pull said so) */

/* ROWS_SCAN flags. */
#define TS_SCAN_FIRST 0x1u      /* begin a scan: the shard lists the rows that exist now */

/* PULL flags. */
#define TS_PULL_AFTER_PUSH 0x1u /* sent right behind this connection's pushes of the step */
#define TS_PULL_REGION 0x2u     /* answer with no payload: the values are in the shared region */
#define TS_PULL_ROUND 0x4u      /* the first pull of a round of requests on this connection */
#define TS_PULL_STATE 0x10u     /* the optimizer's state of version `step`, not the values:
                                 * PARAMS with TS_PARAMS_STATE | TS_PARAMS_UPDATES answers
                                 * (ts_part_read_state) */
#define TS_PULL_NORM 0x20u      /* clipping (lib/ps/part.h): the sum of squares of the averaged
                                 * gradient of held step `step`, not the values: PARAMS with
                                 * TS_PARAMS_NORM answers, its payload TS_NORM_LEN bytes */
#define TS_PULL_CODED 0x8u      /* compressed (docs/compression.md, "Pulls"): `encoding` is the
                                 * codec; the 16-byte payload is the token of the copy the
                                 * worker holds (0: none) and the top-k ratio (f64; else 0) */
/* PUSH flags: bits 0-7 hold the loss scale's exponent e + 128 (0: no scaling, e = 0); the
 * payload was multiplied by 2^e. */
#define TS_PUSH_SCALE(e) ((e) ? (uint32_t)((e) + 128) & 0xffu : 0u)
#define TS_PUSH_SCALE_EXP(flags) (((flags) & 0xffu) ? (int)((flags) & 0xffu) - 128 : 0)
#define TS_PUSH_REGION 0x100u   /* no payload: the gradient is in the worker's shared region */
#define TS_PUSH_RETRY 0x200u    /* sent again after a failover: a duplicate is acknowledged */
#define TS_PUSH_ROUND 0x400u    /* the first push of a step on this connection: what the shard
                                 * remembers of the last step's requests (a refused push, a
                                 * slot change told) ends here, not at a push after a pull, as
                                 * a pipelined step sends each pull right behind its push */
#define TS_PUSH_SLOTS 0x800u    /* a combined push (docs/scheduler.md): the payload begins with
                                 * 8 bytes, the little-endian mask of the slots whose gradients
                                 * it sums (bit k: slot k; `rank` is the lowest), and the
                                 * gradient follows; never with TS_PUSH_REGION */
#define TS_PUSH_SLOTS_LEN 8     /* the mask's bytes */
#define TS_PUSH_NO_DECAY 0x2000u /* no weight decay for the partition this step (a torch param
                                 * group with weight_decay 0) */
#define TS_PUSH_STATE 0x4000u   /* with ASSIGN: the payload's values are followed by the
                                 * partition's optimizer state (lib/ps/part.h, ts_push.state) */
#define TS_PUSH_ASSIGN 0x1000u  /* an assignment (lib/ps/part.h, ts_push.assign): the payload is
                                 * the partition's new float32 values, or none (this rank takes
                                 * part without values); never with TS_PUSH_REGION or SLOTS */
#define TS_PUSH_HOLD 0x10000u   /* a gradient of a step clipped by global norm: summed, not
                                 * applied until every rank's APPLY (lib/ps/part.h) */
#define TS_PUSH_APPLY 0x20000u  /* a rank's word that its held step may be applied: the payload
                                 * is the clipping coefficient, TS_COEF_LEN bytes (a float32,
                                 * little-endian); no other payload, never with REGION, SLOTS
                                 * or ASSIGN */
#define TS_COEF_LEN 4
#define TS_PUSH_UPDATES 0x8000u /* with ASSIGN and values (and STATE or not): the payload ends
                                 * with TS_UPDATES_LEN more bytes, the little-endian optimizer
                                 * update count the partition takes (ts_push.has_updates) */
#define TS_UPDATES_LEN 8        /* an update count's bytes, in a PUSH or a PARAMS payload */
/* PARAMS flags; a PARAMS frame's `rank` field carries the staleness the pull saw (SSP/ASP). */
#define TS_PARAMS_OVERFLOW 0x1u /* a step was skipped for a non-finite sum since the last pull */
#define TS_PARAMS_REGION 0x2u   /* no payload: read the values from the shared region */
#define TS_PARAMS_STATE 0x8u    /* the reply to a TS_PULL_STATE pull: the state, no values */
#define TS_PARAMS_UPDATES 0x10u /* with STATE: the state is followed by TS_UPDATES_LEN bytes,
                                 * the little-endian update count that goes with it */
#define TS_PARAMS_NORM 0x20u    /* the reply to a TS_PULL_NORM pull: a double, little-endian */
#define TS_NORM_LEN 8
#define TS_PARAMS_CODED 0x4u    /* the reply to a TS_PULL_CODED pull: the new copy's 8-byte
                                 * token, then the values in full (encoding 0) or the codec's
                                 * encoding of value - copy (encoding: the codec) */

/* An update count as TS_PUSH_UPDATES and TS_PARAMS_UPDATES carry it: TS_UPDATES_LEN bytes,
 * little-endian, at any alignment. */
static inline void ts_updates_put(uint8_t out[TS_UPDATES_LEN], uint64_t v)
{
    for (int k = 0; k < TS_UPDATES_LEN; k++)
        out[k] = (uint8_t)(v >> (8 * k));
}

static inline uint64_t ts_updates_get(const uint8_t in[TS_UPDATES_LEN])
{
    uint64_t v = 0;

    for (int k = TS_UPDATES_LEN - 1; k >= 0; k--)
        v = v << 8 | in[k];
    return v;
}

/* A norm (TS_PARAMS_NORM) and a clipping coefficient (TS_PUSH_APPLY) as their frames carry
 * them: the bits of a double and of a float, little-endian, at any alignment. */
static inline void ts_norm_put(uint8_t out[TS_NORM_LEN], double v)
{
    uint64_t u;

    memcpy(&u, &v, sizeof(u));
    ts_updates_put(out, u);
}

static inline double ts_norm_get(const uint8_t in[TS_NORM_LEN])
{
    uint64_t u = ts_updates_get(in);
    double v;

    memcpy(&v, &u, sizeof(v));
    return v;
}

static inline void ts_coef_put(uint8_t out[TS_COEF_LEN], float v)
{
    uint32_t u;

    memcpy(&u, &v, sizeof(u));
    for (int k = 0; k < TS_COEF_LEN; k++)
        out[k] = (uint8_t)(u >> (8 * k));
}

static inline float ts_coef_get(const uint8_t in[TS_COEF_LEN])
{
    uint32_t u = 0;
    float v;

    for (int k = TS_COEF_LEN - 1; k >= 0; k--)
        u = u << 8 | in[k];
    memcpy(&v, &u, sizeof(v));
    return v;
}

/* Why ts_frame_recv refused the last refused frame of a connection (ts_conn.refusal): for the
 * receiver's counts of refusals by reason. */
enum ts_frame_refusal {
    TS_FRAME_REFUSED_CORRUPT = 1,   /* a bad header, padding or payload checksum */
    TS_FRAME_REFUSED_MAC,           /* a MAC missing, unexpected or wrong */
    TS_FRAME_REFUSED_OVERSIZE,      /* longer than the receiver's buffer */
    TS_FRAME_REFUSED_TORN,          /* cut short by a hang-up or a stall */
};

struct ts_frame_hdr {
    uint16_t type;
    uint32_t tensor;
    uint32_t partition;
    uint64_t step;
    uint16_t dtype;
    uint16_t encoding;
    uint32_t rank;
    uint32_t flags;
    uint64_t len;           /* payload bytes; set by ts_frame_send */
    uint64_t checksum;      /* set by ts_frame_send, checked by ts_frame_recv */
    bool unhashed;          /* set by ts_frame_send: no payload hash (checksum 0) */
    bool mac;               /* set by ts_frame_send: a MAC follows the header (mac.h) */
    float lr;               /* PUSH: the step's learning rate for the partition (0: the job's);
                             * not checked here (lib/ps does); 0 in any other frame */
};

#if TS_TEST_HOOKS
/* A test hook (util/hook.h): the next frame this thread sends with a payload of 8 bytes or
 * more goes out with its whole header and the first half of its payload only, and then the
 * process kills itself (SIGKILL): a peer dying in the middle of a frame, its reader left
 * with part of the payload in its buffer (services/shard/testhooks.h, "torn"). */
void ts_frame_test_die_halfway(void);
#endif

/* Encodes h (len and checksum computed from payload) and sends header + payload with one
 * transport send; adds to c->bytes_out. TS_EINVAL, with nothing sent, for a type or length the
 * peer would refuse; the transport's status otherwise. */
ts_status ts_frame_send(struct ts_conn *c, struct ts_frame_hdr *h, const void *payload,
                        size_t len, struct ts_err *err) TS_MUST_CHECK;
/* Receives one frame: header into *h, payload into buf (cap bytes). ms bounds the wait for the
 * frame's first byte; the payload must follow within TS_TP_STALL_MS. TS_ECORRUPT for a refused
 * frame (see above); TS_ETIMEDOUT, TS_ECANCELLED (ts_tp_interrupt) or TS_EUNAVAIL (hung up)
 * when no frame began: nothing consumed, not counted. An interrupt that lands after the header
 * is held over to the next call, so a frame is never split. Counts c->frames_in, bytes_in and
 * frames_refused. */
ts_status ts_frame_recv(struct ts_conn *c, struct ts_frame_hdr *h, void *buf, size_t cap,
                        int ms, struct ts_err *err) TS_MUST_CHECK;

/* As ts_frame_send, with the payload in n pieces (struct iovec), sent where they lie: one
 * frame whose payload is the pieces one after another, with no copy to join them first. */
ts_status ts_frame_sendv(struct ts_conn *c, struct ts_frame_hdr *h, const struct iovec *pieces,
                         size_t n, struct ts_err *err) TS_MUST_CHECK;

/* As ts_frame_send, with sum the caller vouches is ts_frame_hash(payload, len) (computed once
 * for many sends of the same bytes: a shard's parameters of one version). Used only when the
 * connection wants a hash. */
ts_status ts_frame_send_hashed(struct ts_conn *c, struct ts_frame_hdr *h, const void *payload,
                               size_t len, uint64_t sum, struct ts_err *err) TS_MUST_CHECK;
/* Whether frames sent on c carry a payload hash (see above). */
bool ts_frame_wants_hash(const struct ts_conn *c);
uint64_t ts_frame_hash(const void *payload, size_t len);

/* ts_frame_recv, but where the connection can show the payload in place (c->view_max, the shm
 * ring) *payload points there, with no copy; otherwise the payload is received into buf (cap
 * bytes) and *payload is buf. A view stays valid until ts_frame_release(c), which must come
 * before the next receive on c (ts_frame_recv and ts_frame_recv_view release a view still
 * held). *payload is set only on TS_OK. */
ts_status ts_frame_recv_view(struct ts_conn *c, struct ts_frame_hdr *h, void *buf, size_t cap,
                             int ms, const void **payload, struct ts_err *err) TS_MUST_CHECK;
/* Gives back the view of the last ts_frame_recv_view, if any. Receiver thread. */
void ts_frame_release(struct ts_conn *c);

/* The status an ERROR frame carries in its flags (TS_EINTERNAL if they hold none). */
ts_status ts_frame_error_status(const struct ts_frame_hdr *h);

/* The pure parts, for tests and fuzzing: encode to / decode from TS_FRAME_HDR_LEN bytes.
 * ts_frame_decode checks magic, version, type and the header check (TS_ECORRUPT, naming the
 * field). */
void ts_frame_encode(const struct ts_frame_hdr *h, uint8_t out[TS_FRAME_HDR_LEN]);
ts_status ts_frame_decode(const uint8_t in[TS_FRAME_HDR_LEN], struct ts_frame_hdr *h,
                          struct ts_err *err) TS_MUST_CHECK;

#endif
