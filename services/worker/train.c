/* train.c - the built-in trainer: the MLP on Fashion-MNIST, through the SDK exactly as a
 * user's trainer would use it.
 *
 * Every rank walks the same schedule (lib/data): at step s it computes, for each slot it owns
 * (its own rank's, and in an elastic job those of dead workers the master handed it), the
 * gradient of the micro-batches the schedule gives that slot's rank, each micro-batch's
 * gradient turned into fixed point and summed as integers in exact mode, and hands the sums to
 * tessera_step_slots, which returns the parameters of version s + 1. Rank 0 also evaluates and
 * reports. */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/emulate.h"
#include "model/mlp.h"
#include "tensor/fingerprint.h"
#include "tensor/tensor.h"
#include "util/json.h"
#include "util/proc.h"

struct run {
    const struct train_opts *o;
    tessera *t;
    struct ts_mlp *mlp;
    struct ts_dataset train, test;
    struct ts_schedule sched;
    float *params[TS_MLP_NTENSORS], *grad[TS_MLP_NTENSORS], *xb;
    void *acc[TS_MLP_NTENSORS];        /* int64 (exact) or float sums of the first slot's share */
    void *(*more)[TS_MLP_NTENSORS];    /* the same for the other slots owned, by position */
    uint8_t *yb;
    uint32_t *perm, *first;
    int ids[TS_MLP_NTENSORS];
    uint64_t start;                    /* the step training starts at (restored: > 0) */
    unsigned rollbacks;                /* times the cluster took the job back to a snapshot */
    /* Progress for the master's status page: the summed loss of this worker's samples since
     * the last report and their count, its steps and start, and rank 0's last test accuracy. */
    double loss_sum, accuracy;
    uint32_t loss_n;
    uint64_t report_samples;
    int64_t report_ms;
    struct overlap *ov;                /* --overlap (overlap.c), else NULL */
    /* Progress and results as text: stdout, or stderr with --json, whose stdout is rank 0's
     * JSON document alone (a launcher or script reads it whole). */
    FILE *out;
};

#define REPORT_MS 500   /* progress goes to the master at most this often (its heartbeat) */

/* After a step: every REPORT_MS, the mean loss and the samples per second since the last
 * report go out with the next heartbeat (tessera_report_progress). */
static void progress(struct run *r, bool now)
{
    int64_t t = ts_now_ms();

    if ((!now && t - r->report_ms < REPORT_MS) || !r->loss_n)
        return;
    tessera_report_progress(r->t, &(struct tessera_progress){
        .loss = r->loss_sum / r->loss_n, .accuracy = r->accuracy,
        .samples_per_s = (double)r->report_samples * 1000.0 /
                         (double)(t - r->report_ms > 0 ? t - r->report_ms : 1) });
    r->loss_sum = 0;
    r->loss_n = 0;
    r->report_samples = 0;
    r->report_ms = t;
}

/* Testing: a worker that computes `factor` times slower, whatever its share (its slots). */
static void slow_down(double factor, int64_t took_ns)
{
    int64_t ns = (int64_t)((factor - 1) * (double)took_ns);
    struct timespec ts = { ns / 1000000000, ns % 1000000000 };

    while (ns > 0 && nanosleep(&ts, &ts) != 0)
        ;
}

static int say(struct tessera_error *e, const char *what)
{
    fprintf(stderr, "tessera-worker: %s: %s\n", what, e->message);
    return 1;
}

/* Hashes every training-data partition and has the master compare them with the job's map
 * before anything trains: a host with other data stops here, named. */
