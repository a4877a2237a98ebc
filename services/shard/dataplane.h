/* dataplane.h - the shard's data-plane server (see dataplane.c). */
#ifndef TS_SHARD_DATAPLANE_H
#define TS_SHARD_DATAPLANE_H

#include <pthread.h>
#include <stdatomic.h>

#include "params.h"
#include "transport/transport.h"

#define DP_MAX_LISTENERS 4
#define DP_SUM_CACHE 1024           /* pull hashes remembered (dataplane.c pull_sum) */

struct dataplane;

struct dp_listener {
    struct dataplane *dp;
    struct ts_listener *l;
    struct ts_blob addr;            /* what workers connect to, published via the master */
    pthread_t thread;
};

struct dp_sum {
    const struct ts_part *part;
    uint64_t version, sum;
};

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
    struct dp_listener listeners[DP_MAX_LISTENERS];
    size_t n;
    pthread_mutex_t mu;
    struct dp_conn *conns;
    atomic_bool stop;
    atomic_uint_least64_t closed_in, closed_refused;   /* counters of connections gone */
    pthread_mutex_t sum_mu;
    pthread_mutex_t id_mu;          /* the connections' job ids (after mu) */
    struct dp_sum sums[DP_SUM_CACHE];
    /* Testing only: $TESSERA_TEST_FLIP_REPLICA=TENSOR:PARTITION makes this shard flip one bit
     * of every image of that partition it takes as a follower, a planted difference for
     * `tessera verify replicas` to find. */
    bool flip;
    uint32_t flip_tensor, flip_part;
    /* The data-plane handshake (transport/auth.h; docs/security.md). require_auth: set at
     * start when the shard serves mutual TLS; then every connection must do the handshake
     * before any other frame. key: the cluster's data key, once the master gave it
     * (dataplane_set_key); a HELLO before that is refused as "retry". */
    bool require_auth;
    atomic_bool keyed;
    uint8_t key[32];
};

/* The cluster's data-plane key from the shard's registration (ts_membership_data_key). */
void dataplane_set_key(struct dataplane *dp, const uint8_t key[32]);

/* Frames received and refused so far, over every connection. */
void dataplane_counters(struct dataplane *dp, uint64_t *in, uint64_t *refused);

/* Forgets every pull hash (they are cached by partition address): for shard_params's
 * on_release, after a job's partitions are freed. arg is the struct dataplane *. */
void dataplane_forget(void *arg);

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

/* Listens on every transport that can run here (only the one named `only`, if set). */
ts_status dataplane_start(struct dataplane *dp, struct shard_params *sp, const char *host,
                          const char *only, struct ts_err *err) TS_MUST_CHECK;
/* Stops accepting, interrupts and joins every connection thread, closes the listeners. */
void dataplane_stop(struct dataplane *dp);

#endif
