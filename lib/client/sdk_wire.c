/* sdk_wire.c - the per-partition wire mechanism under a step: a tensor's push readied
 * (compressed, scaled, or an assignment), one partition's PUSH or PULL frame to the shard
 * heading it and the reading of its reply, and the same partitions in this process for a
 * local run. It knows nothing of failover: a broken connection is noted (t->conns.broken) and
 * returned. Above sdk_reply.c and the per-partition features it asks (sdk_pullc.c,
 * sdk_region.c, sdk_assign.c); below sdk_pipe.c and sdk_exchange.c, which put the partitions
 * of an exchange in order. */
#include "client/sdk_internal.h"

#include <math.h>
#include <string.h>

#include "transport/frame.h"

static int scale_exp_of(const struct tessera *t)
{
    return t->loss_mode == TESSERA_LOSS_SCALE_NONE ? 0 : t->scale_exp;
}

/* Readies tensor x's push of `grad` (numel int64 in exact mode, else floats): raw data goes
 * as it is; with a codec, or a scale the SDK applies, each partition is encoded into x->enc. */
static void prepare_push(struct tessera *t, struct sdk_tensor *x, const void *grad)
{
    float scale = t->loss_mode == TESSERA_LOSS_SCALE_SDK ? ldexpf(1.0f, t->scale_exp) : 1.0f;

    if (x->assign) {   /* the values as they are (with state: gathered), or nothing */
        uint64_t bytes = !x->assign_values ? 0 : x->assign_buf ? sdk_assign_bytes(t, x)
                                                                : x->numel * sizeof(float);
        x->src = x->assign_buf ? x->assign_buf : x->assign_values;
        x->encoded = false;
        t->stats.bytes_raw += bytes;
        t->stats.bytes_pushed += bytes;
        return;
    }
    x->src = grad;
    x->encoded = !t->job.exact && (x->codec.kind != TS_CODEC_NONE || scale != 1.0f);
    for (uint32_t p = 0; p < x->nparts; p++) {
        uint64_t off, len;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        if (x->encoded)
            ts_codec_encode(&x->codec, (const float *)grad + off, len, scale,
                            x->residual ? x->residual + off : NULL, x->enc + x->enc_off[p],
                            &x->enc_len[p]);
        t->stats.bytes_raw += len * sdk_elem_bytes(t);
        t->stats.bytes_pushed += x->encoded ? x->enc_len[p] : len * sdk_elem_bytes(t);
    }
}

/* Partition p's push as prepare_push left it. */
static struct ts_push push_of(const struct tessera *t, const struct sdk_tensor *x, uint32_t p)
{
    uint64_t off, len;
    struct ts_push in = { .rank = t->push_rank, .step = x->tstep, .scale_exp = scale_exp_of(t),
                          .slots = t->comb.push_mask };

    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
    if (x->assign) {
        size_t per = x->assign_buf ? 1 + ts_optim_state_len(t->job.optim.kind) : 1;
        in = (struct ts_push){ .rank = t->push_rank, .step = x->tstep, .assign = true,
                               .state = x->assign_buf != NULL, .encoding = TS_ENC_RAW };
        if (x->src) {
            in.payload = (const float *)x->src + off * per;
            in.bytes = len * per * sizeof(float);
            in.has_updates = x->assign_counted;
            in.updates = x->assign_updates;
        }
    } else if (x->encoded) {
        in.encoding = x->codec.kind;
        in.payload = x->enc + x->enc_off[p];
        in.bytes = x->enc_len[p];
    } else {
        in.encoding = t->comb.push_i64 ? TS_ENC_FIXED : sdk_push_encoding(t);
        in.payload = (const char *)x->src + off * sdk_elem_bytes(t);
        in.bytes = len * sdk_elem_bytes(t);
    }
    if (!x->assign) {
        in.lr = x->lr;
        in.no_decay = x->no_decay;
    }
    in.hold = t->clip.phase == SDK_CLIP_HOLD && !x->assign;
    if (t->clip.phase == SDK_CLIP_APPLY)   /* the rank's word, no gradient (sdk_clip.c) */
        in = (struct ts_push){ .rank = t->push_rank, .step = x->tstep, .apply = true,
                               .coef = t->clip.coef };
    return in;
}

/* Where partition p of a pull lands: the caller's params, or in reduce mode the reduced
 * gradient the SDK applies itself. */
static float *pull_dst(const struct tessera *t, struct sdk_tensor *x, float *params, uint64_t off)
{
    return t->job.mode == TS_MODE_REDUCE ? x->rgrad + off : params + off;
}

