/* test_cluster.c - lib/cluster without a cluster: the words and lookups the CLI and the SDK
 * share, the master address and call deadline a process starts with, and the choice of a
 * shard's data-plane transport from what the map publishes (real listeners, no processes),
 * and the shard map as deltas: the master's side (services/master/maphist.c) and the
 * caller's (mapdelta.c) together.
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
#include "cluster/mapdelta.h"
#include "master/maphist.h"
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

/* A shard entry of a test map: id, address, joining, one endpoint. */
static Tessera__V1__ShardInfo *info(uint32_t id, const char *addr, bool joining)
{
    Tessera__V1__ShardInfo *s = calloc(1, sizeof(*s));
    Tessera__V1__DataPlaneEndpoint *d = calloc(1, sizeof(*d));

    tessera__v1__shard_info__init(s);
    tessera__v1__data_plane_endpoint__init(d);
    s->id = id;
    s->addr = strdup(addr);
    s->instance = strdup(addr);
    s->joining = joining;
    s->last_heartbeat_ms_ago = id * 7;   /* moves on every call: outside the hash */
    d->transport = strdup("tcp");
    d->address.data = (uint8_t *)strdup(addr);
    d->address.len = strlen(addr);
    s->data_planes = calloc(1, sizeof(*s->data_planes));
    s->data_planes[0] = d;
    s->n_data_planes = 1;
    return s;
}

/* A whole map of n shards (ids ascending), as the master hands it out, noted in h. */
static Tessera__V1__ShardMap *whole(struct maphist *h, uint64_t epoch,
                                    Tessera__V1__ShardInfo **v, size_t n)
{
    Tessera__V1__ShardMap *m = calloc(1, sizeof(*m));
    uint32_t ids[16];
    uint64_t hs[16];

    tessera__v1__shard_map__init(m);
    m->epoch = epoch;
    m->vnodes = 64;
    m->replicas = 2;
    m->digest = epoch * 31;
    m->shards = calloc(n + 1, sizeof(*m->shards));
    for (size_t i = 0; i < n; i++) {
        m->shards[i] = v[i];
        ids[i] = v[i]->id;
        hs[i] = ts_shard_info_hash(v[i]);
    }
    m->n_shards = n;
    m->map_hash = ts_shard_map_hash_with(m, hs);
    assert_true(m->map_hash == ts_shard_map_hash(m));
    maphist_note(h, epoch, m->map_hash, n, ids, hs);
    return m;
}

/* The delta GetShardMap cuts from cur for a caller holding base (rpc.c's map_delta, on
 * protobuf structs the test owns); NULL when the master would answer whole. */
static Tessera__V1__ShardMap *delta(struct maphist *h, const Tessera__V1__ShardMap *base,
                                    uint64_t base_hash, const Tessera__V1__ShardMap *cur)
{
    Tessera__V1__ShardMap *d = calloc(1, sizeof(*d));
    uint32_t ids[16], removed[16];
    uint64_t hs[16];
    bool changed[16];
    size_t nremoved, kept = 0;

    for (size_t i = 0; i < cur->n_shards; i++) {
        ids[i] = cur->shards[i]->id;
        hs[i] = ts_shard_info_hash(cur->shards[i]);
    }
    if (!maphist_delta(h, base->epoch, base_hash, cur->n_shards, ids, hs, changed, removed, 16,
                       &nremoved)) {
        free(d);
        return NULL;
    }
    *d = *cur;
    d->shards = calloc(cur->n_shards + 1, sizeof(*d->shards));
    for (size_t i = 0; i < cur->n_shards; i++)
        if (changed[i])
            d->shards[kept++] = cur->shards[i];
    d->n_shards = kept;
    d->removed = malloc(sizeof(removed));
    memcpy(d->removed, removed, sizeof(removed));
    d->n_removed = nremoved;
    d->delta_from = base->epoch;
    return d;
}

static void free_shallow(Tessera__V1__ShardMap *m)
{
    if (!m)
        return;
    free(m->shards);
    free(m->removed);
    free(m);
}

/* The master keeps the maps it handed out; a caller holding one gets only what changed (a
 * shard gone, one new, one changed), applies it, and ends with the master's whole map, byte
 * for byte. A delta applied to another map, a wrong base hash or a forgotten epoch is caught:
 * ESTALE, or the whole map. */
