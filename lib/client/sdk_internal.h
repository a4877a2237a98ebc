/* sdk_internal.h - the SDK's private state and the calls its files make to each other.
 * Nothing here is part of include/tessera.h.
 *
 * The files in layers, bottom up (issue 45). A file calls only files of the layers below its
 * own and those before it in its own layer's list; no call goes up. tests/integration/
 * test_call_graph.py reads this list: it fails on a file of lib/client missing from it and
 * on a call to a file listed later. Recovery reconnects and reports; what is sent again is
 * decided above it, by the step.
 *   1. Connections and handshake: sdk_conn.c (one data-plane connection per shard of the
 *      map, closed with a goodbye), sdk_wait.c (a reply waited for in slices: the interrupt
 *      and the waiting log), sdk_reply.c (the HELLO with its handshake, reading a reply).
 *   2. The per-partition wire: sdk_region.c (shared regions on one host), sdk_pullc.c
 *      (compressed pulls), sdk_assign.c (what a push carries besides a gradient, and
 *      tessera_pull_state), sdk_wire.c (a push readied, one partition's frame and its reply,
 *      a local run's partitions), sdk_pipe.c (each shard's pushes and pulls at once),
 *      sdk_exchange.c (one exchange of the active tensors: serial, pipelined or local).
 *   3. Recovery: sdk_work.c (master calls that outlive a master restart; work units and
 *      tasks), sdk_failover.c (connecting again under a new map, the rollback, the failover
 *      loop that runs what its caller registered to redo), sdk_elastic.c (slots that change
 *      hands, the step to go on from).
 *   4. Features of a step: options.c (the options' schema and rules), sdk_options.c (the
 *      options per tensor), sdk_combine.c (one push for several slots), sdk_clip.c (clipping
 *      by global norm), sdk_rows_kept.c (a table's pushes kept to be sent again).
 *   5. The public API: sdk_snapshot.c and sdk_launch.c (no cluster), sdk_step.c (push, pull,
 *      the step, the loss scale and the stats), sdk_overlap.c (a step in pieces),
 *      sdk_metrics.c (progress reports, a trainer's /metrics), sdk_rows.c (sparse tables:
 *      register, pull and push rows), sdk_rows_scan.c (their fingerprint), sdk.c (connect,
 *      register, buffers, audits, close).
 * The declarations below go by file. option_flags.c is outside libtessera (the options as
 * flags of tessera-worker and tessera train).
 * Ownership: a struct tessera owns its tensors (freed by tessera_close), each sdk_tensor its
 * buffers. Threads: as tessera.h says, one thread at a time per handle. */
#ifndef TS_CLIENT_SDK_INTERNAL_H
#define TS_CLIENT_SDK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cluster/cluster.h"
#include "codec/codec.h"
#include "ps/part.h"
#include "table/batch.h"
#include "table/table.h"
#include "transport/region.h"
#include "util/hook.h"
#include "tessera.h"

#define MAX_TENSORS 4096
#define MAX_SHARDS 256
#define LOSS_SCALE_INIT_EXP 16   /* GradScaler: init_scale 2^16, backoff 0.5, growth 2 ... */
#define LOSS_GROWTH_STEPS 2000   /* ... every 2000 steps without overflow */
#define SPEC_MAX 4096            /* the compress and sync_every option strings */

#define SDK_MAX_TABLES 256      /* a job's sparse tables (the shards' SHARD_MAX_TABLES) */

/* A table's push as it was sent (sdk_rows_kept.c): the caller's ids and gradients copied. */
struct sdk_kept {
    uint64_t step;
    uint32_t slot;
    uint32_t generation;          /* t->rec.followed when sent: a rollback since voids it */
    size_t n, ids_cap, grads_cap;
    uint64_t *ids;
    float *grads;
};

struct sdk_table {
    char name[TS_JOB_ID_MAX + 1];
    uint32_t dim;
    uint64_t max_id;
    uint64_t version;             /* its step when registered (a restored one: the snapshot's) */
    struct ts_table *local;       /* a local run's one store of the rows */
    struct ts_rows_batch *batch;  /* a push's or a pull's ids placed, sorted and merged */
    size_t cap;                   /* the rows batch holds at most */
    float *rows;                  /* a pull's unique rows */
    size_t rows_cap;              /* floats */
    /* The pushes of its last step this worker sent (one a slot), until a pull of a later
     * version is answered: sent again after a failover (sdk_rows_resend). */
    struct sdk_kept *kept;
    size_t nkept, kept_cap;       /* kept[nkept..kept_cap) hold buffers to reuse */
};

