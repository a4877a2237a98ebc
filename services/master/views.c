/* views.c - the shards' own status for the status page; see views.h. */
#include "views.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channels.h"
#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "cluster/tablestat.h"
#include "util/names.h"
#include "util/proc.h"

/* What one shard said, the figures the page shows. */
struct view {
    uint32_t id;
    int32_t pid;
    struct ts_shard_roles roles;
    uint64_t promotions, copies_sent, copies_pending, bytes, frames_refused, partitions_lost,
             partitions_reseeded, moves_pending;
    uint64_t refused;               /* the data plane's refusals, all reasons */
    uint64_t table_mem_used, table_mem_limit, table_index_used, table_index_limit;
    char refusals[160];             /* by reason, "conflict 2, identity 1" */
    size_t nconns;                  /* its data plane's connections by transport */
    struct { char transport[16]; uint64_t open, accepted; } conns[4];
    int64_t at_ms;                  /* when it answered (monotonic) */
};

/* One table of a job, summed over the shards that answered the last round. */
struct view_table {
    char job[TS_JOB_ID_MAX + 1], name[129];
    uint32_t shards;
    Tessera__V1__TableStatus sum;     /* over the shards that answered; its name unset */
};

struct views {
    struct ts_members *members;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct view v[SHARD_CHANNELS_MAX];   /* by id, ascending; under mu */
    size_t n;
    struct view_table *tables;      /* malloc'd, replaced each round; under mu */
    size_t ntables;
    int64_t watched_ms;             /* the last views_watched; under mu */
    bool stop;                      /* under mu */
    struct shard_channels chan;     /* the thread's alone */
};

static struct view *find(struct views *vs, uint32_t id)
{
    for (size_t i = 0; i < vs->n; i++)
        if (vs->v[i].id == id)
            return &vs->v[i];
    return NULL;
}

/* Adds shard r's tables to *tabs (*n of them, *cap allocated): one entry a job's table. */
static void add_tables(const Tessera__V1__ShardStatusResponse *r, struct view_table **tabs,
                       size_t *n, size_t *cap)
{
    for (size_t k = 0; k < r->n_jobs; k++)
        for (size_t i = 0; i < r->jobs[k]->n_table_status; i++) {
            const Tessera__V1__TableStatus *ts = r->jobs[k]->table_status[i];
            struct view_table *t = NULL;
            for (size_t e = 0; !t && e < *n; e++)
                if (!strcmp((*tabs)[e].job, r->jobs[k]->id) && !strcmp((*tabs)[e].name, ts->name))
                    t = &(*tabs)[e];
            if (!t) {
                if (*n == *cap) {
                    size_t grown = *cap ? 2 * *cap : 8;
                    struct view_table *more = realloc(*tabs, grown * sizeof(*more));
                    if (!more)
                        return;   /* the page shows fewer tables this round */
                    *tabs = more;
                    *cap = grown;
                }
                t = &(*tabs)[(*n)++];
                memset(t, 0, sizeof(*t));
                snprintf(t->job, sizeof(t->job), "%s", r->jobs[k]->id);
                snprintf(t->name, sizeof(t->name), "%s", ts->name);
            }
            t->shards++;
            ts_table_status_add(&t->sum, ts);
        }
}

/* Asks every alive shard; keeps the answers of those that gave one (the others keep their last,
 * with its age), drops shards no longer alive. The tables are summed over the answers. */
static void refresh(struct views *vs)
{
    struct ts_members_view mv;
    struct view got[SHARD_CHANNELS_MAX];
    struct view_table *tabs = NULL, *old_tabs;
    size_t n = 0, ntabs = 0, cap = 0;

    if (ts_members_view(vs->members, true, &mv, NULL))
        return;
    shard_channels_reserve(&vs->chan, mv.nshards);
    for (size_t i = 0; i < mv.nshards && n < SHARD_CHANNELS_MAX; i++) {
        Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
        Tessera__V1__ShardStatusResponse *r = NULL;
        struct ts_rpc_channel *ch;
        struct view *old;

        if (shard_channels_get(&vs->chan, mv.shards[i].addr, &ch, NULL) ||
            ts_shard_status(ch, &req, TS_SHARD_ONCE, VIEWS_CALL_MS, &r, NULL)) {
            pthread_mutex_lock(&vs->mu);
            if ((old = find(vs, mv.shards[i].id)))
                got[n++] = *old;
            pthread_mutex_unlock(&vs->mu);
            continue;
        }
        got[n++] = (struct view){ .id = mv.shards[i].id, .pid = r->pid,
                                  .roles = ts_shard_roles(r), .promotions = r->promotions,
                                  .copies_sent = r->copies_sent,
                                  .copies_pending = r->copies_pending, .bytes = r->bytes,
                                  .frames_refused = r->frames_refused,
                                  .partitions_lost = r->partitions_lost,
                                  .partitions_reseeded = r->partitions_reseeded,
                                  .moves_pending = r->moves_pending,
                                  .table_mem_used = r->table_mem_used,
                                  .table_mem_limit = r->table_mem_limit,
                                  .table_index_used = r->table_index_used,
                                  .table_index_limit = r->table_index_limit,
                                  .at_ms = ts_now_ms() };
        got[n - 1].refused = ts_shard_refusals(r, got[n - 1].refusals,
                                               sizeof(got[n - 1].refusals));
        for (size_t k = 0; k < r->n_data_conns && k < 4; k++) {
            struct view *v = &got[n - 1];
            snprintf(v->conns[k].transport, sizeof(v->conns[k].transport), "%s",
                     r->data_conns[k]->transport);
            v->conns[k].open = r->data_conns[k]->open;
            v->conns[k].accepted = r->data_conns[k]->accepted;
            v->nconns = k + 1;
        }
        add_tables(r, &tabs, &ntabs, &cap);
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&mv);
    pthread_mutex_lock(&vs->mu);
    memcpy(vs->v, got, n * sizeof(got[0]));
    vs->n = n;
    old_tabs = vs->tables;
    vs->tables = tabs;
    vs->ntables = ntabs;
    pthread_mutex_unlock(&vs->mu);
    free(old_tabs);
}

