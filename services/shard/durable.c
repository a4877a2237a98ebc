/* durable.c - see durable.h. */
#include "durable.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "params.h"
#include "tables.h"
#include "tables_internal.h"
#include "util/json.h"
#include "util/log.h"
#include "util/proc.h"

#define CHECK_MS 1000   /* how often the checkpoint thread looks at the log's size */

struct shard_durable {
    struct ts_redo *redo;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop;
    pthread_t thread;
    uint64_t checkpoints, failures;   /* under mu */
};

static void *checkpointer(void *arg)
{
    struct shard_durable *d = arg;
    struct ts_redo_stats rs;
    struct timespec ts;
    struct ts_err err = { 0 };

    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        ts_abstime_ms(&ts, CHECK_MS);
        pthread_cond_timedwait(&d->wake, &d->mu, &ts);
        if (d->stop)
            break;
        ts_redo_stats(d->redo, &rs);
        if (rs.bytes < SHARD_REDO_CHECKPOINT_BYTES)
            continue;
        pthread_mutex_unlock(&d->mu);
        ts_status st = ts_redo_checkpoint(d->redo, &err);
        pthread_mutex_lock(&d->mu);
        if (st) {   /* the older generations stay: nothing is lost, the log only grows */
            d->failures++;
            ts_log(TS_WARN, "shard", "redo log: %s (tried again in %d ms)", err.msg, CHECK_MS);
            ts_err_clear(&err);
        } else {
            d->checkpoints++;
            ts_log(TS_INFO, "shard", "redo log: checkpoint at %" PRIu64 " MiB, generation %"
                   PRIu64 " started", rs.bytes >> 20, rs.generation + 1);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

ts_status shard_durable_open(const char *dir, struct shard_durable **out, struct ts_err *err)
{
    struct shard_durable *d = calloc(1, sizeof(*d));
    ts_status st;
    int e;

    if (!d)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if ((st = ts_redo_open(dir, &d->redo, err))) {
        free(d);
        return st;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    if ((e = pthread_create(&d->thread, NULL, checkpointer, d))) {
        ts_redo_close(d->redo);
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return ts_err_set(err, TS_EINTERNAL, "redo log: cannot start its thread: %s",
                          strerror(e));
    }
    *out = d;
    return TS_OK;
}

void shard_durable_close(struct shard_durable *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    ts_redo_close(d->redo);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* "r/JOB/TABLE" (the registration) or "t/JOB/TABLE" (the rows): job ids and table names are
 * 1..64 of [A-Za-z0-9._-], so the slash parts them. */
static void key_of(char kind, const char *job, const char *table, char *buf, size_t len)
{
    snprintf(buf, len, "%c/%s/%s", kind, job, table);
}

ts_status shard_durable_table(struct shard_durable *d, const struct shard_job *sj,
                              struct shard_table *t, struct ts_err *err)
{
    char tkey[TS_REDO_KEY_MAX + 1];
    struct iovec iov;
    uint64_t seq;
    ts_status st;

    if (!d)
        return TS_OK;
    /* What the table was made with, from the job and the table (a registration's request,
     * or a snapshot's spec where a rollback made it, carries only part of it). */
    Tessera__V1__RegisterTableRequest req = TESSERA__V1__REGISTER_TABLE_REQUEST__INIT;
    Tessera__V1__JobSpec js = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TableSpec spec;
    js.id = (char *)sj->job.id;
    js.workers = sj->job.workers;
    js.exact = sj->job.exact;
    js.optimizer = (char *)sj->job.optimizer;
    js.batch = sj->job.batch;
    js.data_seed = sj->data_seed;
    js.micro_batch = sj->micro;
    js.mode = (Tessera__V1__TrainMode)sj->job.mode;
    js.staleness = sj->job.staleness;
    tables_spec(t, &spec);
    req.job = &js;
    req.table = &spec;
    req.table_id = t->id;
    iov.iov_len = tessera__v1__register_table_request__get_packed_size(&req);
    if (!(iov.iov_base = malloc(iov.iov_len ? iov.iov_len : 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    tessera__v1__register_table_request__pack(&req, iov.iov_base);
    key_of('r', sj->job.id, t->name, t->reg_key, sizeof(t->reg_key));
    key_of('t', sj->job.id, t->name, tkey, sizeof(tkey));
    st = ts_redo_put(d->redo, t->reg_key, 0, &iov, 1, &seq, err);
    free(iov.iov_base);
    if (!st && (st = ts_table_redo(t->t, d->redo, tkey, err)))
        ts_redo_forget(d->redo, t->reg_key);
    if (st) {
        t->reg_key[0] = '\0';
        ts_err_prefix(err, "--redo-dir");
        return st;
    }
    t->durable = d;
    return TS_OK;
}

void shard_durable_forget(struct shard_table *t)
{
    if (t->durable && t->reg_key[0])
        ts_redo_forget(t->durable->redo, t->reg_key);
}

ts_status shard_durable_wait(struct shard_table *t, int ms, struct ts_err *err)
{
    ts_status st;

    if (!t->durable)
        return TS_OK;
    if ((st = ts_table_redo_wait(t->t, ms, err)))
        ts_err_prefix(err, "table '%s': its rows are not on this shard's disk yet", t->name);
    return st;
}

void shard_durable_stats(struct shard_durable *d, struct shard_durable_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!d)
        return;
    ts_redo_stats(d->redo, &out->redo);
    pthread_mutex_lock(&d->mu);
    out->checkpoints = d->checkpoints;
    out->checkpoint_failures = d->failures;
    pthread_mutex_unlock(&d->mu);
}

/* ---- the offline replay (--replay) ---- */

/* A table made again from the log: its registration (the last one the log holds for the key,
 * found by a first pass), the job it names, the table. */
struct replayed {
    char key[TS_REDO_KEY_MAX + 1];   /* "t/JOB/TABLE" */
    uint8_t *reg;                    /* the packed RegisterTableRequest */
    size_t reg_len;
    struct ts_job job;
    struct ts_table *t;
    uint64_t records;
};

struct replay {
    struct replayed *v;
    size_t n, cap;
    struct ts_table_budget budget;
};

static struct replayed *find(struct replay *rp, const char *tkey)
{
    for (size_t i = 0; i < rp->n; i++)
        if (!strcmp(rp->v[i].key, tkey))
            return &rp->v[i];
    return NULL;
}

/* First pass: every key's last registration. */
static ts_status collect(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct replay *rp = ctx;
    struct replayed *e;
    char tkey[TS_REDO_KEY_MAX + 1];

    if (r->kind != TS_REDO_BLOB || strncmp(r->key, "r/", 2))
        return TS_OK;
    snprintf(tkey, sizeof(tkey), "t/%s", r->key + 2);
    if (!(e = find(rp, tkey))) {
        if (rp->n == rp->cap) {
            size_t cap = rp->cap ? rp->cap * 2 : 8;
            struct replayed *v = realloc(rp->v, cap * sizeof(*v));
            if (!v)
                return ts_err_set(err, TS_ENOMEM, "out of memory");
            rp->v = v;
            rp->cap = cap;
        }
        e = &rp->v[rp->n++];
        memset(e, 0, sizeof(*e));
        snprintf(e->key, sizeof(e->key), "%s", tkey);
    }
    free(e->reg);
    if (!(e->reg = malloc(r->n ? r->n : 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    memcpy(e->reg, r->records, r->n);
    e->reg_len = r->n;
    return TS_OK;
}

/* e's table made afresh from its registration. */
static ts_status make(struct replay *rp, struct replayed *e, struct ts_err *err)
{
    Tessera__V1__RegisterTableRequest *req =
        tessera__v1__register_table_request__unpack(NULL, e->reg_len, e->reg);
    ts_status st;

    if (!req || !req->job || !req->table) {
        if (req)
            tessera__v1__register_table_request__free_unpacked(req, NULL);
        return ts_err_set(err, TS_ECORRUPT, "%s: its registration in the log does not parse",
                          e->key);
    }
    const Tessera__V1__TableSpec *s = req->table;
    const Tessera__V1__JobSpec *js = req->job;
    struct ts_table_cfg cfg = { .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                .init = s->initializer, .seed = s->seed,
                                .optimizer = s->optimizer, .ttl_steps = s->ttl_steps,
                                .ttl_seconds = s->ttl_seconds };
    ts_table_free(e->t);
    e->t = NULL;
    if (!(st = ts_job_init(&e->job, js->id, js->workers, js->exact, js->optimizer, js->batch,
                           err)) &&
        !(st = ts_job_set_mode(&e->job, js->mode ? (enum ts_mode)js->mode : TS_MODE_BSP,
                               js->staleness, err)))
        st = ts_table_create(&e->job, &cfg, &rp->budget, &e->t, err);
    tessera__v1__register_table_request__free_unpacked(req, NULL);
    if (st)
        ts_err_prefix(err, "%s", e->key);
    return st;
}

/* Second pass: the records applied in order. A registration again of a table that exists
 * (a checkpoint carries it after the table's image) changes nothing; a table's records before
 * its registration in a generation (the same) make it from the registration found. */
static ts_status apply(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct replay *rp = ctx;
    struct replayed *e;
    ts_status st;

    if (!strncmp(r->key, "t/", 2)) {
        if (!(e = find(rp, r->key)))
            return ts_err_set(err, TS_ECORRUPT, "%s: records of a table the log holds no "
                              "registration of", r->key);
        if (r->kind == TS_REDO_DROP) {
            ts_table_free(e->t);
            e->t = NULL;
            return TS_OK;
        }
        if (!e->t && (st = make(rp, e, err)))
            return st;
        e->records++;
        return ts_table_redo_apply(e->t, r, err);
    }
    return TS_OK;
}

static void replay_free(struct replay *rp)
{
    for (size_t i = 0; i < rp->n; i++) {
        ts_table_free(rp->v[i].t);
        free(rp->v[i].reg);
    }
    free(rp->v);
}

int shard_durable_show(const char *dir, bool json)
{
    struct replay rp = { 0 };
    struct ts_redo *redo = NULL;
    struct ts_redo_replayed got;
    struct ts_err err = { 0 };
    struct ts_json j;
    char hex[65];
    int rc = 1;

    ts_table_budget_init(&rp.budget, UINT64_MAX);
    if (ts_redo_open(dir, &redo, &err) ||
        ts_redo_replay(redo, collect, &rp, NULL, &err) ||
        ts_redo_replay(redo, apply, &rp, &got, &err))
        goto out;
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "dir", dir);
    ts_json_uint(&j, "files", got.files);
    ts_json_uint(&j, "records", got.records);
    ts_json_uint(&j, "bytes", got.bytes);
    ts_json_uint(&j, "torn_bytes", got.torn);
    ts_json_arr(&j, "tables");
    if (!json)
        printf("%-24s %-24s %10s %12s  %s\n", "JOB", "TABLE", "STEP", "ROWS", "SHA256");
    for (size_t i = 0; i < rp.n; i++) {
        struct replayed *e = &rp.v[i];
        struct ts_table *one = e->t;
        const char *name;

        if (!e->t)   /* dropped: its job was released */
            continue;
        if (ts_table_sha256(&one, 1, hex, &err)) {
            ts_json_fini(&j);
            goto out;
        }
        name = ts_table_name(e->t);
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "job", e->job.id);
        ts_json_str(&j, "table", name);
        ts_json_uint(&j, "step", ts_table_step(e->t));
        ts_json_uint(&j, "rows", ts_table_count(e->t));
        ts_json_uint(&j, "records", e->records);
        ts_json_str(&j, "sha256", hex);
        ts_json_end(&j);
        if (!json)
            printf("%-24s %-24s %10" PRIu64 " %12" PRIu64 "  %s\n", e->job.id, name,
                   ts_table_step(e->t), ts_table_count(e->t), hex);
    }
    ts_json_end(&j);
    ts_json_end(&j);
    if (json)
        printf("%s\n", j.buf);
    else
        printf("%s: %" PRIu64 " file(s), %" PRIu64 " records, %" PRIu64 " bytes replayed; %"
               PRIu64 " torn bytes cut off its end\n", dir, got.files, got.records, got.bytes,
               got.torn);
    ts_json_fini(&j);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "tessera-shard: --replay %s: %s\n", dir, err.msg);
    replay_free(&rp);
    ts_redo_close(redo);
    return rc;
}