static int check_data(struct run *r, struct tessera_error *e)
{
    size_t n = ts_data_checksum_count(&r->train);
    struct ts_data_checksum *cs = calloc(n + 1, sizeof(*cs));
    struct tessera_data_checksum *tc = calloc(n + 1, sizeof(*tc));
    char ref[96] = "";
    int rc = 1;

    if (!cs || !tc) {
        snprintf(e->message, sizeof(e->message), "out of memory");
    } else {
        ts_data_checksums(&r->train, "train", cs);
        for (size_t i = 0; i < n; i++) {
            tc[i].name = cs[i].name;
            tc[i].file = cs[i].file;
            memcpy(tc[i].sha256, cs[i].sha256, 32);
        }
        rc = tessera_check_data(r->t, tc, n, ref, sizeof(ref), e);
        if (!rc && r->o->sdk.rank == 0) {
            fprintf(r->out, "data: %zu partitions checked against %s\n", n, ref);
            fflush(r->out);
        }
    }
    free(cs);
    free(tc);
    return rc;
}

static int setup(struct run *r, struct tessera_error *e)
{
    const struct train_opts *o = r->o;
    const struct ts_mlp_tensor *mt = ts_mlp_tensors();
    struct ts_err err = { 0 };

    if (ts_fmnist_load(o->data_dir, true, &r->train, &err) ||
        ts_fmnist_load(o->data_dir, false, &r->test, &err) ||   /* every rank: tasks */
        ts_mlp_create(o->micro > 1000 ? o->micro : 1000, &r->mlp, &err)) {
        snprintf(e->message, sizeof(e->message), "%s", err.msg);
        return say(e, "data");
    }
    r->sched = (struct ts_schedule){ .seed = o->seed, .n = r->train.n, .batch = o->batch,
                                     .micro = o->micro };
    if (ts_schedule_check(&r->sched, &err)) {
        snprintf(e->message, sizeof(e->message), "%s", err.msg);
        return say(e, "schedule");
    }
    if (sdk_connect_delayed(&o->sdk, o->delay_ms, &r->t, e)) {
        if (o->sdk.restarts && e->code == TESSERA_ESTATE && strstr(e->message, "restarts:")) {
            fprintf(stderr, "tessera-worker: job '%s' ended before this restart of rank %u "
                    "rejoined it: nothing left to do\n", o->sdk.job, o->sdk.rank);
            return WORKER_EXIT_JOB_ENDED;
        }
        return say(e, "connect");
    }
    if (check_data(r, e))
        return say(e, "data check");
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        uint64_t shape[2] = { mt[i].rows, mt[i].cols };
        uint64_t n = ts_mlp_numel(i);
        const float *view;
        if (tessera_register(r->t, mt[i].name, shape, mt[i].cols > 1 ? 2 : 1, mt[i].init,
                             o->seed, mt[i].fan_in, mt[i].fan_out, o->partition_bytes,
                             &r->ids[i], e))
            return say(e, "register");
        /* The SDK's buffers: on one host the shards read the gradient sums where compute()
         * writes them and the parameters are the shards' own pages (tessera.h). */
        if (tessera_buffers(r->t, r->ids[i], &view, &r->acc[i], e))
            return say(e, "buffers");
        r->params[i] = (float *)view;   /* read-only pages: the model only reads them */
        r->grad[i] = malloc(n * sizeof(float));
        if (i == 0)
            r->start = tessera_version(r->t, r->ids[0]);
        if (!o->sdk.elastic && tessera_version(r->t, r->ids[i]) != r->start) {
            snprintf(e->message, sizeof(e->message), "tensor %s is at version %" PRIu64
                     ", %s at %" PRIu64 ": the shards hold a mixed state; restart the "
                     "cluster", mt[i].name, tessera_version(r->t, r->ids[i]), mt[0].name,
                     r->start);
            return say(e, "register");
        }
        if (!r->grad[i] ||
            (!o->sdk.elastic && tessera_pull(r->t, r->ids[i], r->start, r->params[i], e)))
            return say(e, "pull");
    }
    /* Elastic: the newest step the job reached, all tensors at it (it may be running). */
    if (o->sdk.elastic && tessera_join(r->t, r->params, &r->start, e))
        return say(e, "join");
    if (r->start && o->sdk.rank == 0)
        fprintf(r->out, "resuming at step %" PRIu64 " (the shards restored a snapshot)\n",
                r->start);
    r->xb = malloc((size_t)o->micro * TS_MLP_IN * sizeof(float));
    r->yb = malloc(o->micro);
    r->perm = malloc(r->train.n * sizeof(uint32_t));
    r->first = malloc((o->batch / o->micro + 1) * sizeof(uint32_t));
    r->more = calloc(o->sdk.workers, sizeof(*r->more));
    return r->xb && r->yb && r->perm && r->first && r->more ? 0 : (say(e, "memory"), 1);
}

