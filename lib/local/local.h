/* local.h - a local cluster: one tessera-master and tessera-shard processes on 127.0.0.1.
 *
 * Why one module: `tessera up`, `tessera demo` and `tessera run --local-cluster`, the
 * benchmarks and the C integration tests all need the same thing, a master and shards started
 * as child processes, their ports learnt, their registration waited for, and all of them
 * stopped by pid however the caller ends; each had its own copy, which drifted. The children
 * are started and stopped through util/launch.h (SIGTERM when the launcher dies, logs,
 * port files). The master writes its port to DIR/master.port and each shard to its own port
 * file, which is how the launcher learns them without a race; a shard's port, matched against
 * the master's ClusterStatus, tells the launcher the id the master gave that process, so that
 * its log and every event name the shard as the master and `tessera status` do.
 *
 * Files, all in DIR (opts.dir, or a new directory): master.log and each shard's log,
 * shard-new-<n>.log until it registers, then shard-<id>.log (none with no_logs: the children's
 * output stays the caller's); master.port, and a shard's port file until it is named; the
 * master's state, master-state/ (unless no_state), which a restarted master takes back.
 * With TLS (docs/security.md, "The unit of trust") the master shows master.pem of the
 * certificate directory, and shard slot i, its first process and every restart, shard-<i>.pem
 * (member shard/i, issued from the directory's CA when missing): the master lets one alive
 * shard hold a member's certificate.
 *
 * Not part of libtessera and not installed: a static library (ts_local) for the CLI, bench/
 * and tests/.
 *
 * Ownership: ts_local_start() returns a cluster the caller frees with ts_local_free(); it
 * copies every string of the options it keeps (restarts reuse them), and the extra flags of
 * each shard. Strings returned by the accessors are the cluster's, valid until
 * ts_local_free().
 * Threads: a cluster belongs to one thread (waitpid reaps its children; no locks), except
 * ts_local_kill(), which a signal handler may call while that thread runs. */
#ifndef TS_LOCAL_LOCAL_H
#define TS_LOCAL_LOCAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

#define TS_LOCAL_MAX_SHARDS 64     /* shard slots of one cluster */
#define TS_LOCAL_MAX_ARGS 16       /* extra flags of one shard (ts_local_add_shard) */

/* What happened to a process of the cluster after ts_local_start, for the caller to say
 * (ts_local_check; the CLI prints each as a line). slot is the shard's slot, 0-based. */
enum ts_local_event_kind {
    TS_LOCAL_SHARD_EXITED,          /* slot, pid, id (0: not named), status, log; with respawn
                                     * delay_ms until its restart, number restart; else
                                     * delay_ms -1 */
    TS_LOCAL_SHARD_RESTARTED,       /* slot, pid, restart, log */
    TS_LOCAL_SHARD_RESTART_FAILED,  /* slot, restart, msg; a SHARD_EXITED follows (again later) */
    TS_LOCAL_SHARD_NAMED,           /* slot, id, log: a restarted shard registered as id */
    TS_LOCAL_MASTER_EXITED,         /* pid, status, log, delay_ms, restart */
    TS_LOCAL_MASTER_RESTARTED,      /* pid, restart, log, addr */
    TS_LOCAL_MASTER_RESTART_FAILED, /* restart, msg, delay_ms */
    TS_LOCAL_LOG_RENAME_FAILED,     /* msg: a shard's log kept its first name */
};

struct ts_local_event {
    enum ts_local_event_kind kind;
    int slot;
    pid_t pid;
    uint32_t id;
    int status;                     /* wait status (ts_launch_describe) */
    uint32_t restart;               /* the restart this is about: 1 for the first */
    int64_t delay_ms;
    const char *log;                /* the process's log; NULL with no_logs */
    const char *addr;               /* the master's address */
    const char *msg;                /* what failed */
};

/* Called on the cluster's thread; ev and its strings are valid for the call only. */
typedef void (*ts_local_event_fn)(void *arg, const struct ts_local_event *ev);

