/* metrics.c - the shard's figures for Prometheus (docs/observability.md). The data plane's,
 * per job, are updated by its connection threads through children held from the HELLO
 * (dp_conn.metrics): one atomic add or histogram bucket per request. They go from /metrics
 * when the job is released (shard_metrics_forget, from shard_params' on_release), so a
 * shard's series follow the jobs it holds, not every job it ever served. The rest are read
 * at each scrape from the partitions' counters, as ShardStatus reads them. */
#include "shard.h"

#include "dp_internal.h"
#include "durable.h"
#include "rowcopy.h"
#include "tables.h"
#include "metrics/metrics.h"

static struct {
    struct ts_metric_family *push_s, *pull_s, *push_bytes, *pull_bytes, *updates, *aggregate_s;
    struct ts_metric_family *partitions, *bytes, *promotions, *lost, *reseeded, *copies,
        *refused, *refusals, *arms_expired, *orphans, *conns_open, *conns_accepted;
    struct ts_metric_family *table_rows, *table_bytes, *table_pulled, *table_pushed;
    struct ts_metric_family *tier_mem_rows, *tier_hits, *tier_misses, *tier_evictions;
    struct ts_metric_family *tier_written, *tier_pending, *tier_lag, *tier_disk;
    struct ts_metric_family *ttl_steps, *ttl_seconds, *expired, *prefetched, *prefetch_used, *prefetch_unused;
    struct ts_metric_family *budget_used, *budget_limit;
    struct ts_metric_family *redo_bytes, *redo_records, *redo_syncs, *redo_checkpoints,
        *redo_failing, *redo_resumed;
} fam;

/* One table's series (docs/embeddings.md), read at the scrape. */
static void collect_table(void *arg, const char *job, struct shard_table *t)
{
    const char *v[2] = { job, t->name };
    struct ts_table_tiers d;

    (void)arg;
    ts_gauge_set(ts_metric_child(fam.table_rows, v), (double)rowcopy_rows(t));
    ts_gauge_set(ts_metric_child(fam.table_bytes, v), (double)rowcopy_bytes(t));
    ts_counter_set(ts_metric_child(fam.table_pulled, v), atomic_load(&t->pulled));
    ts_counter_set(ts_metric_child(fam.table_pushed, v), atomic_load(&t->pushed));
    rowcopy_tiers(t, &d);
    if (t->ttl_steps || t->ttl_seconds) {   /* row lifetime (docs/embeddings.md) */
        if (t->ttl_steps)
            ts_gauge_set(ts_metric_child(fam.ttl_steps, v), (double)t->ttl_steps);
        else
            ts_gauge_set(ts_metric_child(fam.ttl_seconds, v), (double)t->ttl_seconds);
        ts_counter_set(ts_metric_child(fam.expired, v), d.expired);
    }
    if (!d.tiered)
        return;
    ts_gauge_set(ts_metric_child(fam.tier_mem_rows, v), (double)d.resident);
    ts_counter_set(ts_metric_child(fam.tier_hits, v), d.hits);
    ts_counter_set(ts_metric_child(fam.tier_misses, v), d.misses);
    ts_counter_set(ts_metric_child(fam.tier_evictions, v), d.evictions);
    ts_counter_set(ts_metric_child(fam.tier_written, v), d.written);
    ts_gauge_set(ts_metric_child(fam.tier_pending, v), (double)d.pending);
    ts_gauge_set(ts_metric_child(fam.tier_lag, v), (double)d.lag_ms / 1000.0);
    ts_gauge_set(ts_metric_child(fam.tier_disk, v), (double)d.disk_bytes);
    ts_counter_set(ts_metric_child(fam.prefetched, v), d.prefetched);
    ts_counter_set(ts_metric_child(fam.prefetch_used, v), d.prefetch_used);
    ts_counter_set(ts_metric_child(fam.prefetch_unused, v), d.prefetch_unused);
}

