/* scratch.c - buffers an operation reuses from the last one (internal.h, struct scratch). */
#include "table/internal.h"

#include <stdlib.h>

void *scratch_get(struct scratch *s, size_t bytes)
{
    void *p;

    if (bytes > SCRATCH_KEEP)
        return malloc(bytes);
    if (bytes > s->cap) {
        if (!(p = realloc(s->p, bytes)))
            return NULL;
        s->p = p;
        s->cap = bytes;
    }
    return s->p;
}

void scratch_done(struct scratch *s, void *p)
{
    if (p != s->p)
        free(p);
}

void scratch_fini(struct scratch *s)
{
    free(s->p);
    *s = (struct scratch){ 0 };
}