struct sdk_tensor {
    char name[129];
    uint64_t numel, partition_bytes;
    uint32_t nparts;
    uint32_t *owner;              /* remote: shard slot per partition */
    struct ts_part **parts;       /* local */
    uint64_t version;             /* the lowest version at registration (restored: > 0) */
    uint32_t sync_every;          /* steps per push and pull of this tensor */
    uint32_t salt;                /* remote: its placement salt, as the shards answered it */
    struct ts_codec codec;        /* how its gradient travels (float jobs) */
    void *acc;                    /* sync_every > 1: the gradient summed since the last sync */
    float *residual;              /* top-k: what was not sent yet (error feedback) */
    uint8_t *enc;                 /* encoded partitions, at enc_off[p], enc_len[p] bytes */
    size_t *enc_off, *enc_len;
    uint8_t *overflow;            /* per partition: the last pull said a step was skipped */
    float *value, *state, *rgrad; /* reduce mode: this worker's parameters, optimizer state and
                                   * the reduced gradient pulled */
    float *prev;                  /* elastic jobs: the values of the step in progress, numel */
    void *slot_sum;               /* a combined push: the sum of the step's slots (numel
                                   * int64 or floats, sdk_combine.c) */
    uint64_t local_version;       /* reduce mode: the version of value */
    uint64_t *have;               /* reduce mode, per partition: the version of its rgrad (what
                                   * a failover says to a head that seeds it, sdk_failover.c) */
    bool *torn;                   /* reduce mode, per partition: a pull of the next version
                                   * failed after it may have written over rgrad, so have[p]'s
                                   * values are gone (the SEED then says the version alone) */
    /* tessera_set_lr: its updates' learning rate (0: the job's) and weight decay switch. */
    float lr;
    bool no_decay;
    /* tessera_assign: the next push of it is an assignment of these values (NULL: none);
     * tessera_assign_state: of values and optimizer state, gathered in assign_buf partition
     * by partition as the push sends them (its values, then each state component). */
    bool assign;
    const float *assign_values;
    float *assign_buf;
    /* tessera_assign_state_updates: the update count that push sets too (with the values). */
    bool assign_counted;
    uint64_t assign_updates;
    /* The step in progress (plan_step, only): */
    bool active, encoded;
    uint64_t tstep, pull_version;
    const void *src;              /* the raw gradient pushed when not encoded */
    /* Shared regions (sdk_region.c): */
    float *view;                  /* numel floats in view_bytes of pages, or NULL: partitions
                                   * mapped from their shard (view_part[p]) and private pages */
    size_t view_bytes;
    uint8_t *view_part;           /* per partition: mapped, so pulls say TS_PULL_REGION */
    struct ts_region grad;        /* tessera_buffers: the caller's gradient buffer */
    uint8_t *grad_shared;         /* per shard slot: that shard maps grad */
    uint64_t grad_pin;            /* grad pinned (ts_tp_pin): rdma pushes it in place */
    /* Compressed pulls (sdk_pullc.c; NULL pcopy: pulls in full): */
    struct ts_codec pcodec;       /* how its parameters come down */
    float *pcopy;                 /* this worker's copy, numel, which the shards mirror */
    uint64_t *ptoken;             /* per partition: the token of the copy held (0: none) */
    uint8_t *pwire;               /* per partition, at pwire_off[p]: a reply's payload */
    size_t *pwire_off;
};

struct sdk_shard {
    uint32_t id;
    struct ts_conn *conn;
    bool shm;                     /* over shared memory: pulls are not compressed */
    uint64_t epoch;               /* the map epoch it was connected under */
    /* The epoch of a map that the master moved on to without this shard (or with it
     * registered anew): its connection was shut down to end any wait on it (sdk_failover.c,
     * sdk_follow_epoch, from the heartbeat thread). */
    _Atomic uint64_t left_epoch;
};

/* The data-plane connections, sdk_conn.c's: it opens and closes them (sdk_failover.c's
 * sdk_follow_epoch shuts down one the map goes on without; the others read them). */
struct sdk_conns {
    struct sdk_shard shards[MAX_SHARDS];
    size_t nshards;
    char transport[16];           /* the last connection's backend (tessera_transport) */
    char want_transport[16];      /* tessera_options.transport ("" : any), for reconnecting */
    int delay_ms;                 /* sdk_connect_delayed's (emulate.h), for reconnecting */
    /* The shard whose connection broke last (0: none), noted by whoever saw it break
     * (sdk_note_broken), reported by a failover; atomic: sdk_pipe.c's threads note it. */
    _Atomic uint32_t broken;
    bool cut_done;                /* testing: $TESSERA_TEST_LINK_CUT was applied */
    /* Held while shards[] and nshards change, and by sdk_follow_epoch (the membership's
     * heartbeat thread) while it reads them. */
    pthread_mutex_t mu;
};

/* What the connections said in their HELLOs, sdk_reply.c's (sdk_close_shards clears done,
 * sdk_hello_or_remap sets member before it connects anew). */
struct sdk_hello_state {
    bool done;                    /* every connection has named its job */
    bool said;                    /* a HELLO went out once: connections made again (failover,
                                   * remap) must say it too, even after one that failed */
    uint64_t epoch;               /* the shard map epoch the last HELLOs named */
    uint32_t member;              /* the worker id the last HELLOs named (and proved) */
    uint32_t generation;          /* the job's rollbacks when its connections said HELLO */
};

/* Recovery's, sdk_failover.c's (sdk_reply.c sets followed at the first HELLO; a rollback or
 * an elastic recovery sets resume_step for tessera_resume_step). */
struct sdk_recovery {
    bool retrying;                /* the step is being sent again after a failover */
    /* The job's rollbacks this worker's parameters come after: the generation at its first
     * HELLO, then each rollback it followed (sdk_rollback). Not the connections': a failover
     * that reconnects after a rollback ended learns the new generation before the worker has
     * gone back. */
    uint32_t followed;
    bool followed_set;
    uint64_t resume_step;         /* the step the last rollback went back to */
    unsigned failovers;           /* how many so far */
    /* The last shard map sdk_follow_epoch fetched (the heartbeat thread's alone): the next
     * one comes as a delta from it (ts_master_shard_map_update). Freed by tessera_close. */
    Tessera__V1__ShardMap *followed_map;
    /* Sends again what a failover must before the failed call goes again: the tables' kept
     * pushes (sdk_rows.c sets it at a table's registration; NULL: nothing). A hook, since
     * recovery is below the tables. */
    ts_status (*resend)(struct tessera *t, struct ts_err *err);
};

