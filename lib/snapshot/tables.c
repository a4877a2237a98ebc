/* tables.c - sparse tables in snapshots: their manifests' checks, runs of records in and out
 * of the store, their merge across shards, and how a table differs between two snapshots
 * (snapshot.h, "Sparse tables"). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/internal.h"
#include "tensor/tensor.h"
#include "util/names.h"

#define TABLE_DIM_MAX 4096
#define TABLE_ID_LIMIT 0x7fffffffffffffffull

size_t ts_snap_record_bytes(const Tessera__V1__TableSpec *s)
{
    struct ts_optim_cfg cfg;

    if (!s || s->dim < 1 || s->dim > TABLE_DIM_MAX || ts_optim_parse(s->optimizer, &cfg, NULL))
        return 0;
    return 24 + (1 + ts_optim_state_len(cfg.kind)) * (size_t)s->dim * sizeof(float);
}

size_t ts_snap_row_state_len(const Tessera__V1__TableSpec *s)
{
    return (ts_snap_record_bytes(s) - 24) / (s->dim * sizeof(float)) - 1;
}

static ts_status check_run(const ts_manifest *m, const ts_table_manifest *t, size_t ti,
                           size_t ri, size_t rb, struct ts_err *err)
{
    const ts_row_run *r = t->runs[ri];
    size_t want;

    if (r->step > m->step)
        return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].runs[%zu].step: %" PRIu64
                          ", after the snapshot's step %" PRIu64, ti, ri, r->step, m->step);
    if (r->records > (UINT64_C(1) << 40))
        return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].runs[%zu].records: %" PRIu64
                          " is too many", ti, ri, r->records);
    want = ts_store_nchunks((size_t)r->records * rb, m->chunk_bytes);
    if (r->n_chunks != want)
        return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].runs[%zu].chunks: %zu ids, "
                          "want %zu", ti, ri, r->n_chunks, want);
    for (size_t i = 0; i < r->n_chunks; i++)
        if (r->chunks[i].len != TS_STORE_ID_LEN)
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].runs[%zu].chunks[%zu]: %zu "
                              "bytes, want %d", ti, ri, i, r->chunks[i].len, TS_STORE_ID_LEN);
    return TS_OK;
}

ts_status snap_check_tables(const ts_manifest *m, struct ts_err *err)
{
    struct ts_err name = { 0 };
    ts_status st;

    if (m->n_tables > TS_MANIFEST_MAX_TABLES)
        return ts_err_set(err, TS_EINVAL, "manifest: tables: %zu, at most %d", m->n_tables,
                          TS_MANIFEST_MAX_TABLES);
    for (size_t ti = 0; ti < m->n_tables; ti++) {
        const ts_table_manifest *t = m->tables[ti];
        const Tessera__V1__TableSpec *s = t->spec;
        size_t rb;

        if (!s)
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].spec: required", ti);
        if (ts_job_id_check("name", s->name, &name))
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].spec.%s", ti, name.msg);
        if (t->id >= TS_MANIFEST_MAX_TABLES)
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].id: %u, at most %d", ti,
                              t->id, TS_MANIFEST_MAX_TABLES - 1);
        for (size_t j = 0; j < ti; j++)
            if (m->tables[j]->id == t->id || strcmp(m->tables[j]->spec->name, s->name) == 0)
                return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu]: id %u or name '%s' "
                                  "repeats tables[%zu]", ti, t->id, s->name, j);
        if (s->max_id > TABLE_ID_LIMIT)
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].spec.max_id: above 2^63 - "
                              "1", ti);
        if (!(rb = ts_snap_record_bytes(s)))
            return ts_err_set(err, TS_EINVAL, "manifest: tables[%zu].spec: dim %u outside "
                              "1..%d, or optimizer '%s' unknown", ti, s->dim, TABLE_DIM_MAX,
                              s->optimizer);
        for (size_t ri = 0; ri < t->n_runs; ri++)
            if ((st = check_run(m, t, ti, ri, rb, err)))
                return st;
    }
    return TS_OK;
}

size_t ts_snap_run_mem(size_t records, size_t record_bytes, uint32_t chunk_bytes)
{
    return ts_store_nchunks(records * record_bytes, chunk_bytes) *
               (sizeof(ProtobufCBinaryData) + TS_STORE_ID_LEN) + 1;
}

ts_status ts_snap_put_run(struct ts_store *s, const uint8_t *records, size_t n,
                          size_t record_bytes, uint32_t chunk_bytes, ts_row_run *run, void *mem,
                          uint64_t *written, struct ts_err *err)
{
    size_t nc = ts_store_nchunks(n * record_bytes, chunk_bytes);
    ProtobufCBinaryData *bd = mem;
    uint8_t (*ids)[TS_STORE_ID_LEN] = (void *)((char *)mem + nc * sizeof(*bd));
    uint64_t w = 0;
    ts_status st;

    if (n && (st = ts_store_put_blob(s, records, n * record_bytes, chunk_bytes, ids, &w, err)))
        return st;
    for (size_t i = 0; i < nc; i++)
        bd[i] = (ProtobufCBinaryData){ TS_STORE_ID_LEN, ids[i] };
    run->chunks = bd;
    run->n_chunks = nc;
    run->records = n;
    run->bytes_written = w;
    *written = w;
    return TS_OK;
}

ts_status ts_snap_read_run(struct ts_store *s, const ts_manifest *m, const ts_table_manifest *t,
                           const ts_row_run *r, uint8_t *records, struct ts_err *err)
{
    size_t rb = ts_snap_record_bytes(t->spec);
    uint8_t (*ids)[TS_STORE_ID_LEN];
    ts_status st;

    if (!r->records)
        return TS_OK;
    if ((st = ts_snap_ids(r->chunks, r->n_chunks, &ids, err)))
        return st;
    st = ts_store_get_blob(s, ids, records, (size_t)r->records * rb, m->chunk_bytes, err);
    free(ids);
    if (st)
        ts_err_prefix(err, "table '%s' run of shard %u at step %" PRIu64, t->spec->name,
                      r->shard_id, r->step);
    return st;
}

bool ts_snap_same_table(const Tessera__V1__TableSpec *a, const Tessera__V1__TableSpec *b)
{
    return strcmp(a->name, b->name) == 0 && a->dim == b->dim && a->max_id == b->max_id &&
           strcmp(a->initializer, b->initializer) == 0 && a->seed == b->seed &&
           strcmp(a->optimizer, b->optimizer) == 0 && a->ttl_steps == b->ttl_steps &&
           a->ttl_seconds == b->ttl_seconds;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* Every shard some piece's table `id` was placed on is covered by some piece: its rows are
 * in the runs (TableManifest.placed_on, covers). A piece without placed_on (a shard of an
 * older build) is not checked. TS_ESTATE naming the table and the shard otherwise. */
