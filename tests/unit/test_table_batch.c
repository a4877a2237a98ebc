/* test_table_batch.c - lib/table's worker-side batches (batch.h) and the placement of rows
 * on the ring (ring.h, ts_ring_row_hash): the documented hash bytes; a shard joining or
 * leaving moves only its own rows, which spread evenly; repeats merged exactly in any input
 * order (exact) or in input order (float); per-shard lists ascending, disjoint, covering the
 * batch and owned by their shard; the scatter map; bad input refused with nothing produced;
 * two workers' batches pushed to per-shard stores hash as one worker's concatenated batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "table/batch.h"
#include "table/table.h"
#include "tensor/tensor.h"

#define NIDS 100000

static struct ts_ring *ring(const uint32_t *ids, size_t n)
{
    struct ts_ring *r;
    struct ts_err e = { 0 };

    if (ts_ring_create(ids, n, 0, &r, &e))
        fail_msg("ts_ring_create: %s", e.msg);
    return r;
}

static struct ts_rows_batch *mkbatch(uint32_t dim, size_t cap, bool exact)
{
    struct ts_rows_batch *b;
    struct ts_err e = { 0 };

    if (ts_rows_batch_create(dim, cap, exact, &b, &e))
        fail_msg("ts_rows_batch_create: %s", e.msg);
    return b;
}

static void prep_ok(struct ts_rows_batch *b, const struct ts_ring *r, const uint64_t *ids,
                    size_t n, const float *g)
{
    struct ts_err e = { 0 };

    if (ts_rows_batch_prepare(b, r, "emb", UINT64_MAX >> 1, ids, n, g, &e))
        fail_msg("prepare: %s", e.msg);
}

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* n ids drawn from `range` values (many repeats) near `base`, gradients with many fraction
 * bits of both signs. */
static void fill(uint64_t seed, size_t n, uint32_t dim, uint64_t base, uint64_t range,
                 uint64_t *ids, float *g)
{
    for (size_t i = 0; i < n; i++) {
        ids[i] = base + rnd(&seed) % range;
        for (uint32_t k = 0; k < dim; k++)
            g[i * dim + k] = ((float)(rnd(&seed) % 2000001) - 1e6f) * 1.37e-5f;
    }
}

/* The key hash is the documented 17 bytes (docs/placement.md). */
static void t_row_hash_bytes(void **state)
{
    (void)state;
    uint64_t nh = XXH3_64bits_withSeed("emb", 3, TS_RING_SEED);
    uint64_t id = 0x0123456789abcdefull;
    unsigned char b[17];

    assert_int_equal(ts_ring_name_hash("emb"), nh);
    for (int i = 0; i < 8; i++) {
        b[i] = (unsigned char)(nh >> (8 * i));
        b[8 + i] = (unsigned char)(id >> (8 * i));
    }
    b[16] = 'r';
    assert_int_equal(ts_ring_row_hash(nh, id), XXH3_64bits_withSeed(b, 17, TS_RING_SEED));
    /* Not a tensor key: partition 0 of a tensor named as the table sits elsewhere. */
    assert_int_not_equal(ts_ring_row_hash(nh, 0), ts_ring_key_hash("emb", 0));
}

static uint32_t owner(const struct ts_ring *r, uint64_t nh, uint64_t id)
{
    return ts_ring_lookup_hash(r, ts_ring_row_hash(nh, id));
}

/* With 4 shards, a fifth takes rows only for itself; removing shard 2 moves only its rows;
 * 10^5 rows spread within 15% of n/S. */
static void t_ring_moves(void **state)
{
    (void)state;
    const uint32_t s4[] = { 1, 2, 3, 4 }, s5[] = { 1, 2, 3, 4, 5 }, s3[] = { 1, 3, 4 };
    struct ts_ring *r4 = ring(s4, 4), *r5 = ring(s5, 5), *r3 = ring(s3, 3);
    uint64_t nh = ts_ring_name_hash("emb");
    size_t count[6] = { 0 }, to5 = 0, from2 = 0;

    for (uint64_t id = 0; id < NIDS; id++) {
        uint32_t a = owner(r4, nh, id), b = owner(r5, nh, id), c = owner(r3, nh, id);

        count[a]++;
        if (a != b) {
            assert_int_equal(b, 5);
            to5++;
        }
        if (a != c) {
            assert_int_equal(a, 2);
            from2++;
        } else {
            assert_int_not_equal(a, 2);
        }
    }
    for (int s = 1; s <= 4; s++) {
        assert_true(count[s] > NIDS / 4 * 0.85);
        assert_true(count[s] < NIDS / 4 * 1.15);
    }
    assert_int_equal(from2, count[2]);
    assert_true(to5 > NIDS / 5 * 0.85 && to5 < NIDS / 5 * 1.15);
    ts_ring_free(r4);
    ts_ring_free(r5);
    ts_ring_free(r3);
}