/* Notes what a pull reply said: per partition in x, for the step in acc. */
static void note_reply(struct step_reads *acc, struct sdk_tensor *x, uint32_t p,
                       const struct reply_info *ri)
{
    x->overflow[p] = (ri->flags & TS_PARAMS_OVERFLOW) != 0;
    acc->overflow |= x->overflow[p];
    acc->stale = ri->staleness > acc->stale ? ri->staleness : acc->stale;
}

void sdk_reads_merge(struct tessera *t, const struct step_reads *acc)
{
    t->step_overflow |= acc->overflow;
    t->step_stale = acc->stale > t->step_stale ? acc->stale : t->step_stale;
    t->newest = acc->newest > t->newest ? acc->newest : t->newest;
    t->stats.bytes_pulled += acc->pulled;
    t->stats.bytes_pulled_raw += acc->pulled_raw;
}

/* A pull sent in the same exchange as this step's pushes says so (TS_PULL_AFTER_PUSH in
 * flags), so that a shard that refused one of them answers the pull at once instead of
 * waiting. An elastic worker's pushes may repeat what another worker sent for the same slot
 * (docs/elastic.md): they go as retries, which a shard acknowledges as already counted. */
ts_status sdk_send_one(struct tessera *t, int i, uint32_t p, bool push, uint32_t flags,
                       bool *begun, struct ts_err *err)
{
    struct sdk_tensor *x = t->tensors[i];
    struct ts_push in = push_of(t, x, p);
    struct ts_frame_hdr h = { .type = push ? TS_FRAME_PUSH : TS_FRAME_PULL, .tensor = (uint32_t)i,
                              .partition = p, .step = push ? x->tstep : x->pull_version,
                              .dtype = 1, .rank = push ? t->push_rank : t->rank,
                              .flags = push ? TS_PUSH_SCALE(in.scale_exp) |
                                                  (t->rec.retrying || t->elastic ? TS_PUSH_RETRY
                                                                                 : 0)
                                            : flags,
                              .encoding = push ? (uint16_t)in.encoding : 0,
                              .lr = push ? in.lr : 0 };
    uint8_t mask[TS_PUSH_SLOTS_LEN], count[TS_UPDATES_LEN], coef[TS_COEF_LEN];
    struct iovec pc[2] = { { mask, sizeof(mask) }, { (void *)in.payload, in.bytes } };
    uint8_t req[16];
    bool coded = !push && sdk_pullc_on(t, x, p);
    ts_status st;

    /* Shared regions: the shard reads the gradient, or the worker the values, in place; the
     * frame carries no payload. A combined push carries its slots' mask in front of it. */
    if (push && in.no_decay)
        h.flags |= TS_PUSH_NO_DECAY;
    if (push && in.hold)
        h.flags |= TS_PUSH_HOLD;
    if (push && in.state)
        h.flags |= TS_PUSH_STATE;
    if (push && in.apply) {   /* the coefficient is the payload */
        h.flags |= TS_PUSH_APPLY;
        ts_coef_put(coef, in.coef);
        in.payload = coef;
        in.bytes = sizeof(coef);
    } else if (push && in.assign) {   /* in the frame, always (tessera_assign refused the rest) */
        h.flags |= TS_PUSH_ASSIGN;
        if (in.has_updates) {   /* the count after the values (and state) */
            h.flags |= TS_PUSH_UPDATES;
            ts_updates_put(count, in.updates);
            pc[0] = (struct iovec){ (void *)in.payload, in.bytes };
            pc[1] = (struct iovec){ count, sizeof(count) };
        }
    } else if (push && t->comb.push_mask) {
        for (int k = 0; k < TS_PUSH_SLOTS_LEN; k++)
            mask[k] = (uint8_t)(t->comb.push_mask >> (8 * k));
        h.flags |= TS_PUSH_SLOTS;
    } else if (push && sdk_push_in_region(x, p)) {
        h.flags |= TS_PUSH_REGION;
        in.bytes = 0;
    }
    if (!push && x->view_part && x->view_part[p])
        h.flags |= TS_PULL_REGION;
    if (!*begun)
        h.flags |= push ? TS_PUSH_ROUND : TS_PULL_ROUND;
    *begun = true;
    if (coded)
        sdk_pullc_request(x, p, &h, req);
    if (h.flags & (TS_PUSH_SLOTS | TS_PUSH_UPDATES))
        st = ts_frame_sendv(t->conns.shards[x->owner[p]].conn, &h, pc, 2, err);
    else
        st = ts_frame_send(t->conns.shards[x->owner[p]].conn, &h,
                           push ? in.payload : coded ? req : NULL,
                           push ? in.bytes : coded ? sizeof(req) : 0, err);
    sdk_note_broken(t, x->owner[p], st);
    return st;
}

