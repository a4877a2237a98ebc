/* test_snapshot.c - lib/snapshot: manifests round-trip and every invalid field is refused by
 * name; refs resolve (HEAD, branch, tag, id prefix, ~N, ambiguity); a corrupted chunk names
 * the chunk and the tensor; diff measures a change; gc keeps exactly what refs reach; and an
 * incremental snapshot after a 1% change writes at most 2% of the first one's bytes; shards'
 * pieces merge into one manifest and commit on a branch by compare-and-swap; an import of
 * whole tensors reads back with the same bits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapshot/snapshot.h"
#include "tensor/tensor.h"

struct fx {
    char dir[64];
    struct ts_store *s;
};

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct ts_err e = { 0 };

    snprintf(f->dir, sizeof(f->dir), "/tmp/ts-snap-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(ts_store_open(f->dir, NULL, &f->s, &e), TS_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    ts_store_close(f->s);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* A one-job manifest of tensors with numel[i] elements, built in memory over `values`. */
struct built {
    Tessera__V1__Manifest m;
    Tessera__V1__JobSpec job;
    Tessera__V1__ClusterShape shape;
    Tessera__V1__ScheduleState sched;
    Tessera__V1__TensorManifest t[4], *tp[4];
    Tessera__V1__TensorSpec spec[4];
    Tessera__V1__PartitionManifest p[4][64], *pp[4][64];
    uint64_t dims[4];
    char names[4][16];
    void *mem[4][64];
    uint64_t written;
};

static void build(struct fx *f, struct built *b, const uint64_t *numel, int n,
                  float *const *values, uint64_t partition_bytes, uint32_t chunk)
{
    struct ts_err e = { 0 };

    memset(b, 0, sizeof(*b));
    b->m = (Tessera__V1__Manifest)TESSERA__V1__MANIFEST__INIT;
    b->job = (Tessera__V1__JobSpec)TESSERA__V1__JOB_SPEC__INIT;
    b->shape = (Tessera__V1__ClusterShape)TESSERA__V1__CLUSTER_SHAPE__INIT;
    b->sched = (Tessera__V1__ScheduleState)TESSERA__V1__SCHEDULE_STATE__INIT;
    b->job.id = "job";
    b->job.workers = 2;
    b->job.exact = 1;
    b->job.optimizer = "sgd:lr=0.1";
    b->job.batch = 64;
    b->m.format = TS_MANIFEST_FORMAT;
    b->m.step = 5;
    b->m.message = "";
    b->m.job = &b->job;
    b->m.cluster = &b->shape;
    b->sched.next_step = 5;
    b->m.schedule = &b->sched;
    b->m.chunk_bytes = chunk;
    for (int i = 0; i < n; i++) {
        uint32_t np = ts_partition_count(numel[i], 4, partition_bytes);

        snprintf(b->names[i], sizeof(b->names[i]), "w%d", i);
        b->spec[i] = (Tessera__V1__TensorSpec)TESSERA__V1__TENSOR_SPEC__INIT;
        b->spec[i].name = b->names[i];
        b->spec[i].dtype = TESSERA__V1__DTYPE__DTYPE_F32;
        b->dims[i] = numel[i];
        b->spec[i].shape = &b->dims[i];
        b->spec[i].n_shape = 1;
        b->spec[i].initializer = "zeros";
        b->spec[i].partition_bytes = partition_bytes;
        b->t[i] = (Tessera__V1__TensorManifest)TESSERA__V1__TENSOR_MANIFEST__INIT;
        b->t[i].id = (uint32_t)i;
        b->t[i].spec = &b->spec[i];
        b->t[i].numel = numel[i];
        b->t[i].partitions = b->pp[i];
        b->t[i].n_partitions = np;
        b->tp[i] = &b->t[i];
        for (uint32_t p = 0; p < np; p++) {
            uint64_t off, len, w = 0;

            ts_partition_range(numel[i], 4, partition_bytes, p, &off, &len);
            b->p[i][p] = (Tessera__V1__PartitionManifest)TESSERA__V1__PARTITION_MANIFEST__INIT;
            b->p[i][p].index = p;
            b->p[i][p].offset = off;
            b->p[i][p].length = len;
            b->p[i][p].version = 5;
            b->mem[i][p] = malloc(ts_snap_partition_mem(len, 0, chunk));
            assert_int_equal(ts_snap_put_partition(f->s, values[i] + off, len, NULL, 0, chunk,
                                                   &b->p[i][p], b->mem[i][p], &w, &e), TS_OK);
            b->written += w;
            b->pp[i][p] = &b->p[i][p];
        }
    }
    b->m.tensors = b->tp;
    b->m.n_tensors = (size_t)n;
}

static void unbuild(struct built *b)
{
    for (int i = 0; i < 4; i++)
        for (int p = 0; p < 64; p++)
            free(b->mem[i][p]);
}

