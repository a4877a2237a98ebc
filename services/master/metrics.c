/* metrics.c - the master's figures for Prometheus (docs/observability.md), read at each scrape
 * from the membership and the job table: the map epoch, members by kind and state, shards declared
 * dead so far, leases that ran out, jobs by state, rollbacks, and each running job's last
 * progress report (step, loss, accuracy, samples/s: what rank 0 reports, tessera.torch's
 * included), whose series go when the job ends. Calls (heartbeats among them) are counted by
 * lib/rpc for every service. */
#include "master.h"

#include <stdlib.h>

#include "metrics/metrics.h"

static struct {
    struct ts_metric_family *epoch, *members, *failures, *expiries, *jobs, *rollbacks;
    struct ts_metric_family *step, *loss, *accuracy, *rate;
    struct ts_metric_family *maps, *map_bytes, *renewals, *aways;
} fam;

/* job's progress gauges while it runs (or idles, kept); gone once it ended. */
static void job_progress(struct master *m, const struct job_info *j)
{
    struct progress_point pt;
    int64_t heard;

    if (j->state != JOB_RUNNING && j->state != JOB_IDLE) {
        ts_metrics_forget("job_id", j->id);
        return;
    }
    if (!progress_last(m->progress, j->id, &pt, &heard))
        return;
    ts_gauge_set(ts_metric_one(fam.step, j->id), (double)pt.step);
    if (pt.loss == pt.loss)   /* NaN: the trainer gave none */
        ts_gauge_set(ts_metric_one(fam.loss, j->id), pt.loss);
    if (pt.accuracy == pt.accuracy)
        ts_gauge_set(ts_metric_one(fam.accuracy, j->id), pt.accuracy);
    if (pt.samples_per_s == pt.samples_per_s)
        ts_gauge_set(ts_metric_one(fam.rate, j->id), pt.samples_per_s);
}

static void count_members(const struct ts_member *m, size_t n, const char *kind)
{
    double by[4] = { 0 };

    for (size_t i = 0; i < n; i++)
        if (m[i].state >= TS_MEMBER_ALIVE && m[i].state <= TS_MEMBER_LEFT)
            by[m[i].state]++;
    for (int s = TS_MEMBER_ALIVE; s <= TS_MEMBER_LEFT; s++)
        ts_gauge_set(ts_metric_child(fam.members,
                                     (const char *[]){ kind, ts_member_state_name(s) }), by[s]);
}

static void collect(void *arg)
{
    struct master *m = arg;
    struct ts_members_view v;
    struct job_info *jobs = NULL;
    size_t n = 0;
    double by[JOB_ABANDONED + 1] = { 0 };
    uint64_t rollbacks = 0;

    if (!ts_members_view(m->members, false, &v, NULL)) {
        ts_gauge_set(ts_metric_one(fam.epoch, NULL), (double)v.epoch);
        ts_counter_set(ts_metric_one(fam.failures, NULL), v.shard_failures);
        ts_counter_set(ts_metric_one(fam.aways, NULL), v.shard_aways);
        ts_counter_set(ts_metric_one(fam.expiries, "shard"), v.shard_expiries);
        ts_counter_set(ts_metric_one(fam.expiries, "worker"), v.worker_expiries);
        ts_counter_set(ts_metric_one(fam.renewals, "heartbeat"), v.worker_beats);
        ts_counter_set(ts_metric_one(fam.renewals, "shard"), v.worker_vouches);
        count_members(v.shards, v.nshards, "shard");
        count_members(v.workers, v.nworkers, "worker");
        ts_members_view_free(&v);
    }
    uint64_t answers[2], bytes[2];
    maphist_counts(&m->maps, answers, bytes);
    for (int d = 0; d < 2; d++) {
        ts_counter_set(ts_metric_one(fam.maps, d ? "delta" : "whole"), answers[d]);
        ts_counter_set(ts_metric_one(fam.map_bytes, d ? "delta" : "whole"), bytes[d]);
    }
    if (!jobs_list(m->jobs, &jobs, &n, NULL)) {
        for (size_t i = 0; i < n; i++) {
            if (jobs[i].state >= JOB_RUNNING && jobs[i].state <= JOB_ABANDONED)
                by[jobs[i].state]++;
            rollbacks += jobs[i].rollbacks;
            job_progress(m, &jobs[i]);
        }
        for (int s = JOB_RUNNING; s <= JOB_ABANDONED; s++)
            ts_gauge_set(ts_metric_one(fam.jobs, jobs_state_name((enum job_state)s)), by[s]);
        ts_counter_set(ts_metric_one(fam.rollbacks, NULL), rollbacks);
        free(jobs);
    }
}

void master_metrics_init(struct master *m)
{
    fam.epoch = ts_metrics_family("tessera_map_epoch", "the shard map's epoch (moves on at "
                                  "every change of the alive shards)", TS_METRIC_GAUGE, NULL,
                                  NULL, 0);
    fam.members = ts_metrics_family("tessera_members", "members the master lists, by kind and "
                                    "state", TS_METRIC_GAUGE, "kind,state", NULL, 0);
    fam.failures = ts_metrics_family("tessera_shard_failures_total", "shards declared dead "
                                     "(lease expired, or reported and found gone)",
                                     TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.aways = ts_metrics_family("tessera_shards_away_total", "shards that keep a redo log "
                                  "marked away instead of dead, their place held for "
                                  "--shard-restart-grace", TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.expiries = ts_metrics_family("tessera_lease_expiries_total", "members declared dead "
                                     "because their lease ran out without a heartbeat, by kind",
                                     TS_METRIC_COUNTER, "kind", NULL, 0);
    fam.jobs = ts_metrics_family("tessera_jobs", "jobs the master lists, by state",
                                 TS_METRIC_GAUGE, "state", NULL, 0);
    fam.rollbacks = ts_metrics_family("tessera_rollbacks_total", "rollbacks to a snapshot of "
                                      "the jobs listed, after a partition lost every copy",
                                      TS_METRIC_COUNTER, NULL, NULL, 0);
    fam.step = ts_metrics_family("tessera_job_step", "the step of the job's last progress "
                                 "report (rank 0's), while it runs", TS_METRIC_GAUGE, "job_id",
                                 NULL, 0);
    fam.loss = ts_metrics_family("tessera_job_loss", "the mean training loss of that report",
                                 TS_METRIC_GAUGE, "job_id", NULL, 0);
    fam.accuracy = ts_metrics_family("tessera_job_accuracy", "the last accuracy the trainer "
                                     "reported (0..1)", TS_METRIC_GAUGE, "job_id", NULL, 0);
    fam.rate = ts_metrics_family("tessera_job_samples_per_second", "samples of the global "
                                 "batch per second over that report", TS_METRIC_GAUGE,
                                 "job_id", NULL, 0);
    fam.renewals = ts_metrics_family("tessera_worker_lease_renewals_total", "workers' leases "
                                     "renewed: by their own heartbeat, or by a shard that "
                                     "answered their frames (vouched)", TS_METRIC_COUNTER, "by",
                                     NULL, 0);
    fam.maps = ts_metrics_family("tessera_shard_map_answers_total", "GetShardMap answers: the "
                                 "whole map, or a delta from a map the caller held",
                                 TS_METRIC_COUNTER, "as", NULL, 0);
    fam.map_bytes = ts_metrics_family("tessera_shard_map_answer_bytes_total", "the bytes of "
                                      "those answers", TS_METRIC_COUNTER, "as", NULL, 0);
    ts_metrics_collector(collect, m);
}