/* The sums of the slot at position k of this step's slots: the SDK's buffers for the first,
 * made here for the others (NULL: out of memory). */
static void **sums_of(struct run *r, size_t k)
{
    if (k == 0)
        return r->acc;
    for (int i = 0; i < TS_MLP_NTENSORS; i++)
        if (!r->more[k][i] && !(r->more[k][i] = malloc(ts_mlp_numel(i) * 8)))
            return NULL;
    return r->more[k];
}

/* Slot `slot`'s gradient sum for the step at batch offset base of perm into acc. */
static int compute(struct run *r, uint32_t base, uint32_t slot, void **acc,
                   struct tessera_error *e)
{
    uint32_t n = ts_schedule_micro(&r->sched, slot, r->o->sdk.workers, r->first);

    /* The first micro-batch writes the sums (no separate zeroing pass); none: zeros. */
    for (int i = 0; i < TS_MLP_NTENSORS && n == 0; i++)
        memset(acc[i], 0, ts_mlp_numel(i) * 8);
    for (uint32_t j = 0; j < n; j++) {
        for (uint32_t k = 0; k < r->o->micro; k++) {
            uint32_t idx = r->perm[base + r->first[j] + k];
            memcpy(r->xb + (size_t)k * TS_MLP_IN, r->train.x + (size_t)idx * TS_MLP_IN,
                   TS_MLP_IN * sizeof(float));
            r->yb[k] = r->train.y[idx];
        }
        r->loss_sum += ts_mlp_grad(r->mlp, r->params, r->xb, r->yb, (int)r->o->micro, r->grad);
        r->loss_n += r->o->micro;   /* the loss is summed over the samples */
        if (r->o->compute_ms)       /* testing: an accelerator's time, off the CPUs */
            ts_sleep_ms(r->o->compute_ms);
        for (int i = 0; i < TS_MLP_NTENSORS; i++) {
            uint64_t numel = ts_mlp_numel(i);
            int bad;
            if (!r->o->sdk.exact) {
                if (j == 0)
                    memcpy(acc[i], r->grad[i], numel * sizeof(float));
                else
                    ts_f32_add(acc[i], r->grad[i], numel);
                continue;
            }
            bad = j == 0 ? tessera_to_fixed(r->grad[i], numel, acc[i], e)
                         : tessera_fixed_add_f32(acc[i], r->grad[i], numel, e);
            if (bad)
                return say(e, "gradient");
        }
    }
    return 0;
}

static double accuracy(struct run *r, const struct ts_dataset *d, uint32_t n, double *loss)
{
    int correct = 0;
    double l = 0, sum = 0;

    for (uint32_t at = 0; at < n; at += 1000) {
        int k = n - at < 1000 ? (int)(n - at) : 1000;
        correct += ts_mlp_eval(r->mlp, r->params, d->x + (size_t)at * TS_MLP_IN, d->y + at, k,
                               &l);
        sum += l;
    }
    if (loss)
        *loss = sum / n;
    return (double)correct / n;
}

static void fingerprint(struct run *r, char hex[65])
{
    const struct ts_mlp_tensor *mt = ts_mlp_tensors();
    struct ts_fp_tensor fp[TS_MLP_NTENSORS];

    for (int i = 0; i < TS_MLP_NTENSORS; i++)
        fp[i] = (struct ts_fp_tensor){ mt[i].name, r->params[i], ts_mlp_numel(i) };
    if (ts_params_sha256(fp, TS_MLP_NTENSORS, hex, NULL))
        snprintf(hex, 65, "unavailable");
}

