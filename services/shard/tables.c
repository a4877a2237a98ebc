/* tables.c - a shard's sparse tables (tables.h). */
#include "tables.h"
#include "params_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Whether the table t holds is the one req registers. */
static bool same_table(const struct shard_table *t, const Tessera__V1__TableSpec *s)
{
    return strcmp(t->name, s->name) == 0 && t->dim == s->dim && t->max_id == s->max_id &&
           strcmp(t->init, s->initializer) == 0 && t->seed == s->seed &&
           strcmp(t->optimizer, s->optimizer) == 0;
}

/* The spec's strings fit (lib/table checks the rest when it creates the store). */
static ts_status check_spec(const Tessera__V1__RegisterTableRequest *req, struct ts_err *err)
{
    const Tessera__V1__TableSpec *s = req->table;

    if (!s)
        return ts_err_set(err, TS_EINVAL, "table: required");
    if (req->table_id >= SHARD_MAX_TABLES)
        return ts_err_set(err, TS_EINVAL, "table_id: %u; a job has at most %d tables, ids "
                          "0..%d", req->table_id, SHARD_MAX_TABLES, SHARD_MAX_TABLES - 1);
    if (strlen(s->initializer) >= sizeof(((struct shard_table *)0)->init))
        return ts_err_set(err, TS_EINVAL, "table.initializer: longer than 63 bytes");
    if (strlen(s->optimizer) >= sizeof(((struct shard_table *)0)->optimizer))
        return ts_err_set(err, TS_EINVAL, "table.optimizer: longer than 127 bytes");
    return ts_job_id_check("table.name", s->name, err);
}

static ts_status create(struct shard_params *sp, struct shard_job *sj,
                        const Tessera__V1__RegisterTableRequest *req, struct shard_table **out,
                        struct ts_err *err)
{
    const Tessera__V1__TableSpec *s = req->table;
    struct ts_table_cfg cfg = { .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                .init = s->initializer, .seed = s->seed,
                                .optimizer = s->optimizer };
    struct shard_table *t = calloc(1, sizeof(*t));
    ts_status st;

    if (!t)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if ((st = ts_table_create(&sj->job, &cfg, &sp->tables_budget, &t->t, err))) {
        free(t);
        return st;
    }
    t->id = req->table_id;
    snprintf(t->name, sizeof(t->name), "%s", s->name);
    snprintf(t->init, sizeof(t->init), "%s", s->initializer);
    snprintf(t->optimizer, sizeof(t->optimizer), "%s", s->optimizer);
    t->dim = s->dim;
    t->max_id = s->max_id;
    t->seed = s->seed;
    *out = t;
    return TS_OK;
}

/* The table registered under req's id, or TS_EEXIST where the id or the name is another's. */
static ts_status find(const struct shard_job *sj, const Tessera__V1__RegisterTableRequest *req,
                      struct shard_table **out, struct ts_err *err)
{
    *out = sj->tables[req->table_id];
    if (*out && !same_table(*out, req->table))
        return ts_err_set(err, TS_EEXIST, "table_id: %u is table '%s' (dim %u, max_id %" PRIu64
                          ", init %s, seed %" PRIu64 ", optimizer %s); register it with that "
                          "spec", req->table_id, (*out)->name, (*out)->dim, (*out)->max_id,
                          (*out)->init, (*out)->seed, (*out)->optimizer);
    for (uint32_t i = 0; !*out && i < SHARD_MAX_TABLES; i++)
        if (sj->tables[i] && strcmp(sj->tables[i]->name, req->table->name) == 0)
            return ts_err_set(err, TS_EEXIST, "table.name: '%s' is table %u, not %u",
                              req->table->name, i, req->table_id);
    return TS_OK;
}

ts_status shard_params_register_table(struct shard_params *sp, struct ts_cluster *cl,
                                      const Tessera__V1__RegisterTableRequest *req,
                                      uint64_t *version, uint64_t *rows, struct ts_err *err)
{
    struct shard_job *sj = NULL;
    struct shard_table *t = NULL;
    bool made = false;
    ts_status st;

    if ((st = check_spec(req, err)) || (st = ts_cluster_check_epoch(cl, req->map_epoch, err)))
        return st;
    if (ts_cluster_replicas(cl) > 1)
        return ts_err_set(err, TS_ESTATE, "table '%s': this cluster keeps %u copies of every "
                          "partition, and tables are not replicated yet (docs/embeddings.md): "
                          "run the job on a cluster without --replicas", req->table->name,
                          ts_cluster_replicas(cl));
    pthread_mutex_lock(&sp->mu);
    st = params_get_job(sp, req->job, &sj, &made, err);
    if (!st && sj->job.mode == TS_MODE_REDUCE)
        st = ts_err_set(err, TS_ESTATE, "job.mode: reduce keeps parameters on the workers; "
                        "tables live on the shards (bsp, ssp or asp)");
    if (!st)
        st = find(sj, req, &t, err);
    if (!st && !t && sj->armed)   /* a snapshot would leave it out: tables.h */
        st = ts_err_set(err, TS_ESTATE, "job '%s': a snapshot of step %" PRIu64 " is armed, "
                        "and snapshots do not cover tables yet; register tables before it",
                        sj->job.id, (uint64_t)sj->armed_step);
    if (!st && !t && !(st = create(sp, sj, req, &t, err))) {
        sj->tables[t->id] = t;
        sj->ntables++;
        sj->orphan_since_ms = 0;
        ts_log(TS_INFO, "shard", "job %s: table %u '%s', dim %u, ids 0..%" PRIu64 ", %s, %s",
               sj->job.id, t->id, t->name, t->dim, t->max_id, t->init, t->optimizer);
    }
    if (!st) {
        *version = ts_table_step(t->t);
        *rows = ts_table_count(t->t);
    }
    if (st && made)
        params_drop_unused(sp, sj);
    pthread_mutex_unlock(&sp->mu);
    return st;
}

struct shard_table *shard_params_table(struct shard_params *sp, struct shard_job *sj,
                                       uint32_t table)
{
    struct shard_table *t = NULL;

    if (!sj || table >= SHARD_MAX_TABLES)
        return NULL;
    pthread_mutex_lock(&sp->mu);
    t = sj->tables[table];
    pthread_mutex_unlock(&sp->mu);
    return t;
}

void shard_tables_each(struct shard_params *sp,
                       void (*fn)(void *arg, const char *job, struct shard_table *t), void *arg)
{
    pthread_rwlock_rdlock(&sp->life);   /* no job is released meanwhile */
    pthread_mutex_lock(&sp->mu);
    for (size_t j = 0; j < sp->njobs; j++)
        for (uint32_t i = 0; sp->jobs[j]->ntables && i < SHARD_MAX_TABLES; i++)
            if (sp->jobs[j]->tables[i])
                fn(arg, sp->jobs[j]->job.id, sp->jobs[j]->tables[i]);
    pthread_mutex_unlock(&sp->mu);
    pthread_rwlock_unlock(&sp->life);
}

void shard_tables_free(struct shard_job *sj)
{
    for (uint32_t i = 0; i < SHARD_MAX_TABLES; i++)
        if (sj->tables[i]) {
            ts_table_free(sj->tables[i]->t);
            free(sj->tables[i]);
            sj->tables[i] = NULL;
        }
    sj->ntables = 0;
}