/* The waits for replies, sdk_wait.c's: tessera_set_interrupt's check, and whether a wait it
 * stopped left replies in flight (every later data call is refused: close the handle). step:
 * the step the exchange in progress pushes (or the version it pulls), for the waiting log
 * (set by sdk_exchange.c). */
struct sdk_wait_state {
    int (*interrupt)(void *arg);
    void *interrupt_arg;
    bool interrupted;
    uint64_t step;
    /* sdk_pipe.c's threads are reading replies: they leave the interrupt check and the log
     * to the caller's thread (Python's check works there only). Set before they start. */
    bool pipe_busy;
};

/* Clipping by global norm, sdk_clip.c's (tessera_step_clip sets max and reads total): the
 * phase of the step in progress (enum sdk_clip_phase: its pushes are held, or they are the
 * applies carrying coef, as sdk_wire.c sends them). */
struct sdk_clip_state {
    int phase;
    float coef;
    float max;                    /* the step in progress is clipped to this norm (0: not) */
    double total;                 /* ... and the global norm it had */
};

/* Combined pushes, sdk_combine.c's (sdk_wire.c sends them): the slots the step's one push
 * carries (0: a push per slot), whether it goes as int64 where pushes are floats (exact_push
 * float); the roster at the step's start, and the step and roster a combined push needs (the
 * previous step completed and began with that roster). */
struct sdk_combine_state {
    uint64_t push_mask;
    bool push_i64;
    uint64_t step_roster, roster, next;
};

/* Elastic jobs and the speed the master balances by, sdk_elastic.c's (docs/elastic.md;
 * tessera_connect sets registrations_seen). */
struct sdk_elastic_state {
    unsigned registrations_seen;  /* the membership's registrations this worker followed */
    int64_t busy_from_ns;         /* when the last step returned (0: not measuring) */
    double busy_s[5];             /* the last steps' compute seconds per slot, a ring */
    unsigned nbusy;
};

/* The handle (tessera.h's tessera): the job, the cluster's handles, the tensors and the
 * options, set by sdk.c at connect and registration; the step in progress, sdk_step.c's; and
 * one part per concern, each written by the file named beside it (see its struct). */
struct tessera {
    struct ts_job job;
    uint64_t data_seed;           /* recorded in snapshots */
    uint32_t micro;
    uint32_t rank;
    int timeout_ms;
    bool local;
    struct ts_cluster *cl;
    struct ts_master *master;
    struct ts_membership *ms;
    _Atomic int64_t last_reply_ms;  /* the last shard reply read (sdk_reply.c), for the
                                     * heartbeat's rest (ts_membership_cfg.last_reply_ms) */
    struct sdk_conns conns;       /* sdk_conn.c */
    struct sdk_hello_state hello; /* sdk_reply.c */
    struct sdk_recovery rec;      /* sdk_failover.c */
    struct sdk_wait_state wait;   /* sdk_wait.c */
    struct sdk_clip_state clip;   /* sdk_clip.c */
    struct sdk_combine_state comb; /* sdk_combine.c */
    struct sdk_elastic_state el;  /* sdk_elastic.c */
    struct sdk_tensor *tensors[MAX_TENSORS];
    int ntensors;
    char compress[SPEC_MAX], sync_every[SPEC_MAX];   /* the options, checked at connect */
    char pull_compress[SPEC_MAX];
    atomic_bool pullc_shm_said;   /* the log line that shm pulls go in full was written */
    bool names_checked;           /* every tensor the options name is registered */
    int loss_mode;                /* enum tessera_loss_scale */
    bool push_f32;                /* exact mode, exact_push float: pushes are floats */
    /* tessera_options.dynamic (sdk_work.c): units from the master's queue; in ssp the queue
     * bounds staleness (ssp_staleness) and the shards run the job as asp. */
    bool dynamic, dynamic_ssp;
    uint32_t ssp_staleness;
    int scale_exp;                /* the loss scale is 2^scale_exp */
    uint32_t good_steps;          /* steps since the last overflow or growth */
    bool step_overflow;           /* the step in progress: a partition was skipped */
    uint64_t step_stale;          /* ... the most staleness a reply reported */
    struct tessera_stats stats;
    bool elastic;                 /* an elastic job (sdk_elastic.c, docs/elastic.md) */
    /* The step in progress (sdk_step.c): its slots and their gradients, the slot a push is
     * sent for, the newest version a pull reply carried since the step began. */
    size_t nstep;
    const uint32_t *step_slots;
    const void *const *const *step_grads;
    uint32_t push_rank;
    uint64_t newest;
    int pipe;                     /* enum sdk_pipe_mode, from $TESSERA_PIPELINE (sdk_pipe.c) */
    /* $TESSERA_PLACEMENT_SALT (sdk.c): a salt every tensor is proposed with, instead of the
     * one chosen for balance (docs/placement.md). */
    bool salt_fixed;
    uint32_t salt;
    /* Sparse tables (sdk_rows.c): by handle, and the ring their rows are placed on (a copy of
     * the map's at the first registration or the last rollback, rows_epoch and
     * rows_generation; a local run: one shard). */
    struct sdk_table *tables[SDK_MAX_TABLES];
    int ntables;
    struct ts_ring *rows_ring;
    uint64_t rows_epoch;
    uint32_t rows_generation;     /* the job's rollbacks followed when it was made */
};

/* The job as a registration names it to the shards (RegisterTensor, RegisterTable): its
 * settings, which the first registration fixes on every shard. Strings borrowed from t. */
