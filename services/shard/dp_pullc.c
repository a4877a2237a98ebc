/* dp_pullc.c - compressed pulls on the shard (docs/compression.md, "Pulls").
 *
 * A worker that pulls with TS_PULL_CODED keeps a copy of each partition; this connection
 * keeps a mirror of that copy, per tensor and partition, and answers with the encoded
 * difference between the values and the mirror (lib/codec's ts_codec_delta_encode), which
 * moves the mirror exactly as the worker's copy will move. The copy is named by a token: the
 * reply carries a new one, the next pull says which one the worker holds. Anything else than
 * the token this mirror holds (the first pull, a worker that lost a reply, a new connection
 * after a failover or a restart, where there is no mirror at all) and a version older than
 * the mirror's (a rollback) are answered in full float32, which resets the mirror, so a
 * worker's copy never drifts from what the shard thinks it is.
 *
 * Memory: a mirror is one float per element of the partition, charged to the shard's
 * --mem-budget under the job (shard_params_charge), and freed with the connection or at a
 * HELLO. The connection's thread alone touches it. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

#define COPY_TOKEN 8   /* bytes of the token in front of a coded reply's payload */

static _Atomic uint64_t next_token;

/* A token no other mirror of any shard is likely to hold: a random start, then counting. */
static uint64_t new_token(void)
{
    uint64_t t = atomic_fetch_add(&next_token, 1);

    if (t == 0) {   /* the first call (or a wrap): start somewhere random */
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (uint64_t)ts_now_ns();
        atomic_store(&next_token, (r | 1) + 1);
        t = r | 1;
    }
    return t;
}

ts_status dp_pullc_check(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct dp_pullc_req *rq, struct ts_err *err)
{
    double ratio;

    if (dc->job->job.exact)
        return ts_err_set(err, TS_EINVAL, "pull_compress: job '%s' is in exact mode, whose "
                          "parameters are the same bits everywhere; pull in full",
                          dc->job->job.id);
    if (dc->job->job.mode == TS_MODE_REDUCE)
        return ts_err_set(err, TS_EINVAL, "pull_compress: job '%s' is a reduce job, whose "
                          "pulls carry a step's gradient, not parameters", dc->job->job.id);
    if (h->flags & TS_PULL_REGION)
        return ts_err_set(err, TS_EINVAL, "pull of tensor %u: compressed and from the shared "
                          "region at once", h->tensor);
    if (h->len != DP_PULLC_REQ)
        return ts_err_set(err, TS_EINVAL, "pull of tensor %u: a compressed pull carries %d "
                          "bytes (copy token, top-k ratio), got %" PRIu64, h->tensor,
                          DP_PULLC_REQ, h->len);
    if (h->encoding < TS_CODEC_FP16 || h->encoding > TS_CODEC_TOPK)
        return ts_err_set(err, TS_EINVAL, "pull of tensor %u: encoding %u is not a codec "
                          "(fp16 1, bf16 2, int8 3, topk 4)", h->tensor, h->encoding);
    memcpy(&rq->have, buf, 8);
    memcpy(&ratio, (const char *)buf + 8, 8);
    if (h->encoding == TS_CODEC_TOPK ? !(ratio > 0 && ratio <= 1) : ratio != 0)
        return ts_err_set(err, TS_EINVAL, "pull of tensor %u: top-k ratio %g, want (0, 1] for "
                          "topk and 0 otherwise", h->tensor, ratio);
    rq->codec = (struct ts_codec){ (enum ts_codec_kind)h->encoding, ratio };
    return TS_OK;
}

/* The mirror of (tensor, part), made room for; NULL without memory. */
static struct dp_mirror *mirror_of(struct dp_conn *dc, uint32_t tensor, uint32_t part)
{
    struct dp_mirrors *t;

    if (tensor >= dc->nmirrors) {
        struct dp_mirrors *m = realloc(dc->mirrors, (tensor + 1) * sizeof(*m));
        if (!m)
            return NULL;
        memset(m + dc->nmirrors, 0, (tensor + 1 - dc->nmirrors) * sizeof(*m));
        dc->mirrors = m;
        dc->nmirrors = tensor + 1;
    }
    t = &dc->mirrors[tensor];
    if (part >= t->n) {
        struct dp_mirror *p = realloc(t->part, (part + 1) * sizeof(*p));
        if (!p)
            return NULL;
        memset(p + t->n, 0, (part + 1 - t->n) * sizeof(*p));
        t->part = p;
        t->n = part + 1;
    }
    return &t->part[part];
}

