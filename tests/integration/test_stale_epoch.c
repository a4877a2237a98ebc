/* test_stale_epoch.c - a client holding an old shard map is refused with ABORTED, and the
 * client library refreshes the map and retries by itself. Real processes on loopback: a
 * tessera-master and shards from the build's bin directory (argv[1]). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "harness.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/proc.h"

static const char *bin;
static const char *master_addr;

static void start_shard(void)
{
    assert_true(harness_shard(bin, "--lease-ms", "1000") > 0);
}

static int setup(void **state)
{
    if (!(master_addr = harness_master(bin)))
        return -1;
    start_shard();
    start_shard();
    return 0;
}

static int teardown(void **state)
{
    harness_stop();
    return 0;
}

static uint64_t alive_shards(struct ts_master *m, uint64_t *epoch)
{
    Tessera__V1__ClusterStatusResponse *cs;
    uint64_t n = 0;

    assert_int_equal(ts_master_status(m, 2000, &cs, NULL), TS_OK);
    for (size_t i = 0; i < cs->n_shards; i++)
        n += cs->shards[i]->state == TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
    *epoch = cs->epoch;
    tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    return n;
}

static void wait_alive(struct ts_master *m, uint64_t want, uint64_t *epoch)
{
    for (int i = 0; i < 200 && alive_shards(m, epoch) != want; i++)
        ts_sleep_ms(50);
    assert_int_equal(alive_shards(m, epoch), want);
}

/* ShardStatus straight to a shard, with an explicit map epoch. */
static ts_status raw_status(const char *addr, uint64_t map_epoch, uint64_t *shard_epoch,
                            struct ts_err *err)
{
    Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
    Tessera__V1__ShardStatusResponse *r;
    struct ts_rpc_channel *ch;
    ts_status st;

    assert_int_equal(ts_rpc_channel_create(addr, NULL, &ch, NULL), TS_OK);
    req.map_epoch = map_epoch;
    st = ts_rpc_unary(ch, "/tessera.v1.Shard/ShardStatus", &req.base,
                      &tessera__v1__shard_status_response__descriptor, (ProtobufCMessage **)&r,
                      2000, err);
    if (!st) {
        *shard_epoch = r->epoch;
        tessera__v1__shard_status_response__free_unpacked(r, NULL);
    }
    ts_rpc_channel_free(ch);
    return st;
}

static void stale_map_is_refused_then_refreshed(void **state)
{
    struct ts_master *m;
    struct ts_cluster *cl;
    Tessera__V1__ShardMap *map;
    Tessera__V1__ShardStatusResponse *r;
    uint64_t e1, e2, shard_epoch = 0;
    struct ts_err err = { 0 };
    uint32_t owner, first;
    char addr[256];

    assert_int_equal(ts_master_open(master_addr, &m, NULL), TS_OK);
    wait_alive(m, 2, &e1);
    assert_int_equal(ts_cluster_open(master_addr, &cl, NULL), TS_OK);
    assert_int_equal(ts_cluster_epoch(cl), e1);
    assert_int_equal(ts_cluster_locate(cl, "layer0.weight", 0, 0, &owner, NULL), TS_OK);
    assert_true(owner == 1 || owner == 2);

    /* A third shard joins: the master's epoch moves on, the cluster handle's does not. */
    start_shard();
    wait_alive(m, 3, &e2);
    assert_true(e2 > e1);
    assert_int_equal(ts_cluster_epoch(cl), e1);

    assert_int_equal(ts_master_shard_map(m, &map, NULL), TS_OK);
    first = map->shards[0]->id;
    snprintf(addr, sizeof(addr), "%s", map->shards[0]->addr);
    tessera__v1__shard_map__free_unpacked(map, NULL);
    /* The shard learns the new epoch from its next heartbeat (a third of its lease). */
    for (int i = 0; i < 100 && shard_epoch < e2; i++) {
        assert_int_equal(raw_status(addr, 0, &shard_epoch, NULL), TS_OK);
        ts_sleep_ms(20);
    }
    assert_int_equal(shard_epoch, e2);

    assert_int_equal(raw_status(addr, e1, &shard_epoch, &err), TS_ESTALE);
    assert_non_null(strstr(err.msg, "ABORTED"));
    assert_non_null(strstr(err.msg, "refresh"));

    /* The library does the refresh itself: one refresh, then success at the new epoch. */
    assert_int_equal(ts_cluster_shard_status(cl, first, &r, NULL), TS_OK);
    assert_int_equal(r->shard_id, first);
    assert_int_equal(r->epoch, e2);
    tessera__v1__shard_status_response__free_unpacked(r, NULL);
    assert_int_equal(ts_cluster_refreshes(cl), 1);
    assert_int_equal(ts_cluster_epoch(cl), e2);

    ts_cluster_close(cl);
    ts_master_close(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stale_map_is_refused_then_refreshed),
    };
    if (argc < 2) {
        fprintf(stderr, "usage: test_stale_epoch BIN_DIR (where tessera-master is)\n");
        return 2;
    }
    bin = argv[1];
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
