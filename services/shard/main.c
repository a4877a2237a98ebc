/* main.c - tessera-shard: serve, join the cluster, heartbeat, leave cleanly on SIGTERM. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "durable.h"
#include "rpc/serve.h"
#include "shard.h"
#include "table/tier.h"
#include "tables.h"
#include "testhooks.h"
#include "util/flags.h"
#include "util/log.h"
#include "util/proc.h"

/* Opens --store and loads the --restore manifest (its chunks are read as tensors register). */
static ts_status open_store(struct shard *s, const char *dir, const char *restore,
                            struct ts_store **store, struct ts_err *err)
{
    uint8_t id[TS_STORE_ID_LEN];
    ts_status st = ts_store_open(dir, NULL, store, err);

    s->store_dir = dir;
    s->params.store = *store;
    if (st || !restore)
        return st;
    if ((st = ts_snap_resolve(*store, restore, id, NULL, err)) ||
        (st = ts_manifest_load(*store, id, &s->params.restore, err))) {
        ts_err_prefix(err, "--restore %s", restore);
        return st;
    }
    ts_store_hex(id, s->params.restore_hex);
    ts_log(TS_INFO, "shard", "restoring from snapshot %s (step %" PRIu64 ", %zu tensors)",
           s->params.restore_hex, s->params.restore->step, s->params.restore->n_tensors);
    return TS_OK;
}

/* Half the machine's memory: room for the workers and the system beside one shard. */
static uint64_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size / 2 : UINT64_C(1) << 32;
}


/* The map's epoch moved (membership's heartbeat thread), or the data plane met a request of
 * a newer map. */
static void remap(void *arg)
{
    shard_follow_map(arg);
}

static void on_epoch(void *arg, uint64_t epoch)
{
    (void)epoch;
    shard_follow_map(arg);
}

/* An elastic job's roster, from the heartbeat: its waiting pulls hear when slots moved. */
static void on_roster(void *arg, const char *job, uint64_t roster)
{
    struct shard *s = arg;

    dataplane_roster(&s->dp, job, roster);
}

/* The data plane asks the master who may push to a job (dp_access.c). */
static ts_status job_access(void *arg, const char *job, Tessera__V1__JobAccessResponse **out,
                            struct ts_err *err)
{
    struct shard *s = arg;

    return ts_membership_job_access(s->membership, job, out, err);
}

/* The heartbeat lists the jobs this shard holds; the master names those it holds nothing of
 * (reclaim.c). Each heartbeat also measures the tables' rows pulled and pushed a second. */
static size_t held_jobs(void *arg, char (*ids)[TS_JOB_ID_MAX + 1], size_t max)
{
    struct shard *s = arg;

    shard_tables_tick(&s->params, ts_now_ms());
    return shard_params_held_jobs(&s->params, ids, max);
}

static void on_unknown_jobs(void *arg, char *const *ids, size_t n)
{
    struct shard *s = arg;

    shard_params_orphans(&s->params, ids, n, ts_now_ms());
}

/* The workers this shard answered since its last heartbeat, which vouches for them. */
static size_t vouched(void *arg, uint32_t *ids, uint64_t *steps, size_t max)
{
    struct shard *s = arg;

    return dataplane_vouched(&s->dp, ids, steps, max);
}

/* The heartbeat's report of what joining shards still wait for (docs/replication.md). */
static uint64_t moves(void *arg, uint64_t *epoch)
{
    struct shard *s = arg;

    *epoch = 0;
    if (!s->cluster || !s->membership)
        return 0;
    return shard_params_moves(&s->params, s->cluster, ts_membership_id(s->membership), epoch);
}

