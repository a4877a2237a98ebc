/* tasks.c - the master's queue of priority tasks (tasks.h). */
#include "tasks.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/v1/state.pb-c.h"
#include "util/log.h"

#define JOB_TASKS (TASKS_MAX_OPEN + TASKS_KEEP_DONE)

/* A job's tasks, oldest first: the open ones and the last finished ones. */
struct job_tasks {
    char job[TS_JOB_ID_MAX + 1];
    int64_t run_ms;
    uint32_t next_id;
    struct task v[JOB_TASKS];
    size_t n;
};

struct tasks {
    pthread_mutex_t mu;
    struct job_tasks *jobs;        /* oldest first */
    size_t n;
    struct master_state *state;    /* the file "tasks"; NULL: nothing is durable */
};

void tasks_info(const struct task *k, Tessera__V1__TaskInfo *o)
{
    tessera__v1__task_info__init(o);
    o->id = k->id;
    o->kind = (Tessera__V1__TaskKind)k->kind;
    o->state = (Tessera__V1__TaskState)k->state;
    o->worker = k->worker;
    o->step = k->step;
    o->accuracy = k->accuracy;
    o->loss = k->loss;
    o->fingerprint = (char *)k->fingerprint;
    o->error = (char *)k->error;
    o->queued_unix_ms = k->queued_unix_ms;
    o->done_unix_ms = k->done_unix_ms;
}

/* ---- the file ---- */

static bool durable(const struct tasks *t)
{
    return t->state && master_state_durable_dir(t->state);
}

/* One task from the file into *k; false when a field is out of its range. */
static bool task_from(const Tessera__V1__TaskInfo *i, uint32_t next_id, struct task *k)
{
    int kind = (int)i->kind, state = (int)i->state;

    if (!i->id || i->id >= next_id || kind != TASK_EVALUATE || state < TASK_QUEUED ||
        state > TASK_FAILED || strlen(i->fingerprint) >= sizeof(k->fingerprint) ||
        strlen(i->error) >= sizeof(k->error))
        return false;
    *k = (struct task){ .id = i->id, .kind = (enum task_kind)kind,
                        .state = (enum task_state)state, .worker = i->worker,
                        .step = i->step, .accuracy = i->accuracy, .loss = i->loss,
                        .queued_unix_ms = i->queued_unix_ms, .done_unix_ms = i->done_unix_ms };
    memcpy(k->fingerprint, i->fingerprint, strlen(i->fingerprint) + 1);
    memcpy(k->error, i->error, strlen(i->error) + 1);
    return true;
}

static ts_status load(struct tasks *t, struct ts_err *err)
{
    Tessera__V1__TaskTables *tt;
    uint8_t *buf = NULL;
    size_t n = 0;
    ts_status st;

    if (!t->state || (st = master_state_get(t->state, "tasks", &buf, &n, err)) || !buf)
        return t->state ? st : TS_OK;
    tt = tessera__v1__task_tables__unpack(NULL, n, buf);
    free(buf);
    if (!tt)
        return ts_err_set(err, TS_ECORRUPT, "state file tasks: not a TaskTables message");
    st = tt->n_jobs > TASKS_MAX_JOBS
             ? ts_err_set(err, TS_ECORRUPT, "state file tasks: %zu jobs, want at most %d",
                          tt->n_jobs, TASKS_MAX_JOBS) : TS_OK;
    for (size_t i = 0; !st && i < tt->n_jobs; i++) {
        const Tessera__V1__JobTasks *j = tt->jobs[i];
        struct job_tasks *jt = &t->jobs[t->n];
        bool ok = !ts_job_id_check("job", j->job, NULL) && j->next_id >= 1 &&
                  j->n_tasks <= JOB_TASKS;

        *jt = (struct job_tasks){ .run_ms = j->run_unix_ms, .next_id = j->next_id };
        for (size_t k = 0; ok && k < j->n_tasks; k++)
            ok = task_from(j->tasks[k], j->next_id, &jt->v[jt->n++]);
        if (!ok) {
            st = ts_err_set(err, TS_ECORRUPT, "state file tasks: job %zu ('%.64s') is not "
                            "consistent", i, j->job);
            break;
        }
        snprintf(jt->job, sizeof(jt->job), "%s", j->job);
        t->n++;
    }
    tessera__v1__task_tables__free_unpacked(tt, NULL);
    return st;
}

