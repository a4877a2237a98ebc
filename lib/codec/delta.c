/* delta.c - pull compression: a copy of the parameters kept in step on both ends.
 *
 * A worker that pulls compressed parameters holds a copy of them; the shard holds a mirror of
 * that copy. A pull sends encode(value - mirror), and both ends add the decoded delta to
 * their copy with the same code (ts_codec_decode, then one float addition per element), so
 * the copy and the mirror stay equal bit for bit. What the codec dropped stays in
 * value - mirror and goes out with the next pull: error feedback, kept on the shard. See
 * codec.h and docs/compression.md, "Pulls". */
#include "codec/codec.h"


/* The one addition both ends make; its own function so that neither can drift from it. Float
 * addition is correctly rounded whatever the vector width, and -std=c11 contracts nothing. */
static void add_into(float *copy, const float *d, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        copy[i] = copy[i] + d[i];
}

static bool all_finite(const float *d, uint64_t n)
{
    float acc = 0.0f;

    /* d * 0 is 0 for a number and NaN for Inf or NaN: one branch for the whole vector. */
    for (uint64_t i = 0; i < n; i++)
        acc += d[i] * 0.0f;
    return acc == 0.0f;
}

bool ts_codec_delta_encode(const struct ts_codec *c, const float *value, float *mirror,
                           uint64_t n, float *scratch, void *out, size_t *bytes)
{
    size_t len = 0;

    for (uint64_t i = 0; i < n; i++)
        scratch[i] = value[i] - mirror[i];
    ts_codec_encode(c, scratch, n, 1.0f, NULL, out, &len);
    ts_codec_decode(c->kind, out, len, n, scratch);
    /* A delta that overflows the codec (fp16 beyond 65504) or a value that is not finite
     * would put Inf or NaN into both copies for good: the caller sends the values instead. */
    if (!all_finite(scratch, n))
        return false;
    add_into(mirror, scratch, n);
    *bytes = len;
    return true;
}

void ts_codec_delta_apply(unsigned enc, const void *payload, size_t bytes, uint64_t n,
                          float *copy, float *scratch)
{
    ts_codec_decode(enc, payload, bytes, n, scratch);
    add_into(copy, scratch, n);
}
