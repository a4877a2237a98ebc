/* rdma_internal.h - what the files of the rdma backend share (the design is at the top of
 * rdma.c): the connection data on the wire, which tests/unit/test_transport.c's raw verbs peer
 * also sends (wrong, on purpose); the sizes; the connection and listener structs; and the few
 * functions one file calls in another. rdma_setup.c makes connections (probing, addresses, a
 * connection's resources, listening, accepting, connecting); rdma.c moves the bytes and holds
 * the ops table. Not part of lib/transport's interface. */
#ifndef TS_TRANSPORT_RDMA_INTERNAL_H
#define TS_TRANSPORT_RDMA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport/transport.h"

#define RDMA_WIRE_MAGIC 0x3141444d52535400ull   /* "\0TSRDMA1" */
#define RDMA_WIRE_VERSION 1
#define RDMA_RING (4u << 20)   /* receive ring bytes per connection and direction */

/* Sent in the REQ (connector) and the REP (acceptor): 48 bytes, within the 56 an RC REQ
 * carries. 64-bit fields first, no padding, the host's byte order (both ends run this build's
 * format; version says so). ring_*: where the peer writes its bytes; credit_*: the 64-bit word
 * where the peer writes how many of ours it has consumed. */
struct rdma_wire_info {
    uint64_t magic;
    uint64_t ring_addr, ring_size, credit_addr;
    uint32_t ring_rkey, credit_rkey, version, pad;
};

_Static_assert(sizeof(struct rdma_wire_info) == 48, "an RC REQ carries 56 bytes of private data");

#define RDMA_CHUNK (256u << 10)         /* the most one write carries */
#define RDMA_SQ_DEPTH 128               /* writes in flight per connection (data and credits) */
#define RDMA_RQ_DEPTH 512               /* receives posted for the peer's WRITE_WITH_IMM */
#define RDMA_CQ_BATCH 16
#define RDMA_CM_MS 5000                 /* address, route and connection setup, each */
#define RDMA_PENDING_MAX 64             /* accepted, not yet established */
#define RDMA_SLICE_MS 50                /* a sleeper looks at the peer this often */
#define RDMA_SPIN_US 20                 /* polling before sleeping */
#define RDMA_LINGER_MS 2000             /* close() waits this long for writes in flight */
/* A body of at least this many bytes in pinned memory (transport.h) is written from where it
 * lies; a smaller one is copied (its copy costs less than the lookup of its registration).
 * Pushes between hosts are partitions of 60 KiB and more (ts_partition_bytes_between_hosts). */
#define RDMA_IN_PLACE_MIN (16u << 10)
#define RDMA_MRS 64                     /* pinned ranges registered per connection (one a
                                         * tensor for the SDK: past that, turn by turn) */
/* wr_id of a send's work requests: its completion is reaped by kind. */
enum { RDMA_WR_COPY = 0, RDMA_WR_CREDIT = 1, RDMA_WR_IN_PLACE = 2 };

struct rdma_conn {
    struct ts_conn base;
    struct rdma_event_channel *ec;   /* this connection's own, once established */
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;     /* the receive queue's completions */
    struct ibv_cq *scq, *rcq;
    struct ibv_mr *rx_mr, *tx_mr, *cred_mr;
    uint8_t *rx;                     /* RDMA_RING bytes mapped twice in a row */
    uint8_t *tx;                     /* staging, RDMA_RING bytes */
    _Atomic uint64_t *cred;          /* the peer's consumed count, written by the peer */
    struct rdma_wire_info peer;
    int64_t deadline;                /* the listener's: when a pending one is given up */
    /* Sending thread. */
    uint64_t tx_head;                /* bytes ever written to the peer's ring */
    struct { uint64_t pin; struct ibv_mr *mr; } mrs[RDMA_MRS];   /* pinned ranges registered:
                                      * pin 0 is a free entry */
    uint64_t mrs_gen;                /* ts__pin_gen() when mrs was last pruned */
    unsigned mrs_next;               /* the entry a full table gives up next */
    bool mrs_failed;                 /* a registration failed (said once) */
    /* Receiving thread. */
    uint64_t rx_avail;               /* bytes the peer's writes announced */
    uint64_t rx_tail;                /* bytes released */
    uint64_t rx_credited;            /* the last count written to the peer */
    bool broken;                     /* the peer broke the protocol: nothing more is read */
    bool cq_armed;
    /* Both. */
    pthread_mutex_t scq_mu, cm_mu;
    atomic_uint sq_out;              /* writes posted and not reaped */
    atomic_uint in_place_out;        /* of them, writes from pinned memory */
    atomic_bool dead;                /* the connection ended: why says how */
    char why[96];
    int efd;                         /* interrupt(): readable while one is pending */
    atomic_bool shut;
};

struct rdma_listener {
    struct ts_listener base;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    pthread_t thread;                         /* listen_main: the requests */
    int stop_fd;                              /* unlisten() stops it */
    size_t npending;                          /* its own: accepted, not yet established */
    struct rdma_conn *pending[RDMA_PENDING_MAX];
    pthread_mutex_t mu;                       /* the queue below */
    pthread_cond_t cv;
    size_t nready;                            /* established, for accept(), oldest first */
    struct rdma_conn *ready[RDMA_PENDING_MAX];
};

/* rdma_setup.c: the ops that make connections, and a connection's end. */
ts_status rdma_probe(struct ts_err *e);
bool rdma_usable(const struct ts_blob *peer);
ts_status rdma_listen_on(const char *host, struct ts_listener **out, struct ts_blob *addr,
                         struct ts_err *e);
void rdma_unlisten(struct ts_listener *base);
ts_status rdma_accept_conn(struct ts_listener *base, int ms, struct ts_conn **out,
                           struct ts_err *e);
ts_status rdma_connect_to(const struct ts_blob *to, int ms, struct ts_conn **out,
                          struct ts_err *e);
/* Frees c and everything it holds (a queue pair first, then registrations, queues, id). */
void rdma_conn_free(struct rdma_conn *c);
/* Posts n receives (no buffers: each takes one WRITE_WITH_IMM); 0 or the verbs error. */
int rdma_post_recvs(struct rdma_conn *c, int n);

/* rdma.c */
void rdma_close(struct ts_conn *base);

#endif
