/* walk.c - the element-by-element part of the bit comparison: ULP, counts and maxima.
 *
 * Only a block that failed memcmp gets here, and when two models differ, usually every
 * element does, so this loop is the bit-compare's worst case and must stay near memory
 * speed. The scalar version spends ~20 cycles an element on branches and a division; the
 * AVX2 version does 8 at a time without branches (masks for "equal" and "NaN", the ULP from
 * sign-folded integer keys, abs and rel in double, lane-wise maxima) and skips runs of 8
 * equal elements with one test. Both return only counts and maxima, so they agree to the
 * bit; which one runs is decided per call from the CPU (__builtin_cpu_supports).
 *
 * ULP: a float's bits, sign-folded (negative values mirrored below zero, -0 and +0 at the
 * same point), are a monotonic integer key, so the distance is |key(a) - key(b)|. */
#include <math.h>
#include <string.h>

#include "verify/internal.h"
#include "verify/verify.h"

static bool nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
static bool nan64(uint64_t u) { return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }

/* Sign-folded key: +0 and -0 both 0, -x at -key(x). */
static int64_t key32(uint32_t u)
{
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

uint64_t ts__verify_ulp32(uint32_t a, uint32_t b)
{
    int64_t d;
    if (a == b)
        return 0;
    if (nan32(a) || nan32(b))
        return TS_VERIFY_ULP_NAN;
    d = key32(a) - key32(b);
    return (uint64_t)(d < 0 ? -d : d);
}

uint64_t ts__verify_ulp64(uint64_t a, uint64_t b)
{
    uint64_t ma = a & 0x7fffffffffffffffull, mb = b & 0x7fffffffffffffffull;
    if (a == b)
        return 0;
    if (nan64(a) || nan64(b))
        return TS_VERIFY_ULP_NAN;
    if ((a >> 63) == (b >> 63)) /* same side of zero */
        return ma > mb ? ma - mb : mb - ma;
    return ma + mb; /* < 2^64 - 1: both below 2^63, at most Inf + Inf */
}

/* ---- scalar ---- */

/* One numeric pair whose bits differ. A NaN rel (0/0 for +-0, Inf/Inf) never wins a max. */
static void pair(struct ts__verify_walk *w, uint64_t ulp, double a, double b)
{
    double ad = fabs(a - b), rel = ad / fmax(fabs(a), fabs(b));
    w->max_ulp = ulp > w->max_ulp ? ulp : w->max_ulp;
    w->max_abs = ad > w->max_abs ? ad : w->max_abs;
    w->max_rel = rel > w->max_rel ? rel : w->max_rel;
}

void ts__verify_walk32_scalar(const uint32_t *a, const uint32_t *b, size_t n,
                              struct ts__verify_walk *w)
{
    for (size_t i = 0; i < n; i++) {
        float fa, fb;
        if (a[i] == b[i])
            continue;
        w->ndiff++;
        if (nan32(a[i]) || nan32(b[i])) {
            w->nnan++;
            continue;
        }
        memcpy(&fa, &a[i], 4);
        memcpy(&fb, &b[i], 4);
        pair(w, ts__verify_ulp32(a[i], b[i]), fa, fb);
    }
    if (isinf(w->max_abs))
        w->max_rel = INFINITY;
}

void ts__verify_walk64(const uint64_t *a, const uint64_t *b, size_t n,
                       struct ts__verify_walk *w)
{
    for (size_t i = 0; i < n; i++) {
        double fa, fb;
        if (a[i] == b[i])
            continue;
        w->ndiff++;
        if (nan64(a[i]) || nan64(b[i])) {
            w->nnan++;
            continue;
        }
        memcpy(&fa, &a[i], 8);
        memcpy(&fb, &b[i], 8);
        pair(w, ts__verify_ulp64(a[i], b[i]), fa, fb);
    }
    if (isinf(w->max_abs))
        w->max_rel = INFINITY;
}

/* ---- AVX2 ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNEL 1

#define AVX2 __attribute__((target("avx2")))

/* |da - db| and |da - db| / max(|da|, |db|) of 4 lanes, 0 where bad64 is set; folded into
 * the lane maxima. max_pd(x, acc) returns acc when x is NaN, so 0/0 and Inf/Inf drop out. */
AVX2 static void absrel4(__m128 fa, __m128 fb, __m128i bad, __m256d *maxa, __m256d *maxr)
{
    const __m256d absm = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
    __m256d da = _mm256_cvtps_pd(fa), db = _mm256_cvtps_pd(fb);
    __m256d bad64 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(bad));
    __m256d ad = _mm256_and_pd(_mm256_sub_pd(da, db), absm);
    __m256d m = _mm256_max_pd(_mm256_and_pd(da, absm), _mm256_and_pd(db, absm));
    __m256d rel = _mm256_andnot_pd(bad64, _mm256_div_pd(ad, m));

    *maxa = _mm256_max_pd(_mm256_andnot_pd(bad64, ad), *maxa);
    *maxr = _mm256_max_pd(rel, *maxr);
}

