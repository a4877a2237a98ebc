/* sdk_snapshot.c - tessera_snapshot_*: a snapshot store read and written whole, with no
 * cluster (include/tessera.h; lib/snapshot whole.c does the work). A handle owns its store and
 * its parsed manifest; the names it hands out point into the manifest. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client/sdk_internal.h"
#include "snapshot/snapshot.h"
#include "table/table.h"

struct tessera_snapshot {
    struct ts_store *store;
    ts_manifest *m;
    char id[2 * TS_STORE_ID_LEN + 1];
};

/* The store in dir; unless create, dir must exist (ts_store_open would make it). */
static ts_status open_store(const char *dir, bool create, struct ts_store **s,
                            struct ts_err *err)
{
    struct stat sb;

    if (!dir || !dir[0])
        return ts_err_set(err, TS_EINVAL, "store: a directory is required");
    if (!create && (stat(dir, &sb) || !S_ISDIR(sb.st_mode)))
        return ts_err_set(err, TS_ENOTFOUND, "store: '%s' is not a directory (the --store "
                          "of tessera up; tessera status shows it)", dir);
    return ts_store_open(dir, NULL, s, err);
}

int tessera_snapshot_open(const char *store, const char *ref, tessera_snapshot **out,
                          struct tessera_error *e)
{
    struct tessera_snapshot *s = calloc(1, sizeof(*s));
    struct ts_err err = { 0 };
    uint8_t id[TS_STORE_ID_LEN];

    if (!s) {
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return sdk_fail(e, &err);
    }
    if (open_store(store, false, &s->store, &err) ||
        ts_snap_resolve(s->store, ref && ref[0] ? ref : "HEAD", id, NULL, &err) ||
        ts_manifest_load(s->store, id, &s->m, &err)) {
        tessera_snapshot_close(s);
        return sdk_fail(e, &err);
    }
    ts_store_hex(id, s->id);
    *out = s;
    return sdk_ok(e);
}

void tessera_snapshot_info(const tessera_snapshot *s, struct tessera_snapshot_info *out)
{
    const ts_manifest *m = s->m;

    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", s->id);
    out->step = m->step;
    out->created_unix_ms = m->created_unix_ms;
    out->message = m->message;
    out->job = m->job->id;
    out->optimizer = m->job->optimizer;
    out->workers = m->job->workers;
    out->micro_batch = m->job->micro_batch;
    out->exact = m->job->exact;
    out->batch = m->job->batch;
    out->ntensors = (int)m->n_tensors;
    out->state_len = (int)ts_manifest_state_len(m);
}

/* Tensor i of s, or NULL with err set. */
static const ts_tensor_manifest *tensor_at(const tessera_snapshot *s, int i, struct ts_err *err)
{
    if (i < 0 || (size_t)i >= s->m->n_tensors) {
        ts_err_set(err, TS_EINVAL, "tensor: %d, the snapshot has %zu (0..%zu)", i,
                   s->m->n_tensors, s->m->n_tensors - 1);
        return NULL;
    }
    return s->m->tensors[i];
}

int tessera_snapshot_tensor(const tessera_snapshot *s, int i, const char **name,
                            const uint64_t **shape, int *ndim, uint64_t *numel,
                            struct tessera_error *e)
{
    struct ts_err err = { 0 };
    const ts_tensor_manifest *t = tensor_at(s, i, &err);

    if (!t)
        return sdk_fail(e, &err);
    *name = t->spec->name;
    *shape = t->spec->shape;
    *ndim = (int)t->spec->n_shape;
    *numel = t->numel;
    return sdk_ok(e);
}

int tessera_snapshot_read(tessera_snapshot *s, int i, float *values, float *state,
                          int64_t *updates, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    const ts_tensor_manifest *t = tensor_at(s, i, &err);
    uint64_t n;

    if (!t || ts_snap_read_tensor(s->store, s->m, t, values, state, &err))
        return sdk_fail(e, &err);
    if (updates)
        *updates = ts_snap_tensor_updates(t, &n) && n <= INT64_MAX ? (int64_t)n : -1;
    return sdk_ok(e);
}