ts_status sdk_read_one(struct tessera *t, int i, uint32_t p, float *params,
                       struct step_reads *acc, struct ts_err *e)
{
    struct sdk_tensor *x = t->tensors[i];
    uint64_t off, len;
    struct reply_info ri = { 0 };
    ts_status r;
    bool region = params && x->view_part && x->view_part[p];
    float *dst = NULL;

    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
    if (params)
        dst = pull_dst(t, x, params, off);
    if (params && sdk_pullc_on(t, x, p))
        r = sdk_pullc_read(t, i, p, dst, &ri, acc, e);
    else
        r = sdk_read_reply(t, x->owner[p], params ? TS_FRAME_PARAMS : TS_FRAME_ACK,
                           (uint32_t)i, p, region ? NULL : dst, region ? 0 : len * sizeof(float),
                           &ri, e);
    if (!r && params && !(ri.flags & TS_PARAMS_CODED) && !region) {
        acc->pulled += len * sizeof(float);
        acc->pulled_raw += len * sizeof(float);
    }
    if (!r && region && !(ri.flags & TS_PARAMS_REGION))
        r = ts_err_set(e, TS_ECORRUPT, "shard %u: tensor %d partition %u came without its "
                       "payload, not from the shared region",
                       t->conns.shards[x->owner[p]].id, i, p);
    /* The values are in the region until this rank pushes again (part.h). */
    if (!r && region && dst != x->view + off)
        memcpy(dst, x->view + off, len * sizeof(float));
    /* Reduce mode: a reply read into rgrad and cut short (its shard died mid-frame) leaves
     * there part of the next version over have[p]'s values. No rank needs those values again
     * (a rank reading version v + 1 means every rank pulled v), but a SEED must not offer
     * them as version v's: another rank's whole copy would contradict it. */
    if (params && x->torn && !region)
        x->torn[p] = r != TS_OK;
    if (!r && params) {
        note_reply(acc, x, p, &ri);
        if (x->have)
            x->have[p] = ri.step;
        if (ri.step > acc->newest)
            acc->newest = ri.step;
    }
    return r;
}

/* One slot's gradients were readied by plan_step or tessera_push. */
void sdk_next_slot(struct tessera *t, int first, int last, size_t k)
{
    t->push_rank = t->step_slots[k];
    for (int i = first; t->nstep > 1 && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        if (x->active)
            prepare_push(t, x, t->comb.push_mask ? x->slot_sum : t->step_grads[k][i]);
    }
}

/* exchange() in a local run: the same partitions, in this process. */
ts_status sdk_exchange_local(struct tessera *t, int first, int last, bool push,
                                float *const *params, struct ts_err *err)
{
    struct step_reads acc = { 0 };
    ts_status st = TS_OK;

    for (size_t k = 0; push && !st && k < sdk_npush(t); k++) {
        sdk_next_slot(t, first, last, k);
        for (int i = first; !st && i < last; i++)
            for (uint32_t p = 0; t->tensors[i]->active && !st && p < t->tensors[i]->nparts;
                 p++) {
                struct ts_push in = push_of(t, t->tensors[i], p);
                bool applied;
                st = ts_part_push(t->tensors[i]->parts[p], &in, &applied, err);
            }
    }
    for (int i = first; !st && params && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++) {
            struct ts_part *pt = x->parts[p];
            struct ts_pull_info info;
            st = ts_part_pull(pt, t->rank, x->pull_version, 0, t->timeout_ms, NULL,
                              pull_dst(t, x, params[i - first], ts_part_offset(pt)), &info,
                              err);
            if (!st)
                note_reply(&acc, x, p, &(struct reply_info){
                    .flags = info.overflow ? TS_PARAMS_OVERFLOW : 0,
                    .staleness = info.staleness > UINT32_MAX ? UINT32_MAX
                                                             : (uint32_t)info.staleness });
        }
    }
    sdk_reads_merge(t, &acc);
    return st;
}

void sdk_prepare_push(struct tessera *t, int i, const void *grad)
{
    prepare_push(t, t->tensors[i], grad);
}
