/* sdk_combine.c - one push per step for a worker that owns several slots (docs/scheduler.md):
 * the slots' gradients summed here and pushed once, a combined push that the shards count as
 * each of those slots (part.h: ts_push.slots), instead of one push per slot. A balanced job of
 * W slots on N workers then moves N gradients a step, not W.
 *
 * The bits do not change. Exact mode sums the slots' int64 fixed point: integer addition
 * regroups freely. With exact_push float, a shard would round each slot's float push; this
 * rounds each slot the same way (ts_fixed_from_f32, a pure function of the float) and pushes
 * the int64 sum, from three slots on (two float pushes are the bytes of one int64 push), since
 * rounding the slots' float sum would round differently. Float mode sums in ascending slot
 * order, one more grouping of a float sum that was not reproducible to begin with.
 *
 * When slots change hands during a step, the slot a worker just got may have been pushed on
 * some partitions by its owner before: a combined push overlapping it there is refused
 * (TS_ESLOTS, nothing added) and the step starts over. To make that rare, a step is combined
 * only where the roster is the one the worker's previous step began with, and that step
 * completed; a step sent again, or the first after a change, goes slot by slot, as a retry
 * that partitions which counted a slot acknowledge (docs/elastic.md, "Exactly once").
 * Ownership: each tensor's sum (sdk_tensor.slot_sum) is allocated at the first combined step
 * and freed with the tensor. */
#include "client/sdk_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/knobs.h"

#define MAX_SLOTS 64   /* a combined push names its slots in a 64-bit mask */

/* On unless $TESSERA_COMBINE_SLOTS=off (bench/modes.py's per-slot rows, to measure the
 * difference). It was off by default for a while after test_elastic's test_joined failed under
 * load with it; the cause was the shard's bsp pulls, not combining (docs/scheduler.md, "One push
 * per worker"). */
static bool combine_off(void)
{
    return ts_knob_is(TS_KNOB_COMBINE_SLOTS, "off");
}

/* Whether a step of slots[0..n) may go as one push: bsp, at most 64 slots, several of them,
 * three or more for float pushes in exact mode, and in an elastic job the roster unchanged
 * since the step before, which completed. */
static bool pays(struct tessera *t, uint64_t step, size_t n)
{
    uint64_t roster = 0;
    uint32_t ignore[1];

    if (t->elastic && t->ms)
        (void)ts_membership_slots(t->ms, &roster, ignore, 1);
    t->comb.step_roster = roster;
    if (n < 2 || t->job.mode != TS_MODE_BSP || t->job.workers > MAX_SLOTS ||
        (t->push_f32 && n < 3) || combine_off())
        return false;
    return !t->elastic || (step == t->comb.next && roster == t->comb.roster);
}

/* x's slot sum from grads[k][i], k < n: false (nothing to push combined) on an overflow of the
 * fixed-point range, which slot-by-slot pushes leave the shards to refuse or not. */
static bool sum_tensor(struct tessera *t, int i, size_t n, const void *const *const *grads)
{
    struct sdk_tensor *x = t->tensors[i];
    ts_status st = TS_OK;

    if (!x->slot_sum && !(x->slot_sum = malloc(x->numel * sizeof(int64_t) + 1)))
        return false;
    if (!t->job.exact) {
        memcpy(x->slot_sum, grads[0][i], x->numel * sizeof(float));
        for (size_t k = 1; k < n; k++)
            ts_f32_add(x->slot_sum, grads[k][i], x->numel);
        return true;
    }
    if (t->push_f32)
        st = ts_fixed_from_f32(grads[0][i], x->numel, x->slot_sum, NULL);
    else
        memcpy(x->slot_sum, grads[0][i], x->numel * sizeof(int64_t));
    for (size_t k = 1; !st && k < n; k++)
        st = t->push_f32 ? ts_fixed_add_f32(x->slot_sum, grads[k][i], x->numel, NULL)
                         : ts_fixed_add(x->slot_sum, grads[k][i], x->numel, NULL);
    return st == TS_OK;
}

void sdk_combine_plan(struct tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                      const void *const *const *grads)
{
    uint64_t mask = 0;

    t->comb.push_mask = 0;
    t->comb.push_i64 = false;
    if (!pays(t, step, n))
        return;
    for (int i = 0; i < t->ntensors; i++)
        if (t->tensors[i]->active && !sum_tensor(t, i, n, grads))
            return;
    for (size_t k = 0; k < n; k++)
        mask |= 1ull << slots[k];
    t->comb.push_mask = mask;
    t->comb.push_i64 = t->push_f32;
}

void sdk_combine_done(struct tessera *t, uint64_t step, bool ok)
{
    if (ok) {
        t->comb.next = step + 1;
        t->comb.roster = t->comb.step_roster;
    } else {
        t->comb.next = UINT64_MAX;   /* the step starts over: slot by slot */
    }
    t->comb.push_mask = 0;
    t->comb.push_i64 = false;
}