/* steps: the final step; ran: how many of them this run did. */
static void report(struct run *r, uint64_t steps, uint64_t ran, double secs, char hex[65])
{
    double test_acc = accuracy(r, &r->test, r->test.n, NULL);
    double sps = secs > 0 ? (double)ran * r->o->batch / secs : 0;
    struct ts_json j;

    fingerprint(r, hex);
    struct tessera_stats st;

    tessera_stats(r->t, &st);
    fprintf(r->out, "done: %" PRIu64 " steps, test accuracy %.4f, %.0f samples/s, %s %s over "
            "%s\n", steps, test_acc, sps, r->o->sdk.mode ? r->o->sdk.mode : "bsp",
            r->o->sdk.exact ? "exact" : "float", tessera_transport(r->t));
    if (st.bytes_raw && st.bytes_pushed != st.bytes_raw)
        fprintf(r->out, "compression: %.1f MB pushed for %.1f MB of gradients (%.2fx)\n",
                st.bytes_pushed / 1e6, st.bytes_raw / 1e6, (double)st.bytes_raw /
                (double)(st.bytes_pushed ? st.bytes_pushed : 1));
    if (st.bytes_pulled_raw && st.bytes_pulled != st.bytes_pulled_raw)
        fprintf(r->out, "pull compression: %.1f MB pulled for %.1f MB of parameters (%.2fx)\n",
                st.bytes_pulled / 1e6, st.bytes_pulled_raw / 1e6, (double)st.bytes_pulled_raw /
                (double)(st.bytes_pulled ? st.bytes_pulled : 1));
    if (st.steps_skipped || st.staleness_max)
        fprintf(r->out, "skipped steps %" PRIu64 " (overflow), staleness max %" PRIu64
                ", loss scale %g\n", st.steps_skipped, st.staleness_max, st.loss_scale);
    fprintf(r->out, "params_sha256 %s\n", hex);
    if (!r->o->json)
        return;
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "job", r->o->sdk.job);
    ts_json_num(&j, "test_accuracy", test_acc);
    ts_json_str(&j, "params_sha256", hex);
    ts_json_uint(&j, "steps", steps);
    ts_json_uint(&j, "start_step", r->start);
    ts_json_uint(&j, "rollbacks", r->rollbacks);
    ts_json_num(&j, "samples_per_s", sps);
    ts_json_num(&j, "seconds", secs);
    ts_json_uint(&j, "workers", r->o->sdk.workers);
    ts_json_bool(&j, "exact", r->o->sdk.exact);
    ts_json_str(&j, "transport", tessera_transport(r->t));
    ts_json_str(&j, "mode", r->o->sdk.mode ? r->o->sdk.mode : "bsp");
    ts_json_str(&j, "compress", r->o->sdk.compress ? r->o->sdk.compress : "none");
    ts_json_uint(&j, "steps_skipped", st.steps_skipped);
    ts_json_uint(&j, "failovers", st.failovers);
    ts_json_uint(&j, "staleness_max", st.staleness_max);
    ts_json_uint(&j, "bytes_pushed", st.bytes_pushed);
    ts_json_uint(&j, "bytes_raw", st.bytes_raw);
    ts_json_str(&j, "compress_pull", r->o->sdk.pull_compress ? r->o->sdk.pull_compress : "none");
    ts_json_uint(&j, "bytes_pulled", st.bytes_pulled);
    ts_json_uint(&j, "bytes_pulled_raw", st.bytes_pulled_raw);
    ts_json_num(&j, "loss_scale", st.loss_scale);
    ts_json_uint(&j, "seed", r->o->seed);
    ts_json_uint(&j, "batch", r->o->batch);
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

/* Rank 0's evaluation at an epoch's end: train and test accuracy, to stdout and the status
 * page. since: the samples the job trained since the last one, te when it was. */
static void evaluate(struct run *r, uint64_t epoch, uint64_t step, uint64_t total,
                     uint64_t *since, int64_t *te)
{
    double tl, train_acc = accuracy(r, &r->train, 10000, &tl);
    double test_acc = accuracy(r, &r->test, r->test.n, NULL);
    int64_t now = ts_now_ms();

    worker_metrics_eval(tl, train_acc, test_acc);
    r->accuracy = test_acc;
    progress(r, true);
    fprintf(r->out, "epoch %" PRIu64 " step %" PRIu64 "/%" PRIu64 ": loss %.4f, train accuracy "
            "%.4f, test accuracy %.4f, %.0f samples/s\n", epoch, step, total, tl, train_acc,
            test_acc, (double)*since * 1000.0 / (double)(now - *te > 0 ? now - *te : 1));
    fflush(r->out);
    *te = now;
    *since = 0;
}

