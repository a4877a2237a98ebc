/* snapshot_internal.h - what the snapper's files (snapshot.c, snapshot_take.c,
 * snapshot_auto.c, snapshot_branch.c) share besides struct snapper (snapshot.h). */
#ifndef TS_MASTER_SNAPSHOT_INTERNAL_H
#define TS_MASTER_SNAPSHOT_INTERNAL_H

#include "snapshot.h"

/* job's record (added, in place of the oldest when full, if add); stat_mu held. */
struct snap_job *snap_job_rec(struct snapper *sn, const char *job, bool add);
/* job's newest snapshot is hex at step; stat_mu held. */
void snap_note_job(struct snapper *sn, const char *job, const char *hex, uint64_t step);

/* Branch settling, from snapper_open (snapshot_branch.c). The snapshot restore names becomes
 * the tip (named: the branch it is the tip of, or ""). */
ts_status snap_resolve_restore(struct snapper *sn, const char *restore,
                               char named[TS_STORE_REF_MAX + 1], struct ts_err *err);
/* --branch, the restored snapshot's branch, or a new one; HEAD moved to it. */
ts_status snap_settle_branch(struct snapper *sn, const char *restore, const char *branch,
                             struct ts_err *err);
/* A restarted master goes on committing to the branch it had (resume). */
ts_status snap_continue_branch(struct snapper *sn, const char *resume, struct ts_err *err);

#define SNAP_CALL_MS 10000        /* ShardStatus, ArmSnapshot */
#define SNAP_STALE_RETRY_MS 250   /* a snapshot the map moved under: again after */

/* What a snapshot is asked for: job ("": the only one), message and tag (may be ""). fixed:
 * step is the one to take (the automatic loop); else the newest step any partition is at. */
struct take_req {
    const char *job, *message, *tag;
    int timeout_ms;
    bool fixed;
    uint64_t step;
    bool hold;                 /* the job's tables held at the step (a join's move) */
};

/* What a snapshot became. */
struct taken {
    char hex[TS_STORE_HEX_LEN + 1];
    uint64_t step, written;
};

/* snapshot_take.c. snap_take: the snapshot itself (discover, arm, write, commit); sn->mu
 * held. snap_take_while_stale: a snapshot taken now (one step ahead of training), again
 * while the map moves under it (a shard died or joined) or the job is still being
 * registered, which settles within a heartbeat or two, for as long as timeout_ms lasts;
 * hold: its tables held at its step (a move's). sn->mu held. snap_count_move: a move of
 * tables ended (result: moved, failed, gave_up) for /metrics; held_ms: a done one's hold. */
ts_status snap_take(struct snapper *sn, const struct take_req *req, struct taken *out,
                    struct ts_err *err) TS_MUST_CHECK;
ts_status snap_take_while_stale(struct snapper *sn, const char *job, const char *message,
                                const char *tag, int timeout_ms, bool hold, struct taken *t,
                                struct ts_err *err) TS_MUST_CHECK;
void snap_count_move(const char *result, uint32_t held_ms);

#endif
