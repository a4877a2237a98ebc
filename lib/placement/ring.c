/* ring.c - consistent-hash ring of shards; see ring.h and docs/placement.md.
 *
 * A ring is a sorted array of n * vnodes points. Hashes and owners live in two parallel arrays
 * so a lookup's binary search touches only the 8-byte hashes. Two points cannot collide today
 * (XXH3-64 of an 8-byte input is a bijection of it), but should a future hash allow it, equal
 * points are ordered by owner id, so the map never depends on the order shard_ids came in. */
#include "placement/ring.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#if defined(__GNUC__)
#define prefetch(p) __builtin_prefetch(p)
#else
#define prefetch(p) ((void)(p))
#endif

struct ts_ring {
    size_t n;           /* members */
    unsigned vnodes;    /* points per member */
    size_t npoints;     /* n * vnodes */
    uint32_t *members;  /* ascending */
    uint64_t *hash;     /* ascending; hash[i] is owned by owner[i] */
    uint32_t *owner;
    uint64_t digest;
};

struct point {
    uint64_t hash;
    uint32_t owner;
};

/* Explicit little-endian stores, so the hashed bytes are the same on every host. */
static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Point v of shard id: XXH3(le32(id) || le32(v)). Depends on the id alone. */
static uint64_t point_hash(uint32_t id, uint32_t v)
{
    unsigned char b[8];

    put_le32(b, id);
    put_le32(b + 4, v);
    return XXH3_64bits_withSeed(b, sizeof(b), TS_RING_SEED);
}

static uint64_t name_hash(const char *tensor)
{
    return XXH3_64bits_withSeed(tensor, strlen(tensor), TS_RING_SEED);
}

/* The key hash from the name's hash: le64(nh) || le32(partition), then le32(salt) only when
 * salt != 0, so salt 0 hashes exactly the 12 bytes it always did (every key placed before
 * salts existed stays where it was). The two lengths keep the encoding unambiguous. */
static uint64_t key_hash_of(uint64_t nh, uint32_t salt, uint32_t partition)
{
    unsigned char b[16];

    put_le64(b, nh);
    put_le32(b + 8, partition);
    if (!salt)
        return XXH3_64bits_withSeed(b, 12, TS_RING_SEED);
    put_le32(b + 12, salt);
    return XXH3_64bits_withSeed(b, 16, TS_RING_SEED);
}

uint64_t ts_ring_name_hash(const char *table)
{
    return name_hash(table);
}

uint64_t ts_ring_row_hash(uint64_t nh, uint64_t id)
{
    unsigned char b[17];

    put_le64(b, nh);
    put_le64(b + 8, id);
    b[16] = 'r';
    return XXH3_64bits_withSeed(b, sizeof(b), TS_RING_SEED);
}

uint64_t ts_ring_key_hash(const char *tensor, uint32_t partition)
{
    /* Hashing the name first keeps the input fixed-size (no allocation, no length limit) and
     * unambiguous: no (name, partition) pair can spell another's bytes. */
    return key_hash_of(name_hash(tensor), 0, partition);
}

uint64_t ts_ring_key_hash_salted(const char *tensor, uint32_t salt, uint32_t partition)
{
    return key_hash_of(name_hash(tensor), salt, partition);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

static int cmp_point(const void *a, const void *b)
{
    const struct point *x = a, *y = b;

    if (x->hash != y->hash)
        return (x->hash > y->hash) - (x->hash < y->hash);
    return (x->owner > y->owner) - (x->owner < y->owner);
}

/* Checks ids other than for duplicates, which need the sorted copy. */
static ts_status check_args(const uint32_t *ids, size_t n, unsigned vnodes, struct ts_err *err)
{
    if (vnodes > TS_RING_MAX_VNODES)
        return ts_err_set(err, TS_EINVAL, "ring: vnodes %u is above the maximum %d; "
                          "pass 0 for the default (%d)", vnodes, TS_RING_MAX_VNODES,
                          TS_RING_DEFAULT_VNODES);
    if (n > 0 && !ids)
        return ts_err_set(err, TS_EINVAL, "ring: shard_ids is NULL but n is %zu", n);
    if (n > SIZE_MAX / sizeof(struct point) / TS_RING_MAX_VNODES)
        return ts_err_set(err, TS_EINVAL, "ring: shard_ids: %zu members is too many", n);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0)
            return ts_err_set(err, TS_EINVAL, "ring: shard_ids[%zu] is 0, which means "
                              "\"no shard\"; shard ids start at 1", i);
    }
    return TS_OK;
}

/* Fails on the smallest id that appears twice in ids; sorted is ids in ascending order. */
static ts_status check_unique(const uint32_t *ids, const uint32_t *sorted, size_t n,
                              struct ts_err *err)
{
    size_t i, first;