static void test_round_trip_and_read(void **state)
{
    struct fx *f = *state;
    uint64_t numel[2] = { 10000, 33 };
    float *v[2] = { malloc(10000 * 4), malloc(33 * 4) }, *back = malloc(10000 * 4);
    struct built b;
    uint8_t id[TS_STORE_ID_LEN];
    ts_manifest *m;
    struct ts_err e = { 0 };

    for (int i = 0; i < 10000; i++)
        v[0][i] = (float)i * 0.5f;
    for (int i = 0; i < 33; i++)
        v[1][i] = -(float)i;
    build(f, &b, numel, 2, v, 4096 * 4, 4096);
    assert_int_equal(ts_manifest_write(f->s, &b.m, id, &e), TS_OK);
    assert_int_equal(ts_manifest_load(f->s, id, &m, &e), TS_OK);
    assert_int_equal(m->n_tensors, 2);
    assert_int_equal(m->tensors[0]->n_partitions, 3);
    for (size_t p = 0; p < 3; p++) {
        const ts_partition_manifest *pm = m->tensors[0]->partitions[p];
        assert_int_equal(ts_snap_read_partition(f->s, m, m->tensors[0], pm, back + pm->offset,
                                                NULL, &e), TS_OK);
    }
    assert_memory_equal(back, v[0], 10000 * 4);
    assert_int_equal(ts_snap_check(f->s, m, NULL, NULL, &e), TS_OK);
    ts_manifest_free(m);
    unbuild(&b);
    free(v[0]);
    free(v[1]);
    free(back);
}

/* Each mutation of a valid manifest must be refused with the field named. */
static void test_invalid_fields_named(void **state)
{
    struct fx *f = *state;
    uint64_t numel[1] = { 5000 };
    float *v[1] = { calloc(5000, 4) };
    struct built b;
    struct ts_err e;
    ProtobufCBinaryData shortid = { 5, (uint8_t *)"abcde" };
    static const struct {
        int what;
        const char *field;
    } cases[] = {
        { 0, "format" }, { 1, "parent" }, { 2, "job.workers" }, { 3, "job.optimizer" },
        { 4, "chunk_bytes" }, { 5, "tensors: 0" }, { 6, "numel" }, { 7, "partitions: 1" },
        { 8, "partitions[1]: index" }, { 9, "partitions[0].version" },
        { 10, "value_chunks: " }, { 11, "value_chunks[0]" }, { 12, "schedule.next_step" },
        { 13, "spec.dtype" }, { 14, "partition_bytes" },
    };

    build(f, &b, numel, 1, v, 2048 * 4, 4096);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_manifest_validate(&b.m, &e), TS_OK);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct built x = b;
        Tessera__V1__TensorManifest t = b.t[0], *tp = &t;
        Tessera__V1__TensorSpec spec = b.spec[0];
        Tessera__V1__JobSpec job = b.job;
        Tessera__V1__ScheduleState sched = b.sched;
        Tessera__V1__PartitionManifest p1 = b.p[0][1], p0 = b.p[0][0];
        Tessera__V1__PartitionManifest *pp[3] = { &p0, &p1, b.pp[0][2] };

        t.spec = &spec;
        t.partitions = pp;
        x.m.tensors = &tp;
        x.m.job = &job;
        x.m.schedule = &sched;
        switch (cases[c].what) {
        case 0: x.m.format = 2; break;
        case 1: x.m.parent = shortid; break;
        case 2: job.workers = 0; break;
        case 3: job.optimizer = "rmsprop"; break;
        case 4: x.m.chunk_bytes = 100; break;
        case 5: x.m.n_tensors = 0; break;
        case 6: t.numel = 4999; break;
        case 7: t.n_partitions = 1; break;
        case 8: p1.index = 2; break;
        case 9: p0.version = 4; break;
        case 10: p0.n_value_chunks = 1; break;
        case 11: p0.value_chunks = &shortid; break;
        case 12: sched.next_step = 4; break;
        case 13: spec.dtype = TESSERA__V1__DTYPE__DTYPE_F16; break;
        case 14: spec.partition_bytes = 2; break;
        }
        e = (struct ts_err){ 0 };
        assert_int_equal(ts_manifest_validate(&x.m, &e), TS_EINVAL);
        if (!strstr(e.msg, cases[c].field))
            fail_msg("case %d: '%s' does not name '%s'", cases[c].what, e.msg, cases[c].field);
    }
    /* Bytes that are not a manifest at all. */
    e = (struct ts_err){ 0 };
    ts_manifest *m = NULL;
    assert_int_equal(ts_manifest_parse("\xff\xff\xff", 3, &m, &e), TS_EINVAL);
    assert_null(m);
    unbuild(&b);
    free(v[0]);
}