/* Shards ascending; each shard's ids strictly ascending and its own; every input id in
 * exactly one list; the index maps each position to its own id. */
static void check_shape(const struct ts_rows_batch *b, const struct ts_ring *r,
                        const uint64_t *ids, size_t n)
{
    uint64_t nh = ts_ring_name_hash("emb");
    size_t total = 0;
    uint32_t last = 0;
    uint64_t *flat = malloc((n ? n : 1) * sizeof(*flat));

    for (size_t i = 0; i < ts_rows_batch_shards(b); i++) {
        struct ts_rows_part p;

        ts_rows_batch_shard(b, i, &p);
        assert_true(p.shard > last);
        last = p.shard;
        assert_int_equal(p.first, total);
        assert_true(p.n > 0);
        for (size_t k = 0; k < p.n; k++) {
            assert_int_equal(owner(r, nh, p.ids[k]), p.shard);
            if (k)
                assert_true(p.ids[k] > p.ids[k - 1]);
            flat[total + k] = p.ids[k];
        }
        total += p.n;
    }
    assert_int_equal(total, ts_rows_batch_unique(b));
    for (size_t i = 0; i < n; i++) {
        size_t u = ts_rows_batch_index(b, i);

        assert_true(u < total);
        assert_int_equal(flat[u], ids[i]);
    }
    /* Covering: every unique row is some position's (no row comes from nowhere). */
    for (size_t u = 0; u < total; u++) {
        bool seen = false;

        for (size_t i = 0; i < n && !seen; i++)
            seen = ts_rows_batch_index(b, i) == u;
        assert_true(seen);
    }
    free(flat);
}

/* The sort by (shard, id) with every byte of the key in use: ids spread over 63 bits (with
 * repeats), shard ids of one to four bytes. */
static void t_sort_wide_keys(void **state)
{
    (void)state;
    enum { N = 3000 };
    const uint32_t sh[] = { 0x01000001, 3, 70000, 256, 1 };
    struct ts_ring *r = ring(sh, 5);
    struct ts_rows_batch *b = mkbatch(2, N, false);
    static uint64_t ids[N];
    uint64_t s = 99;

    for (size_t i = 0; i < N; i++)
        ids[i] = i % 7 == 3 ? ids[i / 2] : (rnd(&s) << 32 ^ rnd(&s) << 1 ^ rnd(&s)) >> 1;
    prep_ok(b, r, ids, N, NULL);
    assert_int_equal(ts_rows_batch_shards(b), 5);
    check_shape(b, r, ids, N);
    ts_rows_batch_free(b);
    ts_ring_free(r);
}

/* Exact: repeats summed as the int64 sums of ts_fixed_from_f32 taken in reverse order, the
 * same bits whatever the input order. */
static void t_exact_merge(void **state)
{
    (void)state;
    enum { N = 600, DIM = 5 };
    const uint32_t sh[] = { 7, 3, 11 };
    struct ts_ring *r = ring(sh, 3);
    static uint64_t ids[N], ids2[N];
    static float g[N * DIM], g2[N * DIM];
    struct ts_rows_batch *a = mkbatch(DIM, N, true), *b = mkbatch(DIM, N, true);
    size_t perm[N];

    fill(1, N, DIM, 0x7fffffffffff0000ull, 40, ids, g);
    for (size_t i = 0; i < N; i++)
        perm[i] = i;
    for (size_t i = N - 1; i > 0; i--) {
        uint64_t s = i * 977;
        size_t j = rnd(&s) % (i + 1), t = perm[i];

        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < N; i++) {
        ids2[i] = ids[perm[i]];
        memcpy(g2 + i * DIM, g + perm[i] * DIM, sizeof(float) * DIM);
    }
    prep_ok(a, r, ids, N, g);
    prep_ok(b, r, ids2, N, g2);
    check_shape(a, r, ids, N);
    check_shape(b, r, ids2, N);
    assert_int_equal(ts_rows_batch_shards(a), 3);
    assert_int_equal(ts_rows_batch_unique(a), 40);
    assert_int_equal(ts_rows_batch_shards(b), ts_rows_batch_shards(a));
    for (size_t s = 0; s < ts_rows_batch_shards(a); s++) {
        struct ts_rows_part pa, pb;

        ts_rows_batch_shard(a, s, &pa);
        ts_rows_batch_shard(b, s, &pb);
        assert_int_equal(pa.encoding, TS_ENC_FIXED);
        assert_int_equal(pa.n, pb.n);
        assert_memory_equal(pa.ids, pb.ids, pa.n * sizeof(uint64_t));
        assert_memory_equal(pa.grad, pb.grad, pa.n * DIM * sizeof(int64_t));
        for (size_t k = 0; k < pa.n; k++) {
            int64_t want[DIM] = { 0 }, x[DIM];

            for (size_t i = N; i-- > 0;)
                if (ids[i] == pa.ids[k]) {
                    assert_int_equal(ts_fixed_from_f32(g + i * DIM, DIM, x, NULL), TS_OK);
                    assert_int_equal(ts_fixed_add(want, x, DIM, NULL), TS_OK);
                }
            assert_memory_equal((const int64_t *)pa.grad + k * DIM, want, sizeof(want));
        }
    }
    ts_rows_batch_free(a);
    ts_rows_batch_free(b);
    ts_ring_free(r);
}