static inline void sdk_job_spec(const struct tessera *t, Tessera__V1__JobSpec *js)
{
    js->id = (char *)t->job.id;
    js->workers = t->job.workers;
    js->exact = t->job.exact;
    js->optimizer = (char *)t->job.optimizer;
    js->batch = t->job.batch;
    js->data_seed = t->data_seed;
    js->micro_batch = t->micro;
    js->mode = (Tessera__V1__TrainMode)t->job.mode;
    js->staleness = t->job.staleness;
}

/* The membership's epoch callback (its heartbeat thread): shuts down the connection to each
 * shard the master's new map goes on without (sdk_failover.c). arg: the struct tessera. */
void sdk_follow_epoch(void *arg, uint64_t epoch);

/* A data-plane call to slot s ended with st: remember a broken connection, so that a failover
 * can report the shard to the master (sdk_failover.c). */
static inline void sdk_note_broken(struct tessera *t, size_t s, ts_status st)
{
    if (st == TS_EUNAVAIL || st == TS_ECORRUPT)
        t->conns.broken = t->conns.shards[s].id;
}

/* A data-plane error after which the connection is out of step or gone (a refusal is not), or
 * an interrupted wait (sdk_wait.c), after which nothing more is read. */
static inline bool sdk_transport_failed(ts_status st)
{
    return st == TS_EUNAVAIL || st == TS_ECORRUPT || st == TS_ETIMEDOUT || st == TS_ECANCELLED;
}

static inline int sdk_fail(struct tessera_error *out, const struct ts_err *e)
{
    if (out) {
        out->code = (int)e->code;
        ts_str_fit(out->message, sizeof(out->message), e->msg);
    }
    return (int)e->code;
}

static inline int sdk_ok(struct tessera_error *out)
{
    if (out) {
        out->code = 0;
        out->message[0] = '\0';
    }
    return 0;
}

/* The encoding of a push as the trainer gives it (before any codec), and its element's
 * bytes: float, or in exact mode int64 fixed point or, with exact_push float, float again. */
static inline unsigned sdk_push_encoding(const struct tessera *t)
{
    return !t->job.exact ? TS_ENC_RAW : t->push_f32 ? TS_ENC_FIXED_F32 : TS_ENC_FIXED;
}

static inline size_t sdk_push_bytes(const struct tessera *t)
{
    return sdk_push_encoding(t) == TS_ENC_FIXED ? sizeof(int64_t) : sizeof(float);
}

/* A push's element bytes: the trainer's encoding's, or int64 for a combined push of float
 * gradients in exact mode (sdk_combine.c). */
static inline size_t sdk_elem_bytes(const struct tessera *t)
{
    return t->comb.push_i64 ? sizeof(int64_t) : sdk_push_bytes(t);
}

/* What a failover sends again (sdk_fail_over, below; sdk_rows_recover). */
typedef ts_status (*sdk_redo_fn)(struct tessera *t, void *ctx, struct ts_err *err);

/* sdk_rows.c */
/* Frees the tables of t (tessera_close). */
void sdk_rows_free(struct tessera *t);
/* Table handle id, and a batch that holds n rows (TS_EUNAVAIL: the map moved under its rows:
 * sdk_rows_recover). */
ts_status sdk_rows_table_for(struct tessera *t, int id, size_t n, struct sdk_table **out,
                             struct ts_err *err) TS_MUST_CHECK;
/* A table call that ended with st (sdk_rows.c's comment): a broken connection, a moved map
 * (TS_EUNAVAIL, TS_ESTALE, TS_ECORRUPT) or a shard saying the job went back (TS_EROLLBACK).
 * Where the rows may be placed on the new map (again: copies took over, or shards only
 * joined) the call is sent again under it (sdk_fail_over, as a dense step's); where not, or
 * where that ends in a rollback, this waits for the job to go back to its last snapshot and
 * says TS_EROLLBACK. Anything else, or a local run, is st as it is. */
ts_status sdk_rows_recover(struct tessera *t, ts_status st, const char *what, uint64_t n,
                           sdk_redo_fn again, void *ctx, struct ts_err *err) TS_MUST_CHECK;
/* sdk_rows_kept.c: a table's last push kept until it is applied for sure, and sent again
 * after a failover (docs/embeddings.md, "Restarting from its own disk"). A BSP push is
 * acknowledged once it is summed, before its step applies: a shard that restarts from its
 * redo log comes back at the last step it synced, without the sums of the step in progress,
 * which every worker then sends again; a shard that has the step acknowledges the retry
 * unchanged. */
/* Keeps a copy of a push of x just acknowledged (slot, step, the caller's ids and grads). */
ts_status sdk_rows_keep(struct tessera *t, struct sdk_table *x, uint32_t slot, uint64_t step,
                        size_t n, const uint64_t *ids, const float *grads,
                        struct ts_err *err) TS_MUST_CHECK;
/* A pull of x at version was answered: pushes of earlier steps are applied, and go. */
void sdk_rows_pulled(struct sdk_table *x, uint64_t version);
/* After a failover, before the failed call goes again (sdk_fail_over, through
 * t->rec.resend): every kept push of this generation given to send (sdk_rows.c: sent again,
 * flagged a retry, where the map still rings the shards it was placed on; TS_ESTALE without
 * sending where not, and then that table's kept pushes are dropped: the chains' copies, a
 * join's move or a rollback decide what its rows are, and the failed call goes again under
 * the new map as before). */
typedef ts_status (*sdk_kept_send_fn)(struct tessera *t, int table, const struct sdk_kept *k,
                                      struct ts_err *err);