static void test_resolve(void **state)
{
    struct fx *f = *state;
    uint64_t numel[1] = { 100 };
    float *v[1] = { calloc(100, 4) };
    struct built b1, b2;
    uint8_t id1[TS_STORE_ID_LEN], id2[TS_STORE_ID_LEN], got[TS_STORE_ID_LEN];
    char hex[TS_STORE_HEX_LEN + 1], pre[12], branch[TS_STORE_REF_MAX + 1];
    struct ts_err e = { 0 };

    build(f, &b1, numel, 1, v, 4096, 4096);
    assert_int_equal(ts_manifest_write(f->s, &b1.m, id1, &e), TS_OK);
    v[0][3] = 1;
    build(f, &b2, numel, 1, v, 4096, 4096);
    b2.m.parent = (ProtobufCBinaryData){ TS_STORE_ID_LEN, id1 };
    assert_int_equal(ts_manifest_write(f->s, &b2.m, id2, &e), TS_OK);
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", id2, NULL, &e), TS_OK);
    assert_int_equal(ts_store_ref_set(f->s, "tags/v1", id1, NULL, &e), TS_OK);

    assert_int_equal(ts_snap_resolve(f->s, "HEAD", got, branch, &e), TS_OK);
    assert_memory_equal(got, id2, sizeof(got));
    assert_string_equal(branch, "heads/main");
    assert_int_equal(ts_snap_resolve(f->s, "main~1", got, branch, &e), TS_OK);
    assert_memory_equal(got, id1, sizeof(got));
    assert_string_equal(branch, "");
    assert_int_equal(ts_snap_resolve(f->s, "v1", got, NULL, &e), TS_OK);
    assert_memory_equal(got, id1, sizeof(got));
    snprintf(pre, sizeof(pre), "%.8s", ts_store_hex(id2, hex));
    assert_int_equal(ts_snap_resolve(f->s, pre, got, NULL, &e), TS_OK);
    assert_memory_equal(got, id2, sizeof(got));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_resolve(f->s, "HEAD~2", got, NULL, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "only 1 snapshot"));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_resolve(f->s, "nothing", got, NULL, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "'nothing'"));
    /* A branch and a tag of one name at different snapshots: ambiguous. */
    assert_int_equal(ts_store_ref_set(f->s, "heads/v1", id2, NULL, &e), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_resolve(f->s, "v1", got, NULL, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "tags/v1"));
    unbuild(&b1);
    unbuild(&b2);
    free(v[0]);
}

static void test_corrupt_chunk_names_tensor(void **state)
{
    struct fx *f = *state;
    uint64_t numel[1] = { 3000 };
    float *v[1] = { calloc(3000, 4) }, *back = malloc(3000 * 4);
    struct built b;
    char hex[TS_STORE_HEX_LEN + 1], path[256];
    struct ts_err e = { 0 };
    FILE *fp;

    for (int i = 0; i < 3000; i++)
        v[0][i] = sinf((float)i);
    build(f, &b, numel, 1, v, 3000 * 4, 4096);
    ts_store_hex(b.p[0][0].value_chunks[1].data, hex);
    snprintf(path, sizeof(path), "%s/chunks/%.2s/%s", f->dir, hex, hex);
    chmod(path, 0644);
    assert_non_null(fp = fopen(path, "r+b"));
    fseek(fp, 40, SEEK_SET);
    fputc(0x5a ^ fgetc(fp), fp);
    fclose(fp);
    assert_int_equal(ts_snap_read_partition(f->s, &b.m, &b.t[0], &b.p[0][0], back, NULL, &e),
                     TS_ECORRUPT);
    assert_non_null(strstr(e.msg, hex));
    assert_non_null(strstr(e.msg, "tensor 'w0'"));
    unbuild(&b);
    free(v[0]);
    free(back);
}

/* 64 MiB of values; 1% of them, a contiguous run at an odd offset, change. */
static void test_incremental_two_percent(void **state)
{
    struct fx *f = *state;
    const uint64_t n = 16u << 20;            /* floats */
    uint64_t numel[1] = { n };
    float *v[1] = { malloc(n * 4) };
    struct built b1, b2;
    uint8_t id1[TS_STORE_ID_LEN], id2[TS_STORE_ID_LEN];
    struct ts_snap_tensor_diff *d;
    ts_manifest *m1, *m2;
    size_t nd;
    struct ts_err e = { 0 };

    for (uint64_t i = 0; i < n; i++)
        v[0][i] = (float)((i * 2654435761u) % 1000003) * 1e-6f;
    build(f, &b1, numel, 1, v, 4u << 20, TS_SNAP_CHUNK_DEFAULT);
    for (uint64_t i = n / 3 + 777; i < n / 3 + 777 + n / 100; i++)
        v[0][i] += 0.25f;
    build(f, &b2, numel, 1, v, 4u << 20, TS_SNAP_CHUNK_DEFAULT);
    print_message("first snapshot wrote %llu bytes, after a 1%% change %llu (%.2f%%)\n",
                  (unsigned long long)b1.written, (unsigned long long)b2.written,
                  100.0 * (double)b2.written / (double)b1.written);
    assert_true(b2.written * 50 <= b1.written);
    assert_true(b2.written > 0);
    /* diff sees exactly the change */
    assert_int_equal(ts_manifest_write(f->s, &b1.m, id1, &e), TS_OK);
    assert_int_equal(ts_manifest_write(f->s, &b2.m, id2, &e), TS_OK);
    assert_int_equal(ts_manifest_load(f->s, id1, &m1, &e), TS_OK);
    assert_int_equal(ts_manifest_load(f->s, id2, &m2, &e), TS_OK);
    assert_int_equal(ts_snap_diff(f->s, m1, m2, &d, &nd, &e), TS_OK);
    assert_int_equal(nd, 1);
    assert_int_equal(d[0].kind, TS_DIFF_CHANGED);
    assert_int_equal(d[0].changed, n / 100);
    assert_true(fabs(d[0].max_abs - 0.25) < 1e-3);
    assert_true(fabs(d[0].l2 - 0.25 * sqrt((double)(n / 100))) < 1e-2 * d[0].l2);
    assert_true(d[0].chunks - d[0].chunks_shared <= 4);
    free(d);
    ts_manifest_free(m1);
    ts_manifest_free(m2);
    unbuild(&b1);
    unbuild(&b2);
    free(v[0]);
}

