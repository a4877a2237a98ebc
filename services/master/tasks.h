/* tasks.h - priority work (docs/scheduler.md, "Priority tasks"): the master's queue of tasks
 * for running jobs, such as an evaluation of the parameters at a step boundary, which the
 * first of the job's workers to call in runs between two of its steps, without stopping the
 * job.
 *
 * Why: a test-set evaluation at an epoch's end, or a probe for an audit, should not wait for
 * the epoch to end on a worker chosen in advance, nor stop training to run. A task is queued
 * ahead of all training (SubmitTask); a worker's heartbeat hands it the oldest queued task of
 * its job, the worker runs it at its next step boundary and its next heartbeat brings the
 * result with the step it ran at. A handed task is handed again to the same worker until its
 * result comes (a worker runs a task id once); a task whose worker died or left goes back to
 * the queue for the next worker.
 * Durable: with a state directory the tables are written (file "tasks", replaced atomically,
 * state.h) before SubmitTask's reply carries a task's id, and again whenever a task is handed
 * out or finished, so a master killed at any instruction loses no acknowledged task and
 * gives no id twice (a worker runs each id of its job once). A job's tasks go with its run
 * (another run of the same job id starts with none).
 * Ownership: tasks_create returns a table freed with tasks_free; tasks_list copies out.
 * Threads: every function may be called from any thread (one mutex; changes write the file
 * under it). */
#ifndef TS_MASTER_TASKS_H
#define TS_MASTER_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"
#include "tessera/v1/master.pb-c.h"
#include "util/err.h"
#include "util/names.h"

#define TASKS_MAX_OPEN 16        /* queued or running tasks per job */
#define TASKS_KEEP_DONE 8        /* finished tasks kept per job, for status */
#define TASKS_MAX_JOBS 256

enum task_kind { TASK_EVALUATE = 1 };
enum task_state { TASK_QUEUED = 1, TASK_RUNNING = 2, TASK_DONE = 3, TASK_FAILED = 4 };

struct task {
    uint32_t id;
    enum task_kind kind;
    enum task_state state;
    uint32_t worker;             /* who runs or ran it; 0: nobody yet */
    uint64_t step;               /* the result: the step boundary it ran at ... */
    double accuracy, loss;       /* ... EVALUATE's figures ... */
    char fingerprint[65];        /* ... params_sha256 of the parameters it ran on */
    char error[257];             /* FAILED: why */
    int64_t queued_unix_ms, done_unix_ms;
};

struct tasks;

/* A table holding what s's file "tasks" held (s NULL, or without a directory: nothing is
 * durable). TS_ECORRUPT for a file that does not parse or is not consistent. */
ts_status tasks_create(struct master_state *s, struct tasks **out,
                       struct ts_err *err) TS_MUST_CHECK;
void tasks_free(struct tasks *t);

/* Queues a task of kind for job's run run_ms (JobInfo.started_unix_ms); *id its id, from 1.
 * TS_EINVAL naming `kind` for an unknown kind; TS_ENOMEM when TASKS_MAX_OPEN are open; the
 * state file's error (nothing queued) when it cannot be written. */
ts_status tasks_submit(struct tasks *t, const char *job, int64_t run_ms, int kind, int64_t now,
                       uint32_t *id, struct ts_err *err) TS_MUST_CHECK;

/* The task worker of job's run should run: the one it was handed and has not reported, else
 * the oldest queued one (now running, by worker). A running task whose worker is not alive
 * (alive(ctx, worker) false) goes back to the queue first. false: none. */
bool tasks_take(struct tasks *t, const char *job, int64_t run_ms, uint32_t worker,
                bool (*alive)(void *ctx, uint32_t worker), void *ctx, struct task *out);

/* Checks a result's fields before anything changes (TS_EINVAL naming task_done.<field>): id
 * at least 1, state DONE or FAILED, accuracy 0..1 and loss finite and non-negative for
 * DONE, fingerprint 64 lowercase hex digits or "". */
ts_status tasks_check_result(const struct task *r, struct ts_err *err) TS_MUST_CHECK;
/* worker's result r of a task it was handed (state, step, accuracy, loss, fingerprint,
 * error). A result for a task not running by worker (unknown, another's, done already) is
 * ignored: a heartbeat resent after its answer was lost brings it twice. */
void tasks_done(struct tasks *t, const char *job, int64_t run_ms, uint32_t worker,
                const struct task *r, int64_t now);

/* k as a TaskInfo (its strings point into k: o lives no longer than k). */
void tasks_info(const struct task *k, Tessera__V1__TaskInfo *o);

/* job's tasks for run run_ms, open ones and the last TASKS_KEEP_DONE done, oldest first, at
 * most max into out; returns how many. */
size_t tasks_list(struct tasks *t, const char *job, int64_t run_ms, struct task *out,
                  size_t max);

#endif
