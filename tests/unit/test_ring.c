/* test_ring.c - lib/placement/ring: keys move only to a joining shard and only from a leaving
 * one, load stays balanced, the map is identical on every host (golden values), the lookup
 * matches a from-the-spec reference, and bad member lists are refused with a useful message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "placement/ring.h"

#define NKEYS 10000

/* Key i of the realistic set: 50 tensors of 200 partitions each. */
static void key_of(int i, char *name, size_t cap, uint32_t *part)
{
    snprintf(name, cap, "layer%d.weight", i % 50);
    *part = (uint32_t)(i / 50);
}

static struct ts_ring *make(const uint32_t *ids, size_t n, unsigned vnodes)
{
    struct ts_err err = { 0 };
    struct ts_ring *r = NULL;

    if (ts_ring_create(ids, n, vnodes, &r, &err) != TS_OK)
        fail_msg("ts_ring_create: %s", err.msg);
    return r;
}

/* Largest per-shard key count over the mean, for the realistic key set. */
static double max_over_mean(const struct ts_ring *r, const uint32_t *ids, size_t n)
{
    size_t cnt[16] = { 0 }, max = 0;
    char name[32];
    uint32_t part, owner;

    assert_true(n <= 16);
    for (int i = 0; i < NKEYS; i++) {
        size_t j;

        key_of(i, name, sizeof(name), &part);
        owner = ts_ring_lookup(r, name, part);
        for (j = 0; j < n && ids[j] != owner; j++)
            ;
        assert_true(j < n); /* every key lands on a member */
        cnt[j]++;
    }
    for (size_t j = 0; j < n; j++)
        max = cnt[j] > max ? cnt[j] : max;
    return (double)max / ((double)NKEYS / (double)n);
}

/* Counts keys whose owner differs between a and b; fails if any moved key went anywhere but
 * to `to` or came from anywhere but `from` (0: any). */
static int moved_keys(const struct ts_ring *a, const struct ts_ring *b, uint32_t from,
                      uint32_t to)
{
    char name[32];
    uint32_t part, oa, ob;
    int moved = 0;

    for (int i = 0; i < NKEYS; i++) {
        key_of(i, name, sizeof(name), &part);
        oa = ts_ring_lookup(a, name, part);
        ob = ts_ring_lookup(b, name, part);
        if (oa == ob)
            continue;
        moved++;
        if (from && oa != from)
            fail_msg("%s/%u moved %u -> %u, only keys of shard %u may move", name, part, oa,
                     ob, from);
        if (to && ob != to)
            fail_msg("%s/%u moved %u -> %u, keys may move only to shard %u", name, part, oa,
                     ob, to);
    }
    return moved;
}

static void test_join_moves_keys_to_new_shard_only(void **state)
{
    static const uint32_t three[] = { 1, 2, 3 }, four[] = { 1, 2, 3, 4 };
    struct ts_ring *r3 = make(three, 3, 0), *r4 = make(four, 4, 0);
    int moved;

    (void)state;
    moved = moved_keys(r3, r4, 0, 4);
    /* Ideal is 1/4 = 2,500; measured 2,525 with the default vnodes. */
    assert_true(moved <= NKEYS * 30 / 100);
    assert_true(moved >= NKEYS * 20 / 100);
    ts_ring_free(r3);
    ts_ring_free(r4);
}

static void test_leave_moves_only_that_shards_keys(void **state)
{
    static const uint32_t four[] = { 1, 2, 3, 4 }, no4[] = { 1, 2, 3 }, no2[] = { 4, 1, 3 };
    struct ts_ring *r4 = make(four, 4, 0), *a = make(no4, 3, 0), *b = make(no2, 3, 0);
    int moved;

    (void)state;
    moved = moved_keys(r4, a, 4, 0);
    assert_true(moved >= NKEYS * 20 / 100 && moved <= NKEYS * 30 / 100);
    moved = moved_keys(r4, b, 2, 0);
    assert_true(moved >= NKEYS * 20 / 100 && moved <= NKEYS * 30 / 100);
    ts_ring_free(r4);
    ts_ring_free(a);
    ts_ring_free(b);
}

