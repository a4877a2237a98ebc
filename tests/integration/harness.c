/* harness.c - see harness.h. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "transport/frame.h"
#include "util/launch.h"
#include "util/proc.h"

static char tmpdir[] = "/tmp/ts-harness.XXXXXX";
static pid_t pids[16];
static int npids;
static char master_addr[64];

static pid_t spawn(char *const argv[])
{
    pid_t p;

    if (npids == (int)(sizeof(pids) / sizeof(pids[0])) ||
        ts_launch(argv[0], argv, NULL, -1, &p, NULL))
        return -1;
    pids[npids++] = p;
    return p;
}

const char *harness_master(const char *bin)
{
    char exe[512], port_file[600];
    char *argv[] = { exe, "--listen", "127.0.0.1:0", "--port-file", port_file, "--insecure",
                     NULL };
    int port = 0;
    pid_t p;

    if (!mkdtemp(tmpdir))
        return NULL;
    snprintf(exe, sizeof(exe), "%s/tessera-master", bin);
    snprintf(port_file, sizeof(port_file), "%s/port", tmpdir);
    if ((p = spawn(argv)) < 0 || ts_launch_wait_port(p, port_file, 10000, &port, NULL, NULL))
        return NULL;
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%d", port);
    return master_addr;
}

pid_t harness_shard(const char *bin, const char *extra_flag, const char *extra_value)
{
    char exe[512];
    char *argv[] = { exe, "--master", master_addr, "--insecure", (char *)extra_flag,
                     (char *)extra_value, NULL };

    snprintf(exe, sizeof(exe), "%s/tessera-shard", bin);
    return spawn(argv);
}

void harness_stop(void)
{
    char path[600];

    for (int i = npids - 1; i >= 0; i--)
        (void)ts_launch_stop(pids[i], 10000);
    npids = 0;
    snprintf(path, sizeof(path), "%s/port", tmpdir);
    unlink(path);
    rmdir(tmpdir);
}

int harness_wait_shards(int n)
{
    struct ts_master *m;
    int alive = -1;

    if (ts_master_open(master_addr, &m, NULL))
        return -1;
    for (int i = 0; i < 300 && alive != n; i++) {
        Tessera__V1__ClusterStatusResponse *cs;
        if (!ts_master_status(m, 1000, &cs, NULL)) {
            alive = 0;
            for (size_t k = 0; k < cs->n_shards; k++)
                alive += cs->shards[k]->state == TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
            tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
        }
        if (alive != n)
            ts_sleep_ms(50);
    }
    ts_master_close(m);
    return alive == n ? 0 : -1;
}

/* The address of the only shard in the map for `transport` (lib/cluster's pick), its ops. */
static int only_shard(const char *transport, const struct ts_transport_ops **ops,
                      struct ts_blob *blob, struct ts_err *err)
{
    struct ts_master *m;
    Tessera__V1__ShardMap *map;
    ts_status st;

    if (ts_master_open(master_addr, &m, err))
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
