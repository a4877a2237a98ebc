/* mapdelta.c - the shard map as versioned deltas; see mapdelta.h. */
#include "mapdelta.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH64_state_t on the stack: a hash that cannot fail */
#include <xxhash.h>

uint64_t ts_shard_info_hash(const Tessera__V1__ShardInfo *s)
{
    Tessera__V1__ShardInfo c = *s;
    uint8_t stack[1024], *buf = stack;
    size_t n;
    uint64_t h;

    c.last_heartbeat_ms_ago = 0;
    c.away_ms_ago = 0;   /* an age too: a shard away is the same entry of the map */
    n = tessera__v1__shard_info__get_packed_size(&c);
    if (n > sizeof(stack) && !(buf = malloc(n)))
        return 0;   /* no memory: a hash no map has, so a delta is refused, not misapplied */
    tessera__v1__shard_info__pack(&c, buf);
    h = XXH64(buf, n, 0x5eed);
    if (buf != stack)
        free(buf);
    return h;
}

/* shard_hashes NULL: each computed here. */
static uint64_t map_hash(const Tessera__V1__ShardMap *m, const uint64_t *shard_hashes)
{
    uint64_t head[5] = { m->epoch, m->vnodes, m->replicas, m->digest, m->n_shards };
    XXH64_state_t st;

    XXH64_reset(&st, 0x5eed);
    XXH64_update(&st, head, sizeof(head));
    for (size_t i = 0; i < m->n_shards; i++) {
        uint64_t one[2] = { m->shards[i]->id, shard_hashes ? shard_hashes[i] :
                            ts_shard_info_hash(m->shards[i]) };
        XXH64_update(&st, one, sizeof(one));
    }
    return XXH64_digest(&st);
}

uint64_t ts_shard_map_hash(const Tessera__V1__ShardMap *m)
{
    return map_hash(m, NULL);
}

uint64_t ts_shard_map_hash_with(const Tessera__V1__ShardMap *m, const uint64_t *shard_hashes)
{
    return map_hash(m, shard_hashes);
}

static bool listed(const uint32_t *ids, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static int by_id(const void *a, const void *b)
{
    uint32_t x = (*(Tessera__V1__ShardInfo *const *)a)->id;
    uint32_t y = (*(Tessera__V1__ShardInfo *const *)b)->id;
    return (x > y) - (x < y);
}

ts_status ts_shard_map_apply(const Tessera__V1__ShardMap *base,
                             const Tessera__V1__ShardMap *delta, Tessera__V1__ShardMap **out,
                             struct ts_err *err)
{
    Tessera__V1__ShardMap whole = TESSERA__V1__SHARD_MAP__INIT;
    Tessera__V1__ShardInfo **v;
    uint8_t *buf;
    size_t n = 0;

    *out = NULL;
    if (!delta->delta_from || delta->delta_from != base->epoch || base->delta_from)
        return ts_err_set(err, TS_ESTALE, "shard map: a delta from epoch %" PRIu64 " for the "
                          "map of epoch %" PRIu64 ": fetch the whole map", delta->delta_from,
                          base->epoch);
    if (!(v = malloc((base->n_shards + delta->n_shards + 1) * sizeof(*v))))
        return ts_err_set(err, TS_ENOMEM, "shard map: no memory to apply a delta");
    for (size_t i = 0; i < base->n_shards; i++) {
        bool replaced = listed(delta->removed, delta->n_removed, base->shards[i]->id);
        for (size_t k = 0; !replaced && k < delta->n_shards; k++)
            replaced = delta->shards[k]->id == base->shards[i]->id;
        if (!replaced)
            v[n++] = base->shards[i];
    }
    for (size_t k = 0; k < delta->n_shards; k++)
        v[n++] = delta->shards[k];
    qsort(v, n, sizeof(*v), by_id);
    whole.epoch = delta->epoch;
    whole.vnodes = delta->vnodes;
    whole.digest = delta->digest;
    whole.replicas = delta->replicas;
    whole.map_hash = delta->map_hash;
    whole.shards = v;
    whole.n_shards = n;
    if (ts_shard_map_hash(&whole) != delta->map_hash) {
        free(v);
        return ts_err_set(err, TS_ESTALE, "shard map: the delta from epoch %" PRIu64 " to %"
                          PRIu64 " does not make the master's map: fetch the whole map",
                          delta->delta_from, delta->epoch);
    }
    /* packed and read back: one message that owns all of itself, as a fetched map does */
    buf = malloc(tessera__v1__shard_map__get_packed_size(&whole) + 1);
    if (buf)
        *out = tessera__v1__shard_map__unpack(NULL, tessera__v1__shard_map__pack(&whole, buf),
                                              buf);
    free(buf);
    free(v);
    if (!*out)
        return ts_err_set(err, TS_ENOMEM, "shard map: no memory to apply a delta");
    return TS_OK;
}