static void collect(void *arg)
{
    struct shard *s = arg;
    uint64_t in = 0, refused = 0;

    pthread_mutex_lock(&s->params.mu);
    ts_gauge_set(ts_metric_one(fam.partitions, NULL), (double)s->params.partitions);
    ts_gauge_set(ts_metric_one(fam.bytes, NULL), (double)s->params.bytes);
    ts_counter_set(ts_metric_one(fam.promotions, NULL), s->params.promotions);
    ts_counter_set(ts_metric_one(fam.lost, NULL), s->params.lost);
    ts_counter_set(ts_metric_one(fam.reseeded, NULL), s->params.reseeded);
    ts_counter_set(ts_metric_one(fam.arms_expired, NULL), s->params.arms_expired);
    ts_counter_set(ts_metric_one(fam.orphans, NULL), s->params.orphans_released);
    pthread_mutex_unlock(&s->params.mu);
    ts_counter_set(ts_metric_one(fam.copies, NULL), atomic_load(&s->params.copies_sent));
    shard_tables_each(&s->params, collect_table, NULL);
    ts_gauge_set(ts_metric_one(fam.budget_used, "table_mem"),
                 (double)ts_table_budget_used(&s->params.tables_budget));
    ts_gauge_set(ts_metric_one(fam.budget_limit, "table_mem"),
                 (double)s->params.tables_budget.limit);
    ts_gauge_set(ts_metric_one(fam.budget_used, "table_index_mem"),
                 (double)atomic_load(&s->params.tables_budget.index));
    ts_gauge_set(ts_metric_one(fam.budget_limit, "table_index_mem"),
                 (double)s->params.tables_budget.index_limit);
    if (s->params.durable) {   /* --redo-dir (durable.h) */
        struct shard_durable_stats d;
        shard_durable_stats(s->params.durable, &d);
        ts_gauge_set(ts_metric_one(fam.redo_bytes, NULL), (double)d.redo.bytes);
        ts_counter_set(ts_metric_one(fam.redo_records, NULL), d.redo.synced);
        ts_counter_set(ts_metric_one(fam.redo_syncs, NULL), d.redo.syncs);
        ts_counter_set(ts_metric_one(fam.redo_checkpoints, NULL), d.checkpoints);
        ts_gauge_set(ts_metric_one(fam.redo_failing, NULL), d.redo.failure[0] ? 1 : 0);
        ts_gauge_set(ts_metric_one(fam.redo_resumed, NULL), d.resumed_ms >= 0 ? 1 : 0);
    }
    if (s->dp.n) {
        uint64_t n[DP_REFUSED_N];
        dataplane_counters(&s->dp, &in, &refused);
        ts_counter_set(ts_metric_one(fam.refused, NULL), refused);
        dataplane_refusals(&s->dp, n);
        for (int r = 0; r < DP_REFUSED_N; r++)
            ts_counter_set(ts_metric_one(fam.refusals,
                                         dataplane_refusal_name((enum dp_refusal)r)), n[r]);
        for (size_t i = 0; i < s->dp.n; i++) {
            const char *t = ts_tp_listener_name(s->dp.listeners[i].l);
            uint64_t open, accepted;
            dataplane_conns(&s->dp, i, &open, &accepted);
            ts_gauge_set(ts_metric_one(fam.conns_open, t), (double)open);
            ts_counter_set(ts_metric_one(fam.conns_accepted, t), accepted);
        }
    }
}

