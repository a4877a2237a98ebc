/* restart.h - what a master killed at any instruction takes back when it starts again
 * (docs/membership.md, "A master that restarts").
 *
 * Two files in the state directory (state.h, which replaces each whole and atomically;
 * workq.h and tasks.h keep their own there too):
 *   clock  the epoch and the ids reserved (MasterClock), written by the members' table under
 *          its lock (ts_members_cfg.durable: restart_clock) before any reply can carry a new
 *          epoch or id: neither goes back across a restart;
 *   state  members, jobs, the jobs' data maps, the snapshot branch and the data-plane key
 *          (MasterState), kept by state.h's saver with this file's encoder (registered by
 *          restart_load, the saver started by restart_start): written whenever it differs
 *          from what was last written, checked every STATE_PERIOD_MS, and at once, before
 *          the reply, for a Deregister (master_state_sync).
 * What the state file may lack after a kill (changes of the last period) mends itself: a
 * member the restarted master does not know gets NOT_FOUND at its heartbeat and registers
 * again (its RegisterWorker names its job and rank again); one it believes alive that died
 * meanwhile is declared dead when its fresh lease runs out. A Deregister would not mend: the
 * member is gone, and a master that forgot it would find its lease run out and take a worker
 * that finished for one that died (its job abandoned, a kept job's parameters freed; issue
 * 44).
 * Order at start: master_state_open, restart_read, the tables and the snapper (given
 * restart_branch), restart_load, and once the master runs, restart_start.
 * Ownership: struct master_saved is the caller's (main.c's), emptied by restart_free.
 * Threads: restart_clock from any thread (the members' lock serialises it); the rest from
 * main's. */
#ifndef TS_MASTER_RESTART_H
#define TS_MASTER_RESTART_H

#include <stdbool.h>
#include <stddef.h>

#include "members.h"
#include "state.h"
#include "util/err.h"
#include "util/names.h"

/* A restarted master gives every member it knows this long, beyond its lease, to reach it
 * again. Members' heartbeats come back within a second of the master (lib/rpc/client.c, the
 * reconnect backoff); the grace is for a loaded host, and for a member whose heartbeat was
 * due while the master was down. A shard that died meanwhile is still found at once by the
 * reports of its peers. */
#define RESTART_GRACE_MS 10000
#define RESTART_MAX_RERUN 16

struct master;

struct master_saved {
    /* What restart_read read (NULL: no such file), until restart_load. */
    struct Tessera__V1__MasterState *state;
    struct Tessera__V1__MasterClock *clock;
    /* Rollbacks that were running when the master stopped (restart_load), requested again
     * by restart_start. */
    char rerun[RESTART_MAX_RERUN][TS_JOB_ID_MAX + 1];
    size_t nrerun;
};

/* Reads and parses the clock and state files of s's directory into r (nothing without a
 * directory). TS_ECORRUPT for a file that does not parse or a format this master does not
 * read; TS_EIO naming the path. */
ts_status restart_read(struct master_saved *r, struct master_state *s,
                       struct ts_err *err) TS_MUST_CHECK;
/* The snapshot branch the state names (for snapper_open's resume), or NULL. */
const char *restart_branch(const struct master_saved *r);
/* Loads what r holds into m's empty members, jobs, data maps and the snapper's record of
 * each job's newest snapshot; *restored says whether there was a state (a first start has
 * none). Refuses (TS_EINVAL, naming the flag) a state written under other --vnodes or
 * --replicas. Rollbacks that were running are requested again by restart_start. From this
 * call on, master_state_sync writes m's state file. */
ts_status restart_load(struct master_saved *r, struct master *m, bool *restored,
                       struct ts_err *err) TS_MUST_CHECK;
/* ts_members_cfg.durable: writes the clock file. ctx: the struct master_state *. */
ts_status restart_clock(void *ctx, const struct ts_members_clock *c, struct ts_err *err);
/* Once m runs: re-requests interrupted rollbacks and starts the saver (nothing is written
 * without a directory). */
void restart_start(struct master_saved *r, struct master *m);
void restart_free(struct master_saved *r);

#endif
