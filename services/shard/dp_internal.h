/* dp_internal.h - a data-plane connection as dataplane.c (the frames), dp_chain.c (images down a
 * partition's chain) and slots.c (elastic jobs: waking pulls when slots change hands, reporting a
 * worker that hung up) share it; outside the shard only tests/fuzz/fuzz_dataplane.c, which serves
 * frames through dp_conn_serve as conn_main does. Ownership: dp_listen.c creates and frees
 * connections; a connection's thread alone touches its fields but for the atomics and job_id
 * (under dp->id_mu). */
#ifndef TS_SHARD_DP_INTERNAL_H
#define TS_SHARD_DP_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "chain.h"
#include "codec/codec.h"
#include "dataplane.h"
#include "transport/auth.h"
#include "transport/region.h"
#include "util/names.h"

/* The longest a pull waits for its version (or a norm pull for its held step). */
#define DP_PULL_WAIT_MS 120000

/* Why a connection's pull stops waiting (dp_conn.cancel, bits). */
#define DP_CANCEL_END 0x1u          /* the shard stops, or the job ended */
#define DP_CANCEL_WAKE 0x2u         /* the job's slots changed hands (slots.c) */

/* The data plane's metrics of a connection's job (metrics.c), held from its HELLO until it
 * names another job or ends (shard_metrics_drop): a release forgets the job's series
 * (shard_metrics_forget) only once no connection is attached, but a hold keeps an update
 * that races with it in valid memory all the same. NULL members (no HELLO yet, no job, or
 * no memory) are ignored by the updates. */
struct dp_metrics {
    struct ts_metric *push_s, *pull_s, *push_bytes, *pull_bytes, *updates, *aggregate_s;
};
void shard_metrics_job(struct dp_metrics *m, const char *job);
void shard_metrics_drop(struct dp_metrics *m);   /* puts them; every member NULL after */
/* Job was released: its series leave /metrics (a later job of the same id starts new ones). */
void shard_metrics_forget(const char *job);

/* What this connection shares with its worker, or with the shard before this one in a
 * chain, per tensor (region.h). */
struct dp_region {
    struct ts_region grad;          /* the worker's gradient buffer, mapped read-only */
    bool params;                    /* the worker maps our values (MAP answered) */
    struct ts_region prev;          /* the previous shard's values, mapped read-only */
};

/* Compressed pulls (dp_pullc.c): the mirror of one partition of the worker's copy. */
struct dp_mirror {
    uint64_t token;                 /* the copy it mirrors (0: none yet) */
    uint64_t version;               /* the version last sent */
    uint64_t len;                   /* floats in v */
    float *v;
};
struct dp_mirrors {                 /* one tensor's, by partition */
    uint32_t n;
    struct dp_mirror *part;
};