int tessera_snapshot_ntables(const tessera_snapshot *s)
{
    return (int)s->m->n_tables;
}

/* Table i of s, or NULL with err set. */
static const ts_table_manifest *table_at(const tessera_snapshot *s, int i, struct ts_err *err)
{
    if (i < 0 || (size_t)i >= s->m->n_tables) {
        ts_err_set(err, TS_EINVAL, "table: %d, the snapshot has %zu", i, s->m->n_tables);
        return NULL;
    }
    return s->m->tables[i];
}

int tessera_snapshot_table(const tessera_snapshot *s, int i, const char **name, uint32_t *dim,
                           uint64_t *rows, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    const ts_table_manifest *t = table_at(s, i, &err);

    if (!t)
        return sdk_fail(e, &err);
    *name = t->spec->name;
    *dim = t->spec->dim;
    *rows = t->rows;
    return sdk_ok(e);
}

int tessera_snapshot_table_spec(const tessera_snapshot *s, int i, struct tessera_table_spec *spec,
                                int *state_len, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    const ts_table_manifest *t = table_at(s, i, &err);

    if (!t)
        return sdk_fail(e, &err);
    spec->name = t->spec->name;
    spec->dim = t->spec->dim;
    spec->max_id = t->spec->max_id;
    spec->init = t->spec->initializer;
    spec->seed = t->spec->seed;
    spec->optimizer = t->spec->optimizer;
    if (!spec->size || spec->size >= offsetof(struct tessera_table_spec, ttl_steps) +
                                          sizeof(spec->ttl_steps))
        spec->ttl_steps = t->spec->ttl_steps;
    if (!spec->size || spec->size >= offsetof(struct tessera_table_spec, ttl_seconds) +
                                          sizeof(spec->ttl_seconds))
        spec->ttl_seconds = t->spec->ttl_seconds;
    *state_len = (int)ts_snap_row_state_len(t->spec);
    return sdk_ok(e);
}

int tessera_snapshot_read_rows(tessera_snapshot *s, int i, uint64_t *ids, float *values,
                               float *state, uint64_t *updates, uint64_t *steps,
                               struct tessera_error *e)
{
    struct ts_err err = { 0 };
    const ts_table_manifest *t = table_at(s, i, &err);
    struct ts_snap_rows r;
    size_t dim;

    if (!t || ts_snap_read_rows(s->store, s->m, t, state || updates || steps, &r, &err))
        return sdk_fail(e, &err);
    dim = t->spec->dim;
    if (r.rows) {   /* the manifest's count, which the caller sized the arrays by */
        memcpy(ids, r.ids, r.rows * sizeof(*ids));
        memcpy(values, r.values, r.rows * dim * sizeof(*values));
        if (state && r.state)
            memcpy(state, r.state, r.rows * r.state_len * dim * sizeof(*state));
        if (updates)
            memcpy(updates, r.updates, r.rows * sizeof(*updates));
        if (steps)
            memcpy(steps, r.steps, r.rows * sizeof(*steps));
    }
    ts_snap_rows_free(&r);
    return sdk_ok(e);
}

int tessera_snapshot_read_table(tessera_snapshot *s, int i, uint64_t *ids, float *values,
                                struct tessera_error *e)
{
    return tessera_snapshot_read_rows(s, i, ids, values, NULL, NULL, NULL, e);
}

void tessera_snapshot_close(tessera_snapshot *s)
{
    if (!s)
        return;
    ts_manifest_free(s->m);
    ts_store_close(s->store);
    free(s);
}

int tessera_optimizer_state_len(const char *optimizer, int *len, struct tessera_error *e)
{
    struct ts_optim_cfg cfg;
    struct ts_err err = { 0 };

    if (ts_optim_parse(optimizer ? optimizer : "", &cfg, &err))
        return sdk_fail(e, &err);
    *len = (int)ts_optim_state_len(cfg.kind);
    return sdk_ok(e);
}

/* The import's tables as lib/snapshot takes them (specs and ts: nt each), with
 * tessera_table_register's defaults, each checked as a shard registers it. */
