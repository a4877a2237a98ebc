/* main.c - tessera-master: flags, wiring, the lease reaper, signal-driven shutdown. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "master.h"
#include "placement/ring.h"
#include "restart.h"
#include "rpc/serve.h"
#include "util/flags.h"
#include "util/log.h"
#include "util/proc.h"

static void worker_died(void *ctx, uint32_t worker)
{
    jobs_dead(ctx, worker, ts_now_ms());
}

/* A shard that registers while no job is resident goes on the ring at once: nothing to copy. */
static bool no_jobs(void *ctx)
{
    struct master *m = ctx;

    return !m->jobs || !jobs_resident(m->jobs);
}

/* Declares members dead once silent past their lease, and gives up on the ranks of elastic
 * jobs that never came (jobs_start_deadline); checks 20 times a lease. */
static void *reaper(void *arg)
{
    struct master *m = arg;
    int64_t period = m->lease_ms / 20 > 10 ? m->lease_ms / 20 : 10;

    while (!atomic_load(&m->stopping)) {
        ts_members_expire(m->members, ts_now_ms(), worker_died, m->jobs);
        jobs_start_deadline(m->jobs, ts_now_ms());
        ts_sleep_ms(period);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct ts_serve_opts so = TS_SERVE_DEFAULTS("127.0.0.1:7070");
    const char *store = NULL, *restore = NULL, *branch = NULL, *state_dir = NULL;
    int64_t lease_ms = 3000, vnodes = 0, every = 0, max_jobs = JOBS_DEFAULT_MAX, replicas = 1;
    int64_t idle_ms = JOBS_DEFAULT_IDLE_MS, history = JOBS_DEFAULT_HISTORY, restarts = 0;
    bool shared_certs = false;
    int64_t per_identity = JOBS_DEFAULT_PER_OWNER, start_deadline = -1;   /* -1: not given */
    int64_t rest_ms = 10000, shard_grace_ms = 30000;
    const struct ts_flag flags[] = {
        TS_SERVE_FLAGS(&so, "gRPC address (default 127.0.0.1:7070; port 0 picks a free one)"),
        { "lease-ms", TS_FLAG_INT, &lease_ms, "MS", "default member lease (default 3000)", 100,
          600000 },
        { "vnodes", TS_FLAG_INT, &vnodes, "N", "virtual nodes per shard (default 1024)", 0,
          4096 },
        { "replicas", TS_FLAG_INT, &replicas, "R", "shards that hold each partition, a chain "
                                                   "(default 1; docs/replication.md)", 1,
          TS_MAX_REPLICAS },
        { "store", TS_FLAG_STR, &store, "DIR", "snapshot store (created if missing; the shards "
                                               "must reach the same directory)", 0, 0 },
        { "snapshot-every", TS_FLAG_INT, &every, "N", "snapshot every N steps (default 0: only "
                                                      "on request)", 0, 1000000000 },
        { "restore", TS_FLAG_STR, &restore, "REF", "the snapshot the shards restore; "
                                                   "snapshots continue its history", 0, 0 },
        { "branch", TS_FLAG_STR, &branch, "NAME", "branch for new snapshots (default: the "
                                                  "restored branch, or HEAD's)", 0, 0 },
        { "max-jobs", TS_FLAG_INT, &max_jobs, "N", "jobs the shards hold at once: running, "
                                                   "idle or being freed (default 64)", 1,
          JOBS_MAX },
        { "jobs-per-identity", TS_FLAG_INT, &per_identity, "N", "jobs one caller may hold "
          "(its certificate's CN under mutual TLS, else its host): running, idle or being "
          "freed (default 128; docs/security.md)", 1, JOBS_MAX },
        { "start-deadline-ms", TS_FLAG_INT, &start_deadline, "MS", "in an elastic job, a rank "
          "that has not registered this long after the job's first worker did is given up on: "
          "its slot goes to the live workers until it comes (default: two leases, at least "
          "10000; 0: never; docs/elastic.md)", 0, INT64_C(1) << 40 },
        { "idle-job-ms", TS_FLAG_INT, &idle_ms, "MS", "how long a job trained with --keep stays "
                                                      "on the shards after its workers finish "
                                                      "(default 3600000)", 1, INT64_C(1) << 40 },
        { "job-history", TS_FLAG_INT, &history, "N", "ended jobs kept as a summary for tessera "
                                                     "status, for a day at most (default 256)",
          1, 100000 },
        { "state-dir", TS_FLAG_STR, &state_dir, "DIR", "keep the master's state here, and take "
                                                       "it back when started again after a "
                                                       "crash (default: none; "
                                                       "docs/membership.md)", 0, 0 },
        { "restarts", TS_FLAG_INT, &restarts, "N", "this process is restart N of the cluster's "
                                                   "master (set by tessera up; shown by tessera "
                                                   "status)", 0, 1000000 },
        { "worker-rest-ms", TS_FLAG_INT, &rest_ms, "MS", "a worker whose frames the shards "
          "vouch for may go this long without a heartbeat of its own (at least a third of its "
          "lease; default 10000; 0: every worker beats every third of its lease; "
          "docs/scaling.md)", 0, 600000 },
        { "shard-restart-grace", TS_FLAG_INT, &shard_grace_ms, "MS", "how long the master "
          "holds the place of a shard that keeps a redo log (tessera-shard --redo-dir) and "
          "stopped answering, for a process restarted on that log to come back as it; workers "
          "wait meanwhile; with --replicas above 1 a chain takes over at once instead (default "
          "30000; 0: off; docs/membership.md)", 0, 3600000 },
        { "allow-shared-certs", TS_FLAG_BOOL, &shared_certs, NULL, "under mutual TLS, let "
          "shards register with a role certificate that names no member (shard.pem of an "
          "older `tessera certs init`): any holder of it can add shards; refused by default "
          "(docs/security.md, \"The unit of trust\")", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct ts_rpc_server *srv = NULL;
    struct master m = { 0 };
    struct master_saved saved = { 0 };
    struct ts_members_cfg cfg;
    struct jobs_cfg jcfg;
    int sig, rc = 1;
    pthread_t reap, release, rollback;

    maphist_init(&m.maps);
    /* Large blocks come and go with every ClusterStatus and state write: see
     * ts_proc_fix_malloc. */
    ts_proc_fix_malloc();
    ts_proc_block_signals();
    if ((rc = ts_flags_program("tessera-master", NULL,
                               "The Tessera master: membership, leases and the shard map (gRPC).\n"
                               "Stops cleanly on SIGTERM or SIGINT.", flags, argc, argv)) >= 0)
        return rc;
    rc = 1;
    cfg = (struct ts_members_cfg){ .default_lease_ms = (uint32_t)lease_ms,
                                   .vnodes = (unsigned)vnodes,
                                   .replicas = (uint32_t)replicas,
                                   .quiet = no_jobs, .quiet_ctx = &m,
                                   .join_ready = snapper_join_ready,
                                   .join_ready_ctx = &m.snap,
                                   .durable = restart_clock, .durable_ctx = &m.state,
                                   /* the reaper runs 20 times a lease: 10 missed runs,
                                    * and a second at least, so that a loaded host's
                                    * stalls do not pardon a dead member lease after lease */
                                   .pause_ms = lease_ms / 2 > 1000 ? lease_ms / 2 : 1000,
                                   /* a partition of the master's host heals within
                                    * minutes, or it is not one */
                                   .deaf_max_ms = 10 * (int64_t)lease_ms,
                                   .rest_ms = (uint32_t)rest_ms,
                                   .shard_grace_ms = (uint32_t)shard_grace_ms };
    /* A worker registers once it started, read its data set and connected: seconds for a
     * Python rank that imports torch, so never less than 10 s by default. */
    if (start_deadline < 0)
        start_deadline = 2 * lease_ms > 10000 ? 2 * lease_ms : 10000;
    jcfg = (struct jobs_cfg){ .max_jobs = (uint32_t)max_jobs, .idle_ms = idle_ms,
                              .history_max = (uint32_t)history,
                              .per_owner = (uint32_t)per_identity,
                              .start_deadline_ms = start_deadline };
    m.started_ms = ts_now_ms();
    m.restarts = (uint32_t)restarts;
    m.lease_ms = lease_ms;
    m.allow_shared_certs = shared_certs;
    if ((every || restore || branch) && !store) {
        fprintf(stderr, "tessera-master: --snapshot-every, --restore and --branch need --store "
                        "DIR\n");
        return 2;
    }
    datamap_init(&m.data);
    rollbacks_init(&m.rb);
    if (master_state_open(&m.state, state_dir, &err) || restart_read(&saved, &m.state, &err) ||
        ts_members_create(&cfg, &m.members, &err) || jobs_create(&jcfg, &m.jobs, &err) ||
        snapper_open(&m.snap, m.members, &m.data, m.jobs, store, restore, branch,
                     restart_branch(&saved), (uint32_t)every, &err) ||
        (RAND_bytes(m.data_key, sizeof(m.data_key)) != 1 &&   /* a restored one replaces it */
         ts_err_set(&err, TS_EINTERNAL, "no random bytes from libcrypto for the data key")) ||
        restart_load(&saved, &m, &m.restored, &err) ||
        workq_create(&m.state, &m.work, &err) || tasks_create(&m.state, &m.tasks, &err))
        goto out;
    snapper_start(&m.snap, &m.state);   /* the automatic loop, once what it reads is loaded */
    ts_master_service.ctx = &m;
    master_metrics_init(&m);
    master_page_init(&m);
    if (ts_serve_start(&so, &ts_master_service, &srv, &err))
        goto out;
    ts_log(TS_INFO, "master", "serving tessera.v1.Master on port %d (lease %lld ms, start "
           "deadline %lld ms)", ts_rpc_server_port(srv), (long long)lease_ms,
           (long long)start_deadline);
    if (shared_certs)
        ts_log(TS_WARN, "master", "--allow-shared-certs: %s", ts_rpc_tls_mutual()
               ? "shards may register with a role certificate that names no member (a shared "
                 "shard.pem): any holder of it can add shards to the ring; issue each shard its "
                 "own (tessera certs issue DIR --member shard/NAME) and drop the flag"
               : "no effect without mutual TLS (no certificate names anyone)");
    pthread_create(&reap, NULL, reaper, &m);
    pthread_create(&release, NULL, releaser_main, &m);
    pthread_create(&rollback, NULL, rollbacker_main, &m);
    restart_start(&saved, &m);
    sig = ts_proc_wait_signal(-1);
    ts_log(TS_INFO, "master", "signal %d: draining calls (up to %lld ms), then exiting", sig,
           (long long)so.grace_ms);
    atomic_store(&m.stopping, true);
    pthread_join(reap, NULL);
    pthread_join(release, NULL);
    rollbacks_wake(&m.rb);
    pthread_join(rollback, NULL);
    snapper_stop(&m.snap);
    ts_rpc_server_shutdown(srv, (int)so.grace_ms);
    master_state_stop(&m.state);
    rc = 0;
out:
    if (rc)
        ts_log(TS_ERROR, "master", "%s", err.msg);
    ts_serve_metrics_stop();   /* before what its collectors read goes */
    views_stop(m.views);
    ts_rpc_server_free(srv);
    master_state_close(&m.state);
    restart_free(&saved);
    progress_free(m.progress);
    snapper_close(&m.snap);
    datamap_fini(&m.data);
    maphist_fini(&m.maps);
    rollbacks_fini(&m.rb);
    ts_members_free(m.members);
    jobs_free(m.jobs);
    workq_free(m.work);
    tasks_free(m.tasks);
    OPENSSL_cleanse(m.data_key, sizeof(m.data_key));
    return rc;
}
