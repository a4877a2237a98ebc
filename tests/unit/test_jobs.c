/* test_jobs.c - the master's job table with a clock the test controls: how jobs end
 * (finished, failed, abandoned, idle), what is due for release, the limits and the history,
 * one rollback per loss, and the slots of elastic jobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/jobs.h"

static struct jobs *mk(uint32_t max_jobs, uint32_t history, int64_t idle_ms)
{
    struct jobs_cfg cfg = { .max_jobs = max_jobs, .history_max = history, .idle_ms = idle_ms };
    struct jobs *j;

    assert_int_equal(jobs_create(&cfg, &j, NULL), TS_OK);
    return j;
}

/* The job's entry in a listing. */
static struct job_info info(struct jobs *j, const char *id)
{
    struct job_info *v, out = { .state = 0 };
    size_t n;

    assert_int_equal(jobs_list(j, &v, &n, NULL), TS_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].id, id) == 0)
            out = v[i];
    free(v);
    assert_true(out.state != 0);
    return out;
}

static size_t due(struct jobs *j, int64_t now, const char *first)
{
    char ids[8][TS_JOB_ID_MAX + 1];
    size_t n = jobs_due(j, now, ids, 8);

    if (first) {
        assert_true(n >= 1);
        assert_string_equal(ids[0], first);
    }
    return n;
}

static const char *FP = "4a46566458cfa292a2acb4a6e62bab77943f0e83216270ed2c330d22904e6043";

static const char *FP1 = "1111111111111111111111111111111111111111111111111111111111111111";

/* The job's fingerprint is rank 0's, whoever leaves last (asp and ssp workers end on different
 * values); another rank's counts only while rank 0 has not finished. */