/* Float: repeats summed in ascending input position; the scatter map round-trips. */
static void t_float_merge_scatter(void **state)
{
    (void)state;
    enum { N = 300, DIM = 3 };
    const uint32_t sh[] = { 1, 2 };
    struct ts_ring *r = ring(sh, 2);
    static uint64_t ids[N];
    static float g[N * DIM], rows[N * DIM], out[N * DIM];
    struct ts_rows_batch *b = mkbatch(DIM, N, false);
    size_t nu;

    fill(2, N, DIM, 0, 25, ids, g);
    prep_ok(b, r, ids, N, g);
    check_shape(b, r, ids, N);
    nu = ts_rows_batch_unique(b);
    for (size_t s = 0; s < ts_rows_batch_shards(b); s++) {
        struct ts_rows_part p;

        ts_rows_batch_shard(b, s, &p);
        assert_int_equal(p.encoding, TS_ENC_RAW);
        for (size_t k = 0; k < p.n; k++) {
            float want[DIM];
            bool first = true;

            for (size_t i = 0; i < N; i++)
                if (ids[i] == p.ids[k]) {
                    for (int d = 0; d < DIM; d++)
                        want[d] = first ? g[i * DIM + d] : want[d] + g[i * DIM + d];
                    first = false;
                }
            assert_memory_equal((const float *)p.grad + k * DIM, want, sizeof(want));
            /* A pulled row's values: its id, then its position among the unique rows. */
            for (int d = 0; d < DIM; d++)
                rows[(p.first + k) * DIM + d] = (float)p.ids[k] + (float)d * 1000.0f;
        }
    }
    ts_rows_batch_scatter(b, rows, out);
    for (size_t i = 0; i < N; i++)
        for (int d = 0; d < DIM; d++)
            assert_true(out[i * DIM + d] == (float)ids[i] + (float)d * 1000.0f);
    assert_true(nu <= 25);
    ts_rows_batch_free(b);
    ts_ring_free(r);
}

/* A refusal names the field and position and leaves an empty batch behind. */
static void refused(struct ts_rows_batch *b, const struct ts_ring *r, uint64_t max_id,
                    const uint64_t *ids, size_t n, const float *g, const char *want)
{
    struct ts_err e = { 0 };
    const uint64_t ok_id = 1;
    const float ok_g[4] = { 1, 2, 3, 4 };

    prep_ok(b, r, &ok_id, 1, ok_g);
    assert_int_equal(ts_rows_batch_shards(b), 1);
    assert_int_equal(ts_rows_batch_prepare(b, r, "emb", max_id, ids, n, g, &e), TS_EINVAL);
    if (!strstr(e.msg, want))
        fail_msg("message '%s' lacks '%s'", e.msg, want);
    assert_int_equal(ts_rows_batch_shards(b), 0);
    assert_int_equal(ts_rows_batch_unique(b), 0);
}

