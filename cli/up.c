/* up.c - `tessera up` and `tessera demo`: a local cluster on loopback. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "local/local.h"
#include "placement/ring.h"
#include "snapshot/snapshot.h"
#include "util/flags.h"
#include "util/proc.h"

struct up_flags {
    int64_t shards, master_port, lease_ms, snapshot_every, mem_budget, replicas, metrics_port;
    int64_t jobs_per_identity, arm_timeout_ms, orphan_job_ms, start_deadline_ms;
    const char *dir, *store, *restore, *branch, *tls_dir, *table_mem, *table_dir;
    const char *table_index_mem, *redo_dir;
    bool respawn, tls, insecure;
};

static int parse(const char *cmd, const char *about, struct up_flags *f, int argc, char **argv)
{
    const struct ts_flag flags[] = {
        { "shards", TS_FLAG_INT, &f->shards, "N", "shards to start (default 2)", 1, 64 },
        { "master-port", TS_FLAG_INT, &f->master_port, "P",
          "master port on 127.0.0.1 (default 7070; 0 picks a free one)", 0, 65535 },
        { "dir", TS_FLAG_STR, &f->dir, "DIR",
          "log directory, one log per process (default: a new one in /tmp)", 0, 0 },
        { "lease-ms", TS_FLAG_INT, &f->lease_ms, "MS", "member lease (default 3000)", 100,
          600000 },
        { "replicas", TS_FLAG_INT, &f->replicas, "R", "shards holding each partition, a chain "
          "(default 2 with 2 shards or more, else 1; at most --shards; --replicas 1 turns "
          "replication off; docs/replication.md)", 1, TS_MAX_REPLICAS },
        { "store", TS_FLAG_STR, &f->store, "DIR", "snapshot store (created if missing)", 0, 0 },
        { "snapshot-every", TS_FLAG_INT, &f->snapshot_every, "N",
          "take a snapshot every N steps (needs --store)", 0, 1000000000 },
        { "restore", TS_FLAG_STR, &f->restore, "REF", "start the shards from this snapshot "
          "(branch, tag, id or HEAD; checked first)", 0, 0 },
        { "branch", TS_FLAG_STR, &f->branch, "NAME", "branch new snapshots go to", 0, 0 },
        { "mem-budget", TS_FLAG_INT, &f->mem_budget, "MIB", "memory each shard's partitions "
          "may use (default: half the machine's, shared among the shards)", 1,
          INT64_C(1) << 30 },
        { "table-mem", TS_FLAG_STR, &f->table_mem, "SIZE", "memory each shard's sparse-table "
          "rows may use, e.g. 256M (default: half the machine's)", 0, 0 },
        { "table-dir", TS_FLAG_STR, &f->table_dir, "DIR", "a disk tier for the tables' rows, "
          "DIR/shard-<i> for shard slot i: tables may outgrow --table-mem "
          "(docs/embeddings.md, \"Tables bigger than memory\")", 0, 0 },
        { "table-index-mem", TS_FLAG_STR, &f->table_index_mem, "SIZE", "with --table-dir: "
          "memory each shard's disk-tier index may use, 48 bytes a row (default: half the "
          "machine's)", 0, 0 },
        { "redo-dir", TS_FLAG_STR, &f->redo_dir, "DIR", "a redo log of each shard's tables "
          "and dense partitions, DIR/shard-<i> for shard slot i: each step synced before a "
          "pull sees it (docs/embeddings.md, \"Restarting from its own disk\"; bsp jobs "
          "only)", 0, 0 },
        { "jobs-per-identity", TS_FLAG_INT, &f->jobs_per_identity, "N", "the master's "
          "--jobs-per-identity: jobs one caller may hold (default 128; docs/security.md)", 1,
          256 },
        { "start-deadline-ms", TS_FLAG_INT, &f->start_deadline_ms, "MS", "the master's "
          "--start-deadline-ms: in an elastic job, the live workers take over the share of a "
          "rank not registered this long after the first (default: two leases, at least "
          "10000; 0: never; docs/elastic.md)", 0, INT64_C(1) << 40 },
        { "arm-timeout-ms", TS_FLAG_INT, &f->arm_timeout_ms, "MS", "the shards' "
          "--arm-timeout-ms: a snapshot armed that nobody asks for is dropped (default "
          "300000; docs/operations.md)", 1, INT64_C(1) << 40 },
        { "orphan-job-ms", TS_FLAG_INT, &f->orphan_job_ms, "MS", "the shards' --orphan-job-ms: "
          "a job the master holds nothing of is released (default 600000)", 1,
          INT64_C(1) << 40 },
        { "respawn", TS_FLAG_BOOL, &f->respawn, NULL, "restart a shard that dies, after a "
          "backoff (0.5 s doubling to 30 s); it joins the running cluster (docs/operations.md)",
          0, 0 },
        { "metrics-port", TS_FLAG_INT, &f->metrics_port, "BASE", "Prometheus metrics: the "
          "master's on port BASE, shard i's (1, 2, ...) on BASE + i (docs/observability.md)",
          1, 65000 },
        { "insecure", TS_FLAG_BOOL, &f->insecure, NULL, "plaintext gRPC, no admin token and an "
          "unauthenticated data plane: anyone who reaches the ports may call any method and "
          "push to any job; for loopback development only. Without it the cluster runs mutual "
          "TLS with certificates of its own (docs/security.md)", 0, 0 },
        { "tls-dir", TS_FLAG_STR, &f->tls_dir, "DIR", "the certificates (`tessera certs init "
          "DIR`, made there when it has none; default DIR/tls under --dir); prints the `export "
          "TESSERA_TLS_DIR=...` clients need", 0, 0 },
        { "tls", TS_FLAG_BOOL, &f->tls, NULL, "mutual TLS: the default (kept for scripts "
          "written when it was not)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    char usage[64];
    int npos = 0;
    bool help;

    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.msg);
        return 2;
    }
    if (help) {
        snprintf(usage, sizeof(usage), "tessera %s [options]", cmd);
        ts_flags_usage(stdout, usage, about, flags);
        return 0;
    }
    return -1;
}

static void checked(void *ctx, const char *tensor, uint64_t bytes)
{
    printf("  checked %-20s %10.1f MB\n", tensor, (double)bytes / 1e6);
    fflush(stdout);
}

/* Resolves --restore to an id and reads every chunk of it, so that a damaged snapshot stops
 * the start with the chunk and tensor named, before any shard runs. */