/* A priority task the master handed this worker (docs/scheduler.md), run now, at the
 * boundary after `step`: the parameters are those of version step. With --overlap, step's
 * exchange is in flight and the values computed with are a prediction: the task runs on the
 * newest pulled, those of version step - 1. */
static void run_task(struct run *r, uint64_t step)
{
    struct tessera_task k;
    struct tessera_task_result res = { .step = step };
    struct tessera_error e = { 0 };
    float *was[TS_MLP_NTENSORS];
    char hex[65];

    if (!tessera_next_task(r->t, &k))
        return;
    res.id = k.id;
    memcpy(was, r->params, sizeof(was));
    if (r->ov) {
        overlap_pulled(r->ov, r->params);
        res.step = step - 1;
    }
    if (k.kind == TESSERA_TASK_EVALUATE) {
        res.accuracy = accuracy(r, &r->test, r->test.n, &res.loss);
        fingerprint(r, hex);
        res.fingerprint = hex;
        fprintf(r->out, "rank %u: task %u: evaluated step %" PRIu64 ": test accuracy %.4f, loss "
                "%.4f, params_sha256 %s\n", r->o->sdk.rank, k.id, res.step, res.accuracy, res.loss,
                hex);
        fflush(r->out);
    } else {
        res.failed = 1;
        res.error = "this worker does not know the task's kind";
    }
    memcpy(r->params, was, sizeof(was));
    if (tessera_task_done(r->t, &res, &e))
        fprintf(stderr, "tessera-worker: task %u: %s\n", k.id, e.message);
}

#define CLAIM_UNITS 4      /* units a dynamic worker asks the master for at a time */
#define DRAIN_POLL_MS 20   /* rank 0, out of units: how often it asks whether all are done */

/* ssp: the values again, at this worker's clock s (the shards answer at once), when a claim
 * says older units were done since the last pull. */
static int pull_all(struct run *r, uint64_t s, struct tessera_error *e)
{
    for (int i = 0; i < TS_MLP_NTENSORS; i++)
        if (tessera_pull(r->t, r->ids[i], s, r->params[i], e))
            return say(e, "pull");
    return 0;
}

/* Dynamic assignment (asp, ssp; docs/scheduler.md): the units of the master's queue, as this
 * worker becomes free, each pushed as this worker's next step. Unit u is the micro-batches the
 * static schedule gives rank u % W at global step u / W. In ssp a grant may say pull (older
 * units were done since the last pull) or retry (they are not: pull, claim again). Rank 0
 * evaluates when the job has done an epoch's units, and at the end waits until every unit is
 * in and pulls the values. */
static int train_dynamic(struct run *r, uint32_t spe, uint64_t total, FILE *log,
                         struct overlap *ov, struct tessera_error *e)
{
    const struct train_opts *o = r->o;
    const void *const *grads = (const void *const *)r->acc;
    uint64_t units = total * o->sdk.workers, s = r->start, epoch = UINT64_MAX, evaluated = 0;
    uint64_t since = 0, per_epoch = (uint64_t)spe * o->sdk.workers, done = 0;
    int64_t te = ts_now_ms();
    struct tessera_work w = { 0 };
    int rc;