static void t_bad_input(void **state)
{
    (void)state;
    const uint32_t sh[] = { 1, 2, 3 };
    struct ts_ring *r = ring(sh, 3), *empty = ring(NULL, 0);
    struct ts_rows_batch *x = mkbatch(4, 8, true), *f = mkbatch(4, 8, false), *tmp;
    uint64_t ids[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float g[32] = { 0 };
    struct ts_err e = { 0 };

    refused(x, r, 7, ids, 8, g, "rows.ids[7]: 8 is above max_id 7");
    refused(x, r, 100, ids, 9, NULL, "rows.n: 9 rows");
    g[5 * 4 + 1] = NAN;
    refused(x, r, 100, ids, 8, g, "rows.grad[5][1]");
    refused(f, r, 100, ids, 8, g, "rows.grad[5][1]: nan is not finite");
    g[5 * 4 + 1] = -INFINITY;
    refused(f, r, 100, ids, 8, g, "rows.grad[5][1]: -inf is not finite");
    /* What ts_fixed_from_f32 refuses, exact only: float takes it. */
    g[5 * 4 + 1] = 0x1p31f;
    refused(x, r, 100, ids, 8, g, "rows.grad[5][1]: 2.14748e+09 is outside the fixed-point");
    assert_int_not_equal(ts_fixed_from_f32(&g[21], 1, (int64_t[1]){ 0 }, NULL), TS_OK);
    prep_ok(f, r, ids, 8, g);
    /* Two values that convert but whose sum leaves int64. */
    g[5 * 4 + 1] = 0x1p31f - 128;
    g[6 * 4 + 1] = 0x1p31f - 128;
    ids[6] = ids[5];
    refused(x, r, 100, ids, 8, g, "rows.grad: the sum of id 6's repeats leaves");
    prep_ok(x, r, ids, 5, g);
    assert_int_equal(ts_rows_batch_prepare(x, empty, "emb", 100, ids, 5, g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "rows: the ring has no shards"));
    assert_int_equal(ts_rows_batch_shards(x), 0);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_rows_batch_create(0, 8, true, &tmp, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "rows.dim"));
    assert_int_equal(ts_rows_batch_create(4, 0, true, &tmp, &e), TS_EINVAL);
    ts_rows_batch_free(x);
    ts_rows_batch_free(f);
    ts_ring_free(r);
    ts_ring_free(empty);
}

/* Each shard's part of each worker's batch pushed to that shard's store (an empty push where
 * a batch has none); returns the stores' fingerprint after `steps` steps. */
static void run_job(uint32_t workers, const uint64_t *ids, const float *g, const size_t *cut,
                    int steps, char hex[65])
{
    enum { DIM = 4 };
    const uint32_t sh[] = { 1, 2, 3 };
    struct ts_ring *r = ring(sh, 3);
    struct ts_table *st[3];
    struct ts_job j;
    struct ts_table_cfg c = { .name = "emb", .dim = DIM, .max_id = UINT64_MAX >> 1,
                              .init = "normal:0.1", .seed = 5, .optimizer = "adam" };
    struct ts_rows_batch *b = mkbatch(DIM, 1000, true);
    struct ts_err e = { 0 };

    assert_int_equal(ts_job_init(&j, "emb-job", workers, true, "sgd", 16, NULL), TS_OK);
    for (int s = 0; s < 3; s++)
        if (ts_table_create(&j, &c, NULL, &st[s], &e))
            fail_msg("create: %s", e.msg);
    for (int step = 0; step < steps; step++)
        for (uint32_t w = 0; w < workers; w++) {
            size_t lo = cut[w], hi = cut[w + 1], i = 0;
            struct ts_rows_part p;

            prep_ok(b, r, ids + lo, hi - lo, g + lo * DIM);
            for (int s = 0; s < 3; s++) {
                struct ts_row_push in = { .rank = w, .step = (uint64_t)step,
                                          .encoding = TS_ENC_FIXED };
                bool applied;

                if (i < ts_rows_batch_shards(b))
                    ts_rows_batch_shard(b, i, &p);
                if (i < ts_rows_batch_shards(b) && p.shard == sh[s]) {
                    in.n = p.n;
                    in.ids = p.ids;
                    in.grad = p.grad;
                    i++;
                }
                if (ts_table_push(st[s], &in, &applied, &e))
                    fail_msg("push: %s", e.msg);
            }
            assert_int_equal(i, ts_rows_batch_shards(b));
        }
    if (ts_table_sha256(st, 3, hex, &e))
        fail_msg("sha256: %s", e.msg);
    for (int s = 0; s < 3; s++)
        ts_table_free(st[s]);
    ts_rows_batch_free(b);
    ts_ring_free(r);
}

static void t_two_workers_one(void **state)
{
    (void)state;
    enum { N = 800 };
    static uint64_t ids[N];
    static float g[N * 4];
    const size_t one[] = { 0, N }, two[] = { 0, 333, N };
    char h1[65], h2[65];

    fill(3, N, 4, 1000, 300, ids, g);
    run_job(1, ids, g, one, 3, h1);
    run_job(2, ids, g, two, 3, h2);
    assert_string_equal(h1, h2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_row_hash_bytes),
        cmocka_unit_test(t_ring_moves),
        cmocka_unit_test(t_sort_wide_keys),
        cmocka_unit_test(t_exact_merge),
        cmocka_unit_test(t_float_merge_scatter),
        cmocka_unit_test(t_bad_input),
        cmocka_unit_test(t_two_workers_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
