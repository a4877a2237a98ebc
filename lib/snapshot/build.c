/* build.c - a snapshot taken across shards: pieces, their merge, the commit. See snapshot.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/internal.h"
#include "util/proc.h"

void ts_snap_piece_init(struct ts_snap_piece *pc, void *(*alloc)(void *ctx, size_t n),
                        void *ctx)
{
    memset(pc, 0, sizeof(*pc));
    pc->alloc = alloc;
    pc->alloc_ctx = ctx;
    pc->chunk_bytes = TS_SNAP_CHUNK_DEFAULT;
}

static void *piece_alloc(struct ts_snap_piece *pc, size_t n)
{
    return pc->alloc(pc->alloc_ctx, n);
}

/* The piece's entry for tensor t: the last one when the caller adds t's partitions in a row,
 * else a new one. */
static ts_tensor_manifest *entry(struct ts_snap_piece *pc, const struct ts_snap_tensor *t,
                                 struct ts_err *err)
{
    ts_tensor_manifest *tm;
    Tessera__V1__TensorSpec *spec;

    if (pc->n_tensors && pc->tensors[pc->n_tensors - 1]->id == t->id)
        return pc->tensors[pc->n_tensors - 1];
    if (t->id >= TS_MANIFEST_MAX_TENSORS || pc->n_tensors == TS_MANIFEST_MAX_TENSORS) {
        ts_err_set(err, TS_EINVAL, "snapshot: tensor id %u, at most %d tensors", t->id,
                   TS_MANIFEST_MAX_TENSORS);
        return NULL;
    }
    if (!pc->tensors)
        pc->tensors = piece_alloc(pc, (TS_MANIFEST_MAX_TENSORS + 1) * sizeof(*pc->tensors));
    tm = piece_alloc(pc, sizeof(*tm));
    spec = piece_alloc(pc, sizeof(*spec));
    if (!pc->tensors || !tm || !spec) {
        ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
        return NULL;
    }
    tessera__v1__tensor_manifest__init(tm);
    tessera__v1__tensor_spec__init(spec);
    spec->name = (char *)t->name;
    spec->dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    spec->shape = (uint64_t *)t->shape;
    spec->n_shape = t->ndim;
    spec->initializer = (char *)t->init;
    spec->seed = t->seed;
    spec->partition_bytes = t->partition_bytes;
    spec->placement_salt = t->salt;
    tm->id = t->id;
    tm->spec = spec;
    tm->fan_in = t->fan_in;
    tm->fan_out = t->fan_out;
    tm->numel = t->numel;
    tm->partitions = piece_alloc(pc, (t->nparts + 1) * sizeof(*tm->partitions));
    if (!tm->partitions) {
        ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
        return NULL;
    }
    pc->tensors[pc->n_tensors++] = tm;
    return tm;
}

ts_status ts_snap_piece_add(struct ts_snap_piece *pc, struct ts_store *s,
                            const struct ts_snap_tensor *t, const struct ts_snap_part *p,
                            struct ts_err *err)
{
    ts_tensor_manifest *tm = entry(pc, t, err);
    ts_partition_manifest *pm;
    Tessera__V1__OptimizerCount *count;
    uint64_t written = 0;
    void *mem;
    ts_status st;

    if (!tm)
        return err->code;
    if (tm->n_partitions == t->nparts)
        return ts_err_set(err, TS_EINVAL, "snapshot: tensor '%s' has %u partitions, all added",
                          t->name, t->nparts);
    pm = piece_alloc(pc, sizeof(*pm));
    count = p->has_updates ? piece_alloc(pc, sizeof(*count)) : NULL;
    mem = piece_alloc(pc, ts_snap_partition_mem(p->len, p->slen, pc->chunk_bytes));
    if (!pm || (p->has_updates && !count) || !mem)
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    tessera__v1__partition_manifest__init(pm);
    if (count) {
        tessera__v1__optimizer_count__init(count);
        count->updates = p->updates;
    }
    pm->index = p->index;
    pm->offset = p->offset;
    pm->length = p->len;
    pm->version = p->version;
    pm->optimizer_updates = count;
    pm->shard_id = pc->shard;
    st = ts_snap_put_partition(s, p->value, p->len, p->state, p->slen, pc->chunk_bytes, pm, mem,
                               &written, err);
    if (st) {
        ts_err_prefix(err, "tensor '%s' partition %u", t->name, p->index);
        return st;
    }
    pc->bytes_written += written;
    tm->partitions[tm->n_partitions++] = pm;
    return TS_OK;
}