static void test_gc_keeps_reachable(void **state)
{
    struct fx *f = *state;
    uint64_t numel[1] = { 8192 };
    float *v[1] = { calloc(8192, 4) };
    struct built b1, b2;
    uint8_t id1[TS_STORE_ID_LEN], id2[TS_STORE_ID_LEN], (*live)[TS_STORE_ID_LEN];
    struct ts_store_stats st = { 0 };
    size_t n, nm;
    ts_manifest *m;
    struct ts_err e = { 0 };

    build(f, &b1, numel, 1, v, 8192 * 4, 4096);   /* 8 chunks of zeros: one distinct */
    assert_int_equal(ts_manifest_write(f->s, &b1.m, id1, &e), TS_OK);
    for (int i = 0; i < 8192; i++)
        v[0][i] = (float)i;
    build(f, &b2, numel, 1, v, 8192 * 4, 4096);   /* 8 new distinct chunks */
    assert_int_equal(ts_manifest_write(f->s, &b2.m, id2, &e), TS_OK);
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", id2, NULL, &e), TS_OK);
    assert_int_equal(ts_snap_live_chunks(f->s, &live, &n, &nm, &e), TS_OK);
    assert_int_equal(n, 8);
    assert_int_equal(nm, 1);
    assert_int_equal(ts_store_gc(f->s, (const uint8_t(*)[TS_STORE_ID_LEN])live, n, 0, &st, &e),
                     TS_OK);
    assert_int_equal(st.removed, 1);               /* the zeros chunk of the unreachable one */
    free(live);
    assert_int_equal(ts_manifest_load(f->s, id2, &m, &e), TS_OK);
    assert_int_equal(ts_snap_check(f->s, m, NULL, NULL, &e), TS_OK);
    ts_manifest_free(m);
    unbuild(&b1);
    unbuild(&b2);
    free(v[0]);
}

/* A test allocator for pieces: every block is kept to be freed at the end. */
struct blocks {
    void *p[256];
    size_t n;
};

static void *blocks_alloc(void *ctx, size_t n)
{
    struct blocks *b = ctx;

    assert_true(b->n < 256);
    return b->p[b->n++] = calloc(1, n);
}

/* Two shards' pieces of two tensors merge into one manifest (tensors by id, partitions by
 * index, whatever order the shards added them in), commit on a branch by compare-and-swap,
 * read back exactly (a tensor's placement salt too: 0, written as nothing, is how a manifest
 * from before salts reads; each partition's optimizer update count, 0 included, and none
 * where the writer had none to give); a tag is checked, set, and refused twice;
 * pieces that disagree on the job are refused naming both shards, and on a tensor's salt
 * naming one. */