static void shard_map_deltas(void **state)
{
    struct maphist h;
    Tessera__V1__ShardInfo *a = info(1, "h:1", false), *b = info(2, "h:2", false),
                           *c = info(3, "h:3", false), *b2 = info(2, "h:2", true),
                           *d = info(4, "h:4", true);
    Tessera__V1__ShardMap *m1, *m2, *dl, *got = NULL, *again = NULL;
    struct ts_err err = { 0 };
    uint8_t x[4096], y[4096];

    (void)state;
    maphist_init(&h);
    m1 = whole(&h, 5, (Tessera__V1__ShardInfo *[]){ a, b, c }, 3);
    /* epoch 6: shard 3 gone, 2 now joining (changed), 4 new; 1 unchanged */
    m2 = whole(&h, 6, (Tessera__V1__ShardInfo *[]){ a, b2, d }, 3);
    assert_true(m1->map_hash != m2->map_hash);
    assert_null(delta(&h, m1, m1->map_hash ^ 1, m2));       /* not the map noted: whole */
    assert_non_null(dl = delta(&h, m1, m1->map_hash, m2));
    assert_int_equal(dl->n_shards, 2);
    assert_int_equal(dl->shards[0]->id, 2);
    assert_int_equal(dl->shards[1]->id, 4);
    assert_int_equal(dl->n_removed, 1);
    assert_int_equal(dl->removed[0], 3);
    assert_int_equal(ts_shard_map_apply(m1, dl, &got, &err), TS_OK);
    assert_int_equal(got->n_shards, 3);
    assert_int_equal(got->delta_from, 0);
    assert_int_equal(got->n_removed, 0);
    assert_true(ts_shard_map_hash(got) == m2->map_hash);
    /* the same bytes as the whole map, but for each shard's heartbeat age */
    for (size_t i = 0; i < 3; i++)
        got->shards[i]->last_heartbeat_ms_ago = m2->shards[i]->last_heartbeat_ms_ago;
    assert_int_equal(tessera__v1__shard_map__get_packed_size(got),
                     tessera__v1__shard_map__get_packed_size(m2));
    tessera__v1__shard_map__pack(got, x);
    tessera__v1__shard_map__pack(m2, y);
    assert_memory_equal(x, y, tessera__v1__shard_map__get_packed_size(m2));
    /* applied to a map of another epoch, or to the delta's own result: refused */
    assert_int_equal(ts_shard_map_apply(m2, dl, &again, &err), TS_ESTALE);
    assert_null(again);
    /* a delta that does not make the master's map (a shard left out): refused by the hash */
    dl->n_shards = 1;
    assert_int_equal(ts_shard_map_apply(m1, dl, &again, &err), TS_ESTALE);
    assert_non_null(strstr(err.msg, "fetch the whole map"));
    dl->n_shards = 2;
    /* no change since the base: an empty delta that applies to the same map */
    free_shallow(dl);
    assert_non_null(dl = delta(&h, m2, m2->map_hash, m2));
    assert_int_equal(dl->n_shards, 0);
    assert_int_equal(dl->n_removed, 0);
    assert_int_equal(ts_shard_map_apply(m2, dl, &again, &err), TS_OK);
    assert_true(ts_shard_map_hash(again) == m2->map_hash);
    tessera__v1__shard_map__free_unpacked(again, NULL);
    free_shallow(dl);
    /* maps older than the MAPHIST_KEEP last are forgotten: whole */
    for (uint64_t e = 7; e < 7 + MAPHIST_KEEP; e++)
        free_shallow(whole(&h, e, (Tessera__V1__ShardInfo *[]){ a }, 1));
    assert_null(delta(&h, m1, m1->map_hash, m2));
    tessera__v1__shard_map__free_unpacked(got, NULL);
    free_shallow(m1);
    free_shallow(m2);
    for (Tessera__V1__ShardInfo **s = (Tessera__V1__ShardInfo *[]){ a, b, c, b2, d, NULL }; *s;
         s++)
        tessera__v1__shard_info__free_unpacked(*s, NULL);
    maphist_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(job_state_words_and_lookup),
        cmocka_unit_test(master_address_and_call_deadline),
        cmocka_unit_test(transport_picked_from_the_map),
        cmocka_unit_test(shard_map_deltas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
