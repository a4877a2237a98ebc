/* cluster.c - see cluster.h: the cached shard map, and shard calls that refresh it.
 *
 * A shard refuses a request made under an older map epoch with ABORTED (TS_ESTALE). The cure is
 * always the same, so it lives here once: fetch the map, rebuild the ring, send again with the
 * new epoch. Channels to shards are kept per shard id and made on first use. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "placement/ring.h"
#include "transport/transport.h"
#include "rpc/rpc.h"
#include "util/log.h"

#define MAX_STALE_RETRIES 3

/* A channel to a shard, counted: held by the installed map's entry and by each call in
 * flight on it, so that a call runs without the cluster's lock and a map installed meanwhile
 * only lets go of it (the last holder frees it). refs is under the cluster's mu. */
struct held_ch {
    struct ts_rpc_channel *ch;
    unsigned refs;
};

struct shard_ch {
    uint32_t id;
    char addr[256];
    struct held_ch *held;           /* NULL until its first call */
};

struct ts_cluster {
    struct ts_master *master;
    pthread_mutex_t mu;
    /* Held across a refresh's call: refreshes one at a time, so the map a refresh fetches a
     * delta from (map, replaced only by a refresh) stays while it is applied. */
    pthread_mutex_t refresh_mu;
    uint64_t epoch;
    unsigned refreshes;
    struct ts_ring *ring;           /* over the shards on the ring (not joining) */
    struct ts_ring *full;           /* over every alive shard, joining ones too; NULL if none */
    uint32_t replicas;              /* the map's chain length, at least 1 */
    Tessera__V1__ShardMap *map;     /* the installed map: the shards' data-plane endpoints */
    struct shard_ch *shards;
    size_t nshards;
    int call_ms;                    /* a shard call's deadline when its caller gives none */
};

ts_status ts_cluster_open(const char *master_addr, struct ts_cluster **out, struct ts_err *err)
{
    struct ts_cluster *cl = calloc(1, sizeof(*cl));
    ts_status st;

    if (!cl)
        return ts_err_set(err, TS_ENOMEM, "cluster: out of memory");
    pthread_mutex_init(&cl->mu, NULL);
    pthread_mutex_init(&cl->refresh_mu, NULL);
    cl->call_ms = ts_call_ms_default();
    if ((st = ts_master_open(master_addr, &cl->master, err)) ||
        (st = ts_cluster_refresh(cl, err))) {
        ts_cluster_close(cl);
        return st;
    }
    cl->refreshes = 0; /* the first fetch is not a refresh */
    *out = cl;
    return TS_OK;
}

/* Lets go of h (mu held); frees the channel once nobody holds it. */
static void let_go(struct held_ch *h)
{
    if (h && --h->refs == 0) {
        ts_rpc_channel_free(h->ch);
        free(h);
    }
}

static void drop_shards(struct ts_cluster *cl)
{
    for (size_t i = 0; i < cl->nshards; i++)
        let_go(cl->shards[i].held);
    free(cl->shards);
    cl->shards = NULL;
    cl->nshards = 0;
}

void ts_cluster_close(struct ts_cluster *cl)
{
    if (!cl)
        return;
    drop_shards(cl);
    ts_ring_free(cl->ring);
    ts_ring_free(cl->full);
    if (cl->map)
        tessera__v1__shard_map__free_unpacked(cl->map, NULL);
    ts_master_close(cl->master);
    pthread_mutex_destroy(&cl->mu);
    pthread_mutex_destroy(&cl->refresh_mu);
    free(cl);
}

/* Installs a fetched map, which it keeps on success: the ring from the ids of the shards not
 * joining, checked against the master's digest, and with joining shards the ring they will
 * make (docs/replication.md, "Joining"). */
static ts_status install(struct ts_cluster *cl, Tessera__V1__ShardMap *map,
                         struct ts_err *err)
{
    uint32_t *ids = calloc(2 * map->n_shards + 1, sizeof(*ids)), *all = ids + map->n_shards;
    struct shard_ch *sh = calloc(map->n_shards + 1, sizeof(*sh));
    struct ts_ring *ring = NULL, *full = NULL;
    size_t n = 0;
    ts_status st = TS_OK;