static void test_pieces_merge_commit(void **state)
{
    struct fx *f = *state;
    float w[10], bias[3] = { 7, 8, 9 }, got[10];
    uint64_t wshape = 10, bshape = 3;
    struct ts_snap_tensor tw = { .id = 0, .nparts = 5, .name = "w", .init = "zeros",
                                 .shape = &wshape, .ndim = 1, .numel = 10,
                                 .partition_bytes = 8, .salt = 7 };
    struct ts_snap_tensor tb = { .id = 1, .nparts = 1, .name = "b", .init = "zeros",
                                 .shape = &bshape, .ndim = 1, .numel = 3,
                                 .partition_bytes = 64 };
    struct ts_job job;
    struct blocks mem = { .n = 0 };
    struct ts_snap_piece pc[2];
    Tessera__V1__ClusterShape shape = TESSERA__V1__CLUSTER_SHAPE__INIT;
    Tessera__V1__ScheduleState sched = TESSERA__V1__SCHEDULE_STATE__INIT;
    ts_manifest m = TESSERA__V1__MANIFEST__INIT, *back;
    uint8_t id[TS_STORE_ID_LEN], again[TS_STORE_ID_LEN], tip[TS_STORE_ID_LEN];
    const uint32_t order[2][3] = { { 4, 0, 2 }, { 3, 1, UINT32_MAX } };
    struct ts_err e = { 0 };
    void *arrays = NULL;

    for (int i = 0; i < 10; i++)
        w[i] = (float)i * 0.5f;
    assert_int_equal(ts_job_init(&job, "job", 2, true, "sgd:lr=0.1", 64, &e), TS_OK);
    for (uint32_t k = 0; k < 2; k++) {
        ts_snap_piece_init(&pc[k], blocks_alloc, &mem);
        pc[k].shard = k + 1;
        for (int j = 0; j < 3 && order[k][j] != UINT32_MAX; j++) {
            uint32_t p = order[k][j];
            struct ts_snap_part part = { .index = p, .offset = 2 * p, .len = 2, .version = 5,
                                         .value = w + 2 * p, .has_updates = true,
                                         .updates = p ? 3 + p : 0 };
            assert_int_equal(ts_snap_piece_add(&pc[k], f->s, &tw, &part, &e), TS_OK);
        }
        assert_int_equal(ts_snap_piece_set_job(&pc[k], &job, 3, 16, &e), TS_OK);
    }
    /* No count (as a writer that does not know it): none in the manifest. */
    struct ts_snap_part bp = { .index = 0, .offset = 0, .len = 3, .version = 5, .value = bias };
    assert_int_equal(ts_snap_piece_add(&pc[1], f->s, &tb, &bp, &e), TS_OK);
    assert_int_equal(pc[0].n_tensors, 1);
    assert_int_equal(pc[1].n_tensors, 2);
    assert_true(pc[0].bytes_written > 0);

    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_OK);
    assert_int_equal(m.n_tensors, 2);
    assert_string_equal(m.tensors[0]->spec->name, "w");
    assert_string_equal(m.tensors[1]->spec->name, "b");
    assert_int_equal(m.tensors[0]->n_partitions, 5);
    assert_int_equal(m.tensors[0]->spec->placement_salt, 7);
    for (uint32_t p = 0; p < 5; p++) {
        assert_int_equal(m.tensors[0]->partitions[p]->index, p);
        assert_int_equal(m.tensors[0]->partitions[p]->shard_id, p % 2 ? 2 : 1);
    }
    assert_int_equal(m.step, 5);
    assert_int_equal(m.job->data_seed, 3);
    assert_int_equal(m.chunk_bytes, TS_SNAP_CHUNK_DEFAULT);
    m.message = "";
    m.cluster = &shape;
    sched.next_step = 5;
    m.schedule = &sched;
    assert_int_equal(ts_snap_commit(f->s, &m, "heads/main", NULL, id, &e), TS_OK);
    /* The branch exists now: a commit that expects it not to loses the swap. */
    assert_int_equal(ts_snap_commit(f->s, &m, "heads/main", NULL, again, &e), TS_ESTATE);
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", tip, &e), TS_OK);
    assert_memory_equal(tip, id, sizeof(id));

    assert_int_equal(ts_manifest_load(f->s, id, &back, &e), TS_OK);
    for (uint32_t p = 0; p < 5; p++)
        assert_int_equal(ts_snap_read_partition(f->s, back, back->tensors[0],
                                                back->tensors[0]->partitions[p], got + 2 * p,
                                                NULL, &e), TS_OK);
    assert_memory_equal(got, w, sizeof(w));
    assert_int_equal(ts_snap_read_partition(f->s, back, back->tensors[1],
                                            back->tensors[1]->partitions[0], got, NULL, &e),
                     TS_OK);
    assert_memory_equal(got, bias, sizeof(bias));
    assert_int_equal(back->tensors[0]->spec->placement_salt, 7);
    assert_int_equal(back->tensors[1]->spec->placement_salt, 0);
    for (uint32_t p = 0; p < 5; p++) {
        assert_non_null(back->tensors[0]->partitions[p]->optimizer_updates);
        assert_int_equal(back->tensors[0]->partitions[p]->optimizer_updates->updates,
                         p ? 3 + p : 0);
    }
    assert_null(back->tensors[1]->partitions[0]->optimizer_updates);
    ts_manifest_free(back);

    assert_int_equal(ts_snap_tag_check(f->s, "v1", &e), TS_OK);
    assert_int_equal(ts_snap_tag(f->s, "v1", id, &e), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_tag_check(f->s, "v1", &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "'v1' exists"));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_tag(f->s, "v1", id, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "written, but the tag was not"));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_tag_check(f->s, "a b", &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "tag: 'a b'"));
    free(arrays);

    job.workers = 3;
    assert_int_equal(ts_snap_piece_set_job(&pc[1], &job, 3, 16, &e), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_EINTERNAL);
    assert_non_null(strstr(e.msg, "shards 1 and 2 disagree"));
    free(arrays);
    job.workers = 2;
    assert_int_equal(ts_snap_piece_set_job(&pc[1], &job, 3, 16, &e), TS_OK);
    pc[1].tensors[0]->spec->placement_salt = 8;
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_EINTERNAL);
    assert_non_null(strstr(e.msg, "shard 2 places tensor 'w' with placement salt 8"));
    free(arrays);
    for (size_t i = 0; i < mem.n; i++)
        free(mem.p[i]);
}

/* A piece names every tensor of the job (ts_snap_piece_declare): a tensor whose partitions
 * were all on a shard whose piece is missing (a shard that died, not yet followed by the
 * others) makes the merged manifest incomplete, and its commit is refused, where before the
 * tensor was silently left out of the snapshot a rollback then restored. Declaring a tensor
 * the piece holds partitions of adds nothing. */