static ts_status check_cover(const struct ts_snap_piece *pieces, size_t n, uint32_t id,
                             struct ts_err *err)
{
    size_t ncov = 0, k = 0;
    uint32_t *cov;
    ts_status st = TS_OK;

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < pieces[i].n_tables; j++)
            ncov += pieces[i].tables[j]->id == id ? pieces[i].tables[j]->n_covers : 0;
    if (!(cov = malloc((ncov + 1) * sizeof(*cov))))
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < pieces[i].n_tables; j++)
            if (pieces[i].tables[j]->id == id && pieces[i].tables[j]->n_covers) {
                memcpy(cov + k, pieces[i].tables[j]->covers,
                       pieces[i].tables[j]->n_covers * sizeof(*cov));
                k += pieces[i].tables[j]->n_covers;
            }
    qsort(cov, ncov, sizeof(*cov), cmp_u32);
    for (size_t i = 0; !st && i < n; i++)
        for (size_t j = 0; !st && j < pieces[i].n_tables; j++) {
            const ts_table_manifest *t = pieces[i].tables[j];
            for (size_t p = 0; !st && t->id == id && p < t->n_placed_on; p++)
                if (!bsearch(&t->placed_on[p], cov, ncov, sizeof(*cov), cmp_u32))
                    st = ts_err_set(err, TS_ESTATE, "snapshot: table '%s': the rows of shard %u "
                                    "(the table is placed on %zu shards, shard %u says) are in "
                                    "no shard's piece: that shard left and no copy of its rows "
                                    "is served yet, or they lost every copy; take the snapshot "
                                    "again once the shards follow the map", t->spec->name,
                                    t->placed_on[p], t->n_placed_on, pieces[i].shard);
        }
    free(cov);
    return st;
}

