/* test_workq.c - the master's queues of dynamic jobs (services/master/workq.h), over a state
 * directory faked in memory: grants in order and smaller as the queue runs low, a claim's
 * clock settling the rank's grant, a restarted rank getting the rest of its grant, lost units
 * of dead ranks, a grant that could not be made durable changing nothing, bad claims, a new
 * run, and a queue read back as it was written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/workq.h"

#define STATE_FAKE_FILE "work"
#include "state_fake.h"

static int reset(void **state)
{
    (void)state;
    state_fake_reset();
    return 0;
}

static struct workq *mk(void)
{
    struct workq *q;

    assert_int_equal(workq_create((struct master_state *)&saved, &q, NULL), TS_OK);
    return q;
}

static const bool all_alive[4] = { true, true, true, true };
#define NOSSP ((struct workq_ssp){ false, 0 })

static struct workq_seat seat(uint32_t rank, uint32_t workers)
{
    return (struct workq_seat){ "j", 1000, rank, workers, all_alive };
}

static struct workq_grant claim(struct workq *q, uint32_t rank, uint64_t clock, uint32_t want)
{
    struct workq_seat s = seat(rank, 2);
    struct workq_grant g;

    assert_int_equal(workq_claim(q, &s, clock, want, 40, NOSSP, &g, NULL), TS_OK);
    return g;
}

static void grants_in_order_and_shrink(void **state)
{
    struct workq *q = mk();
    struct workq_grant g;
    uint64_t next = 0, clock[2] = { 0, 0 }, sizes[64];
    size_t n = 0;

    (void)state;
    /* Ranks take turns; each grant follows the last, at most 8, fewer near the end. */
    for (uint32_t r = 0;; r ^= 1) {
        g = claim(q, r, clock[r], 8);
        if (!g.count)
            break;
        assert_int_equal(g.first, next);
        assert_int_equal(g.clock, clock[r]);
        next += g.count;
        clock[r] += g.count;
        sizes[n++] = g.count;
    }
    assert_int_equal(next, 40);
    assert_int_equal(sizes[0], 8);   /* 40 left: a fair half share is 10, want 8 */
    assert_int_equal(sizes[n - 1], 1);
    for (size_t i = 1; i < n; i++)
        assert_true(sizes[i] <= sizes[i - 1]);
    /* Both ranks' last claims settled their grants, but this rank's last is still out. */
    g = claim(q, 0, clock[0], 0);
    assert_int_equal(g.done + g.outstanding, 40);
    g = claim(q, 1, clock[1], 0);
    assert_int_equal(g.done, 40);
    assert_int_equal(g.outstanding, 0);
    workq_free(q);
}

static void restarted_rank_gets_the_rest(void **state)
{
    struct workq *q = mk();
    struct workq_grant g;

    (void)state;
    g = claim(q, 0, 5, 4);   /* a rank whose clock starts at 5: units 0..3 as steps 5..8 */
    assert_int_equal(g.first, 0);
    assert_int_equal(g.clock, 5);
    g = claim(q, 1, 0, 4);
    assert_int_equal(g.first, 4);
    /* Rank 0 restarted after pushing steps 5 and 6: units 2 and 3 again, nothing new. */
    g = claim(q, 0, 7, 4);
    assert_int_equal(g.first, 2);
    assert_int_equal(g.count, 2);
    assert_int_equal(g.clock, 7);
    assert_int_equal(g.done, 2);
    /* And again, at the same clock: the same. */
    g = claim(q, 0, 7, 4);
    assert_int_equal(g.first, 2);
    assert_int_equal(g.count, 2);
    assert_int_equal(g.done, 2);
    /* Past it: new units. */
    g = claim(q, 0, 9, 4);
    assert_int_equal(g.first, 8);
    assert_int_equal(g.done, 4);
    workq_free(q);
}

static void dead_ranks_units_are_lost(void **state)
{
    struct workq *q = mk();
    struct workq_seat s = seat(0, 2);
    struct workq_grant g;
    bool alive[2] = { true, false };

    (void)state;
    claim(q, 0, 0, 4);
    claim(q, 1, 0, 4);
    s.alive = alive;
    assert_int_equal(workq_claim(q, &s, 4, 4, 40, NOSSP, &g, NULL), TS_OK);
    assert_int_equal(g.first, 8);
    assert_int_equal(g.outstanding, 4);
    assert_int_equal(g.lost, 4);
    assert_true(workq_counts(q, "j", 1000, alive, &g));
    assert_int_equal(g.lost, 4);
    assert_true(workq_counts(q, "j", 1000, NULL, &g));
    assert_int_equal(g.lost, 0);
    assert_int_equal(g.outstanding, 8);
    assert_false(workq_counts(q, "j", 999, NULL, &g));
    assert_false(workq_counts(q, "other", 1000, NULL, &g));
    workq_free(q);
}

