/* test_stale_epoch.c - a client holding an old shard map is refused with ABORTED, and the
 * client library refreshes the map and retries by itself. Real processes on loopback: a
 * tessera-master and shards from the build's bin directory (argv[1]). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/master_client.h"
#include "rpc/rpc.h"
#include "util/log.h"
#include "util/proc.h"

static const char *bin;
static char tmpdir[] = "/tmp/ts-stale.XXXXXX";
static pid_t pids[8];
static int npids;
static char master_addr[64];

static pid_t spawn(char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    assert_true(p > 0);
    pids[npids++] = p;
    return p;
}

static void start_shard(void)
{
    char exe[512];
    char *argv[] = { exe, "--master", master_addr, "--lease-ms", "1000", NULL };
    snprintf(exe, sizeof(exe), "%s/tessera-shard", bin);
    spawn(argv);
}

static int setup(void **state)
{
    char exe[512], port_file[600];
    char *argv[] = { exe, "--listen", "127.0.0.1:0", "--port-file", port_file, NULL };
    int port = 0;

    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(exe, sizeof(exe), "%s/tessera-master", bin);
    snprintf(port_file, sizeof(port_file), "%s/port", tmpdir);
    spawn(argv);
    for (int i = 0; i < 500 && !port; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        ts_sleep_ms(10);
    }
    if (!port)
        return -1;
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%d", port);
    start_shard();
    start_shard();
    return 0;
}

static int teardown(void **state)
{
    char path[600];

    for (int i = npids - 1; i >= 0; i--) {
        kill(pids[i], SIGTERM);
        waitpid(pids[i], NULL, 0);
    }
    snprintf(path, sizeof(path), "%s/port", tmpdir);
    unlink(path);
    rmdir(tmpdir);
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
    assert_int_equal(ts_cluster_locate(cl, "layer0.weight", 0, &owner, NULL), TS_OK);
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
