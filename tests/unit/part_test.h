/* part_test.h - what lib/ps's two unit tests (test_part.c, test_part_sums.c) share: a raw
 * push and rank 0's pull, in one call each. */
#ifndef TS_TESTS_PART_TEST_H
#define TS_TESTS_PART_TEST_H

#include "ps/part.h"

/* One raw push: no loss scale. */
static inline ts_status push(struct ts_part *p, uint32_t rank, uint64_t step, unsigned enc,
                      const void *data, size_t bytes, bool *applied, struct ts_err *e)
{
    struct ts_push in = { .rank = rank, .step = step, .encoding = enc, .payload = data,
                          .bytes = bytes };
    return ts_part_push(p, &in, applied, e);
}

/* Rank 0's pull of version `want` into out (BSP, REDUCE); *v its version. */
static inline ts_status read_at(struct ts_part *p, uint64_t want, int ms, float *out, uint64_t *v,
                         struct ts_err *e)
{
    struct ts_pull_info info = { 0 };
    ts_status st = ts_part_pull(p, 0, want, 0, ms, NULL, out, &info, e);

    *v = info.version;
    return st;
}

#endif