ts_status ts_snap_piece_declare(struct ts_snap_piece *pc, const struct ts_snap_tensor *t,
                                struct ts_err *err)
{
    for (size_t i = 0; i < pc->n_tensors; i++)
        if (pc->tensors[i]->id == t->id)
            return TS_OK;
    return entry(pc, t, err) ? TS_OK : err->code;
}

ts_status ts_snap_piece_set_job(struct ts_snap_piece *pc, const struct ts_job *j,
                                uint64_t data_seed, uint32_t micro_batch, struct ts_err *err)
{
    Tessera__V1__JobSpec *js = piece_alloc(pc, sizeof(*js));

    if (!js)
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    tessera__v1__job_spec__init(js);
    js->id = (char *)j->id;
    js->workers = j->workers;
    js->exact = j->exact;
    js->optimizer = (char *)j->optimizer;
    js->batch = j->batch;
    js->data_seed = data_seed;
    js->micro_batch = micro_batch;
    if (j->mode != TS_MODE_BSP) {   /* unset is bsp: bsp manifests stay as they were */
        js->mode = (Tessera__V1__TrainMode)j->mode;
        js->staleness = j->staleness;
    }
    pc->job = js;
    return TS_OK;
}

static int by_index(const void *a, const void *b)
{
    const ts_partition_manifest *x = *(ts_partition_manifest *const *)a;
    const ts_partition_manifest *y = *(ts_partition_manifest *const *)b;

    return x->index < y->index ? -1 : x->index > y->index;
}

ts_status ts_snap_merge(const struct ts_snap_piece *pieces, size_t n, uint64_t step,
                        ts_manifest *m, void **mem, struct ts_err *err)
{
    /* Tensor ids are below TS_MANIFEST_MAX_TENSORS: index by id, so the tensors come out in
     * id order and each gathers every shard's partitions in one pass. */
    size_t np = 0, at = 0;
    ts_tensor_manifest **tensors, *copies;
    ts_partition_manifest **parts;
    uint32_t *count;
    const ts_tensor_manifest **first;
    size_t ntables = 0, nruns = 0;
    ts_status tst;

    *mem = NULL;
    if (!n)
        return ts_err_set(err, TS_EINVAL, "snapshot: no shard wrote a piece");
    for (size_t i = 1; i < n; i++)
        if (!pieces[i].job || !pieces[0].job ||
            strcmp(pieces[i].job->optimizer, pieces[0].job->optimizer) ||
            pieces[i].job->workers != pieces[0].job->workers ||
            pieces[i].chunk_bytes != pieces[0].chunk_bytes)
            return ts_err_set(err, TS_EINTERNAL, "snapshot: shards %u and %u disagree on the job",
                              pieces[0].shard, pieces[i].shard);
    if ((tst = snap_count_tables(pieces, n, &ntables, &nruns, err)))
        return tst;
    count = calloc(TS_MANIFEST_MAX_TENSORS, sizeof(*count) + sizeof(*first));
    if (!count)
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    first = (void *)(count + TS_MANIFEST_MAX_TENSORS);
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < pieces[i].n_tensors; t++) {
            const ts_tensor_manifest *src = pieces[i].tensors[t];
            if (src->id >= TS_MANIFEST_MAX_TENSORS) {
                free(count);
                return ts_err_set(err, TS_EINTERNAL, "snapshot: shard %u sent tensor id %u",
                                  pieces[i].shard, src->id);
            }
            if (!first[src->id])
                first[src->id] = src;
            /* One salt per tensor on every shard (docs/placement.md); a restore places by it. */
            if (first[src->id]->spec->placement_salt != src->spec->placement_salt) {
                ts_status st = ts_err_set(err, TS_EINTERNAL, "snapshot: shard %u places "
                                          "tensor '%s' with placement salt %u, another with %u",
                                          pieces[i].shard, src->spec->name,
                                          src->spec->placement_salt,
                                          first[src->id]->spec->placement_salt);
                free(count);   /* first[] lives in it */
                return st;
            }
            count[src->id] += (uint32_t)src->n_partitions;
            np += src->n_partitions;
        }
    m->n_tensors = 0;
    for (uint32_t id = 0; id < TS_MANIFEST_MAX_TENSORS; id++)
        m->n_tensors += first[id] != NULL;
    /* One block: the tensors, their copies and partitions, then the tables' likewise. */
    *mem = calloc(1, m->n_tensors * (sizeof(*tensors) + sizeof(*copies)) +
                         np * sizeof(*parts) +
                         ntables * (sizeof(ts_table_manifest *) + sizeof(ts_table_manifest)) +
                         nruns * sizeof(ts_row_run *) + 1);
    if (!*mem) {
        free(count);
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    }
    tensors = *mem;
    copies = (void *)(tensors + m->n_tensors);
    parts = (void *)(copies + m->n_tensors);
    /* count[] becomes each id's slot in copies[] once its partitions are placed. */
    for (uint32_t id = 0, k = 0; id < TS_MANIFEST_MAX_TENSORS; id++) {
        if (!first[id])
            continue;
        copies[k] = *first[id]; /* the spec from whichever shard answered first */
        copies[k].partitions = parts + at;
        copies[k].n_partitions = 0;
        at += count[id];
        tensors[k] = &copies[k];
        count[id] = k++;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < pieces[i].n_tensors; t++) {
            const ts_tensor_manifest *src = pieces[i].tensors[t];
            ts_tensor_manifest *dst = &copies[count[src->id]];
            for (size_t p = 0; p < src->n_partitions; p++)
                dst->partitions[dst->n_partitions++] = src->partitions[p];
        }
    free(count);
    for (size_t k = 0; k < m->n_tensors; k++)
        qsort(copies[k].partitions, copies[k].n_partitions, sizeof(*copies[k].partitions),
              by_index);
    {
        ts_table_manifest **tables = (void *)(parts + np);
        ts_table_manifest *tcopies = (void *)(tables + ntables);
        snap_merge_tables(pieces, n, m, tables, tcopies, (ts_row_run **)(tcopies + ntables));
    }
    m->tensors = tensors;
    m->format = TS_MANIFEST_FORMAT;
    m->step = step;
    m->job = (Tessera__V1__JobSpec *)pieces[0].job;
    m->chunk_bytes = pieces[0].chunk_bytes;
    return TS_OK;
}

