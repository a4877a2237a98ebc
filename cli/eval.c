/* eval.c - `tessera eval`: queues a priority evaluation of a running job (SubmitTask,
 * docs/scheduler.md "Priority tasks") and waits for its result. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "cluster/cluster.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/proc.h"

#define POLL_MS 100

/* Task id of job in a status reply, or NULL; *running: whether the job still runs. */
static const Tessera__V1__TaskInfo *find_task(const Tessera__V1__ClusterStatusResponse *cs,
                                              const char *job, uint32_t id, bool *running)
{
    const Tessera__V1__JobInfo *j = ts_status_job(cs, job);

    *running = j && j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
    for (size_t k = 0; j && k < j->n_tasks; k++)
        if (j->tasks[k]->id == id)
            return j->tasks[k];
    return NULL;
}

static void print_task(const char *job, const Tessera__V1__TaskInfo *k, int64_t waited_ms,
                       bool json)
{
    struct ts_json j;
    bool done = k->state == TESSERA__V1__TASK_STATE__TASK_STATE_DONE;

    if (!json) {
        if (done)
            printf("job %s task %u: step %" PRIu64 ", test accuracy %.4f, loss %.4f, by worker "
                   "%u, %.1f s after it was queued\nparams_sha256 %s\n", job, k->id, k->step,
                   k->accuracy, k->loss, k->worker, waited_ms / 1000.0, k->fingerprint);
        else
            printf("job %s task %u failed on worker %u: %s\n", job, k->id, k->worker, k->error);
        return;
    }
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "job", job);
    ts_json_uint(&j, "task", k->id);
    ts_json_str(&j, "state", done ? "done" : "failed");
    ts_json_uint(&j, "worker", k->worker);
    ts_json_uint(&j, "step", k->step);
    ts_json_num(&j, "test_accuracy", k->accuracy);
    ts_json_num(&j, "loss", k->loss);
    ts_json_str(&j, "params_sha256", k->fingerprint);
    ts_json_str(&j, "error", k->error);
    ts_json_num(&j, "seconds", waited_ms / 1000.0);
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

/* --no-wait: the task's id, for `tessera status` to show its result later. */
static void print_queued(const char *job, uint32_t id, bool json)
{
    struct ts_json j;

    if (!json) {
        printf("job %s task %u queued\n", job, id);
        return;
    }
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "job", job);
    ts_json_uint(&j, "task", id);
    ts_json_str(&j, "state", "queued");
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

int cmd_eval(int argc, char **argv)
{
    const char *master = NULL, *job = NULL;
    bool json = false, no_wait = false, help;
    int64_t timeout_s = 120;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR",
          "master address (default $TESSERA_MASTER, then 127.0.0.1:7070)", 0, 0 },
        { "job", TS_FLAG_STR, &job, "ID", "the running job to evaluate (required)", 0, 0 },
        { "no-wait", TS_FLAG_BOOL, &no_wait, NULL, "queue the task and print its id only", 0,
          0 },
        { "timeout", TS_FLAG_INT, &timeout_s, "S", "give up waiting after S seconds (default "
          "120)", 1, 86400 },
        { "json", TS_FLAG_BOOL, &json, NULL, "the result as one JSON object", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    Tessera__V1__SubmitTaskRequest req = TESSERA__V1__SUBMIT_TASK_REQUEST__INIT;
    Tessera__V1__SubmitTaskResponse *resp = NULL;
    struct ts_master *m = NULL;
    struct ts_err err = { 0 };
    int64_t t0 = ts_now_ms();
    int npos = 0, rc = 1;
    uint32_t id;

    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err)) {
        fprintf(stderr, "tessera eval: %s\n", err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, "tessera eval --job ID [options]",
                       "Queues an evaluation of a running job ahead of its training: the first\n"
                       "of its workers to call in evaluates its parameters on the test set at\n"
                       "its next step boundary, and this prints the step, the accuracy, the loss\n"
                       "and the params_sha256 of the parameters it ran on (docs/scheduler.md).",
                       flags);
        return 0;
    }
    if (!job) {
        fprintf(stderr, "tessera eval: --job is required (tessera status lists the jobs)\n");
        return 2;
    }
    req.job = (char *)job;
    req.kind = TESSERA__V1__TASK_KIND__TASK_KIND_EVALUATE;
    if (ts_master_open(ts_master_default_addr(master), &m, &err) ||
        ts_master_call(m, "SubmitTask", &req.base, &tessera__v1__submit_task_response__descriptor,
                       (ProtobufCMessage **)&resp, &err)) {
        cli_master_error("eval", ts_master_default_addr(master), &err);
        goto out;
    }
    id = resp->id;
    tessera__v1__submit_task_response__free_unpacked(resp, NULL);
    if (no_wait) {
        print_queued(job, id, json);
        rc = 0;
        goto out;
    }
    for (;;) {
        Tessera__V1__ClusterStatusResponse *cs;
        const Tessera__V1__TaskInfo *k;
        bool running;
        if (ts_master_status(m, 3000, &cs, &err)) {
            cli_master_error("eval", ts_master_default_addr(master), &err);
            goto out;
        }
        k = find_task(cs, job, id, &running);
        if (k && (k->state == TESSERA__V1__TASK_STATE__TASK_STATE_DONE ||
                  k->state == TESSERA__V1__TASK_STATE__TASK_STATE_FAILED)) {
            print_task(job, k, ts_now_ms() - t0, json);
            rc = k->state == TESSERA__V1__TASK_STATE__TASK_STATE_DONE ? 0 : 1;
        } else if (!k || !running) {
            fprintf(stderr, "tessera eval: job %s's task %u %s: queue it again in a running "
                    "job\n", job, id, k ? "was not run before the job ended"
                                       : "is gone (the master restarted and forgot it)");
        } else if (ts_now_ms() - t0 > timeout_s * 1000) {
            fprintf(stderr, "tessera eval: job %s's task %u is still %s after %lld s; see "
                    "tessera status\n", job, id, k->state ==
                    TESSERA__V1__TASK_STATE__TASK_STATE_QUEUED ? "queued" : "running",
                    (long long)timeout_s);
        } else {
            tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
            ts_sleep_ms(POLL_MS);
            continue;
        }
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
        break;
    }
out:
    ts_master_close(m);
    return rc;
}