void shard_metrics_init(struct shard *s)
{
    fam.push_s = ts_metrics_family("tessera_shard_push_seconds", "a worker's push on the data "
                                   "plane, from its arrival to its acknowledgement (the step's "
                                   "last push includes the update and the chain's images)",
                                   TS_METRIC_HISTOGRAM, "job_id", NULL, 0);
    fam.pull_s = ts_metrics_family("tessera_shard_pull_seconds", "a worker's pull, from its "
                                   "arrival to its reply (waiting for the other ranks' pushes "
                                   "included)", TS_METRIC_HISTOGRAM, "job_id", NULL, 0);
    fam.aggregate_s = ts_metrics_family("tessera_shard_aggregate_seconds", "aggregation of the "
                                        "push that completes an update: adding it to the sum, "
                                        "then the optimizer over the partition",
                                        TS_METRIC_HISTOGRAM, "job_id", NULL, 0);
    fam.push_bytes = ts_metrics_family("tessera_shard_push_bytes_total", "gradient bytes "
                                       "pushed to this shard (as sent: compressed, fixed point)",
                                       TS_METRIC_COUNTER, "job_id", NULL, 0);
    fam.pull_bytes = ts_metrics_family("tessera_shard_pull_bytes_total", "parameter bytes "
                                       "pulled from this shard", TS_METRIC_COUNTER, "job_id", NULL,
                                       0);
    fam.updates = ts_metrics_family("tessera_shard_updates_total", "updates this shard applied "
                                    "to the partitions it heads (one per partition and step)",
                                    TS_METRIC_COUNTER, "job_id", NULL, 0);
    fam.partitions = ts_metrics_family("tessera_shard_partitions", "partition copies held, "
                                       "heads and followers", TS_METRIC_GAUGE, NULL, NULL, 0);
    fam.bytes = ts_metrics_family("tessera_shard_parameter_bytes", "parameter bytes held",
                                  TS_METRIC_GAUGE, NULL, NULL, 0);
    fam.promotions = ts_metrics_family("tessera_shard_promotions_total", "partitions this shard "
                                       "took over as head when their head died (failovers)",
                                       TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.lost = ts_metrics_family("tessera_shard_partitions_lost_total", "partitions this shard "
                                 "came to head with every copy lost", TS_METRIC_COUNTER, NULL,
                                 NULL, 0);
    fam.reseeded = ts_metrics_family("tessera_shard_partitions_reseeded_total", "of those, "
                                     "reduce partitions its workers seeded again",
                                     TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.copies = ts_metrics_family("tessera_shard_copies_sent_total", "images sent to bring "
                                   "new chain members up to date (re-replication)",
                                   TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.refused = ts_metrics_family("tessera_shard_frames_refused_total", "data-plane frames "
                                    "refused (checksum, bad header)", TS_METRIC_COUNTER, NULL,
                                    NULL, 0);
    fam.refusals = ts_metrics_family("tessera_shard_refused_total", "what the data plane "
                                     "refused, by reason (docs/security.md, \"Refusals\"): a "
                                     "conflict or an identity refusal is a forged push or a "
                                     "broken worker", TS_METRIC_COUNTER, "reason", NULL, 0);
    fam.conns_open = ts_metrics_family("tessera_shard_dataplane_connections", "data-plane "
                                       "connections open, by transport (shm, rdma, tcp)",
                                       TS_METRIC_GAUGE, "transport", NULL, 0);
    fam.conns_accepted = ts_metrics_family("tessera_shard_dataplane_connections_total",
                                           "data-plane connections accepted since the shard "
                                           "started, by transport", TS_METRIC_COUNTER,
                                           "transport", NULL, 0);
    fam.arms_expired = ts_metrics_family("tessera_shard_snapshot_arms_expired_total",
                                         "snapshots armed, then dropped because nobody asked "
                                         "for them for --arm-timeout-ms", TS_METRIC_COUNTER,
                                         NULL, NULL, 0);
    fam.orphans = ts_metrics_family("tessera_shard_orphan_jobs_released_total", "jobs "
                                    "released because the master held nothing of them for "
                                    "--orphan-job-ms", TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.table_rows = ts_metrics_family("tessera_shard_table_rows", "rows of a sparse table this "
                                       "shard serves (its own, and copies it took over)", TS_METRIC_GAUGE, "job_id,table", NULL, 0);
    fam.table_bytes = ts_metrics_family("tessera_shard_table_bytes", "bytes the row budget "
                                        "(--table-mem) counts for the table's rows here, "
                                        "copies of other shards' rows included", TS_METRIC_GAUGE,
                                        "job_id,table", NULL, 0);
    fam.table_pulled = ts_metrics_family("tessera_shard_table_rows_pulled_total", "rows of the "
                                         "table workers pulled (ids, repeats merged by the "
                                         "worker)", TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.table_pushed = ts_metrics_family("tessera_shard_table_rows_pushed_total", "rows of the "
                                         "table workers pushed gradients for",
                                         TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.tier_mem_rows = ts_metrics_family("tessera_shard_table_mem_rows", "rows of the table in "
                                          "memory, over the disk tier (--table-dir)",
                                          TS_METRIC_GAUGE, "job_id,table", NULL, 0);
    fam.tier_hits = ts_metrics_family("tessera_shard_table_mem_hits_total", "look-ups of the "
                                      "table's rows found in memory", TS_METRIC_COUNTER,
                                      "job_id,table", NULL, 0);
    fam.tier_misses = ts_metrics_family("tessera_shard_table_disk_reads_total", "rows of the "
                                        "table read from the disk tier", TS_METRIC_COUNTER,
                                        "job_id,table", NULL, 0);
    fam.tier_evictions = ts_metrics_family("tessera_shard_table_evictions_total", "rows of the "
                                           "table evicted from memory", TS_METRIC_COUNTER,
                                           "job_id,table", NULL, 0);
    fam.tier_written = ts_metrics_family("tessera_shard_table_rows_written_total", "changed "
                                         "rows written back to the disk tier",
                                         TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.tier_pending = ts_metrics_family("tessera_shard_table_writeback_rows", "rows waiting "
                                         "for the disk tier's writer", TS_METRIC_GAUGE,
                                         "job_id,table", NULL, 0);
    fam.tier_lag = ts_metrics_family("tessera_shard_table_writeback_lag_seconds", "how long "
                                     "the oldest row waiting for the disk has waited",
                                     TS_METRIC_GAUGE, "job_id,table", NULL, 0);
    fam.tier_disk = ts_metrics_family("tessera_shard_table_disk_bytes", "the table's rows in "
                                      "the disk reserved for them in the disk tier's files",
                                      TS_METRIC_GAUGE, "job_id,table", NULL, 0);
    fam.ttl_steps = ts_metrics_family("tessera_shard_table_ttl_steps", "the table's row "
                                      "lifetime: rows no step updated in this many steps are "
                                      "dropped (only tables with one)", TS_METRIC_GAUGE,
                                      "job_id,table", NULL, 0);
    fam.ttl_seconds = ts_metrics_family("tessera_shard_table_ttl_seconds", "the table's row "
                                        "lifetime by the clock: rows not updated in this many "
                                        "seconds are dropped (only tables with one)",
                                        TS_METRIC_GAUGE, "job_id,table", NULL, 0);
    fam.expired = ts_metrics_family("tessera_shard_table_rows_expired_total", "rows of the "
                                    "table its row lifetime dropped here, copies included",
                                    TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.prefetched = ts_metrics_family("tessera_shard_table_prefetched_rows_total", "rows of "
                                       "the table read from the disk tier ahead of use "
                                       "(a worker's prefetch)", TS_METRIC_COUNTER,
                                       "job_id,table", NULL, 0);
    fam.prefetch_used = ts_metrics_family("tessera_shard_table_prefetch_used_total", "of "
                                          "them, used by a pull or a step since (prefetch "
                                          "hits)", TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.prefetch_unused = ts_metrics_family("tessera_shard_table_prefetch_unused_total", "of "
                                            "them, evicted before any use (prefetch wasted)",
                                            TS_METRIC_COUNTER, "job_id,table", NULL, 0);
    fam.budget_used = ts_metrics_family("tessera_shard_table_budget_bytes", "bytes the tables "
                                        "hold against a budget: table_mem (--table-mem: rows "
                                        "in memory) or table_index_mem (--table-index-mem: the "
                                        "disk tier's index)", TS_METRIC_GAUGE, "budget", NULL,
                                        0);
    fam.budget_limit = ts_metrics_family("tessera_shard_table_budget_limit_bytes", "that "
                                         "budget's limit (0: none)", TS_METRIC_GAUGE, "budget",
                                         NULL, 0);
    fam.redo_bytes = ts_metrics_family("tessera_shard_redo_bytes", "bytes in the redo log's "
                                       "current generation (--redo-dir; a checkpoint starts a "
                                       "new one past 256 MiB)", TS_METRIC_GAUGE, NULL, NULL, 0);
    fam.redo_records = ts_metrics_family("tessera_shard_redo_records_total", "records of the "
                                         "redo log synced to its disk since the shard started",
                                         TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.redo_syncs = ts_metrics_family("tessera_shard_redo_syncs_total", "syncs of the redo "
                                       "log (each covers every record queued before it)",
                                       TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.redo_checkpoints = ts_metrics_family("tessera_shard_redo_checkpoints_total",
                                             "checkpoints of the redo log", TS_METRIC_COUNTER,
                                             NULL, NULL, 0);
    fam.redo_failing = ts_metrics_family("tessera_shard_redo_failing", "1 while the redo log's "
                                         "disk refuses its writes (pulls wait; the shard's log "
                                         "says why), else 0", TS_METRIC_GAUGE, NULL, NULL, 0);
    fam.redo_resumed = ts_metrics_family("tessera_shard_redo_resumed", "1: this process "
                                         "started from its redo log as the member it was (the "
                                         "master held its place), else 0", TS_METRIC_GAUGE,
                                         NULL, NULL, 0);
    ts_metrics_collector(collect, s);
}

void shard_metrics_job(struct dp_metrics *m, const char *job)
{
    const char *v[1] = { job };

    m->push_s = ts_metric_hold(fam.push_s, v);
    m->pull_s = ts_metric_hold(fam.pull_s, v);
    m->push_bytes = ts_metric_hold(fam.push_bytes, v);
    m->pull_bytes = ts_metric_hold(fam.pull_bytes, v);
    m->updates = ts_metric_hold(fam.updates, v);
    m->aggregate_s = ts_metric_hold(fam.aggregate_s, v);
}

void shard_metrics_drop(struct dp_metrics *m)
{
    ts_metric_put(m->push_s);
    ts_metric_put(m->pull_s);
    ts_metric_put(m->push_bytes);
    ts_metric_put(m->pull_bytes);
    ts_metric_put(m->updates);
    ts_metric_put(m->aggregate_s);
    *m = (struct dp_metrics){ 0 };
}

void shard_metrics_forget(const char *job)
{
    (void)ts_metrics_forget("job_id", job);
}