/* Chains: the owner first, distinct members, as many as asked for or as the ring has; and a
 * shard's leaving changes only the chains it was in, each by dropping it and appending one
 * shard at the tail (what re-replication copies to). */
static void test_chains(void **state)
{
    static const uint32_t five[] = { 1, 2, 3, 4, 5 }, no3[] = { 1, 2, 4, 5 };
    struct ts_ring *a = make(five, 5, 0), *b = make(no3, 4, 0);
    size_t touched = 0;

    (void)state;
    for (int i = 0; i < NKEYS; i++) {
        char name[64];
        uint32_t part, ca[8], cb[8], all[8];
        size_t na, nb;

        key_of(i, name, sizeof(name), &part);
        na = ts_ring_chain(a, name, part, 3, ca);
        nb = ts_ring_chain(b, name, part, 3, cb);
        assert_int_equal(na, 3);
        assert_int_equal(nb, 3);
        assert_int_equal(ca[0], ts_ring_lookup(a, name, part));
        assert_true(ca[0] != ca[1] && ca[0] != ca[2] && ca[1] != ca[2]);
        assert_int_equal(ts_ring_chain(a, name, part, 8, all), 5);
        assert_memory_equal(all, ca, 3 * sizeof(*ca));   /* a longer chain extends it */
        size_t k = 0, j = 0;
        for (; k < 3; k++) {
            if (ca[k] == 3)
                continue;
            assert_int_equal(cb[j], ca[k]);   /* the others keep their order */
            j++;
        }
        if (j == 3)
            continue;
        touched++;
        assert_int_equal(j, 2);
        assert_true(cb[2] != 3 && cb[2] != cb[0] && cb[2] != cb[1]);
    }
    /* Shard 3 is in about 3/5 of the chains. */
    assert_true(touched >= NKEYS * 50 / 100 && touched <= NKEYS * 70 / 100);
    ts_ring_free(a);
    ts_ring_free(b);
}

/* The points walk every chain: a key between two points has the chain of the point after
 * it, and membership answers for the members only (services/shard's table copies rely on
 * both). */
static void test_points_and_members(void **state)
{
    static const uint32_t ids[] = { 9, 2, 40, 7 };
    struct ts_ring *r = make(ids, 4, 16);
    uint32_t a[2], b[2];

    (void)state;
    assert_int_equal(ts_ring_points(r), 64);
    for (size_t i = 0; i < ts_ring_points(r); i++) {
        uint64_t p = ts_ring_point(r, i), q = i ? ts_ring_point(r, i - 1) : 0;
        assert_true(!i || p > q);
        assert_int_equal(ts_ring_chain_hash(r, p, 2, a), 2);
        if (p - q > 1) {   /* a key just after the previous point: the same chain */
            assert_int_equal(ts_ring_chain_hash(r, q + 1, 2, b), 2);
            assert_memory_equal(a, b, sizeof(a));
        }
    }
    for (size_t i = 0; i < 4; i++)
        assert_true(ts_ring_has(r, ids[i]));
    assert_false(ts_ring_has(r, 3));
    assert_false(ts_ring_has(r, 41));
    assert_false(ts_ring_has(r, 0));
    ts_ring_free(r);
}

static void test_chain_small_rings(void **state)
{
    static const uint32_t one[] = { 7 };
    struct ts_ring *e = make(NULL, 0, 0), *s1 = make(one, 1, 4);
    uint32_t out[4] = { 0 };

    (void)state;
    assert_int_equal(ts_ring_chain(e, "w", 0, 2, out), 0);
    assert_int_equal(ts_ring_chain(s1, "w", 0, 3, out), 1);
    assert_int_equal(out[0], 7);
    assert_int_equal(ts_ring_chain(s1, "w", 0, 0, out), 0);
    ts_ring_free(e);
    ts_ring_free(s1);
}