static int check_restore(const char *cmd, const struct up_flags *f, char hex[TS_STORE_HEX_LEN + 1])
{
    struct ts_store *s = NULL;
    uint8_t id[TS_STORE_ID_LEN];
    ts_manifest *m = NULL;
    struct ts_err err = { 0 };
    ts_status st;

    if (!f->store) {
        fprintf(stderr, "tessera %s: --restore and --snapshot-every need --store DIR\n", cmd);
        return 2;
    }
    st = ts_store_open(f->store, NULL, &s, &err);
    if (!st && !(st = ts_snap_resolve(s, f->restore, id, NULL, &err)) &&
        !(st = ts_manifest_load(s, id, &m, &err))) {
        printf("restoring snapshot %.12s (step %" PRIu64 ", %zu tensors): checking every "
               "chunk\n", ts_store_hex(id, hex), m->step, m->n_tensors);
        fflush(stdout);
        st = ts_snap_check(s, m, checked, NULL, &err);
    }
    ts_manifest_free(m);
    ts_store_close(s);
    if (st) {
        fprintf(stderr, "tessera %s: --restore %s: %s\nnothing was started; pick another "
                        "snapshot (tessera snapshot list --store %s)\n", cmd, f->restore,
                err.msg, f->store);
        return 1;
    }
    return 0;
}

static int start(const char *cmd, const struct up_flags *f, struct ts_local **c)
{
    /* A shard that dies loses nothing by default (docs/replication.md). */
    int replicas = f->replicas ? (int)f->replicas : f->shards >= 2 ? 2 : 1;
    struct ts_local_opts o = { .shards = (int)f->shards, .master_port = (int)f->master_port,
                               .dir = f->dir, .lease_ms = (int)f->lease_ms, .store = f->store,
                               .branch = f->branch, .snapshot_every = (int)f->snapshot_every,
                               .mem_budget_mib = f->mem_budget, .replicas = replicas,
                               .table_mem = f->table_mem, .table_dir = f->table_dir,
                               .table_index_mem = f->table_index_mem,
                               .redo_dir = f->redo_dir,
                               .respawn = f->respawn, .metrics_port = (int)f->metrics_port,
                               .tls = !f->insecure, .tls_dir = f->tls_dir,
                               .jobs_per_identity = f->jobs_per_identity,
                               .arm_timeout_ms = f->arm_timeout_ms,
                               .orphan_job_ms = f->orphan_job_ms,
                               /* not given (-1): the master's default; 0: never */
                               .start_deadline_ms = f->start_deadline_ms < 0 ? 0
                                                    : f->start_deadline_ms ? f->start_deadline_ms
                                                                           : -1,
                               .on_event = cli_local_event };
    char hex[TS_STORE_HEX_LEN + 1];
    struct ts_err err = { 0 };
    int rc;

    if (f->insecure && (f->tls || f->tls_dir)) {
        fprintf(stderr, "tessera %s: --insecure turns TLS off: drop --tls and --tls-dir, or "
                        "--insecure\n", cmd);
        return 2;
    }
    if (f->replicas > f->shards) {
        fprintf(stderr, "tessera %s: --replicas %" PRId64 " needs at least as many shards "
                        "(--shards %" PRId64 ")\n", cmd, f->replicas, f->shards);
        return 2;
    }
    if ((f->snapshot_every || f->branch) && !f->store) {
        fprintf(stderr, "tessera %s: --snapshot-every and --branch need --store DIR\n", cmd);
        return 2;
    }
    if (f->restore) {
        if ((rc = check_restore(cmd, f, hex)))
            return rc;
        o.restore = hex;
    }
    if (ts_local_start(&o, c, &err)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.msg);
        return 1;
    }
    return 0;
}

