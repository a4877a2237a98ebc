/* codec.c - codec specs, payload sizes and checks, and the dispatch to the kernels
 * (convert.c: float32, fp16, bf16, int8; topk.c). See codec.h and docs/compression.md. */
#include "codec/codec.h"
#include "codec/internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHOICES "want none, fp16, bf16, int8 or topk:RATIO with RATIO in (0, 1], e.g. topk:0.01"

/* Larger n would overflow the byte counts (4n); no partition comes near it. */
#define MAX_N ((uint64_t)SIZE_MAX / 8)

static const char *const kind_names[] = { "none", "fp16", "bf16", "int8", "topk" };

static ts_status parse_ratio(const char *spec, const char *num, double *ratio,
                             struct ts_err *err)
{
    char *end;
    double r;

    if (!*num)
        return ts_err_set(err, TS_EINVAL, "codec '%.64s': topk needs a ratio; " CHOICES, spec);
    r = strtod(num, &end);
    /* strtod skips leading blanks; a spec has none. */
    if (end == num || *end || isspace((unsigned char)*num))
        return ts_err_set(err, TS_EINVAL, "codec '%.64s': ratio '%.32s' is not a number; " CHOICES,
                          spec, num);
    if (!(r > 0 && r <= 1))
        return ts_err_set(err, TS_EINVAL, "codec '%.64s': ratio %.32s is not in (0, 1]; " CHOICES,
                          spec, num);
    *ratio = r;
    return TS_OK;
}

ts_status ts_codec_parse(const char *spec, struct ts_codec *c, struct ts_err *err)
{
    struct ts_codec out = { TS_CODEC_NONE, 0 };
    ts_status st;

    if (!spec || !*spec)
        return ts_err_set(err, TS_EINVAL, "codec: empty; " CHOICES);
    if (strncmp(spec, "topk", 4) == 0 && (spec[4] == ':' || !spec[4])) {
        st = parse_ratio(spec, spec[4] ? spec + 5 : spec + 4, &out.ratio, err);
        if (st != TS_OK)
            return st;
        out.kind = TS_CODEC_TOPK;
        *c = out;
        return TS_OK;
    }
    for (unsigned k = TS_CODEC_NONE; k < TS_CODEC_TOPK; k++) {
        if (strcmp(spec, kind_names[k]) == 0) {
            out.kind = (enum ts_codec_kind)k;
            *c = out;
            return TS_OK;
        }
    }
    return ts_err_set(err, TS_EINVAL, "codec '%.64s': unknown; " CHOICES, spec);
}

const char *ts_codec_name(const struct ts_codec *c, char *buf, size_t len)
{
    if (c->kind != TS_CODEC_TOPK) {
        snprintf(buf, len, "%s", (unsigned)c->kind < TS_CODEC_TOPK ? kind_names[c->kind]
                                                                     : "unknown");
        return buf;
    }
    /* The shortest decimal that reads back as the same double: "topk:0.01", not 0.0100..02. */
    for (int prec = 1; prec <= 17; prec++) {
        char num[32];

        snprintf(num, sizeof(num), "%.*g", prec, c->ratio);
        if (strtod(num, NULL) == c->ratio || prec == 17) {
            snprintf(buf, len, "topk:%s", num);
            break;
        }
    }
    return buf;
}

uint64_t ts_codec_topk_k(const struct ts_codec *c, uint64_t n)
{
    double want;
    uint64_t k;

    if (c->kind != TS_CODEC_TOPK || n == 0)
        return n;
    want = c->ratio * (double)n;
    if (!(want < (double)n))       /* ratio 1, or rounding up to n; NaN too */
        return n;
    k = (uint64_t)want;            /* ceil without libm: want >= 0 */
    k += (double)k < want;
    return k < 1 ? 1 : k > n ? n : k;
}

size_t ts_codec_max_bytes(const struct ts_codec *c, uint64_t n)
{
    switch (c->kind) {
    case TS_CODEC_NONE: return (size_t)n * 4;
    case TS_CODEC_FP16:
    case TS_CODEC_BF16: return (size_t)n * 2;
    case TS_CODEC_INT8: return 4 + (size_t)n;
    case TS_CODEC_TOPK: return 4 + 8 * (size_t)ts_codec_topk_k(c, n);
    }
    return 0;
}

void ts_codec_encode(const struct ts_codec *c, const float *g, uint64_t n, float scale,
                     float *residual, void *out, size_t *bytes)
{
    unsigned char *o = out;

    switch (c->kind) {
    case TS_CODEC_NONE: (void)ts__codec_enc_none(g, residual, n, scale, o); break;
    case TS_CODEC_FP16: (void)ts__codec_enc16(true, g, residual, n, scale, o); break;
    case TS_CODEC_BF16: (void)ts__codec_enc16(false, g, residual, n, scale, o); break;
    case TS_CODEC_INT8: (void)ts__codec_enc_int8(g, residual, n, scale, o); break;
    case TS_CODEC_TOPK:
        (void)ts__codec_enc_topk(g, residual, n, ts_codec_topk_k(c, n), scale, o);
        break;
    }
    *bytes = ts_codec_max_bytes(c, n);
}