static void test_piece_declares_every_tensor(void **state)
{
    struct fx *f = *state;
    float w[4] = { 1, 2, 3, 4 };
    uint64_t wshape = 4, bshape = 3;
    struct ts_snap_tensor tw = { .id = 0, .nparts = 1, .name = "w", .init = "zeros",
                                 .shape = &wshape, .ndim = 1, .numel = 4,
                                 .partition_bytes = 64 };
    struct ts_snap_tensor tb = { .id = 1, .nparts = 1, .name = "fc1.bias", .init = "zeros",
                                 .shape = &bshape, .ndim = 1, .numel = 3,
                                 .partition_bytes = 64 };
    struct ts_snap_part part = { .index = 0, .offset = 0, .len = 4, .version = 5, .value = w };
    Tessera__V1__ClusterShape shape = TESSERA__V1__CLUSTER_SHAPE__INIT;
    Tessera__V1__ScheduleState sched = TESSERA__V1__SCHEDULE_STATE__INIT;
    ts_manifest m = TESSERA__V1__MANIFEST__INIT;
    struct blocks mem = { .n = 0 };
    struct ts_snap_piece pc;
    struct ts_job job;
    uint8_t id[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    void *arrays = NULL;

    assert_int_equal(ts_job_init(&job, "job", 1, true, "sgd:lr=0.1", 64, &e), TS_OK);
    ts_snap_piece_init(&pc, blocks_alloc, &mem);
    pc.shard = 1;
    assert_int_equal(ts_snap_piece_add(&pc, f->s, &tw, &part, &e), TS_OK);
    assert_int_equal(ts_snap_piece_declare(&pc, &tw, &e), TS_OK);
    assert_int_equal(ts_snap_piece_declare(&pc, &tb, &e), TS_OK);
    assert_int_equal(ts_snap_piece_declare(&pc, &tb, &e), TS_OK);
    assert_int_equal(pc.n_tensors, 2);
    assert_int_equal(pc.tensors[0]->n_partitions, 1);
    assert_int_equal(pc.tensors[1]->n_partitions, 0);
    assert_int_equal(ts_snap_piece_set_job(&pc, &job, 3, 16, &e), TS_OK);

    assert_int_equal(ts_snap_merge(&pc, 1, 5, &m, &arrays, &e), TS_OK);
    assert_int_equal(m.n_tensors, 2);
    m.message = "";
    m.cluster = &shape;
    sched.next_step = 5;
    m.schedule = &sched;
    e = (struct ts_err){ 0 };
    assert_int_not_equal(ts_snap_commit(f->s, &m, "heads/main", NULL, id, &e), TS_OK);
    assert_non_null(strstr(e.msg, "incomplete"));
    assert_non_null(strstr(e.msg, "fc1.bias"));
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", id, &e), TS_ENOTFOUND);
    free(arrays);
    for (size_t i = 0; i < mem.n; i++)
        free(mem.p[i]);
}

/* A table's pieces say which shards its rows were placed on and whose rows their runs hold:
 * a merge where some placed shard's rows are in no piece is refused (TS_ESTATE naming the
 * table and the shard), as a shard that left while a survivor's copy of its rows was not
 * served yet made it (tests/integration/test_ctr_join.py: the job ended 'done' without the
 * dead shard's rows). The same pieces with the copy served merge, the lists left out of the
 * manifest; a piece that says nothing of its placement (an older shard) is not checked. */
static void test_table_pieces_cover_every_shard(void **state)
{
    struct blocks mem = { .n = 0 };
    struct ts_snap_piece pc[2];
    Tessera__V1__TableSpec spec = TESSERA__V1__TABLE_SPEC__INIT;
    ts_table_manifest tm[2] = { TESSERA__V1__TABLE_MANIFEST__INIT,
                                TESSERA__V1__TABLE_MANIFEST__INIT };
    ts_table_manifest *one[2] = { &tm[0], &tm[1] };
    uint32_t placed_old[2] = { 1, 2 }, placed_new[2] = { 2, 3 };
    uint32_t cov2[2] = { 2, 1 }, cov3[1] = { 3 };
    ts_manifest m = TESSERA__V1__MANIFEST__INIT;
    struct ts_job job;
    struct ts_err e = { 0 };
    void *arrays = NULL;

    (void)state;
    spec.name = "emb0";
    spec.dim = 4;
    spec.max_id = 99;
    spec.initializer = "zeros";
    spec.optimizer = "sgd:lr=0.1";
    assert_int_equal(ts_job_init(&job, "job", 2, true, "sgd:lr=0.1", 64, &e), TS_OK);
    for (uint32_t k = 0; k < 2; k++) {
        ts_snap_piece_init(&pc[k], blocks_alloc, &mem);
        pc[k].shard = k + 2;
        tm[k].spec = &spec;
        tm[k].rows = 10;
        pc[k].tables = &one[k];
        pc[k].n_tables = 1;
        assert_int_equal(ts_snap_piece_set_job(&pc[k], &job, 3, 16, &e), TS_OK);
    }
    /* Shard 2 placed on {1, 2} serves only its own rows; shard 3 placed on {2, 3}. */
    tm[0].placed_on = placed_old;
    tm[0].n_placed_on = 2;
    tm[0].covers = cov2;
    tm[0].n_covers = 1;
    tm[1].placed_on = placed_new;
    tm[1].n_placed_on = 2;
    tm[1].covers = cov3;
    tm[1].n_covers = 1;
    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "table 'emb0': the rows of shard 1"));
    free(arrays);
    arrays = NULL;
    /* Shard 2 serves the copy of shard 1's rows: every placed shard is covered. */
    tm[0].n_covers = 2;
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_OK);
    assert_int_equal(m.n_tables, 1);
    assert_int_equal(m.tables[0]->rows, 20);
    assert_int_equal(m.tables[0]->n_placed_on, 0);
    assert_int_equal(m.tables[0]->n_covers, 0);
    free(arrays);
    arrays = NULL;
    /* Pieces that say nothing of their placement are not checked. */
    tm[0].n_covers = tm[1].n_covers = tm[0].n_placed_on = tm[1].n_placed_on = 0;
    assert_int_equal(ts_snap_merge(pc, 2, 5, &m, &arrays, &e), TS_OK);
    free(arrays);
    for (size_t i = 0; i < mem.n; i++)
        free(mem.p[i]);
}