    for (;;) {
        uint64_t u, g;
        int64_t t0;
        if (s >= w.step + w.count) {
            /* A claim says the units before s are done: with --overlap, pushed first. */
            if (ov && (rc = overlap_wait(ov, e)))
                return say(e, "step");
            if (tessera_claim_work(r->t, s, CLAIM_UNITS, units, &w, e))
                return say(e, "claim");
            since += (w.done - done) * o->batch / o->sdk.workers;   /* the job's samples */
            r->report_samples += (w.done - done) * o->batch / o->sdk.workers;
            done = w.done;
            if (o->sdk.rank == 0 && w.done / per_epoch > evaluated / per_epoch) {
                evaluated = w.done;
                evaluate(r, w.done / per_epoch, w.done / o->sdk.workers, total, &since, &te);
            }
            if ((w.retry || w.pull) && (rc = pull_all(r, s, e)))   /* ssp */
                return rc;
            if (w.retry)   /* the master waited: claim again at once */
                continue;
            if (!w.count)
                break;
        }
        u = w.first + (s - w.step);
        g = u / o->sdk.workers;
        if (g / spe != epoch)
            ts_schedule_perm(&r->sched, (uint32_t)(epoch = g / spe), r->perm);
        t0 = ts_now_ns();
        if ((rc = compute(r, (uint32_t)(g % spe) * o->batch, (uint32_t)(u % o->sdk.workers), r->acc,
                          e)))
            return rc;
        if (o->slow_ms)
            ts_sleep_ms(o->slow_ms);
        if (o->slow_factor > 1 && s >= o->slow_from && s < o->slow_until)
            slow_down(o->slow_factor, ts_now_ns() - t0);
        if (ov ? overlap_step(ov, s, e) : tessera_step_slots(r->t, s, 1, &o->sdk.rank, &grads,
                                                             r->params, e))
            return say(e, "step");
        worker_metrics_step((double)(ts_now_ns() - t0) / 1e9, 0);
        run_task(r, s + 1);
        if (log && (fprintf(log, "unit %" PRIu64 " step %" PRIu64 " rank %u\n", u, s,
                            o->sdk.rank) < 0 || fflush(log)))
            return say(&(struct tessera_error){ .message = "cannot write --unit-log" }, "log");
        progress(r, false);
        s++;
    }
    if (ov && (rc = overlap_end(ov, e)))
        return say(e, "step");
    while (o->sdk.rank == 0 && w.outstanding) {   /* the others' last units */
        ts_sleep_ms(DRAIN_POLL_MS);
        if (tessera_claim_work(r->t, s, 0, units, &w, e))
            return say(e, "claim");
    }
    since += (w.done - done) * o->batch / o->sdk.workers;
    if (o->sdk.rank == 0 && (rc = pull_all(r, s, e)))
        return rc;
    if (o->sdk.rank == 0 && w.done > evaluated)   /* the end, on the job's final values */
        evaluate(r, (w.done + per_epoch - 1) / per_epoch, w.done / o->sdk.workers, total, &since,
                 &te);
    if (w.lost)
        fprintf(r->out, "rank %u: %" PRIu64 " of %" PRIu64 " units were lost with a worker that "
                "died\n", o->sdk.rank, w.lost, w.units);
    return 0;
}

