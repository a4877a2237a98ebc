/* status.c - `tessera status`: the cluster as a table, or one JSON object. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "cluster/tablestat.h"
#include "rpc/rpc.h"
#include "util/flags.h"
#include "util/json.h"

static const char *state_name(Tessera__V1__MemberState s)
{
    switch (s) {
    case TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE: return "alive";
    case TESSERA__V1__MEMBER_STATE__MEMBER_STATE_DEAD: return "dead";
    case TESSERA__V1__MEMBER_STATE__MEMBER_STATE_LEFT: return "left";
    default: return "unknown";
    }
}

/* What each alive shard says of itself (ShardStatus), asked with a short deadline; NULL for a
 * shard that is dead or did not answer. */
static Tessera__V1__ShardStatusResponse **shard_views(const Tessera__V1__ClusterStatusResponse *cs)
{
    Tessera__V1__ShardStatusResponse **v = calloc(cs->n_shards + 1, sizeof(*v));

    for (size_t i = 0; v && i < cs->n_shards; i++) {
        Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
        struct ts_rpc_channel *ch;
        if (cs->shards[i]->state != TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE ||
            ts_rpc_channel_create(cs->shards[i]->addr, NULL, &ch, NULL))
            continue;
        if (ts_shard_status(ch, &req, TS_SHARD_RETRY, 1000, &v[i], NULL))
            v[i] = NULL;
        ts_rpc_channel_free(ch);
    }
    return v;
}

static void free_views(Tessera__V1__ShardStatusResponse **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        if (v[i])
            tessera__v1__shard_status_response__free_unpacked(v[i], NULL);
    free(v);
}

const Tessera__V1__JobInfo *cli_job_at(const char *master, const char *job,
                                       Tessera__V1__ClusterStatusResponse **cs,
                                       struct ts_err *err)
{
    struct ts_master *m = NULL;

    *cs = NULL;
    if (!ts_master_open(master, &m, err) && ts_master_status(m, 5000, cs, err))
        *cs = NULL;
    ts_master_close(m);
    return ts_status_job(*cs, job);
}

/* A job's last progress report, "-" where the trainer gave no value. */
static void progress_line(const Tessera__V1__JobProgress *p)
{
    char loss[32] = "-", acc[32] = "-", rate[32] = "-";

    if (p->loss == p->loss)   /* not NaN */
        snprintf(loss, sizeof(loss), "%.4g", p->loss);
    if (p->accuracy == p->accuracy)
        snprintf(acc, sizeof(acc), "%.3f", p->accuracy);
    if (p->samples_per_s == p->samples_per_s)
        snprintf(rate, sizeof(rate), "%.0f", p->samples_per_s);
    printf("       step %" PRIu64 ", loss %s, accuracy %s, %s samples/s (%.1f s ago)\n",
           p->step, loss, acc, rate, p->reported_ms_ago / 1000.0);
}

static const char *task_state(Tessera__V1__TaskState s)
{
    switch (s) {
    case TESSERA__V1__TASK_STATE__TASK_STATE_QUEUED: return "queued";
    case TESSERA__V1__TASK_STATE__TASK_STATE_RUNNING: return "running";
    case TESSERA__V1__TASK_STATE__TASK_STATE_DONE: return "done";
    case TESSERA__V1__TASK_STATE__TASK_STATE_FAILED: return "failed";
    default: return "unknown";
    }
}

/* A priority task (docs/scheduler.md): JSON, and one line of the table. */
static void task_json(struct ts_json *j, const Tessera__V1__TaskInfo *k)
{
    ts_json_obj(j, NULL);
    ts_json_uint(j, "id", k->id);
    ts_json_str(j, "kind", "evaluate");
    ts_json_str(j, "state", task_state(k->state));
    ts_json_uint(j, "worker", k->worker);
    ts_json_uint(j, "step", k->step);
    ts_json_num(j, "test_accuracy", k->accuracy);
    ts_json_num(j, "loss", k->loss);
    ts_json_str(j, "params_sha256", k->fingerprint);
    ts_json_str(j, "error", k->error);
    ts_json_end(j);
}