ts_status snap_count_tables(const struct ts_snap_piece *pieces, size_t n, size_t *ntables,
                            size_t *nruns, struct ts_err *err)
{
    const ts_table_manifest *first[TS_MANIFEST_MAX_TABLES] = { 0 };

    *ntables = *nruns = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < pieces[i].n_tables; k++) {
            const ts_table_manifest *t = pieces[i].tables[k];
            if (t->id >= TS_MANIFEST_MAX_TABLES || !t->spec)
                return ts_err_set(err, TS_EINTERNAL, "snapshot: shard %u sent table id %u",
                                  pieces[i].shard, t->id);
            if (!first[t->id]) {
                first[t->id] = t;
                ++*ntables;
            } else if (!ts_snap_same_table(first[t->id]->spec, t->spec)) {
                return ts_err_set(err, TS_EINTERNAL, "snapshot: shard %u holds table %u as "
                                  "'%s', another shard as '%s' (or with another spec)",
                                  pieces[i].shard, t->id, t->spec->name,
                                  first[t->id]->spec->name);
            }
            *nruns += t->n_runs;
        }
    for (uint32_t id = 0; id < TS_MANIFEST_MAX_TABLES; id++) {
        ts_status st = first[id] ? check_cover(pieces, n, id, err) : TS_OK;
        if (st)
            return st;
    }
    return TS_OK;
}

void snap_merge_tables(const struct ts_snap_piece *pieces, size_t n, ts_manifest *m,
                       ts_table_manifest **tables, ts_table_manifest *copies, ts_row_run **runs)
{
    size_t nt = 0;

    /* In id order: each id's first table as the copy, then every piece's runs of it. */
    for (uint32_t id = 0; id < TS_MANIFEST_MAX_TABLES; id++) {
        ts_table_manifest *dst = NULL;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < pieces[i].n_tables; k++) {
                const ts_table_manifest *t = pieces[i].tables[k];
                if (t->id != id)
                    continue;
                if (!dst) {
                    dst = &copies[nt];
                    *dst = *t;
                    dst->rows = 0;
                    dst->runs = runs;
                    dst->n_runs = 0;
                    dst->n_placed_on = dst->n_covers = 0;   /* a piece's, checked above */
                    dst->placed_on = dst->covers = NULL;
                    tables[nt++] = dst;
                }
                dst->rows += t->rows;
                for (size_t r = 0; r < t->n_runs; r++)
                    dst->runs[dst->n_runs++] = t->runs[r];
                runs += t->n_runs;
            }
    }
    m->tables = tables;
    m->n_tables = nt;
}

ts_status snap_add_table_chunks(const ts_manifest *m,
                                ts_status (*add)(void *ctx, const uint8_t *id,
                                                 struct ts_err *err),
                                void *ctx, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (size_t t = 0; !st && t < m->n_tables; t++)
        for (size_t r = 0; !st && r < m->tables[t]->n_runs; r++)
            for (size_t c = 0; !st && c < m->tables[t]->runs[r]->n_chunks; c++)
                st = add(ctx, m->tables[t]->runs[r]->chunks[c].data, err);
    return st;
}

ts_status snap_check_table_runs(struct ts_store *s, const ts_manifest *m,
                                void (*progress)(void *ctx, const char *tensor, uint64_t bytes),
                                void *ctx, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (size_t t = 0; !st && t < m->n_tables; t++) {
        const ts_table_manifest *tm = m->tables[t];
        size_t rb = ts_snap_record_bytes(tm->spec);
        uint64_t bytes = 0;

        for (size_t r = 0; !st && r < tm->n_runs; r++) {
            uint8_t *buf = malloc((size_t)tm->runs[r]->records * rb + 1);
            st = !buf ? ts_err_set(err, TS_ENOMEM, "snapshot: out of memory")
                      : ts_snap_read_run(s, m, tm, tm->runs[r], buf, err);
            bytes += tm->runs[r]->records * rb;
            free(buf);
        }
        if (!st && progress)
            progress(ctx, tm->spec->name, bytes);
    }
    return st;
}

/* A record of a table read whole: where it is, and the step of its run. */
struct rec_ref {
    uint64_t id, step;
    const uint8_t *at;
};

static int by_id_newest(const void *a, const void *b)
{
    const struct rec_ref *x = a, *y = b;

    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->step < y->step) - (x->step > y->step);   /* newest first */
}

void ts_snap_rows_free(struct ts_snap_rows *r)
{
    free(r->ids);
    free(r->values);
    free(r->state);
    free(r->updates);
    free(r->steps);
    *r = (struct ts_snap_rows){ 0 };
}