struct dp_conn {
    struct dataplane *dp;
    struct ts_conn *c;
    struct shard_job *job;          /* named by the connection's HELLO */
    unsigned gen;                   /* the job's rollbacks at the HELLO */
    bool push_refused;              /* a push of the current step (since the last push that
                                     * said TS_PUSH_ROUND) was refused */
    struct ts_err forged;           /* code set: a push or seed of this connection was refused
                                     * as another's (TS_EPERM); every later frame is answered
                                     * with it, none served, until the worker hangs up */
    float *copy;                    /* SSP/ASP pulls: the values copied under the lock */
    size_t copy_cap;                /* floats */
    struct dp_region *regions;      /* by tensor id; NULL until the first SHARE or MAP */
    /* Compressed pulls (dp_pullc.c): mirrors by tensor id, the bytes they hold (charged to
     * the job), a scratch vector and the reply's payload; full replies sent since the HELLO
     * (the first pull of each partition, and every resync). */
    struct dp_mirrors *mirrors;
    uint32_t nmirrors;
    uint64_t mirror_mem;
    float *scratch;
    size_t scratch_cap;
    uint8_t *wire;
    size_t wire_cap;
    uint64_t resyncs;
    uint64_t pullc_last;            /* the payload bytes of the last coded reply */
    struct chain_links chain;       /* to the next shards of this shard's chains */
    atomic_uint cancel;             /* DP_CANCEL_* bits: end a pull's wait */
    char job_id[TS_JOB_ID_MAX + 1]; /* the HELLO's job, for cancel_waits (under dp->id_mu) */
    /* From the HELLO (written under dp->id_mu): the worker's shard map epoch then (0: not
     * said), and whether the job is a reduce job (dataplane_remapped). */
    uint64_t hello_epoch;
    bool reduce;
    unsigned registration;          /* the shard's registrations with the master then */
    struct dp_metrics metrics;
    /* From the HELLO: the worker it names (its `tensor` field: the worker id RegisterWorker
     * gave; 0 on a chain link), whose slots alone the connection may push (dp_access.c). */
    uint32_t member;
    /* A push or pull of this worker was served since the heartbeat last vouched for it
     * (dataplane_vouched), and the step of its last push (its clock for the master). */
    atomic_bool answered;
    atomic_uint_least64_t pushed_step;
    /* Elastic jobs (docs/elastic.md), from the HELLO: the worker's member id (0: a shard of a
     * chain, or a worker that is not elastic), whether it said goodbye (BYE) before hanging
     * up; wakes counts the slot changes told to this connection, wakes_seen those its pulls
     * answered, reslot: answer every pull with TS_ESLOTS until the next step (a push that says
     * TS_PUSH_ROUND, or a pull that says TS_PULL_ROUND); roster: the newest roster of its job
     * heard from the master. */
    uint32_t worker;
    bool bye;
    /* The handshake (auth.h): begun by a HELLO with TS_HELLO_AUTH (hs_pending until its AUTH),
     * with MACs or not (hs_mac, what the ACK said); link: the peer proved the chain key, so
     * it is a shard before this one in a chain (IMAGE frames are taken only from such). */
    struct ts_dp_hs hs;
    char hs_job[TS_JOB_ID_MAX + 1];
    bool hs_pending, hs_mac, link;
    atomic_uint wakes;
    unsigned wakes_seen;
    bool reslot;
    _Atomic uint64_t roster;
    pthread_t thread;
    struct dp_conn *next;
    atomic_bool done;
    /* dp_guard.c: trusted (the handshake done, or the HELLO answered where none is
     * required), cut (shut down to make room), when it came, and from where. */
    atomic_bool trusted, cut;
    /* Sparse tables (dp_rows.c): a pull's rows, and a scan in progress (its table id + 1, 0:
     * none; the ids that existed when it began, how many were sent). */
    float *rows;
    size_t rows_cap;                /* floats */
    uint64_t *scan_ids;
    size_t scan_n, scan_at;
    uint32_t scan_table;
    /* A frame's ids split per store or per follower (dp_rows.c, rowcopy.h): scratch kept for
     * the next frame. key: per id of the frame, its store's index or its follower; part: one
     * store's or follower's ids, their positions in the frame, gradients and rows; own: the
     * part of a push this shard heads, kept to copy down once the table is let go, with the
     * own store's sweep plan for its step (lib/table/table.h, ts_table_sweep_plan); served:
     * per store, whether it was served when the frame began (one look at each `owned`). */
    struct {
        uint8_t *served;
        uint32_t *key;
        uint64_t *ids;
        size_t *pos;
        uint8_t *grad;
        float *rows;
        uint64_t *own_ids;
        uint8_t *own_grad;
        uint32_t *own_f;
        size_t own_n;
        uint32_t *fol;              /* the table's followers, me and epoch as placed */
        size_t nfol;
        uint32_t me;
        uint64_t since;
        uint32_t sweep;             /* the own store's sweep plan of the push's step */
        size_t served_cap, key_cap, ids_cap, pos_cap, grad_cap, rows_cap, own_ids_cap,
            own_grad_cap, own_f_cap, fol_cap;
    } split;
    int64_t born_ms;
    char source[64];
};

/* dataplane.c: a connection's life, on its thread. conn_main (dp_listen.c) receives each frame (frame.c
 * refuses what is torn, corrupt or over dp_guard_cap) and hands it to dp_conn_serve: h and its
 * payload in (a view, released here), buf the receive buffer of cap bytes. It checks that the
 * frame may come now (dp_allowed), serves it and answers a failure with an ERROR frame;
 * false: the connection ends, *hung_up set when the peer hung up under a reply. Then
 * dp_conn_end frees what the connection held, tells the master of an elastic worker that hung
 * up without a goodbye, and lets the job go; dc itself stays the caller's. */
bool dp_conn_serve(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *in, void *buf,
                   size_t cap, bool *hung_up);
void dp_conn_end(struct dp_conn *dc, bool hung_up);
/* dataplane.c: TS_EROLLBACK (err says why) when dc's job is going back to a snapshot, or went
 * back since dc's HELLO: what dp_conn_serve checks before a push, pull or copy is served, and
 * what a frame that waits in the shard (dp_rows.c, in_slices) checks again each time it tries
 * under its table's lock, so that one taken before a rollback never lands after its load. */
ts_status dp_rolled_back(struct dp_conn *dc, struct ts_err *err);
/* dataplane.c: answers the request req with an ERROR frame carrying e (its code and message). */
ts_status dp_reply_error(struct ts_conn *c, const struct ts_frame_hdr *req,
                        const struct ts_err *e);

