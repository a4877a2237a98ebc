/* test_cluster.c - lib/cluster without a cluster: the words and lookups the CLI and the SDK
 * share, the master address and call deadline a process starts with, and the choice of a
 * shard's data-plane transport from what the map publishes (real listeners, no processes).
 * The calls to a live master and shards are covered by the integration tests
 * (test_stale_epoch, test_placement, test_dataplane). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "transport/transport.h"
#include "util/knobs.h"

static void job_state_words_and_lookup(void **state)
{
    Tessera__V1__JobInfo a = TESSERA__V1__JOB_INFO__INIT, b = TESSERA__V1__JOB_INFO__INIT;
    Tessera__V1__JobInfo *jobs[] = { &a, &b };
    Tessera__V1__ClusterStatusResponse cs = TESSERA__V1__CLUSTER_STATUS_RESPONSE__INIT;

    (void)state;
    assert_string_equal(ts_job_state_name(TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING), "running");
    assert_string_equal(ts_job_state_name(TESSERA__V1__JOB_STATE__JOB_STATE_IDLE), "idle");
    assert_string_equal(ts_job_state_name(TESSERA__V1__JOB_STATE__JOB_STATE_FINISHED),
                        "finished");
    assert_string_equal(ts_job_state_name(TESSERA__V1__JOB_STATE__JOB_STATE_FAILED), "failed");
    assert_string_equal(ts_job_state_name(TESSERA__V1__JOB_STATE__JOB_STATE_ABANDONED),
                        "abandoned");
    assert_string_equal(ts_job_state_name(0), "unknown");
    assert_string_equal(ts_job_state_name(99), "unknown");

    a.id = "mlp";
    b.id = "mlp-2";
    cs.jobs = jobs;
    cs.n_jobs = 2;
    assert_ptr_equal(ts_status_job(&cs, "mlp-2"), &b);
    assert_ptr_equal(ts_status_job(&cs, "mlp"), &a);      /* whole ids, not prefixes */
    assert_null(ts_status_job(&cs, "ml"));
    assert_null(ts_status_job(NULL, "mlp"));
}

static void master_address_and_call_deadline(void **state)
{
    static const struct { const char *env; int want; } ms[] = {
        { "250", 250 }, { "0", TS_MASTER_CALL_MS }, { "-5", TS_MASTER_CALL_MS },
        { "soon", TS_MASTER_CALL_MS }, { "99999999999", TS_MASTER_CALL_MS },
    };

    (void)state;
    unsetenv("TESSERA_MASTER");
    ts_knob_reread();
    assert_string_equal(ts_master_default_addr(NULL), "127.0.0.1:7070");
    assert_string_equal(ts_master_default_addr(""), "127.0.0.1:7070");
    setenv("TESSERA_MASTER", "m.example:7000", 1);
    ts_knob_reread();
    assert_string_equal(ts_master_default_addr(NULL), "m.example:7000");
    assert_string_equal(ts_master_default_addr("10.0.0.1:1"), "10.0.0.1:1");   /* flag wins */
    setenv("TESSERA_MASTER", "", 1);
    ts_knob_reread();
    assert_string_equal(ts_master_default_addr(NULL), "127.0.0.1:7070");
    unsetenv("TESSERA_MASTER");
    ts_knob_reread();

    unsetenv("TESSERA_CALL_TIMEOUT_MS");
    ts_knob_reread();
    assert_int_equal(ts_call_ms_default(), TS_MASTER_CALL_MS);
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
        setenv("TESSERA_CALL_TIMEOUT_MS", ms[i].env, 1);
        ts_knob_reread();
        assert_int_equal(ts_call_ms_default(), ms[i].want);
    }
    unsetenv("TESSERA_CALL_TIMEOUT_MS");
    ts_knob_reread();
}

/* A shard as the map lists it, publishing the endpoints of real listeners. */
static void endpoint(Tessera__V1__DataPlaneEndpoint *d, const char *transport,
                     struct ts_blob *blob)
{
    tessera__v1__data_plane_endpoint__init(d);
    d->transport = (char *)transport;
    d->address.data = blob->data;
    d->address.len = blob->len;
}

static void transport_picked_from_the_map(void **state)
{
    const struct ts_transport_ops *tcp = ts_transport_find("tcp"), *ops = NULL;
    Tessera__V1__DataPlaneEndpoint ep[2], *eps[2] = { &ep[0], &ep[1] };
    Tessera__V1__ShardInfo s = TESSERA__V1__SHARD_INFO__INIT;
    struct ts_listener *l = NULL;
    struct ts_blob addr, got;
    struct ts_err e = { 0 };
    uint8_t junk[] = { 1, 2, 3 };
    struct ts_blob bad = { .len = sizeof(junk) };

    (void)state;
    memcpy(bad.data, junk, sizeof(junk));
    assert_non_null(tcp);
    assert_int_equal(ts_tp_listen(tcp, "127.0.0.1", &l, &addr, &e), TS_OK);
    s.id = 7;
    s.addr = "127.0.0.1:1";
    s.data_planes = eps;

    /* Nothing published: TS_ENODEV naming the shard. */
    assert_int_equal(ts_shard_pick_transport(&s, NULL, &ops, &got, &e), TS_ENODEV);
    assert_non_null(strstr(e.msg, "shard 7"));
    /* An endpoint of a transport this build does not have is passed over. */
    endpoint(&ep[0], "carrier-pigeon", &bad);
    endpoint(&ep[1], "tcp", &addr);
    s.n_data_planes = 2;
    assert_int_equal(ts_shard_pick_transport(&s, NULL, &ops, &got, &e), TS_OK);
    assert_ptr_equal(ops, tcp);
    assert_int_equal(got.len, addr.len);
    assert_memory_equal(got.data, addr.data, addr.len);
    /* --transport names the one to use; one the shard does not publish is refused. */
    assert_int_equal(ts_shard_pick_transport(&s, "tcp", &ops, &got, &e), TS_OK);
    ts_err_clear(&e);
    assert_int_equal(ts_shard_pick_transport(&s, "shm", &ops, &got, &e), TS_ENODEV);
    assert_non_null(strstr(e.msg, "--transport shm"));
    ts_tp_unlisten(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(job_state_words_and_lookup),
        cmocka_unit_test(master_address_and_call_deadline),
        cmocka_unit_test(transport_picked_from_the_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