    if (!ids || !sh)
        st = ts_err_set(err, TS_ENOMEM, "cluster: out of memory");
    for (size_t i = 0; !st && i < map->n_shards; i++) {
        all[i] = map->shards[i]->id;
        if (!map->shards[i]->joining)
            ids[n++] = map->shards[i]->id;
        sh[i].id = map->shards[i]->id;
        snprintf(sh[i].addr, sizeof(sh[i].addr), "%s", map->shards[i]->addr);
    }
    if (!st && map->replicas > TS_MAX_REPLICAS)
        st = ts_err_set(err, TS_EINVAL, "shard map epoch %" PRIu64 ": replicas %u, at most %d",
                        map->epoch, map->replicas, TS_MAX_REPLICAS);
    if (!st)
        st = ts_ring_create(ids, n, map->vnodes, &ring, err);
    if (!st && n < map->n_shards)
        st = ts_ring_create(all, map->n_shards, map->vnodes, &full, err);
    if (!st && ts_ring_digest(ring) != map->digest)
        st = ts_err_set(err, TS_ECORRUPT,
                        "shard map epoch %" PRIu64 ": our ring digest %016" PRIx64
                        " differs from the master's %016" PRIx64 " (mismatched versions?)",
                        map->epoch, ts_ring_digest(ring), map->digest);
    free(ids);
    if (st) {
        ts_ring_free(ring);
        ts_ring_free(full);
        free(sh);
        return st;
    }
    drop_shards(cl);
    ts_ring_free(cl->ring);
    ts_ring_free(cl->full);
    cl->ring = ring;
    cl->full = full;
    cl->shards = sh;
    cl->nshards = map->n_shards;
    cl->epoch = map->epoch;
    cl->replicas = map->replicas ? map->replicas : 1;
    if (cl->map)
        tessera__v1__shard_map__free_unpacked(cl->map, NULL);
    cl->map = map;
    return TS_OK;
}

ts_status ts_cluster_refresh(struct ts_cluster *cl, struct ts_err *err)
{
    Tessera__V1__ShardMap *map;
    ts_status st;

    pthread_mutex_lock(&cl->refresh_mu);
    if ((st = ts_master_shard_map_update(cl->master, cl->map, &map, err))) {
        pthread_mutex_unlock(&cl->refresh_mu);
        return st;
    }
    pthread_mutex_lock(&cl->mu);
    st = install(cl, map, err);
    if (!st)
        cl->refreshes++;
    pthread_mutex_unlock(&cl->mu);
    pthread_mutex_unlock(&cl->refresh_mu);
    if (st)
        tessera__v1__shard_map__free_unpacked(map, NULL);
    return st;
}

/* ReportUnreachable of shard id or worker wid (the other 0). */
static enum ts_report report(struct ts_cluster *cl, uint32_t id, uint32_t wid,
                             uint32_t by_shard, uint64_t hello_epoch, const char *reporter,
                             const char *detail)
{
    Tessera__V1__ReportUnreachableRequest req = TESSERA__V1__REPORT_UNREACHABLE_REQUEST__INIT;
    Tessera__V1__ReportUnreachableResponse *r = NULL;
    const char *what = id ? "shard" : "worker";
    struct ts_err err = { 0 };
    char d[257];
    bool dead;

    snprintf(d, sizeof(d), "%s", detail ? detail : "");
    req.shard_id = id;
    req.worker_id = wid;
    req.reporter_shard = by_shard;
    req.hello_epoch = hello_epoch;
    req.reporter = (char *)reporter;
    req.detail = d;
    if (ts_master_call(cl->master, "ReportUnreachable", &req.base,
                       &tessera__v1__report_unreachable_response__descriptor,
                       (ProtobufCMessage **)&r, &err)) {
        ts_log(TS_WARN, "cluster", "reporting %s %u unreachable: %s", what, id ? id : wid,
               err.msg);
        return TS_REPORT_UNHEARD;
    }
    dead = r->dead;
    ts_log(dead ? TS_INFO : TS_WARN, "cluster", "reported %s %u unreachable: %s (%s)", what,
           id ? id : wid, dead ? "dead" : "the master keeps it", r->verdict);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return dead ? TS_REPORT_DEAD : TS_REPORT_KEPT;
}

enum ts_report ts_cluster_report_unreachable(struct ts_cluster *cl, uint32_t id,
                                             const char *reporter, const char *detail)
{
    return report(cl, id, 0, 0, 0, reporter, detail);
}