ts_status ts_snap_read_rows(struct ts_store *s, const ts_manifest *m, const ts_table_manifest *t,
                            bool all, struct ts_snap_rows *out, struct ts_err *err)
{
    size_t rb = ts_snap_record_bytes(t->spec), total = 0, n = 0, at = 0, rows = 0;
    size_t dim = t->spec->dim, slen = ts_snap_row_state_len(t->spec);
    uint8_t **bufs = calloc(t->n_runs + 1, sizeof(*bufs));
    struct rec_ref *refs = NULL;
    ts_status st = bufs ? TS_OK : ts_err_set(err, TS_ENOMEM, "out of memory");

    *out = (struct ts_snap_rows){ .state_len = slen };
    for (size_t r = 0; r < t->n_runs; r++)
        total += t->runs[r]->records;
    if (!st && !(refs = malloc((total + 1) * sizeof(*refs))))
        st = ts_err_set(err, TS_ENOMEM, "table '%s': out of memory for %zu records",
                        t->spec->name, total);
    for (size_t r = 0; !st && r < t->n_runs; r++) {
        const ts_row_run *run = t->runs[r];
        if (!(bufs[r] = malloc((size_t)run->records * rb + 1)))
            st = ts_err_set(err, TS_ENOMEM, "out of memory");
        if (!st)
            st = ts_snap_read_run(s, m, t, run, bufs[r], err);
        for (size_t k = 0; !st && k < run->records; k++) {
            refs[n].at = bufs[r] + k * rb;
            memcpy(&refs[n].id, refs[n].at, sizeof(uint64_t));
            refs[n++].step = run->step;
        }
    }
    if (!st)
        qsort(refs, n, sizeof(*refs), by_id_newest);
    for (size_t k = 0; !st && k < n; k++)   /* distinct ids */
        rows += k == 0 || refs[k].id != refs[k - 1].id;
    if (!st && rows != t->rows)
        st = ts_err_set(err, TS_ECORRUPT, "table '%s': its runs hold %zu rows, the manifest "
                        "says %" PRIu64 "%s", t->spec->name, rows, t->rows, rows < t->rows ?
                        ": the runs are damaged, or the snapshot was written while the job "
                        "trained on by a Tessera that counted rows made after its step "
                        "(before December 2026; its rows are right, its count is not)" :
                        ": the runs are damaged; use another snapshot");
    if (!st && rows &&
        (!(out->ids = malloc(rows * sizeof(*out->ids))) ||
         !(out->values = malloc(rows * dim * sizeof(float))) ||
         (all && slen && !(out->state = malloc(rows * slen * dim * sizeof(float)))) ||
         (all && !(out->updates = malloc(rows * sizeof(*out->updates)))) ||
         (all && !(out->steps = malloc(rows * sizeof(*out->steps))))))
        st = ts_err_set(err, TS_ENOMEM, "table '%s': out of memory for %zu rows",
                        t->spec->name, rows);
    for (size_t k = 0; !st && k < n; k++) {
        if (k && refs[k].id == refs[k - 1].id)
            continue;   /* an older record of the row */
        out->ids[at] = refs[k].id;
        memcpy(out->values + at * dim, refs[k].at + 24, dim * sizeof(float));
        if (out->state)
            memcpy(out->state + at * slen * dim, refs[k].at + 24 + dim * sizeof(float),
                   slen * dim * sizeof(float));
        if (out->updates)
            memcpy(&out->updates[at], refs[k].at + 8, sizeof(uint64_t));
        if (out->steps)
            memcpy(&out->steps[at], refs[k].at + 16, sizeof(uint64_t));
        at++;
    }
    out->rows = rows;
    for (size_t r = 0; bufs && r < t->n_runs; r++)
        free(bufs[r]);
    free(bufs);
    free(refs);
    if (st)
        ts_snap_rows_free(out);
    return st;
}

ts_status ts_snap_read_table(struct ts_store *s, const ts_manifest *m,
                             const ts_table_manifest *t, uint64_t **ids, float **values,
                             size_t *rows, struct ts_err *err)
{
    struct ts_snap_rows r;
    ts_status st = ts_snap_read_rows(s, m, t, false, &r, err);

    *ids = r.ids;
    *values = r.values;
    *rows = r.rows;
    return st;
}

