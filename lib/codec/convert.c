/* convert.c - the dense codecs (float32, fp16, bf16, int8), element by element.
 *
 * Conversions are integer bit manipulation plus at most one float add, with no branches, so
 * that GCC vectorises them; hardware conversion (F16C, AVX512-BF16) is not in the x86-64
 * baseline, and _Float16 without it is a libgcc call per element.
 *  - float -> fp16 (Giesen's float_to_half_fast3_rtne, branch-free): a normal result rebiases
 *    the exponent and rounds to nearest even by adding 0xfff plus the kept lsb before
 *    dropping 13 bits; a carry runs into the exponent, up to Inf at 65520 as IEEE says. Below
 *    2^-14 the result is subnormal: |v| + 0.5f rounds |v| to a multiple of 2^-24 (the fp16
 *    subnormal step) with the FPU's own round-to-nearest-even, and the low bits of the sum are
 *    the fp16 bits. NaN keeps its sign and the top 10 payload bits (numpy's rule, so the
 *    output is bit-identical to numpy's astype(float16), quiet NaNs included; a signalling
 *    NaN is quieted by the scale multiply first, as any arithmetic does).
 *  - fp16 -> float: rebias the exponent; Inf/NaN get exponent 255; a subnormal m * 2^-24 is
 *    made as 2^-14 * (1 + m/1024) - 2^-14, exact, without a subnormal operand.
 *  - bf16: round to nearest even on the top 16 bits (add 0x7fff plus the kept lsb); NaN is
 *    quieted (bit 6 set) and keeps its sign and top payload bits.
 *  - int8: q = round-half-even(v / s) by adding 1.5 * 2^23 (|v / s| < 192, so the sum's low
 *    bits are the integer), then clamped.
 * Loops run in blocks of LANES with a constant inner trip count and a tail through the same
 * inlined body, the shape GCC's -O2 "very cheap" vectoriser takes (lib/tensor/exact.c);
 * flags and maxima go into per-lane arrays, reduced once at the end. */
#include "codec/internal.h"

#include <math.h>
#include <string.h>

#define LANES 16
#define AI static inline __attribute__((always_inline))
#define RNE_MAGIC 0x1.8p23f            /* 1.5 * 2^23: see the file comment */
#define RNE_MAGIC_BITS 0x4b400000

static inline uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ---- element conversions ---- */

/* c ? a : b for c in {0, 1}, as masks: a conditional the vectoriser takes without
 * if-conversion (which the completely unrolled blocks never get). */
static inline uint32_t sel(uint32_t c, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - c;

    return (a & m) | (b & ~m);
}

static inline uint32_t f16_from(float v)
{
    uint32_t u = fbits(v), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    uint32_t nrm = (a + 0xc8000fffu + ((a >> 13) & 1)) >> 13;   /* 0xc8.. = -(112 << 23) */
    uint32_t sub = fbits(bitsf(a) + 0.5f) - 0x3f000000u;
    uint32_t pay = (a >> 13) & 0x3ffu;
    uint32_t big = 0x7c00u | sel(a > 0x7f800000u, pay | (pay == 0), 0);

    return sign | sel(a >= 0x47800000u, big, sel(a < 0x38800000u, sub, nrm));
}

static inline float f16_to(uint32_t h)
{
    uint32_t em = h & 0x7fffu, o = em << 13, sign = (h & 0x8000u) << 16;
    uint32_t sub = fbits(bitsf(o + 0x38800000u) - 0x1p-14f);

    return bitsf(sign | sel(em >= 0x7c00u, o + 0x70000000u,
                            sel(em < 0x400u, sub, o + 0x38000000u)));
}

