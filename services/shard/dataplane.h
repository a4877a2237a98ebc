/* dataplane.h - the shard's data-plane server (see dataplane.c). */
#ifndef TS_SHARD_DATAPLANE_H
#define TS_SHARD_DATAPLANE_H

#include <pthread.h>
#include <stdatomic.h>

#include "params.h"
#include "transport/transport.h"
#include "util/hook.h"

struct ts_membership;

#define DP_MAX_LISTENERS 4
#define DP_SUM_CACHE 1024           /* pull hashes remembered (dataplane.c pull_sum) */

struct dataplane;
struct dp_access;

struct dp_listener {
    struct dataplane *dp;
    struct ts_listener *l;
    struct ts_blob addr;            /* what workers connect to, published via the master */
    pthread_t thread;
    atomic_uint_least64_t accepted; /* connections taken since start (its thread counts) */
};

struct dp_sum {
    const struct ts_part *part;
    uint64_t version, sum;
};

/* Why the data plane refused a connection or a frame (dp_guard.c), counted per shard:
 * ShardStatus.refusals, tessera_shard_refused_total{reason}, `tessera status`. */
enum dp_refusal {
    DP_REFUSED_HANDSHAKE,   /* "handshake": none where one is required, or a wrong proof */
    DP_REFUSED_CORRUPT,     /* "corrupt": a frame torn, malformed or failing its checksum */
    DP_REFUSED_MAC,         /* "mac": a frame whose MAC is missing or wrong */
    DP_REFUSED_IDENTITY,    /* "identity": a push or seed of a slot its worker does not own,
                             * or a HELLO for another job or worker than the one proved */
    DP_REFUSED_CONFLICT,    /* "conflict": a push that differs from the one counted for its
                             * slot and step (part.h, "Duplicates") */
    DP_REFUSED_KIND,        /* "kind": a frame not for this connection (an image from a worker,
                             * a push on a chain link) */
    DP_REFUSED_OVERSIZE,    /* "oversize": a frame over the limit before trust */
    DP_REFUSED_IDLE,        /* "idle": not trusted within the limit */
    DP_REFUSED_FLOOD,       /* "flood": over a connection cap */
    DP_REFUSED_PEER,        /* "peer": a local peer the kernel says is not allowed (shm) */
    DP_REFUSED_N
};
/* Limits before trust (dp_guard.c says why each). */
#define DP_UNTRUSTED_FRAME 4096     /* payload bytes of a frame */
#define DP_UNTRUSTED_MS 10000       /* to be trusted */
#define DP_UNTRUSTED_MAX 64         /* untrusted connections at once (the oldest is cut) */
#define DP_SOURCE_MAX 16            /* untrusted connections from one source */
#define DP_DEFAULT_MAX_CONNS 4096   /* --max-conns */

struct dataplane {
    struct shard_params *params;    /* borrowed */
    /* The shard's map, once it has joined (borrowed; outlives dataplane_stop): where the next
     * shard of a chain listens (replication, docs/replication.md). */
    _Atomic(struct ts_cluster *) cluster;
    /* Fetches the map and follows its chains (shard_params_rechain): called when a shard
     * before this one in a chain sends an image under a map this shard has not seen yet. Set
     * with cluster; NULL before. */
    void (*remap)(void *ctx);
    void *remap_ctx;
    atomic_uint self;               /* this shard's id, set before cluster (for reports) */
    /* This shard's membership (borrowed; set with self): how many times it registered with
     * the master, which a connection notes at its HELLO (dp_slots_lost). */
    _Atomic(struct ts_membership *) membership;
    struct dp_listener listeners[DP_MAX_LISTENERS];
    size_t n;
    pthread_mutex_t mu;
    struct dp_conn *conns;
    atomic_bool stop;
    atomic_uint_least64_t closed_in, closed_refused;   /* counters of connections gone */
    pthread_mutex_t sum_mu;
    pthread_mutex_t id_mu;          /* the connections' job ids (after mu) */
    struct dp_sum sums[DP_SUM_CACHE];
#if TS_TEST_HOOKS
    /* A test hook (util/hook.h): $TESSERA_TEST_FLIP_REPLICA=TENSOR:PARTITION makes this shard
     * flip one bit of every image of that partition it takes as a follower, a planted
     * difference for `tessera verify replicas` to find. */
    bool flip;
    uint32_t flip_tensor, flip_part;
#endif
    /* The data-plane handshake (transport/auth.h; docs/security.md). require_auth: set at
     * start when the shard serves mutual TLS; then every connection must do the handshake
     * before any other frame. access: each job's slot owners and key, from the master
     * (dp_access.c), which bind a connection to its worker. */
    bool require_auth;
    struct dp_access *access;
    /* dp_guard.c: the connections served at most (--max-conns; 0 at dataplane_start:
     * DP_DEFAULT_MAX_CONNS), and the refusals so far by reason. */
    size_t max_conns;
    atomic_uint_least64_t refused[DP_REFUSED_N];
    struct dp_prefetch *prefetch;   /* prefetch frames' disk reads (dp_prefetch.h) */
};