int main(int argc, char **argv)
{
    struct ts_serve_opts so = TS_SERVE_DEFAULTS("127.0.0.1:0");
    const char *adv = NULL, *master = NULL, *transport = NULL, *store_dir = NULL;
    const char *restore = NULL, *table_mem = NULL, *table_dir = NULL, *index_mem = NULL;
    const char *redo_dir = NULL, *replay = NULL;
    bool replay_json = false;
    int64_t lease_ms = 0, mem_mib = 0, max_tensors = SHARD_MAX_TENSORS, restarts = 0;
    int64_t max_conns = DP_DEFAULT_MAX_CONNS;
    int64_t arm_ms = SHARD_ARM_TIMEOUT_MS, orphan_ms = SHARD_ORPHAN_MS, mem_share = 100;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR", "master address (default $TESSERA_MASTER, "
                                                  "then 127.0.0.1:7070)", 0, 0 },
        TS_SERVE_FLAGS(&so, "gRPC address (default 127.0.0.1:0: a free port)"),
        TS_ADVERTISE_FLAG(&adv),
        { "transport", TS_FLAG_STR, &transport, "NAME", "data plane: only this transport (shm, "
                                                         "rdma, tcp; default: every one that "
                                                         "runs here)", 0, 0 },
        { "lease-ms", TS_FLAG_INT, &lease_ms, "MS", "lease to ask for (default: the master's)",
          0, 600000 },
        { "store", TS_FLAG_STR, &store_dir, "DIR", "snapshot store (shared with the master); "
                                                     "required for snapshots and --restore", 0,
          0 },
        { "restore", TS_FLAG_STR, &restore, "REF", "start tensors from this snapshot (id, "
                                                   "branch or tag in --store)", 0, 0 },
        { "mem-budget", TS_FLAG_INT, &mem_mib, "MIB", "memory the jobs' partitions may use, in "
                                                      "MiB (default: half the machine's)", 1,
          INT64_C(1) << 30 },
        { "table-mem", TS_FLAG_STR, &table_mem, "SIZE", "memory the rows of every job's "
          "sparse tables may use, e.g. 256M or 2G (a plain number is MiB; default: half the "
          "machine's). Without --table-dir a push past it is refused; with it, the rows that "
          "do not fit wait on disk", 0, 0 },
        { "table-dir", TS_FLAG_STR, &table_dir, "DIR", "a disk tier for the tables' rows "
          "(a file of row slots a table; emptied at start, this shard's alone): the tables may "
          "then hold more rows than --table-mem, the hot ones in memory (docs/embeddings.md, "
          "\"Tables bigger than memory\")", 0, 0 },
        { "table-index-mem", TS_FLAG_STR, &index_mem, "SIZE", "with --table-dir: memory the "
          "disk tier's index of every row may use (48 bytes a row, copies included; default: "
          "half the machine's); a push that would create rows past it is refused", 0, 0 },
        { "redo-dir", TS_FLAG_STR, &redo_dir, "DIR", "a redo log of the tables' rows and the "
          "dense partitions this shard heads (this shard's alone; docs/embeddings.md, "
          "\"Restarting from its own disk\"): what each step changed is synced to it before a "
          "pull sees it. bsp jobs only. The shard does not restart from it yet: a log found "
          "in DIR is set aside in DIR/previous, which --replay reads", 0, 0 },
        { "replay", TS_FLAG_STR, &replay, "DIR", "read the redo log in DIR (a stopped shard's "
          "--redo-dir, or its previous/), print each table (step, rows, fingerprint) and "
          "each job's tensors (partitions, version, dense fingerprint) it holds, and exit", 0, 0 },
        { "json", TS_FLAG_BOOL, &replay_json, NULL, "with --replay: print JSON", 0, 0 },
        { "job-mem-share", TS_FLAG_INT, &mem_share, "PCT", "percent of --mem-budget one job's "
          "tensors may hold (default 100: what the other jobs leave)", 1, 100 },
        { "restarts", TS_FLAG_INT, &restarts, "N", "this process replaces a shard restarted N "
          "times (set by tessera up --respawn; shown by tessera status)", 0, 1000000 },
        { "max-tensors", TS_FLAG_INT, &max_tensors, "N", "tensors per job (ids 0..N-1; default "
                                                         "and most 4096)", 1, SHARD_MAX_TENSORS },
        { "max-conns", TS_FLAG_INT, &max_conns, "N", "data-plane connections served at once, "
                                                     "each a thread (default 4096); more are "
                                                     "refused and counted", 1, 1 << 20 },
        { "arm-timeout-ms", TS_FLAG_INT, &arm_ms, "MS", "drop a snapshot armed (ArmSnapshot) "
          "that nobody asked for this long, so that its job can be released (default 300000; "
          "0: never; docs/operations.md)", 0, INT64_C(1) << 40 },
        { "orphan-job-ms", TS_FLAG_INT, &orphan_ms, "MS", "release a job's tensors once the "
          "master has said for this long that it holds nothing of the job (tensors registered "
          "by no worker of its, or a job released while this shard was cut off; default "
          "600000; 0: never)", 0, INT64_C(1) << 40 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct ts_rpc_server *srv = NULL;
    struct shard s = { 0 };
    struct ts_store *store = NULL;
    struct ts_membership_cfg mcfg = { .kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD };
    Tessera__V1__DataPlaneEndpoint eps[DP_MAX_LISTENERS], *ep_ptrs[DP_MAX_LISTENERS];
    char host[256];
    uint8_t secret[TS_MEMBER_SECRET_LEN];
    bool dp_started = false, resumed = false;
    int sig, rc;

    /* Partitions are large blocks freed when a job ends: see ts_proc_fix_malloc. */
    ts_proc_fix_malloc();
    pthread_mutex_init(&s.remap_mu, NULL);
    ts_proc_block_signals();
    if ((rc = ts_flags_program("tessera-shard", NULL,
                               "A Tessera shard: holds parameter partitions and aggregates "
                               "gradients.\nRegisters with the master, heartbeats, leaves cleanly "
                               "on SIGTERM.", flags, argc, argv)) >= 0)
        return rc;
    if (replay)
        return shard_durable_show(replay, replay_json);
    rc = 1;
    hooks_init();
    s.started_ms = ts_now_ms();
    s.master_addr = ts_master_default_addr(master);
    shard_params_init(&s.params);
    s.params.mem_budget = mem_mib ? (uint64_t)mem_mib << 20 : default_budget();
    {
        uint64_t bytes = default_budget();

        if (table_mem && ts_flags_size("table-mem", table_mem, 1u << 20, &bytes, &err)) {
            fprintf(stderr, "tessera-shard: %s\n", err.msg);
            return 2;
        }
        ts_table_budget_init(&s.params.tables_budget, bytes);
        bytes = default_budget();
        if (index_mem && ts_flags_size("table-index-mem", index_mem, 1u << 20, &bytes, &err)) {
            fprintf(stderr, "tessera-shard: %s\n", err.msg);
            return 2;
        }
        s.params.tables_budget.index_limit = bytes;
    }
    if (table_dir && ts_tier_open(table_dir, &s.params.tables_budget.tier, &err)) {
        fprintf(stderr, "tessera-shard: %s\n", err.msg);
        return 2;
    }
    s.params.max_tensors = (uint32_t)max_tensors;
    s.params.job_mem_share = (uint32_t)mem_share;
    s.params.arm_timeout_ms = arm_ms;
    s.params.orphan_ms = orphan_ms;
    s.params.on_release = dataplane_forget;
    s.params.release_ctx = &s.dp;
    if (restore && !store_dir) {
        fprintf(stderr, "tessera-shard: --restore needs --store DIR\n");
        return 2;
    }
    if (store_dir && open_store(&s, store_dir, restore, &store, &err))
        goto out;
    ts_shard_service.ctx = &s;
    if (!redo_dir) {
        ts_proc_instance_id(s.instance, sizeof(s.instance));
    } else if (ts_cluster_open(s.master_addr, &s.cluster, &err) ||
               shard_durable_start(&s.params, redo_dir, s.cluster, s.instance,
                                   sizeof(s.instance), secret, &resumed, &err)) {
        fprintf(stderr, "tessera-shard: --redo-dir: %s\n", err.msg);
        rc = 2;
        goto out;
    } else {   /* before anything is served: the master's map said whether its place is kept */
        mcfg.secret = secret;
        mcfg.redo_log = true;
        mcfg.resumed = resumed;
        ts_log(TS_INFO, "shard", "redo log in %s, instance %s: %s", redo_dir, s.instance,
               resumed ? "started from it, registering as the member it was" : "logging afresh");
    }
    shard_metrics_init(&s);
    if (ts_serve_start(&so, &ts_shard_service, &srv, &err) ||
        ts_serve_advertised(so.listen, adv, ts_rpc_server_port(srv), s.addr, sizeof(s.addr),
                            &err))
        goto out;
    snprintf(host, sizeof(host), "%.*s", (int)(strrchr(s.addr, ':') - s.addr), s.addr);
    if (dataplane_start(&s.dp, &s.params, host, transport, &err))
        goto out;
    dp_started = true;
    s.dp.max_conns = (size_t)max_conns;
    /* mutual TLS on gRPC: the data plane takes only connections that did the handshake */
    s.dp.require_auth = ts_rpc_tls_mutual();
    for (size_t i = 0; i < s.dp.n; i++) {
        Tessera__V1__DataPlaneEndpoint init = TESSERA__V1__DATA_PLANE_ENDPOINT__INIT;
        eps[i] = init;
        eps[i].transport = (char *)ts_tp_listener_name(s.dp.listeners[i].l);
        eps[i].address.data = s.dp.listeners[i].addr.data;
        eps[i].address.len = s.dp.listeners[i].addr.len;
        ep_ptrs[i] = &eps[i];
    }
    mcfg.addr = s.addr;
    mcfg.instance = s.instance;
    mcfg.on_epoch = on_epoch;
    mcfg.moves = moves;
    mcfg.on_roster = on_roster;
    mcfg.held_jobs = held_jobs;
    mcfg.on_unknown_jobs = on_unknown_jobs;
    mcfg.vouched = vouched;
    mcfg.arg = &s;
    mcfg.lease_ms = (uint32_t)lease_ms;
    mcfg.restarts = (uint32_t)restarts;
    mcfg.endpoints = ep_ptrs;
    mcfg.nendpoints = s.dp.n;
    /* The map client first: once the master lists this shard, clients may call it, and it
     * must be able to check their map epochs (it fetches the newer map then). */
    if (ts_master_open(s.master_addr, &s.master, &err) ||
        (!s.cluster && ts_cluster_open(s.master_addr, &s.cluster, &err)) ||
        ts_membership_start(s.master, &mcfg, 30000, &s.membership, &err)) {
        ts_err_prefix(&err, "cannot join the cluster (is the master running at %s?)",
                      s.master_addr);
        goto out;
    }
    dataplane_set_access(&s.dp, job_access, &s);
    ts_log(TS_INFO, "shard", "data plane: %s", s.dp.require_auth ? "the handshake required "
           "(TESSERA_DATA_MAC: MACs on tcp by default)" : "unauthenticated (no mutual TLS)");
    atomic_store(&s.dp.self, ts_membership_id(s.membership));
    atomic_store(&s.dp.membership, s.membership);
    s.dp.remap = remap;
    s.dp.remap_ctx = &s;
    atomic_store(&s.dp.cluster, s.cluster);
    shard_follow_map(&s);   /* the map this shard registered into: the chains are taken up under it */
    repair_start(&s.repair, &s.params, &s.dp);
    ts_log(TS_INFO, "shard", "shard %u serving at %s (memory budget %" PRIu64 " MiB)",
           ts_membership_id(s.membership), s.addr, s.params.mem_budget >> 20);
    sig = ts_proc_wait_signal(-1);
    ts_log(TS_INFO, "shard", "signal %d: leaving the cluster and draining calls", sig);
    rc = 0;
out:
    if (rc)
        ts_log(TS_ERROR, "shard", "%s", err.msg);
    ts_serve_metrics_stop();   /* before what its collectors read goes */
    /* Drain first: handlers read the membership, so it must outlive every call. */
    ts_rpc_server_shutdown(srv, (int)so.grace_ms);
    repair_stop(&s.repair);
    if (dp_started)
        dataplane_stop(&s.dp);
    ts_membership_stop(s.membership, rc == 0);
    ts_rpc_server_free(srv);
    ts_cluster_close(s.cluster);
    ts_master_close(s.master);
    /* The log first: a clean stop leaves the tables in it as they are, not dropped. */
    shard_durable_close(s.params.durable);
    shard_params_fini(&s.params);
    shard_durable_free(s.params.durable);
    ts_tier_close(s.params.tables_budget.tier);   /* after every table (table.h) */
    ts_store_close(store);
    return rc;
}