bool ts_cluster_report_worker(struct ts_cluster *cl, uint32_t worker, uint32_t shard,
                              uint64_t hello_epoch, const char *detail)
{
    char who[32];

    snprintf(who, sizeof(who), "shard %u", shard);
    return worker && report(cl, 0, worker, shard, hello_epoch, who, detail) !=
                     TS_REPORT_UNHEARD;
}

bool ts_cluster_report_lost(struct ts_cluster *cl, const char *job, uint32_t shard,
                            uint32_t generation)
{
    Tessera__V1__ReportLostRequest req = TESSERA__V1__REPORT_LOST_REQUEST__INIT;
    Tessera__V1__ReportLostResponse *r = NULL;
    struct ts_err err = { 0 };

    req.job = (char *)job;
    req.shard_id = shard;
    req.generation = generation;
    if (ts_master_call(cl->master, "ReportLost", &req.base,
                       &tessera__v1__report_lost_response__descriptor, (ProtobufCMessage **)&r,
                       &err)) {
        ts_log(TS_WARN, "cluster", "reporting job %s's lost partitions: %s", job, err.msg);
        return err.code == TS_ENOTFOUND;   /* a job that ended needs no rollback */
    }
    ts_log(TS_WARN, "cluster", "job %s lost a partition; the master: %s", job, r->action);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return true;
}

uint64_t ts_cluster_epoch(struct ts_cluster *cl)
{
    uint64_t e;
    pthread_mutex_lock(&cl->mu);
    e = cl->epoch;
    pthread_mutex_unlock(&cl->mu);
    return e;
}

ts_status ts_cluster_check_epoch(struct ts_cluster *cl, uint64_t want, struct ts_err *err)
{
    uint64_t have = ts_cluster_epoch(cl);
    ts_status st;

    if (want > have && (st = ts_cluster_refresh(cl, err)))
        return st;
    have = ts_cluster_epoch(cl);
    if (want < have)
        return ts_err_set(err, TS_ESTALE, "map_epoch: %" PRIu64 " is stale, the shard map is at "
                          "epoch %" PRIu64 ": refresh the shard map (GetShardMap) and retry",
                          want, have);
    if (want > have)
        return ts_err_set(err, TS_EINVAL, "map_epoch: %" PRIu64 " is ahead of the master's "
                          "epoch %" PRIu64, want, have);
    return TS_OK;
}

unsigned ts_cluster_refreshes(struct ts_cluster *cl)
{
    unsigned n;
    pthread_mutex_lock(&cl->mu);
    n = cl->refreshes;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

ts_status ts_cluster_locate(struct ts_cluster *cl, const char *tensor, uint32_t salt,
                            uint32_t partition, uint32_t *shard_id, struct ts_err *err)
{
    uint64_t key = ts_ring_key_hash_salted(tensor, salt, partition);
    uint32_t id;

    pthread_mutex_lock(&cl->mu);
    id = ts_ring_lookup_hash(cl->ring, key);
    pthread_mutex_unlock(&cl->mu);
    if (!id)
        return ts_err_set(err, TS_EUNAVAIL, "no shard is alive (map epoch %" PRIu64 ")",
                          ts_cluster_epoch(cl));
    *shard_id = id;
    return TS_OK;
}

/* Whether shard id is on the ring of the cached map; mu held. */
static bool ring_member(const struct ts_cluster *cl, uint32_t id)
{
    for (size_t i = 0; cl->map && i < cl->map->n_shards; i++)
        if (cl->map->shards[i]->id == id)
            return !cl->map->shards[i]->joining;
    return false;
}

size_t ts_cluster_chain(struct ts_cluster *cl, const char *tensor, uint32_t salt,
                        uint32_t partition, uint32_t out[TS_MAX_CHAIN], size_t *on_ring)
{
    uint64_t key = ts_ring_key_hash_salted(tensor, salt, partition);
    uint32_t will[TS_MAX_REPLICAS];
    size_t n, m;

    pthread_mutex_lock(&cl->mu);
    n = ts_ring_chain_hash(cl->ring, key, cl->replicas, out);
    if (on_ring)
        *on_ring = n;
    m = cl->full ? ts_ring_chain_hash(cl->full, key, cl->replicas, will) : 0;
    for (size_t i = 0; i < m; i++)
        if (!ring_member(cl, will[i]))
            out[n++] = will[i];   /* joining: at the tail, copying */
    pthread_mutex_unlock(&cl->mu);
    return n;
}

uint32_t ts_cluster_choose_salt(struct ts_cluster *cl, const char *tensor, uint32_t nparts,
                                uint64_t part_bytes, uint64_t last_bytes,
                                struct ts_ring_salt *out)
{
    uint32_t salt;

    /* Under mu for the ring pointer: a refresh swaps and frees it. Choosing takes about a
     * millisecond at most (TS_RING_SALT_LOOKUPS), once per tensor. */
    pthread_mutex_lock(&cl->mu);
    salt = ts_ring_choose_salt(cl->ring, tensor, nparts, part_bytes, last_bytes,
                               TS_RING_SALT_TRIES, out);
    pthread_mutex_unlock(&cl->mu);
    return salt;
}

bool ts_cluster_is_joining(struct ts_cluster *cl, uint32_t id)
{
    bool joining = false;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards; i++)
        if (cl->map->shards[i]->id == id)
            joining = cl->map->shards[i]->joining;
    pthread_mutex_unlock(&cl->mu);
    return joining;
}

