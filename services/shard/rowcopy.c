/* rowcopy.c - see rowcopy.h. */
#include "rowcopy.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "placement/ring.h"
#include "util/log.h"

#define COPIES 2   /* a row's copies, with any replicas above 1 */

static bool has(const uint32_t *ids, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Adds id to ids[0..*n) once. */
static void add_once(uint32_t *ids, size_t *n, uint32_t id)
{
    if (!has(ids, *n, id))
        ids[(*n)++] = id;
}

static void free_copies(struct shard_table *t)
{
    for (size_t k = 1; k < t->nstores; k++)
        ts_table_free(t->stores[k].t);
    free(t->stores);
    t->stores = NULL;
    t->nstores = 0;
}

/* A copy of origin's rows: an empty store of t's spec, at step. */
static ts_status make_copy(struct shard_table *t, const struct ts_job *job,
                           struct ts_table_budget *budget, uint32_t origin, uint64_t step,
                           struct table_store *out, struct ts_err *err)
{
    /* A copy sweeps as its head: by the steps, or by the head's plans (dp_rows.c). */
    struct ts_table_cfg cfg = { .name = t->name, .dim = t->dim, .max_id = t->max_id,
                                .init = t->init, .seed = t->seed, .optimizer = t->optimizer,
                                .ttl_steps = t->ttl_steps, .ttl_seconds = t->ttl_seconds };
    ts_status st;

    out->origin = origin;
    atomic_init(&out->owned, false);
    atomic_init(&out->full, false);
    atomic_init(&out->broken, false);
    atomic_init(&out->taken, 0);
    if ((st = ts_table_create(job, &cfg, budget, &out->t, err)))
        return st;
    if (step && (st = ts_table_set_step(out->t, step, err))) {
        ts_table_free(out->t);
        out->t = NULL;
    }
    return st;
}

ts_status rowcopy_place(struct shard_table *t, const struct ts_job *job,
                        struct ts_table_budget *budget, struct ts_cluster *cl, uint32_t me,
                        struct ts_err *err)
{
    struct ts_ring *ring = NULL;
    uint32_t chain[COPIES], *followers = NULL, *origins = NULL;
    size_t nf = 0, no = 0, points;
    uint64_t epoch;
    ts_status st;

    if ((st = ts_cluster_ring_copy(cl, &ring, &epoch, err)))
        return st;
    points = ts_ring_points(ring);
    if (!(followers = calloc(points + 1, sizeof(*followers))) ||
        !(origins = calloc(points + 1, sizeof(*origins)))) {
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
        goto out;
    }
    t->replicated = ts_cluster_replicas(cl) >= COPIES && ts_ring_members(ring) >= COPIES;
    for (size_t i = 0; t->replicated && i < points; i++) {
        if (ts_ring_chain_hash(ring, ts_ring_point(ring, i), COPIES, chain) < COPIES)
            continue;
        if (chain[0] == me)
            add_once(followers, &nf, chain[1]);
        else if (chain[1] == me)
            add_once(origins, &no, chain[0]);
    }
    free_copies(t);
    if (!(t->stores = calloc(no + 1, sizeof(*t->stores)))) {
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
        goto out;
    }
    t->stores[0].origin = me;
    t->stores[0].t = t->t;
    atomic_init(&t->stores[0].owned, true);
    atomic_init(&t->stores[0].full, false);
    atomic_init(&t->stores[0].broken, false);
    atomic_init(&t->stores[0].taken, 0);
    t->nstores = 1;
    for (size_t k = 0; !st && k < no; k++)
        if (!(st = make_copy(t, job, budget, origins[k], ts_table_step(t->t),
                             &t->stores[t->nstores], err)))
            t->nstores++;
    if (st)
        goto out;
    ts_ring_free(t->placed);
    t->placed = ring;
    t->placed_epoch = epoch;
    ring = NULL;
    free(t->followers);
    t->followers = followers;
    t->nfollowers = nf;
    followers = NULL;
    t->nh = ts_ring_name_hash(t->name);
    t->me = me;
    t->nmembers = ts_cluster_shard_ids(cl, t->members, TS_CLUSTER_MAX_SHARDS);
    if (t->replicated)
        ts_log(TS_INFO, "shard", "table '%s': this shard's rows are copied to %zu shard(s); it "
               "holds copies of the rows of %zu", t->name, nf, no);
out:
    ts_ring_free(ring);
    free(followers);
    free(origins);
    return st;
}

uint32_t rowcopy_origin(const struct shard_table *t, uint64_t id)
{
    return ts_ring_lookup_hash(t->placed, ts_ring_row_hash(t->nh, id));
}

struct table_store *rowcopy_store(struct shard_table *t, uint32_t origin)
{
    for (size_t k = 0; k < t->nstores; k++)
        if (t->stores[k].origin == origin)
            return &t->stores[k];
    return NULL;
}

uint32_t rowcopy_follower(const struct shard_table *t, uint64_t id)
{
    uint32_t chain[COPIES];

    if (!t->replicated ||
        ts_ring_chain_hash(t->placed, ts_ring_row_hash(t->nh, id), COPIES, chain) < COPIES)
        return 0;
    return chain[1];
}

bool rowcopy_keeps(const struct shard_table *t, const struct table_store *s, uint64_t id)
{
    uint32_t chain[COPIES];
    size_t n = ts_ring_chain_hash(t->placed, ts_ring_row_hash(t->nh, id), COPIES, chain);

    if (!n || chain[0] != s->origin)
        return false;
    return s->origin == t->me || (t->replicated && n == COPIES && chain[1] == t->me);
}

/* The rows (served ones, or all) of t's stores. Callers hold the registry lock (status,
 * /metrics): while a rollback places t anew (its lock held exclusive for the whole load),
 * they count this shard's own store alone rather than hold the registry up. */
static uint64_t count(struct shard_table *t, bool served, bool bytes)
{
    uint64_t n = 0;
    bool all = pthread_rwlock_tryrdlock(&t->lock) == 0;

    for (size_t k = 0; k < (all ? t->nstores : 1); k++) {
        struct ts_table *s = all ? t->stores[k].t : t->t;
        struct ts_table_tiers tt = { 0 };

        if (served && all && !atomic_load(&t->stores[k].owned))
            continue;
        if (bytes)
            ts_table_tiers(s, &tt);
        n += !bytes ? ts_table_count(s) : tt.tiered ? tt.mem_bytes
             : ts_table_count(s) * ts_table_row_bytes(s);
    }
    if (all)
        pthread_rwlock_unlock(&t->lock);
    return n;
}

void rowcopy_tiers(struct shard_table *t, struct ts_table_tiers *out)
{
    bool all = pthread_rwlock_tryrdlock(&t->lock) == 0;

    memset(out, 0, sizeof(*out));
    for (size_t k = 0; k < (all ? t->nstores : 1); k++) {
        struct ts_table_tiers s;

        ts_table_tiers(all ? t->stores[k].t : t->t, &s);
        out->tiered |= s.tiered;
        out->rows += s.rows;
        out->resident += s.resident;
        out->mem_bytes += s.mem_bytes;
        out->quota_rows += s.quota_rows;
        out->hits += s.hits;
        out->misses += s.misses;
        out->evictions += s.evictions;
        out->written += s.written;
        out->pending += s.pending;
        out->lag_ms = s.lag_ms > out->lag_ms ? s.lag_ms : out->lag_ms;
        out->disk_bytes += s.disk_bytes;
        out->prefetched += s.prefetched;
        out->prefetch_used += s.prefetch_used;
        out->prefetch_unused += s.prefetch_unused;
        out->expired += s.expired;
    }
    if (all)
        pthread_rwlock_unlock(&t->lock);
}

uint64_t rowcopy_rows(struct shard_table *t)
{
    return count(t, true, false);
}

uint64_t rowcopy_bytes(struct shard_table *t)
{
    return count(t, false, true);
}

/* Whether every shard of ids[0..n) is one of t's members, holding since t was placed. */
static bool members_hold(const struct shard_table *t, struct ts_cluster *cl,
                         const uint32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!has(t->members, t->nmembers, ids[i]) ||
            !ts_cluster_holds(cl, ids[i], t->placed_epoch))
            return false;
    return true;
}

