/* ring.h - which shard owns a partition key.
 *
 * Consistent hashing with virtual nodes, so adding or removing a shard moves about 1/N of the
 * keys, and only to or from that shard. The master publishes the member list with an epoch;
 * every client and shard builds the identical ring locally with this code, so the map must be
 * a pure function of (member set, vnodes): the hash is XXH3-64 with the fixed seed
 * TS_RING_SEED, every integer is encoded little-endian before hashing, and a shard's points
 * are derived from its id, never from its address, so it keeps them across restarts and moves.
 * docs/placement.md gives the exact byte encoding; test_ring.c pins it with golden values.
 *
 * Ownership: ts_ring_create() returns a ring the caller frees with ts_ring_free(); every other
 * function borrows the ring and the strings it is given, and keeps neither.
 * Threads: a built ring is immutable; share it between threads without locks.
 * Errors: only ts_ring_create() can fail (TS_EINVAL, TS_ENOMEM); lookups cannot. */
#ifndef TS_PLACEMENT_RING_H
#define TS_PLACEMENT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Virtual nodes per shard when ts_ring_create() is given 0. Chosen from measurements (see
 * docs/placement.md): 10,000 keys on 2,000 random sets of 3 or 4 shard ids never exceed
 * max/mean 1.13 (p99 1.09); 256 passes 1.15 only for lucky ids; more buy little, as the keys'
 * own sampling noise then dominates. Costs 12 bytes per point (12 KiB per shard). */
#define TS_RING_DEFAULT_VNODES 1024

/* The most virtual nodes per shard; more buys no balance worth the memory. */
#define TS_RING_MAX_VNODES 4096

/* The longest replica chain (docs/replication.md). */
#define TS_MAX_REPLICAS 8
/* A chain while shards join: its R members, then up to R joining ones (cluster.h). */
#define TS_MAX_CHAIN (2 * TS_MAX_REPLICAS)

/* Seed of every hash in this module: the ASCII bytes "tessera1" read big-endian. Changing it
 * (or the encoding) moves almost every key: it is a wire-format change. */
#define TS_RING_SEED UINT64_C(0x7465737365726131)

struct ts_ring;

/* Builds the ring of the shards shard_ids[0..n), each with `vnodes` points (0: the default).
 * shard_ids is borrowed and may be freed on return; its order does not matter. n may be 0 (an
 * empty ring, whose lookups return 0), in which case shard_ids may be NULL.
 * On TS_OK, *out is a new ring the caller owns, free with ts_ring_free().
 * TS_EINVAL: a shard id is 0 or appears twice (message names shard_ids[i]), shard_ids is NULL
 * with n > 0, vnodes > TS_RING_MAX_VNODES, or n * vnodes does not fit in memory sizes.
 * TS_ENOMEM: out of memory. */
ts_status ts_ring_create(const uint32_t *shard_ids, size_t n, unsigned vnodes,
                         struct ts_ring **out, struct ts_err *err) TS_MUST_CHECK;

/* Frees r; NULL is a no-op. */
void ts_ring_free(struct ts_ring *r);

/* The 64-bit position of the key (tensor, partition) on the ring, salt 0; independent of any
 * ring, so a caller may compute it once and use ts_ring_lookup_hash() against successive
 * epochs. tensor: borrowed, NUL-terminated, not NULL. */
uint64_t ts_ring_key_hash(const char *tensor, uint32_t partition);

/* The key hash of partition `partition` of a tensor placed with `salt` (docs/placement.md,
 * "Balance within a tensor: the placement salt"). Salt 0 gives ts_ring_key_hash exactly; any
 * other salt is hashed too, so the tensor's partitions land on other points. A tensor keeps
 * its salt for life, so its keys are as fixed as unsalted ones and every map keeps the ring's
 * guarantees for it (keys move only to a joining shard, only from a leaving one). */
uint64_t ts_ring_key_hash_salted(const char *tensor, uint32_t salt, uint32_t partition);

/* Rows of sparse embedding tables (docs/embeddings.md, "Batches on a worker") are keys too:
 * row `id` of table `table` sits at XXH3(le64(nh) || le64(id) || 'r'), nh the table name's
 * hash as a tensor's. The 17 bytes keep rows apart from every tensor key (12 or 16 bytes),
 * so one table spreads over every shard, and a shard joining or leaving moves only its rows.
 * ts_ring_name_hash: nh, computed once per table; ts_ring_row_hash: the row's key hash, to
 * look up with ts_ring_lookup_hash. table: borrowed, NUL-terminated, not NULL. */
