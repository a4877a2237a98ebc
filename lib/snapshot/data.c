/* data.c - partition data in and out of the store, checks and diffs. See snapshot.h. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/internal.h"

ts_status ts_snap_ids(const ProtobufCBinaryData *list, size_t n,
                      uint8_t (**ids)[TS_STORE_ID_LEN], struct ts_err *err)
{
    if (!(*ids = malloc((n + 1) * TS_STORE_ID_LEN)))
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    for (size_t i = 0; i < n; i++)
        memcpy((*ids)[i], list[i].data, TS_STORE_ID_LEN);
    return TS_OK;
}

size_t ts_snap_partition_mem(size_t len, size_t slen, uint32_t chunk_bytes)
{
    size_t n = ts_store_nchunks(len * sizeof(float), chunk_bytes) +
               ts_store_nchunks(slen * sizeof(float), chunk_bytes);

    return n * (sizeof(ProtobufCBinaryData) + TS_STORE_ID_LEN) + 1;
}

ts_status ts_snap_put_partition(struct ts_store *s, const float *value, size_t len,
                                const float *state, size_t slen, uint32_t chunk_bytes,
                                ts_partition_manifest *p, void *mem, uint64_t *written,
                                struct ts_err *err)
{
    size_t nv = ts_store_nchunks(len * sizeof(float), chunk_bytes);
    size_t ns = ts_store_nchunks(slen * sizeof(float), chunk_bytes);
    /* mem: the binary-data descriptors, then the ids they point into. */
    ProtobufCBinaryData *bd = mem;
    uint8_t (*ids)[TS_STORE_ID_LEN] = (void *)((char *)mem + (nv + ns) * sizeof(*bd));
    uint64_t w1 = 0, w2 = 0;
    ts_status st;

    st = ts_store_put_blob(s, value, len * sizeof(float), chunk_bytes, ids, &w1, err);
    if (!st && ns)
        st = ts_store_put_blob(s, state, slen * sizeof(float), chunk_bytes, ids + nv, &w2, err);
    if (st)
        return st;
    for (size_t i = 0; i < nv + ns; i++)
        bd[i] = (ProtobufCBinaryData){ TS_STORE_ID_LEN, ids[i] };
    p->value_chunks = bd;
    p->n_value_chunks = nv;
    p->state_chunks = bd + nv;
    p->n_state_chunks = ns;
    p->bytes_written = w1 + w2;
    *written = w1 + w2;
    return TS_OK;
}

static ts_status read_list(struct ts_store *s, const ProtobufCBinaryData *list, size_t n,
                           void *buf, size_t bytes, uint32_t chunk, struct ts_err *err)
{
    uint8_t (*ids)[TS_STORE_ID_LEN];
    ts_status st = ts_snap_ids(list, n, &ids, err);

    if (st)
        return st;
    st = ts_store_get_blob(s, ids, buf, bytes, chunk, err);
    free(ids);
    return st;
}

ts_status ts_snap_read_partition(struct ts_store *s, const ts_manifest *m,
                                 const ts_tensor_manifest *t, const ts_partition_manifest *p,
                                 float *value, float *state, struct ts_err *err)
{
    size_t slen = ts_manifest_state_len(m);
    ts_status st = read_list(s, p->value_chunks, p->n_value_chunks, value,
                             p->length * sizeof(float), m->chunk_bytes, err);

    if (!st && state && slen)
        st = read_list(s, p->state_chunks, p->n_state_chunks, state,
                       slen * p->length * sizeof(float), m->chunk_bytes, err);
    if (st)
        ts_err_prefix(err, "tensor '%s' partition %u", t->spec->name, p->index);
    return st;
}

ts_status ts_snap_check(struct ts_store *s, const ts_manifest *m,
                        void (*progress)(void *ctx, const char *tensor, uint64_t bytes),
                        void *ctx, struct ts_err *err)
{
    size_t slen = ts_manifest_state_len(m);
    ts_status st = TS_OK;

    for (size_t i = 0; !st && i < m->n_tensors; i++) {
        const ts_tensor_manifest *t = m->tensors[i];
        uint64_t bytes = 0;

        for (size_t j = 0; !st && j < t->n_partitions; j++) {
            const ts_partition_manifest *p = t->partitions[j];
            float *v = malloc(p->length * sizeof(float) + 1);
            float *sv = malloc(slen * p->length * sizeof(float) + 1);

            st = !v || !sv ? ts_err_set(err, TS_ENOMEM, "snapshot: out of memory")
                           : ts_snap_read_partition(s, m, t, p, v, sv, err);
            bytes += (1 + slen) * p->length * sizeof(float);
            free(v);
            free(sv);
        }
        if (!st && progress)
            progress(ctx, t->spec->name, bytes);
    }
    return st ? st : snap_check_table_runs(s, m, progress, ctx, err);
}

/* ---- diff ---- */

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, TS_STORE_ID_LEN);
}

/* All of m's chunk ids, sorted, for bsearch. */
static ts_status sorted_chunks(const ts_manifest *m, uint8_t (**ids)[TS_STORE_ID_LEN], size_t *n,
                               struct ts_err *err)
{
    size_t k = 0, total = 0;