static void fingerprint_is_rank_0s(void **state)
{
    struct jobs *j = mk(0, 0, 0);

    (void)state;
    assert_int_equal(jobs_join(j, "a", 1, 0, 3, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 2, 1, 3, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 3, 2, 3, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 2, false, FP1, "", 10);
    assert_string_equal(info(j, "a").fingerprint, FP1);   /* none of rank 0's yet */
    jobs_leave(j, 1, false, FP, "", 20);
    assert_string_equal(info(j, "a").fingerprint, FP);
    jobs_leave(j, 3, false, FP1, "", 30);
    assert_int_equal(info(j, "a").state, JOB_FINISHED);
    assert_string_equal(info(j, "a").fingerprint, FP);
    jobs_free(j);

    /* Rank 0 declared dead (its lease ran out under load) and leaving all the same with its
     * fingerprint: a rank that leaves after it does not replace it (a soak run saw that). */
    j = mk(0, 0, 0);
    assert_int_equal(jobs_join(j, "b", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "b", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 1, 5);
    jobs_leave(j, 1, false, FP, "", 10);
    assert_string_equal(info(j, "b").fingerprint, FP);
    jobs_leave(j, 2, false, FP1, "", 20);
    assert_string_equal(info(j, "b").fingerprint, FP);
    jobs_free(j);

    /* The other order: rank 1 finished first (its fingerprint stands in), then rank 0 was
     * declared dead while it took its own (an elastic job ends as trained), and told it after
     * (the master takes a dead member's Deregister: test_members). */
    j = mk(0, 0, 0);
    assert_int_equal(jobs_join(j, "c", 1, 0, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "c", 2, 1, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 2, false, FP1, "", 10);
    jobs_dead(j, 1, 15);
    assert_int_equal(info(j, "c").state, JOB_FINISHED);   /* trained: nothing is lost */
    assert_string_equal(info(j, "c").fingerprint, FP1);
    jobs_leave(j, 1, false, FP, "", 20);
    assert_string_equal(info(j, "c").fingerprint, FP);
    jobs_free(j);
}

static void finished_then_released(void **state)
{
    struct jobs *j = mk(0, 0, 0);

    (void)state;
    assert_int_equal(jobs_join(j, "a", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    /* a retry */
    assert_int_equal(jobs_join(j, "a", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(info(j, "a").alive, 2);
    jobs_leave(j, 1, false, FP, "", 10);
    assert_int_equal(info(j, "a").state, JOB_RUNNING);
    assert_int_equal(due(j, 10, NULL), 0);
    jobs_leave(j, 2, false, "", "", 20);
    assert_int_equal(info(j, "a").state, JOB_FINISHED);
    assert_string_equal(info(j, "a").fingerprint, FP);
    assert_true(jobs_holds(j, "a"));
    due(j, 20, "a");
    /* Not released yet: a worker of it must wait. */
    struct ts_err e = { 0 };
    assert_int_equal(jobs_join(j, "a", 3, 0, 1, 0, false, false, false, NULL, 30, &e), TS_EUNAVAIL);
    assert_non_null(strstr(e.msg, "retry"));
    jobs_released(j, "a", 40);
    assert_false(jobs_holds(j, "a"));
    assert_true(info(j, "a").released);
    assert_int_equal(due(j, 40, NULL), 0);
    /* The same id again: a new run replaces the summary. */
    assert_int_equal(jobs_join(j, "a", 3, 0, 1, 0, false, false, false, NULL, 50, NULL), TS_OK);
    assert_int_equal(info(j, "a").state, JOB_RUNNING);
    assert_false(info(j, "a").released);
    jobs_free(j);
}

/* A rollback per loss: a second report while one runs, or one of a loss found before a
 * rollback that has run since (it restored the partition), begins none. */
static void rollbacks_once_per_loss(void **state)
{
    struct jobs *j = mk(0, 0, 0);
    struct ts_err e = { 0 };
    uint32_t gen = 0;

    (void)state;
    assert_int_equal(jobs_join(j, "r", 1, 0, 1, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_rollback_begin(j, "r", 0, &gen, NULL), TS_OK);
    assert_int_equal(gen, 1);
    assert_int_equal(jobs_rollback_begin(j, "r", 0, &gen, &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "runs already"));
    jobs_rollback_end(j, "r", true, false, 50, "back to step 50");
    assert_int_equal(info(j, "r").rollbacks, 1);
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_rollback_begin(j, "r", 0, &gen, &e), TS_EEXIST);   /* late report */
    assert_non_null(strstr(e.msg, "since the loss was found"));
    assert_int_equal(info(j, "r").rollbacks, 1);
    assert_int_equal(jobs_rollback_begin(j, "r", 1, &gen, NULL), TS_OK);     /* a new loss */
    assert_int_equal(gen, 2);
    jobs_rollback_end(j, "r", true, false, 100, "back to step 100");
    assert_int_equal(jobs_rollback_begin(j, "nope", 0, &gen, &e), TS_ENOTFOUND);
    jobs_free(j);
}

static void failed_and_abandoned(void **state)
{
    struct jobs *j = mk(0, 0, 0);

    (void)state;
    assert_int_equal(jobs_join(j, "f", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "f", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 1, true, NULL, "data check: partition differs", 5);
    jobs_dead(j, 2, 9);
    assert_int_equal(info(j, "f").state, JOB_FAILED);   /* a failure outranks a death */
    assert_string_equal(info(j, "f").reason, "rank 0: data check: partition differs");
    assert_int_equal(jobs_join(j, "d", 3, 0, 1, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 3, 9);
    jobs_dead(j, 3, 10);   /* twice: no effect */
    assert_int_equal(info(j, "d").state, JOB_ABANDONED);
    assert_non_null(strstr(info(j, "d").reason, "lease expired"));
    assert_int_equal(due(j, 10, NULL), 2);
    jobs_leave(j, 99, false, NULL, NULL, 10);   /* a worker of no job */
    jobs_free(j);
}

static void idle_until_timeout(void **state)
{
    struct jobs *j = mk(0, 0, 1000);

    (void)state;
    assert_int_equal(jobs_join(j, "k", 1, 0, 1, 0, true, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 1, false, FP, "", 100);
    assert_int_equal(info(j, "k").state, JOB_IDLE);
    assert_int_equal(due(j, 1000, NULL), 0);
    /* A later run continues it, with another worker count. */
    assert_int_equal(jobs_join(j, "k", 2, 0, 3, 0, true, false, false, NULL, 1050, NULL), TS_OK);
    assert_int_equal(info(j, "k").workers, 3);
    jobs_leave(j, 2, false, "", "", 1100);
    assert_int_equal(info(j, "k").state, JOB_IDLE);   /* no worker alive: the run is over */
    assert_int_equal(info(j, "k").alive, 0);
    jobs_free(j);
}

static void idle_expires(void **state)
{
    struct jobs *j = mk(0, 0, 1000);

    (void)state;
    assert_int_equal(jobs_join(j, "k", 1, 0, 1, 0, true, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 1, false, FP, "", 100);
    assert_int_equal(due(j, 1100, NULL), 0);
    due(j, 1101, "k");
    assert_int_equal(info(j, "k").state, JOB_FINISHED);
    jobs_free(j);
}

/* One identity holds at most per_owner jobs (issue 41): its next new run is refused naming
 * the flag, whatever room --max-jobs leaves, and changes nothing; other identities, workers
 * joining a run under way, and callers without an identity are not held back; a job that
 * ends and is released gives its owner the room back, and a run started again counts for
 * whoever starts it. */
static void jobs_per_identity(void **state)
{
    struct jobs_cfg cfg = { .max_jobs = 8, .per_owner = 2 };
    struct ts_err e = { 0 };
    struct jobs *j;

    (void)state;
    assert_int_equal(jobs_create(&cfg, &j, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 1, 0, 2, 0, false, false, false, "CN=junk", 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "b", 2, 0, 1, 0, false, false, false, "CN=junk", 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "c", 3, 0, 1, 0, false, false, false, "CN=junk", 0, &e), TS_ENOMEM);
    assert_non_null(strstr(e.msg, "identity 'CN=junk' holds 2 jobs"));
    assert_non_null(strstr(e.msg, "--jobs-per-identity 2"));
    assert_int_equal(jobs_resident(j), 2);                        /* nothing changed */
    assert_false(jobs_holds(j, "c"));
    /* Rank 1 of a run under way is no new job, whoever sends it. */
    assert_int_equal(jobs_join(j, "a", 4, 1, 2, 0, false, false, false, "CN=junk", 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "c", 5, 0, 1, 0, false, false, false, "CN=real", 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "d", 6, 0, 1, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "e", 7, 0, 1, 0, false, false, false, "", 0, NULL), TS_OK);
    assert_string_equal(info(j, "c").owner, "CN=real");
    /* b ends; once released, its owner has room for another. */
    jobs_leave(j, 2, false, "", "", 10);
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "f", 8, 0, 1, 0, false, false, false, "CN=junk", 10, &e), TS_ENOMEM);
    jobs_released(j, "b", 11);
    assert_int_equal(jobs_join(j, "f", 8, 0, 1, 0, false, false, false, "CN=junk", 12, NULL), TS_OK);
    /* A released job run again is a new run of its new owner's. */
    assert_int_equal(jobs_join(j, "b", 9, 0, 1, 0, false, false, false, "CN=real", 13, NULL), TS_OK);
    assert_string_equal(info(j, "b").owner, "CN=real");
    jobs_free(j);
    cfg.per_owner = JOBS_MAX + 1;
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_create(&cfg, &j, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "--jobs-per-identity"));
}

/* A kept job stays idle while a shard says it holds it; one that no shard holds for the
 * grace (it never registered a tensor) is finished and due, as are none without a grace
 * (no shard to ask). A shard's report of a job the master does not hold says so. */
static void idle_without_a_shard_is_finished(void **state)
{
    struct jobs *j = mk(0, 0, 3600000);

    (void)state;
    assert_int_equal(jobs_join(j, "held", 1, 0, 1, 0, true, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "junk", 2, 0, 1, 0, true, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 1, false, FP, "", 100);
    jobs_leave(j, 2, false, "", "", 100);
    assert_true(jobs_note_held(j, "held", 500));
    assert_false(jobs_note_held(j, "unknown", 500));
    assert_int_equal(jobs_reclaim_unheld(j, 100000, 0), 0);      /* no grace: nothing */
    assert_int_equal(jobs_reclaim_unheld(j, 2100, 2000), 0);     /* idle since 100 */
    assert_int_equal(jobs_reclaim_unheld(j, 2101, 2000), 1);
    assert_int_equal(info(j, "junk").state, JOB_FINISHED);
    assert_int_equal(info(j, "held").state, JOB_IDLE);           /* held at 500 */
    due(j, 2101, "junk");
    assert_true(jobs_note_held(j, "held", 4000));
    assert_int_equal(jobs_reclaim_unheld(j, 6000, 2000), 0);
    assert_int_equal(jobs_reclaim_unheld(j, 6001, 2000), 1);     /* its shards let it go */
    assert_int_equal(info(j, "held").state, JOB_FINISHED);
    assert_string_equal(info(j, "held").fingerprint, FP);
    jobs_free(j);
}

static void limits_and_fields(void **state)
{
    struct jobs *j = mk(2, 2, 0);
    struct ts_err e = { 0 };

    (void)state;
    assert_int_equal(jobs_join(j, "", 1, 0, 1, 0, false, false, false, NULL, 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job"));
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "a", 1, 2, 2, 0, false, false, false, NULL, 0, &e), TS_EINVAL);
    assert_true(strncmp(e.msg, "rank", 4) == 0);
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "a", 1, 0, 0, 0, false, false, false, NULL, 0, &e), TS_EINVAL);
    assert_true(strncmp(e.msg, "workers", 7) == 0);
    assert_int_equal(jobs_join(j, "a", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "a", 2, 1, 3, 0, false, false, false, NULL, 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "runs with 2"));
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "a", 2, 0, 2, 0, false, false, false, NULL, 0, &e), TS_EEXIST);
    assert_true(strncmp(e.msg, "rank", 4) == 0);
    e = (struct ts_err){ 0 };
    /* Worker 1 is in job a. */
    assert_int_equal(jobs_join(j, "b", 1, 0, 1, 0, false, false, false, NULL, 0, &e), TS_EEXIST);
    assert_int_equal(jobs_join(j, "b", 3, 0, 1, 0, false, false, false, NULL, 0, NULL), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(jobs_join(j, "c", 4, 0, 1, 0, false, false, false, NULL, 0, &e), TS_ENOMEM);
    assert_non_null(strstr(e.msg, "--max-jobs"));
    assert_int_equal(info(j, "a").alive, 1);   /* refusals changed nothing */
    /* Ended and released jobs free room; summaries beyond history_max are forgotten. */
    for (uint32_t w = 10; w < 20; w++) {
        char id[8];
        snprintf(id, sizeof(id), "s%u", w);
        jobs_leave(j, 3, false, "", "", w);
        jobs_released(j, "b", w);
        assert_int_equal(jobs_join(j, id, w, 0, 1, 0, false, false, false, NULL, w, NULL), TS_OK);
        jobs_leave(j, w, false, "", "", w);
        jobs_released(j, id, w);
        (void)due(j, w, NULL);
    }
    struct job_info *v;
    size_t n;
    assert_int_equal(jobs_list(j, &v, &n, NULL), TS_OK);
    assert_int_equal(n, 3);                      /* a (running) and two summaries */
    assert_string_equal(v[0].id, "a");
    free(v);
    jobs_free(j);
}

/* A restarted master's table: the records of the old one give the same listing; the workers
 * keep their seats (one that finishes afterwards ends the job with its fingerprint); a
 * rollback that was running is handed back to be run again; a record that cannot be (a
 * worker in two jobs) is refused with the table left empty. */
static void restored_from_records(void **state)
{
    struct jobs *j = mk(0, 0, 0), *r = mk(0, 0, 0), *bad = mk(0, 0, 0);
    char rerun[4][TS_JOB_ID_MAX + 1];
    struct job_record *rec;
    struct ts_err e = { 0 };
    uint32_t gen;
    size_t n, nrerun;

    (void)state;
    assert_int_equal(jobs_join(j, "a", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 1, false, "", "", 5);
    assert_int_equal(jobs_join(j, "b", 3, 0, 1, 0, true, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_rollback_begin(j, "b", 0, &gen, NULL), TS_OK);
    assert_int_equal(jobs_export(j, &rec, &n, NULL), TS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(jobs_restore(r, rec, n, 100, rerun, 4, &nrerun, NULL), TS_OK);
    assert_int_equal(nrerun, 1);
    assert_string_equal(rerun[0], "b");
    assert_false(info(r, "b").rolling_back);
    assert_true(info(r, "b").keep);
    assert_int_equal(info(r, "a").alive, 1);
    assert_int_equal(info(r, "a").finished, 1);
    assert_int_equal(jobs_restore(r, rec, n, 100, rerun, 4, &nrerun, &e), TS_ESTATE);
    jobs_leave(r, 2, false, "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12",
               "", 200);
    assert_int_equal(info(r, "a").state, JOB_FINISHED);
    assert_string_equal(info(r, "a").fingerprint,
                        "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12");
    rec[1].seats[0].worker = 2;   /* job b's worker is job a's too */
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_restore(bad, rec, n, 100, rerun, 4, &nrerun, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "worker 2 is in job"));
    assert_int_equal(jobs_resident(bad), 0);
    jobs_records_free(rec, n);
    jobs_free(j);
    jobs_free(r);
    jobs_free(bad);
}

/* Worker w's slots as a string ("0,2"), and the roster in *roster; "-" in no running job. */
static const char *slots_of(struct jobs *j, uint32_t w, uint64_t *roster)
{
    static char out[64];
    uint32_t v[16];
    int n = jobs_slots(j, w, roster, v, 16);
    size_t at = 0;

    out[0] = '\0';
    if (n < 0)
        return "-";
    for (int k = 0; k < n; k++)
        at += (size_t)snprintf(out + at, sizeof(out) - at, "%s%u", k ? "," : "", v[k]);
    return out;
}

/* A table restored from j's records, as a restarted master's. */
static struct jobs *restarted(struct jobs *j)
{
    struct jobs *k = mk(0, 0, 0);
    struct job_record *r;
    char rerun[2][TS_JOB_ID_MAX + 1];
    size_t n, nrerun;

    assert_int_equal(jobs_export(j, &r, &n, NULL), TS_OK);
    assert_int_equal(jobs_restore(k, r, n, 0, rerun, 2, &nrerun, NULL), TS_OK);
    jobs_records_free(r, n);
    return k;
}

/* A dead worker's slot goes to the live worker owning the fewest (lowest rank on a tie), the
 * roster grows at each change, the job is not abandoned while a worker lives, and the rank's
 * slot goes back to a new worker of that rank, or to the same worker coming back. */
/* A job of JOBS_MAX_WORKERS workers (65,536): each registration answers from the seat
 * indexes (services/master/seats.h), each worker owns its own slot and finds it without a scan
 * of the others, a second worker for a live rank is refused, a dead worker's slot goes to the
 * worker owning the fewest (the lowest rank), and one more worker than the cap is refused.
 * With a scan of the job's seats per question this took hours (O(W^3)); it is not timed here
 * (bench_rpc_latency measures registration), but ctest's timeout would stop a regression. */
static void a_job_of_the_most_workers(void **state)
{
    const uint32_t w = JOBS_MAX_WORKERS, base = 1000;
    struct jobs *j = mk(0, 0, 0);
    struct ts_err e = { 0 };
    uint32_t slots[4];
    uint64_t roster;

    (void)state;
    for (uint32_t r = 0; r < w; r++)
        assert_int_equal(jobs_join(j, "big", base + r, r, w, 0, false, true, false, NULL, 0,
                                   NULL), TS_OK);
    assert_int_equal(info(j, "big").alive, w);
    for (uint32_t r = 0; r < w; r += 997) {
        assert_int_equal(jobs_slots(j, base + r, &roster, slots, 4), 1);
        assert_int_equal(slots[0], r);
    }
    assert_int_equal(roster, 0);
    assert_int_equal(jobs_join(j, "big", 99, 7, w, 0, false, true, false, NULL, 1, &e),
                     TS_EEXIST);
    assert_non_null(strstr(e.msg, "rank: 7 of job 'big' is worker 1007"));
    jobs_dead(j, base + 5, 2);
    assert_int_equal(jobs_slots(j, base, &roster, slots, 4), 2);   /* rank 0: the lowest */
    assert_int_equal(slots[0], 0);
    assert_int_equal(slots[1], 5);
    assert_int_equal(roster, 1);
    assert_int_equal(jobs_slots(j, base + 5, &roster, slots, 4), -1);
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_join(j, "big2", 1, 0, w + 1, 0, false, true, false, NULL, 3, &e),
                     TS_EINVAL);
    assert_non_null(strstr(e.msg, "workers: 65537, want 1..65536"));
    jobs_free(j);
}

static void elastic_slots_move(void **state)
{
    struct jobs *j = mk(0, 0, 0);
    char ids[4][TS_JOB_ID_MAX + 1];
    uint64_t roster, rosters[4];
    struct ts_err e = { 0 };

    (void)state;
    for (uint32_t r = 0; r < 3; r++)
        assert_int_equal(jobs_join(j, "e", 10 + r, r, 3, 0, false, true, false, NULL, 0, NULL), TS_OK);
    assert_string_equal(slots_of(j, 11, &roster), "1");
    assert_int_equal(roster, 0);   /* first owners change nothing */
    assert_int_equal(jobs_rosters(j, ids, rosters, 4), 0);
    jobs_dead(j, 11, 5);
    assert_string_equal(slots_of(j, 10, &roster), "0,1");
    assert_string_equal(slots_of(j, 12, &roster), "2");
    assert_int_equal(roster, 1);
    assert_int_equal(info(j, "e").state, JOB_RUNNING);
    assert_int_equal(info(j, "e").adopted, 1);
    assert_int_equal(jobs_rosters(j, ids, rosters, 4), 1);
    assert_string_equal(ids[0], "e");
    assert_int_equal(rosters[0], 1);
    jobs_dead(j, 10, 6);          /* both its slots go to the one left */
    assert_string_equal(slots_of(j, 12, &roster), "0,1,2");
    assert_int_equal(roster, 2);
    /* A new worker for rank 1 gets slot 1 back once it caught up; worker 10 comes back for
     * rank 0 the same way. */
    assert_int_equal(jobs_join(j, "e", 20, 1, 3, 0, false, true, false, NULL, 7, NULL), TS_OK);
    assert_string_equal(slots_of(j, 20, &roster), "");
    assert_int_equal(roster, 2);
    jobs_ready(j, 20);
    assert_string_equal(slots_of(j, 20, &roster), "1");
    assert_int_equal(jobs_join(j, "e", 10, 0, 3, 0, false, true, false, NULL, 8, NULL), TS_OK);
    assert_string_equal(slots_of(j, 10, &roster), "");
    jobs_ready(j, 10);
    assert_string_equal(slots_of(j, 10, &roster), "0");
    assert_string_equal(slots_of(j, 12, &roster), "2");
    assert_int_equal(roster, 4);
    /* A worker cannot come back as another rank. */
    assert_int_equal(jobs_join(j, "e", 12, 1, 3, 0, false, true, false, NULL, 9, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "rank: 1, but worker 12 is rank 2"));
    memset(&e, 0, sizeof(e));
    /* Worker 11 comes back too late: rank 1 is worker 20's now. */
    assert_int_equal(jobs_join(j, "e", 11, 1, 3, 0, false, true, false, NULL, 9, &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "rank: 1"));
    assert_string_equal(slots_of(j, 11, &roster), "-");
    /* Settings must match the running job's. */
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_join(j, "e", 30, 2, 3, 0, false, false, false, NULL, 9, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "elastic:"));
    /* Everyone finishes: finished, not abandoned, though workers died. */
    jobs_leave(j, 10, false, FP, "", 10);
    jobs_leave(j, 12, false, FP, "", 10);
    jobs_leave(j, 20, false, FP, "", 10);
    assert_int_equal(info(j, "e").state, JOB_FINISHED);
    jobs_free(j);
}

/* A worker that came back for a rank waits, owning and adopting nothing, while a live worker
 * that caught up holds its slot: it could not compute the step under way. When nobody else is
 * left it takes every slot; a restarted master keeps it waiting. */
static void elastic_waits_until_caught_up(void **state)
{
    struct jobs *j = mk(0, 0, 0), *k;
    uint64_t roster;

    (void)state;
    for (uint32_t q = 0; q < 3; q++)
        assert_int_equal(jobs_join(j, "e", 10 + q, q, 3, 0, false, true, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 10, 1);
    assert_int_equal(jobs_join(j, "e", 20, 0, 3, 0, false, true, false, NULL, 2, NULL), TS_OK);
    assert_string_equal(slots_of(j, 20, &roster), "");
    assert_string_equal(slots_of(j, 11, &roster), "0,1");
    assert_int_equal(roster, 1);
    k = restarted(j);
    assert_string_equal(slots_of(k, 20, &roster), "");
    jobs_ready(k, 20);
    assert_string_equal(slots_of(k, 20, &roster), "0");
    assert_int_equal(roster, 2);
    jobs_dead(j, 11, 3);          /* the one that caught up adopts, not the one waiting */
    assert_string_equal(slots_of(j, 12, &roster), "0,1,2");
    assert_string_equal(slots_of(j, 20, &roster), "");
    jobs_dead(j, 12, 4);          /* nobody else left: the waiting one takes them all */
    assert_string_equal(slots_of(j, 20, &roster), "0,1,2");
    assert_int_equal(info(j, "e").state, JOB_RUNNING);
    jobs_ready(j, 20);            /* changes nothing now */
    assert_string_equal(slots_of(j, 20, &roster), "0,1,2");
    assert_int_equal(roster, 3);
    jobs_free(j);
    jobs_free(k);
}

/* A job that starts with 2 of its 4 ranks: once both came, the other slots go to them evenly,
 * and the roster grows (a worker may have begun a step without them: the roster wakes it); a
 * worker that joins for rank 2 later waits, then takes slot 2. start_workers is checked. */
static void elastic_starts_narrow(void **state)
{
    struct jobs *j = mk(0, 0, 0);
    struct ts_err e = { 0 };
    uint64_t roster;

    (void)state;
    assert_int_equal(jobs_join(j, "w", 10, 0, 4, 2, false, true, false, NULL, 0, NULL), TS_OK);
    assert_string_equal(slots_of(j, 10, &roster), "0");   /* rank 1 has not come */
    assert_int_equal(jobs_join(j, "w", 11, 1, 4, 2, false, true, false, NULL, 0, NULL), TS_OK);
    assert_string_equal(slots_of(j, 10, &roster), "0,2");
    assert_string_equal(slots_of(j, 11, &roster), "1,3");
    assert_int_equal(roster, 1);
    assert_int_equal(info(j, "w").adopted, 0);
    assert_int_equal(info(j, "w").start_workers, 2);
    assert_int_equal(jobs_join(j, "w", 12, 2, 4, 0, false, true, false, NULL, 1, NULL), TS_OK);
    assert_string_equal(slots_of(j, 12, &roster), "");
    jobs_ready(j, 12);
    assert_string_equal(slots_of(j, 12, &roster), "2");
    assert_string_equal(slots_of(j, 10, &roster), "0");
    assert_string_equal(slots_of(j, 11, &roster), "1,3");
    assert_int_equal(roster, 2);
    assert_int_equal(jobs_join(j, "x", 20, 0, 4, 5, false, true, false, NULL, 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "start_workers: 5"));
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_join(j, "x", 20, 0, 4, 2, false, false, false, NULL, 0, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "start_workers"));
    /* a joiner (rank 2, above the 2 the job starts with) of a job with no run: refused, not
     * a run of its own that waits for ranks 0 and 1 */
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_join(j, "y", 30, 2, 4, 2, false, true, false, NULL, 0, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "rank: 2 joins job 'y'"));
    /* nor does a restarted rank 0 of a job that ended */
    memset(&e, 0, sizeof(e));
    assert_int_equal(jobs_join(j, "y", 31, 0, 4, 0, false, true, true, NULL, 0, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "restarts: rank 0 was restarted to rejoin job 'y'"));
    {
        struct job_info *v;
        size_t n;

        assert_int_equal(jobs_list(j, &v, &n, NULL), TS_OK);
        for (size_t i = 0; i < n; i++)
            assert_string_not_equal(v[i].id, "y");
        free(v);
    }
    jobs_free(j);
}

/* A restarted master's table has the slots and the roster the old one had. */
static void elastic_slots_restored(void **state)
{
    struct jobs *j = mk(0, 0, 0), *k;
    uint64_t roster;

    (void)state;
    assert_int_equal(jobs_join(j, "e", 1, 0, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "e", 2, 1, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 2, 5);
    k = restarted(j);
    assert_string_equal(slots_of(k, 1, &roster), "0,1");
    assert_int_equal(roster, 1);
    assert_true(info(k, "e").elastic);
    assert_int_equal(info(k, "e").adopted, 1);
    jobs_free(j);
    jobs_free(k);
}

/* Without elastic a dead worker's slot stays: the job is abandoned once the rest are gone. */
static void not_elastic_keeps_slots(void **state)
{
    struct jobs *j = mk(0, 0, 0);
    uint64_t roster;

    (void)state;
    assert_int_equal(jobs_join(j, "n", 1, 0, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "n", 2, 1, 2, 0, false, false, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 2, 5);
    assert_string_equal(slots_of(j, 1, &roster), "0");
    assert_int_equal(roster, 0);
    jobs_leave(j, 1, false, FP, "", 10);
    assert_int_equal(info(j, "n").state, JOB_ABANDONED);
    jobs_free(j);
}

/* The last worker of an elastic job dies after another finished (issue 44). The training was
 * over (bsp: the finished worker had pulled the last step), so a kept job stays idle, with
 * the finished worker's fingerprint and nothing to release, and a later run trains on from
 * it; one not kept is finished. A death before anyone finished still abandons the job, a
 * failure still fails it, and without elastic workers (ssp, asp: a finished worker says
 * nothing of the others' steps) the job is abandoned as before. A restarted master's table
 * (the dying worker's seat alive in it) decides the same. */
static void death_after_the_training_ended(void **state)
{
    struct jobs *j = mk(0, 0, 0), *k;

    (void)state;
    assert_int_equal(jobs_join(j, "k", 1, 0, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "k", 2, 1, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 2, false, FP1, "", 10);
    jobs_dead(j, 1, 11);
    assert_int_equal(info(j, "k").state, JOB_IDLE);
    assert_string_equal(info(j, "k").fingerprint, FP1);
    assert_string_equal(info(j, "k").reason, "");
    assert_int_equal(info(j, "k").finished, 1);
    assert_int_equal(due(j, 12, NULL), 0);   /* the shards keep it */
    assert_int_equal(jobs_join(j, "k", 3, 0, 2, 0, true, true, false, NULL, 20, NULL), TS_OK);
    assert_int_equal(info(j, "k").state, JOB_RUNNING);

    assert_int_equal(jobs_join(j, "f", 4, 0, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "f", 5, 1, 2, 0, false, true, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 4, false, FP, "", 10);
    jobs_dead(j, 5, 11);
    assert_int_equal(info(j, "f").state, JOB_FINISHED);
    assert_string_equal(info(j, "f").fingerprint, FP);

    assert_int_equal(jobs_join(j, "a", 6, 0, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "a", 7, 1, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    jobs_dead(j, 6, 10);
    jobs_dead(j, 7, 11);
    assert_int_equal(info(j, "a").state, JOB_ABANDONED);

    for (uint32_t r = 0; r < 3; r++)
        assert_int_equal(jobs_join(j, "x", 8 + r, r, 3, 0, true, true, false, NULL, 0, NULL),
                         TS_OK);
    jobs_leave(j, 8, true, NULL, "out of memory", 10);
    jobs_leave(j, 9, false, FP, "", 10);
    jobs_dead(j, 10, 11);
    assert_int_equal(info(j, "x").state, JOB_FAILED);

    assert_int_equal(jobs_join(j, "n", 11, 0, 2, 0, true, false, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "n", 12, 1, 2, 0, true, false, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 11, false, FP, "", 10);
    jobs_dead(j, 12, 11);
    assert_int_equal(info(j, "n").state, JOB_ABANDONED);

    assert_int_equal(jobs_join(j, "r", 13, 0, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "r", 14, 1, 2, 0, true, true, false, NULL, 0, NULL), TS_OK);
    jobs_leave(j, 14, false, FP1, "", 10);
    k = restarted(j);
    jobs_dead(k, 13, 20);
    assert_int_equal(info(k, "r").state, JOB_IDLE);
    assert_string_equal(info(k, "r").fingerprint, FP1);
    jobs_free(j);
    jobs_free(k);
}

/* Balance: a job of 8 slots and 2 workers, rank 1 twice as slow per slot, ends at 5 slots
 * and 3 (predicted 6, was 8: one move; 6 and 2 is as fast but takes two); each worker keeps
 * its own slot; a speed that saves under
 * JOBS_BALANCE_GAIN moves nothing; bad speeds are refused naming the field and change
 * nothing. */
static void balance_moves_slots_by_speed(void **state)
{
    struct jobs *j = mk(0, 0, 0);
    struct ts_err e = { 0 };
    uint64_t roster, was;

    (void)state;
    assert_int_equal(jobs_join(j, "b", 10, 0, 8, 2, false, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "b", 11, 1, 8, 2, false, true, false, NULL, 0, NULL), TS_OK);
    jobs_balance(j, 10);
    assert_string_equal(slots_of(j, 10, &roster), "0,2,4,6");
    assert_int_equal(jobs_speed(j, 10, 0.001, 4, 0, NULL), TS_OK);   /* one measured: wait */
    assert_string_equal(slots_of(j, 10, &was), "0,2,4,6");
    assert_int_equal(was, roster);
    assert_int_equal(jobs_speed(j, 11, 0.002, 4, 2000, NULL), TS_OK);
    assert_string_equal(slots_of(j, 10, &was), "0,2,4,6,7");
    assert_string_equal(slots_of(j, 11, &was), "1,3,5");
    assert_int_equal(was, roster + 1);
    assert_int_equal(info(j, "b").balanced, 1);
    /* 5 x 1.0 against 3 x 2.1: 6.3; 6 x 1.0 and 2 x 2.1 is 6.0, under 10% less: stays. */
    assert_int_equal(jobs_speed(j, 11, 0.0021, 3, 4000, NULL), TS_OK);
    assert_string_equal(slots_of(j, 11, &was), "1,3,5");
    assert_int_equal(was, roster + 1);
    /* Refused, named, nothing kept. */
    assert_int_equal(jobs_speed(j, 11, 0, 3, 6000, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "slot_seconds"));
    ts_err_clear(&e);
    assert_int_equal(jobs_speed(j, 11, -1, 3, 6000, &e), TS_EINVAL);
    ts_err_clear(&e);
    assert_int_equal(jobs_speed(j, 11, 0.5, -3, 6000, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "speed_slots"));
    ts_err_clear(&e);
    assert_int_equal(jobs_speed(j, 11, 0.5, 9, 6000, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "speed_slots: 9, but job 'b' has 8 slots"));
    assert_string_equal(slots_of(j, 11, &was), "1,3,5");
    assert_int_equal(was, roster + 1);
    /* Rank 0 slows down to 4x rank 1: everything but rank 0's own slot goes to rank 1. */
    assert_int_equal(jobs_speed(j, 10, 0.0084, 5, 8000, NULL), TS_OK);
    assert_string_equal(slots_of(j, 10, &was), "0");
    assert_int_equal(was, roster + 2);
    /* A death: its slots go by speed at once, to the one left. */
    jobs_dead(j, 10, 9000);
    assert_string_equal(slots_of(j, 11, &was), "0,1,2,3,4,5,6,7");
    jobs_free(j);
}

/* The start deadline (docs/elastic.md, "A rank that never came"): ranks 0 and 1 of 3
 * register, rank 2 never does (its process died before). Until the deadline, counted from the
 * first registration, slot 2 has no owner; then it goes to the least loaded live worker, as a
 * dead worker's would, counted in adopted. Rank 2 registering late waits, then takes its slot
 * back. A restarted master counts the deadline from its restart; in a job that starts narrow
 * the late ranks' slots go too; a deadline of 0, or a job without elastic workers, gives no
 * slot out. */
static void a_rank_that_never_came(void **state)
{
    struct jobs_cfg cfg = { .start_deadline_ms = 10000 };
    struct jobs *j, *k, *off = mk(0, 0, 0);
    struct job_record *r;
    char rerun[2][TS_JOB_ID_MAX + 1];
    uint32_t owners[4];
    uint64_t roster;
    size_t n, nrerun;

    (void)state;
    assert_int_equal(jobs_create(&cfg, &j, NULL), TS_OK);
    assert_int_equal(jobs_create(&cfg, &k, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "s", 10, 0, 3, 0, false, true, false, NULL, 1000, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "s", 11, 1, 3, 0, false, true, false, NULL, 3000, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "n", 20, 0, 3, 0, false, false, false, NULL, 1000, NULL), TS_OK);
    assert_int_equal(jobs_join(j, "w", 30, 0, 4, 2, false, true, false, NULL, 1000, NULL), TS_OK);
    assert_int_equal(jobs_join(off, "s", 10, 0, 3, 0, false, true, false, NULL, 0, NULL), TS_OK);
    assert_int_equal(jobs_export(j, &r, &n, NULL), TS_OK);   /* before the deadline */
    jobs_start_deadline(j, 10999);
    assert_int_equal(jobs_owners(j, "s", owners, 3), 3);
    assert_int_equal(owners[2], 0);
    assert_string_equal(slots_of(j, 10, &roster), "0");
    assert_int_equal(roster, 0);
    jobs_start_deadline(j, 11000);
    assert_string_equal(slots_of(j, 10, &roster), "0,2");
    assert_string_equal(slots_of(j, 11, &roster), "1");
    assert_int_equal(roster, 1);
    assert_int_equal(info(j, "s").adopted, 1);
    assert_int_equal(info(j, "s").state, JOB_RUNNING);
    assert_string_equal(slots_of(j, 30, &roster), "0,1,2,3");   /* slot 1 overdue, 2, 3 late */
    assert_int_equal(info(j, "w").adopted, 1);
    assert_int_equal(jobs_owners(j, "n", owners, 3), 3);        /* not elastic: it waits */
    assert_int_equal(owners[1], 0);
    assert_int_equal(owners[2], 0);
    jobs_start_deadline(j, 30000);                              /* once */
    assert_int_equal(info(j, "s").adopted, 1);
    /* Rank 2 comes after all: it waits until it caught up, then takes its slot back. */
    assert_int_equal(jobs_join(j, "s", 12, 2, 3, 0, false, true, false, NULL, 31000, NULL), TS_OK);
    assert_string_equal(slots_of(j, 12, &roster), "");
    assert_string_equal(slots_of(j, 10, &roster), "0,2");
    jobs_ready(j, 12);
    assert_string_equal(slots_of(j, 12, &roster), "2");
    assert_string_equal(slots_of(j, 10, &roster), "0");
    assert_int_equal(roster, 2);
    jobs_leave(j, 10, false, FP, "", 40000);
    jobs_leave(j, 11, false, FP, "", 40000);
    jobs_leave(j, 12, false, FP, "", 40000);
    assert_int_equal(info(j, "s").state, JOB_FINISHED);
    /* A master restarted at 50000 with the records from before the deadline. */
    assert_int_equal(jobs_restore(k, r, n, 50000, rerun, 2, &nrerun, NULL), TS_OK);
    jobs_start_deadline(k, 59999);
    assert_int_equal(jobs_owners(k, "s", owners, 3), 3);
    assert_int_equal(owners[2], 0);
    jobs_start_deadline(k, 60000);
    assert_string_equal(slots_of(k, 10, &roster), "0,2");
    jobs_start_deadline(off, INT64_C(1) << 40);
    assert_int_equal(jobs_owners(off, "s", owners, 3), 3);
    assert_int_equal(owners[1], 0);
    jobs_records_free(r, n);
    jobs_free(j);
    jobs_free(k);
    jobs_free(off);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finished_then_released), cmocka_unit_test(fingerprint_is_rank_0s),
        cmocka_unit_test(failed_and_abandoned),
        cmocka_unit_test(idle_until_timeout),     cmocka_unit_test(idle_expires),
        cmocka_unit_test(limits_and_fields),      cmocka_unit_test(rollbacks_once_per_loss),
        cmocka_unit_test(jobs_per_identity), cmocka_unit_test(idle_without_a_shard_is_finished),
        cmocka_unit_test(restored_from_records),  cmocka_unit_test(elastic_slots_move),
        cmocka_unit_test(not_elastic_keeps_slots), cmocka_unit_test(elastic_slots_restored),
        cmocka_unit_test(elastic_waits_until_caught_up), cmocka_unit_test(elastic_starts_narrow),
        cmocka_unit_test(balance_moves_slots_by_speed),
        cmocka_unit_test(death_after_the_training_ended),
        cmocka_unit_test(a_rank_that_never_came),
        cmocka_unit_test(a_job_of_the_most_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