static void check_balance(size_t n, double bound)
{
    uint32_t ids[16];
    struct ts_ring *r;
    double mm;

    for (size_t i = 0; i < n; i++)
        ids[i] = (uint32_t)i + 1;
    r = make(ids, n, 0);
    mm = max_over_mean(r, ids, n);
    if (mm > bound)
        fail_msg("%zu shards: max/mean %.3f, want <= %.3f", n, mm, bound);
    ts_ring_free(r);
}

/* Measured with the default vnodes: 1.016 (3), 1.036 (4), 1.063 (8). */
static void test_balance(void **state)
{
    (void)state;
    check_balance(3, 1.15);
    check_balance(4, 1.15);
    check_balance(8, 1.10);
}

/* Fewer vnodes must still give a usable ring, only a less even one. */
static void test_few_vnodes(void **state)
{
    static const uint32_t ids[] = { 5, 6, 7 };
    struct ts_ring *r = make(ids, 3, 1);

    (void)state;
    assert_int_equal(ts_ring_vnodes(r), 1);
    assert_true(max_over_mean(r, ids, 3) <= 3.0);
    ts_ring_free(r);
}

static void test_input_order_does_not_matter(void **state)
{
    static const uint32_t a[] = { 1, 2, 3, 4, 9 }, b[] = { 9, 3, 1, 4, 2 }, c[] = { 4, 9, 2, 3, 1 };
    static const uint32_t d[] = { 1, 2, 3, 4, 10 };
    struct ts_ring *ra = make(a, 5, 0), *rb = make(b, 5, 0), *rc = make(c, 5, 0);
    struct ts_ring *rd = make(d, 5, 0), *rv = make(a, 5, 512);

    (void)state;
    assert_int_equal(ts_ring_digest(ra), ts_ring_digest(rb));
    assert_int_equal(ts_ring_digest(ra), ts_ring_digest(rc));
    assert_int_not_equal(ts_ring_digest(ra), ts_ring_digest(rd));
    assert_int_not_equal(ts_ring_digest(ra), ts_ring_digest(rv));
    ts_ring_free(ra);
    ts_ring_free(rb);
    ts_ring_free(rc);
    ts_ring_free(rd);
    ts_ring_free(rv);
}

/* Pins the hash, seed and byte encoding: these values were computed once and must come out the
 * same on every host, compiler and libxxhash build. If this fails, clients built here and
 * there disagree on key placement. */
static void test_golden_values(void **state)
{
    static const uint32_t ids[] = { 1, 2, 3 };
    static const struct {
        const char *tensor;
        uint32_t part, owner;
    } keys[] = {
        { "layer0.weight", 0, 2 },
        { "layer7.bias", 3, 3 },
        { "embedding.user", 123456, 2 },
        { "", 0, 1 },
        { "layer49.weight", 199, 3 },
    };
    struct ts_ring *r = make(ids, 3, 0);

    (void)state;
    /* XXH3-64 itself, from xxHash's own sanity tests: empty input, seed 0. */
    assert_int_equal(XXH3_64bits_withSeed("", 0, 0), UINT64_C(0x2D06800538D394C2));
    assert_int_equal(TS_RING_DEFAULT_VNODES, 1024);
    assert_int_equal(ts_ring_key_hash("layer0.weight", 0), UINT64_C(0x6ffef7b0ca565ef8));
    assert_int_equal(ts_ring_digest(r), UINT64_C(0xdff832e68a31bd9b));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(ts_ring_lookup(r, keys[i].tensor, keys[i].part), keys[i].owner);
    ts_ring_free(r);
}

/* The reference ring, built from docs/placement.md alone: sorted (hash, owner) pairs. */
struct ref_point {
    uint64_t hash;
    uint32_t owner;
};

static int ref_cmp(const void *a, const void *b)
{
    const struct ref_point *x = a, *y = b;

    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->owner < y->owner ? -1 : x->owner > y->owner;
}

