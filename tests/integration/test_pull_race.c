/* test_pull_race.c - an elastic worker's bsp pull is answered with the values of the version
 * it names, even when a step completes while the reply is on its way (docs/elastic.md, "Pulls
 * in elastic jobs"). Real master and shard processes; the shard runs with
 * TESSERA_TEST_PULL_DELAY_MS (services/shard/testhooks.h), which holds every pull between
 * taking its values and sending them, so the step that completes in between is near certain,
 * not a matter of load. A raw connection greeted as an elastic worker asks for version v of a
 * one-worker job; the job's worker then pushes step v, which completes version v + 1 during
 * the delay. The reply must say version v and carry version v's values. A shard that sent
 * such a pull straight from the partition (as before the fix) sends version v + 1's values.
 * A try in which the shard took the pull only after the step (a slow wake under load) is
 * tried again, up to TRIES times.
 * A plain (not elastic) connection is not tested for this: in bsp nobody completes a step
 * without its pushes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessera.h"
#include "transport/frame.h"
#include "transport/transport.h"
#include "util/log.h"
#include "util/proc.h"

#define N 1000
#define DELAY_MS "1000"
#define WAKE_MS 300   /* what the shard gets to take a pull before the step that races it */
#define TRIES 5

static const char *bin, *master;

static int setup(void **state)
{
    int bad;

    (void)state;
    setenv("TESSERA_TEST_PULL_DELAY_MS", DELAY_MS, 1);   /* the shard inherits it */
    bad = !(master = harness_master(bin)) || harness_shard(bin, NULL, NULL) < 0 ||
          harness_wait_shards(1);
    unsetenv("TESSERA_TEST_PULL_DELAY_MS");
    return bad ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    harness_stop();
    return 0;
}

/* One try at version v (the SDK's t has just pulled it into vals): a raw elastic pull of v,
 * then, while the shard holds that pull, the step that completes v + 1 (into next). Returns
 * whether the race happened: false when the shard took the pull only after v + 1 was done
 * (a loaded machine can be that slow to wake its connection), which says nothing. */
static bool race_once(tessera *t, struct ts_conn *c, uint64_t v, const int64_t *fixed,
                      const float *vals, float *next)
{
    struct ts_frame_hdr pull = { .type = TS_FRAME_PULL, .tensor = 0, .partition = 0,
                                 .step = v, .rank = 0, .dtype = 1 }, h;
    static float got[N];
    struct tessera_error e;

    assert_int_equal(ts_frame_send(c, &pull, NULL, 0, NULL), TS_OK);
    ts_sleep_ms(WAKE_MS);   /* the shard takes the pull and holds it for DELAY_MS */
    if (tessera_step(t, v, (const void *[]){ fixed }, (float *[]){ next }, &e))
        fail_msg("%s", e.message);
    assert_memory_not_equal(vals, next, N * sizeof(float));
    assert_int_equal(ts_frame_recv(c, &h, got, sizeof(got), 10000, NULL), TS_OK);
    assert_int_equal(h.type, TS_FRAME_PARAMS);
    assert_int_equal(h.len, sizeof(got));
    if (h.step != v) {
        assert_int_equal(h.step, v + 1);
        assert_memory_equal(got, next, sizeof(got));
        return false;
    }
    if (memcmp(got, next, sizeof(got)) == 0)
        fail_msg("the pull of version %" PRIu64 " carried version %" PRIu64 "'s values: a "
                 "step completed while the reply was sent, and it was sent straight from the "
                 "partition", v, v + 1);
    assert_memory_equal(got, vals, sizeof(got));
    return true;
}

static void elastic_pull_during_a_step(const char *transport, const char *job)
{
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = transport };
    static float vals[2][N], g[N];
    static int64_t fixed[N];
    uint64_t shape[1] = { N }, v = 1;
    struct tessera_error e;
    struct ts_conn *c;
    tessera *t;
    int id;

    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e))
        fail_msg("%s", e.message);
    for (int i = 0; i < N; i++)
        g[i] = 0.25f * (float)(i % 5 + 1);
    assert_int_equal(tessera_to_fixed(g, N, fixed, &e), 0);
    if (tessera_step(t, 0, (const void *[]){ fixed }, (float *[]){ vals[1] }, &e))
        fail_msg("%s", e.message);
    c = harness_connect(transport, job, TS_HELLO_ELASTIC, 7);
    assert_non_null(c);
    while (!race_once(t, c, v, fixed, vals[v % 2], vals[(v + 1) % 2])) {
        print_message("%s: the shard took the pull of version %" PRIu64 " after the next "
                      "step; again\n", transport, v);
        if (++v > TRIES)
            fail_msg("the race never happened in %d tries", TRIES);
    }
    ts_tp_close(c);
    tessera_close(t);
}

static void over_tcp(void **state)
{
    (void)state;
    elastic_pull_during_a_step("tcp", "race-tcp");
}

static void over_shm(void **state)
{
    (void)state;
    elastic_pull_during_a_step("shm", "race-shm");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_tcp),
        cmocka_unit_test(over_shm),
    };
    if (argc < 2) {
        fprintf(stderr, "usage: test_pull_race BIN_DIR\n");
        return 2;
    }
    bin = argv[1];
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
