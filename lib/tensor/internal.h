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

/* log(u) for 0 < u <= 1 and cos(2 * pi * t) for 0 <= t < 1 from + - * / alone, so that the
 * initial values are the same bits on every host: libm may pick a different code path per CPU
 * (glibc has FMA variants of log and cos). Relative error below 1e-15 (tests/unit). */
double ts__init_log(double u);
double ts__init_cos2pi(double t);

#endif