static uint32_t ref_lookup(const struct ref_point *p, size_t np, uint64_t h)
{
    for (size_t i = 0; i < np; i++) {
        if (p[i].hash >= h)
            return p[i].owner;
    }
    return p[0].owner;
}

static uint64_t ref_key_hash(const char *tensor, uint32_t part)
{
    uint64_t nh = XXH3_64bits_withSeed(tensor, strlen(tensor), TS_RING_SEED);
    unsigned char b[12] = {
        (unsigned char)nh, (unsigned char)(nh >> 8), (unsigned char)(nh >> 16),
        (unsigned char)(nh >> 24), (unsigned char)(nh >> 32), (unsigned char)(nh >> 40),
        (unsigned char)(nh >> 48), (unsigned char)(nh >> 56), (unsigned char)part,
        (unsigned char)(part >> 8), (unsigned char)(part >> 16), (unsigned char)(part >> 24),
    };

    return XXH3_64bits_withSeed(b, sizeof(b), TS_RING_SEED);
}

/* The binary search matches a linear scan, at random keys and at every point's boundary. */
static void test_lookup_matches_reference(void **state)
{
    static const uint32_t ids[] = { 3, 17, 4000000000u, 8 };
    enum { N = 4, V = 64 };
    struct ref_point p[N * V];
    struct ts_ring *r = make(ids, N, V);
    char name[32];
    uint32_t part;

    (void)state;
    for (size_t i = 0; i < N; i++) {
        for (uint32_t v = 0; v < V; v++) {
            unsigned char b[8] = {
                (unsigned char)ids[i], (unsigned char)(ids[i] >> 8),
                (unsigned char)(ids[i] >> 16), (unsigned char)(ids[i] >> 24),
                (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                (unsigned char)(v >> 24),
            };

            p[i * V + v].hash = XXH3_64bits_withSeed(b, sizeof(b), TS_RING_SEED);
            p[i * V + v].owner = ids[i];
        }
    }
    qsort(p, N * V, sizeof(p[0]), ref_cmp);
    for (int i = 0; i < 2000; i++) {
        key_of(i, name, sizeof(name), &part);
        assert_int_equal(ts_ring_key_hash(name, part), ref_key_hash(name, part));
        assert_int_equal(ts_ring_lookup(r, name, part),
                         ref_lookup(p, N * V, ref_key_hash(name, part)));
    }
    for (size_t i = 0; i < N * V; i++) {
        uint64_t h = p[i].hash;

        assert_int_equal(ts_ring_lookup_hash(r, h), ref_lookup(p, N * V, h));
        assert_int_equal(ts_ring_lookup_hash(r, h - 1), ref_lookup(p, N * V, h - 1));
        assert_int_equal(ts_ring_lookup_hash(r, h + 1), ref_lookup(p, N * V, h + 1));
    }
    /* Past the last point the search wraps to the first. */
    assert_int_equal(ts_ring_lookup_hash(r, UINT64_MAX), p[0].owner);
    assert_int_equal(ts_ring_lookup_hash(r, 0), p[0].owner);
    ts_ring_free(r);
}

/* ref_key_hash with a salt, from docs/placement.md alone: le32(salt) after the 12 bytes. */
static uint64_t ref_key_hash_salted(const char *tensor, uint32_t salt, uint32_t part)
{
    uint64_t nh = XXH3_64bits_withSeed(tensor, strlen(tensor), TS_RING_SEED);
    unsigned char b[16];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(nh >> (8 * i));
    for (int i = 0; i < 4; i++) {
        b[8 + i] = (unsigned char)(part >> (8 * i));
        b[12 + i] = (unsigned char)(salt >> (8 * i));
    }
    return XXH3_64bits_withSeed(b, salt ? 16 : 12, TS_RING_SEED);
}

/* Salt 0 is the unsalted key, bit for bit (every key placed before salts stays put); any other
 * salt moves the key, as the documented encoding says. */
static void test_salted_keys(void **state)
{
    char name[32];
    uint32_t part;

    (void)state;
    for (int i = 0; i < 2000; i++) {
        key_of(i, name, sizeof(name), &part);
        assert_int_equal(ts_ring_key_hash_salted(name, 0, part), ts_ring_key_hash(name, part));
        for (uint32_t salt = 1; salt < 4; salt++) {
            uint64_t h = ts_ring_key_hash_salted(name, salt, part);
            assert_int_equal(h, ref_key_hash_salted(name, salt, part));
            assert_int_not_equal(h, ts_ring_key_hash(name, part));
        }
        assert_int_not_equal(ts_ring_key_hash_salted(name, 1, part),
                             ts_ring_key_hash_salted(name, 2, part));
    }
    assert_int_equal(ts_ring_key_hash_salted("layer0.weight", 0, 0),
                     UINT64_C(0x6ffef7b0ca565ef8));
    assert_int_equal(ts_ring_key_hash_salted("layer0.weight", 1, 0),
                     UINT64_C(0x46a689349a780d39));
}

/* Partitions of tensor name, placed with salt, per shard of ids 1..4 into cnt[0..4). */
static void split4(const struct ts_ring *r, const char *name, uint32_t salt, uint32_t nparts,
                   unsigned cnt[4])
{
    memset(cnt, 0, 4 * sizeof(*cnt));
    for (uint32_t p = 0; p < nparts; p++) {
        uint32_t id = ts_ring_lookup_hash(r, ts_ring_key_hash_salted(name, salt, p));
        assert_true(id >= 1 && id <= 4);
        cnt[id - 1]++;
    }
}

static unsigned max4(const unsigned c[4])
{
    unsigned m = 0;

    for (int i = 0; i < 4; i++)
        m = c[i] > m ? c[i] : m;
    return m;
}

/* The chooser on shards 1..4, tensor "x" in 1 MiB partitions (the brief's case: salt 0 splits
 * 4 partitions 1/0/2/1, 16 3/3/5/5, 64 17/19/14/14, so the busiest shard paces the step). */
static void test_choose_salt_balances(void **state)
{
    static const uint32_t ids[] = { 1, 2, 3, 4 }, shuffled[] = { 3, 1, 4, 2 };
    static const struct {
        uint32_t nparts;
        unsigned salt0[4], max;      /* salt 0's split; the busiest shard the chooser gets */
    } cases[] = {
        { 4, { 1, 0, 2, 1 }, 1 },
        { 16, { 3, 3, 5, 5 }, 4 },
        { 64, { 17, 19, 14, 14 }, 17 },   /* measured: no salt below 256 gets 16 */
    };
    const uint64_t mib = 1 << 20;
    struct ts_ring *r = make(ids, 4, 0), *r2 = make(shuffled, 4, 0);

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ts_ring_salt a, b;
        unsigned cnt[4];
        uint32_t n = cases[i].nparts;
        uint32_t salt = ts_ring_choose_salt(r, "x", n, mib, mib, TS_RING_SALT_TRIES, &a);

        split4(r, "x", 0, n, cnt);
        assert_memory_equal(cnt, cases[i].salt0, sizeof(cnt));
        assert_int_equal(a.salt0_share, max4(cases[i].salt0) * mib);
        split4(r, "x", salt, n, cnt);
        assert_int_equal(max4(cnt), cases[i].max);
        assert_int_equal(a.max_share, cases[i].max * mib);
        assert_true(a.max_share < a.salt0_share);
        assert_int_equal(a.floor, (n + 3) / 4 * mib);
        assert_true(a.salt > 0 && a.salt < TS_RING_SALT_TRIES);
        /* A perfect split ends the search; otherwise every salt was tried. */
        assert_int_equal(a.tried, a.max_share == a.floor ? a.salt + 1 : TS_RING_SALT_TRIES);
        /* Deterministic: again, and on the same members given in another order. */
        assert_int_equal(ts_ring_choose_salt(r2, "x", n, mib, mib, TS_RING_SALT_TRIES, &b),
                         salt);
        assert_true(a.max_share == b.max_share && a.salt0_share == b.salt0_share &&
                    a.floor == b.floor && a.tried == b.tried);
        /* Ties go to the smallest salt: no smaller salt does as well. */
        for (uint32_t s = 0; s < salt; s++) {
            split4(r, "x", s, n, cnt);
            assert_true(max4(cnt) > cases[i].max);
        }
    }
    ts_ring_free(r);
    ts_ring_free(r2);
}