bool rowcopy_on_ring(const struct shard_table *t, struct ts_cluster *cl)
{
    uint32_t *ids = malloc(TS_CLUSTER_MAX_SHARDS * sizeof(*ids));
    size_t n = ids ? ts_cluster_shard_ids(cl, ids, TS_CLUSTER_MAX_SHARDS) : 0;
    bool same = ids && n == t->nmembers && members_hold(t, cl, ids, n);

    free(ids);
    return same;
}

/* Whether member id of t still holds the rows it was given: on cl's map under the session it
 * had when t was placed. */
static bool still_holds(const struct shard_table *t, struct ts_cluster *cl, const uint32_t *ids,
                        size_t n, uint32_t id)
{
    return has(ids, n, id) && ts_cluster_holds(cl, id, t->placed_epoch);
}

enum rowcopy_check rowcopy_rechain(struct shard_table *t, struct ts_cluster *cl)
{
    static uint32_t ids[TS_CLUSTER_MAX_SHARDS];   /* under the registry lock */
    size_t n = ts_cluster_shard_ids(cl, ids, TS_CLUSTER_MAX_SHARDS), lost = 0, holding = 0;
    uint32_t chain[COPIES];
    enum rowcopy_check c;
    bool joined;

    /* Its placement (members, ring, stores) is a move's or a rollback's to replace, under
     * the lock held exclusive (place_anew): once a map taken up by a push's remap read the
     * ring a MoveTables was freeing. */
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->nmembers; i++)
        holding += still_holds(t, cl, ids, n, t->members[i]);
    /* A shard joined, or one came back as a new session (it registered again since the
     * table was placed): it holds none of the rows the ring gives it. */
    joined = !members_hold(t, cl, ids, n);
    if (holding == t->nmembers) {
        c = joined ? ROWCOPY_MISPLACED : ROWCOPY_HELD;
        goto out;
    }
    c = ROWCOPY_LOST;
    if (!t->replicated || !t->placed)
        goto out;
    /* Every chain keeps a member that holds its rows, or they are gone. */
    for (size_t i = 0; i < ts_ring_points(t->placed); i++) {
        size_t k = ts_ring_chain_hash(t->placed, ts_ring_point(t->placed, i), COPIES, chain);
        bool live = false;
        for (size_t j = 0; j < k; j++)
            live |= still_holds(t, cl, ids, n, chain[j]);
        if (!live)
            goto out;
    }
    /* The copies of the members that no longer hold are taken over, whether or not a shard
     * joined too: a snapshot taken for a join's move (or to copy the rows anew) captures
     * the stores served, and a copy left unserved would be missing from it. */
    for (size_t k = 1; k < t->nstores; k++) {
        struct table_store *s = &t->stores[k];
        if (still_holds(t, cl, ids, n, s->origin) || atomic_load(&s->owned))
            continue;
        if (atomic_load(&s->broken)) {
            lost++;
            continue;
        }
        atomic_store(&s->full, true);
        atomic_store(&s->taken, ts_cluster_epoch(cl));
        atomic_store(&s->owned, true);
        ts_log(TS_WARN, "shard", "table '%s': shard %u left the map; this shard serves the "
               "copy of its rows it holds (%" PRIu64 " rows, step %" PRIu64 ")", t->name,
               s->origin, ts_table_count(s->t), ts_table_step(s->t));
    }
    c = lost ? ROWCOPY_LOST : joined ? ROWCOPY_MISPLACED : ROWCOPY_HELD;
out:
    pthread_rwlock_unlock(&t->lock);
    return c;
}

void rowcopy_free(struct shard_table *t)
{
    free_copies(t);
    ts_ring_free(t->placed);
    t->placed = NULL;
    free(t->followers);
    t->followers = NULL;
    t->nfollowers = 0;
}
