/* splitmix.h - splitmix64, the counter-based generator lib/data's draws use (the schedule's
 * shuffles, schedule.c; the click log's streams, ctr.c): one place for its constants, so two
 * modules cannot drift apart. Pure functions; no state beyond the caller's. */
#ifndef TS_DATA_SPLITMIX_H
#define TS_DATA_SPLITMIX_H

#include <stdint.h>

#define TS_GOLDEN 0x9E3779B97F4A7C15ull   /* 2^64 / the golden ratio: the generator's step */

/* The splitmix64 finalizer: a bijection on 64-bit values with good avalanche. */
static inline uint64_t ts_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next value of the stream whose state is *s. */
static inline uint64_t ts_splitmix64(uint64_t *s)
{
    *s += TS_GOLDEN;
    return ts_mix64(*s);
}

#endif
