/* whole.c - a snapshot's tensors whole: read for export, written for import (tables too).
 * See snapshot.h. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/snapshot.h"
#include "tensor/tensor.h"
#include "util/names.h"
#include "util/proc.h"

ts_status ts_snap_read_tensor(struct ts_store *s, const ts_manifest *m,
                              const ts_tensor_manifest *t, float *value, float *state,
                              struct ts_err *err)
{
    size_t slen = state ? ts_manifest_state_len(m) : 0;
    float *ps = NULL;
    ts_status st = TS_OK;

    for (size_t i = 0; !st && i < t->n_partitions; i++) {
        const ts_partition_manifest *p = t->partitions[i];

        if (slen && !(ps = realloc(ps, slen * p->length * sizeof(float) + 1)))
            return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
        st = ts_snap_read_partition(s, m, t, p, value + p->offset, slen ? ps : NULL, err);
        /* A partition's state is [component][its elements]; the tensor's [component][numel]. */
        for (size_t k = 0; !st && k < slen; k++)
            memcpy(state + k * t->numel + p->offset, ps + k * p->length,
                   p->length * sizeof(float));
    }
    free(ps);
    return st;
}

bool ts_snap_tensor_updates(const ts_tensor_manifest *t, uint64_t *updates)
{
    for (size_t i = 0; i < t->n_partitions; i++) {
        const Tessera__V1__OptimizerCount *c = t->partitions[i]->optimizer_updates;

        if (!c || (i && c->updates != *updates))
            return false;
        *updates = c->updates;
    }
    return t->n_partitions > 0;
}

/* The import's memory: every block the piece asks for, freed together. */
struct arena {
    void **blocks;
    size_t n, cap;
};

static void *arena_alloc(void *ctx, size_t n)
{
    struct arena *a = ctx;
    void *p;

    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        void **b = realloc(a->blocks, cap * sizeof(*b));

        if (!b)
            return NULL;
        a->blocks = b;
        a->cap = cap;
    }
    if (!(p = calloc(1, n ? n : 1)))
        return NULL;
    return a->blocks[a->n++] = p;
}

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->blocks[i]);
    free(a->blocks);
}

/* Writes tensor x (id) of the import partition by partition into pc. */
static ts_status put_tensor(struct ts_snap_piece *pc, struct ts_store *s,
                            const struct ts_snap_import *in, size_t slen, uint32_t id,
                            const struct ts_snap_import_tensor *x, float *ps, struct ts_err *err)
{
    /* Initializer "assigned": what tessera.torch registers, so that its attach finds the
     * tensors as its own; fans and seed are the initializers', unused. */
    struct ts_snap_tensor t = { .id = id, .name = x->name, .init = "assigned", .shape = x->shape,
                                .ndim = x->ndim, .numel = 1,
                                .partition_bytes = TS_PARTITION_BYTES_DEFAULT };
    ts_status st = TS_OK;

    for (size_t d = 0; d < x->ndim; d++)
        t.numel *= x->shape[d];
    t.nparts = ts_partition_count(t.numel, sizeof(float), t.partition_bytes);
    for (uint32_t i = 0; !st && i < t.nparts; i++) {
        struct ts_snap_part p = { .index = i, .version = in->step, .value = NULL,
                                  .has_updates = x->has_updates, .updates = x->updates };

        ts_partition_range(t.numel, sizeof(float), t.partition_bytes, i, &p.offset, &p.len);
        p.value = x->value + p.offset;
        p.slen = slen * p.len;
        if (slen) {   /* the partition's [component][its elements], zeros without x->state */
            for (size_t k = 0; k < slen; k++)
                if (x->state)
                    memcpy(ps + k * p.len, x->state + k * t.numel + p.offset,
                           p.len * sizeof(float));
                else
                    memset(ps + k * p.len, 0, p.len * sizeof(float));
            p.state = ps;
        }
        st = ts_snap_piece_add(pc, s, &t, &p, err);
    }
    return st;
}

#define IMPORT_RUN_BYTES (64u << 20)   /* ts_snap_import.run_bytes' default */

/* Table i of the import, checked as a manifest will be and as a shard loads its records
 * (the rest of its spec is a shard's to check: the SDK's tessera_snapshot_import does it
 * first with ts_table_check, a layer above this one). */
