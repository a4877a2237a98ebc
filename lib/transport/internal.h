/* internal.h - helpers shared by the transport backends (not part of the public interface).
 *
 * Every wait in a backend is bounded by a deadline computed once from the caller's ms, so
 * retries after EINTR or a spurious wake-up never extend it. */
#ifndef TS_TRANSPORT_INTERNAL_H
#define TS_TRANSPORT_INTERNAL_H

#include <stdint.h>

#include "util/proc.h"

/* The monotonic time ms from now; -1 (no deadline) when ms < 0. */
static inline int64_t ts__deadline(int ms)
{
    return ms < 0 ? -1 : ts_now_ms() + ms;
}

/* Milliseconds left until deadline, for poll(2): -1 for none, else 0 .. INT32_MAX. */
static inline int ts__left_ms(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = deadline - ts_now_ms();
    return left < 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : (int)left;
}

#endif
