/* master.h - what the master's main.c and rpc.c share: the service's state and its table. */
#ifndef TS_MASTER_MASTER_H
#define TS_MASTER_MASTER_H

#include <stdatomic.h>
#include <stdint.h>

#include "datamap.h"
#include "jobs.h"
#include "maphist.h"
#include "members.h"
#include "progress.h"
#include "rollback.h"
#include "rpc/rpc.h"
#include "snapshot.h"
#include "state.h"
#include "tasks.h"
#include "views.h"
#include "workq.h"

struct master {
    struct ts_members *members;
    int64_t started_ms;
    uint32_t restarts;              /* --restarts: this process is restart N of the master */
    bool restored;                  /* it took back a state from --state-dir */
    int64_t lease_ms;               /* the default lease: the reaper checks 20 times one */
    struct snapper snap;            /* snapshots (store NULL without --store) */
    struct datamap data;            /* data checksums per job */
    struct jobs *jobs;              /* the job table */
    struct workq *work;             /* dynamic jobs' data queues (workq.h) */
    struct tasks *tasks;            /* priority tasks (tasks.h) */
    struct rollbacks rb;            /* rollbacks to run (rollback.c) */
    struct master_state state;      /* the state directory (--state-dir; state.h) */
    struct progress *progress;      /* the jobs' progress for the status page (progress.h) */
    struct views *views;            /* the shards' own status for the page (views.h) */
    struct maphist maps;            /* the shard maps handed out lately, for deltas */
    /* The cluster's data-plane key (transport/auth.h): made at the first start, kept in the
     * state; handed out only under mutual TLS. */
    uint8_t data_key[32];
    /* --allow-shared-certs: shards may register with a role certificate that names no member
     * (admit.c; docs/security.md, "The unit of trust"). */
    bool allow_shared_certs;
    /* Set once by main.c at SIGTERM or SIGINT: the reaper, the releaser and the rollbacker
     * stop (rollbacks_wake wakes the last). */
    atomic_bool stopping;
};

/* The releaser thread (release.c): frees ended jobs on every alive shard, then their data
 * maps, until m->stopping. arg is the struct master *. */
void *releaser_main(void *arg);

/* Registrations checked against the caller's certificate before the members table sees them
 * (admit.c; docs/security.md, "The unit of trust"): a shard's identity and the address it
 * claims (which the master asks: blocking, up to 2 s per question), a worker's job. TS_EPERM
 * naming `identity`, `addr` or `job`; TS_EUNAVAIL when an address to ask does not answer. */
ts_status master_admit_shard(struct master *m, const Tessera__V1__RegisterShardRequest *req,
                             const struct ts_member_cred *cred, struct ts_err *err);
ts_status master_admit_worker(const Tessera__V1__RegisterWorkerRequest *req,
                              const struct ts_member_cred *cred, struct ts_err *err);

/* Priority tasks on the wire (tasks_rpc.c): a heartbeat's task_done checked into *out
 * (TS_EINVAL naming the field); a worker's heartbeat bringing done (NULL: none) and handed
 * its job's next task in resp; a job's tasks into j (ClusterStatus); SubmitTask. */
ts_status master_task_result(const Tessera__V1__TaskInfo *in, struct task *out,
                             struct ts_err *err);
void master_task_beat(struct ts_rpc_call *call, struct master *m, uint32_t worker,
                      const struct task *done, Tessera__V1__HeartbeatResponse *resp);
void master_job_tasks(struct ts_rpc_call *call, struct master *m, const struct job_info *v,
                      Tessera__V1__JobInfo *j);
ts_status master_submit_task(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                             ProtobufCMessage *rs, struct ts_err *err);

/* Registers the master's metrics (metrics.c), read from m at each scrape, and its status
 * page (page.c: / and /api/status on the same port). */
void master_metrics_init(struct master *m);
void master_page_init(struct master *m);

/* tessera.v1.Master; its ctx must be set to a struct master * before ts_rpc_server_add. */
extern struct ts_rpc_service ts_master_service;

#endif
