/* maphist.h - the shard maps the master handed out lately, by epoch, kept as each shard's
 * entry hash: what GetShardMap needs to answer a caller that holds one of them with only what
 * changed since (lib/cluster/mapdelta.h; docs/scaling.md, "The shard map").
 *
 * Holds the last MAPHIST_KEEP maps handed out (their epoch, ts_shard_map_hash, and each shard's
 * id and ts_shard_info_hash); a caller whose base is older, or whose hash is not one of them,
 * gets the whole map. Memory: 12 bytes a shard a map kept.
 * Ownership: embedded in struct master; maphist_init / maphist_fini. Threads: any (a mutex of
 * its own). */
#ifndef TS_MASTER_MAPHIST_H
#define TS_MASTER_MAPHIST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAPHIST_KEEP 16
#define MAPHIST_REMOVED_MAX 1024   /* ids one delta names gone; more: the whole map */

struct maphist {
    pthread_mutex_t mu;
    struct maphist_map {
        uint64_t epoch, hash;       /* epoch 0: an empty place */
        size_t n;
        uint32_t *ids;              /* by id, ascending */
        uint64_t *hashes;
    } maps[MAPHIST_KEEP];
    size_t next;                    /* the place the next new map takes */
    /* GetShardMap answers so far, [0] whole and [1] deltas, and their bytes (for /metrics) */
    uint64_t answers[2], bytes[2];
};

void maphist_init(struct maphist *h);
/* Counts one answer of packed size bytes, a delta or the whole map. */
void maphist_count(struct maphist *h, bool delta, size_t bytes);
/* The counts so far: answers[2], bytes[2] as struct maphist's. */
void maphist_counts(struct maphist *h, uint64_t answers[2], uint64_t bytes[2]);
void maphist_fini(struct maphist *h);

/* Notes the map of epoch (hash) handed out: n shards, ids ascending, each one's hash. A map
 * already kept is not kept twice; without memory it is not kept (its callers get whole maps). */
void maphist_note(struct maphist *h, uint64_t epoch, uint64_t hash, size_t n,
                  const uint32_t *ids, const uint64_t *hashes);

/* Whether the map of base_epoch with base_hash is kept and a delta from it fits; if so, for
 * the current map (n shards, ids ascending, their hashes): changed[i] says whether shard i is
 * new or changed since, and removed[0..*nremoved) holds the base's ids not in it (at most
 * removed_cap: more gone than that is answered whole, false). */
bool maphist_delta(struct maphist *h, uint64_t base_epoch, uint64_t base_hash, size_t n,
                   const uint32_t *ids, const uint64_t *hashes, bool *changed,
                   uint32_t *removed, size_t removed_cap, size_t *nremoved);

#endif
