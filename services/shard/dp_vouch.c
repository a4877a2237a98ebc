/* dp_vouch.c - the workers this shard served since its last heartbeat, which vouches for
 * them to the master (dataplane.h, dataplane_vouched; docs/scaling.md, "Workers vouched for by
 * the shards"). serve() in dataplane.c marks each worker connection it serves. */
#include <stdlib.h>

#include "dataplane.h"
#include "dp_internal.h"

struct vouch {
    uint32_t id;
    uint64_t step;
};

static int by_id(const void *a, const void *b)
{
    uint32_t x = ((const struct vouch *)a)->id, y = ((const struct vouch *)b)->id;
    return (x > y) - (x < y);
}

size_t dataplane_vouched(struct dataplane *dp, uint32_t *ids, uint64_t *steps, size_t max)
{
    struct vouch *v = malloc((max ? max : 1) * sizeof(*v));
    size_t n = 0, k = 0;

    if (!v)
        return 0;   /* no vouch this beat: the workers beat for themselves */
    pthread_mutex_lock(&dp->mu);
    for (struct dp_conn *dc = dp->conns; dc && n < max; dc = dc->next)
        if (dc->member && atomic_exchange(&dc->answered, false))
            v[n++] = (struct vouch){ dc->member, atomic_load(&dc->pushed_step) };
    pthread_mutex_unlock(&dp->mu);
    qsort(v, n, sizeof(*v), by_id);   /* a worker may hold several connections here */
    for (size_t i = 0; i < n; i++) {
        if (k && ids[k - 1] == v[i].id) {
            steps[k - 1] = v[i].step > steps[k - 1] ? v[i].step : steps[k - 1];
            continue;
        }
        ids[k] = v[i].id;
        steps[k++] = v[i].step;
    }
    free(v);
    return k;
}