uint64_t ts_ring_name_hash(const char *table);
uint64_t ts_ring_row_hash(uint64_t nh, uint64_t id);

/* Salts ts_ring_choose_salt tries by default, and the most partition lookups it makes in all:
 * a tensor of more than TS_RING_SALT_LOOKUPS / tries partitions gets fewer tries (its many
 * keys spread well anyway): choosing takes microseconds for a few partitions and about a
 * millisecond at most (docs/placement.md has the measurements). */
#define TS_RING_SALT_TRIES 256
#define TS_RING_SALT_LOOKUPS 16384

/* What ts_ring_choose_salt found, in bytes per shard. */
struct ts_ring_salt {
    uint32_t salt;                     /* the salt chosen */
    uint64_t max_share;                /* the busiest shard's bytes under it */
    uint64_t salt0_share;              /* ... under salt 0 */
    uint64_t floor;                    /* the least any placement on these shards can give */
    uint32_t tried;                    /* salts tried (it stops once one reaches floor) */
};

/* The salt in 0 .. tries-1 (tries 0: 1) that minimises the largest share of the tensor's
 * bytes any one shard of r heads, ties to the smaller salt: a pure function of (r, tensor,
 * sizes), so every worker under one map picks the same. Partitions 0 .. nparts-2 hold
 * part_bytes each, the last last_bytes (it may be short). Stops at the first salt that
 * reaches the floor (a perfect split); makes at most TS_RING_SALT_LOOKUPS lookups but always
 * tries salt 0. Salt 0 for an empty ring or no partitions. out (may be NULL): the figures. */
uint32_t ts_ring_choose_salt(const struct ts_ring *r, const char *tensor, uint32_t nparts,
                             uint64_t part_bytes, uint64_t last_bytes, uint32_t tries,
                             struct ts_ring_salt *out);

/* The shard id that owns (tensor, partition), or 0 when the ring is empty. r: borrowed. */
uint32_t ts_ring_lookup(const struct ts_ring *r, const char *tensor, uint32_t partition);

/* The shard id owning the first point at or after key_hash (wrapping past the top), or 0
 * when the ring is empty. O(log(members * vnodes)). */
uint32_t ts_ring_lookup_hash(const struct ts_ring *r, uint64_t key_hash);

/* The chain of a key, for replication (docs/replication.md): its owner first, then the next
 * distinct shards clockwise, up to `want` of them (fewer when the ring has fewer members).
 * Writes the ids to out[0..k) and returns k; out[0] is ts_ring_lookup's answer. Removing a
 * shard from the ring removes it from every chain it was in and appends the next distinct
 * shard to those chains; every other chain stays as it was. out: room for `want` ids. */
size_t ts_ring_chain(const struct ts_ring *r, const char *tensor, uint32_t partition,
                     size_t want, uint32_t *out);
size_t ts_ring_chain_hash(const struct ts_ring *r, uint64_t key_hash, size_t want,
                          uint32_t *out);

/* The number of shards in r, and whether shard id is one of them. */
size_t ts_ring_members(const struct ts_ring *r);
bool ts_ring_has(const struct ts_ring *r, uint32_t id);

/* The points of r (members x vnodes), and the hash of point i (< ts_ring_points), ascending:
 * the keys in (point i-1, point i] share one chain, ts_ring_chain_hash(r, point i), so a
 * walk over the points visits every chain of the ring (services/shard's copies of table rows
 * check that each keeps a live member). */
size_t ts_ring_points(const struct ts_ring *r);
uint64_t ts_ring_point(const struct ts_ring *r, size_t i);

/* The virtual nodes per shard r was built with (the default resolved, never 0). */
unsigned ts_ring_vnodes(const struct ts_ring *r);

/* A fingerprint of the whole map (member ids, vnodes, every point and its owner): equal
 * digests mean equal maps, on any host. For tests and logs ("ring epoch 7 digest %016llx"). */
uint64_t ts_ring_digest(const struct ts_ring *r);

#endif
