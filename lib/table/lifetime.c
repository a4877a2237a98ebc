/* lifetime.c - a row lifetime by the clock (ts_table_cfg.ttl_seconds; table.h, "Row
 * lifetime"): when a step sweeps, and below which step the rows it drops were last updated.
 *
 * The head of the rows plans each step's sweep from its clock at the step's first push
 * (life_plan); the plan travels to the copies in their ROWS_COPY frames (services/shard), so
 * that a copy drops exactly the rows its head drops whatever its own clock says (a copy reads
 * its clock only to mark when its steps applied, for the day it takes over). A row's age is
 * its last update's step, turned into time by marks: (s, ms) says every step below s was
 * applied by ms, a mark at most every ttl / LIFE_MARK_SPLIT, LIFE_MARKS kept (so twice the
 * lifetime is covered). A sweep drops the rows last updated below the newest mark at least
 * ttl old: each had gone at least ttl without an update. */
#include "internal.h"

#include <string.h>

#include "util/proc.h"

#define LIFE_MARK_SPLIT 16   /* marks a lifetime, at most */

void life_init(struct lifetime *l, uint64_t ttl_seconds)
{
    *l = (struct lifetime){ .ttl_ms = (int64_t)ttl_seconds * 1000, .now_ms = ts_now_ms };
    l->swept_ms = l->now_ms();
}

void life_restart(struct lifetime *l)
{
    if (!l->ttl_ms)
        return;
    l->nmarks = 0;
    l->cut_done = 0;
    l->plan[0] = l->plan[1] = (struct life_plan){ 0 };
    l->swept_ms = l->now_ms();
}

void life_plan(struct lifetime *l, uint64_t step, uint32_t code)
{
    struct life_plan *p = &l->plan[step & 1];
    uint64_t cut = 0;
    int64_t now;

    if (!l->ttl_ms || (p->code && p->step == step))
        return;
    if (!code) {   /* the head: its clock decides */
        code = TS_TABLE_SWEEP_NONE;
        now = l->now_ms();
        for (size_t i = 0; now - l->swept_ms >= l->ttl_ms && i < l->nmarks; i++)
            if (now - l->marks[i].ms >= l->ttl_ms)
                cut = l->marks[i].step;
        if (cut > l->cut_done && step + 1 - cut <= UINT32_MAX - 2)
            code = (uint32_t)(step + 1 - cut) + 2;
    }
    *p = (struct life_plan){ .step = step, .code = code };
}

uint32_t life_plan_of(const struct lifetime *l, uint64_t step)
{
    const struct life_plan *p = &l->plan[step & 1];

    return l->ttl_ms && p->step == step ? p->code : 0;
}

uint64_t life_applied(struct lifetime *l, uint64_t step)
{
    const struct life_plan *p = &l->plan[step & 1];
    int64_t now, every;
    uint64_t cut = 0;

    if (!l->ttl_ms)
        return 0;
    now = l->now_ms();
    /* A plan's distance is 1 or more (life_plan: the cut is at most the step); a copy given
     * another by a head (a bad frame) does not sweep rather than drop this step's rows. */
    if (p->step == step && p->code > TS_TABLE_SWEEP_NONE + 1 && p->code - 2 <= step + 1) {
        cut = step + 1 - (p->code - 2);
        l->cut_done = cut > l->cut_done ? cut : l->cut_done;
        l->swept_ms = now;
    }
    every = l->ttl_ms / LIFE_MARK_SPLIT > 0 ? l->ttl_ms / LIFE_MARK_SPLIT : 1;
    if (!l->nmarks || now - l->marks[l->nmarks - 1].ms >= every) {
        if (l->nmarks == LIFE_MARKS)
            memmove(l->marks, l->marks + 1, --l->nmarks * sizeof(*l->marks));
        l->marks[l->nmarks++] = (struct life_mark){ .step = step + 1, .ms = now };
    }
    return cut;
}
