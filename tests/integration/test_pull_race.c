/* test_pull_race.c - an elastic worker's bsp pull is answered with the values of the version
 * it names, even when a step completes while the reply is on its way (docs/elastic.md, "Pulls
 * in elastic jobs"). Real master and shard processes; the shard runs with
 * TESSERA_TEST_PULL_DELAY_MS (services/shard/testhooks.h), which holds every pull between
 * taking its values and sending them, so the step that completes in between is certain, not
 * a matter of load. A raw connection greeted as an elastic worker asks for version 1 of a
 * one-worker job; the job's worker then pushes step 1, which completes version 2 during the
 * delay. The reply must say version 1 and carry version 1's values. A shard that sent such a
 * pull straight from the partition (as before the fix) sends version 2's values instead.
 * A plain (not elastic) connection is not tested for this: in bsp nobody completes a step
 * without its pushes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessera.h"
#include "transport/frame.h"
#include "transport/transport.h"
#include "util/log.h"

#define N 1000
#define DELAY_MS "400"

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

static void elastic_pull_during_a_step(const char *transport, const char *job)
{
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = transport };
    struct ts_frame_hdr pull = { .type = TS_FRAME_PULL, .tensor = 0, .partition = 0,
                                 .step = 1, .rank = 0, .dtype = 1 }, h;
    static float v1[N], v2[N], got[N], g[N];
    static int64_t fixed[N];
    uint64_t shape[1] = { N };
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
    if (tessera_step(t, 0, (const void *[]){ fixed }, (float *[]){ v1 }, &e))   /* version 1 */
        fail_msg("%s", e.message);

    c = harness_connect(transport, job, TS_HELLO_ELASTIC, 7);
    assert_non_null(c);
    assert_int_equal(ts_frame_send(c, &pull, NULL, 0, NULL), TS_OK);
    /* The shard holds that pull for DELAY_MS; this step completes version 2 meanwhile (its
     * own pull waits as long). */
    if (tessera_step(t, 1, (const void *[]){ fixed }, (float *[]){ v2 }, &e))
        fail_msg("%s", e.message);
    assert_memory_not_equal(v1, v2, sizeof(v1));
    assert_int_equal(ts_frame_recv(c, &h, got, sizeof(got), 5000, NULL), TS_OK);
    assert_int_equal(h.type, TS_FRAME_PARAMS);
    assert_int_equal(h.step, 1);
    assert_int_equal(h.len, sizeof(got));
    if (memcmp(got, v2, sizeof(got)) == 0)
        fail_msg("the pull of version 1 carried version 2's values: a step completed while "
                 "the reply was sent, and it was sent straight from the partition");
    assert_memory_equal(got, v1, sizeof(got));
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