static inline uint32_t bf16_from(float v)
{
    uint32_t u = fbits(v);

    return sel((u & 0x7fffffffu) > 0x7f800000u, (u >> 16) | 0x40u,
               (u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static inline float bf16_to(uint32_t h) { return bitsf(h << 16); }

/* Bit 15 set when the 16-bit float h is Inf or NaN (its exponent is all ones). */
static inline uint32_t h_nonfinite(bool f16, uint32_t h)
{
    return f16 ? (h & 0x7c00u) + 0x400u : (h & 0x7f80u) + 0x80u;
}

/* Payload elements, at any alignment (GCC vectorises these accesses, not memcpy's). */
typedef uint16_t u16_any __attribute__((aligned(1), may_alias));
typedef float f32_any __attribute__((aligned(1), may_alias));

/* g + r, or g without a residual (r is a constant NULL after inlining). */
#define X(g, r, j) ((r) ? (g)[j] + (r)[j] : (g)[j])

/* ---- fp16 and bf16 ---- */

AI void enc16_run(bool f16, const float *restrict g, const float *restrict r, size_t m,
                  float scale, unsigned char *restrict o, uint32_t *restrict flag)
{
    for (size_t j = 0; j < m; j++) {
        float v = X(g, r, j) * scale;
        uint32_t h = f16 ? f16_from(v) : bf16_from(v);

        ((u16_any *)o)[j] = (uint16_t)h;
        flag[j] |= h_nonfinite(f16, h);
    }
}

AI bool enc16_all(bool f16, const float *g, const float *r, size_t n, float scale,
                  unsigned char *o)
{
    uint32_t flag[LANES] = { 0 }, f = 0;
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        enc16_run(f16, g + i, r ? r + i : NULL, LANES, scale, o + 2 * i, flag);
    enc16_run(f16, g + i, r ? r + i : NULL, n - i, scale, o + 2 * i, flag);
    for (size_t j = 0; j < LANES; j++)
        f |= flag[j];
    return f & 0x8000u;
}

/* r = (g + r) - decode(o) * inv: what was not sent. inv = 1 / scale, a power of two, so the
 * product is the quotient decode / scale exactly. */
AI void res16_run(bool f16, const float *restrict g, float *restrict r, size_t m, float inv,
                  const unsigned char *restrict o)
{
    for (size_t j = 0; j < m; j++) {
        uint32_t h = ((const u16_any *)o)[j];
        float d = (f16 ? f16_to(h) : bf16_to(h)) * inv;

        r[j] = (g[j] + r[j]) - d;
    }
}

AI void res16_all(bool f16, const float *g, float *r, size_t n, float inv,
                  const unsigned char *o)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        res16_run(f16, g + i, r + i, LANES, inv, o + 2 * i);
    res16_run(f16, g + i, r + i, n - i, inv, o + 2 * i);
}

TS_CODEC_HOT
bool ts__codec_enc16(bool f16, const float *g, float *r, size_t n, float scale,
                     unsigned char *out)
{
    bool bad;

    if (!r)
        return f16 ? enc16_all(true, g, NULL, n, scale, out)
                   : enc16_all(false, g, NULL, n, scale, out);
    bad = f16 ? enc16_all(true, g, r, n, scale, out) : enc16_all(false, g, r, n, scale, out);
    if (!bad && f16)
        res16_all(true, g, r, n, 1.0f / scale, out);
    else if (!bad)
        res16_all(false, g, r, n, 1.0f / scale, out);
    return bad;
}

AI void dec16_run(bool f16, const unsigned char *restrict p, size_t m, float *restrict out)
{
    for (size_t j = 0; j < m; j++) {
        uint32_t h = ((const u16_any *)p)[j];

        out[j] = f16 ? f16_to(h) : bf16_to(h);
    }
}

AI void dec16_all(bool f16, const unsigned char *p, size_t n, float *out)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        dec16_run(f16, p + 2 * i, LANES, out + i);
    dec16_run(f16, p + 2 * i, n - i, out + i);
}

TS_CODEC_HOT
void ts__codec_dec16(bool f16, const unsigned char *p, size_t n, float *out)
{
    if (f16)
        dec16_all(true, p, n, out);
    else
        dec16_all(false, p, n, out);
}

AI void add16_run(bool f16, const unsigned char *restrict p, size_t m, float mul,
                  float *restrict acc)
{
    for (size_t j = 0; j < m; j++) {
        uint32_t h = ((const u16_any *)p)[j];

        acc[j] += (f16 ? f16_to(h) : bf16_to(h)) * mul;
    }
}

AI void add16_all(bool f16, const unsigned char *p, size_t n, float mul, float *acc)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        add16_run(f16, p + 2 * i, LANES, mul, acc + i);
    add16_run(f16, p + 2 * i, n - i, mul, acc + i);
}

TS_CODEC_HOT
void ts__codec_add16(bool f16, const unsigned char *p, size_t n, float mul, float *acc)
{
    if (f16)
        add16_all(true, p, n, mul, acc);
    else
        add16_all(false, p, n, mul, acc);
}

/* ---- float32 ---- */

AI void enc32_run(const float *restrict g, const float *restrict r, size_t m, float scale,
                  unsigned char *restrict o, uint32_t *restrict flag)
{
    for (size_t j = 0; j < m; j++) {
        float v = X(g, r, j) * scale;

        ((f32_any *)o)[j] = v;
        flag[j] |= (fbits(v) & 0x7f800000u) + 0x800000u;   /* bit 31: Inf or NaN */
    }
}

AI bool enc32_all(const float *g, const float *r, size_t n, float scale, unsigned char *o)
{
    uint32_t flag[LANES] = { 0 }, f = 0;
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        enc32_run(g + i, r ? r + i : NULL, LANES, scale, o + 4 * i, flag);
    enc32_run(g + i, r ? r + i : NULL, n - i, scale, o + 4 * i, flag);
    for (size_t j = 0; j < LANES; j++)
        f |= flag[j];
    return f & 0x80000000u;
}

AI void res32_run(const float *restrict g, float *restrict r, size_t m, float inv,
                  const unsigned char *restrict o)
{
    for (size_t j = 0; j < m; j++)
        r[j] = (g[j] + r[j]) - ((const f32_any *)o)[j] * inv;
}

TS_CODEC_HOT
bool ts__codec_enc_none(const float *g, float *r, size_t n, float scale, unsigned char *out)
{
    size_t i = 0;
    bool bad;

    if (!r)
        return enc32_all(g, NULL, n, scale, out);
    bad = enc32_all(g, r, n, scale, out);
    if (bad)
        return bad;
    for (; i + LANES <= n; i += LANES)
        res32_run(g + i, r + i, LANES, 1.0f / scale, out + 4 * i);
    res32_run(g + i, r + i, n - i, 1.0f / scale, out + 4 * i);
    return bad;
}

