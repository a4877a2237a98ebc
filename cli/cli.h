/* cli.h - the `tessera` command's subcommands and what they share. */
#ifndef TS_CLI_CLI_H
#define TS_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client/option_flags.h"
#include "tessera.h"
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
/* `tessera snapshot show REF` (snapshot_show.c): the snapshot's job, schedule, tensors and
 * tables, as text or one JSON document; 0, or 1 after saying what went wrong. */
int cli_snapshot_show(struct ts_store *s, const char *ref, bool json);
/* unix_ms as "YYYY-MM-DD HH:MM:SS UTC" into out (snapshot.c). */
void cli_utc_time(int64_t unix_ms, char *out, size_t n);

/* What `tessera train` (and `tessera demo`) run (train.c). */
struct train_cli {
    /* The job's options as every worker gets them (exact, mode, compress, balance, ...): the
     * schema's flags (lib/client/option_flags.h) and what train_flags derives (elastic,
     * workers and start_workers from --width). */
    struct tessera_options sdk;
    struct ts_trainer_opts tr;       /* epochs, batch, ... each worker gets as they are */
    bool local, amp;
    bool respawn;                    /* docs/elastic.md */
    const char *slow_factor;         /* testing: "RANK:X[:A-B],...", tessera-worker's flags */
    int workers;                     /* worker processes */
    int width;                       /* above workers: slots for workers that join later */
    int join;                        /* -1, or the one rank this run adds to a running job */
    int64_t metrics_port;            /* -1, or rank r's /metrics on this + r */
    const char *metrics_listen;      /* the workers' --metrics-listen HOST (NULL: theirs) */
    const char *job;
    const char *slow;                /* testing: "RANK:MS" */
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

/* A local cluster (lib/local) says what happened to one of its processes: the line
 * `tessera up` prints for it (launcher.c). For ts_local_opts.on_event; arg is unused. */
struct ts_local_event;
void cli_local_event(void *arg, const struct ts_local_event *ev);

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
/* tessera status's default of workers listed in its tables (--workers). */
#define STATUS_WORKERS 50
#define STATUS_WORKERS_STR "50"
/* `tessera status`: the tables, or JSON; max_workers listed at most (0: all). */
int print_status(const char *master_addr, bool json, int timeout_ms, uint32_t max_workers);

#endif