/* "tags/<tag>" into ref, which is valid. */
static ts_status tag_ref(const char *tag, char ref[TS_STORE_REF_MAX + 8], struct ts_err *err)
{
    snprintf(ref, TS_STORE_REF_MAX + 8, "tags/%s", tag);
    if (!ts_store_ref_valid(ref))
        return ts_err_set(err, TS_EINVAL, "tag: '%s' is not a valid name ([A-Za-z0-9._-])", tag);
    return TS_OK;
}

ts_status ts_snap_tag_check(struct ts_store *s, const char *tag, struct ts_err *err)
{
    char ref[TS_STORE_REF_MAX + 8];
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    ts_status st = tag_ref(tag, ref, err);

    if (st)
        return st;
    if (ts_store_ref_get(s, ref, cur, &e) == TS_OK)
        return ts_err_set(err, TS_EEXIST, "tag: '%s' exists; pick another name", tag);
    return TS_OK;
}

ts_status ts_snap_commit(struct ts_store *s, const ts_manifest *m, const char *branch,
                         const uint8_t *parent, uint8_t id[TS_STORE_ID_LEN], struct ts_err *err)
{
    static const uint8_t none[TS_STORE_ID_LEN];
    ts_status st = ts_manifest_write(s, m, id, err);

    if (st) {
        ts_err_prefix(err, "snapshot of step %" PRIu64 " incomplete (did a shard leave?)",
                      m->step);
        return st;
    }
    return ts_store_ref_set(s, branch, id, parent ? parent : none, err);
}

ts_status ts_snap_tag(struct ts_store *s, const char *tag, const uint8_t id[TS_STORE_ID_LEN],
                      struct ts_err *err)
{
    static const uint8_t none[TS_STORE_ID_LEN];
    char ref[TS_STORE_REF_MAX + 8], hex[TS_STORE_HEX_LEN + 1];
    ts_status st = tag_ref(tag, ref, err);

    if (!st)
        st = ts_store_ref_set(s, ref, id, none, err);
    if (st)
        ts_err_prefix(err, "snapshot %.12s written, but the tag was not",
                      ts_store_hex(id, hex));
    return st;
}
