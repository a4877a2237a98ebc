/* views.h - what each alive shard says of itself (ShardStatus: the chains it heads and
 * follows, copies sent and to do, bytes held, frames refused), for the status page: the same
 * columns `tessera status` prints.
 *
 * Why a thread: the page's HTTP server answers from one thread, /metrics included, and a shard
 * that hangs must not stall it. A thread asks every alive shard once a second while the page
 * is watched (an /api/status within the last VIEWS_IDLE_MS); the page reads the last answers.
 * Ownership: views_start returns a table freed by views_stop (which joins the thread).
 * Threads: views_json may be called from any thread. */
#ifndef TS_MASTER_VIEWS_H
#define TS_MASTER_VIEWS_H

#include <stdint.h>

#include "members.h"
#include "util/json.h"

#define VIEWS_POLL_MS 1000
#define VIEWS_IDLE_MS 10000
#define VIEWS_CALL_MS 800

struct views;

struct views *views_start(struct ts_members *members);   /* NULL: none (the page shows -) */
void views_stop(struct views *v);
/* The page was asked for now: wakes the thread if it sleeps. */
void views_watched(struct views *v);
/* Shard id's last answer as members of j's current object (pid, heads, follows, lag,
 * promotions, copies_sent, copies_pending, bytes, frames_refused, partitions_lost,
 * partitions_reseeded, moves_pending, the tables' budgets: table_mem_used, _limit,
 * table_index_used, _limit; view_s_ago); nothing if it never answered. */
void views_json(struct views *v, uint32_t id, struct ts_json *j);
/* Array "tables" in j: each job's sparse table summed over the shards that answered the last
 * round (shards: how many), as `tessera status --json`'s table_list: rows, bytes, rows/s,
 * row lifetime, and the disk tier's figures in "disk_tier" where it has one. */
void views_tables_json(struct views *v, struct ts_json *j);

#endif
