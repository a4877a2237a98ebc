/* cli.h - the `tessera` command's subcommands and the local-cluster launcher they share. */
#ifndef TS_CLI_CLI_H
#define TS_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cluster/cluster.h"
#include "util/err.h"

int cmd_up(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_verify_replicas(int argc, char **argv);   /* `tessera verify replicas` */
int cmd_certs(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);

struct ts_store;
/* Opens the snapshot store: store (a directory), else the one the master at master (NULL:
 * the default address) reports. Prints what went wrong as `tessera CMD: ...`; returns 0, or 2
 * (usage or I/O) with *s untouched. */
int cli_open_store(const char *cmd, const char *store, const char *master, int timeout_ms,
                   struct ts_store **s);

/* What `tessera train` (and `tessera demo`) run (train.c). */
struct train_cli {
    bool local, exact, json, amp, keep;
    bool no_elastic, respawn;        /* docs/elastic.md */
    bool balance;                    /* docs/scheduler.md */
    bool dynamic;                    /* asp, ssp: units from the master's queue (scheduler.md) */
    bool overlap;                    /* asp: exchange a step while computing the next */
    const char *slow_factor;         /* testing: "RANK:X[:A-B],...", tessera-worker's flags */
    int workers, epochs, batch, micro, partition_kb;
    int width;                       /* above workers: slots for workers that join later */
    int join;                        /* -1, or the one rank this run adds to a running job */
    int64_t steps, seed, staleness, delay_ms;
    int64_t metrics_port;            /* -1, or rank r's /metrics on this + r */
    const char *metrics_listen;      /* the workers' --metrics-listen HOST (NULL: theirs) */
    const char *job, *optimizer, *transport;
    const char *mode, *compress, *sync_every, *slow;   /* docs/modes.md; slow: "RANK:MS" */
    const char *compress_pull;                         /* docs/compression.md, "Pulls" */
    FILE *json_out;                  /* --json: where the document goes (NULL: stdout) */
};
/* Starts the workers against master (ignored with t->local) and waits for them. Returns the
 * exit code. */
int run_training(const struct train_cli *t, const char *master);
void train_defaults(struct train_cli *t);
/* --json for a command that shows more than its document (tessera demo): sets stdout aside
 * for the document and makes fd 1 stderr, so that whatever else this process and its
 * children write reaches stderr. Returns the real stdout (the caller fcloses it), or NULL
 * after saying why on stderr as `tessera CMD: ...`. */
FILE *cli_json_stdout(const char *cmd);
int train_flags(const char *cmd, const char *usage, const char *about, struct train_cli *t,
                const char **master, int64_t *shards, int argc, char **argv);

/* A local cluster of real processes on loopback (launcher.c). */
struct cluster_opts {
    int shards;
    int master_port;                /* 0: a free port */
    const char *dir;                /* logs; NULL: a new directory under $TMPDIR or /tmp */
    int lease_ms;                   /* 0: the master's default */
    const char *store;              /* snapshot store for master and shards (NULL: none) */
    const char *restore;            /* snapshot id the shards start from (NULL: none) */
    const char *branch;             /* the master's --branch (NULL: its default) */
    int snapshot_every;             /* the master's --snapshot-every (0: off) */
    int replicas;                   /* the master's --replicas (0: its default, 1) */
    int64_t mem_budget_mib;         /* each shard's --mem-budget (0: half the machine's memory
                                     * shared among the shards) */
    bool respawn;                   /* cluster_check restarts a shard that died */
    int metrics_port;               /* > 0: /metrics of the master here, shard i's at + 1 + i
                                     * (docs/observability.md); 0: none */
    /* Mutual TLS (docs/security.md): the master serves it with master.pem of tls_dir
     * (`tessera certs init`; NULL: DIR/tls, made if it has no ca.pem), shard slot i with
     * shard-<i>.pem (member shard/i, issued from tls_dir's CA when missing), and all take its
     * admin.token (made if missing) as their admin token; this process calls them with its
     * client.pem. false: plaintext, no token, every service started with --insecure. */
    bool tls;
    const char *tls_dir;
    /* The master's --jobs-per-identity, the shards' --arm-timeout-ms and --orphan-job-ms
     * (docs/operations.md, "What nobody comes back for"); 0: the services' defaults. */
    int64_t jobs_per_identity, arm_timeout_ms, orphan_job_ms;
    /* The master's --start-deadline-ms (docs/elastic.md); 0: its default, -1: 0 (never). */
    int64_t start_deadline_ms;
};

/* A shard process of a local cluster. Its log is DIR/shard-<id>.log once the master has given
 * it an id (the id every message names), DIR/shard-new-<n>.log before. */
struct cluster_shard {
    pid_t pid;                      /* 0 once reaped */
    uint32_t id;                    /* the master's id for it; 0 until it registered */
    /* With respawn: the restarts of this slot (the process replaces a shard that died this
     * many times), when the next is due (0: none), when the process started, and how many
     * restarts came in a row without it staying up a minute (the backoff's exponent). */
    uint32_t restarts;
    int64_t restart_at, started_ms;
    int backoff;
};

struct cluster {
    char dir[512];
    bool own_dir;                   /* made by cluster_start (no --dir given) */
    char master_addr[64];
    pid_t master;
    /* The master's restarts, when the next is due, when it started, and the backoff's
     * exponent, as for a shard. */
    uint32_t master_restarts;
    int64_t master_restart_at, master_started_ms;
    int master_backoff;
    struct cluster_shard *shards;
    int nshards;
    struct cluster_opts opts;       /* as started (its strings borrowed), for restarts */
    char bin[512];                  /* where tessera-master and tessera-shard are */
    char tls_dir[600];              /* opts.tls: the certificates in use; "": plaintext */
    int64_t named_ms;               /* the last look for restarted shards' ids */
};

/* Starts the master and the shards, and waits until every shard is registered. On failure
 * everything started is stopped and err says which log to read. */
ts_status cluster_start(const struct cluster_opts *o, struct cluster *c,
                        struct ts_err *err) TS_MUST_CHECK;
/* SIGTERM to shards then master, waits, SIGKILL what is left; frees c's memory. */
void cluster_stop(struct cluster *c);
/* Removes the logs and the directory when cluster_start made it (after cluster_stop). */
void cluster_remove_logs(struct cluster *c);
/* Reaps exited children and prints a line for each. A master that died is started again
 * after a backoff (0.5 s, doubling for each restart in a row that did not stay up a minute,
 * at most 30 s) on the same port with the state it kept (--state-dir DIR/master-state;
 * docs/membership.md); with opts.respawn, so is a shard, without --restore: it joins the
 * running cluster (docs/replication.md, "Joining"). Call it often (every 200 ms): it also
 * starts what is due and names restarted shards once registered. Returns false only when
 * the master cannot be started again (its binary is gone, say). */
bool cluster_check(struct cluster *c);

/* Job `job` as the master at master lists it (status.c): NULL when not listed, or with *cs
 * NULL and err set when the master did not answer. The caller frees *cs
 * (tessera__v1__cluster_status_response__free_unpacked). */
const Tessera__V1__JobInfo *cli_job_at(const char *master, const char *job,
                                       Tessera__V1__ClusterStatusResponse **cs,
                                       struct ts_err *err);

/* A call to the master at addr failed with err: says so as `tessera CMD: ...`, and when no
 * master answered, how to start one or name the one running (status.c). */
void cli_master_error(const char *cmd, const char *addr, const struct ts_err *err);

/* Prints the cluster's status to stdout (table or JSON). Returns the exit code. */
int print_status(const char *master_addr, bool json, int timeout_ms);

#endif
