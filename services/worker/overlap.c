/* overlap.c - asp with --overlap (docs/modes.md, "Overlap in ASP"): a step's push and pull
 * run on a thread while the worker computes its next step.
 *
 * The step s + 1 is computed on the values pulled after step s - 1, without step s's own
 * update: one step more stale than plain ASP, where a worker waits for its pull before it
 * computes again. In exchange the exchange is hidden behind compute: a step costs
 * max(compute, exchange) instead of their sum. ASP bounds nothing, so nothing else changes.
 *
 * Two sets of buffers take turns: the gradient sums (the SDK's, then ours) and the values
 * (the SDK's view, then ours). The worker's arrays point at the set it computes with; the
 * exchange owns the other until overlap_wait. Ownership: the second set is allocated by
 * overlap_open and freed by overlap_close, so the worker's arrays may point at it until then.
 *
 * Threads: only the exchange thread calls tessera_step_slots. Meanwhile the worker computes,
 * and calls only what the SDK serializes for the heartbeat thread anyway (progress reports,
 * tasks); claims wait for overlap_wait, so that a unit is said done only once it is pushed. */
#include "worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"

struct overlap {
    tessera *t;
    uint32_t rank;
    float **params;                      /* the worker's: the values it computes with */
    void **acc;                          /* the worker's: the sums it computes next */
    float *own_params[TS_MLP_NTENSORS];  /* the second set, allocated here */
    void *own_acc[TS_MLP_NTENSORS];
    float *pulling[TS_MLP_NTENSORS];     /* in flight: where its pull lands */
    void *pushing[TS_MLP_NTENSORS];      /* in flight: the sums it pushes */
    uint64_t step;
    pthread_t th;
    bool busy;
    int rc;
    struct tessera_error e;
};

int overlap_open(struct overlap **out, tessera *t, uint32_t rank, float **params, void **acc)
{
    struct overlap *ov = calloc(1, sizeof(*ov));

    *out = NULL;
    if (!ov)
        return 1;
    *ov = (struct overlap){ .t = t, .rank = rank, .params = params, .acc = acc };
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        uint64_t n = ts_mlp_numel(i);
        ov->own_params[i] = malloc(n * sizeof(float));
        ov->own_acc[i] = malloc(n * sizeof(int64_t));   /* int64 in exact mode */
        if (!ov->own_params[i] || !ov->own_acc[i]) {
            overlap_close(ov);
            return 1;
        }
        /* Both sets hold the current values: the first step computes on either. */
        memcpy(ov->own_params[i], params[i], n * sizeof(float));
        ov->pulling[i] = ov->own_params[i];
        ov->pushing[i] = ov->own_acc[i];
    }
    *out = ov;
    return 0;
}

static void *exchange(void *arg)
{
    struct overlap *ov = arg;
    const void *const *grads = (const void *const *)ov->pushing;

    ov->rc = tessera_step_slots(ov->t, ov->step, 1, &ov->rank, &grads, ov->pulling, &ov->e);
    return NULL;
}

int overlap_wait(struct overlap *ov, struct tessera_error *e)
{
    if (!ov->busy)
        return 0;
    pthread_join(ov->th, NULL);
    ov->busy = false;
    if (ov->rc && ov->rc != TESSERA_EROLLBACK) {
        *e = ov->e;
        return ov->rc;
    }
    /* The newest values become the ones computed with, the snapshot's after a rollback; the
     * others take the next pull. */
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        float *newest = ov->pulling[i];
        ov->pulling[i] = ov->params[i];
        ov->params[i] = newest;
    }
    if (ov->rc)
        *e = ov->e;
    return ov->rc;
}

int overlap_step(struct overlap *ov, uint64_t step, struct tessera_error *e)
{
    int rc = overlap_wait(ov, e);

    if (rc)
        return rc;
    /* The sums just computed go out; the next step computes into the other set. */
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        void *done = ov->acc[i];
        ov->acc[i] = ov->pushing[i];
        ov->pushing[i] = done;
    }
    ov->step = step;
    if (pthread_create(&ov->th, NULL, exchange, ov) != 0) {
        snprintf(e->message, sizeof(e->message), "overlap: cannot start the exchange thread");
        return TESSERA_ENOMEM;
    }
    ov->busy = true;
    return 0;
}

void overlap_close(struct overlap *ov)
{
    struct tessera_error ignore;

    if (!ov)
        return;
    (void)overlap_wait(ov, &ignore);
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        free(ov->own_params[i]);
        free(ov->own_acc[i]);
    }
    free(ov);
}