static void import_tables(const struct tessera_import_table *x, size_t nt,
                          const struct ts_job *job, Tessera__V1__TableSpec *specs,
                          struct ts_snap_import_table *ts, struct ts_err *err)
{
    for (size_t i = 0; i < nt; i++) {
        const struct tessera_table_spec *sp = &x[i].spec;
        struct ts_table_cfg cfg = { .name = sp->name ? sp->name : "", .dim = sp->dim,
                                    .max_id = sp->max_id,
                                    .init = sp->init ? sp->init : "normal:0.01",
                                    .seed = sp->seed,
                                    .optimizer = sp->optimizer ? sp->optimizer
                                                               : job->optimizer,
                                    .ttl_steps = sp->ttl_steps };

        if (!sp->size || sp->size >= offsetof(struct tessera_table_spec, ttl_seconds) +
                                          sizeof(sp->ttl_seconds))
            cfg.ttl_seconds = sp->ttl_seconds;
        tessera__v1__table_spec__init(&specs[i]);
        specs[i].name = (char *)cfg.name;
        specs[i].dim = cfg.dim;
        specs[i].max_id = cfg.max_id;
        specs[i].initializer = (char *)cfg.init;
        specs[i].seed = cfg.seed;
        specs[i].optimizer = (char *)cfg.optimizer;
        specs[i].ttl_steps = cfg.ttl_steps;
        specs[i].ttl_seconds = cfg.ttl_seconds;
        ts[i] = (struct ts_snap_import_table){
            .spec = &specs[i], .rows = x[i].rows, .ids = x[i].ids, .value = x[i].values,
            .state = x[i].state, .updates = x[i].updates, .steps = x[i].steps };
        if (!err->code && ts_table_check(job, &cfg, err))
            ts_err_prefix(err, "import: tables[%zu]", i);
    }
}

int tessera_snapshot_import(const char *store, const struct tessera_import_options *o,
                            const struct tessera_import_tensor *t, int n, char id[65],
                            struct tessera_error *e)
{
    struct ts_snap_import_tensor *xs = NULL;
    struct ts_snap_import_table *ts = NULL;
    Tessera__V1__TableSpec *specs = NULL;
    size_t nt = o && o->tables && o->ntables > 0 ? (size_t)o->ntables : 0;
    struct ts_snap_import in;
    struct ts_store *s = NULL;
    struct ts_err err = { 0 };
    struct ts_job job;
    uint8_t raw[TS_STORE_ID_LEN];

    if (!o || (n > 0 && !t) || n < 0)
        ts_err_set(&err, TS_EINVAL, "import: options are required, and n tensors at t");
    else if (!(xs = calloc((size_t)n + 1, sizeof(*xs))) || !(ts = calloc(nt + 1, sizeof(*ts))) ||
             !(specs = calloc(nt + 1, sizeof(*specs))))
        ts_err_set(&err, TS_ENOMEM, "out of memory");
    else if (!ts_job_init(&job, o->job, o->workers ? o->workers : 1, o->exact != 0,
                          o->optimizer, o->batch, &err)) {
        for (int i = 0; i < n; i++)
            xs[i] = (struct ts_snap_import_tensor){
                .name = t[i].name, .shape = t[i].shape,
                .ndim = t[i].ndim > 0 ? (size_t)t[i].ndim : 0, .value = t[i].values,
                .state = t[i].state, .has_updates = t[i].has_updates != 0,
                .updates = t[i].updates };
        import_tables(o->tables, nt, &job, specs, ts, &err);
        in = (struct ts_snap_import){ .job = &job, .step = o->step ? o->step : 1,
                                      .micro_batch = o->micro_batch, .tensors = xs,
                                      .n = (size_t)n, .tables = ts, .ntables = nt,
                                      .branch = o->branch, .tag = o->tag,
                                      .message = o->message };
        if (!err.code && !open_store(store, true, &s, &err) &&
            !ts_snap_import(s, &in, raw, &err))
            ts_store_hex(raw, id);
    }
    free(xs);
    free(ts);
    free(specs);
    ts_store_close(s);
    return err.code ? sdk_fail(e, &err) : sdk_ok(e);
}
