/* tensor_rng.h - what test_tensor.c and test_tensor_vec.c share: a seeded generator
 * (splitmix64) and random gradient values. Header-only, static: each test has its copy. */
#ifndef TS_TESTS_TENSOR_RNG_H
#define TS_TESTS_TENSOR_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

/* A random gradient value: magnitude 10^U(-8, 3), random sign. */
static inline float rand_grad(uint64_t *s)
{
    float v = (float)pow(10.0, -8.0 + 11.0 * rng_unit(s));

    return rng_next(s) & 1 ? -v : v;
}

#endif
