/* rowcopy.h - copies of a sparse table's rows on the next shard of their chains, and their
 * taking over when a shard goes (docs/embeddings.md, "Copies of rows").
 *
 * On a cluster with replicas (`--replicas 2` or more), each row of a table is held twice: by
 * its head, the shard the ring gives it, and by its follower, the next shard of its chain
 * (ts_ring_chain_hash), both on the ring the table was placed on (struct shard_table's
 * `placed`). A shard keeps its own rows in stores[0] and, for each shard whose rows it
 * follows, a copy: a store of its own, fed the same pushes. The head passes every push of a
 * rank on to each of its followers (the ids that follower holds, none where it holds none),
 * before it acknowledges the push, so a copy is a BSP store that goes step for step with its
 * head's rows: what the head acknowledged, the copy has. Why pushes and not the updated rows:
 * the sums and the optimizer's update are the same bits on both sides, a push is smaller than
 * the rows and state it changes (Adam's rows are 3x their values), and a copy needs no
 * ordering of its own.
 *
 * When a shard goes, the new head of each of its rows (the ring without it) is that row's
 * follower, which holds the copy: it takes the copy over (owned: served to workers). A push
 * the dead shard had not acknowledged is sent again by its worker, under the new map,
 * flagged as a retry: a store that has it acknowledges it unchanged. A copy taken over is
 * not copied on: those rows have one copy until the master copies them anew (a join's move
 * on the map as it is, services/master/snapshot_auto.c) or the job's next rollback. A
 * map that leaves some chain with no live member is reported lost at once, and one that a
 * shard joined (it holds none of the rows the ring now gives it) unless the table is held
 * for a join's move (tables.h): the job goes back to its last snapshot. Rows keep two copies
 * with any replicas above 1.
 *
 * Threads: rowcopy_place runs with t->lock held exclusive (or before the table is
 * published); the readers (store_of, follower, keeps) with it held shared; rowcopy_rechain
 * takes it shared itself (under the registry lock): it reads the placement and changes the
 * stores' atomic flags, not the array.
 * Ownership: the stores, the ring and the followers are the table's (rowcopy_free). */
#ifndef TS_SHARD_ROWCOPY_H
#define TS_SHARD_ROWCOPY_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "tables.h"

/* Places t on cl's map (this shard: me): the ring, the followers of this shard's rows and,
 * with replicas, a copy for each shard this one follows (empty, at stores[0]'s step; those of
 * an earlier placement freed). stores[0] keeps t->t as it is. TS_ENOMEM, or the ring's error
 * (a map with no shard). */
ts_status rowcopy_place(struct shard_table *t, const struct ts_job *job,
                        struct ts_table_budget *budget, struct ts_cluster *cl, uint32_t me,
                        struct ts_err *err) TS_MUST_CHECK;

/* The origin of row id: the head of its chain on the placed ring. */
uint32_t rowcopy_origin(const struct shard_table *t, uint64_t id);
/* The store of origin (NULL: none here). */
struct table_store *rowcopy_store(struct shard_table *t, uint32_t origin);
/* The follower of row id (0: none, the table is not replicated). */
uint32_t rowcopy_follower(const struct shard_table *t, uint64_t id);
/* Whether store s holds row id (a snapshot's rows loaded into the stores). */
bool rowcopy_keeps(const struct shard_table *t, const struct table_store *s, uint64_t id);
/* The stores served to workers, their rows in all; and every store's bytes. Without waiting:
 * while a rollback places t, this shard's own store's. */
uint64_t rowcopy_rows(struct shard_table *t);
uint64_t rowcopy_bytes(struct shard_table *t);
/* The disk tier's figures of t's stores, summed (lag: the largest). */
void rowcopy_tiers(struct shard_table *t, struct ts_table_tiers *out);

/* The map of cl changed: the copies of the members that no longer hold their rows (they
 * left, or registered again as a new session) are taken over, whether or not a shard joined
 * too. Then: HELD, every row served by a shard that holds it; MISPLACED, every row held
 * still, but the map has a shard the table was not placed on (it joined, or came back as a
 * new session: a join's move places the rows anew, tables.h); LOST, some rows have no
 * holder left (a chain with no member that holds it, a copy that had refused a push, or a
 * table without copies whose shard went), which no move can mend: the job goes back to its
 * last snapshot. */
enum rowcopy_check { ROWCOPY_HELD, ROWCOPY_MISPLACED, ROWCOPY_LOST };
enum rowcopy_check rowcopy_rechain(struct shard_table *t, struct ts_cluster *cl);
/* Whether t is placed on the ring of cl's map as it is now: the same members, none of them
 * registered again since (t->lock held, shared or exclusive). */
bool rowcopy_on_ring(const struct shard_table *t, struct ts_cluster *cl);

/* Frees the copies, the ring and the followers (not stores[0]'s table: t->t). */
void rowcopy_free(struct shard_table *t);

#endif
