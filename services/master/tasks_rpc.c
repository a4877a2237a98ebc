/* tasks_rpc.c - priority tasks (tasks.h) on the wire: SubmitTask, a worker's heartbeat handing
 * it a task and bringing its result, and the tasks in ClusterStatus. */
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "util/proc.h"

static bool worker_alive(void *ctx, uint32_t worker)
{
    return jobs_worker_alive(ctx, worker);
}

/* A task as TaskInfo, in call's arena. */
static Tessera__V1__TaskInfo *task_info(struct ts_rpc_call *call, const struct task *k)
{
    Tessera__V1__TaskInfo *i = ts_rpc_new(call, &tessera__v1__task_info__descriptor);

    tasks_info(k, i);   /* k is the caller's copy: its strings go into the arena */
    i->fingerprint = ts_rpc_strdup(call, k->fingerprint);
    i->error = ts_rpc_strdup(call, k->error);
    return i;
}

ts_status master_task_result(const Tessera__V1__TaskInfo *in, struct task *out,
                             struct ts_err *err)
{
    *out = (struct task){ .id = in->id, .state = (enum task_state)in->state, .step = in->step,
                          .accuracy = in->accuracy, .loss = in->loss };
    if (strlen(in->fingerprint) >= sizeof(out->fingerprint))
        return ts_err_set(err, TS_EINVAL, "task_done.fingerprint: want 64 lowercase hex digits "
                          "or \"\"");
    snprintf(out->fingerprint, sizeof(out->fingerprint), "%s", in->fingerprint);
    snprintf(out->error, sizeof(out->error), "%s", in->error);
    return tasks_check_result(out, err);
}

void master_task_beat(struct ts_rpc_call *call, struct master *m, uint32_t worker,
                      const struct task *done, Tessera__V1__HeartbeatResponse *resp)
{
    struct jobs_run run;
    struct task k;

    if (!jobs_run_seat(m->jobs, worker, false, &run))
        return;
    if (done)
        tasks_done(m->tasks, run.job, run.run_ms, worker, done, ts_unix_ms());
    if (tasks_take(m->tasks, run.job, run.run_ms, worker, worker_alive, m->jobs, &k))
        resp->task = task_info(call, &k);
}

void master_job_tasks(struct ts_rpc_call *call, struct master *m, const struct job_info *v,
                      Tessera__V1__JobInfo *j)
{
    struct task k[TASKS_MAX_OPEN + TASKS_KEEP_DONE];
    size_t n = tasks_list(m->tasks, v->id, v->started_unix_ms, k, sizeof(k) / sizeof(k[0]));

    j->tasks = ts_rpc_alloc(call, (n + 1) * sizeof(*j->tasks));
    for (size_t i = 0; i < n; i++)
        j->tasks[j->n_tasks++] = task_info(call, &k[i]);
}

ts_status master_submit_task(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                             ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__SubmitTaskRequest *req = (const void *)rq;
    Tessera__V1__SubmitTaskResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    int64_t run;
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)))
        return st;
    if (!(run = jobs_run_ms(m->jobs, req->job)))
        return ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not running (tessera status lists "
                          "the jobs)", req->job);
    return tasks_submit(m->tasks, req->job, run, req->kind, ts_unix_ms(), &resp->id, err);
}
