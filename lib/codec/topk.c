/* topk.c - TOPK: the k elements of largest magnitude, sent as (index, value) pairs.
 *
 * Selection needs neither sorting nor scratch memory. The key of element i is the bit pattern
 * of |x_i| (x = g + residual): for non-negative floats the integer order is the value order,
 * and NaNs sort above Inf, so a NaN is always among the elements sent and a shard sees it. A
 * radix select finds the k-th largest key in up to three counting passes, over key bits
 * 30..20, 19..9 and 8..0, each one counting only the keys that share the prefix found so far
 * (it stops early when the elements still wanted are exactly one whole bin). One more pass
 * emits, in index order, every element whose key is above that prefix and the first `need`
 * ones equal to it: ties go to the lower index, and the indices come out increasing. With
 * error feedback the same pass writes the residual (no fifth pass).
 *
 * Every pass reads the gradient in blocks of BLK elements: a loop GCC vectorises computes the
 * block's x and which of them pass the pass's test, as a bit mask; only the hits go through
 * scalar work. Past the first level, and when emitting, hits are rare (about k in n). The
 * 4 x 8 KiB of histograms live on the stack. */
#include "codec/internal.h"

#include <math.h>
#include <string.h>

#define NLEVEL 3
#define NBIN (1u << 11)
#define BLK 64
#define AI static inline __attribute__((always_inline))

static const unsigned lvl_shift[NLEVEL] = { 20, 9, 0 };
static const unsigned lvl_width[NLEVEL] = { 11, 11, 9 };

/* Take the elements whose key >> shift is above prefix, and the first need equal to it. */
struct cut {
    uint32_t prefix;
    unsigned shift;
    size_t need;
    uint32_t top;               /* the largest key (when asked for) */
};

static inline uint32_t key(float x)
{
    uint32_t u;

    memcpy(&u, &x, sizeof(u));
    return u & 0x7fffffffu;
}

/* xs[j] = x of element j of the block at g (+ r), for j < m <= BLK. Returns the block's hits
 * as bits: bit j set when key(x) >> c->shift is >= c->prefix (ge) or == c->prefix. */
AI uint64_t block(const float *restrict g, const float *restrict r, size_t m,
                  const struct cut *c, bool ge, float *restrict xs)
{
    unsigned char hit[BLK];
    uint64_t bits = 0;

    memset(hit, 0, sizeof(hit));
    for (size_t j = 0; j < m; j++) {
        int32_t hi;

        xs[j] = r ? g[j] + r[j] : g[j];
        hi = (int32_t)(key(xs[j]) >> c->shift);            /* keys are below 2^31 */
        hit[j] = ge ? hi >= (int32_t)c->prefix : hi == (int32_t)c->prefix;
    }
    /* Eight 0/1 bytes to eight bits: the multiply moves byte i's bit to bit 56 + i. */
    for (size_t w = 0; w < BLK / 8; w++) {
        uint64_t x;

        memcpy(&x, hit + 8 * w, 8);
        bits |= ((x * 0x0102040810204080ull) >> 56) << (8 * w);
    }
    return bits;
}

/* h[(key >> shift) & mask]++ for the keys with key >> c->shift == c->prefix. The first level
 * (every key: c->shift 31) counts into four tables in turn, so that runs of equal bins, common
 * in gradients, do not wait on each other's increments, and finds the largest key. */
AI void count_block(const float *g, const float *r, size_t m, const struct cut *c,
                    unsigned shift, uint32_t mask, uint32_t (*h)[NBIN], uint32_t *top)
{
    float xs[BLK];
    uint64_t bits = block(g, r, m, c, false, xs);

    if (c->shift == 31) {
        uint32_t t = *top;          /* a local: h's stores could alias *top */

        for (size_t j = 0; j < m; j++) {
            uint32_t kj = key(xs[j]);

            h[j & 3][(kj >> shift) & mask]++;
            t = kj > t ? kj : t;
        }
        *top = t;
        return;
    }
    for (; bits; bits &= bits - 1)
        h[0][(key(xs[__builtin_ctzll(bits)]) >> shift) & mask]++;
}

AI void count(const float *g, const float *r, size_t n, struct cut *c, unsigned shift,
              uint32_t mask, uint32_t (*h)[NBIN])
{
    size_t i = 0;

    for (; i + BLK <= n; i += BLK)
        count_block(g + i, r ? r + i : NULL, BLK, c, shift, mask, h, &c->top);
    count_block(g + i, r ? r + i : NULL, n - i, c, shift, mask, h, &c->top);
    for (uint32_t b = 0; b <= mask; b++)
        h[0][b] += h[1][b] + h[2][b] + h[3][b];
}

/* The largest key, by itself: for k = n, when no counting pass runs. */
AI uint32_t top_key(const float *g, const float *r, size_t n)
{
    uint32_t top = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t k = key(r ? g[i] + r[i] : g[i]);

        top = k > top ? k : top;
    }
    return top;
}