int cmd_up(int argc, char **argv)
{
    struct up_flags f = { .shards = 2, .master_port = 7070, .start_deadline_ms = -1 };
    struct ts_local *c;
    const char *addr;
    int rc, sig = 0;

    if ((rc = parse("up", "Starts tessera-master and N tessera-shard on 127.0.0.1, prints\n"
                          "`master 127.0.0.1:PORT` first, then runs until Ctrl-C or SIGTERM,\n"
                          "which stops every process it started. A master that dies is started\n"
                          "again on its port with the state it kept (docs/membership.md).",
                     &f, argc, argv)) >= 0)
        return rc;
    ts_proc_block_signals();
    if ((rc = start("up", &f, &c)))
        return rc;
    addr = ts_local_master_addr(c);
    printf("master %s\n", addr);
    if (f.metrics_port)   /* the master's /metrics listens on its gRPC host: its page too */
        printf("status page http://%.*s:%" PRId64 "/\n", (int)(strrchr(addr, ':') - addr),
               addr, f.metrics_port);
    if (ts_local_tls_dir(c)) {
        char abs[PATH_MAX];
        const char *d = realpath(ts_local_tls_dir(c), abs) ? abs : ts_local_tls_dir(c);
        printf("export TESSERA_TLS_DIR=%s\n", d);
        printf("mutual TLS: clients need the line above; admin calls (snapshot gc, ...) the "
               "token: export TESSERA_TOKEN_FILE=%s/admin.token\n", d);
    } else {
        printf("--insecure: plaintext, no admin token, an unauthenticated data plane: anyone "
               "who reaches the ports may call any method and push to any job\n");
    }
    printf("%d shards alive; logs in %s%s\n", ts_local_shards(c), ts_local_dir(c),
           f.respawn ? "; a master or shard that dies is restarted"
                     : "; a master that dies is restarted");
    if (f.store)
        printf("snapshots: store %s%s\n", f.store, f.snapshot_every ? ", automatic" : "");
    printf("try: tessera status --master %s   (Ctrl-C stops the cluster)\n", addr);
    fflush(stdout);
    while (!sig && ts_local_check(c))
        sig = ts_proc_wait_signal(200);
    rc = sig ? 0 : 1;
    printf("stopping the cluster%s\n", sig ? "" : " (the master is gone)");
    fflush(stdout);
    ts_local_free(c);
    printf("stopped\n");
    return rc;
}

int cmd_demo(int argc, char **argv)
{
    struct up_flags f = { .shards = 2, .master_port = 0, .start_deadline_ms = -1 };
    struct train_cli t;
    struct ts_local *c;
    const char *addr;
    int rc;

    train_defaults(&t);
    t.sdk.exact = true;
    rc = train_flags("demo", "tessera demo [options]",
                     "Starts a master and N shards on 127.0.0.1, trains the MLP on\n"
                     "Fashion-MNIST with 2 workers for 3 epochs in exact mode (progress each\n"
                     "epoch), prints the test accuracy and the params_sha256 fingerprint, and\n"
                     "stops everything.", &t, NULL, &f.shards, argc, argv);
    if (rc >= 0)
        return rc;
    /* --json: stdout is the training's document alone; the rest the demo shows goes to
     * stderr. */
    if (t.tr.json && !(t.json_out = cli_json_stdout("demo")))
        return 1;
    ts_proc_block_signals();
    printf("starting a master and %d shards on 127.0.0.1 ...\n", (int)f.shards);
    fflush(stdout);
    if ((rc = start("demo", &f, &c)))
        return rc;
    /* The logs are named at the end if they are kept: a demo that works removes them. */
    addr = ts_local_master_addr(c);
    printf("master %s\n\n", addr);
    fflush(stdout);
    /* The workers this process starts find the cluster's certificates where clients do. */
    if (ts_local_tls_dir(c))
        setenv("TESSERA_TLS_DIR", ts_local_tls_dir(c), 1);
    rc = print_status(addr, false, 5000, STATUS_WORKERS);
    if (!rc) {
        printf("\ntraining: %d workers, %lld epochs, batch %lld, %s mode\n", t.workers,
               (long long)t.tr.epochs, (long long)t.tr.batch, t.sdk.exact ? "exact" : "float");
        fflush(stdout);
        rc = run_training(&t, addr);
    }
    printf("\nstopping the cluster\n");
    ts_local_stop(c, NULL);
    if (rc == 0)
        ts_local_remove_logs(c); /* a demo that worked leaves nothing behind */
    else
        printf("logs kept in %s\n", ts_local_dir(c));
    ts_local_free(c);
    printf("stopped\n");
    if (t.json_out)
        fclose(t.json_out);
    return rc;
}