ts_status sdk_rows_resend(struct tessera *t, sdk_kept_send_fn send,
                          struct ts_err *err) TS_MUST_CHECK;
void sdk_rows_kept_free(struct sdk_table *x);

/* sdk_conn.c */
/* Connects to every shard of the master's current map, appending to t->conns.shards. */
ts_status sdk_connect_shards(struct tessera *t, const char *want, int delay_ms,
                             struct ts_err *err) TS_MUST_CHECK;
/* Closes every data-plane connection, saying goodbye on each that named the job. */
void sdk_close_shards(struct tessera *t);
/* The slot of shard_id in t->conns.shards (TS_EUNAVAIL if not connected). */
ts_status sdk_slot_of(struct tessera *t, uint32_t shard_id, uint32_t *slot,
                      struct ts_err *err) TS_MUST_CHECK;
/* The transport the options asked for (NULL: any), what a reconnection asks for again. */
static inline const char *sdk_want_transport(const struct tessera *t)
{
    return t->conns.want_transport[0] ? t->conns.want_transport : NULL;
}

/* sdk_wait.c */
struct ts_frame_hdr;
/* ts_frame_recv of the reply on slot s's connection, waiting up to t->timeout_ms
 * in slices: between them the interrupt check runs (TS_ECANCELLED once it says so), and a
 * wait of more than WAIT_SAY_MS logs which ranks the step waits for, as the master knows
 * them. sdk_usable: TS_ECANCELLED once an interrupted wait left the connections out of step. */
ts_status sdk_recv(struct tessera *t, uint32_t s, struct ts_frame_hdr *h, void *buf, size_t cap,
                   uint32_t tensor, uint32_t part, struct ts_err *err);
ts_status sdk_usable(const struct tessera *t, struct ts_err *err);
#define SDK_WAIT_SLICE_MS 200   /* how soon a wait sees an interrupt */
/* One tick of a wait that began at `start` (ts_now_ms), between two slices: the interrupt
 * check (TS_ECANCELLED naming `what`; the handle is unusable after it) and, past
 * WAIT_SAY_MS, the log of the ranks waited for (*said: when it last logged, 0 at first). The
 * caller's thread only. */
ts_status sdk_wait_tick(struct tessera *t, int64_t start, int64_t *said, const char *what,
                        struct ts_err *err) TS_MUST_CHECK;

/* sdk_reply.c */
/* Names the job on every connection, once the shards know it (after a registration), on the
 * connections as they are. sdk_any_authed: whether a connection is authenticated (and so
 * bound to the worker id it proved; sdk_hello_or_remap). */
ts_status sdk_hello(struct tessera *t, struct ts_err *err);
bool sdk_any_authed(const struct tessera *t);
/* What a reply said besides its payload. */
struct reply_info {
    uint32_t flags;           /* PARAMS: TS_PARAMS_*; an ACK of HELLO: TS_ACK_* */
    uint32_t staleness;
    uint64_t step;            /* the frame's step field (an ACK of HELLO: the job's rollbacks) */
    uint8_t data[48];         /* an ACK's payload (a handshake's proof, transport/auth.h) */
    size_t data_len;
    /* PARAMS: set by the caller, the payload may be shorter than cap (a compressed pull);
     * then its length and encoding. */
    bool upto;
    uint64_t len;
    uint16_t encoding;
};
/* Reads the reply to the oldest request on shard slot s, of type want for (tensor, part);
 * PARAMS and ROWS land in dst (cap bytes). An ERROR reply is its status and message. */
ts_status sdk_read_reply(struct tessera *t, uint32_t s, uint16_t want, uint32_t tensor,
                         uint32_t part, void *dst, size_t cap, struct reply_info *ri,
                         struct ts_err *err);

/* sdk_region.c */
/* After a failover: x's partitions mapped from a shard become private pages again, and the
 * shards of the new connections that are on this host map them and read the gradient anew. */
ts_status sdk_region_reconnect(struct tessera *t, struct sdk_tensor *x, int id,
                               struct ts_err *err) TS_MUST_CHECK;
/* After registering x as tensor id: maps the parameters of x that shards on this host hold
 * into x->view (bsp; skipped, with x->view NULL, where nothing can be mapped). */
ts_status sdk_map_params(struct tessera *t, struct sdk_tensor *x, int id, struct ts_err *err);
/* Whether partition p of x's push goes as TS_PUSH_REGION: raw, from x->grad, to a shard that
 * maps it. */
bool sdk_push_in_region(const struct sdk_tensor *x, uint32_t p);
/* tessera_buffers (sdk.c): private, zeroed pages for x's view (numel floats); x's gradient
 * buffer (tensor id), shared with every shard on this host that holds a partition of x (SHARE,
 * then its ACK; a shard that declines is left out: its pushes copy). A shard that died as it
 * was shared: x->grad.base is set and the caller fails over (sdk_start_over), which shares
 * it again. */
ts_status sdk_view_alloc(struct sdk_tensor *x, struct ts_err *err) TS_MUST_CHECK;
ts_status sdk_grad_alloc(struct tessera *t, struct sdk_tensor *x, int id,
                         struct ts_err *err) TS_MUST_CHECK;
/* Unmaps what sdk_map_params and tessera_buffers made. */
void sdk_region_free(struct sdk_tensor *x);

/* sdk_pullc.c: compressed pulls (docs/compression.md, "Pulls") */
struct step_reads;
/* The copy and reply buffers x's pulls need (none when they go in full). */
ts_status sdk_pullc_buffers(struct tessera *t, struct sdk_tensor *x,
                            struct ts_err *err) TS_MUST_CHECK;