struct ts_local_opts {
    const char *bin;                /* tessera-master's and tessera-shard's directory; NULL:
                                     * the running program's */
    int shards;                     /* started and waited for by ts_local_start; 0: the master
                                     * alone (ts_local_add_shard adds shards) */
    int master_port;                /* 0: a free port */
    const char *dir;                /* logs and state; NULL: a new directory under $TMPDIR or
                                     * /tmp, named tmp_prefix.XXXXXX (NULL: "tessera-up") */
    const char *tmp_prefix;
    bool no_logs;                   /* children write to this process's stdout and stderr */
    bool no_state;                  /* the master without --state-dir: it keeps nothing */
    int lease_ms;                   /* the master's --lease-ms (0: its default) */
    int grace_ms;                   /* every service's --grace-ms (0: its default) */
    const char *store;              /* snapshot store for master and shards (NULL: none) */
    const char *restore;            /* snapshot id the shards start from (NULL: none) */
    const char *branch;             /* the master's --branch (NULL: its default) */
    int snapshot_every;             /* the master's --snapshot-every (0: off) */
    int replicas;                   /* the master's --replicas (0: its default, 1) */
    int64_t mem_budget_mib;         /* each shard's --mem-budget (0: half the machine's memory
                                     * shared among the `shards` shards; with shards 0, or
                                     * -1: the shard's own default) */
    const char *table_mem;          /* each shard's --table-mem (NULL: its default) */
    const char *table_index_mem;    /* each shard's --table-index-mem (NULL: its default) */
    const char *table_dir;          /* NULL, or the shards' disk tiers: DIR/shard-<slot> each
                                     * (made by the shard) */
    const char *redo_dir;           /* NULL, or the shards' redo logs (--redo-dir):
                                     * DIR/shard-<slot> each */
    bool respawn;                   /* ts_local_check restarts a shard that died */
    int metrics_port;               /* > 0: /metrics of the master here, shard slot i's at
                                     * + 1 + i (docs/observability.md); 0: none */
    /* Mutual TLS (docs/security.md): the master serves it with master.pem of tls_dir
     * (`tessera certs init`; NULL: DIR/tls, made if it has no ca.pem), shard slot i with
     * shard-<i>.pem (member shard/i, issued from tls_dir's CA when missing), and all take its
     * admin.token (made if missing) as their admin token; this process calls them with its
     * client.pem. false: plaintext, no token, every service started with --insecure, and
     * this process's calls plaintext whatever its environment says. */
    bool tls;
    const char *tls_dir;
    /* With tls: tls_dir is taken as it is, nothing made or issued and no admin token given
     * (the benchmarks: a directory of `tessera certs init`, left unchanged). */
    bool tls_as_is;
    /* This process's own TLS (ts_rpc_tls_setup) is left to the caller, who may take it from
     * the environment; false: ts_local_start sets it as above. */
    bool keep_process_tls;
    /* The master's --jobs-per-identity, the shards' --arm-timeout-ms and --orphan-job-ms
     * (docs/operations.md, "What nobody comes back for"); 0: the services' defaults. */
    int64_t jobs_per_identity, arm_timeout_ms, orphan_job_ms;
    /* The master's --start-deadline-ms (docs/elastic.md); 0: its default, -1: 0 (never). */
    int64_t start_deadline_ms;
    ts_local_event_fn on_event;     /* NULL: events are dropped */
    void *event_arg;
};

struct ts_local;

/* Sets up TLS (opts), starts the master, then opts->shards shards, and waits until each is
 * registered (15 s for each phase). On failure everything started is stopped, *c is not
 * written, the directory and its logs stay, and err says which log to read (with no_logs:
 * that the child's output is above). TS_EINVAL for options out of range (shards) or
 * tls_as_is without tls_dir, before anything is made; TS_EIO for a directory that cannot be
 * made or a log that cannot be written, TS_EUNAVAIL for a child that exited, TS_ETIMEDOUT,
 * and what ts_certs_ensure and ts_rpc_tls_setup return. Blocks. */
ts_status ts_local_start(const struct ts_local_opts *o, struct ts_local **c,
                         struct ts_err *err) TS_MUST_CHECK;

/* Starts one more shard, in the next slot, with the extra flags args (NULL-terminated, at
 * most TS_LOCAL_MAX_ARGS; NULL: none), copied; a restart of its slot takes them again.
 * Does not wait for it to register (ts_local_wait_shards). *pid (may be NULL) gets its pid.
 * TS_EINVAL past TS_LOCAL_MAX_SHARDS slots or TS_LOCAL_MAX_ARGS flags, TS_EIO as ts_launch. */
ts_status ts_local_add_shard(struct ts_local *c, const char *const *args, pid_t *pid,
                             struct ts_err *err) TS_MUST_CHECK;

/* Waits up to 15 s until the master lists at least n alive shards, then names them (their
 * logs become shard-<id>.log). TS_EUNAVAIL as soon as a shard process exits, TS_ETIMEDOUT. */
ts_status ts_local_wait_shards(struct ts_local *c, int n, struct ts_err *err) TS_MUST_CHECK;

/* Reaps exited children, each an event. A master that died is started again after a backoff
 * (0.5 s, doubling for each restart in a row that did not stay up a minute, at most 30 s) on
 * the same port with the state it kept (DIR/master-state; docs/membership.md); with
 * opts.respawn, so is a shard, without --restore: it joins the running cluster
 * (docs/replication.md, "Joining"). Call it often (every 200 ms): it also starts what is due
 * and names restarted shards once registered. Returns false only when the master cannot be
 * started again (its binary is gone, say). */
bool ts_local_check(struct ts_local *c);

/* SIGTERM to the shards then the master, up to 10 s for each, then SIGKILL; reaps them.
 * Returns true when each exited with status 0; false with err naming the first that did not
 * and how it ended. Stopping a stopped cluster does nothing. */
bool ts_local_stop(struct ts_local *c, struct ts_err *err);

/* For a signal handler that then exits (async-signal-safe): SIGTERM to every child, the
 * master's port file removed, and the directory when ts_local_start made it and nothing else
 * is left in it (no_logs, no_state). c may be NULL. */
void ts_local_kill(const struct ts_local *c);

/* Removes the logs, port files, the master's state and the directory, when ts_local_start
 * made it (after ts_local_stop); a directory the caller named is left as it is. */
void ts_local_remove_logs(struct ts_local *c);

/* Stops what still runs (ts_local_stop) and frees c; NULL is a no-op. */
void ts_local_free(struct ts_local *c);

const char *ts_local_master_addr(const struct ts_local *c);   /* "127.0.0.1:PORT" */
const char *ts_local_dir(const struct ts_local *c);
const char *ts_local_tls_dir(const struct ts_local *c);       /* NULL: plaintext */
pid_t ts_local_master_pid(const struct ts_local *c);          /* 0 while it is down */
int ts_local_shards(const struct ts_local *c);                /* slots started */
pid_t ts_local_shard_pid(const struct ts_local *c, int slot);  /* 0: down, or no such slot */

#endif
