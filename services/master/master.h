/* master.h - what the master's main.c and rpc.c share: the service's state and its table. */
#ifndef TS_MASTER_MASTER_H
#define TS_MASTER_MASTER_H

#include <stdatomic.h>
#include <stdint.h>

#include "datamap.h"
#include "jobs.h"
#include "members.h"
#include "rollback.h"
#include "rpc/rpc.h"
#include "snapshot.h"

struct master {
    struct ts_members *members;
    int64_t started_ms;
    int64_t lease_ms;               /* the default lease: the reaper checks 20 times one */
    struct snapper snap;            /* snapshots (store NULL without --store) */
    struct datamap data;            /* data checksums per job */
    struct jobs *jobs;              /* the job table */
    struct rollbacks rb;            /* rollbacks to run (rollback.c) */
};

/* The releaser thread (release.c): frees ended jobs on every alive shard, then their data
 * maps, until *stop. arg is the struct master *. */
void *releaser_main(void *arg);
extern atomic_bool master_stopping;

/* tessera.v1.Master; its ctx must be set to a struct master * before ts_rpc_server_add. */
extern struct ts_rpc_service ts_master_service;

#endif
