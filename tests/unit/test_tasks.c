/* test_tasks.c - the master's queue of priority tasks (services/master/tasks.h): oldest first,
 * handed again to the same worker until its result comes, back to the queue when its worker
 * is gone, results of others or repeated ignored, the limits, and a new run's empty queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "master/tasks.h"

static uint32_t dead_worker;

static bool alive(void *ctx, uint32_t worker)
{
    (void)ctx;
    return worker != dead_worker;
}

static struct task result(uint32_t id, uint64_t step)
{
    struct task r = { .id = id, .state = TASK_DONE, .step = step, .accuracy = 0.5, .loss = 1 };

    memset(r.fingerprint, 'a', 64);
    return r;
}

static void handed_until_done(void **state)
{
    struct tasks *t;
    struct task k, r, v[32];
    uint32_t id;

    (void)state;
    dead_worker = 0;
    assert_int_equal(tasks_create(&t, NULL), TS_OK);
    assert_false(tasks_take(t, "j", 1, 7, alive, NULL, &k));
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 100, &id, NULL), TS_OK);
    assert_int_equal(id, 1);
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 101, &id, NULL), TS_OK);
    assert_true(tasks_take(t, "j", 1, 7, alive, NULL, &k));
    assert_int_equal(k.id, 1);
    assert_true(tasks_take(t, "j", 1, 7, alive, NULL, &k));   /* again, the same */
    assert_int_equal(k.id, 1);
    assert_true(tasks_take(t, "j", 1, 8, alive, NULL, &k));   /* another worker: the next */
    assert_int_equal(k.id, 2);
    r = result(1, 40);
    tasks_done(t, "j", 1, 8, &r, 200);   /* not worker 8's: ignored */
    assert_int_equal(tasks_list(t, "j", 1, v, 32), 2);
    assert_int_equal(v[0].state, TASK_RUNNING);
    tasks_done(t, "j", 1, 7, &r, 200);
    r.step = 99;
    tasks_done(t, "j", 1, 7, &r, 300);   /* sent twice: the first stays */
    assert_int_equal(tasks_list(t, "j", 1, v, 32), 2);
    assert_int_equal(v[0].state, TASK_DONE);
    assert_int_equal(v[0].step, 40);
    assert_int_equal(v[0].done_unix_ms, 200);
    /* Worker 8 died holding task 2: the next worker to call in gets it. */
    dead_worker = 8;
    assert_true(tasks_take(t, "j", 1, 9, alive, NULL, &k));
    assert_int_equal(k.id, 2);
    assert_int_equal(k.worker, 9);
    assert_false(tasks_take(t, "j", 2, 9, alive, NULL, &k));   /* another run: none */
    assert_int_equal(tasks_list(t, "j", 2, v, 32), 0);
    tasks_free(t);
}

static void limits(void **state)
{
    struct tasks *t;
    struct task k, r, v[32];
    struct ts_err e = { 0 };
    uint32_t id;

    (void)state;
    dead_worker = 0;
    assert_int_equal(tasks_create(&t, NULL), TS_OK);
    assert_int_equal(tasks_submit(t, "j", 1, 2, 0, &id, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "kind: 2"));
    for (int i = 0; i < TASKS_MAX_OPEN; i++)
        assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 0, &id, NULL), TS_OK);
    ts_err_clear(&e);
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 0, &id, &e), TS_ENOMEM);
    /* Finish them all, and more: only the last TASKS_KEEP_DONE finished ones are kept. */
    for (int i = 0; i < TASKS_MAX_OPEN + 10; i++) {
        if (i >= TASKS_MAX_OPEN)
            assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 0, &id, NULL), TS_OK);
        assert_true(tasks_take(t, "j", 1, 5, alive, NULL, &k));
        r = result(k.id, (uint64_t)i);
        tasks_done(t, "j", 1, 5, &r, 1);
    }
    assert_int_equal(tasks_list(t, "j", 1, v, 32), TASKS_KEEP_DONE);
    assert_int_equal(v[TASKS_KEEP_DONE - 1].id, TASKS_MAX_OPEN + 10);
    /* Results are checked field by field. */
    r = result(1, 0);
    r.accuracy = 2;
    assert_int_equal(tasks_check_result(&r, &e), TS_EINVAL);
    r = result(1, 0);
    r.fingerprint[3] = 'G';
    ts_err_clear(&e);
    assert_int_equal(tasks_check_result(&r, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "task_done.fingerprint"));
    r = result(1, 0);
    assert_int_equal(tasks_check_result(&r, NULL), TS_OK);
    tasks_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handed_until_done),
        cmocka_unit_test(limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