/* Writes every job's tasks to the state directory (mu held). */
static ts_status save(struct tasks *t, struct ts_err *err)
{
    Tessera__V1__TaskTables tt = TESSERA__V1__TASK_TABLES__INIT;
    size_t ntasks = 0, at = 0;
    Tessera__V1__JobTasks *js, **jp;
    Tessera__V1__TaskInfo *ks, **kp;
    uint8_t *buf = NULL;
    ts_status st = TS_OK;

    if (!durable(t))
        return TS_OK;
    for (size_t i = 0; i < t->n; i++)
        ntasks += t->jobs[i].n;
    js = calloc(t->n + 1, sizeof(*js));
    jp = calloc(t->n + 1, sizeof(*jp));
    ks = calloc(ntasks + 1, sizeof(*ks));
    kp = calloc(ntasks + 1, sizeof(*kp));
    if (!js || !jp || !ks || !kp) {
        st = ts_err_set(err, TS_ENOMEM, "tasks: out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < t->n; i++) {
        struct job_tasks *jt = &t->jobs[i];
        Tessera__V1__JobTasks *j = &js[i];

        tessera__v1__job_tasks__init(j);
        j->job = jt->job;
        j->run_unix_ms = jt->run_ms;
        j->next_id = jt->next_id;
        j->tasks = &kp[at];
        for (size_t k = 0; k < jt->n; k++, at++) {
            tasks_info(&jt->v[k], &ks[at]);
            kp[at] = &ks[at];
            j->n_tasks++;
        }
        jp[i] = j;
    }
    tt.jobs = jp;
    tt.n_jobs = t->n;
    if (!(buf = malloc(tessera__v1__task_tables__get_packed_size(&tt) + 1)))
        st = ts_err_set(err, TS_ENOMEM, "tasks: out of memory");
    else
        st = master_state_put(t->state, "tasks", buf,
                              tessera__v1__task_tables__pack(&tt, buf), err);
out_free:
    free(buf);
    free(ks);
    free(kp);
    free(js);
    free(jp);
    return st;
}

/* After a hand-out or a result (mu held): a failed write is logged, and the next change
 * writes the file again. Only a submission waits for its write (tasks_submit). */
static void save_or_log(struct tasks *t, const char *job)
{
    struct ts_err why = { 0 };

    if (save(t, &why))
        ts_log(TS_ERROR, "master", "job %s: the tasks could not be made durable (%s); they "
               "are written again at the next change", job, why.msg);
}

ts_status tasks_create(struct master_state *s, struct tasks **out, struct ts_err *err)
{
    struct tasks *t = calloc(1, sizeof(*t));
    ts_status st;

    if (!t || !(t->jobs = calloc(TASKS_MAX_JOBS, sizeof(*t->jobs)))) {
        free(t);
        return ts_err_set(err, TS_ENOMEM, "tasks: out of memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    t->state = s;
    if ((st = load(t, err))) {
        tasks_free(t);
        return st;
    }
    *out = t;
    return TS_OK;
}

void tasks_free(struct tasks *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->jobs);
    free(t);
}

/* job's run, or NULL; make: made (replacing another run's, or the oldest job's when there are
 * TASKS_MAX_JOBS) if missing. mu held. */
static struct job_tasks *job_of(struct tasks *t, const char *job, int64_t run_ms, bool make)
{
    struct job_tasks *jt = NULL;

    for (size_t i = 0; i < t->n && !jt; i++)
        if (!strcmp(t->jobs[i].job, job))
            jt = &t->jobs[i];
    if (jt && jt->run_ms == run_ms)
        return jt;
    if (!make)
        return NULL;
    if (!jt && t->n == TASKS_MAX_JOBS) {
        memmove(&t->jobs[0], &t->jobs[1], (t->n - 1) * sizeof(*t->jobs));
        t->n--;
    }
    if (!jt)
        jt = &t->jobs[t->n++];
    memset(jt, 0, sizeof(*jt));
    snprintf(jt->job, sizeof(jt->job), "%s", job);
    jt->run_ms = run_ms;
    jt->next_id = 1;
    return jt;
}

static bool open_task(const struct task *k)
{
    return k->state == TASK_QUEUED || k->state == TASK_RUNNING;
}

/* Forgets the oldest finished tasks beyond TASKS_KEEP_DONE. mu held. */
static void trim(struct job_tasks *jt)
{
    size_t done = 0;

    for (size_t i = 0; i < jt->n; i++)
        done += !open_task(&jt->v[i]);
    for (size_t i = 0; i < jt->n && done > TASKS_KEEP_DONE;) {
        if (open_task(&jt->v[i])) {
            i++;
            continue;
        }
        memmove(&jt->v[i], &jt->v[i + 1], (jt->n - i - 1) * sizeof(jt->v[0]));
        jt->n--;
        done--;
    }
}

ts_status tasks_submit(struct tasks *t, const char *job, int64_t run_ms, int kind, int64_t now,
                       uint32_t *id, struct ts_err *err)
{
    struct job_tasks *jt;
    size_t open = 0;
    ts_status st = TS_OK;

    if (kind != TASK_EVALUATE)
        return ts_err_set(err, TS_EINVAL, "kind: %d; want %d (EVALUATE)", kind, TASK_EVALUATE);
    pthread_mutex_lock(&t->mu);
    jt = job_of(t, job, run_ms, true);
    for (size_t i = 0; i < jt->n; i++)
        open += open_task(&jt->v[i]);
    if (open >= TASKS_MAX_OPEN) {
        st = ts_err_set(err, TS_ENOMEM, "job '%s' has %zu tasks queued or running, the most "
                        "it takes: wait for one to finish", job, open);
    } else {   /* open < TASKS_MAX_OPEN and done <= TASKS_KEEP_DONE: there is room */
        jt->v[jt->n++] = (struct task){ .id = jt->next_id, .kind = TASK_EVALUATE,
                                        .state = TASK_QUEUED, .queued_unix_ms = now };
        jt->next_id++;
        if ((st = save(t, err))) {   /* not acknowledged: as if it had never come */
            jt->n--;
            jt->next_id--;
            ts_err_prefix(err, "job '%s': task not queued", job);
        } else {
            *id = jt->next_id - 1;
            ts_log(TS_INFO, "master", "job %s: task %u (evaluate) queued", job, *id);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

bool tasks_take(struct tasks *t, const char *job, int64_t run_ms, uint32_t worker,
                bool (*alive)(void *ctx, uint32_t worker), void *ctx, struct task *out)
{
    struct job_tasks *jt;
    struct task *mine = NULL, *queued = NULL;
    bool changed = false;

    pthread_mutex_lock(&t->mu);
    jt = job_of(t, job, run_ms, false);
    for (size_t i = 0; jt && i < jt->n && !mine; i++) {
        struct task *k = &jt->v[i];
        if (k->state == TASK_RUNNING && k->worker != worker && !alive(ctx, k->worker)) {
            ts_log(TS_INFO, "master", "job %s: task %u goes back to the queue (worker %u is "
                   "gone)", job, k->id, k->worker);
            k->state = TASK_QUEUED;
            k->worker = 0;
            changed = true;
        }
        if (k->state == TASK_RUNNING && k->worker == worker)
            mine = k;
        else if (k->state == TASK_QUEUED && !queued)
            queued = k;
    }
    if (!mine && queued) {
        mine = queued;
        mine->state = TASK_RUNNING;
        mine->worker = worker;
        changed = true;
        ts_log(TS_INFO, "master", "job %s: task %u handed to worker %u", job, mine->id, worker);
    }
    if (changed)
        save_or_log(t, job);
    if (mine)
        *out = *mine;
    pthread_mutex_unlock(&t->mu);
    return mine != NULL;
}

ts_status tasks_check_result(const struct task *r, struct ts_err *err)
{
    if (!r->id)
        return ts_err_set(err, TS_EINVAL, "task_done.id: 0; want the id of a task handed to "
                          "this worker");
    if (r->state != TASK_DONE && r->state != TASK_FAILED)
        return ts_err_set(err, TS_EINVAL, "task_done.state: %d; want %d (DONE) or %d (FAILED)",
                          r->state, TASK_DONE, TASK_FAILED);
    if (r->state == TASK_DONE && !(r->accuracy >= 0 && r->accuracy <= 1))
        return ts_err_set(err, TS_EINVAL, "task_done.accuracy: %g; want 0..1", r->accuracy);
    if (r->state == TASK_DONE && !(r->loss >= 0 && isfinite(r->loss)))
        return ts_err_set(err, TS_EINVAL, "task_done.loss: %g; want a finite loss >= 0",
                          r->loss);
    if (r->fingerprint[0] && strspn(r->fingerprint, "0123456789abcdef") != 64)
        return ts_err_set(err, TS_EINVAL, "task_done.fingerprint: want 64 lowercase hex digits "
                          "or \"\"");
    return TS_OK;
}

void tasks_done(struct tasks *t, const char *job, int64_t run_ms, uint32_t worker,
                const struct task *r, int64_t now)
{
    struct job_tasks *jt;

    pthread_mutex_lock(&t->mu);
    jt = job_of(t, job, run_ms, false);
    for (size_t i = 0; jt && i < jt->n; i++) {
        struct task *k = &jt->v[i];
        if (k->id != r->id || k->state != TASK_RUNNING || k->worker != worker)
            continue;
        k->state = r->state;
        k->step = r->step;
        k->accuracy = r->accuracy;
        k->loss = r->loss;
        snprintf(k->fingerprint, sizeof(k->fingerprint), "%s", r->fingerprint);
        snprintf(k->error, sizeof(k->error), "%s", r->error);
        k->done_unix_ms = now;
        ts_log(TS_INFO, "master", "job %s: task %u %s by worker %u at step %" PRIu64, job,
               k->id, k->state == TASK_DONE ? "done" : "failed", worker, k->step);
        trim(jt);
        save_or_log(t, job);
        break;
    }
    pthread_mutex_unlock(&t->mu);
}

size_t tasks_list(struct tasks *t, const char *job, int64_t run_ms, struct task *out,
                  size_t max)
{
    struct job_tasks *jt;
    size_t n = 0;

    pthread_mutex_lock(&t->mu);
    jt = job_of(t, job, run_ms, false);
    for (size_t i = 0; jt && i < jt->n && n < max; i++)
        out[n++] = jt->v[i];
    pthread_mutex_unlock(&t->mu);
    return n;
}
