/* internal.h - lib/verify's cross-file helpers; not part of the API (verify.h is).
 *
 * The element-by-element kernels of the bit comparison live in walk.c, apart from the block
 * bookkeeping in bits.c, because they come in two builds (AVX2 and portable scalar) that must
 * give identical figures: everything they return is a count or a maximum, which no order of
 * evaluation can change. Threads: pure functions. */
#ifndef TS_VERIFY_INTERNAL_H
#define TS_VERIFY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* What one walk over differing data found. Pairs whose bits are equal are skipped; pairs with
 * a NaN count in ndiff and nnan only. max_rel is +Inf when max_abs is (an infinity met a
 * different value). */
struct ts__verify_walk {
    uint64_t ndiff, nnan, max_ulp;
    double max_abs, max_rel;
};

/* ULP distance of two float32/float64 bit patterns (verify.h's contract). */
uint64_t ts__verify_ulp32(uint32_t a, uint32_t b);
uint64_t ts__verify_ulp64(uint64_t a, uint64_t b);

/* Folds a[0..n) vs b[0..n) into *w (AVX2 where the CPU has it, else scalar). */
void ts__verify_walk32(const uint32_t *a, const uint32_t *b, size_t n,
                       struct ts__verify_walk *w);
/* The portable kernel alone, so tests can hold the AVX2 one to it. */
void ts__verify_walk32_scalar(const uint32_t *a, const uint32_t *b, size_t n,
                              struct ts__verify_walk *w);
void ts__verify_walk64(const uint64_t *a, const uint64_t *b, size_t n,
                       struct ts__verify_walk *w);

#endif
