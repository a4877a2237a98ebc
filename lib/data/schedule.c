/* schedule.c - which samples make up each step, and which worker computes which of them.
 *
 * The epoch's permutation is a Fisher-Yates shuffle driven by splitmix64, a 64-bit generator
 * whose whole definition is the few lines below, so every host and every language can
 * reproduce it bit for bit. Indices are drawn with Lemire's multiply-shift method plus its
 * rejection step, which is exactly uniform (a plain modulo would favour small indices).
 * The generator's start state mixes seed and epoch through the splitmix64 finalizer, a
 * bijection: two epochs of one seed, or one epoch of two seeds, never share a start state. */
#include "data/data.h"
#include "data/splitmix.h"


/* Uniform in [0, range), range >= 1, from the high 32 bits of each draw (Lemire 2019). */
static uint32_t below(uint64_t *s, uint32_t range)
{
    uint64_t m = (ts_splitmix64(s) >> 32) * range;
    uint32_t low = (uint32_t)m;

    if (low < range) {
        uint32_t reject = -range % range;   /* 2^32 mod range */

        while (low < reject) {
            m = (ts_splitmix64(s) >> 32) * range;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

ts_status ts_schedule_check(const struct ts_schedule *s, struct ts_err *err)
{
    if (s->batch == 0 || s->micro == 0)
        return ts_err_set(err, TS_EINVAL, "schedule: batch %u, micro-batch %u: both must be "
                          "at least 1", s->batch, s->micro);
    if (s->batch % s->micro != 0)
        return ts_err_set(err, TS_EINVAL, "schedule: batch %u is not a multiple of the "
                          "micro-batch %u", s->batch, s->micro);
    if (s->batch > s->n)
        return ts_err_set(err, TS_EINVAL, "schedule: batch %u is larger than the %u training "
                          "samples", s->batch, s->n);
    return TS_OK;
}

uint32_t ts_schedule_steps_per_epoch(const struct ts_schedule *s)
{
    return s->batch ? s->n / s->batch : 0;
}

void ts_schedule_perm(const struct ts_schedule *s, uint32_t epoch, uint32_t *perm)
{
    uint64_t st = ts_mix64(s->seed ^ ts_mix64((uint64_t)epoch + TS_GOLDEN));

    for (uint32_t i = 0; i < s->n; i++)
        perm[i] = i;
    for (uint32_t i = s->n; i > 1; i--) {
        uint32_t j = below(&st, i), t = perm[i - 1];

        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

uint32_t ts_schedule_micro(const struct ts_schedule *s, uint32_t rank, uint32_t workers,
                           uint32_t *first)
{
    uint32_t count, k = 0;

    if (workers == 0 || rank >= workers || s->micro == 0)
        return 0;
    count = s->batch / s->micro;
    for (uint32_t j = rank; j < count; j += workers)
        first[k++] = j * s->micro;
    return k;
}