static ts_status check_table(const struct ts_snap_import *in, size_t i, struct ts_err *err)
{
    const struct ts_snap_import_table *x = &in->tables[i];
    const Tessera__V1__TableSpec *sp = x->spec;
    size_t dim, slen;

    if (!sp || !sp->name || !sp->optimizer || !sp->initializer)
        return ts_err_set(err, TS_EINVAL, "import: tables[%zu].spec: its name, initializer "
                          "and optimizer are required", i);
    if (ts_job_id_check("name", sp->name, err)) {
        ts_err_prefix(err, "import: tables[%zu]", i);
        return TS_EINVAL;
    }
    if (!ts_snap_record_bytes(sp) || sp->max_id > INT64_MAX)
        return ts_err_set(err, TS_EINVAL, "import: table '%s': dim %u outside 1..4096, "
                          "optimizer '%s' unknown, or max_id past 2^63 - 1", sp->name, sp->dim,
                          sp->optimizer);
    for (size_t j = 0; j < i; j++)
        if (!strcmp(in->tables[j].spec->name, sp->name))
            return ts_err_set(err, TS_EINVAL, "import: table '%s' appears twice", sp->name);
    if (x->rows && (!x->ids || !x->value))
        return ts_err_set(err, TS_EINVAL, "import: table '%s': its ids and values are "
                          "required", sp->name);
    dim = sp->dim;
    slen = ts_snap_row_state_len(sp);
    if (x->state && !slen)
        return ts_err_set(err, TS_EINVAL, "import: table '%s': state given, but its optimizer "
                          "'%s' keeps none", sp->name, sp->optimizer);
    for (uint64_t r = 0; r < x->rows; r++) {
        uint64_t id = x->ids[r];

        if (r && id <= x->ids[r - 1])
            return ts_err_set(err, TS_EINVAL, "import: table '%s': ids[%" PRIu64 "] = %" PRIu64
                              " after %" PRIu64 "; ids must be strictly ascending", sp->name,
                              r, id, x->ids[r - 1]);
        if (id > sp->max_id)
            return ts_err_set(err, TS_EINVAL, "import: table '%s': id %" PRIu64 " is past "
                              "max_id %" PRIu64, sp->name, id, sp->max_id);
        if (x->steps && x->steps[r] > in->step)
            return ts_err_set(err, TS_EINVAL, "import: table '%s': row %" PRIu64 "'s step %"
                              PRIu64 " is after the import's step %" PRIu64, sp->name, id,
                              x->steps[r], in->step);
        for (size_t d = 0; d < dim; d++)
            if (!isfinite(x->value[r * dim + d]))
                return ts_err_set(err, TS_EINVAL, "import: table '%s': row %" PRIu64 " holds "
                                  "%g; rows must be finite", sp->name, id,
                                  (double)x->value[r * dim + d]);
        for (size_t d = 0; x->state && d < slen * dim; d++) {
            float v = x->state[r * slen * dim + d];
            /* Adagrad's sum of squares (component 0 of 1) and Adam's v (1 of 2) are >= 0. */
            bool squares = d / dim == slen - 1;

            if (!isfinite(v) || (squares && v < 0))
                return ts_err_set(err, TS_EINVAL, "import: table '%s': row %" PRIu64 "'s "
                                  "optimizer state holds %g%s", sp->name, id, (double)v,
                                  squares ? " where a sum of squares (>= 0) belongs" : "");
        }
    }
    return TS_OK;
}