void sdk_pullc_free(struct sdk_tensor *x);
/* Whether partition p of x is pulled compressed: x has a pull codec, the partition is not
 * read from a shared region, and its shard is not reached over shared memory (logged once). */
bool sdk_pullc_on(struct tessera *t, const struct sdk_tensor *x, uint32_t p);
/* A compressed pull's request: flags and encoding into h, its 16-byte payload into req. */
void sdk_pullc_request(const struct sdk_tensor *x, uint32_t p, struct ts_frame_hdr *h,
                       uint8_t req[16]);
/* Reads the reply to a compressed pull of partition p of tensor i, applies it to the copy and
 * copies the partition into dst (len floats); what it said in ri. On any failure the copy's
 * token is dropped, so the next pull comes in full. */
ts_status sdk_pullc_read(struct tessera *t, int i, uint32_t p, float *dst,
                         struct reply_info *ri, struct step_reads *acc,
                         struct ts_err *err) TS_MUST_CHECK;

/* sdk_assign.c */
/* The active tensors of [first, last) were pushed: their assignments are done;
 * sdk_assign_clear disarms one tensor. */
void sdk_assign_done(struct tessera *t, int first, int last);
void sdk_assign_clear(struct sdk_tensor *x);
/* The bytes of x's assignment with state, every partition's values and state. */
uint64_t sdk_assign_bytes(const struct tessera *t, const struct sdk_tensor *x);

/* sdk_wire.c */
/* What the pull replies of a step said, summed over the partitions read; merged into the
 * handle's step_* fields and newest by sdk_reads_merge. */
struct step_reads {
    bool overflow;                /* a partition's step was skipped */
    uint64_t stale, newest;       /* the most staleness, the newest version */
    uint64_t pulled, pulled_raw;  /* payload bytes of parameters pulled, and as float32 */
};
void sdk_reads_merge(struct tessera *t, const struct step_reads *acc);
/* Sends partition p of tensor i to the shard heading it: the push of slot t->push_rank
 * (push), or the pull of x->pull_version with flags. *begun: whether a request of that kind
 * already went on that connection in this exchange; set. The first push says that a step
 * begins (TS_PUSH_ROUND), the first pull that a round of pulls does (TS_PULL_ROUND). */
ts_status sdk_send_one(struct tessera *t, int i, uint32_t p, bool push, uint32_t flags,
                       bool *begun, struct ts_err *err) TS_MUST_CHECK;
/* Reads the reply to sdk_send_one(t, i, p, ...): an ACK (params NULL), or PARAMS into
 * tensor i's destination params (the whole tensor's). What it said goes to acc. */
ts_status sdk_read_one(struct tessera *t, int i, uint32_t p, float *params,
                       struct step_reads *acc, struct ts_err *e) TS_MUST_CHECK;
/* sdk_exchange_once in a local run: the same partitions, in this process. */
ts_status sdk_exchange_local(struct tessera *t, int first, int last, bool push,
                             float *const *params, struct ts_err *err) TS_MUST_CHECK;
/* Readies tensor i's push of grad (numel int64 in exact mode, else floats): raw data goes as
 * it is; with a codec, or a scale the SDK applies, each partition is encoded into x->enc. */
void sdk_prepare_push(struct tessera *t, int i, const void *grad);
/* Pushes per partition in the step in progress: one per slot, or one combined. */
static inline size_t sdk_npush(const struct tessera *t)
{
    return t->comb.push_mask ? 1 : t->nstep;
}
/* Readies the pushes of the step's kth push (sdk_npush): its slot as the rank, and with more
 * than one slot the gradients (that slot's, or the combined sum). */
void sdk_next_slot(struct tessera *t, int first, int last, size_t k);

/* sdk_pipe.c */
enum sdk_pipe_mode { SDK_PIPE_AUTO, SDK_PIPE_ON, SDK_PIPE_OFF };
/* t->pipe from $TESSERA_PIPELINE (auto, on, off; unset: auto); TS_EINVAL naming it. */
ts_status sdk_pipe_mode(struct tessera *t, struct ts_err *err) TS_MUST_CHECK;
/* Whether the exchange of [first, last) goes through sdk_pipe_exchange: one push per
 * partition (one slot, or a combined push), and
 * (auto) bytes that leave the host on some connection, at least SDK_PIPE_MIN_BYTES. */
bool sdk_pipe_pays(const struct tessera *t, int first, int last, bool push,
                   float *const *params);
/* sdk_exchange_once, with a sender and a reader thread per shard connection. */
ts_status sdk_pipe_exchange(struct tessera *t, int first, int last, bool push,
                            float *const *params, uint32_t flags,
                            struct ts_err *err) TS_MUST_CHECK;

/* sdk_exchange.c */
/* The active tensors of [first, last) (params indexed from first): pushes (if push, of every
 * slot of the step) and pulls (if params), once, with no failover (the caller's to do). */
ts_status sdk_exchange_once(struct tessera *t, int first, int last, bool push,
                            float *const *params, struct ts_err *err) TS_MUST_CHECK;
/* Readies tensor id alone, at its own step `tstep` (pull: version `version`): the exchange
 * that follows covers [id, id + 1) only. */
void sdk_only(struct tessera *t, int id, uint64_t tstep, uint64_t version);
/* Every tensor pulled at global step `step` into params, on the connections as they are. */
ts_status sdk_pull_all(struct tessera *t, uint64_t step, float *const *params,
                       struct ts_err *err) TS_MUST_CHECK;