/* Bytes, not counts: 5 partitions on 4 shards, the last of 4 bytes. Some shard heads two;
 * only the salts that pair the short one with a full one reach the floor, 1 MiB + 4. */
static void test_choose_salt_counts_bytes(void **state)
{
    static const uint32_t ids[] = { 1, 2, 3, 4 };
    const uint64_t mib = 1 << 20;
    struct ts_ring *r = make(ids, 4, 0);
    struct ts_ring_salt a;
    uint64_t share[4] = { 0 };
    uint32_t salt = ts_ring_choose_salt(r, "x", 5, mib, 4, TS_RING_SALT_TRIES, &a);

    (void)state;
    for (uint32_t p = 0; p < 5; p++)
        share[ts_ring_lookup_hash(r, ts_ring_key_hash_salted("x", salt, p)) - 1] +=
            p == 4 ? 4 : mib;
    assert_int_equal(a.floor, mib + 4);
    assert_int_equal(a.max_share, mib + 4);
    for (int i = 0; i < 4; i++)
        assert_true(share[i] <= mib + 4);
    ts_ring_free(r);
}

/* What is left alone: one partition (any salt is as good: 0), an empty ring, and tensors so
 * large that only salt 0 fits the lookup budget. tries 1 is salt 0. */
static void test_choose_salt_edges(void **state)
{
    static const uint32_t ids[] = { 1, 2, 3 };
    struct ts_ring *r = make(ids, 3, 0), *e = make(NULL, 0, 0);
    struct ts_ring_salt a;

    (void)state;
    assert_int_equal(ts_ring_choose_salt(r, "x", 1, 100, 100, TS_RING_SALT_TRIES, &a), 0);
    assert_int_equal(a.tried, 1);
    assert_int_equal(a.max_share, 100);
    assert_int_equal(ts_ring_choose_salt(e, "x", 8, 100, 100, TS_RING_SALT_TRIES, &a), 0);
    assert_int_equal(ts_ring_choose_salt(r, "x", 0, 100, 100, TS_RING_SALT_TRIES, NULL), 0);
    assert_int_equal(ts_ring_choose_salt(r, "x", 16, 100, 100, 1, &a), 0);
    assert_int_equal(a.tried, 1);
    assert_int_equal(ts_ring_choose_salt(r, "x", TS_RING_SALT_LOOKUPS + 1, 4, 4,
                                         TS_RING_SALT_TRIES, &a), 0);
    assert_int_equal(a.tried, 1);
    ts_ring_choose_salt(r, "x", TS_RING_SALT_LOOKUPS / 16, 4, 4, TS_RING_SALT_TRIES, &a);
    assert_true(a.tried <= 16);
    ts_ring_free(r);
    ts_ring_free(e);
}

