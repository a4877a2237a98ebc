/* manifest.c - decoding, validation and storage of manifests. See snapshot.h. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps/part.h"
#include "snapshot/internal.h"
#include "tensor/tensor.h"

#define MAX_NUMEL (UINT64_C(1) << 34)
#define MAX_DIMS 8

static ts_status check_ids(const ProtobufCBinaryData *ids, size_t n, size_t want,
                           const char *field, size_t ti, size_t pi, struct ts_err *err)
{
    if (n != want)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].partitions[%zu].%s: %zu ids, "
                          "want %zu", ti, pi, field, n, want);
    for (size_t i = 0; i < n; i++)
        if (ids[i].len != TS_STORE_ID_LEN)
            return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].partitions[%zu].%s[%zu]: "
                              "%zu bytes, want %d", ti, pi, field, i, ids[i].len,
                              TS_STORE_ID_LEN);
    return TS_OK;
}

static ts_status check_partitions(const ts_manifest *m, const ts_tensor_manifest *t, size_t ti,
                                  size_t slen, struct ts_err *err)
{
    uint64_t pb = t->spec->partition_bytes;
    uint32_t want = ts_partition_count(t->numel, sizeof(float), pb);
    ts_status st;

    if (t->n_partitions != want)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].partitions: %zu, want %u for "
                          "%" PRIu64 " elements in %" PRIu64 "-byte partitions (tensor '%s')",
                          ti, t->n_partitions, want, t->numel, pb, t->spec->name);
    for (size_t i = 0; i < t->n_partitions; i++) {
        const ts_partition_manifest *p = t->partitions[i];
        uint64_t off, len;

        ts_partition_range(t->numel, sizeof(float), pb, (uint32_t)i, &off, &len);
        if (p->index != i || p->offset != off || p->length != len)
            return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].partitions[%zu]: index %u "
                              "offset %" PRIu64 " length %" PRIu64 ", want %zu, %" PRIu64 ", %"
                              PRIu64, ti, i, p->index, p->offset, p->length, i, off, len);
        if (p->version != m->step)
            return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].partitions[%zu].version: %"
                              PRIu64 ", but the snapshot is of step %" PRIu64, ti, i,
                              p->version, m->step);
        if ((st = check_ids(p->value_chunks, p->n_value_chunks,
                            ts_store_nchunks(len * sizeof(float), m->chunk_bytes),
                            "value_chunks", ti, i, err)) ||
            (st = check_ids(p->state_chunks, p->n_state_chunks,
                            ts_store_nchunks(slen * len * sizeof(float), m->chunk_bytes),
                            "state_chunks", ti, i, err)))
            return st;
    }
    return TS_OK;
}

static ts_status check_tensor(const ts_manifest *m, size_t ti, size_t slen, struct ts_err *err)
{
    const ts_tensor_manifest *t = m->tensors[ti];
    const Tessera__V1__TensorSpec *s = t->spec;
    uint64_t numel = 1;

    if (!s)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec: required", ti);
    if (!s->name[0] || strlen(s->name) > 128)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec.name: 1..128 bytes", ti);
    if (t->id >= TS_MANIFEST_MAX_TENSORS)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].id: %u, at most %d", ti, t->id,
                          TS_MANIFEST_MAX_TENSORS - 1);
    for (size_t j = 0; j < ti; j++)
        if (m->tensors[j]->id == t->id || strcmp(m->tensors[j]->spec->name, s->name) == 0)
            return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu]: id %u or name '%s' "
                              "repeats tensors[%zu]", ti, t->id, s->name, j);
    if (s->dtype != TESSERA__V1__DTYPE__DTYPE_F32)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec.dtype: %d, only F32",
                          ti, (int)s->dtype);
    if (s->n_shape < 1 || s->n_shape > MAX_DIMS)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec.shape: %zu dimensions, "
                          "want 1..%d", ti, s->n_shape, MAX_DIMS);
    for (size_t i = 0; i < s->n_shape; i++) {
        if (s->shape[i] < 1 || s->shape[i] > MAX_NUMEL || numel * s->shape[i] > MAX_NUMEL)
            return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec.shape[%zu]: %" PRIu64
                              " (>= 1, %" PRIu64 " elements in all at most)", ti, i,
                              s->shape[i], MAX_NUMEL);
        numel *= s->shape[i];
    }
    if (t->numel != numel)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].numel: %" PRIu64 ", the shape "
                          "has %" PRIu64, ti, t->numel, numel);
    if (s->partition_bytes < 4 || s->partition_bytes > (128u << 20))
        return ts_err_set(err, TS_EINVAL, "manifest: tensors[%zu].spec.partition_bytes: %" PRIu64
                          " is outside 4..134217728", ti, s->partition_bytes);
    return check_partitions(m, t, ti, slen, err);
}

ts_status ts_manifest_validate(const ts_manifest *m, struct ts_err *err)
{
    struct ts_job job;
    size_t slen;
    ts_status st;

    if (m->format != TS_MANIFEST_FORMAT)
        return ts_err_set(err, TS_EINVAL, "manifest: format: %u, this build reads %d",
                          m->format, TS_MANIFEST_FORMAT);
    if (m->parent.len != 0 && m->parent.len != TS_STORE_ID_LEN)
        return ts_err_set(err, TS_EINVAL, "manifest: parent: %zu bytes, want 0 or %d",
                          m->parent.len, TS_STORE_ID_LEN);
    if (strlen(m->message) > TS_MANIFEST_MAX_MESSAGE)
        return ts_err_set(err, TS_EINVAL, "manifest: message: over %d bytes",
                          TS_MANIFEST_MAX_MESSAGE);
    if (!m->job)
        return ts_err_set(err, TS_EINVAL, "manifest: job: required");
    if ((st = ts_job_init(&job, m->job->id, m->job->workers, m->job->exact, m->job->optimizer,
                          m->job->batch, err))) {
        ts_err_prefix(err, "manifest");
        return st;
    }
    if (!m->schedule || m->schedule->next_step != m->step)
        return ts_err_set(err, TS_EINVAL, "manifest: schedule.next_step: required, equal to "
                          "step %" PRIu64, m->step);
    if (!m->cluster)
        return ts_err_set(err, TS_EINVAL, "manifest: cluster: required");
    if (m->chunk_bytes < TS_SNAP_CHUNK_MIN || m->chunk_bytes > TS_STORE_MAX_CHUNK)
        return ts_err_set(err, TS_EINVAL, "manifest: chunk_bytes: %u is outside %u..%u",
                          m->chunk_bytes, TS_SNAP_CHUNK_MIN, TS_STORE_MAX_CHUNK);
    if (m->n_tensors > TS_MANIFEST_MAX_TENSORS || m->n_tensors + m->n_tables < 1)
        return ts_err_set(err, TS_EINVAL, "manifest: tensors: %zu, want 0..%d with at least "
                          "one tensor or table", m->n_tensors, TS_MANIFEST_MAX_TENSORS);
    if ((st = snap_check_tables(m, err)))
        return st;
    slen = ts_optim_state_len(job.optim.kind);
    for (size_t i = 0; i < m->n_tensors; i++)
        if ((st = check_tensor(m, i, slen, err)))
            return st;
    for (size_t i = 0; i < m->n_data_checksums; i++) {
        const Tessera__V1__Manifest__DataChecksumsEntry *e = m->data_checksums[i];
        if (!e->key[0] || strlen(e->key) > 256 || e->value.len != TS_STORE_ID_LEN)
            return ts_err_set(err, TS_EINVAL, "manifest: data_checksums[%zu]: want a name of "
                              "1..256 bytes and a %d-byte SHA-256", i, TS_STORE_ID_LEN);
    }
    return TS_OK;
}

size_t ts_manifest_state_len(const ts_manifest *m)
{
    struct ts_optim_cfg cfg;
    struct ts_err e = { 0 };

    return ts_optim_parse(m->job->optimizer, &cfg, &e) ? 0 : ts_optim_state_len(cfg.kind);
}

ts_status ts_manifest_parse(const void *buf, size_t len, ts_manifest **out, struct ts_err *err)
{
    ts_manifest *m;
    ts_status st;

    if (len > TS_MANIFEST_MAX_BYTES)
        return ts_err_set(err, TS_EINVAL, "manifest: %zu bytes, at most %u", len,
                          TS_MANIFEST_MAX_BYTES);
    m = tessera__v1__manifest__unpack(NULL, len, buf);
    if (!m)
        return ts_err_set(err, TS_EINVAL, "manifest: not a valid tessera.v1.Manifest encoding");
    if ((st = ts_manifest_validate(m, err))) {
        tessera__v1__manifest__free_unpacked(m, NULL);
        return st;
    }
    *out = m;
    return TS_OK;
}

void ts_manifest_free(ts_manifest *m)
{
    if (m)
        tessera__v1__manifest__free_unpacked(m, NULL);
}

ts_status ts_manifest_write(struct ts_store *s, const ts_manifest *m,
                            uint8_t id[TS_STORE_ID_LEN], struct ts_err *err)
{
    size_t n;
    uint8_t *buf;
    ts_status st;

    if ((st = ts_manifest_validate(m, err)))
        return st;
    n = tessera__v1__manifest__get_packed_size(m);
    if (n > TS_MANIFEST_MAX_BYTES)
        return ts_err_set(err, TS_EINVAL, "manifest: %zu bytes, at most %u", n,
                          TS_MANIFEST_MAX_BYTES);
    if (!(buf = malloc(n + 1)))
        return ts_err_set(err, TS_ENOMEM, "manifest: out of memory");
    tessera__v1__manifest__pack(m, buf);
    st = ts_store_put_object(s, TS_STORE_MANIFEST, buf, n, id, err);
    free(buf);
    return st;
}

ts_status ts_manifest_load(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN],
                           ts_manifest **out, struct ts_err *err)
{
    char hex[TS_STORE_HEX_LEN + 1];
    void *buf = NULL;
    size_t len = 0;
    ts_status st = ts_store_get_object(s, TS_STORE_MANIFEST, id, &buf, &len, err);

    if (st == TS_OK && (st = ts_manifest_parse(buf, len, out, err)))
        ts_err_prefix(err, "snapshot %s", ts_store_hex(id, hex));
    free(buf);
    return st;
}