static ts_status check_topk(const unsigned char *p, size_t bytes, uint64_t n,
                            struct ts_err *err)
{
    uint32_t k, prev = 0;

    if (bytes < 4)
        return ts_err_set(err, TS_EINVAL, "payload: topk of %zu bytes has no 4-byte count",
                          bytes);
    memcpy(&k, p, 4);
    if (k == 0 && n > 0)
        return ts_err_set(err, TS_EINVAL, "payload: topk count 0, want 1..%" PRIu64, n);
    if (k > n)
        return ts_err_set(err, TS_EINVAL, "payload: topk count %" PRIu32 " is above the %"
                          PRIu64 " elements", k, n);
    if ((bytes - 4) / 8 != k || (bytes - 4) % 8)
        return ts_err_set(err, TS_EINVAL, "payload: topk count %" PRIu32 " needs %" PRIu64
                          " bytes (4 + 8 * count), got %zu", k, 4 + 8 * (uint64_t)k, bytes);
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i;

        memcpy(&i, p + 4 + 4 * (size_t)j, 4);
        if (i >= n)
            return ts_err_set(err, TS_EINVAL, "payload: topk index %" PRIu32 " at position %"
                              PRIu32 " is not below n (%" PRIu64 ")", i, j, n);
        if (j > 0 && i <= prev)
            return ts_err_set(err, TS_EINVAL, "payload: topk index %" PRIu32 " at position %"
                              PRIu32 " is not above the previous (%" PRIu32 ")", i, j, prev);
        prev = i;
    }
    return TS_OK;
}

ts_status ts_codec_check(unsigned enc, const void *payload, size_t bytes, uint64_t n,
                         struct ts_err *err)
{
    struct ts_codec c = { (enum ts_codec_kind)enc, 0 };
    size_t want;

    if (enc > TS_CODEC_TOPK)
        return ts_err_set(err, TS_EINVAL, "payload: encoding %u is not a codec's; want 0 (raw "
                          "f32), 1 (fp16), 2 (bf16), 3 (int8) or 4 (topk)", enc);
    if (n > MAX_N)
        return ts_err_set(err, TS_EINVAL, "payload: %" PRIu64 " elements is too many", n);
    if (enc == TS_CODEC_TOPK)
        return check_topk(payload, bytes, n, err);
    want = ts_codec_max_bytes(&c, n);
    if (bytes != want)
        return ts_err_set(err, TS_EINVAL, "payload: %s of %" PRIu64 " elements is %zu bytes, "
                          "got %zu", enc == 0 ? "raw f32" : kind_names[enc], n, want, bytes);
    return TS_OK;
}

void ts_codec_add(unsigned enc, const void *payload, size_t bytes, uint64_t n, float mul,
                  float *acc)
{
    const unsigned char *p = payload;

    switch (enc) {
    case TS_CODEC_NONE: ts__codec_add_none(p, n, mul, acc); break;
    case TS_CODEC_FP16: ts__codec_add16(true, p, n, mul, acc); break;
    case TS_CODEC_BF16: ts__codec_add16(false, p, n, mul, acc); break;
    case TS_CODEC_INT8: ts__codec_add_int8(p, n, mul, acc); break;
    case TS_CODEC_TOPK: ts__codec_add_topk(p, mul, acc); break;
    }
}

void ts_codec_decode(unsigned enc, const void *payload, size_t bytes, uint64_t n, float *out)
{
    const unsigned char *p = payload;

    switch (enc) {
    case TS_CODEC_NONE: memcpy(out, p, (size_t)n * 4); break;
    case TS_CODEC_FP16: ts__codec_dec16(true, p, n, out); break;
    case TS_CODEC_BF16: ts__codec_dec16(false, p, n, out); break;
    case TS_CODEC_INT8: ts__codec_dec_int8(p, n, out); break;
    case TS_CODEC_TOPK: ts__codec_dec_topk(p, n, out); break;
    }
}

static double max2(double a, double b) { return a > b ? a : b; }

double ts_codec_err_bound(unsigned enc, double v, double s)
{
    double a = fabs(v);

    switch (enc) {
    case TS_CODEC_NONE:
    case TS_CODEC_TOPK: return 0;
    case TS_CODEC_FP16: return a >= 65520 ? INFINITY : max2(a * 0x1p-11, 0x1p-25);
    case TS_CODEC_BF16: return a >= 0x1.ffp127 ? INFINITY : max2(a * 0x1p-8, 0x1p-134);
    case TS_CODEC_INT8: return s < 0x1p-126 ? 64 * s + 0x1p-143 : s / 2 * (1 + 0x1p-14);
    }
    return INFINITY;
}
