/* leaseq.c - members by the time their lease runs out; see leaseq.h. */
#include "leaseq.h"

#include <stdlib.h>

static bool before(const struct leaseq_entry *a, const struct leaseq_entry *b)
{
    return a->due_ms < b->due_ms;
}

ts_status leaseq_push(struct leaseq *q, int64_t due_ms, uint32_t kind, uint32_t id,
                      struct ts_err *err)
{
    struct leaseq_entry e = { due_ms, id, kind };
    size_t i;

    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        struct leaseq_entry *v = realloc(q->v, cap * sizeof(*v));
        if (!v)
            return ts_err_set(err, TS_ENOMEM, "no memory for the lease queue (%zu members)",
                              q->n + 1);
        q->v = v;
        q->cap = cap;
    }
    for (i = q->n++; i > 0 && before(&e, &q->v[(i - 1) / 2]); i = (i - 1) / 2)
        q->v[i] = q->v[(i - 1) / 2];
    q->v[i] = e;
    return TS_OK;
}

bool leaseq_pop_due(struct leaseq *q, int64_t now_ms, struct leaseq_entry *out)
{
    struct leaseq_entry last;
    size_t i = 0;

    if (!q->n || q->v[0].due_ms > now_ms)
        return false;
    *out = q->v[0];
    last = q->v[--q->n];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && before(&q->v[c + 1], &q->v[c]))
            c++;
        if (!before(&q->v[c], &last))
            break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n)
        q->v[i] = last;
    return true;
}

void leaseq_free(struct leaseq *q)
{
    free(q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