size_t ts_cluster_joining(struct ts_cluster *cl, uint32_t *ids, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards && n < max; i++)
        if (cl->map->shards[i]->joining)
            ids[n++] = cl->map->shards[i]->id;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

uint32_t ts_cluster_replicas(struct ts_cluster *cl)
{
    uint32_t r;

    pthread_mutex_lock(&cl->mu);
    r = cl->replicas;
    pthread_mutex_unlock(&cl->mu);
    return r;
}

ts_status ts_shard_pick_transport(const Tessera__V1__ShardInfo *s, const char *want,
                                  const struct ts_transport_ops **ops, struct ts_blob *blob,
                                  struct ts_err *err)
{
    for (size_t k = 0; ts_transports[k]; k++) {
        const struct ts_transport_ops *o = ts_transports[k];
        struct ts_err e = { 0 };
        if (want && want[0] && strcmp(want, o->name))
            continue;
        if (ts_tp_probe(o, &e)) {
            if (want && want[0])   /* asked for by name: say why it cannot run */
                return ts_err_set(err, TS_ENODEV, "--transport %s cannot run here: %s", want,
                                  e.msg);
            continue;
        }
        for (size_t i = 0; i < s->n_data_planes; i++) {
            const Tessera__V1__DataPlaneEndpoint *d = s->data_planes[i];
            if (strcmp(d->transport, o->name) || d->address.len > sizeof(blob->data))
                continue;
            memcpy(blob->data, d->address.data, d->address.len);
            blob->len = d->address.len;
            if (!ts_tp_usable(o, blob))
                continue;
            *ops = o;
            return TS_OK;
        }
    }
    return ts_err_set(err, TS_ENODEV, "shard %u (%s): no data-plane transport in common%s%s",
                      s->id, s->addr, want ? " with --transport " : "", want ? want : "");
}

uint32_t ts_cluster_instance_id(struct ts_cluster *cl, const char *instance,
                                uint64_t *registered_epoch)
{
    uint32_t id = 0;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards && !id; i++) {
        const Tessera__V1__ShardInfo *s = cl->map->shards[i];
        if (!s->joining && strcmp(s->instance, instance) == 0) {
            id = s->id;
            *registered_epoch = s->registered_epoch;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    return id;
}

bool ts_cluster_holds(struct ts_cluster *cl, uint32_t id, uint64_t since)
{
    bool holds = false;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards; i++)
        if (cl->map->shards[i]->id == id)
            holds = cl->map->shards[i]->registered_epoch <= since;
    pthread_mutex_unlock(&cl->mu);
    return holds;
}

ts_status ts_cluster_ring_copy(struct ts_cluster *cl, struct ts_ring **out, uint64_t *epoch,
                               struct ts_err *err)
{
    uint32_t ids[TS_CLUSTER_MAX_SHARDS];
    size_t n = 0;
    unsigned vnodes = 0;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards && n < TS_CLUSTER_MAX_SHARDS; i++)
        if (!cl->map->shards[i]->joining)
            ids[n++] = cl->map->shards[i]->id;
    vnodes = cl->map ? cl->map->vnodes : 0;
    *epoch = cl->epoch;
    pthread_mutex_unlock(&cl->mu);
    if (!n)
        return ts_err_set(err, TS_EUNAVAIL, "the shard map (epoch %" PRIu64 ") has no shard "
                          "on its ring", *epoch);
    return ts_ring_create(ids, n, vnodes, out, err);
}

