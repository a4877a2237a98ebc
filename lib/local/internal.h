/* internal.h - what local.c (assembling a cluster) and respawn.c (keeping it up) share: the
 * cluster's struct, and starting a process so that a restart starts exactly as the first.
 * Only lib/local includes it. */
#ifndef TS_LOCAL_INTERNAL_H
#define TS_LOCAL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster/cluster.h"
#include "local/local.h"

#define TS__LOCAL_PATH 700     /* a file of the cluster's directory */

/* A shard slot: its process, and every restart of it. */
struct ts__local_slot {
    pid_t pid;                      /* 0 once reaped */
    uint32_t id;                    /* the master's id for it; 0 until it registered */
    /* With respawn: the restarts of this slot (the process replaces a shard that died this
     * many times), when the next is due (0: none), when the process started, and how many
     * restarts came in a row without it staying up a minute (the backoff's exponent). */
    uint32_t restarts;
    int64_t restart_at, started_ms;
    int backoff;
    char **args;                    /* ts_local_add_shard's flags, NULL-terminated; owned */
};

struct ts_local {
    struct ts_local_opts opts;      /* its strings point at the copies below */
    /* store, restore, branch, tls_dir, table_mem, table_dir, table_index_mem, redo_dir:
     * owned (copy_opts) */
    char *strs[8];
    char dir[512];
    bool own_dir;                   /* made by ts_local_start (no opts.dir) */
    char bin[512];                  /* where tessera-master and tessera-shard are */
    char tls_dir[600];              /* opts.tls: the certificates in use; "": plaintext */
    char master_addr[64];
    char port_file[TS__LOCAL_PATH];       /* the master's, for ts_local_kill */
    pid_t master;
    /* The master's restarts, when the next is due, when it started, and the backoff's
     * exponent, as for a shard. */
    uint32_t master_restarts;
    int64_t master_restart_at, master_started_ms;
    int master_backoff;
    int64_t named_ms;               /* the last look for restarted shards' ids */
    struct ts__local_slot shards[TS_LOCAL_MAX_SHARDS];
    int nshards;
};


/* Hands ev to opts.on_event, if any. */
void ts__local_say(const struct ts_local *c, const struct ts_local_event *ev);
/* Starts the master; again after it died (c->master_restarts > 0): on the port it had, with
 * the state it kept. */
ts_status ts__local_start_master(struct ts_local *c, struct ts_err *err) TS_MUST_CHECK;
/* Starts the process of shard slot i (again, when its restarts > 0: without --restore). */
ts_status ts__local_start_shard(struct ts_local *c, int i, struct ts_err *err) TS_MUST_CHECK;
/* The log (ext "log") or port file (ext "port") of shard slot i (local.h: its name). */
void ts__local_shard_file(const struct ts_local *c, int i, const char *ext, char *out, size_t n);
/* Gives each unnamed shard process the master's id for it (cs: its ClusterStatus), its log
 * renamed to shard-<id>.log; with named, a TS_LOCAL_SHARD_NAMED event for each. */
void ts__local_name_shards(struct ts_local *c, const Tessera__V1__ClusterStatusResponse *cs,
                           bool named);

#endif
