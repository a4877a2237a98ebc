/* harness.c - see harness.h: a cluster of lib/local, and raw data-plane connections to it. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "local/local.h"
#include "transport/frame.h"

static struct ts_local *cluster;   /* the one cluster of a test group */

const char *harness_master(const char *bin)
{
    /* The children's output is the test's; the test process's own TLS stays as it was. */
    struct ts_local_opts o = { .bin = bin, .tmp_prefix = "ts-harness", .no_logs = true,
                               .no_state = true, .keep_process_tls = true };
    struct ts_err err = { 0 };

    if (ts_local_start(&o, &cluster, &err)) {
        fprintf(stderr, "harness_master: %s\n", err.msg);
        return NULL;
    }
    return ts_local_master_addr(cluster);
}

pid_t harness_shard(const char *bin, const char *extra_flag, const char *extra_value)
{
    const char *args[] = { extra_flag, extra_value, NULL };
    struct ts_err err = { 0 };
    pid_t pid;

    (void)bin;   /* the master's: one cluster, one build */
    if (!cluster || ts_local_add_shard(cluster, args, &pid, &err)) {
        fprintf(stderr, "harness_shard: %s\n", cluster ? err.msg : "no master started");
        return -1;
    }
    return pid;
}

void harness_stop(void)
{
    if (!cluster)
        return;
    ts_local_stop(cluster, NULL);
    ts_local_remove_logs(cluster);
    ts_local_free(cluster);
    cluster = NULL;
}

int harness_wait_shards(int n)
{
    struct ts_err err = { 0 };

    if (ts_local_wait_shards(cluster, n, &err)) {
        fprintf(stderr, "harness_wait_shards(%d): %s\n", n, err.msg);
        return -1;
    }
    return 0;
}

/* The address of the only shard in the map for `transport` (lib/cluster's pick), its ops. */
static int only_shard(const char *transport, const struct ts_transport_ops **ops,
                      struct ts_blob *blob, struct ts_err *err)
{
    struct ts_master *m;
    Tessera__V1__ShardMap *map;
    ts_status st;

    if (ts_master_open(ts_local_master_addr(cluster), &m, err))
        return -1;
    if (ts_master_shard_map(m, &map, err)) {
        ts_master_close(m);
        return -1;
    }
    st = map->n_shards != 1
             ? ts_err_set(err, TS_ESTATE, "the map has %zu shards, want 1", map->n_shards)
             : ts_shard_pick_transport(map->shards[0], transport, ops, blob, err);
    tessera__v1__shard_map__free_unpacked(map, NULL);
    ts_master_close(m);
    return st ? -1 : 0;
}

struct ts_conn *harness_connect(const char *transport, const char *job, uint32_t flags,
                                uint32_t member)
{
    const struct ts_transport_ops *ops;
    struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .flags = flags, .tensor = member };
    struct ts_err err = { 0 };
    struct ts_blob blob;
    struct ts_conn *c = NULL;
    char buf[256];

    if (!only_shard(transport, &ops, &blob, &err) &&
        !ts_tp_connect(ops, &blob, 5000, &c, &err) &&
        !ts_frame_send(c, &h, job, strlen(job), &err) &&
        !ts_frame_recv(c, &h, buf, sizeof(buf), 5000, &err) && h.type != TS_FRAME_ACK)
        ts_err_set(&err, TS_ECORRUPT, "hello: frame type %u, not ACK", h.type);
    if (!err.code)
        return c;
    fprintf(stderr, "harness_connect(%s, %s): %s\n", transport, job, err.msg);
    if (c)
        ts_tp_close(c);
    return NULL;
}
