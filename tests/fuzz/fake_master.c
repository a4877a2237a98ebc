/* fake_master.c - see fake_master.h. */
#include "fake_master.h"

#include <stdio.h>
#include <stdlib.h>

#include "placement/ring.h"
#include "rpc/rpc.h"
#include "tessera/v1/master.pb-c.h"

#define LEASE_MS 600000

struct fake_master {
    struct ts_rpc_service svc;         /* its own copy: ctx is this master */
    struct ts_rpc_server *srv;
    uint64_t epoch, digest;
    uint32_t ids[FAKE_MASTER_MAX_SHARDS], replicas;
    size_t n;
};

static ts_status get_shard_map(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                               ProtobufCMessage *rs, struct ts_err *err)
{
    struct fake_master *m = ts_rpc_ctx(call);
    Tessera__V1__ShardMap *map = (void *)rs;

    map->epoch = m->epoch;
    map->digest = m->digest;
    map->replicas = m->replicas;
    map->shards = ts_rpc_alloc(call, m->n * sizeof(*map->shards));
    for (size_t i = 0; i < m->n; i++) {
        Tessera__V1__ShardInfo *s = ts_rpc_new(call, &tessera__v1__shard_info__descriptor);
        char addr[32];

        /* Port 1 of loopback: nothing listens, a call is refused at once. */
        snprintf(addr, sizeof(addr), "127.0.0.1:1");
        s->id = m->ids[i];
        s->addr = ts_rpc_strdup(call, addr);
        s->state = TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
        s->lease_ms = LEASE_MS;
        s->instance = ts_rpc_strdup(call, "fake");
        map->shards[map->n_shards++] = s;
    }
    return TS_OK;
}

static ts_status register_shard(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                ProtobufCMessage *rs, struct ts_err *err)
{
    struct fake_master *m = ts_rpc_ctx(call);
    Tessera__V1__RegisterShardResponse *r = (void *)rs;

    r->shard_id = m->ids[0];
    r->epoch = m->epoch;
    r->lease_ms = LEASE_MS;
    r->heartbeat_interval_ms = LEASE_MS / 3;
    return TS_OK;
}

static ts_status heartbeat(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                           ProtobufCMessage *rs, struct ts_err *err)
{
    struct fake_master *m = ts_rpc_ctx(call);
    Tessera__V1__HeartbeatResponse *r = (void *)rs;

    r->epoch = m->epoch;
    r->lease_ms = LEASE_MS;
    return TS_OK;
}

static ts_status deregister(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    struct fake_master *m = ts_rpc_ctx(call);

    ((Tessera__V1__DeregisterResponse *)rs)->epoch = m->epoch;
    return TS_OK;
}

static ts_status report_unreachable(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                    ProtobufCMessage *rs, struct ts_err *err)
{
    struct fake_master *m = ts_rpc_ctx(call);
    Tessera__V1__ReportUnreachableResponse *r = (void *)rs;

    r->epoch = m->epoch;
    r->verdict = "kept";
    return TS_OK;
}

#define M(name, fn, rq, rs) \
    { name, fn, &tessera__v1__##rq##__descriptor, &tessera__v1__##rs##__descriptor, 0, 0, 0 }
static const struct ts_rpc_method methods[] = {
    M("GetShardMap", get_shard_map, get_shard_map_request, shard_map),
    M("RegisterShard", register_shard, register_shard_request, register_shard_response),
    M("Heartbeat", heartbeat, heartbeat_request, heartbeat_response),
    M("Deregister", deregister, deregister_request, deregister_response),
    M("ReportUnreachable", report_unreachable, report_unreachable_request,
      report_unreachable_response),
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};

ts_status fake_master_start(uint64_t epoch, const uint32_t *ids, size_t n, uint32_t replicas,
                            struct fake_master **out, char addr[64], struct ts_err *err)
{
    struct ts_rpc_server_opts o = { .listen = "127.0.0.1:0", .threads = 1 };
    struct fake_master *m = calloc(1, sizeof(*m));
    struct ts_ring *ring = NULL;
    ts_status st;

    if (!m)
        return ts_err_set(err, TS_ENOMEM, "fake master: out of memory");
    if (n > FAKE_MASTER_MAX_SHARDS) {
        free(m);
        return ts_err_set(err, TS_EINVAL, "fake master: %zu shards, at most %d", n,
                          FAKE_MASTER_MAX_SHARDS);
    }
    m->epoch = epoch;
    m->replicas = replicas;
    m->n = n;
    for (size_t i = 0; i < n; i++)
        m->ids[i] = ids[i];
    m->svc = (struct ts_rpc_service){ "tessera.v1.Master", methods, m };
    if ((st = ts_ring_create(ids, n, 0, &ring, err)))
        goto out_free;
    m->digest = ts_ring_digest(ring);
    ts_ring_free(ring);
    if ((st = ts_rpc_server_create(&o, &m->srv, err)) ||
        (st = ts_rpc_server_add(m->srv, &m->svc, err)) ||
        (st = ts_rpc_server_start(m->srv, err)))
        goto out_free;
    snprintf(addr, 64, "127.0.0.1:%d", ts_rpc_server_port(m->srv));
    *out = m;
    return TS_OK;
out_free:
    ts_rpc_server_free(m->srv);
    free(m);
    return st;
}

void fake_master_stop(struct fake_master *m)
{
    if (!m)
        return;
    ts_rpc_server_free(m->srv);
    free(m);
}