static void not_durable_changes_nothing(void **state)
{
    struct workq *q = mk();
    struct workq_seat s = seat(1, 2);
    struct workq_grant g;
    struct ts_err e = { 0 };

    (void)state;
    claim(q, 0, 0, 4);
    fail_puts = true;
    assert_int_equal(workq_claim(q, &s, 0, 4, 40, NOSSP, &g, &e), TS_EUNAVAIL);
    assert_non_null(strstr(e.msg, "disk full"));
    assert_non_null(strstr(e.msg, "retry"));
    ts_err_clear(&e);
    s.rank = 0;   /* settling rank 0's grant is a change too: refused as well */
    assert_int_equal(workq_claim(q, &s, 4, 4, 40, NOSSP, &g, &e), TS_EUNAVAIL);
    fail_puts = false;
    g = claim(q, 1, 0, 4);
    assert_int_equal(g.first, 4);
    assert_int_equal(g.done, 0);
    g = claim(q, 0, 4, 4);
    assert_int_equal(g.first, 8);
    assert_int_equal(g.done, 4);
    workq_free(q);
}

static void bad_claims_change_nothing(void **state)
{
    struct workq *q = mk();
    struct workq_seat s = seat(1, 2);
    struct workq_grant g, before;
    struct ts_err e = { 0 };
    int puts_before;

    (void)state;
    claim(q, 0, 0, 4);
    claim(q, 1, 3, 4);
    assert_true(workq_counts(q, "j", 1000, NULL, &before));
    puts_before = puts_done;
    assert_int_equal(workq_claim(q, &s, 3, 257, 40, NOSSP, &g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "want: 257"));
    ts_err_clear(&e);
    assert_int_equal(workq_claim(q, &s, 3, 1, 41, NOSSP, &g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "units: 41"));
    ts_err_clear(&e);
    assert_int_equal(workq_claim(q, &s, 3, 1, 0, NOSSP, &g, &e), TS_EINVAL);
    ts_err_clear(&e);
    assert_int_equal(workq_claim(q, &s, 3, 1, 42, NOSSP, &g, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "units: 42"));
    ts_err_clear(&e);
    assert_int_equal(workq_claim(q, &s, 2, 1, 40, NOSSP, &g, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "clock: 2"));
    ts_err_clear(&e);
    assert_int_equal(workq_claim(q, &s, UINT64_MAX, 1, 40, NOSSP, &g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "clock"));
    assert_true(workq_counts(q, "j", 1000, NULL, &g));
    assert_memory_equal(&g, &before, sizeof(g));
    assert_int_equal(puts_done, puts_before);
    workq_free(q);
}

static void new_run_new_queue(void **state)
{
    struct workq *q = mk();
    struct workq_seat s = seat(0, 2);
    struct workq_grant g;

    (void)state;
    claim(q, 0, 0, 4);
    s.run_ms = 2000;   /* the same job id, run again: from the start, whatever it counts */
    assert_int_equal(workq_claim(q, &s, 0, 4, 60, NOSSP, &g, NULL), TS_OK);
    assert_int_equal(g.first, 0);
    assert_int_equal(g.units, 60);
    assert_false(workq_counts(q, "j", 1000, NULL, &g));
    workq_free(q);
}

static void read_back_as_written(void **state)
{
    struct workq *q = mk(), *again;
    struct workq_grant g, was;

    (void)state;
    claim(q, 0, 0, 4);
    claim(q, 1, 0, 4);
    claim(q, 0, 4, 4);
    assert_true(workq_counts(q, "j", 1000, NULL, &was));
    workq_free(q);
    again = mk();   /* a restarted master */
    assert_true(workq_counts(again, "j", 1000, NULL, &g));
    assert_memory_equal(&g, &was, sizeof(g));
    g = claim(again, 1, 2, 4);   /* rank 1 pushed 2 of its units 4..7: the rest, as before */
    assert_int_equal(g.first, 6);
    assert_int_equal(g.count, 2);
    g = claim(again, 1, 4, 4);
    assert_int_equal(g.first, 12);
    workq_free(again);
    /* A file that does not parse is refused. */
    saved[0] ^= 0xff;
    saved_len = 3;
    assert_int_equal(workq_create((struct master_state *)&saved, &q, NULL), TS_ECORRUPT);
}