/* ts_snap_import then ts_snap_read_tensor: a tensor of three partitions with Adam's state
 * comes back with the same bits, state laid out [component][element] over the whole tensor;
 * the import is a child of the branch's tip and tagged; bad input writes nothing. */
static void test_import_read_whole(void **state)
{
    struct fx *f = *state;
    const uint64_t per = TS_PARTITION_BYTES_DEFAULT / sizeof(float);
    uint64_t big[2] = { 5, (2 * per + 7) / 5 + 1 }, small[1] = { 3 };
    uint64_t n = big[0] * big[1];
    float *v = malloc(n * sizeof(float)), *sv = malloc(2 * n * sizeof(float));
    float *rv = malloc(n * sizeof(float)), *rs = malloc(2 * n * sizeof(float));
    const float sm[3] = { 1, 2, 3 };
    struct ts_snap_import_tensor xs[2] = {
        { .name = "w", .shape = big, .ndim = 2, .value = v, .state = sv, .has_updates = true,
          .updates = 41 },
        { .name = "b", .shape = small, .ndim = 1, .value = sm, .state = NULL },
    };
    struct ts_job job;
    struct ts_snap_import in = { .job = &job, .step = 7, .tensors = xs, .n = 2,
                                 .branch = "imports", .tag = "first", .message = "m" };
    uint8_t id[TS_STORE_ID_LEN], id2[TS_STORE_ID_LEN], got[TS_STORE_ID_LEN];
    ts_manifest *m = NULL;
    struct ts_err e = { 0 };

    for (uint64_t i = 0; i < n; i++) {
        v[i] = (float)i * 0.5f;
        sv[i] = -(float)i;
        sv[n + i] = (float)i + 0.25f;
    }
    assert_int_equal(ts_job_init(&job, "imp", 2, false, "adam:lr=0.01", 8, &e), TS_OK);
    assert_int_equal(ts_snap_import(f->s, &in, id, &e), TS_OK);
    assert_int_equal(ts_snap_resolve(f->s, "first", got, NULL, &e), TS_OK);
    assert_memory_equal(got, id, TS_STORE_ID_LEN);
    assert_int_equal(ts_manifest_load(f->s, id, &m, &e), TS_OK);
    assert_int_equal(m->step, 7);
    assert_int_equal(m->n_tensors, 2);
    assert_string_equal(m->tensors[0]->spec->initializer, "assigned");
    assert_int_equal(m->tensors[0]->n_partitions, 3);
    assert_int_equal(ts_snap_read_tensor(f->s, m, m->tensors[0], rv, rs, &e), TS_OK);
    assert_memory_equal(rv, v, n * sizeof(float));
    assert_memory_equal(rs, sv, 2 * n * sizeof(float));
    {   /* the update count on every partition of w; b has none */
        uint64_t u = 0;

        assert_true(ts_snap_tensor_updates(m->tensors[0], &u));
        assert_int_equal(u, 41);
        assert_false(ts_snap_tensor_updates(m->tensors[1], &u));
    }
    assert_int_equal(ts_snap_read_tensor(f->s, m, m->tensors[1], rv, rs, &e), TS_OK);
    assert_memory_equal(rv, sm, sizeof(sm));
    assert_true(rs[0] == 0 && rs[1] == 0 && rs[5] == 0);     /* no state given: zeros */
    ts_manifest_free(m);

    /* The next import on the branch has the first as its parent. */
    in.tag = NULL;
    assert_int_equal(ts_snap_import(f->s, &in, id2, &e), TS_OK);
    assert_int_equal(ts_manifest_load(f->s, id2, &m, &e), TS_OK);
    assert_int_equal(m->parent.len, TS_STORE_ID_LEN);
    assert_memory_equal(m->parent.data, id, TS_STORE_ID_LEN);
    ts_manifest_free(m);

    /* Refusals, each before anything moves: a taken tag, step 0, a repeated name, an empty
     * extent, a job not in bsp. */
    in.tag = "first";
    ts_err_clear(&e);
    assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EEXIST);
    in.tag = NULL;
    in.step = 0;
    ts_err_clear(&e);
    assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "step"));
    in.step = 7;
    xs[1].name = "w";
    ts_err_clear(&e);
    assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "'w' appears twice"));
    xs[1].name = "b";
    small[0] = 0;
    ts_err_clear(&e);
    assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "'b': shape[0] is 0"));
    small[0] = 3;
    assert_int_equal(ts_job_set_mode(&job, TS_MODE_SSP, 2, &e), TS_OK);
    ts_err_clear(&e);
    assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "bsp"));
    assert_int_equal(ts_snap_resolve(f->s, "imports", got, NULL, &e), TS_OK);
    assert_memory_equal(got, id2, TS_STORE_ID_LEN);
    free(v);
    free(sv);
    free(rv);
    free(rs);
}

/* A table imported with no tensor: four runs of records (run_bytes), read back by
 * ts_snap_read_rows with the same ids, values, Adam state, update counts and steps; each bad
 * table is refused naming what is wrong, and the branch stays where it was (a spec a shard
 * would refuse, such as a momentum optimizer, is the SDK's to check: test_torch_snapshot.py). */
