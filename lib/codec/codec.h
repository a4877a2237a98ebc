/* codec.h - gradient compression for the data plane.
 *
 * A trainer compresses each float32 gradient partition before pushing it, and a shard checks
 * and decodes what arrives. Gradients tolerate lossy encodings: FP16 and BF16 halve the bytes,
 * INT8 quarters them, TOPK sends only the largest elements. Error feedback (the residual)
 * carries what one push did not send into the next one, so nothing is lost for good, only
 * delayed. docs/compression.md explains each codec, its error bound and the interaction with
 * loss scaling.
 *
 * Encoding numbers are those of tessera.v1.Encoding (proto/tessera/v1/common.proto): RAW = 0
 * (here: float32), FP16 = 1, BF16 = 2, INT8_SCALED = 3, TOPK = 4. FIXED_POINT = 5 is exact
 * mode (lib/tensor), not a codec. Wire layouts, for n elements, all little-endian:
 *
 *   NONE  4n bytes   n float32
 *   FP16  2n bytes   n IEEE binary16, round to nearest even; |v| >= 65520 becomes +-Inf
 *   BF16  2n bytes   n bfloat16 (the top half of a float32), round to nearest even
 *   INT8  4+n bytes  float32 s = max|v| / 127, then n int8 q = round-half-even(v / s)
 *                    clamped to [-127, 127]; decoded q * s. All zeros: s = 0.
 *   TOPK  4+8k bytes uint32 k, k uint32 indices strictly increasing, k float32 values
 *
 * Worst-case error of one element v (after scaling) round trip (ts_codec_err_bound):
 *   FP16  |v| * 2^-11, at least 2^-25 (the subnormal range), for |v| < 65520; Inf beyond
 *   BF16  |v| * 2^-8, at least 2^-134 (float32's subnormal range); Inf from (2 - 2^-8) 2^127
 *   INT8  s/2 * (1 + 2^-14): half a step, plus float rounding of v/s and q*s
 *         (s subnormal or 0, i.e. max|v| < 127 * 2^-126: at most 64 s + 2^-143 < 2^-119)
 *   TOPK  0 for the elements sent, |v| for the others (they stay in the residual)
 *
 * Non-finite values are never refused: an Inf or NaN in an encoding is how a shard learns that
 * a loss-scaled gradient overflowed (FP16 turns |v| >= 65520 into Inf, INT8's s becomes Inf or
 * NaN). A shard that sees Inf or NaN after summing skips the step and the trainer backs off its
 * loss scale.
 *
 * Ownership: every buffer is the caller's. Threads: no shared state; every function is
 * reentrant. The layouts assume a little-endian host (checked at compile time). */
#ifndef TS_CODEC_CODEC_H
#define TS_CODEC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Values match tessera.v1.Encoding. */
enum ts_codec_kind {
    TS_CODEC_NONE = 0,
    TS_CODEC_FP16 = 1,
    TS_CODEC_BF16 = 2,
    TS_CODEC_INT8 = 3,
    TS_CODEC_TOPK = 4,
};

struct ts_codec {
    enum ts_codec_kind kind;
    double ratio;          /* TOPK: the fraction of elements kept, in (0, 1]; 0 otherwise */
};

/* "none", "fp16", "bf16", "int8" or "topk:RATIO" with RATIO in (0, 1] (e.g. topk:0.01).
 * TS_EINVAL names the spec and lists the choices; *c is set on TS_OK only. */
ts_status ts_codec_parse(const char *spec, struct ts_codec *c, struct ts_err *err) TS_MUST_CHECK;

/* Writes the canonical spec into buf ("fp16", "topk:0.01": the shortest ratio that parses back
 * to the same double) and returns buf; truncated to len - 1 characters. len >= 1. */
const char *ts_codec_name(const struct ts_codec *c, char *buf, size_t len);

/* TOPK: the number of elements kept, k = max(1, ceil(ratio * n)) computed in double, at most
 * n (0 for n = 0). Other codecs: n. */
uint64_t ts_codec_topk_k(const struct ts_codec *c, uint64_t n);

/* The most bytes ts_codec_encode writes for n elements: NONE 4n, FP16 and BF16 2n, INT8 4 + n,
 * TOPK 4 + 8k. */
