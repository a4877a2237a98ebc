/* pushpull_worker.c - bench_pushpull's worker process: connects to the cluster the parent
 * started, registers one tensor, and times tessera_step with its own buffers or with
 * tessera_buffers' (pushpull.h; what is measured is explained in pushpull.c). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchlib.h"
#include "pushpull.h"
#include "tessera.h"

#define FILL_CHUNK 4096            /* floats converted per tessera_to_fixed call (stack) */

struct wopts {
    const char *master, *job, *transport;
    int64_t rank, bytes, iters, workers, partition_bytes;
    bool exact, buffers;
    int mode;                      /* enum pp_mode */
};

static int werr(const struct wopts *w, const char *what, const struct tessera_error *e)
{
    fprintf(stderr, "bench_pushpull worker %" PRId64 ": %s: %s\n", w->rank, what, e->message);
    return 1;
}

/* Writes the gradient, n elements. The values do not matter (lr ~ 0); every page is touched.
 * Exact mode with int64 pushes converts them here, a chunk at a time straight into the int64
 * buffer: converting is the trainer's work, not the step's. With float pushes the shards
 * round them, in the step. */
static int fill_grad(const struct wopts *w, void *grad, size_t n)
{
    float chunk[FILL_CHUNK];
    struct tessera_error e;

    for (size_t i0 = 0; i0 < n; i0 += FILL_CHUNK) {
        size_t m = n - i0 < FILL_CHUNK ? n - i0 : FILL_CHUNK;
        bool fixed = w->mode == PP_EXACT;
        float *g = fixed ? chunk : (float *)grad + i0;
        for (size_t i = 0; i < m; i++)
            g[i] = 1e-3f * (float)((i0 + i) % 7);
        if (fixed && tessera_to_fixed(chunk, m, (int64_t *)grad + i0, &e))
            return werr(w, "to_fixed", &e);
    }
    return 0;
}

/* Registers the tensor, takes the SDK's buffers for a buffers run (*params and *grad are NULL
 * then) or keeps the caller's, writes the gradient and pulls version 0 into *params. */
static int worker_setup(const struct wopts *w, tessera *t, float **params, void **grad)
{
    uint64_t shape[1] = { (uint64_t)w->bytes / sizeof(float) };
    const float *view = NULL;
    struct tessera_error e;
    int id;

    if (tessera_register(t, "x", shape, 1, "zeros", 1, 0, 0, (uint64_t)w->partition_bytes, &id,
                         &e))
        return werr(w, "register", &e);
    if (w->buffers && tessera_buffers(t, id, &view, grad, &e))
        return werr(w, "buffers", &e);
    /* The view is read-only to us; the SDK recognises it as the destination and then writes
     * only the partitions it does not map (private pages). The cast meets tessera_step's
     * float *const *. */
    if (w->buffers)
        *params = (float *)view;
    if (fill_grad(w, *grad, shape[0]))
        return 1;
    if (tessera_pull(t, id, 0, *params, &e))
        return werr(w, "pull version 0", &e);
    return 0;
}

/* Connects, sets up, warms up, says "ready PARTITION_BYTES" (the size its tensor is cut in),
 * times the steps, prints one line:
 * "TRANSPORT CPU_NS NS1 .. NSn". params and grad: the worker's own, or NULL for a buffers run. */
static int worker_run(const struct wopts *w, float *params, void *grad, int64_t *ns)
{
    struct tessera_options to = { .master = w->master, .job = w->job, .rank = (unsigned)w->rank,
                                  .workers = (unsigned)w->workers, .exact = w->exact,
                                  .batch = 1,
                                  .optimizer = OPTIMIZER, .transport = w->transport,
                                  .timeout_ms = STEP_TIMEOUT_MS,
                                  .exact_push = w->mode == PP_EXACT_F32
                                                    ? TESSERA_EXACT_PUSH_FLOAT
                                                    : TESSERA_EXACT_PUSH_FIXED };
    const void *grads[1];
    float *pp[1];
    struct tessera_error e;
    int64_t cpu0 = 0, t0;
    tessera *t;
    int rc;

    if (tessera_connect(&to, &t, &e))
        return werr(w, "connect", &e);
    if ((rc = worker_setup(w, t, &params, &grad)))
        goto out_close;
    grads[0] = grad;
    pp[0] = params;
    for (int64_t s = 0; s < WARMUP + w->iters; s++) {
        if (s == WARMUP) {
            printf("ready %" PRIu64 "\n", tessera_partition_bytes(t, 0));
            fflush(stdout);
            cpu0 = ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        }
        t0 = ts_now_ns();
        if (tessera_step(t, (uint64_t)s, grads, pp, &e)) {
            rc = werr(w, "step", &e);
            goto out_close;
        }
        if (s >= WARMUP)
            ns[s - WARMUP] = ts_now_ns() - t0;
    }
    printf("%s %" PRId64, tessera_transport(t), ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
    for (int64_t i = 0; i < w->iters; i++)
        printf(" %" PRId64, ns[i]);
    printf("\n");
    fflush(stdout);
out_close:
    tessera_close(t);
    return rc;
}

int pushpull_worker_main(int argc, char **argv)
{
    int rc = 1;

    if (argc != 10)
        return 2;
    struct wopts w = { argv[0], argv[1], argv[2], atoll(argv[3]), atoll(argv[4]), atoll(argv[5]),
                       atoll(argv[8]), atoll(argv[9]), atoi(argv[6]) != PP_FLOAT,
                       strcmp(argv[7], "1") == 0, atoi(argv[6]) };
    size_t n = (size_t)w.bytes / sizeof(float);
    if (w.workers < 1 || w.workers > MAX_WORKERS || w.rank < 0 || w.rank >= w.workers ||
        w.bytes < 4 || w.iters < 1 || w.partition_bytes < 0 || w.mode < 0 || w.mode >= PP_MODES)
        return 2;
    /* Own buffers: memory the trainer allocated itself, which every step copies from and to. */
    float *params = w.buffers ? NULL : malloc(n * sizeof(float));
    void *grad = w.buffers ? NULL : malloc(n * (w.mode == PP_EXACT ? sizeof(int64_t) : sizeof(float)));
    int64_t *ns = calloc((size_t)w.iters, sizeof(*ns));
    if (!ns || (!w.buffers && (!params || !grad)))
        fprintf(stderr, "bench_pushpull worker: out of memory for %" PRId64 " bytes\n", w.bytes);
    else
        rc = worker_run(&w, params, grad, ns);
    free(grad);
    free(params);
    free(ns);
    return rc;
}