static void task_line(const Tessera__V1__TaskInfo *k)
{
    printf("       task %u evaluate: %s", k->id, task_state(k->state));
    if (k->state == TESSERA__V1__TASK_STATE__TASK_STATE_RUNNING)
        printf(" on worker %u", k->worker);
    else if (k->state == TESSERA__V1__TASK_STATE__TASK_STATE_DONE)
        printf(" by worker %u at step %" PRIu64 ": test accuracy %.4f, loss %.4f", k->worker,
               k->step, k->accuracy, k->loss);
    else if (k->state == TESSERA__V1__TASK_STATE__TASK_STATE_FAILED)
        printf(" on worker %u: %s", k->worker, k->error);
    printf("\n");
}

static void print_json(const char *addr, const Tessera__V1__ClusterStatusResponse *cs,
                       Tessera__V1__ShardStatusResponse **views)
{
    struct ts_json j;
    char digest[17];

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "master", addr);
    ts_json_uint(&j, "epoch", cs->epoch);
    ts_json_str(&j, "version", cs->version);
    ts_json_int(&j, "uptime_ms", cs->uptime_ms);
    ts_json_uint(&j, "vnodes", cs->vnodes);
    ts_json_uint(&j, "replicas", cs->replicas ? cs->replicas : 1);
    ts_json_uint(&j, "shard_failures", cs->shard_failures);
    ts_json_uint(&j, "master_pid", cs->master_pid);
    ts_json_uint(&j, "master_restarts", cs->master_restarts);
    ts_json_bool(&j, "restored", cs->restored);
    snprintf(digest, sizeof(digest), "%016" PRIx64, cs->ring_digest);
    ts_json_str(&j, "ring_digest", digest);
    ts_json_arr(&j, "shards");
    for (size_t i = 0; i < cs->n_shards; i++) {
        const Tessera__V1__ShardInfo *s = cs->shards[i];
        ts_json_obj(&j, NULL);
        ts_json_uint(&j, "id", s->id);
        ts_json_str(&j, "addr", s->addr);
        ts_json_str(&j, "state", state_name(s->state));
        ts_json_uint(&j, "lease_ms", s->lease_ms);
        ts_json_int(&j, "last_heartbeat_ms_ago", s->last_heartbeat_ms_ago);
        ts_json_uint(&j, "registered_epoch", s->registered_epoch);
        if (s->death[0])
            ts_json_str(&j, "death", s->death);
        ts_json_bool(&j, "joining", s->joining);
        ts_json_int(&j, "away_ms_ago", s->away_ms_ago);
        ts_json_bool(&j, "redo_log", s->redo_log);
        ts_json_uint(&j, "restarts", s->restarts);
        ts_json_str(&j, "identity", s->identity);
        if (views && views[i]) {
            struct ts_shard_roles r = ts_shard_roles(views[i]);
            ts_json_int(&j, "pid", views[i]->pid);
            ts_json_uint(&j, "partitions", views[i]->partitions);
            ts_json_uint(&j, "bytes", views[i]->bytes);
            ts_json_uint(&j, "frames_in", views[i]->frames_in);
            ts_json_uint(&j, "frames_refused", views[i]->frames_refused);
            ts_json_obj(&j, "refusals");
            for (size_t k = 0; k < views[i]->n_refusals; k++)
                ts_json_uint(&j, views[i]->refusals[k]->reason, views[i]->refusals[k]->count);
            ts_json_end(&j);
            ts_json_obj(&j, "data_conns");   /* by transport: {"rdma": {"open", "accepted"}} */
            for (size_t k = 0; k < views[i]->n_data_conns; k++) {
                ts_json_obj(&j, views[i]->data_conns[k]->transport);
                ts_json_uint(&j, "open", views[i]->data_conns[k]->open);
                ts_json_uint(&j, "accepted", views[i]->data_conns[k]->accepted);
                ts_json_end(&j);
            }
            ts_json_end(&j);
            ts_json_uint(&j, "heads", r.heads);
            ts_json_uint(&j, "follows", r.follows);
            ts_json_uint(&j, "lag", r.lag);
            ts_json_uint(&j, "tables", r.tables);
            ts_json_uint(&j, "table_rows", r.table_rows);
            ts_json_uint(&j, "table_bytes", r.table_bytes);
            ts_json_uint(&j, "table_mem_used", views[i]->table_mem_used);
            ts_json_uint(&j, "table_mem_limit", views[i]->table_mem_limit);
            ts_json_uint(&j, "table_index_used", views[i]->table_index_used);
            ts_json_uint(&j, "table_index_limit", views[i]->table_index_limit);
            ts_json_arr(&j, "table_list");
            for (size_t k = 0; k < views[i]->n_jobs; k++)
                for (size_t t = 0; t < views[i]->jobs[k]->n_table_status; t++)
                    ts_table_status_json(&j, views[i]->jobs[k]->id,
                                         views[i]->jobs[k]->table_status[t]->name, 0,
                                         views[i]->jobs[k]->table_status[t]);
            ts_json_end(&j);
            ts_json_uint(&j, "promotions", views[i]->promotions);
            ts_json_uint(&j, "copies_sent", views[i]->copies_sent);
            ts_json_uint(&j, "copies_pending", views[i]->copies_pending);
            ts_json_uint(&j, "partitions_lost", views[i]->partitions_lost);
            ts_json_uint(&j, "partitions_reseeded", views[i]->partitions_reseeded);
            ts_json_uint(&j, "moves_pending", views[i]->moves_pending);
            ts_json_uint(&j, "partitions_dropped", views[i]->partitions_dropped);
        }
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_uint(&j, "workers_alive", cs->workers_alive);
    ts_json_uint(&j, "workers_dead", cs->workers_dead);
    ts_json_uint(&j, "workers_left", cs->workers_left);
    if (cs->workers_next)   /* --workers N cut the list: the id to page on from */
        ts_json_uint(&j, "workers_next", cs->workers_next);
    ts_json_arr(&j, "workers");
    for (size_t i = 0; i < cs->n_workers; i++) {
        const Tessera__V1__WorkerInfo *w = cs->workers[i];
        ts_json_obj(&j, NULL);
        ts_json_uint(&j, "id", w->id);
        ts_json_str(&j, "host", w->host);
        ts_json_str(&j, "role", w->role[0] ? w->role : "trainer");
        if (w->addr[0])
            ts_json_str(&j, "addr", w->addr);
        ts_json_uint(&j, "pid", w->pid);
        ts_json_str(&j, "state", state_name(w->state));
        ts_json_uint(&j, "clock", w->clock);
        ts_json_uint(&j, "staleness_last", w->staleness_last);
        ts_json_uint(&j, "staleness_max", w->staleness_max);
        ts_json_uint(&j, "steps_skipped", w->steps_skipped);
        ts_json_num(&j, "loss_scale", w->loss_scale);
        ts_json_int(&j, "last_heartbeat_ms_ago", w->last_heartbeat_ms_ago);
        ts_json_uint(&j, "restarts", w->restarts);
        ts_json_str(&j, "identity", w->identity);
        if (w->job[0]) {
            ts_json_str(&j, "job", w->job);
            ts_json_uint(&j, "rank", w->rank);
        }
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_arr(&j, "jobs");
    for (size_t i = 0; i < cs->n_jobs; i++) {
        const Tessera__V1__JobInfo *jb = cs->jobs[i];
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "id", jb->id);
        ts_json_str(&j, "state", ts_job_state_name(jb->state));
        ts_json_uint(&j, "workers", jb->workers);
        ts_json_uint(&j, "alive", jb->alive);
        ts_json_uint(&j, "finished", jb->finished);
        ts_json_bool(&j, "released", jb->released);
        ts_json_int(&j, "started_unix_ms", jb->started_unix_ms);
        ts_json_int(&j, "ended_unix_ms", jb->ended_unix_ms);
        ts_json_str(&j, "params_sha256", jb->fingerprint);
        ts_json_str(&j, "reason", jb->reason);
        ts_json_str(&j, "owner", jb->owner);
        if (jb->progress) {   /* rank 0's last report */
            ts_json_obj(&j, "progress");
            ts_json_uint(&j, "step", jb->progress->step);
            ts_json_num(&j, "loss", jb->progress->loss);
            ts_json_num(&j, "accuracy", jb->progress->accuracy);
            ts_json_num(&j, "samples_per_s", jb->progress->samples_per_s);
            ts_json_int(&j, "reported_ms_ago", jb->progress->reported_ms_ago);
            ts_json_end(&j);
        }
        ts_json_uint(&j, "rollbacks", jb->rollbacks);
        ts_json_uint(&j, "rollback_step", jb->rollback_step);
        ts_json_bool(&j, "rolling_back", jb->rolling_back);
        ts_json_bool(&j, "lost", jb->lost);
        ts_json_str(&j, "rollback_note", jb->rollback_note);
        ts_json_bool(&j, "elastic", jb->elastic);
        ts_json_uint(&j, "roster", jb->roster);
        ts_json_uint(&j, "adopted", jb->adopted);
        ts_json_uint(&j, "start_workers", jb->start_workers);
        ts_json_bool(&j, "balance", jb->balance);
        ts_json_uint(&j, "balanced", jb->balanced);
        ts_json_uint(&j, "work_units", jb->work_units);
        ts_json_uint(&j, "work_done", jb->work_done);
        ts_json_uint(&j, "work_outstanding", jb->work_outstanding);
        ts_json_arr(&j, "tasks");
        for (size_t k = 0; k < jb->n_tasks; k++)
            task_json(&j, jb->tasks[k]);
        ts_json_end(&j);
        ts_json_arr(&j, "slot_owners");
        for (size_t k = 0; k < jb->n_slot_owners; k++)
            ts_json_uint(&j, NULL, jb->slot_owners[k]);
        ts_json_end(&j);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "snapshots");
    ts_json_str(&j, "store", cs->store);
    ts_json_str(&j, "branch", cs->branch);
    ts_json_uint(&j, "every", cs->snapshot_every);
    ts_json_str(&j, "last_id", cs->last_snapshot ? cs->last_snapshot->id : "");
    ts_json_uint(&j, "last_step", cs->last_snapshot ? cs->last_snapshot->step : 0);
    ts_json_str(&j, "error", cs->snapshot_error);
    ts_json_end(&j);
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

/* One budget's line of a shard with tables: used of limit. */
static void print_budget(const char *what, const char *flag, uint64_t used, uint64_t limit)
{
    if (limit)
        printf("       %s: %.1f MB of %.1f MB (%s, %.0f%%)\n", what, used / 1048576.0,
               limit / 1048576.0, flag, 100.0 * (double)used / (double)limit);
    else
        printf("       %s: %.1f MB (%s: no limit)\n", what, used / 1048576.0, flag);
}

static void print_table(const char *addr, const Tessera__V1__ClusterStatusResponse *cs,
                        Tessera__V1__ShardStatusResponse **views)
{
    printf("master %s  version %s  up %.1f s  epoch %" PRIu64 "  ring %u vnodes/shard "
           "(digest %016" PRIx64 ")  replicas %u  shard failures %u\n\n", addr, cs->version,
           cs->uptime_ms / 1000.0, cs->epoch, cs->vnodes, cs->ring_digest,
           cs->replicas ? cs->replicas : 1, cs->shard_failures);
    if (cs->master_restarts || cs->restored)
        printf("the master is restart %u of the cluster's master%s\n\n", cs->master_restarts,
               cs->restored ? ", with the state it kept (members, jobs, epoch)" : "");
    printf("%-6s %-22s %-8s %-6s %-7s %-9s %-11s %-5s %-6s %-11s %-7s %-7s %s\n", "SHARD",
           "ADDR", "PID", "STATE", "LEASE", "HB S AGO", "HEAD/FOLLOW", "LAG", "PROMO",
           "COPIED/TODO", "MB", "REFUSED", "MEMBER");
    for (size_t i = 0; i < cs->n_shards; i++) {
        const Tessera__V1__ShardInfo *s = cs->shards[i];
        const Tessera__V1__ShardStatusResponse *v = views ? views[i] : NULL;
        char roles[48] = "-", lag[24] = "-", promo[24] = "-", copies[48] = "-", mb[24] = "-",
             refused[24] = "-", pid[16] = "-", why[160] = "", conns[160] = "";
        if (v) {
            struct ts_shard_roles r = ts_shard_roles(v);
            snprintf(pid, sizeof(pid), "%d", v->pid);
            snprintf(roles, sizeof(roles), "%" PRIu64 "/%" PRIu64, r.heads, r.follows);
            snprintf(lag, sizeof(lag), "%" PRIu64, r.lag);
            snprintf(promo, sizeof(promo), "%" PRIu64, v->promotions);
            snprintf(copies, sizeof(copies), "%" PRIu64 "/%" PRIu64, v->copies_sent,
                     v->copies_pending);
            snprintf(mb, sizeof(mb), "%.1f", v->bytes / 1048576.0);
            snprintf(refused, sizeof(refused), "%" PRIu64,
                     ts_shard_refusals(v, why, sizeof(why)));
            ts_shard_data_conns(v, conns, sizeof(conns));
        }
        printf("%-6u %-22s %-8s %-6s %-7u %-9.1f %-11s %-5s %-6s %-11s %-7s %-7s %s\n", s->id,
               s->addr, pid,
               s->joining ? "JOIN" : s->away_ms_ago ? "AWAY" : state_name(s->state), s->lease_ms,
               s->last_heartbeat_ms_ago / 1000.0, roles, lag, promo, copies, mb, refused,
               s->identity[0] ? s->identity : "-");
        if (s->death[0])
            printf("       dead: %s\n", s->death);
        if (s->away_ms_ago)
            printf("       away %.1f s: found gone; its place is held for a process restarted "
                   "on its redo log (tessera-master --shard-restart-grace)\n",
                   s->away_ms_ago / 1000.0);
        if (why[0])
            printf("       refused on the data plane: %s (docs/security.md, \"Refusals\")\n",
                   why);
        if (conns[0])
            printf("       data plane: %s\n", conns);
        if (s->restarts)
            printf("       restart %u of its shard (tessera up --respawn)\n", s->restarts);
        if (v && ts_shard_roles(v).tables) {
            struct ts_shard_roles r = ts_shard_roles(v);
            printf("       sparse tables: %" PRIu64 " rows of %" PRIu64 " tables, %.1f MB of "
                   "its row budget; %.0f rows pulled/s, %.0f pushed/s (docs/embeddings.md)\n",
                   r.table_rows, r.tables, r.table_bytes / 1048576.0, r.pulled_per_s,
                   r.pushed_per_s);
            if (r.tiered)
                printf("       disk tier: %" PRIu64 " rows in memory (copies too), hit rate %.1f%%, %" PRIu64
                       " evictions, %" PRIu64 " rows waiting for the disk, %.1f MB in its "
                       "files\n", r.mem_rows, r.hits + r.misses ? 100.0 * (double)r.hits /
                       (double)(r.hits + r.misses) : 100.0, r.evictions, r.writeback_rows,
                       r.disk_bytes / 1048576.0);
            print_budget("rows in memory", "--table-mem", v->table_mem_used,
                         v->table_mem_limit);
            if (r.tiered)
                print_budget("the disk tier's index", "--table-index-mem",
                             v->table_index_used, v->table_index_limit);
            if (r.ttl_tables)
                printf("       row lifetime: %" PRIu64 " tables with one, %" PRIu64 " rows "
                       "dropped so far\n", r.ttl_tables, r.expired);
        }
        if (v && v->partitions_lost)
            printf("       %" PRIu64 " partitions it heads lost every copy\n",
                   v->partitions_lost);
        if (v && v->partitions_reseeded)
            printf("       %" PRIu64 " of them of reduce jobs, seeded again by their workers\n",
                   v->partitions_reseeded);
        if (s->joining)
            printf("       joining: not on the ring until every copy it will hold has moved "
                   "(%" PRIu64 " left here)\n", v ? v->moves_pending : 0);
        else if (v && v->moves_pending)
            printf("       %" PRIu64 " moves left for joining shards\n", v->moves_pending);
        if (v && v->partitions_dropped)
            printf("       %" PRIu64 " partitions moved away to shards that joined\n",
                   v->partitions_dropped);
    }
    if (!cs->n_shards)
        printf("(none: start some with `tessera up` or tessera-shard --master %s)\n", addr);
    printf("\n%-6s %-24s %-8s %-6s %-8s %-11s %-8s %-12s %s\n", "WORKER", "HOST", "PID",
           "STATE", "CLOCK", "STALE NOW/MAX", "SKIPPED", "MEMBER", "LAST HEARTBEAT");
    for (size_t i = 0; i < cs->n_workers; i++) {
        const Tessera__V1__WorkerInfo *w = cs->workers[i];
        char stale[32];
        snprintf(stale, sizeof(stale), "%" PRIu64 "/%" PRIu64, w->staleness_last,
                 w->staleness_max);
        printf("%-6u %-24s %-8u %-6s %-8" PRIu64 " %-11s %-8" PRIu64 " %-12s %.1f s ago%s%s\n",
               w->id, w->host, w->pid, state_name(w->state), w->clock, stale, w->steps_skipped,
               w->identity[0] ? w->identity : "-", w->last_heartbeat_ms_ago / 1000.0,
               w->role[0] ? "  tessera-verify at " : "", w->addr);
        if (w->restarts)
            printf("       restart %u of its worker (tessera train --respawn)\n", w->restarts);
    }
    if (!cs->n_workers)
        printf("(none)\n");
    if (cs->workers_next)
        printf("... %u workers in all: %u alive, %u dead, %u left; %zu listed (tessera status "
               "--workers all, or --json, lists every one)\n", cs->workers_alive +
               cs->workers_dead + cs->workers_left, cs->workers_alive, cs->workers_dead,
               cs->workers_left, cs->n_workers);
    printf("\n%-24s %-9s %-8s %-9s %-8s %s\n", "JOB", "STATE", "WORKERS", "FINISHED", "FREED",
           "PARAMS_SHA256 / REASON");
    for (size_t i = 0; i < cs->n_jobs; i++) {
        const Tessera__V1__JobInfo *jb = cs->jobs[i];
        printf("%-24s %-9s %-8u %-9u %-8s %.64s\n", jb->id, ts_job_state_name(jb->state),
               jb->workers, jb->finished, jb->released ? "yes" : "no",
               jb->reason[0] ? jb->reason : jb->fingerprint);
        if (jb->progress)
            progress_line(jb->progress);
        if (jb->rolling_back)
            printf("       rolling back to its last snapshot now\n");
        /* elastic (docs/elastic.md): who computes which slot; a master from before
         * start_workers says 0 */
        bool narrow = jb->start_workers && jb->start_workers < jb->workers;
        if (jb->adopted || narrow) {
            printf("       ");
            if (narrow)
                printf("started with %u of %u workers; ", jb->start_workers, jb->workers);
            if (jb->balance)   /* docs/scheduler.md */
                printf("%u slot move%s for speed; ", jb->balanced, jb->balanced == 1 ? "" : "s");
            printf("%u slot%s taken over after deaths or at the start deadline; slots now:",
                   jb->adopted, jb->adopted == 1 ? "" : "s");
            for (size_t k = 0; k < jb->n_slot_owners && k < 16; k++)
                if (jb->slot_owners[k])
                    printf(" %zu:worker %u", k, jb->slot_owners[k]);
                else
                    printf(" %zu:none", k);
            printf("%s\n", jb->n_slot_owners > 16 ? " ..." : "");
        }
        for (size_t k = 0; k < jb->n_tasks; k++)   /* priority tasks (docs/scheduler.md) */
            task_line(jb->tasks[k]);
        if (jb->work_units)   /* dynamic assignment (docs/scheduler.md) */
            printf("       work queue: %" PRIu64 " of %" PRIu64 " units done, %" PRIu64
                   " out with workers\n", jb->work_done, jb->work_units, jb->work_outstanding);
        if (jb->rollbacks || jb->lost)
            printf("       %s%u rollback%s, the last to step %" PRIu64 ": %s\n",
                   jb->lost ? "LOST: " : "", jb->rollbacks, jb->rollbacks == 1 ? "" : "s",
                   jb->rollback_step, jb->rollback_note);
    }
    if (!cs->n_jobs)
        printf("(none)\n");
    if (cs->store[0]) {
        printf("\nsnapshots: store %s, branch %s", cs->store, cs->branch);
        if (cs->snapshot_every)
            printf(", every %u steps", cs->snapshot_every);
        if (cs->last_snapshot)
            printf("; last %.12s at step %" PRIu64, cs->last_snapshot->id,
                   cs->last_snapshot->step);
        printf("\n");
        if (cs->snapshot_error[0])
            printf("last automatic snapshot failed: %s\n", cs->snapshot_error);
    }
}

void cli_master_error(const char *cmd, const char *addr, const struct ts_err *err)
{
    fprintf(stderr, "tessera %s: %s\n", cmd, err->msg);
    if (err->code == TS_EUNAVAIL || err->code == TS_ETIMEDOUT)
        fprintf(stderr, "is a master running at %s? start a cluster with `tessera up`, or "
                        "pass --master ADDR (or set TESSERA_MASTER)\n", addr);
}

int print_status(const char *addr, bool json, int timeout_ms, uint32_t max_workers)
{
    Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_err err = { 0 };
    Tessera__V1__ShardStatusResponse **views;
    struct ts_master *m = NULL;

    req.max_workers = max_workers;
    if (ts_master_open(addr, &m, &err) || ts_master_status_req(m, timeout_ms, &req, &cs, &err)) {
        cli_master_error("status", addr, &err);
        ts_master_close(m);
        return 1;
    }
    views = shard_views(cs);
    if (json)
        print_json(addr, cs, views);
    else
        print_table(addr, cs, views);
    free_views(views, cs->n_shards);
    tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    ts_master_close(m);
    return 0;
}

/* --workers: "all" (0), or a count from 1. */
static ts_status parse_workers(const char *v, uint32_t *out, struct ts_err *err)
{
    char *end;
    unsigned long n;

    if (!strcmp(v, "all")) {
        *out = 0;
        return TS_OK;
    }
    n = strtoul(v, &end, 10);
    if (end == v || *end || !n || n > UINT32_MAX)
        return ts_err_set(err, TS_EINVAL, "--workers: '%s'; want a count from 1, or all", v);
    *out = (uint32_t)n;
    return TS_OK;
}

int cmd_status(int argc, char **argv)
{
    const char *master = NULL, *workers = NULL;
    bool json = false, help;
    int64_t timeout_ms = 3000;
    uint32_t max_workers = STATUS_WORKERS;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR",
          "master address (default $TESSERA_MASTER, then 127.0.0.1:7070)", 0, 0 },
        { "json", TS_FLAG_BOOL, &json, NULL, "one JSON object on stdout instead of tables", 0,
          0 },
        { "timeout-ms", TS_FLAG_INT, &timeout_ms, "MS", "give up after this long (default 3000)",
          1, 600000 },
        { "workers", TS_FLAG_STR, &workers, "N|all", "list at most N workers, the lowest ids "
          "(the counts by state cover them all; default " STATUS_WORKERS_STR " in the tables, "
          "all with --json)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    int npos = 0;

    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err) ||
        (workers && parse_workers(workers, &max_workers, &err))) {
        fprintf(stderr, "tessera status: %s\n", err.msg);
        return 2;
    }
    if (!workers)
        max_workers = json ? 0 : STATUS_WORKERS;
    if (help) {
        ts_flags_usage(stdout, "tessera status [options]",
                       "Shows the cluster as the master sees it: the shard map epoch, each\n"
                       "shard (alive, dead or left, and how it died) with its chains (partitions\n"
                       "it heads and copies it follows, versions not yet at the tail, partitions\n"
                       "it took over, copies sent to new chain members and still to send), each\n"
                       "worker and each job.", flags);
        return 0;
    }
    return print_status(ts_master_default_addr(master), json, (int)timeout_ms, max_workers);
}