size_t ts_codec_max_bytes(const struct ts_codec *c, uint64_t n);

/* Encodes v = (g + residual) * scale for n elements into out (ts_codec_max_bytes bytes, any
 * alignment); *bytes = the bytes written, which is exactly ts_codec_max_bytes.
 * scale: the loss scale, a power of two (1.0f: none); decoding divides by it exactly.
 * residual: error feedback, NULL for none; else n floats in gradient units (unscaled), zero
 * before the first push. Afterwards residual[i] = (g[i] + residual[i]) - decode(out)[i] / scale,
 * what was not sent (every codec; for TOPK the unsent elements keep all of g + residual, the
 * sent ones 0 unless the scaled value underflowed). The subtraction is exact (Sterbenz), so
 * decode / scale + residual_after == g + residual_before exactly, as floats. One exception:
 * when the encoding holds an Inf or NaN the shard skips the whole step, so the residual is
 * left as it was (an Inf there would poison every later push).
 * TOPK keeps the k elements of largest |g + residual| (NaN ranks above Inf; ties: the lower
 * index); n <= 2^32 (indices are uint32). g, residual and out must not overlap. */
void ts_codec_encode(const struct ts_codec *c, const float *g, uint64_t n, float scale,
                     float *residual, void *out, size_t *bytes);

/* Shard side: checks that payload (bytes long) is a well-formed encoding enc of n elements:
 * the exact length for NONE, FP16, BF16 and INT8; for TOPK a count in 1..n (0 only when n is
 * 0), a length of 4 + 8 * count, indices strictly increasing and below n. TS_EINVAL names
 * what is wrong, e.g. "payload: topk index 17 at position 3 is not above the previous (17)";
 * also for an encoding that is not a codec's. Non-finite values are NOT an error. */
ts_status ts_codec_check(unsigned enc, const void *payload, size_t bytes, uint64_t n,
                         struct ts_err *err) TS_MUST_CHECK;

/* After ts_codec_check succeeded: acc[i] += decoded[i] * mul for every i (TOPK: only the
 * listed indices). acc must not overlap payload. */
void ts_codec_add(unsigned enc, const void *payload, size_t bytes, uint64_t n, float mul,
                  float *acc);

/* After ts_codec_check succeeded: the decoded values into out (n floats; TOPK: zeros at the
 * indices not listed). */
void ts_codec_decode(unsigned enc, const void *payload, size_t bytes, uint64_t n, float *out);

/* The documented worst-case |decode(encode(v)) - v| of one element v (after scaling) for
 * encoding enc (see the table above); s is INT8's scale (max|v| / 127), ignored otherwise.
 * FP16 and BF16 return Inf where they overflow (|v| >= 65520, >= (2 - 2^-8) 2^127), TOPK 0
 * (an element that is sent is exact). For tests and docs. */
double ts_codec_err_bound(unsigned enc, double v, double s);

/* ---- Pulls (delta.c): a copy kept in step on both ends (docs/compression.md, "Pulls") ----
 * The shard keeps a mirror of the copy of a partition its worker holds; a pull sends the
 * difference, and both ends add what was sent with the same code, so copy == mirror bit for
 * bit. What the codec dropped stays in value - mirror: error feedback on the shard's side. */

/* The shard: encodes value - mirror (n floats) with c into out (ts_codec_max_bytes bytes),
 * then adds the decoded delta to mirror, exactly as ts_codec_delta_apply will add it to the
 * worker's copy; *bytes = the payload's length. false, with mirror and *bytes untouched, when
 * the decoded delta is not finite everywhere (an fp16 delta beyond 65504, a non-finite value):
 * send the values in full and copy them into the mirror instead. scratch: n floats; none of
 * the buffers overlap. */
bool ts_codec_delta_encode(const struct ts_codec *c, const float *value, float *mirror,
                           uint64_t n, float *scratch, void *out, size_t *bytes);

/* The worker, after ts_codec_check succeeded: copy += decode(payload), n floats. scratch: n
 * floats (it holds the decoded delta afterwards); it may not overlap copy or payload. */
void ts_codec_delta_apply(unsigned enc, const void *payload, size_t bytes, uint64_t n,
                          float *copy, float *scratch);

#endif