    for (size_t t = 0; t < m->n_tensors; t++)
        for (size_t p = 0; p < m->tensors[t]->n_partitions; p++)
            total += m->tensors[t]->partitions[p]->n_value_chunks +
                     m->tensors[t]->partitions[p]->n_state_chunks;
    if (!(*ids = malloc((total + 1) * TS_STORE_ID_LEN)))
        return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    for (size_t t = 0; t < m->n_tensors; t++)
        for (size_t p = 0; p < m->tensors[t]->n_partitions; p++) {
            const ts_partition_manifest *pm = m->tensors[t]->partitions[p];
            for (size_t i = 0; i < pm->n_value_chunks; i++)
                memcpy((*ids)[k++], pm->value_chunks[i].data, TS_STORE_ID_LEN);
            for (size_t i = 0; i < pm->n_state_chunks; i++)
                memcpy((*ids)[k++], pm->state_chunks[i].data, TS_STORE_ID_LEN);
        }
    qsort(*ids, k, TS_STORE_ID_LEN, cmp_id);
    *n = k;
    return TS_OK;
}

static const ts_tensor_manifest *find_tensor(const ts_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->spec->name, name) == 0)
            return m->tensors[i];
    return NULL;
}

static bool same_ids(const ProtobufCBinaryData *a, size_t na, const ProtobufCBinaryData *b,
                     size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (memcmp(a[i].data, b[i].data, TS_STORE_ID_LEN) != 0)
            return false;
    return true;
}

/* Reads the partitions of ta and tb (same shape) whose value chunks differ and measures the
 * change. */
static ts_status diff_values(struct ts_store *s, const ts_manifest *a, const ts_tensor_manifest *ta,
                             const ts_manifest *b, const ts_tensor_manifest *tb,
                             struct ts_snap_tensor_diff *d, struct ts_err *err)
{
    double sum = 0;
    ts_status st = TS_OK;

    for (size_t j = 0; !st && j < tb->n_partitions; j++) {
        const ts_partition_manifest *pa = ta->partitions[j], *pb = tb->partitions[j];
        float *va, *vb;

        if (same_ids(pa->value_chunks, pa->n_value_chunks, pb->value_chunks,
                     pb->n_value_chunks))
            continue;
        va = malloc(pa->length * sizeof(float) + 1);
        vb = malloc(pb->length * sizeof(float) + 1);
        st = !va || !vb ? ts_err_set(err, TS_ENOMEM, "snapshot: out of memory")
                        : ts_snap_read_partition(s, a, ta, pa, va, NULL, err);
        if (!st)
            st = ts_snap_read_partition(s, b, tb, pb, vb, NULL, err);
        for (uint64_t i = 0; !st && i < pb->length; i++) {
            double x = (double)vb[i] - (double)va[i];

            if (memcmp(&va[i], &vb[i], sizeof(float)) != 0)
                d->changed++;
            sum += x * x;
            if (fabs(x) > d->max_abs || isnan(x))
                d->max_abs = isnan(x) ? NAN : fmax(d->max_abs, fabs(x));
        }
        free(va);
        free(vb);
    }
    d->l2 = sqrt(sum);
    return st;
}

ts_status ts_snap_diff(struct ts_store *s, const ts_manifest *a, const ts_manifest *b,
                       struct ts_snap_tensor_diff **out, size_t *n, struct ts_err *err)
{
    uint8_t (*ac)[TS_STORE_ID_LEN] = NULL;
    size_t nac = 0, k = 0;
    struct ts_snap_tensor_diff *v = calloc(a->n_tensors + b->n_tensors + 1, sizeof(*v));
    ts_status st = v ? sorted_chunks(a, &ac, &nac, err)
                     : ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");

    for (size_t i = 0; !st && i < b->n_tensors; i++) {
        const ts_tensor_manifest *tb = b->tensors[i];
        const ts_tensor_manifest *ta = find_tensor(a, tb->spec->name);
        struct ts_snap_tensor_diff *d = &v[k++];

        d->name = tb->spec->name;
        for (size_t j = 0; j < tb->n_partitions; j++) {
            const ts_partition_manifest *p = tb->partitions[j];
            for (size_t c = 0; c < p->n_value_chunks + p->n_state_chunks; c++) {
                const uint8_t *id = c < p->n_value_chunks
                                        ? p->value_chunks[c].data
                                        : p->state_chunks[c - p->n_value_chunks].data;
                d->chunks++;
                d->chunks_shared += bsearch(id, ac, nac, TS_STORE_ID_LEN, cmp_id) != NULL;
            }
        }
        if (!ta)
            d->kind = TS_DIFF_ADDED;
        else if (ta->numel != tb->numel || ta->spec->partition_bytes != tb->spec->partition_bytes)
            d->kind = TS_DIFF_RESHAPED;
        else if ((st = diff_values(s, a, ta, b, tb, d, err)) == TS_OK)
            d->kind = d->changed || d->chunks_shared < d->chunks ? TS_DIFF_CHANGED : TS_DIFF_SAME;
    }
    for (size_t i = 0; !st && i < a->n_tensors; i++)
        if (!find_tensor(b, a->tensors[i]->spec->name))
            v[k++] = (struct ts_snap_tensor_diff){ .name = a->tensors[i]->spec->name,
                                                   .kind = TS_DIFF_REMOVED };
    free(ac);
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    *n = k;
    return TS_OK;
}
