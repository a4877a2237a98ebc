/* shm_internal.h - what the files of the shm backend share: the layout of the shared header
 * and rings, the listener and connection structs, and the few functions one file calls in
 * another. shm_setup.c makes connections (host identity, accepting, the memfd and its
 * mappings); shm_dir.c keeps the listener's socket in a directory only its user (and group)
 * can reach; shm.c moves bytes through connections and holds the ops table. The design is
 * described at the top of shm.c. Not part of lib/transport's interface. */
#ifndef TS_TRANSPORT_SHM_INTERNAL_H
#define TS_TRANSPORT_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/internal.h"
#include "transport/transport.h"

#define SHM_MAGIC 0x314d485354ull      /* "TSHM1" */
#define SHM_VERSION 2                   /* 2: data_need, rings mapped twice */
/* A ring's bytes, per direction: 16 MiB unless TESSERA_SHM_RING (util/knobs.c) says another
 * power of two within these. */
#define RING_MIN (64u << 10)
#define RING_MAX (1u << 30)
#define CHUNK (256u << 10)              /* bytes copied between publishing the counter */
#define SLICE_MS 50                     /* a sleeper checks the peer is alive this often */
#define SPIN_FIRST_US 2                 /* spinning before sleeping: for a first byte, */
#define SPIN_MID_US 200                 /* and mid-message: the peer is copying a chunk */
#define HELLO_MS 5000                   /* the hello follows connect() at once */
/* Accepted sockets whose hello has not come yet, per listener: at most PENDING_MAX, and
 * PENDING_PER_UID of one user (shm_accept). */
#define PENDING_MAX 64
#define PENDING_PER_UID 8
#define SHM_PATH_MAX 108                /* sizeof(sun_path) */
#define SHM_SOCK_NAME "sock"            /* the socket, in its listener's directory */
#define SHM_NO_GROUP ((gid_t)-1)

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory atomics must be lock-free (address-free)");

/* One direction, in shared memory. Each group in its own cache line: head is written only by
 * the producer, tail only by the consumer. */
struct ring_ctl {
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) _Atomic uint32_t data_seq;    /* futex: the consumer waits for data */
    _Atomic uint32_t data_waiting;
    _Atomic uint64_t data_need;                /* the head the sleeping consumer waits for */
    _Alignas(64) _Atomic uint32_t space_seq;   /* futex: the producer waits for space */
    _Atomic uint32_t space_waiting;
    _Alignas(64) _Atomic uint32_t writer_closed;
    _Atomic uint32_t reader_closed;
};

/* The start of the memfd; the ring data follows at DATA_OFF. Written once by the connector
 * before the fd is passed, then read-only apart from the ring counters. */
struct shm_hdr {
    uint64_t magic, version, ring_size;
    struct ring_ctl ring[2];                    /* [0]: connector -> acceptor; [1]: back */
};

#define DATA_OFF ((sizeof(struct shm_hdr) + 4095) & ~(size_t)4095)

/* Sent with the memfd over the Unix socket; 64-bit fields only, so no padding. */
struct hello {
    uint64_t magic, version, ring_size, map_size;
};

/* A connection accepted from an allowed user, waiting for its hello. */
struct shm_pending {
    int sock;
    uid_t uid;
    pid_t pid;
    int64_t deadline;         /* ts_now_ms() by which the hello must have come */
};

struct shm_listener {
    struct ts_listener base;
    int fd;
    gid_t group;                          /* let in besides our uid, or SHM_NO_GROUP */
    char dir[SHM_PATH_MAX];               /* ours alone; unlisten removes it */
    char path[SHM_PATH_MAX];              /* the socket in dir */
    size_t npending;                      /* accept's thread only, like the rest */
    struct shm_pending pending[PENDING_MAX];   /* oldest first */
};

struct shm_conn {
    struct ts_conn base;
    int sock;                 /* kept open to notice the peer's death (hang-up) */
    uint8_t *map;             /* the header, DATA_OFF bytes */
    uint8_t *ring_map[2];     /* each ring mapped twice in a row: 2 * size bytes of addresses */
    uint64_t size;            /* ring bytes, a power of two */
    struct ring_ctl *tx, *rx;
    uint8_t *txd, *rxd;
    uint64_t tx_head;         /* written but maybe not yet published (sender thread only) */
    atomic_uint intr;         /* an interrupt is pending */
    atomic_bool shut;
};

/* shm.c */
struct msghdr;
/* The descriptors that came with m, a message recvmsg filled (call it only when recvmsg did
 * not fail): the first into *fd (-1: none), every other closed at once, so that a peer
 * cannot leave descriptors open in this process; returns how many came. */
size_t shm_take_fds(struct msghdr *m, int *fd);

/* shm_setup.c */
ts_status shm_probe(struct ts_err *e);
bool shm_usable(const struct ts_blob *peer);
ts_status shm_listen(const char *host, struct ts_listener **out, struct ts_blob *addr,
                     struct ts_err *e);
void shm_unlisten(struct ts_listener *base);
ts_status shm_accept(struct ts_listener *base, int ms, struct ts_conn **out, struct ts_err *e);
ts_status shm_connect(const struct ts_blob *to, int ms, struct ts_conn **out, struct ts_err *e);
/* Unmaps the header and both rings of c (what its mapping step mapped). */
void shm_unmap_all(struct shm_conn *c);
/* Tests only: the hello timeout of listeners from now on (ms > 0; else HELLO_MS again). */
void shm_set_hello_ms(int ms);

/* shm_dir.c */
/* Makes a listener's directory (SHM_PATH_MAX bytes into dir) under the base directory, after
 * sweeping the ones dead listeners of this user left there: mode 0700, or 0750 and given to
 * the group $TESSERA_SHM_GROUP names (*group; SHM_NO_GROUP when none). TS_EINVAL for a bad
 * group or a base too long for a socket path, TS_EIO where the directory cannot be made. */
ts_status shm_dir_make(char *dir, gid_t *group, struct ts_err *e);
/* Binds fd to the socket in dir (its path into path, SHM_PATH_MAX bytes), usable by our uid
 * and by group unless SHM_NO_GROUP. */
ts_status shm_dir_bind(int fd, const char *dir, gid_t group, char *path, struct ts_err *e);
/* Removes dir's socket, then dir. */
void shm_dir_remove(const char *dir);
/* Whether path is a socket this process can reach, in a directory only its owner can change,
 * held by that owner, and one its listener would let us into (our uid, or our group let in).
 * *owner: the directory's owner, whom the connected socket's SO_PEERCRED must show. */
bool shm_dir_check(const char *path, uid_t *owner);

#endif