int train_run(const struct train_opts *o)
{
    struct run r = { .o = o, .out = o->json ? stderr : stdout };
    struct tessera_error e = { 0 };
    uint32_t spe, *slots = calloc(o->sdk.workers, sizeof(uint32_t));
    const void *const **grads = calloc(o->sdk.workers, sizeof(*grads));
    struct overlap *ov = NULL;
    size_t ns;
    uint64_t total, s, since = 0;
    bool fresh;
    int64_t t0, te;
    char hex[65] = "";
    int rc;

    ts_mlp_single_thread();
    if (!slots || !grads) {
        rc = say(&(struct tessera_error){ .message = "out of memory" }, "setup");
        goto out;
    }
    if ((rc = setup(&r, &e)) || (rc = worker_metrics_start(o, r.t)))
        goto out;
    spe = ts_schedule_steps_per_epoch(&r.sched);
    total = o->steps ? o->steps : (uint64_t)o->epochs * spe;
    t0 = te = r.report_ms = ts_now_ms();
    r.accuracy = NAN;
    if (o->overlap && overlap_open(&ov, r.t, o->sdk.rank, r.params, r.acc)) {
        rc = say(&(struct tessera_error){ .message = "out of memory" }, "overlap");
        goto out;
    }
    r.ov = ov;
    if (o->sdk.dynamic) {
        FILE *log = o->unit_log ? fopen(o->unit_log, "a") : NULL;
        if (o->unit_log && !log) {
            fprintf(stderr, "tessera-worker: --unit-log %s: %s\n", o->unit_log, strerror(errno));
            rc = 1;
            goto out;
        }
        rc = train_dynamic(&r, spe, total, log, ov, &e);
        if (log)
            fclose(log);
        if (rc)
            goto out;
    }
    for (s = o->sdk.dynamic ? total : r.start, fresh = true; s < total; s++) {
        uint32_t k = (uint32_t)(s % spe);
        int64_t step_t0 = ts_now_ns(), exchange_t0;
        if (k == 0 || fresh)
            ts_schedule_perm(&r.sched, (uint32_t)(s / spe), r.perm);
        fresh = false;
        ns = tessera_slots(r.t, slots, o->sdk.workers);
        for (size_t q = 0; q < ns; q++) {
            void **acc = sums_of(&r, q);
            if (!acc) {
                rc = say(&(struct tessera_error){ .message = "out of memory" }, "slots");
                goto out;
            }
            grads[q] = (const void *const *)acc;
            if ((rc = compute(&r, k * o->batch, slots[q], acc, &e)))
                goto out;
        }
        if (o->slow_ms) /* testing: a slow worker */
            ts_sleep_ms(o->slow_ms);
        if (o->slow_factor > 1 && s >= o->slow_from && s < o->slow_until)
            slow_down(o->slow_factor, ts_now_ns() - step_t0);
        exchange_t0 = ts_now_ns();
        rc = ov ? overlap_step(ov, s, &e) : tessera_step_slots(r.t, s, ns, slots, grads,
                                                                r.params, &e);
        if (!rc)
            worker_metrics_step((double)(ts_now_ns() - step_t0) / 1e9,
                                (double)(ts_now_ns() - exchange_t0) / 1e9);
        if (!rc) {
            r.report_samples += o->batch;
            progress(&r, false);
            run_task(&r, s + 1);
        }
        if (rc == TESSERA_EROLLBACK || rc == TESSERA_ESLOTS) {
            /* The schedule is a function of the step: the same samples from there on. */
            fprintf(r.out, "rank %u: %s\n", o->sdk.rank, e.message);
            fflush(r.out);
            r.rollbacks += rc == TESSERA_EROLLBACK;
            s = tessera_resume_step(r.t) - 1;   /* s++ makes it the resume step */
            fresh = true;
            continue;
        }
        if (rc) {
            rc = say(&e, "step");
            goto out;
        }
        since += o->batch;
        if (ov && s + 1 == total && (rc = overlap_end(ov, &e))) {   /* the values, as pulled */
            rc = say(&e, "step");
            goto out;
        }
        if (o->sdk.rank == 0 && (k == spe - 1 || s + 1 == total))
            evaluate(&r, s / spe + 1, s + 1, total, &since, &te);
    }
    if (o->sdk.rank == 0)
        report(&r, total > r.start ? total : r.start, total > r.start ? total - r.start : 0,
               (double)(ts_now_ms() - t0) / 1000.0, hex);
    else   /* every worker tells the master its fingerprint: rank 0 may have died */
        fingerprint(&r, hex);
    rc = 0;
out:
    worker_metrics_stop();   /* its collector reads r.t */
    tessera_set_result(r.t, rc != 0, rc ? (e.message[0] ? e.message : "failed") : hex);
    overlap_close(ov);   /* before the SDK it uses; r.params are not read after */
    tessera_close(r.t);
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        free(r.grad[i]);
        for (uint32_t k = 0; r.more && k < o->sdk.workers; k++)
            free(r.more[k][i]);
    }
    free(r.more);
    free(slots);
    free(grads);
    free(r.xb);
    free(r.yb);
    free(r.perm);
    free(r.first);
    ts_mlp_free(r.mlp);
    ts_data_free(&r.train);
    ts_data_free(&r.test);
    return rc;
}
