/* restart.h - the master's durable state: what a master killed at any instruction takes back
 * when it starts again (docs/membership.md, "A master that restarts").
 *
 * Two files in the state directory (tessera-master --state-dir; workq.h keeps a third, "work"),
 * each replaced whole and atomically (written to a temporary file, fsync'd, renamed over the
 * old one, the directory fsync'd), so a kill leaves the old file or the new one, never a mix:
 *   clock  the epoch and the ids reserved (MasterClock), written by the members' table under
 *          its lock (ts_members_cfg.durable) before any reply can carry a new epoch or id:
 *          neither goes back across a restart;
 *   state  members, jobs and the jobs' data maps (MasterState), written by a thread of its
 *          own whenever they differ from what it last wrote, checked every STATE_PERIOD_MS,
 *          and at once, before the reply, for a Deregister (master_state_sync).
 * What the state file may lack after a kill (changes of the last period) mends itself: a
 * member the restarted master does not know gets NOT_FOUND at its heartbeat and registers
 * again (its RegisterWorker names its job and rank again); one it believes alive that died
 * meanwhile is declared dead when its fresh lease runs out. A Deregister would not mend: the
 * member is gone, and a master that forgot it would find its lease run out and take a worker
 * that finished for one that died (its job abandoned, a kept job's parameters freed; issue
 * 44). A lock (flock) on the directory keeps a second master off it.
 * Ownership: struct master_state is embedded in struct master (master.h); dir is copied.
 * Threads: master_state_durable from any thread (the members' lock serialises it);
 * master_state_sync from any thread, and the saver, one thread of its own, take save_mu. */
#ifndef TS_MASTER_STATE_H
#define TS_MASTER_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "members.h"
#include "util/err.h"
#include "util/names.h"

#define STATE_PERIOD_MS 100
/* A restarted master gives every member it knows this long, beyond its lease, to reach it
 * again. Members' heartbeats come back within a second of the master (lib/rpc/client.c, the
 * reconnect backoff); the grace is for a loaded host, and for a member whose heartbeat was
 * due while the master was down. A shard that died meanwhile is still found at once by the
 * reports of its peers. */
#define STATE_RESTART_GRACE_MS 10000
#define STATE_MAX_RERUN 16

struct master;

struct master_state {
    char *dir;                  /* NULL: nothing is kept (no --state-dir) */
    int lock_fd;
    pthread_t saver;
    bool saving;
    pthread_mutex_t mu;         /* stop, cv */
    pthread_cond_t cv;
    bool stop;
    pthread_mutex_t save_mu;    /* one writer of the state file at a time; last, last_len */
    void *last;                 /* the state file's bytes as last written */
    size_t last_len;
    /* What master_state_open read (NULL: no such file), until master_state_load. */
    struct Tessera__V1__MasterState *saved;
    struct Tessera__V1__MasterClock *saved_clock;
    struct master *m;           /* what the saver writes (master_state_start) */
    /* Rollbacks that were running when the master stopped (master_state_load), requested
     * again by master_state_start. */
    char rerun[STATE_MAX_RERUN][TS_JOB_ID_MAX + 1];
    size_t nrerun;
};

/* Opens (creating) dir, locks it and reads what it holds; dir NULL: a master without durable
 * state. TS_EEXIST if another master holds it; TS_ECORRUPT for a file that does not parse;
 * TS_EIO naming the path otherwise. */
ts_status master_state_open(struct master_state *s, const char *dir,
                            struct ts_err *err) TS_MUST_CHECK;
/* The snapshot branch the state names (for snapper_open's resume), or NULL. */
const char *master_state_branch(const struct master_state *s);
/* Loads what dir held into m's empty members, jobs, data maps and the snapper's record of
 * each job's newest snapshot; *restored says whether there was a state (a first start has
 * none). Refuses (TS_EINVAL, naming the flag) a state written under other --vnodes or
 * --replicas.
 * Rollbacks that were running are requested again once m runs (master_state_start). */
ts_status master_state_load(struct master_state *s, struct master *m, bool *restored,
                            struct ts_err *err) TS_MUST_CHECK;
/* ts_members_cfg.durable: writes the clock file. ctx: the struct master_state *. */
ts_status master_state_durable(void *ctx, const struct ts_members_clock *c,
                               struct ts_err *err);
/* Other modules' files in the same directory (workq.h): whether there is a directory (false:
 * nothing is durable, put does nothing), a file replaced whole and atomically as the clock
 * file is, and a file's bytes (*out malloc'd, the caller frees it; NULL when there is no such
 * file or no directory). TS_EIO naming the path. */
bool master_state_durable_dir(const struct master_state *s);
ts_status master_state_put(struct master_state *s, const char *name, const void *p, size_t n,
                           struct ts_err *err) TS_MUST_CHECK;
ts_status master_state_get(struct master_state *s, const char *name, uint8_t **out, size_t *n,
                           struct ts_err *err) TS_MUST_CHECK;
/* Writes m's state file now if it differs from what was last written, and returns once it is
 * on disk: for a change that a restarted master must not forget once it is acknowledged (a
 * Deregister). Blocks for the write (an fsync or two); callers whose change an earlier call
 * wrote find nothing to write. TS_OK without a dir; TS_EIO naming the path, TS_ENOMEM. */
ts_status master_state_sync(struct master_state *s, struct master *m,
                            struct ts_err *err) TS_MUST_CHECK;
/* Starts the saver thread (nothing without a dir) and re-requests interrupted rollbacks. */
void master_state_start(struct master_state *s, struct master *m);
/* Stops the saver after a last save. */
void master_state_stop(struct master_state *s);
void master_state_close(struct master_state *s);

#endif