    for (i = 1; i < n && sorted[i] != sorted[i - 1]; i++)
        ;
    if (i >= n)
        return TS_OK;
    /* Name the later occurrence in the caller's own indexing. */
    for (first = 0; ids[first] != sorted[i]; first++)
        ;
    for (i = first + 1; ids[i] != ids[first]; i++)
        ;
    return ts_err_set(err, TS_EINVAL, "ring: shard_ids[%zu] repeats shard id %u of "
                      "shard_ids[%zu]; each shard may appear once", i, ids[i], first);
}

/* Fingerprint over le32(n) le32(vnodes) le32(member)... then (le64(hash) le32(owner))... */
static ts_status compute_digest(struct ts_ring *r, struct ts_err *err)
{
    XXH3_state_t *st = XXH3_createState();
    unsigned char b[12];

    if (!st)
        return ts_err_set(err, TS_ENOMEM, "ring: out of memory for the digest state");
    XXH3_64bits_reset_withSeed(st, TS_RING_SEED);
    put_le32(b, (uint32_t)r->n); /* ids are unique uint32s, so n fits */
    put_le32(b + 4, r->vnodes);
    XXH3_64bits_update(st, b, 8);
    for (size_t i = 0; i < r->n; i++) {
        put_le32(b, r->members[i]);
        XXH3_64bits_update(st, b, 4);
    }
    for (size_t i = 0; i < r->npoints; i++) {
        put_le64(b, r->hash[i]);
        put_le32(b + 8, r->owner[i]);
        XXH3_64bits_update(st, b, 12);
    }
    r->digest = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return TS_OK;
}

/* Fills r->hash and r->owner from r->members, sorted. */
static ts_status build_points(struct ts_ring *r, struct ts_err *err)
{
    struct point *p;
    size_t k = 0;

    if (r->npoints == 0)
        return TS_OK; /* and malloc(0) may return NULL */
    p = malloc(r->npoints * sizeof(*p));
    if (!p)
        return ts_err_set(err, TS_ENOMEM, "ring: out of memory for %zu points", r->npoints);
    for (size_t i = 0; i < r->n; i++) {
        for (unsigned v = 0; v < r->vnodes; v++) {
            p[k].hash = point_hash(r->members[i], v);
            p[k++].owner = r->members[i];
        }
    }
    qsort(p, r->npoints, sizeof(*p), cmp_point);
    for (k = 0; k < r->npoints; k++) {
        r->hash[k] = p[k].hash;
        r->owner[k] = p[k].owner;
    }
    free(p);
    return TS_OK;
}

ts_status ts_ring_create(const uint32_t *shard_ids, size_t n, unsigned vnodes,
                         struct ts_ring **out, struct ts_err *err)
{
    struct ts_ring *r;
    ts_status st;

    if (vnodes == 0)
        vnodes = TS_RING_DEFAULT_VNODES;
    st = check_args(shard_ids, n, vnodes, err);
    if (st != TS_OK)
        return st;
    r = calloc(1, sizeof(*r));
    if (!r)
        return ts_err_set(err, TS_ENOMEM, "ring: out of memory");
    r->n = n;
    r->vnodes = vnodes;
    r->npoints = n * vnodes;
    /* +1: malloc(0) may return NULL, which must not read as failure for an empty ring. */
    r->members = malloc((n + 1) * sizeof(*r->members));
    r->hash = malloc((r->npoints + 1) * sizeof(*r->hash));
    r->owner = malloc((r->npoints + 1) * sizeof(*r->owner));
    if (!r->members || !r->hash || !r->owner) {
        st = ts_err_set(err, TS_ENOMEM, "ring: out of memory for %zu points", r->npoints);
        goto out_free_ring;
    }
    if (n > 0)
        memcpy(r->members, shard_ids, n * sizeof(*r->members));
    qsort(r->members, n, sizeof(*r->members), cmp_u32);
    st = check_unique(shard_ids, r->members, n, err);
    if (st != TS_OK)
        goto out_free_ring;
    st = build_points(r, err);
    if (st != TS_OK)
        goto out_free_ring;
    st = compute_digest(r, err);
    if (st != TS_OK)
        goto out_free_ring;
    *out = r;
    return TS_OK;

out_free_ring:
    ts_ring_free(r);
    return st;
}

void ts_ring_free(struct ts_ring *r)
{
    if (!r)
        return;
    free(r->members);
    free(r->hash);
    free(r->owner);
    free(r);
}

/* The index of the first point at or after key_hash, wrapping past the top; r not empty. */
static size_t point_at(const struct ts_ring *r, uint64_t key_hash)
{
    const uint64_t *base = r->hash;
    size_t len = r->npoints, i;

    /* Branch-free lower bound; the answer stays within [base, base + len]. Keys are random, so
     * a branch here is mispredicted half the time, and without one the CPU cannot run ahead
     * into the next load, hence the prefetch of both candidates. Per lookup against the
     * branchy search, default vnodes, -O2: 4 shards 57 -> 14 ns, 64 shards 100 -> 37 ns,
     * 1024 shards about 260 ns either way (memory-bound; without the prefetch 400 ns). */
    while (len > 1) {
        size_t half = len / 2;

        prefetch(base + half / 2);
        prefetch(base + half + half / 2);
        base = base[half] < key_hash ? base + half : base;
        len -= half;
    }
    i = (size_t)(base - r->hash) + (*base < key_hash);
    /* Past the last point the ring wraps to the first. */
    return i == r->npoints ? 0 : i;
}