/* dp_guard.c: limits before trust, and refusals counted (dataplane.h, enum dp_refusal).
 * dp_refuse: counts one of why and logs it (rate-limited). dp_refuse_frame: a frame that
 * ts_frame_recv refused, counted by its reason. dp_guard_admit: a new connection may be
 * served (false: close it; it was counted), maybe cutting the oldest untrusted one; dp->mu
 * held. dp_guard_cap: the largest frame the connection may send now. dp_guard_expired: the
 * connection is untrusted past the limit (counted; close it). dp_guard_trust: after its
 * HELLO was answered, the connection is trusted unless a handshake is still due. */
void dp_refuse(struct dataplane *dp, enum dp_refusal why, const char *peer, const char *msg);
void dp_refuse_frame(struct dp_conn *dc, const struct ts_err *err);
bool dp_guard_admit(struct dataplane *dp, struct dp_conn *dc);
size_t dp_guard_cap(const struct dp_conn *dc);
bool dp_guard_expired(struct dp_conn *dc);
void dp_guard_trust(struct dp_conn *dc);

/* dp_access.c: which worker owns each slot of a job, and the job's key (JobAccess; docs/
 * security.md, "Pushes bound to their sender"). Created with the data plane; the fetch is set
 * once the shard registered (dataplane_set_access). */
ts_status dp_access_create(struct dp_access **out, struct ts_err *err) TS_MUST_CHECK;
void dp_access_free(struct dp_access *a);
void dp_access_set_fetch(struct dp_access *a, dp_access_fetch_fn fn, void *ctx);
/* The key of a connection of job: worker member's (chain: the job's chain key), derived from
 * the job's key. TS_ESTATE where the master gives no key (no mutual TLS); TS_EUNAVAIL when
 * the master could not be asked. */
ts_status dp_access_key(struct dp_access *a, const char *job, bool chain, uint32_t member,
                        uint8_t out[TS_DP_KEY_LEN], struct ts_err *err) TS_MUST_CHECK;
/* Whether worker member owns slot rank (slots: each slot of a combined push's mask) of job,
 * asking the master again before it says no: TS_OK; TS_ESLOTS in an elastic job (the slot
 * changed hands: the worker asks for its slots); TS_EPERM otherwise, or for member 0 (a
 * HELLO that named no worker). */
ts_status dp_access_check(struct dp_access *a, const char *job, uint32_t member, uint32_t rank,
                          uint64_t slots, struct ts_err *err) TS_MUST_CHECK;
/* A heartbeat's roster of job: a table older than it is asked again at its next use. */
void dp_access_roster(struct dp_access *a, const char *job, uint64_t roster);
/* The job ended or went back to a snapshot: its table is asked again at its next use. */
void dp_access_forget(struct dp_access *a, const char *job);

/* dp_auth.c: the handshake (transport/auth.h; docs/security.md) */
/* A HELLO: without TS_HELLO_AUTH, TS_OK unless the handshake is required; with it, takes the
 * nonce off *len (the job id is what stays), and fills the ACK's flags (ack) and its payload
 * (out) with this shard's nonce and proof. */
ts_status dp_hello_auth(struct dp_conn *dc, const struct ts_frame_hdr *h, const char *buf,
                        size_t *len, struct ts_frame_hdr *ack, uint8_t out[TS_DP_ACK_LEN],
                        struct ts_err *err) TS_MUST_CHECK;
/* The AUTH frame that ends the handshake: TS_EAUTH for a wrong proof (close the connection). */
ts_status dp_on_auth(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                     struct ts_err *err) TS_MUST_CHECK;
/* Whether a frame of type may come on dc now (TS_EAUTH naming why not). */
ts_status dp_allowed(struct dp_conn *dc, uint16_t type, struct ts_err *err) TS_MUST_CHECK;

/* dp_clip.c: a TS_PULL_NORM pull of partition p (this shard heads it; pinned by the
 * caller): waits for the held step, then PARAMS with its sum of squares (frame.h). */
ts_status dp_norm_from(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                       struct ts_err *err) TS_MUST_CHECK;

/* dp_chain.c (docs/replication.md) */
/* After p's update (a push this connection took, p pinned by the caller): its image down
 * the chain from shard next, then the version is published to pulls (TS_OK), or the error
 * that kept it from the chain's tail, also in err (which the push's reply reads). */
ts_status dp_replicate(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                       uint32_t next, struct ts_err *err);
/* An IMAGE frame from the shard before this one in a partition's chain: checked, loaded,
 * passed on, acknowledged. */
ts_status dp_on_image(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                      struct ts_err *err) TS_MUST_CHECK;

