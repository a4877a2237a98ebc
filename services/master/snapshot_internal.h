/* snapshot_internal.h - what the snapper's files (snapshot.c, snapshot_take.c,
 * snapshot_branch.c) share besides struct snapper (snapshot.h). */
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

#endif