/* Table x (id) of the import as full runs of its records at in->step, added to pc. */
static ts_status put_table(struct ts_snap_piece *pc, struct ts_store *s,
                           const struct ts_snap_import *in, uint32_t id,
                           const struct ts_snap_import_table *x, struct ts_err *err)
{
    size_t rb = ts_snap_record_bytes(x->spec), dim = x->spec->dim;
    size_t slen = ts_snap_row_state_len(x->spec);
    size_t most = in->run_bytes ? in->run_bytes : IMPORT_RUN_BYTES;
    size_t per = most / rb ? most / rb : 1;
    size_t nruns = (size_t)((x->rows + per - 1) / per);
    ts_table_manifest *tm = pc->alloc(pc->alloc_ctx, sizeof(*tm));
    ts_row_run **runs = pc->alloc(pc->alloc_ctx, (nruns + 1) * sizeof(*runs));
    ts_table_manifest **tables = pc->alloc(pc->alloc_ctx, (pc->n_tables + 1) * sizeof(*tables));
    uint8_t *rec = malloc((x->rows < per ? (size_t)x->rows : per) * rb + 1);
    ts_status st = TS_OK;

    if (!tm || !runs || !tables || !rec) {
        free(rec);
        return ts_err_set(err, TS_ENOMEM, "import: table '%s': out of memory", x->spec->name);
    }
    for (size_t k = 0; !st && k < nruns; k++) {
        size_t first = k * per, n = x->rows - first < per ? (size_t)(x->rows - first) : per;
        ts_row_run *run = pc->alloc(pc->alloc_ctx, sizeof(*run));
        void *mem = pc->alloc(pc->alloc_ctx, ts_snap_run_mem(n, rb, pc->chunk_bytes));
        uint64_t written = 0;

        if (!run || !mem) {
            st = ts_err_set(err, TS_ENOMEM, "import: table '%s': out of memory", x->spec->name);
            break;
        }
        for (size_t r = 0; r < n; r++) {
            size_t row = first + r;
            uint8_t *p = rec + r * rb;
            uint64_t head[3] = { x->ids[row], x->updates ? x->updates[row] : 0,
                                 x->steps ? x->steps[row] : in->step };

            memcpy(p, head, sizeof(head));
            memcpy(p + sizeof(head), x->value + row * dim, dim * sizeof(float));
            if (x->state)
                memcpy(p + sizeof(head) + dim * sizeof(float), x->state + row * slen * dim,
                       slen * dim * sizeof(float));
            else
                memset(p + sizeof(head) + dim * sizeof(float), 0, slen * dim * sizeof(float));
        }
        tessera__v1__row_run__init(run);
        run->step = in->step;
        run->full = true;
        if (!(st = ts_snap_put_run(s, rec, n, rb, pc->chunk_bytes, run, mem, &written, err)))
            pc->bytes_written += written;
        runs[k] = run;
    }
    free(rec);
    if (st) {
        ts_err_prefix(err, "import: table '%s'", x->spec->name);
        return st;
    }
    tessera__v1__table_manifest__init(tm);
    tm->id = id;
    tm->spec = (Tessera__V1__TableSpec *)x->spec;
    tm->rows = x->rows;
    tm->runs = runs;
    tm->n_runs = nruns;
    if (pc->n_tables)
        memcpy(tables, pc->tables, pc->n_tables * sizeof(*tables));
    tables[pc->n_tables++] = tm;
    pc->tables = tables;
    return TS_OK;
}

/* in's tensors, checked as a manifest will be, before anything is written. */
static ts_status check_import(const struct ts_snap_import *in, struct ts_err *err)
{
    ts_status st;

    if (!in->job || in->job->mode != TS_MODE_BSP)
        return ts_err_set(err, TS_EINVAL, "import: job: a bsp job is required (its tensors "
                          "start from assignments, which only bsp has)");
    if (in->step < 1)
        return ts_err_set(err, TS_EINVAL, "import: step: at least 1 (version 1 is the "
                          "assignment of the imported values)");
    if (in->n > TS_MANIFEST_MAX_TENSORS - 1)
        return ts_err_set(err, TS_EINVAL, "import: tensors: %zu, at most %d", in->n,
                          TS_MANIFEST_MAX_TENSORS - 1);
    if (in->ntables > TS_MANIFEST_MAX_TABLES)
        return ts_err_set(err, TS_EINVAL, "import: tables: %zu, at most %d", in->ntables,
                          TS_MANIFEST_MAX_TABLES);
    if (in->n + in->ntables < 1)
        return ts_err_set(err, TS_EINVAL, "import: at least one tensor or table is required");
    if (in->message && strlen(in->message) > TS_MANIFEST_MAX_MESSAGE)
        return ts_err_set(err, TS_EINVAL, "import: message: over %d bytes",
                          TS_MANIFEST_MAX_MESSAGE);
    for (size_t i = 0; i < in->n; i++) {
        const struct ts_snap_import_tensor *x = &in->tensors[i];

        if (!x->name || !x->name[0] || strlen(x->name) > 128)
            return ts_err_set(err, TS_EINVAL, "import: tensors[%zu].name: 1..128 bytes", i);
        if (x->ndim < 1 || x->ndim > 8 || !x->shape || !x->value)
            return ts_err_set(err, TS_EINVAL, "import: tensor '%s': 1..8 dimensions and its "
                              "values are required", x->name);
        for (size_t d = 0; d < x->ndim; d++)
            if (x->shape[d] < 1)
                return ts_err_set(err, TS_EINVAL, "import: tensor '%s': shape[%zu] is 0; "
                                  "an empty tensor cannot be registered", x->name, d);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(in->tensors[j].name, x->name))
                return ts_err_set(err, TS_EINVAL, "import: tensor '%s' appears twice", x->name);
    }
    for (size_t i = 0; i < in->ntables; i++)
        if ((st = check_table(in, i, err)))
            return st;
    return TS_OK;
}

