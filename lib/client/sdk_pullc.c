/* sdk_pullc.c - compressed pulls on the worker (docs/compression.md, "Pulls").
 *
 * With a pull codec (tessera_options.pull_compress) the SDK keeps its own copy of each
 * tensor's parameters, and each shard a mirror of it per connection (services/shard/
 * dp_pullc.c). A pull names the copy it holds by the token of the last reply it applied; the
 * shard answers with the encoded difference between its values and the mirror, which the SDK
 * adds to its copy with the same code (ts_codec_delta_apply), or in full where the shard's
 * mirror is not of that copy (the first pull, a new connection, a rollback). The caller gets
 * the copy, so it trains on values that lag the shard's by what the codec has not sent yet.
 * Any reply that fails to apply drops the token: the next pull comes in full, and a copy
 * never drifts from its mirror. Memory: the copy (numel floats) and a reply buffer per
 * partition. Threads: sdk_pipe.c's readers call sdk_pullc_read for different partitions at
 * once; each touches only its partition's slices. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "transport/frame.h"
#include "util/log.h"

#define COPY_TOKEN 8   /* bytes of the token in front of a reply's payload */

/* Payload bytes of partition p's reply at most: the token, then values in full or encoded. */
static size_t reply_cap(const struct sdk_tensor *x, uint64_t len)
{
    size_t enc = ts_codec_max_bytes(&x->pcodec, len);

    return COPY_TOKEN + (enc > len * sizeof(float) ? enc : len * sizeof(float));
}

ts_status sdk_pullc_buffers(struct tessera *t, struct sdk_tensor *x, struct ts_err *err)
{
    size_t total = 0;

    if (x->pcodec.kind == TS_CODEC_NONE || t->local)   /* in-process: no wire to save */
        return TS_OK;
    if (!(x->pcopy = calloc(x->numel + 1, sizeof(float))) ||
        !(x->ptoken = calloc(x->nparts, sizeof(uint64_t))) ||
        !(x->pwire_off = calloc(x->nparts, sizeof(size_t))))
        return ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory for pull_compress",
                          x->name);
    for (uint32_t p = 0; p < x->nparts; p++) {
        uint64_t off, len;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        x->pwire_off[p] = total;
        total += (reply_cap(x, len) + 7) & ~(size_t)7;   /* each payload 8-aligned */
    }
    if (!(x->pwire = malloc(total + 8)))
        return ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory for pull_compress",
                          x->name);
    return TS_OK;
}

void sdk_pullc_free(struct sdk_tensor *x)
{
    free(x->pcopy);
    free(x->ptoken);
    free(x->pwire);
    free(x->pwire_off);
}

bool sdk_pullc_on(struct tessera *t, const struct sdk_tensor *x, uint32_t p)
{
    if (!x->pcopy || (x->view_part && x->view_part[p]))
        return false;
    if (!t->conns.shards[x->owner[p]].shm)
        return true;
    if (!atomic_exchange(&t->pullc_shm_said, true))
        ts_log(TS_INFO, "sdk", "pull_compress: shard %u is reached over shared memory, where "
               "a pull is a memory copy; its pulls go in full float32",
               t->conns.shards[x->owner[p]].id);
    return false;
}

void sdk_pullc_request(const struct sdk_tensor *x, uint32_t p, struct ts_frame_hdr *h,
                       uint8_t req[16])
{
    double ratio = x->pcodec.kind == TS_CODEC_TOPK ? x->pcodec.ratio : 0;

    h->flags |= TS_PULL_CODED;
    h->encoding = (uint16_t)x->pcodec.kind;
    memcpy(req, &x->ptoken[p], 8);
    memcpy(req + 8, &ratio, 8);
}

/* The reply in ri and wire (ri->len bytes) applied to the copy of partition p ([off,
 * off + len)), using dst (len floats) as scratch. */
static ts_status apply(struct tessera *t, struct sdk_tensor *x, int i, uint32_t p, uint64_t off,
                       uint64_t len, const uint8_t *wire, const struct reply_info *ri,
                       float *dst, struct ts_err *err)
{
    uint32_t shard = t->conns.shards[x->owner[p]].id;
    uint64_t token;
    ts_status st;

    if (!(ri->flags & TS_PARAMS_CODED) || ri->len < COPY_TOKEN)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: tensor %d partition %u: the reply to a "
                          "compressed pull is not one (flags 0x%x, %" PRIu64 " bytes)", shard,
                          i, p, ri->flags, ri->len);
    memcpy(&token, wire, COPY_TOKEN);
    wire += COPY_TOKEN;
    if (ri->encoding == TS_CODEC_NONE) {   /* in full: the copy starts again */
        if (ri->len - COPY_TOKEN != len * sizeof(float))
            return ts_err_set(err, TS_ECORRUPT, "shard %u: tensor %d partition %u: %" PRIu64
                              " bytes of values, want %" PRIu64, shard, i, p,
                              ri->len - COPY_TOKEN, len * sizeof(float));
        memcpy(x->pcopy + off, wire, len * sizeof(float));
    } else if (ri->encoding != x->pcodec.kind || x->ptoken[p] == 0) {
        return ts_err_set(err, TS_ECORRUPT, "shard %u: tensor %d partition %u: a delta in "
                          "encoding %u for a copy of codec %u, token %" PRIu64, shard, i, p,
                          ri->encoding, x->pcodec.kind, x->ptoken[p]);
    } else {
        if ((st = ts_codec_check(ri->encoding, wire, ri->len - COPY_TOKEN, len, err))) {
            ts_err_prefix(err, "shard %u: tensor %d partition %u", shard, i, p);
            return st;
        }
        ts_codec_delta_apply(ri->encoding, wire, ri->len - COPY_TOKEN, len, x->pcopy + off,
                             dst);
    }
    x->ptoken[p] = token;
    return TS_OK;
}

ts_status sdk_pullc_read(struct tessera *t, int i, uint32_t p, float *dst,
                         struct reply_info *ri, struct step_reads *acc, struct ts_err *err)
{
    struct sdk_tensor *x = t->tensors[i];
    uint64_t off, len;
    uint8_t *wire = x->pwire + x->pwire_off[p];
    ts_status st;

    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
    ri->upto = true;
    st = sdk_read_reply(t, x->owner[p], TS_FRAME_PARAMS, (uint32_t)i, p, wire,
                        reply_cap(x, len), ri, err);
    if (!st)
        st = apply(t, x, i, p, off, len, wire, ri, dst, err);
    if (st) {
        x->ptoken[p] = 0;   /* whatever the copy is now, the shard's mirror is not of it */
        return st;
    }
    memcpy(dst, x->pcopy + off, len * sizeof(float));
    acc->pulled += ri->len;
    acc->pulled_raw += len * sizeof(float);
    return TS_OK;
}