size_t ts_cluster_shard_ids(struct ts_cluster *cl, uint32_t *ids, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards && n < max; i++)
        if (!cl->map->shards[i]->joining)
            ids[n++] = cl->map->shards[i]->id;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

ts_status ts_cluster_connect(struct ts_cluster *cl, uint32_t id, const char *want, int ms,
                             struct ts_conn **out, struct ts_err *err)
{
    const struct ts_transport_ops *ops = NULL;
    struct ts_blob blob;
    ts_status st = TS_ENOTFOUND;

    pthread_mutex_lock(&cl->mu);
    for (size_t i = 0; cl->map && i < cl->map->n_shards && st == TS_ENOTFOUND; i++)
        if (cl->map->shards[i]->id == id)
            st = ts_shard_pick_transport(cl->map->shards[i], want, &ops, &blob, err);
    pthread_mutex_unlock(&cl->mu);
    if (st == TS_ENOTFOUND)
        return ts_err_set(err, TS_EUNAVAIL, "shard %u is not in the map (epoch %" PRIu64 ")",
                          id, ts_cluster_epoch(cl));
    return st ? st : ts_tp_connect(ops, &blob, ms, out, err);
}

/* The channel to a shard under the cached map, and the epoch it belongs to. Called with mu. */
/* Shard id's channel, held for the caller (let_go when done); mu held. */
static ts_status channel_of(struct ts_cluster *cl, uint32_t id, struct held_ch **out,
                            struct ts_err *err)
{
    for (size_t i = 0; i < cl->nshards; i++) {
        struct held_ch *h = cl->shards[i].held;
        if (cl->shards[i].id != id)
            continue;
        if (!h) {
            ts_status st;
            if (!(h = calloc(1, sizeof(*h))))
                return ts_err_set(err, TS_ENOMEM, "cluster: out of memory");
            if ((st = ts_rpc_channel_create(cl->shards[i].addr, NULL, &h->ch, err))) {
                free(h);
                return st;
            }
            h->refs = 1;   /* the map's */
            cl->shards[i].held = h;
        }
        h->refs++;
        *out = h;
        return TS_OK;
    }
    return ts_err_set(err, TS_ENOTFOUND, "shard %u is not alive in map epoch %" PRIu64, id,
                      cl->epoch);
}

/* Calls a shard with the cached epoch in *epoch_field; refreshes and retries on TS_ESTALE.
 * The call holds its channel, not the lock: a call to a shard that does not answer (retried
 * until its deadline) must not hold up the map's other readers, among them the heartbeat
 * that keeps this process alive (a shard's report of the moves left, ts_cluster_joining). */
ts_status ts_cluster_call(struct ts_cluster *cl, uint32_t id, const char *method,
                          ProtobufCMessage *req, uint64_t *epoch_field,
                          const ProtobufCMessageDescriptor *rdesc, ProtobufCMessage **resp,
                          int ms, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int attempt = 0; attempt <= MAX_STALE_RETRIES; attempt++) {
        struct ts_err e = { 0 };
        struct held_ch *h = NULL;
        int call_ms;

        if (attempt > 0 && (st = ts_cluster_refresh(cl, err)))
            return st;
        pthread_mutex_lock(&cl->mu);
        st = channel_of(cl, id, &h, &e);
        *epoch_field = cl->epoch;
        call_ms = ms > 0 ? ms : cl->call_ms;
        pthread_mutex_unlock(&cl->mu);
        if (!st) {
            st = ts_rpc_unary(h->ch, method, req, rdesc, resp, call_ms, &e);
            pthread_mutex_lock(&cl->mu);
            let_go(h);
            pthread_mutex_unlock(&cl->mu);
        }
        if (st != TS_ESTALE)
            return st ? ts_err_set(err, st, "%s", e.msg) : TS_OK;
        ts_log(TS_DEBUG, "client", "%s; refreshing the shard map", e.msg);
    }
    return ts_err_set(err, TS_ESTALE, "shard %u: map still stale after %d refreshes", id,
                      MAX_STALE_RETRIES);
}

void ts_cluster_set_call_ms(struct ts_cluster *cl, int ms)
{
    pthread_mutex_lock(&cl->mu);
    cl->call_ms = ms > 0 ? ms : ts_call_ms_default();
    pthread_mutex_unlock(&cl->mu);
    ts_master_set_call_ms(cl->master, ms);
}