/* Room for len floats of mirror in m and of scratch and payload on the connection, charged
 * to the budget. */
static ts_status room(struct dp_conn *dc, struct dp_mirror *m, const struct ts_codec *c,
                      uint64_t len, struct ts_err *err)
{
    size_t enc = COPY_TOKEN + (len * sizeof(float) > ts_codec_max_bytes(c, len)
                               ? len * sizeof(float) : ts_codec_max_bytes(c, len));
    ts_status st;

    if (!m->v) {
        if ((st = shard_params_charge(dc->dp->params, dc->job, (int64_t)(len * sizeof(float)),
                                      err))) {
            ts_err_prefix(err, "pull_compress: a mirror of %" PRIu64 " floats", len);
            return st;
        }
        if (!(m->v = malloc(len * sizeof(float)))) {
            shard_params_charge(dc->dp->params, dc->job, -(int64_t)(len * sizeof(float)),
                                NULL);
            return ts_err_set(err, TS_ENOMEM, "pull_compress: no memory for a mirror");
        }
        m->len = len;
        dc->mirror_mem += len * sizeof(float);
    }
    if (dc->scratch_cap < len) {
        float *s = realloc(dc->scratch, len * sizeof(float));
        if (!s)
            return ts_err_set(err, TS_ENOMEM, "pull_compress: no memory for scratch");
        dc->scratch = s;
        dc->scratch_cap = len;
    }
    if (dc->wire_cap < enc) {
        uint8_t *w = realloc(dc->wire, enc);
        if (!w)
            return ts_err_set(err, TS_ENOMEM, "pull_compress: no memory for a payload");
        dc->wire = w;
        dc->wire_cap = enc;
    }
    return TS_OK;
}

ts_status dp_pullc_reply(struct dp_conn *dc, struct ts_frame_hdr *out,
                         const struct dp_pullc_req *rq, const float *values, uint64_t len,
                         uint64_t version, struct ts_err *err)
{
    struct dp_mirror *m = mirror_of(dc, out->tensor, out->partition);
    uint64_t token = new_token();
    size_t bytes = 0;
    bool delta;
    ts_status st;

    if (!m)
        return ts_err_set(err, TS_ENOMEM, "pull_compress: no memory for the mirror table");
    if ((st = room(dc, m, &rq->codec, len, err)))
        return st;
    delta = m->token && m->token == rq->have && m->len == len && version >= m->version &&
            ts_codec_delta_encode(&rq->codec, values, m->v, len, dc->scratch,
                                  dc->wire + COPY_TOKEN, &bytes);
    if (!delta) {   /* in full: the worker's copy and the mirror start again from the values */
        memcpy(m->v, values, len * sizeof(float));
        memcpy(dc->wire + COPY_TOKEN, values, len * sizeof(float));
        bytes = len * sizeof(float);
        dc->resyncs++;
    }
    m->token = token;
    m->version = version;
    memcpy(dc->wire, &token, COPY_TOKEN);
    dc->pullc_last = COPY_TOKEN + bytes;
    out->flags |= TS_PARAMS_CODED;
    out->encoding = delta ? (uint16_t)rq->codec.kind : 0;
    return ts_frame_send(dc->c, out, dc->wire, COPY_TOKEN + bytes, err);
}

void dp_pullc_free(struct dp_conn *dc)
{
    for (uint32_t t = 0; t < dc->nmirrors; t++) {
        for (uint32_t p = 0; p < dc->mirrors[t].n; p++)
            free(dc->mirrors[t].part[p].v);
        free(dc->mirrors[t].part);
    }
    if (dc->mirror_mem && dc->job)
        shard_params_charge(dc->dp->params, dc->job, -(int64_t)dc->mirror_mem, NULL);
    free(dc->mirrors);
    free(dc->scratch);
    free(dc->wire);
    dc->mirrors = NULL;
    dc->nmirrors = 0;
    dc->mirror_mem = 0;
    dc->scratch = NULL;
    dc->wire = NULL;
    dc->scratch_cap = dc->wire_cap = 0;
}