static const ts_table_manifest *find_table(const ts_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->n_tables; i++)
        if (strcmp(m->tables[i]->spec->name, name) == 0)
            return m->tables[i];
    return NULL;
}

/* Whether run r is one of t's runs: the same chunks (an incremental snapshot keeps its
 * parent's runs as they were). */
static bool has_run(const ts_table_manifest *t, const ts_row_run *r)
{
    for (size_t i = 0; i < t->n_runs; i++) {
        const ts_row_run *q = t->runs[i];
        bool same = q->n_chunks == r->n_chunks && q->records == r->records;
        for (size_t c = 0; same && c < r->n_chunks; c++)
            same = memcmp(q->chunks[c].data, r->chunks[c].data, TS_STORE_ID_LEN) == 0;
        if (same)
            return true;
    }
    return false;
}

/* Reads ta and tb whole and compares their rows by id (both ascending). */
static ts_status diff_rows(struct ts_store *s, const ts_manifest *a, const ts_table_manifest *ta,
                           const ts_manifest *b, const ts_table_manifest *tb,
                           struct ts_snap_table_diff *d, struct ts_err *err)
{
    uint64_t *ia = NULL, *ib = NULL;
    float *va = NULL, *vb = NULL;
    size_t na = 0, nb = 0, i = 0, j = 0, dim = tb->spec->dim;
    double sum = 0;
    ts_status st = ts_snap_read_table(s, a, ta, &ia, &va, &na, err);

    if (!st)
        st = ts_snap_read_table(s, b, tb, &ib, &vb, &nb, err);
    d->rows_a = na;
    d->rows_b = nb;
    while (!st && (i < na || j < nb)) {
        if (j == nb || (i < na && ia[i] < ib[j])) {
            d->removed++;
            i++;
        } else if (i == na || ib[j] < ia[i]) {
            d->added++;
            j++;
        } else {
            const float *x = va + i * dim, *y = vb + j * dim;
            if (memcmp(x, y, dim * sizeof(float)) != 0)
                d->changed++;
            for (size_t k = 0; k < dim; k++) {
                double e = (double)y[k] - (double)x[k];
                sum += e * e;
                if (fabs(e) > d->max_abs || isnan(e))
                    d->max_abs = isnan(e) ? NAN : fmax(d->max_abs, fabs(e));
            }
            i++;
            j++;
        }
    }
    d->l2 = sqrt(sum);
    free(ia);
    free(ib);
    free(va);
    free(vb);
    return st;
}

ts_status ts_snap_diff_tables(struct ts_store *s, const ts_manifest *a, const ts_manifest *b,
                              struct ts_snap_table_diff **out, size_t *n, struct ts_err *err)
{
    struct ts_snap_table_diff *v = calloc(a->n_tables + b->n_tables + 1, sizeof(*v));
    ts_status st = v ? TS_OK : ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    size_t k = 0;

    for (size_t i = 0; !st && i < b->n_tables; i++) {
        const ts_table_manifest *tb = b->tables[i];
        const ts_table_manifest *ta = find_table(a, tb->spec->name);
        struct ts_snap_table_diff *d = &v[k++];

        d->name = tb->spec->name;
        d->runs = tb->n_runs;
        for (size_t r = 0; ta && r < tb->n_runs; r++)
            d->runs_shared += has_run(ta, tb->runs[r]);
        if (!ta) {
            d->kind = TS_DIFF_ADDED;
        } else if (!ts_snap_same_table(ta->spec, tb->spec)) {
            d->kind = TS_DIFF_RESHAPED;
        } else if (d->runs_shared == tb->n_runs && ta->n_runs == tb->n_runs) {
            d->kind = TS_DIFF_SAME;   /* the same runs: the same rows, nothing read */
            d->rows_a = ta->rows;
            d->rows_b = tb->rows;
        } else if ((st = diff_rows(s, a, ta, b, tb, d, err)) == TS_OK) {
            d->kind = d->added || d->removed || d->changed ? TS_DIFF_CHANGED : TS_DIFF_SAME;
        }
    }
    for (size_t i = 0; !st && i < a->n_tables; i++)
        if (!find_table(b, a->tables[i]->spec->name))
            v[k++] = (struct ts_snap_table_diff){ .name = a->tables[i]->spec->name,
                                                  .kind = TS_DIFF_REMOVED };
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    *n = k;
    return TS_OK;
}