/* "handshake", "corrupt", ...: the reason's name, for metrics and status (static storage). */
const char *dataplane_refusal_name(enum dp_refusal r);
/* The refusals so far, by reason. */
void dataplane_refusals(struct dataplane *dp, uint64_t out[DP_REFUSED_N]);

/* How the data plane asks the master about a job (ts_membership_job_access): *out is the
 * caller's to free. */
typedef ts_status (*dp_access_fetch_fn)(void *ctx, const char *job,
                                        Tessera__V1__JobAccessResponse **out,
                                        struct ts_err *err);
/* chain_links.keys (chain.h) for a shard that serves mutual TLS (ctx: the struct dataplane
 * *): job's chain key, from the job's key the master gives (dp_access.c). */
ts_status dp_access_chain_key(void *ctx, const char *job, uint8_t out[32],
                              struct ts_err *err) TS_MUST_CHECK;
/* Once the shard registered: the data plane may ask the master about jobs (HELLOs wait for
 * this, up to 10 s). */
void dataplane_set_access(struct dataplane *dp, dp_access_fetch_fn fn, void *ctx);

/* Frames received and refused so far, over every connection. */
void dataplane_counters(struct dataplane *dp, uint64_t *in, uint64_t *refused);
/* For listener i (0 .. dp->n - 1): its connections open now and accepted since start. */
void dataplane_conns(struct dataplane *dp, size_t i, uint64_t *open, uint64_t *accepted);

/* shard_params's on_release, after partitions were freed (arg: the struct dataplane *): forgets
 * every pull hash (they are cached by partition address) and, when job names the job
 * released, its series on /metrics (shard_metrics_forget; docs/observability.md, "A job's
 * series end with it"). */
void dataplane_forget(void *arg, const char *job);

/* The job ended (the master releases it), or goes back to a snapshot: a connection of it
 * waiting in a pull for a step that will never come stops waiting (and closes, or, with the
 * job fenced for a rollback, refuses the pull with the step to continue from). */
void dataplane_end_job(struct dataplane *dp, const char *job);

/* The shard map moved to epoch (after the chains followed it): a worker of a reduce job may
 * have to seed a partition that lost every copy (docs/replication.md, "Reduce jobs that lose
 * every copy"), but not while its pull waits here for a step that needs it. So a pull of a
 * reduce job on a connection begun under an older map ends, and every later one is
 * refused, with TS_ESTALE: the worker fails over, says what it holds, and sends the step
 * again. */
void dataplane_remapped(struct dataplane *dp, uint64_t epoch);

/* Elastic jobs: the master's roster of job is roster (a heartbeat): where it grew since a
 * connection of the job last heard, the connection's pulls are answered TS_ESLOTS (slots.c). */
void dataplane_roster(struct dataplane *dp, const char *job, uint64_t roster);
/* The workers (their member ids, at most max into ids, each once) whose push or pull this
 * shard answered since the last call, and each one's last pushed step (steps[i], 0: none):
 * the heartbeat vouches for them (HeartbeatRequest.vouched; docs/scaling.md). Clears what
 * it returns. */
size_t dataplane_vouched(struct dataplane *dp, uint32_t *ids, uint64_t *steps, size_t max);

/* Listens on every transport that can run here (only the one named `only`, if set). */
ts_status dataplane_start(struct dataplane *dp, struct shard_params *sp, const char *host,
                          const char *only, struct ts_err *err) TS_MUST_CHECK;
/* Stops accepting, interrupts and joins every connection thread, closes the listeners. */
void dataplane_stop(struct dataplane *dp);

#endif
