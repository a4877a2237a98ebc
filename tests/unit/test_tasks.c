/* test_tasks.c - the master's queue of priority tasks (services/master/tasks.h): oldest first,
 * handed again to the same worker until its result comes, back to the queue when its worker
 * is gone, results of others or repeated ignored, the limits, a new run's empty queue, and,
 * over a state directory faked in memory, tables read back as they were written, a
 * submission that could not be made durable changing nothing, and a corrupt file refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "master/tasks.h"
#include "tessera/v1/state.pb-c.h"

#define STATE_FAKE_FILE "tasks"
#include "state_fake.h"

static struct master_state *const dir = (struct master_state *)&saved;   /* any non-NULL */

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
    assert_int_equal(tasks_create(NULL, &t, NULL), TS_OK);
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
    assert_int_equal(tasks_create(NULL, &t, NULL), TS_OK);
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

/* A master restarted on its state directory has the tasks it acknowledged, as they were, and
 * goes on with the next id. */
static void durable(void **state)
{
    struct tasks *t;
    struct task k, r, v[32], w[32];
    struct ts_err e = { 0 };
    uint32_t id;
    size_t n;

    (void)state;
    dead_worker = 0;
    state_fake_reset();
    assert_int_equal(tasks_create(dir, &t, NULL), TS_OK);   /* no file yet: none */
    assert_int_equal(tasks_list(t, "j", 1, v, 32), 0);
    assert_int_equal(puts_done, 0);
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 100, &id, NULL), TS_OK);
    assert_int_equal(puts_done, 1);                         /* written before the reply */
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 101, &id, NULL), TS_OK);
    assert_int_equal(tasks_submit(t, "k", 7, TASK_EVALUATE, 102, &id, NULL), TS_OK);
    assert_true(tasks_take(t, "j", 1, 7, alive, NULL, &k));
    assert_int_equal(puts_done, 4);                         /* a hand-out is written */
    assert_true(tasks_take(t, "j", 1, 7, alive, NULL, &k));
    assert_int_equal(puts_done, 4);                         /* nothing changed: not again */
    r = result(1, 40);
    tasks_done(t, "j", 1, 7, &r, 200);
    assert_int_equal(puts_done, 5);
    /* A submission the directory cannot take is refused and leaves nothing behind. */
    fail_puts = true;
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 103, &id, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "job 'j': task not queued"));
    assert_non_null(strstr(e.msg, "disk full"));
    fail_puts = false;
    n = tasks_list(t, "j", 1, v, 32);
    assert_int_equal(n, 2);
    tasks_free(t);

    assert_int_equal(tasks_create(dir, &t, NULL), TS_OK);   /* the restarted master */
    assert_int_equal(tasks_list(t, "j", 1, w, 32), n);
    assert_memory_equal(w, v, n * sizeof(v[0]));
    assert_int_equal(w[0].state, TASK_DONE);
    assert_int_equal(w[0].step, 40);
    assert_int_equal(w[1].state, TASK_QUEUED);
    assert_int_equal(tasks_list(t, "k", 7, w, 32), 1);
    assert_int_equal(w[0].queued_unix_ms, 102);
    assert_int_equal(tasks_submit(t, "j", 1, TASK_EVALUATE, 104, &id, NULL), TS_OK);
    assert_int_equal(id, 3);                                /* the refused one had no id */
    tasks_free(t);

    /* A file that does not parse, or names a task at or above its job's next id: refused. */
    memset(saved, 0xff, saved_len);
    ts_err_clear(&e);
    assert_int_equal(tasks_create(dir, &t, &e), TS_ECORRUPT);
    {
        Tessera__V1__TaskInfo k1 = TESSERA__V1__TASK_INFO__INIT, *kp[] = { &k1 };
        Tessera__V1__JobTasks j1 = TESSERA__V1__JOB_TASKS__INIT, *jp[] = { &j1 };
        Tessera__V1__TaskTables tt = TESSERA__V1__TASK_TABLES__INIT;

        k1.id = 2;
        k1.kind = TESSERA__V1__TASK_KIND__TASK_KIND_EVALUATE;
        k1.state = TESSERA__V1__TASK_STATE__TASK_STATE_QUEUED;
        j1.job = "j";
        j1.next_id = 2;
        j1.tasks = kp;
        j1.n_tasks = 1;
        tt.jobs = jp;
        tt.n_jobs = 1;
        saved_len = tessera__v1__task_tables__get_packed_size(&tt);
        saved = realloc(saved, saved_len + 1);
        tessera__v1__task_tables__pack(&tt, saved);
    }
    ts_err_clear(&e);
    assert_int_equal(tasks_create(dir, &t, &e), TS_ECORRUPT);
    assert_non_null(strstr(e.msg, "job 0 ('j') is not consistent"));
    state_fake_reset();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handed_until_done),
        cmocka_unit_test(limits),
        cmocka_unit_test(durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