AI void select_cut(const float *g, const float *r, size_t n, size_t k, bool want_top,
                   struct cut *c)
{
    uint32_t h[4][NBIN];

    c->prefix = 0;
    c->shift = 31;                      /* every key is below 2^31: all share prefix 0 */
    c->need = k;
    c->top = 0;
    if (k >= n && want_top)
        c->top = top_key(g, r, n);
    for (int l = 0; l < NLEVEL && k < n; l++) {
        uint32_t mask = (1u << lvl_width[l]) - 1, b = mask;

        memset(h, 0, sizeof(h));
        count(g, r, n, c, lvl_shift[l], mask, h);
        for (; h[0][b] < c->need; b--)  /* the bin holding the need-th largest key */
            c->need -= h[0][b];
        c->prefix = (c->prefix << lvl_width[l]) | b;
        c->shift = lvl_shift[l];
        if (h[0][b] == c->need)
            break;
    }
}

struct sink {
    unsigned char *idx, *val;   /* where the pairs go */
    size_t cnt, eq;             /* pairs written; keys equal to the prefix seen */
    float *res;                 /* the residual to write, or NULL */
    float inv;                  /* 1 / scale */
};

/* Emits the block's pairs and, with o->res, writes its residual: what was not sent, all of x
 * for the others and x - value / scale for the sent ones (exact: the value is x * scale
 * rounded, so within a factor 2 of it, or 0; Sterbenz). */
AI void emit_block(const float *g, const float *r, size_t i, size_t m, float scale,
                   const struct cut *c, struct sink *o)
{
    float xs[BLK];
    uint64_t bits = block(g + i, r ? r + i : NULL, m, c, true, xs);

    if (o->res)
        for (size_t j = 0; j < m; j++)
            o->res[i + j] = xs[j];
    for (; bits; bits &= bits - 1) {
        size_t j = (size_t)__builtin_ctzll(bits);
        uint32_t i32 = (uint32_t)(i + j);
        float v;

        if (key(xs[j]) >> c->shift == c->prefix && o->eq++ >= c->need)
            continue;
        v = xs[j] * scale;
        memcpy(o->idx + 4 * o->cnt, &i32, 4);
        memcpy(o->val + 4 * o->cnt, &v, 4);
        o->cnt++;
        if (o->res)
            o->res[i + j] = xs[j] - v * o->inv;
    }
}

AI void emit(const float *g, const float *r, float *res, size_t n, size_t k, float scale,
             const struct cut *c, unsigned char *out)
{
    struct sink o = { out + 4, out + 4 + 4 * k, 0, 0, res, 1.0f / scale };
    size_t i = 0;

    for (; i + BLK <= n; i += BLK)
        emit_block(g, r, i, BLK, scale, c, &o);
    emit_block(g, r, i, n - i, scale, c, &o);
}

/* The element of the largest key is always sent, and its value has the largest magnitude, so
 * the encoding holds an Inf or NaN exactly when that one is. Known before emitting, this lets
 * the emitting pass write the residual too (codec.h: an overflowing push leaves it alone). */
TS_CODEC_HOT
bool ts__codec_enc_topk(const float *g, float *r, size_t n, size_t k, float scale,
                        unsigned char *out)
{
    uint32_t k32 = (uint32_t)k;
    struct cut cut;
    float top;
    bool bad;

    memcpy(out, &k32, 4);
    if (!r) {
        select_cut(g, NULL, n, k, false, &cut);
        emit(g, NULL, NULL, n, k, scale, &cut, out);
        return false;               /* unused: no residual to protect */
    }
    select_cut(g, r, n, k, true, &cut);
    memcpy(&top, &cut.top, sizeof(top));
    bad = n > 0 && !isfinite(top * scale);
    emit(g, r, bad ? NULL : r, n, k, scale, &cut, out);
    return bad;
}

void ts__codec_dec_topk(const unsigned char *p, size_t n, float *out)
{
    uint32_t k;

    memset(out, 0, n * sizeof(*out));
    memcpy(&k, p, 4);
    for (size_t j = 0; j < k; j++) {
        uint32_t i;

        memcpy(&i, p + 4 + 4 * j, 4);
        memcpy(&out[i], p + 4 + 4 * (size_t)k + 4 * j, 4);
    }
}

void ts__codec_add_topk(const unsigned char *p, float mul, float *acc)
{
    uint32_t k;

    memcpy(&k, p, 4);
    for (size_t j = 0; j < k; j++) {
        uint32_t i;
        float v;

        memcpy(&i, p + 4 + 4 * j, 4);
        memcpy(&v, p + 4 + 4 * (size_t)k + 4 * j, 4);
        acc[i] += v * mul;
    }
}
