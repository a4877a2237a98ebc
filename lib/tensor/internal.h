/* internal.h - lib/tensor helpers shared between its files and its unit test; not public. */
#ifndef TS_TENSOR_INTERNAL_H
#define TS_TENSOR_INTERNAL_H

/* Bit-identical results need a * b + c rounded twice everywhere: never contracted into a fused
 * multiply-add, which GCC does by default outside ISO C modes (-std=gnu11) when the target has
 * FMA (-march=native). The CMake build is ISO C11, but a file of lib/tensor that computes in
 * floating point includes this header first, so any build gets the same bits. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* The bulk loops of exact.c and optim.c run in blocks of TS_LANES elements with an inner loop of
 * constant trip count, which GCC's -O2 vectoriser takes (exact.c says why).
 * TS_HOT compiles such a function twice, for the x86-64 baseline (SSE2) and for x86-64-v3
 * (AVX2), and the loader picks one per CPU (GCC function multi-versioning, an ifunc). Every
 * element goes through the same correctly rounded IEEE operations in either version, so both
 * give the same bits (tests/unit/test_tensor.c compares them with scalar references).
 * TS_TENSOR_NO_CLONES turns multi-versioning off. With -fno-tree-vectorize as well it gives the
 * portable build (CMake: TESSERA_TENSOR_SCALAR=ON), which must give the same bits; the unit
 * tests test_tensor_sse2 and test_tensor_scalar build lib/tensor both ways. */
#define TS_LANES 8
#if !defined(TS_TENSOR_NO_CLONES) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) && __GNUC__ >= 11
#define TS_HOT __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define TS_HOT
#endif

/* log(u) for 0 < u <= 1 and cos(2 * pi * t) for 0 <= t < 1 from + - * / alone, so that the
 * initial values are the same bits on every host: libm may pick a different code path per CPU
 * (glibc has FMA variants of log and cos). Relative error below 1e-15 (tests/unit). */
double ts__init_log(double u);
double ts__init_cos2pi(double t);

#endif