static void *views_main(void *arg)
{
    struct views *vs = arg;

    pthread_mutex_lock(&vs->mu);
    while (!vs->stop) {
        struct timespec until;
        if (vs->watched_ms && ts_now_ms() - vs->watched_ms < VIEWS_IDLE_MS) {
            pthread_mutex_unlock(&vs->mu);
            refresh(vs);
            pthread_mutex_lock(&vs->mu);
        }
        if (vs->stop)
            break;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += VIEWS_POLL_MS / 1000;
        pthread_cond_timedwait(&vs->wake, &vs->mu, &until);
    }
    pthread_mutex_unlock(&vs->mu);
    return NULL;
}

struct views *views_start(struct ts_members *members)
{
    struct views *vs = calloc(1, sizeof(*vs));

    if (!vs)
        return NULL;
    vs->members = members;
    pthread_mutex_init(&vs->mu, NULL);
    pthread_cond_init(&vs->wake, NULL);
    if (pthread_create(&vs->thread, NULL, views_main, vs)) {
        pthread_cond_destroy(&vs->wake);
        pthread_mutex_destroy(&vs->mu);
        free(vs);
        return NULL;
    }
    return vs;
}

void views_stop(struct views *vs)
{
    if (!vs)
        return;
    pthread_mutex_lock(&vs->mu);
    vs->stop = true;
    pthread_cond_signal(&vs->wake);
    pthread_mutex_unlock(&vs->mu);
    pthread_join(vs->thread, NULL);
    shard_channels_free(&vs->chan);
    free(vs->tables);
    pthread_cond_destroy(&vs->wake);
    pthread_mutex_destroy(&vs->mu);
    free(vs);
}

void views_watched(struct views *vs)
{
    if (!vs)
        return;
    pthread_mutex_lock(&vs->mu);
    /* a page that was not watched has nothing fresh: ask the shards now */
    if (!vs->watched_ms || ts_now_ms() - vs->watched_ms >= VIEWS_IDLE_MS)
        pthread_cond_signal(&vs->wake);
    vs->watched_ms = ts_now_ms();
    pthread_mutex_unlock(&vs->mu);
}

void views_json(struct views *vs, uint32_t id, struct ts_json *j)
{
    struct view *v, c;

    if (!vs)
        return;
    pthread_mutex_lock(&vs->mu);
    v = find(vs, id);
    if (v)
        c = *v;
    pthread_mutex_unlock(&vs->mu);
    if (!v)
        return;
    ts_json_int(j, "pid", c.pid);
    ts_json_uint(j, "heads", c.roles.heads);
    ts_json_uint(j, "follows", c.roles.follows);
    ts_json_uint(j, "lag", c.roles.lag);
    ts_json_uint(j, "promotions", c.promotions);
    ts_json_uint(j, "copies_sent", c.copies_sent);
    ts_json_uint(j, "copies_pending", c.copies_pending);
    ts_json_uint(j, "bytes", c.bytes);
    ts_json_uint(j, "frames_refused", c.frames_refused);
    ts_json_uint(j, "refused", c.refused);
    ts_json_str(j, "refusals", c.refusals);
    ts_json_obj(j, "data_conns");   /* as `tessera status --json` has it */
    for (size_t k = 0; k < c.nconns; k++) {
        ts_json_obj(j, c.conns[k].transport);
        ts_json_uint(j, "open", c.conns[k].open);
        ts_json_uint(j, "accepted", c.conns[k].accepted);
        ts_json_end(j);
    }
    ts_json_end(j);
    ts_json_uint(j, "partitions_lost", c.partitions_lost);
    ts_json_uint(j, "partitions_reseeded", c.partitions_reseeded);
    ts_json_uint(j, "moves_pending", c.moves_pending);
    ts_json_uint(j, "table_mem_used", c.table_mem_used);
    ts_json_uint(j, "table_mem_limit", c.table_mem_limit);
    ts_json_uint(j, "table_index_used", c.table_index_used);
    ts_json_uint(j, "table_index_limit", c.table_index_limit);
    ts_json_num(j, "view_s_ago", (double)(ts_now_ms() - c.at_ms) / 1000.0);
}

void views_tables_json(struct views *vs, struct ts_json *j)
{
    ts_json_arr(j, "tables");
    if (vs) {
        pthread_mutex_lock(&vs->mu);
        for (size_t i = 0; i < vs->ntables; i++)
            ts_table_status_json(j, vs->tables[i].job, vs->tables[i].name, vs->tables[i].shards,
                                 &vs->tables[i].sum);
        pthread_mutex_unlock(&vs->mu);
    }
    ts_json_end(j);
}
