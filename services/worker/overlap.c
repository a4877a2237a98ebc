/* overlap.c - asp with --overlap (docs/modes.md, "Overlap in ASP"): a step's push and pull
 * run on a thread while the worker computes its next step.
 *
 * Step s + 1 is computed while step s's exchange is in flight, so without step s's own update:
 * one pull interval more stale than plain ASP, where a worker waits for its pull before it
 * computes again. In exchange the exchange is hidden behind compute: a step costs
 * max(compute, exchange) instead of their sum. ASP bounds nothing, so nothing else changes.
 *
 * The extra staleness cost 1-2 points of test accuracy with momentum in bench/modes.py, so the
 * worker computes on predicted values instead (weight prediction, as SpecTrain does for
 * pipelines): the newest values pulled plus the change since the pull before, i.e. where the
 * values will be one pull interval later if they keep moving as they did. That brought the
 * accuracy back within half a point of BSP's (docs/modes.md has the figures).
 *
 * Buffers, all allocated by overlap_open and freed by overlap_close: two sets of values that
 * take turns as the newest pull and the one before it, the predicted set the worker computes
 * with, and a second set of gradient sums (the worker's first set is the SDK's). The worker's
 * arrays params and acc are rewritten in place to name the sets to compute with, so they may
 * point here until overlap_close. The SDK's own value buffers are not pulled into again.
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
    float *own[3][TS_MLP_NTENSORS];      /* two pulled sets and the predicted one */
    void *own_acc[TS_MLP_NTENSORS];
    float *pulling[TS_MLP_NTENSORS];     /* in flight: where its pull lands */
    float *prev[TS_MLP_NTENSORS];        /* the pull before the newest (NULL: none yet) */
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
        for (int k = 0; k < 3; k++)
            ov->own[k][i] = malloc(n * sizeof(float));
        ov->own_acc[i] = malloc(n * sizeof(int64_t));   /* int64 in exact mode */
        if (!ov->own[0][i] || !ov->own[1][i] || !ov->own[2][i] || !ov->own_acc[i]) {
            overlap_close(ov);
            return 1;
        }
        /* The first step computes on the values as they are, from the predicted set. */
        memcpy(ov->own[2][i], params[i], n * sizeof(float));
        params[i] = ov->own[2][i];
        ov->pulling[i] = ov->own[0][i];
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
    /* The values computed with next: newest + (newest - prev). None before, or a rollback's
     * values: the newest as they are. The older pulled set takes the next pull. */
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        uint64_t n = ts_mlp_numel(i);
        const float *newest = ov->pulling[i], *old = ov->prev[i];
        float *pred = ov->own[2][i];
        if (old && !ov->rc) {
            for (uint64_t k = 0; k < n; k++)
                pred[k] = newest[k] + (newest[k] - old[k]);
        } else {
            memcpy(pred, newest, n * sizeof(float));
        }
        ov->pulling[i] = old ? (float *)old : ov->own[1][i];
        ov->prev[i] = (float *)newest;
    }
    if (ov->rc)
        *e = ov->e;
    return ov->rc;
}

void overlap_pulled(const struct overlap *ov, float **params)
{
    for (int i = 0; i < TS_MLP_NTENSORS && ov->prev[i]; i++)
        params[i] = ov->prev[i];
}

int overlap_end(struct overlap *ov, struct tessera_error *e)
{
    int rc = overlap_wait(ov, e);

    if (rc && rc != TESSERA_EROLLBACK)
        return rc;
    for (int i = 0; i < TS_MLP_NTENSORS && ov->prev[i]; i++)
        memcpy(ov->own[2][i], ov->prev[i], ts_mlp_numel(i) * sizeof(float));
    return rc;
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
        for (int k = 0; k < 3; k++)
            free(ov->own[k][i]);
        free(ov->own_acc[i]);
    }
    free(ov);
}