/* Returns how many elements it did (a multiple of 8); the caller does the rest. */
AVX2 static size_t walk32_avx2(const uint32_t *a, const uint32_t *b, size_t n,
                               struct ts__verify_walk *w)
{
    const __m256i magm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i maxu = _mm256_setzero_si256();
    __m256d maxa = _mm256_setzero_pd(), maxr = _mm256_setzero_pd();
    uint64_t nd = 0, nn = 0;
    uint32_t lu[8];
    double la[4], lr[4];
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i va = _mm256_loadu_si256((const __m256i *)(a + i));
        __m256i vb = _mm256_loadu_si256((const __m256i *)(b + i));
        __m256i eq = _mm256_cmpeq_epi32(va, vb);
        unsigned em = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(eq));
        if (em == 0xffu)
            continue;
        __m256i ma = _mm256_and_si256(va, magm), mb = _mm256_and_si256(vb, magm);
        __m256i nan = _mm256_or_si256(_mm256_cmpgt_epi32(ma, inf), _mm256_cmpgt_epi32(mb, inf));
        __m256i bad = _mm256_or_si256(eq, nan); /* lanes without a distance */
        unsigned nm = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nan)) & ~em;
        nd += 8u - (unsigned)__builtin_popcount(em);
        nn += (unsigned)__builtin_popcount(nm);
        /* Keys: magnitude, negated for negative floats; |ka - kb| < 2^32 fits unsigned. */
        __m256i sa = _mm256_srai_epi32(va, 31), sb = _mm256_srai_epi32(vb, 31);
        __m256i ka = _mm256_sub_epi32(_mm256_xor_si256(ma, sa), sa);
        __m256i kb = _mm256_sub_epi32(_mm256_xor_si256(mb, sb), sb);
        __m256i gt = _mm256_cmpgt_epi32(ka, kb);
        __m256i u = _mm256_blendv_epi8(_mm256_sub_epi32(kb, ka), _mm256_sub_epi32(ka, kb), gt);
        maxu = _mm256_max_epu32(maxu, _mm256_andnot_si256(bad, u));
        __m256 fa = _mm256_castsi256_ps(va), fb = _mm256_castsi256_ps(vb);
        absrel4(_mm256_castps256_ps128(fa), _mm256_castps256_ps128(fb),
                _mm256_castsi256_si128(bad), &maxa, &maxr);
        absrel4(_mm256_extractf128_ps(fa, 1), _mm256_extractf128_ps(fb, 1),
                _mm256_extracti128_si256(bad, 1), &maxa, &maxr);
    }
    _mm256_storeu_si256((__m256i *)lu, maxu);
    _mm256_storeu_pd(la, maxa);
    _mm256_storeu_pd(lr, maxr);
    w->ndiff += nd;
    w->nnan += nn;
    for (int l = 0; l < 8; l++)
        w->max_ulp = lu[l] > w->max_ulp ? lu[l] : w->max_ulp;
    for (int l = 0; l < 4; l++) {
        w->max_abs = la[l] > w->max_abs ? la[l] : w->max_abs;
        w->max_rel = lr[l] > w->max_rel ? lr[l] : w->max_rel;
    }
    return i;
}
#endif

void ts__verify_walk32(const uint32_t *a, const uint32_t *b, size_t n,
                       struct ts__verify_walk *w)
{
    size_t done = 0;
#ifdef HAVE_AVX2_KERNEL
    if (__builtin_cpu_supports("avx2"))
        done = walk32_avx2(a, b, n, w);
#endif
    ts__verify_walk32_scalar(a + done, b + done, n - done, w);
    if (isinf(w->max_abs))
        w->max_rel = INFINITY;
}
