/* internal.h - lib/codec's kernels, shared between its files; not public.
 *
 * Payload pointers are bytes of any alignment (a payload sits wherever a frame put it).
 * r is the residual (NULL for none). Given one, an encoder returns true when the encoding
 * holds an Inf or NaN, and then leaves r untouched (codec.h: the shard skips such a step). */
#ifndef TS_CODEC_INTERNAL_H
#define TS_CODEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* decode(out) / scale must be exactly what the residual subtracts: no a * b + c contracted
 * into a fused multiply-add, whatever the build's flags (GCC contracts by default outside ISO
 * C modes when the target has FMA, and the AVX2 clones below have it). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/codec writes little-endian payloads with memcpy: port it for a big-endian host"
#endif

/* The hot loops are compiled for the x86-64 baseline (SSE2) and for x86-64-v3 (AVX2), and the
 * loader picks one per CPU (GCC function multi-versioning), as lib/tensor/exact.c does. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define TS_CODEC_HOT __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define TS_CODEC_HOT
#endif

/* convert.c: 16-bit floats (fp16 when f16, else bf16). */
bool ts__codec_enc16(bool f16, const float *g, float *r, size_t n, float scale,
                     unsigned char *out);
void ts__codec_dec16(bool f16, const unsigned char *p, size_t n, float *out);
void ts__codec_add16(bool f16, const unsigned char *p, size_t n, float mul, float *acc);

/* convert.c: float32 (NONE) and INT8; p points at the payload's start. */
bool ts__codec_enc_none(const float *g, float *r, size_t n, float scale, unsigned char *out);
void ts__codec_add_none(const unsigned char *p, size_t n, float mul, float *acc);
bool ts__codec_enc_int8(const float *g, float *r, size_t n, float scale, unsigned char *out);
void ts__codec_dec_int8(const unsigned char *p, size_t n, float *out);
void ts__codec_add_int8(const unsigned char *p, size_t n, float mul, float *acc);

/* topk.c: writes 4 + 8k bytes (k <= n, k >= 1 unless n is 0). */
bool ts__codec_enc_topk(const float *g, float *r, size_t n, size_t k, float scale,
                        unsigned char *out);
void ts__codec_dec_topk(const unsigned char *p, size_t n, float *out);
void ts__codec_add_topk(const unsigned char *p, float mul, float *acc);

#endif