/* sdk_work.c */
/* Master calls that outlive a master restart: w = sdk_master_wait() before the first try;
 * after a try that failed with st, sdk_master_again says whether to try again. It does for
 * UNAVAILABLE (down or restarting) and, with notfound, NOT_FOUND (restarted without this
 * registration: the heartbeat registers it again), for a minute from sdk_master_wait; the
 * first time it logs `what` and err's message at WARN; it sleeps a moment before returning
 * true. */
struct sdk_master_wait {
    int64_t until;   /* ms, ts_now_ms's clock */
    bool warned;
};
struct sdk_master_wait sdk_master_wait(void);
bool sdk_master_again(struct tessera *t, ts_status st, bool notfound, struct sdk_master_wait *w,
                      const char *what, const struct ts_err *err);
/* A heartbeat now (ts_membership_beat), or with caught_up the caught-up beat for registration
 * *caught_up (ts_membership_caught_up), waiting out a master that restarts as above. */
ts_status sdk_master_beat(struct tessera *t, const unsigned *caught_up,
                          struct ts_err *err) TS_MUST_CHECK;

/* sdk_failover.c */
/* Whether a step that lost a shard connection can be sent again: a remote job. With replicas
 * a follower takes over (docs/replication.md); without, the partitions of the dead shard are
 * lost, and the step ends in a rollback (sdk_rollback) or fails saying why. */
bool sdk_can_fail_over(struct tessera *t);
/* After a broken shard connection (t->conns.broken): waits for the master's map to change (the
 * dead shard dropped, a follower promoted), connects to the shards of the new map, and
 * redoes what a connection carried (HELLO, owners, shared regions). The caller then sends
 * the step again with t->rec.retrying set, or the registration again. */
ts_status sdk_failover(struct tessera *t, struct ts_err *err) TS_MUST_CHECK;
/* A call made while the worker starts (connecting, registering, sharing a region) ended
 * with st: if a shard connection broke, sdk_failover, as often as shards keep dying (a few
 * times). That connects again and redoes what the connections carried (HELLO, owners,
 * shared regions); a registration is the caller's to send again. Returns st, or what the
 * failover ended with. */
ts_status sdk_start_over(struct tessera *t, ts_status st, struct ts_err *err) TS_MUST_CHECK;
/* sdk_hello, or where the connections are bound to the worker id this worker had before it
 * registered again (sdk_any_authed), sdk_remap: new connections, which say HELLO as the new
 * one. What the public calls and recovery use; sdk_hello is for the connections as they are. */
ts_status sdk_hello_or_remap(struct tessera *t, struct ts_err *err) TS_MUST_CHECK;
/* Connects again under the newest map, at once (a registration the map moved under): HELLO
 * and the tensors' heads again if the connections had them. */
ts_status sdk_remap(struct tessera *t, struct ts_err *err) TS_MUST_CHECK;
/* A shard said the job goes (or went) back to its last snapshot: waits for the master to
 * finish the rollback, connects again and pulls every tensor at the snapshot's step into
 * params (indexed by tensor id; NULL: none pulled, the caller's to do); *step: that step. A
 * map that moves during the pull is failed over, a rollback that comes during it followed.
 * The job's note as the error when the cluster could not roll back (no snapshot). */
ts_status sdk_rollback(struct tessera *t, float *const *params, uint64_t *step,
                       struct ts_err *err) TS_MUST_CHECK;
/* A test hook (util/hook.h): $hook=FILE holds this worker until FILE exists, logging that
 * `what` waits (TESSERA_TEST_HOLD_JOIN: an elastic worker that caught up, before it tells
 * the master; TESSERA_TEST_HOLD_ROLLBACK_PULL: a worker that followed a rollback, connected
 * under the map it ended on, before it pulls). Nothing in a build without hooks. */
#if TS_TEST_HOOKS
void sdk_test_hold(const char *hook, const char *what);
#else   /* no hook's name in the binary (util/hook.h) */
#define sdk_test_hold(hook, what) ((void)0)
#endif
/* A call that ended with st, what and n naming it: where st is TS_EROLLBACK (a shard said the
 * job goes back) and the job is remote, sdk_rollback into params (NULL: none pulled), sets
 * tessera_resume_step and returns TS_EROLLBACK saying so (and, without params, that the
 * caller pulls every tensor at that step); else st as it is. */
ts_status sdk_follow_rollback(struct tessera *t, const char *what, uint64_t n,
                              float *const *params, ts_status st,
                              struct ts_err *err) TS_MUST_CHECK;
/* An exchange (or a clipped step's exchanges) that ended with st: a shard died
 * (TS_EUNAVAIL), or a partition moved to a shard that joined the ring (TS_ESTALE). Under the
 * new map redo(t, ctx, err) sends it again to the new heads, pushes flagged as retries
 * (counted once), as often as the map keeps changing (MAX_FAILOVERS); what and n name it in
 * logs. TS_EROLLBACK if the job went back to a snapshot meanwhile. */
ts_status sdk_fail_over(struct tessera *t, const char *what, uint64_t n, ts_status st,
                        sdk_redo_fn redo, void *ctx, struct ts_err *err) TS_MUST_CHECK;
/* sdk_pull_all at `step`, failing over (sdk_fail_over) while the map moves under it: a shard
 * that died, or one that no longer heads a partition (TS_ESTALE). what and n name it in
 * logs. */
ts_status sdk_pull_all_over(struct tessera *t, const char *what, uint64_t n, uint64_t step,
                            float *const *params, struct ts_err *err) TS_MUST_CHECK;

