/* fuzz_codec.c - libFuzzer target: the gradient codecs' shard side (lib/codec/codec.h).
 *
 * A shard takes a pushed payload from the network, checks it with ts_codec_check and adds it
 * into its sum with ts_codec_add (lib/ps/part.c); a TOPK payload names the indices it writes,
 * so a check that let one index slip past n would be a heap write anywhere. This runs that
 * path on arbitrary bytes: input[0] & 7 is the encoding (5..7 must be refused),
 * input[1..2] the element count n (little-endian, so n <= 65535), the rest the payload, put
 * at an odd address as a frame may leave it. What the check refuses names the payload; what
 * it accepts has the documented length and, for TOPK, a count in 1..n of indices strictly
 * increasing below n; it is then added into exactly n floats and decoded into n more, and
 * the two must agree. Seeds: tests/fuzz/corpus-codec (written by fuzz_seeds). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 3

/* What codec.h promises an accepted payload looks like, checked independently. */
static bool well_formed(unsigned enc, const uint8_t *p, size_t bytes, uint64_t n)
{
    uint32_t k, prev = 0, i;

    switch (enc) {
    case TS_CODEC_NONE: return bytes == 4 * n;
    case TS_CODEC_FP16:
    case TS_CODEC_BF16: return bytes == 2 * n;
    case TS_CODEC_INT8: return bytes == 4 + n;
    case TS_CODEC_TOPK: break;
    default: return false;
    }
    if (bytes < 4)
        return false;
    memcpy(&k, p, 4);
    if ((n ? k < 1 || k > n : k != 0) || bytes != 4 + 8 * (uint64_t)k)
        return false;
    for (uint32_t j = 0; j < k; j++) {
        memcpy(&i, p + 4 + 4 * (size_t)j, 4);
        if (i >= n || (j && i <= prev))
            return false;
        prev = i;
    }
    return true;
}

/* The same float, counting every NaN as one and -0 as +0: the sum starts at +0, so
 * 0 + v * 1 differs from v only there. */
static bool same(float a, float b)
{
    return a == b || (a != a && b != b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ts_err err = { 0 };
    unsigned enc;
    uint64_t n;
    size_t bytes;
    uint8_t *block;
    float *acc, *out;

    if (size < HDR)
        return 0;
    enc = data[0] & 7;
    n = (uint64_t)data[1] | (uint64_t)data[2] << 8;
    bytes = size - HDR;
    if (!(block = malloc(bytes + 1)))
        abort();
    memcpy(block + 1, data + HDR, bytes);
    if (ts_codec_check(enc, block + 1, bytes, n, &err) != TS_OK) {
        if (err.code != TS_EINVAL || strncmp(err.msg, "payload: ", 9) != 0)
            abort(); /* every refusal says what is wrong with the payload */
        free(block);
        return 0;
    }
    if (!well_formed(enc, block + 1, bytes, n))
        abort();
    /* Exactly n floats each, so that a write or read past them is caught. */
    acc = calloc(n ? n : 1, sizeof(float));
    out = malloc((n ? n : 1) * sizeof(float));
    if (!acc || !out)
        abort();
    ts_codec_add(enc, block + 1, bytes, n, 1.0f, acc);
    ts_codec_decode(enc, block + 1, bytes, n, out);
    for (uint64_t i = 0; i < n; i++)
        if (!same(acc[i], out[i]))
            abort();
    free(out);
    free(acc);
    free(block);
    return 0;
}