/* More than 64 shards: the shares live on the heap (freed on every path; ASan checks). */
static void test_choose_salt_many_shards(void **state)
{
    uint32_t ids[70];
    struct ts_ring *r;
    struct ts_ring_salt a;

    (void)state;
    for (uint32_t i = 0; i < 70; i++)
        ids[i] = 100 + 3 * i;
    r = make(ids, 70, 64);
    assert_int_equal(ts_ring_choose_salt(r, "x", 0, 4, 4, TS_RING_SALT_TRIES, &a), 0);
    ts_ring_choose_salt(r, "x", 140, 4, 4, TS_RING_SALT_TRIES, &a);
    assert_int_equal(a.floor, 2 * 4);
    assert_true(a.max_share <= a.salt0_share && a.max_share >= a.floor);
    ts_ring_free(r);
}

static void test_empty_and_single(void **state)
{
    static const uint32_t one[] = { 42 };
    struct ts_ring *e = make(NULL, 0, 0), *s = make(one, 1, 0);
    char name[32];
    uint32_t part;

    (void)state;
    assert_int_equal(ts_ring_members(e), 0);
    assert_int_equal(ts_ring_lookup(e, "layer0.weight", 0), 0);
    assert_int_equal(ts_ring_lookup_hash(e, 0), 0);
    assert_int_equal(ts_ring_lookup_hash(e, UINT64_MAX), 0);
    assert_int_equal(ts_ring_members(s), 1);
    assert_int_equal(ts_ring_vnodes(s), TS_RING_DEFAULT_VNODES);
    for (int i = 0; i < 1000; i++) {
        key_of(i, name, sizeof(name), &part);
        assert_int_equal(ts_ring_lookup(s, name, part), 42);
    }
    assert_int_equal(ts_ring_lookup_hash(s, UINT64_MAX), 42);
    assert_int_not_equal(ts_ring_digest(e), ts_ring_digest(s));
    ts_ring_free(e);
    ts_ring_free(s);
    ts_ring_free(NULL);
}