AI void add32_run(const unsigned char *restrict p, size_t m, float mul, float *restrict acc)
{
    for (size_t j = 0; j < m; j++)
        acc[j] += ((const f32_any *)p)[j] * mul;
}

TS_CODEC_HOT
void ts__codec_add_none(const unsigned char *p, size_t n, float mul, float *acc)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        add32_run(p + 4 * i, LANES, mul, acc + i);
    add32_run(p + 4 * i, n - i, mul, acc + i);
}

/* ---- int8 ---- */

AI void max_run(const float *restrict g, const float *restrict r, size_t m, float scale,
                uint32_t *restrict mx)
{
    for (size_t j = 0; j < m; j++) {
        /* |v| as bits orders like |v|, and NaN above Inf, so a NaN wins the maximum. */
        uint32_t a = fbits(X(g, r, j) * scale) & 0x7fffffffu;

        mx[j] = a > mx[j] ? a : mx[j];
    }
}

AI void quant_run(const float *restrict g, const float *restrict r, size_t m, float scale,
                  float s, unsigned char *restrict o)
{
    for (size_t j = 0; j < m; j++) {
        float t = X(g, r, j) * scale / s;
        int32_t q = (int32_t)fbits(t + RNE_MAGIC) - RNE_MAGIC_BITS;

        q = q < -127 ? -127 : q > 127 ? 127 : q;
        o[j] = (unsigned char)(int8_t)q;
    }
}

AI float max_abs(const float *g, const float *r, size_t n, float scale)
{
    uint32_t mx[LANES] = { 0 }, m = 0;
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        max_run(g + i, r ? r + i : NULL, LANES, scale, mx);
    max_run(g + i, r ? r + i : NULL, n - i, scale, mx);
    for (size_t j = 0; j < LANES; j++)
        m = mx[j] > m ? mx[j] : m;
    return bitsf(m);
}

AI void quant_all(const float *g, const float *r, size_t n, float scale, float s,
                  unsigned char *o)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        quant_run(g + i, r ? r + i : NULL, LANES, scale, s, o + i);
    quant_run(g + i, r ? r + i : NULL, n - i, scale, s, o + i);
}

/* r = (g + r) - q * s * inv, the decoded value divided by the scale (exact: a power of two). */
AI void res8_run(const float *restrict g, float *restrict r, size_t m, float s, float inv,
                 const unsigned char *restrict q)
{
    for (size_t j = 0; j < m; j++)
        r[j] = (g[j] + r[j]) - (float)(int8_t)q[j] * s * inv;
}

/* s = 0 (all zeros, or a maximum so small that s underflows) or a non-finite s (an Inf or NaN
 * among the inputs) sends q = 0: the first decodes as zeros, the second as NaN everywhere. */
TS_CODEC_HOT
bool ts__codec_enc_int8(const float *g, float *r, size_t n, float scale, unsigned char *out)
{
    float s = (r ? max_abs(g, r, n, scale) : max_abs(g, NULL, n, scale)) / 127.0f;
    bool bad = !isfinite(s);
    size_t i = 0;

    memcpy(out, &s, 4);
    if (s == 0 || bad)
        memset(out + 4, 0, n);
    else if (r)
        quant_all(g, r, n, scale, s, out + 4);
    else
        quant_all(g, NULL, n, scale, s, out + 4);
    if (!r || bad)
        return bad;
    for (; i + LANES <= n; i += LANES)
        res8_run(g + i, r + i, LANES, s, 1.0f / scale, out + 4 + i);
    res8_run(g + i, r + i, n - i, s, 1.0f / scale, out + 4 + i);
    return bad;
}

/* out = q * s, or acc += q * s * mul when acc (a constant after inlining). */
AI void dec8_run(const unsigned char *restrict q, size_t m, float s, float mul,
                 float *restrict out, bool acc)
{
    for (size_t j = 0; j < m; j++) {
        float d = (float)(int8_t)q[j] * s;

        if (acc)
            out[j] += d * mul;
        else
            out[j] = d;
    }
}

TS_CODEC_HOT
void ts__codec_dec_int8(const unsigned char *p, size_t n, float *out)
{
    size_t i = 0;
    float s;

    memcpy(&s, p, 4);
    for (; i + LANES <= n; i += LANES)
        dec8_run(p + 4 + i, LANES, s, 1.0f, out + i, false);
    dec8_run(p + 4 + i, n - i, s, 1.0f, out + i, false);
}

TS_CODEC_HOT
void ts__codec_add_int8(const unsigned char *p, size_t n, float mul, float *acc)
{
    size_t i = 0;
    float s;

    memcpy(&s, p, 4);
    for (; i + LANES <= n; i += LANES)
        dec8_run(p + 4 + i, LANES, s, mul, acc + i, true);
    dec8_run(p + 4 + i, n - i, s, mul, acc + i, true);
}