ts_status ts_snap_import(struct ts_store *s, const struct ts_snap_import *in,
                         uint8_t id[TS_STORE_ID_LEN], struct ts_err *err)
{
    ts_manifest m = TESSERA__V1__MANIFEST__INIT;
    Tessera__V1__ClusterShape shape = TESSERA__V1__CLUSTER_SHAPE__INIT;
    Tessera__V1__ScheduleState sched = TESSERA__V1__SCHEDULE_STATE__INIT;
    struct arena a = { 0 };
    struct ts_snap_piece pc;
    char branch[TS_STORE_REF_MAX + 1];
    uint8_t tip[TS_STORE_ID_LEN];
    size_t slen, most = 0;
    bool has_tip = false;
    void *mem = NULL;
    float *ps = NULL;
    ts_status st;

    if ((st = check_import(in, err)))
        return st;
    snprintf(branch, sizeof(branch), "heads/%s", in->branch ? in->branch : "main");
    if (!ts_store_ref_valid(branch))
        return ts_err_set(err, TS_EINVAL, "import: branch: '%s' is not a valid branch name",
                          in->branch);
    if (in->tag && in->tag[0] && (st = ts_snap_tag_check(s, in->tag, err)))
        return st;
    st = ts_store_ref_get(s, branch, tip, err);
    if (st && st != TS_ENOTFOUND)
        return st;
    has_tip = !st;
    ts_err_clear(err);   /* a new branch is not an error */
    slen = ts_optim_state_len(in->job->optim.kind);
    for (size_t i = 0; i < in->n; i++) {
        uint64_t numel = 1;

        for (size_t d = 0; d < in->tensors[i].ndim; d++)
            numel *= in->tensors[i].shape[d];
        if (numel > most)
            most = numel;
    }
    if (slen && !(ps = malloc(slen * (most < TS_PARTITION_BYTES_DEFAULT / sizeof(float)
                                      ? most : TS_PARTITION_BYTES_DEFAULT / sizeof(float)) *
                              sizeof(float))))
        return ts_err_set(err, TS_ENOMEM, "import: out of memory");
    ts_snap_piece_init(&pc, arena_alloc, &a);
    st = TS_OK;
    for (size_t i = 0; !st && i < in->n; i++)
        st = put_tensor(&pc, s, in, slen, (uint32_t)(i + 1), &in->tensors[i], ps, err);
    for (size_t i = 0; !st && i < in->ntables; i++)
        st = put_table(&pc, s, in, (uint32_t)i, &in->tables[i], err);
    if (!st)
        st = ts_snap_piece_set_job(&pc, in->job, 0, in->micro_batch, err);
    if (!st)
        st = ts_snap_merge(&pc, 1, in->step, &m, &mem, err);
    if (!st) {
        m.created_unix_ms = ts_unix_ms();
        m.message = (char *)(in->message ? in->message : "");
        if (has_tip) {
            m.parent.data = tip;
            m.parent.len = TS_STORE_ID_LEN;
        }
        shape.shards = 1;
        shape.workers = in->job->workers;
        m.cluster = &shape;
        sched.micro_batch = in->micro_batch;
        sched.next_step = in->step;
        m.schedule = &sched;
        st = ts_snap_commit(s, &m, branch, has_tip ? tip : NULL, id, err);
    }
    if (!st && in->tag && in->tag[0])
        st = ts_snap_tag(s, in->tag, id, err);
    free(mem);
    free(ps);
    arena_free(&a);
    return st;
}