/* Expects create to fail with TS_EINVAL, leave *out alone and name `want` in the message. */
static void expect_einval(const uint32_t *ids, size_t n, unsigned vnodes, const char *want)
{
    struct ts_err err = { 0 };
    struct ts_ring *sentinel = (struct ts_ring *)&err, *r = sentinel;

    assert_int_equal(ts_ring_create(ids, n, vnodes, &r, &err), TS_EINVAL);
    assert_int_equal(err.code, TS_EINVAL);
    assert_ptr_equal(r, sentinel);
    if (!strstr(err.msg, want))
        fail_msg("message \"%s\" does not mention \"%s\"", err.msg, want);
    /* A NULL err is allowed and changes nothing but the message. */
    assert_int_equal(ts_ring_create(ids, n, vnodes, &r, NULL), TS_EINVAL);
    assert_ptr_equal(r, sentinel);
}

static void test_bad_members(void **state)
{
    static const uint32_t dup[] = { 1, 2, 3, 2 }, zero[] = { 1, 0, 3 }, ok[] = { 1, 2 };
    struct ts_ring *r;

    (void)state;
    expect_einval(dup, 4, 0, "shard_ids[3] repeats shard id 2 of shard_ids[1]");
    expect_einval(zero, 3, 0, "shard_ids[1] is 0");
    expect_einval(NULL, 2, 0, "shard_ids");
    expect_einval(ok, 2, TS_RING_MAX_VNODES + 1, "vnodes 4097");
    expect_einval(ok, 2, UINT32_MAX, "vnodes");
    r = make(ok, 2, TS_RING_MAX_VNODES);
    assert_int_equal(ts_ring_vnodes(r), TS_RING_MAX_VNODES);
    ts_ring_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_moves_keys_to_new_shard_only),
        cmocka_unit_test(test_leave_moves_only_that_shards_keys),
        cmocka_unit_test(test_chains),
        cmocka_unit_test(test_chain_small_rings),
        cmocka_unit_test(test_points_and_members),
        cmocka_unit_test(test_balance),
        cmocka_unit_test(test_few_vnodes),
        cmocka_unit_test(test_input_order_does_not_matter),
        cmocka_unit_test(test_golden_values),
        cmocka_unit_test(test_lookup_matches_reference),
        cmocka_unit_test(test_salted_keys),
        cmocka_unit_test(test_choose_salt_balances),
        cmocka_unit_test(test_choose_salt_counts_bytes),
        cmocka_unit_test(test_choose_salt_edges),
        cmocka_unit_test(test_choose_salt_many_shards),
        cmocka_unit_test(test_empty_and_single),
        cmocka_unit_test(test_bad_members),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