/* SSP over the queue: a unit starts only once the units of the steps more than `staleness`
 * before it are in the values the rank computes with; the claim waits for them a while, then
 * says pull (granted) or retry (not yet, the unit kept for the rank). */
static void ssp_bounds_staleness(void **state)
{
    struct workq *q = mk();
    struct workq_seat s0 = seat(0, 2), s1 = seat(1, 2);
    struct workq_ssp ssp = { true, 0 };   /* lock step: step t needs every unit below 2t */
    struct workq_grant g;
    struct ts_err e = { 0 };

    (void)state;
    assert_int_equal(workq_claim(q, &s1, 0, 4, 40, ssp, &g, NULL), TS_OK);
    assert_int_equal(g.first, 0);
    assert_int_equal(g.count, 1);   /* one at a time */
    assert_false(g.retry || g.pull);
    assert_int_equal(workq_claim(q, &s0, 0, 4, 40, ssp, &g, NULL), TS_OK);
    assert_int_equal(g.first, 1);
    /* Rank 0 is done with unit 1; unit 2 (step 1) needs unit 0, which rank 1 holds. */
    assert_int_equal(workq_claim(q, &s0, 1, 4, 40, ssp, &g, NULL), TS_OK);
    assert_true(g.retry);
    assert_int_equal(g.count, 0);
    /* Again at the same clock: the same unit 2 stays rank 0's, still not ready. */
    assert_int_equal(workq_claim(q, &s0, 1, 4, 40, ssp, &g, NULL), TS_OK);
    assert_true(g.retry);
    /* Rank 1 finishes unit 0 and takes unit 3 (step 1): unit 0 was its own, unit 1 was done
     * after its last claim, so it pulls first. */
    assert_int_equal(workq_claim(q, &s1, 1, 4, 40, ssp, &g, NULL), TS_OK);
    assert_int_equal(g.first, 3);
    assert_true(g.pull);
    assert_false(g.retry);
    /* Rank 0's values predate that: unit 2 comes with pull. */
    assert_int_equal(workq_claim(q, &s0, 1, 4, 40, ssp, &g, NULL), TS_OK);
    assert_int_equal(g.first, 2);
    assert_int_equal(g.count, 1);
    assert_true(g.pull);
    assert_false(g.retry);
    /* Another setting for the same run is refused, naming ssp. */
    assert_int_equal(workq_claim(q, &s0, 2, 4, 40, NOSSP, &g, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "ssp:"));
    ts_err_clear(&e);
    ssp.staleness = 2000000;
    assert_int_equal(workq_claim(q, &s0, 2, 4, 40, ssp, &g, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "staleness"));
    workq_free(q);
    /* Staleness 1: a rank may run a step ahead of the slowest unit. */
    reset(NULL);
    q = mk();
    ssp.staleness = 1;
    assert_int_equal(workq_claim(q, &s1, 0, 1, 40, ssp, &g, NULL), TS_OK);   /* unit 0 */
    for (uint64_t c = 0; c < 3; c++) {   /* rank 0: units 1, 2, 3 (steps 0, 1, 1) */
        assert_int_equal(workq_claim(q, &s0, c, 1, 40, ssp, &g, NULL), TS_OK);
        assert_int_equal(g.first, c + 1);
        assert_false(g.retry || g.pull);
    }
    assert_int_equal(workq_claim(q, &s0, 3, 1, 40, ssp, &g, NULL), TS_OK);   /* unit 4: step 2 */
    assert_true(g.retry);
    workq_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(grants_in_order_and_shrink, reset),
        cmocka_unit_test_setup(restarted_rank_gets_the_rest, reset),
        cmocka_unit_test_setup(dead_ranks_units_are_lost, reset),
        cmocka_unit_test_setup(not_durable_changes_nothing, reset),
        cmocka_unit_test_setup(bad_claims_change_nothing, reset),
        cmocka_unit_test_setup(new_run_new_queue, reset),
        cmocka_unit_test_setup(read_back_as_written, reset),
        cmocka_unit_test_setup(ssp_bounds_staleness, reset),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);

    reset(NULL);
    return rc;
}