/* dp_pullc.c: compressed pulls (docs/compression.md, "Pulls") */
#define DP_PULLC_REQ 16             /* a coded PULL's payload: u64 copy token, f64 top-k ratio */
struct dp_pullc_req {
    struct ts_codec codec;          /* the frame's encoding, and the ratio for top-k */
    uint64_t have;                  /* the token of the copy the worker holds (0: none) */
};
/* A PULL with TS_PULL_CODED, before it waits: a float job that is not reduce, no region, the
 * payload's length, a codec and its ratio; TS_EINVAL naming what is wrong. */
ts_status dp_pullc_check(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct dp_pullc_req *rq, struct ts_err *err) TS_MUST_CHECK;
/* Sends out (PARAMS of values, len floats at version) as the delta against the mirror of the
 * copy the worker holds, or in full where that is not the mirror's (or the delta would not be
 * finite); either way the mirror is what the worker's copy will be. */
ts_status dp_pullc_reply(struct dp_conn *dc, struct ts_frame_hdr *out,
                         const struct dp_pullc_req *rq, const float *values, uint64_t len,
                         uint64_t version, struct ts_err *err) TS_MUST_CHECK;
/* Frees every mirror (and gives their memory back to the job's budget). */
void dp_pullc_free(struct dp_conn *dc);

/* slots.c */
/* TS_ESLOTS (and from then on until the next step's first push or pull) if the connection's job changed slots
 * since its pulls last said so; TS_OK otherwise. */
ts_status dp_slots_moved(struct dp_conn *dc, struct ts_err *err);
/* TS_ESLOTS if the connection's job changed slots since its pulls last said so (once: a
 * table's pull, which the worker sends again at its step's start after it asked the master,
 * dp_rows.c); TS_OK otherwise. */
ts_status dp_slots_woken(struct dp_conn *dc, struct ts_err *err);
/* After a pull's wait was cancelled: true if only a wake did it (cleared: wait again, after
 * dp_slots_moved); false if the shard stops or the job ended. */
bool dp_slots_rewait(struct dp_conn *dc);
/* After a request whose reply could not go: whether the peer hung up (what it still sent is
 * read and dropped, for up to DP_GONE_MS) rather than this shard ending the connection.
 * buf: cap bytes. */
#define DP_GONE_MS 200
bool dp_slots_peer_gone(struct dp_conn *dc, void *buf, size_t cap);
/* The connection's elastic worker hung up without a goodbye: the master hears of it (and
 * moves its slots), then every connection of its job on this shard is woken. */
void dp_slots_lost(struct dp_conn *dc);

/* Whether this connection's worker owns the slots a push or seed names (dp_access.c): a
 * refusal other than a slot that just changed hands is counted. */
ts_status dp_owns(struct dp_conn *dc, uint32_t rank, uint64_t slots,
                  struct ts_err *err) TS_MUST_CHECK;

/* dp_rows.c: a sparse table's frames (frame.h, ROWS_*; docs/embeddings.md, "Rows on the
 * wire"), and what a connection holds for them (freed when it ends). */
ts_status dp_rows_push(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err) TS_MUST_CHECK;
ts_status dp_rows_pull(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err) TS_MUST_CHECK;
ts_status dp_rows_scan(struct dp_conn *dc, const struct ts_frame_hdr *h,
                       struct ts_err *err) TS_MUST_CHECK;
/* A ROWS_PREFETCH: the ids each store here serves are queued for the shard's prefetch thread
 * (dp_prefetch.h), which gives them to ts_table_prefetch. A hint: what is
 * wrong with it (no job, an unknown table, a bad length, ids no store here serves) is
 * dropped, and nothing is answered. */
void dp_rows_prefetch(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf);
/* dp_chain.c: frame h (a ROWS_COPY, its payload iov[0..n)) to the follower of a table's
 * rows and its ACK (a copy that cannot take it marks itself broken and acknowledges it).
 * A follower out of the map (under the registration it had at epoch `since`) is skipped;
 * one that cannot be reached is reported, and waited for to leave the map (TS_EUNAVAIL if
 * it does not); one that refuses it (TS_ESTALE: it took these rows over, this shard having
 * left the map; TS_EROLLBACK) is that refusal: the push is not to be acknowledged. */
ts_status dp_copy_rows(struct dp_conn *dc, uint32_t follower, uint64_t since,
                       struct ts_frame_hdr *h, const struct iovec *iov, size_t n,
                       struct ts_err *err) TS_MUST_CHECK;
/* A head's copy of a push (ROWS_COPY), on a chain link: into the copy of its rows. */
ts_status dp_rows_copy(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err) TS_MUST_CHECK;
void dp_rows_free(struct dp_conn *dc);

#endif
