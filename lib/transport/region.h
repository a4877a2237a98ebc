/* region.h - memory shared with a process on the same host, passed by file descriptor.
 *
 * Why: on one host the cheapest way to move a tensor is not to move it. A shard keeps each
 * tensor's parameters in a region that co-located workers map read-only, so a pull copies
 * nothing on the shard; a worker may keep its gradient in a region its shards read in place,
 * so a push copies nothing at all (docs/transport.md, "Shared regions"). What may be read or
 * written when is the data-plane protocol's business (part.h, tessera.h), not this module's.
 *
 * A region is a memfd sealed against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW) before
 * anyone else sees it, so a peer that maps it can never be made to fault (SIGBUS) by a later
 * ftruncate: ts_region_map checks the seals and the size before mapping. F_SEAL_SEAL comes
 * last, so no receiver can add a seal of its own (one against writes would stop the creator).
 *
 * Who may write is chosen at creation. Every region handed to a peer today is TS_REGION_OWNED:
 * sealed with F_SEAL_FUTURE_WRITE once the creator's own writable mapping exists. The kernel
 * then refuses any new writable shared mapping, write() and hole punching, to everyone, while
 * the creator's mapping still writes. A read-only descriptor would not do: a memfd's inode is
 * mode 0777, so a receiver could re-open /proc/self/fd/N read-write. So a shard's parameters
 * change only through the shard, and a worker's gradient only through that worker. The
 * receiver checks the seal (ts_region_map with TS_REGION_OWNED, ts_region_map_at): a region
 * a third process could write is refused. The creator must never need a second writable
 * mapping of it (there can be none).
 *
 * Descriptors travel beside the byte stream, over a connection whose transport can pass them
 * (transport.h: ts_tp_can_share, ts_tp_send_fd, ts_tp_recv_fd).
 *
 * Ownership: a struct ts_region owns its mapping, and its descriptor while fd >= 0, until
 * ts_region_free. ts_region_map takes the descriptor it is given, on success and on failure.
 * Threads: none of its own; the struct is not locked. */
#ifndef TS_TRANSPORT_REGION_H
#define TS_TRANSPORT_REGION_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

struct ts_region {
    void *base;                 /* NULL: none */
    size_t size;                /* bytes mapped: the memfd's size, a whole number of pages */
    int fd;                     /* -1 once closed (a mapped peer region needs none) */
};

#define TS_REGION_NONE ((struct ts_region){ NULL, 0, -1 })

/* The system's page size (mappings of parts of a region start at multiples of it). */
size_t ts_page_size(void);
static inline size_t ts_page_round(size_t n)
{
    size_t pg = ts_page_size();
    return (n + pg - 1) / pg * pg;
}

/* Who may write a region's memory once its descriptor is shared. */
enum ts_region_access {
    TS_REGION_SHARED,   /* whoever maps it: a receiver may map it writable */
    TS_REGION_OWNED,    /* only the creator, through the mapping ts_region_create made */
};

/* A new zero-filled region of at least `bytes` (rounded up to pages), mapped read-write, its
 * fd kept for sharing, its writers as access says. name shows in /proc/PID/maps. TS_ENODEV
 * where memfds (or, for TS_REGION_OWNED, F_SEAL_FUTURE_WRITE: Linux >= 5.1) are missing (the
 * caller falls back to private memory), TS_ENOMEM where it cannot be mapped. */
ts_status ts_region_create(const char *name, size_t bytes, enum ts_region_access access,
                           struct ts_region *r, struct ts_err *err) TS_MUST_CHECK;

/* Maps a region a peer sent: fd must be a memfd sealed against shrinking and growing and hold
 * at least min_bytes, else TS_ECORRUPT naming what is wrong. TS_REGION_OWNED: it must also be
 * sealed against writes by anyone but its creator (F_SEAL_FUTURE_WRITE, or F_SEAL_WRITE), else
 * TS_ECORRUPT; mapped read-only. TS_REGION_SHARED: mapped read-write. The fd is closed either
 * way (r->fd is -1). */
ts_status ts_region_map(int fd, size_t min_bytes, enum ts_region_access access,
                        struct ts_region *r, struct ts_err *err) TS_MUST_CHECK;

/* Maps bytes [off, off + len) of fd read-only at addr, replacing what the caller had there
 * (its own reservation: MAP_FIXED). off and addr must be page-aligned; fd checked as in
 * ts_region_map with TS_REGION_OWNED; off + len may end inside the last page. fd stays the
 * caller's. */
ts_status ts_region_map_at(int fd, void *addr, size_t off, size_t len,
                           struct ts_err *err) TS_MUST_CHECK;

/* Unmaps and closes; r becomes TS_REGION_NONE. Safe on TS_REGION_NONE. */
void ts_region_free(struct ts_region *r);

#endif