static void test_import_table(void **state)
{
    struct fx *f = *state;
    enum { ROWS = 1000, DIM = 4, REC = 24 + DIM * 4 * 3 };
    uint64_t *ids = malloc(ROWS * sizeof(*ids)), *updates = malloc(ROWS * sizeof(*updates));
    uint64_t *steps = malloc(ROWS * sizeof(*steps));
    float *v = malloc(ROWS * DIM * sizeof(float)), *sv = malloc(ROWS * 2 * DIM * sizeof(float));
    Tessera__V1__TableSpec spec = TESSERA__V1__TABLE_SPEC__INIT, other;
    struct ts_snap_import_table tab = { .spec = &spec, .rows = ROWS, .ids = ids, .value = v,
                                        .state = sv, .updates = updates, .steps = steps };
    struct ts_snap_import_table two[2];
    struct ts_job job;
    struct ts_snap_import in = { .job = &job, .step = 9, .tables = &tab, .ntables = 1,
                                 .branch = "tables", .run_bytes = 300 * REC };
    uint8_t id[TS_STORE_ID_LEN], got[TS_STORE_ID_LEN];
    struct ts_snap_rows r;
    ts_manifest *m = NULL;
    struct ts_err e = { 0 };

    spec.name = "items";
    spec.dim = DIM;
    spec.max_id = 3 * ROWS;
    spec.initializer = "normal:0.01";
    spec.optimizer = "adam:lr=0.01";
    for (size_t i = 0; i < ROWS; i++) {
        ids[i] = 3 * i;
        updates[i] = i % 7;
        steps[i] = i % 9;
        for (size_t d = 0; d < DIM; d++) {
            v[i * DIM + d] = (float)i - (float)d * 0.5f;
            sv[i * 2 * DIM + d] = -(float)d;                 /* m */
            sv[i * 2 * DIM + DIM + d] = (float)(i + d);      /* v, >= 0 */
        }
    }
    assert_int_equal(ts_job_init(&job, "tab", 1, true, "sgd:lr=0.1", 8, &e), TS_OK);
    assert_int_equal(ts_snap_import(f->s, &in, id, &e), TS_OK);
    assert_int_equal(ts_manifest_load(f->s, id, &m, &e), TS_OK);
    assert_int_equal(m->n_tensors, 0);
    assert_int_equal(m->n_tables, 1);
    assert_int_equal(m->tables[0]->id, 0);
    assert_int_equal(m->tables[0]->rows, ROWS);
    assert_int_equal(m->tables[0]->n_runs, 4);   /* 300, 300, 300 and 100 records */
    assert_string_equal(m->tables[0]->spec->optimizer, "adam:lr=0.01");
    assert_int_equal(ts_snap_read_rows(f->s, m, m->tables[0], true, &r, &e), TS_OK);
    assert_int_equal(r.rows, ROWS);
    assert_int_equal(r.state_len, 2);
    assert_memory_equal(r.ids, ids, ROWS * sizeof(*ids));
    assert_memory_equal(r.values, v, ROWS * DIM * sizeof(float));
    assert_memory_equal(r.state, sv, ROWS * 2 * DIM * sizeof(float));
    assert_memory_equal(r.updates, updates, ROWS * sizeof(*updates));
    assert_memory_equal(r.steps, steps, ROWS * sizeof(*steps));
    ts_snap_rows_free(&r);
    ts_manifest_free(m);

    /* Refusals, each naming its table and what is wrong; nothing moves. */
#define REFUSED(what)                                                           \
    do {                                                                        \
        ts_err_clear(&e);                                                       \
        assert_int_equal(ts_snap_import(f->s, &in, got, &e), TS_EINVAL);        \
        assert_non_null(strstr(e.msg, what));                                   \
    } while (0)
    ids[5] = ids[4];
    REFUSED("'items': ids[5] = 12 after 12; ids must be strictly ascending");
    ids[5] = 15;
    spec.max_id = 100;
    REFUSED("'items': id 102 is past max_id 100");
    spec.max_id = 3 * ROWS;
    v[7] = NAN;
    REFUSED("'items': row 3 holds nan; rows must be finite");
    v[7] = 1;
    sv[2 * DIM + DIM] = -1;
    REFUSED("row 3's optimizer state holds -1 where a sum of squares (>= 0) belongs");
    sv[2 * DIM + DIM] = 1;
    steps[2] = 10;
    REFUSED("row 6's step 10 is after the import's step 9");
    steps[2] = 2;
    spec.optimizer = "nosuch";
    REFUSED("'items': dim 4 outside 1..4096, optimizer 'nosuch' unknown");
    spec.name = "two words";
    REFUSED("tables[0]: name: byte 3 is 0x20");
    spec.name = "items";
    spec.optimizer = "sgd";
    REFUSED("'items': state given, but its optimizer 'sgd' keeps none");
    spec.optimizer = "adam:lr=0.01";
    other = spec;
    two[0] = tab;
    two[1] = tab;
    two[1].spec = &other;
    in.tables = two;
    in.ntables = 2;
    REFUSED("table 'items' appears twice");
    in.ntables = 0;
    REFUSED("at least one tensor or table");
#undef REFUSED
    assert_int_equal(ts_snap_resolve(f->s, "tables", got, NULL, &e), TS_OK);
    assert_memory_equal(got, id, TS_STORE_ID_LEN);
    free(ids);
    free(updates);
    free(steps);
    free(v);
    free(sv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_fields_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resolve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_chunk_names_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incremental_two_percent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_keeps_reachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pieces_merge_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_pieces_cover_every_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_piece_declares_every_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_read_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_table, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