uint32_t ts_ring_lookup_hash(const struct ts_ring *r, uint64_t key_hash)
{
    return r->npoints ? r->owner[point_at(r, key_hash)] : 0;
}

size_t ts_ring_chain_hash(const struct ts_ring *r, uint64_t key_hash, size_t want,
                          uint32_t *out)
{
    size_t n = 0;

    if (want > r->n)
        want = r->n;
    if (!want)
        return 0;
    /* Walk the points clockwise and keep each owner the first time it shows up. With vnodes
     * points per shard spread at random, R distinct owners come within a few points. */
    for (size_t i = point_at(r, key_hash), seen = 0; n < want && seen < r->npoints;
         i = i + 1 == r->npoints ? 0 : i + 1, seen++) {
        uint32_t id = r->owner[i];
        size_t k = 0;

        while (k < n && out[k] != id)
            k++;
        if (k == n)
            out[n++] = id;
    }
    return n;
}

size_t ts_ring_chain(const struct ts_ring *r, const char *tensor, uint32_t partition,
                     size_t want, uint32_t *out)
{
    return ts_ring_chain_hash(r, ts_ring_key_hash(tensor, partition), want, out);
}

uint32_t ts_ring_lookup(const struct ts_ring *r, const char *tensor, uint32_t partition)
{
    return ts_ring_lookup_hash(r, ts_ring_key_hash(tensor, partition));
}

/* The index of member id in r->members (ascending); id is a member. */
static size_t member_index(const struct ts_ring *r, uint32_t id)
{
    size_t lo = 0, hi = r->n;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->members[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The least largest share any placement of the partitions on n shards can give: nparts - 1
 * full ones (bytes each) and a last one of last <= bytes. The full ones put q or q + 1 on a
 * shard; with r > 0 some shard has q + 1 and the short one fits beside a q, otherwise it goes
 * on top of a q. */
static uint64_t share_floor(uint32_t nparts, uint64_t bytes, uint64_t last, size_t n)
{
    uint64_t full = nparts - 1, q = full / n, r = full % n;

    return r ? (q + 1) * bytes : q * bytes + last;
}

uint32_t ts_ring_choose_salt(const struct ts_ring *r, const char *tensor, uint32_t nparts,
                             uint64_t part_bytes, uint64_t last_bytes, uint32_t tries,
                             struct ts_ring_salt *out)
{
    uint64_t stack[64], *share = r->n <= 64 ? stack : malloc(r->n * sizeof(*share));
    uint64_t nh = name_hash(tensor), best = UINT64_MAX, floor;
    struct ts_ring_salt res = { 0 };
    uint32_t salt;

    if (!r->n || !nparts || !share) {   /* out of memory: salt 0 places as it always did */
        if (share != stack)
            free(share);
        if (out)
            *out = res;
        return 0;
    }
    floor = share_floor(nparts, part_bytes, last_bytes, r->n);
    tries = tries ? tries : 1;
    if (tries > TS_RING_SALT_LOOKUPS / nparts)
        tries = TS_RING_SALT_LOOKUPS / nparts ? TS_RING_SALT_LOOKUPS / nparts : 1;
    for (salt = 0; salt < tries && best > floor; salt++) {
        uint64_t max = 0;

        memset(share, 0, r->n * sizeof(*share));
        for (uint32_t p = 0; p < nparts; p++) {
            size_t i = member_index(r, r->owner[point_at(r, key_hash_of(nh, salt, p))]);
            share[i] += p + 1 == nparts ? last_bytes : part_bytes;
            max = share[i] > max ? share[i] : max;
            if (max >= best)   /* cannot win: ties go to the smaller salt */
                break;
        }
        if (salt == 0)
            res.salt0_share = max;
        if (max < best) {
            best = max;
            res.salt = salt;
        }
    }
    res.max_share = best;
    res.floor = floor;
    res.tried = salt;
    if (share != stack)
        free(share);
    if (out)
        *out = res;
    return res.salt;
}

size_t ts_ring_members(const struct ts_ring *r)
{
    return r->n;
}

bool ts_ring_has(const struct ts_ring *r, uint32_t id)
{
    size_t lo = 0, hi = r->n;

    while (lo < hi) {   /* members ascend */
        size_t mid = lo + (hi - lo) / 2;
        if (r->members[mid] == id)
            return true;
        if (r->members[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

size_t ts_ring_points(const struct ts_ring *r)
{
    return r->npoints;
}

uint64_t ts_ring_point(const struct ts_ring *r, size_t i)
{
    return r->hash[i];
}

unsigned ts_ring_vnodes(const struct ts_ring *r)
{
    return r->vnodes;
}

uint64_t ts_ring_digest(const struct ts_ring *r)
{
    return r->digest;
}