/* sdk_elastic.c */
/* Keeps params (the values of the step about to be sent, by tensor id) to recompute from. */
ts_status sdk_elastic_keep(struct tessera *t, float *const *params,
                           struct ts_err *err) TS_MUST_CHECK;
/* Measures the compute time per slot since the last step returned and hands the master the
 * recent median (docs/scheduler.md); sdk_elastic_done: a step returned with st. */
void sdk_elastic_measure(struct tessera *t, size_t n);
void sdk_elastic_done(struct tessera *t, ts_status st);
/* TS_ESLOTS if the master handed this worker a slot that slots[0..n) lacks. */
ts_status sdk_elastic_check(struct tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                            struct ts_err *err) TS_MUST_CHECK;
/* After a step that ended in TS_ESLOTS, or saw a version past step + 1: asks the master for
 * this worker's slots, finds the step to go on from (the same one, recomputed from the kept
 * values, or from params as they are when `held` says they hold step's values already; or a
 * later one the job reached without this worker) with its values in params, and returns
 * TS_ESLOTS naming it (resume_step), or what went wrong. */
ts_status sdk_elastic_recover(struct tessera *t, uint64_t step, float *const *params, bool held,
                              struct ts_err *err);

/* options.c: the schema and the rules (include/tessera.h). sdk_options_copy copies a
 * caller's options, of whatever size its header gave them, into out (this SDK's struct,
 * the fields it lacked zero); sdk_options_check is tessera_options_check on such a copy. */
ts_status sdk_options_copy(const struct tessera_options *in, struct tessera_options *out,
                           struct ts_err *err) TS_MUST_CHECK;
ts_status sdk_options_check(const struct tessera_options *o, int how,
                            struct ts_err *err) TS_MUST_CHECK;
/* One item of a "NAME=VALUE,...[,DEFAULT]" list: the tensor name (none for the default) and
 * the value, pointing into the list. sdk_spec_next reads the item at *p and moves *p past
 * it; false at the end of the list. */
struct sdk_spec_item {
    const char *name, *value;
    size_t name_len, value_len;
};
bool sdk_spec_next(const char **p, struct sdk_spec_item *it);
/* A sync period's text, 1..TS_SYNC_MAX. */
ts_status sdk_parse_sync(const char *v, uint32_t *k, struct ts_err *err) TS_MUST_CHECK;

/* sdk_options.c */
/* The mode, compression, sync periods and loss scaling of options sdk_options_check
 * accepted, into t. */
void sdk_set_modes(struct tessera *t, const struct tessera_options *o);
/* Every tensor the options name is registered (checked at the first step). */
ts_status sdk_check_names(struct tessera *t, struct ts_err *err);
/* Tensor x's sync period and codec, from the options. */
ts_status sdk_tensor_options(struct tessera *t, struct sdk_tensor *x, struct ts_err *err);
/* The buffers the options need for x (and, in reduce mode, its initial parameters). */
ts_status sdk_tensor_buffers(struct tessera *t, struct sdk_tensor *x,
                             const Tessera__V1__RegisterTensorRequest *req, struct ts_err *err);

/* sdk_combine.c */
/* Before a step of slots[0..n) with gradients grads[k][tensor] (plan_step done: x->active
 * set): decides whether it goes as one push, summed into each active tensor's slot_sum
 * (t->comb.push_mask set), or slot by slot. sdk_combine_done: the step ended, ok or not (not: the
 * next one goes slot by slot); clears push_mask. */
void sdk_combine_plan(struct tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                      const void *const *const *grads);
void sdk_combine_done(struct tessera *t, uint64_t step, bool ok);

/* sdk_clip.c: clipping by global norm (lib/ps/part.h, "Clipping"). The phases of a clipped
 * step, as t->clip.phase says them to sdk_step.c's pushes. */
enum sdk_clip_phase { SDK_CLIP_OFF, SDK_CLIP_HOLD, SDK_CLIP_APPLY };
/* Whether a step of t may be clipped (TS_EINVAL or TS_ENOTSUP naming why not). */
ts_status sdk_clip_check(const struct tessera *t, float max_norm, struct ts_err *err)
    TS_MUST_CHECK;
/* The step planned (plan_step) goes out clipped: held pushes, the norms, the applies and the
 * pulls into params, all again on the new heads after a failover (the pushes as retries, the
 * coefficient kept once computed). *total: the global norm of the averaged gradient. */
ts_status sdk_clip_exchange(struct tessera *t, uint64_t step, float max_norm,
                            float *const *params, double *total, struct ts_err *err)
    TS_MUST_CHECK;
/* A reduce job's step (every worker holds the averaged gradient, x->rgrad): its global norm,
 * summed as the shards sum it in bsp (partition by partition, so the same bits), into
 * t->clip.total, and every gradient multiplied by the coefficient, before the optimizer. */
void sdk_clip_reduced(struct tessera *t);

/* sdk_step.c, for sdk_overlap.c: tensor i's push of grad checked before anything is sent
 * (exact mode's float pushes: every value in range), then readied (sdk_prepare_push), and the
 * pushes (push) or pulls (params, indexed from first) of the active tensors of [first, last),
 * failing over as a step does; what and n name it in logs. */
ts_status sdk_check_push(struct tessera *t, int i, const void *grad,
                         struct ts_err *err) TS_MUST_CHECK;
ts_status sdk_exchange(struct tessera *t, const char *what, uint64_t n, int first, int last,
                       bool push, float *const *params, struct ts_err *err) TS_MUST_CHECK;

/* sdk_metrics.c: the end of its serving when t is the served client (tessera_close). */
void sdk_metrics_close(tessera *t);

#endif
