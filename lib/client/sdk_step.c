/* sdk_step.c - the SDK's push, pull and step: frames to every shard before any reply is read,
 * or the in-process partitions of a local run; compression and sync sums on the way out, the
 * reduce-mode optimizer and the loss scale on the way back (docs/modes.md). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

/* Failovers of one step before it fails: at least this many, and more while the step's
 * timeout_ms has not run out since the first (a link cut for a minute fails over again every
 * few seconds until it heals), FAILOVER_PAUSE_MS apart once past this many. */
#define MAX_FAILOVERS 8
#define FAILOVER_PAUSE_MS 1000

/* ---- push and pull ---- */

/* A push's element bytes: the trainer's encoding's, or int64 for a combined push of float
 * gradients in exact mode (sdk_combine.c). */
static size_t elem_bytes(const struct tessera *t)
{
    return t->push_i64 ? sizeof(int64_t) : sdk_push_bytes(t);
}

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
        t->stats.bytes_raw += len * elem_bytes(t);
        t->stats.bytes_pushed += x->encoded ? x->enc_len[p] : len * elem_bytes(t);
    }
}

/* Partition p's push as prepare_push left it. */
static struct ts_push push_of(const struct tessera *t, const struct sdk_tensor *x, uint32_t p)
{
    uint64_t off, len;
    struct ts_push in = { .rank = t->push_rank, .step = x->tstep, .scale_exp = scale_exp_of(t),
                          .slots = t->push_mask };

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
        in.encoding = t->push_i64 ? TS_ENC_FIXED : sdk_push_encoding(t);
        in.payload = (const char *)x->src + off * elem_bytes(t);
        in.bytes = len * elem_bytes(t);
    }
    if (!x->assign) {
        in.lr = x->lr;
        in.no_decay = x->no_decay;
    }
    in.hold = t->clip_phase == SDK_CLIP_HOLD && !x->assign;
    if (t->clip_phase == SDK_CLIP_APPLY)   /* the rank's word, no gradient (sdk_clip.c) */
        in = (struct ts_push){ .rank = t->push_rank, .step = x->tstep, .apply = true,
                               .coef = t->clip_coef };
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
                                                  (t->retrying || t->elastic ? TS_PUSH_RETRY : 0)
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
    } else if (push && t->push_mask) {
        for (int k = 0; k < TS_PUSH_SLOTS_LEN; k++)
            mask[k] = (uint8_t)(t->push_mask >> (8 * k));
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
        st = ts_frame_sendv(t->shards[x->owner[p]].conn, &h, pc, 2, err);
    else
        st = ts_frame_send(t->shards[x->owner[p]].conn, &h,
                           push ? in.payload : coded ? req : NULL,
                           push ? in.bytes : coded ? sizeof(req) : 0, err);
    sdk_note_broken(t, x->owner[p], st);
    return st;
}

/* Sends a PUSH or a PULL (sdk_send_one) for every partition of the active tensors of
 * [first, last); begun: by shard slot, whether one of that kind went already. */
static ts_status send_all(struct tessera *t, int first, int last, bool push, uint32_t flags,
                          bool *begun, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int i = first; !st && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++)
            st = sdk_send_one(t, i, p, push, flags, &begun[x->owner[p]], err);
    }
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
                       "payload, not from the shared region", t->shards[x->owner[p]].id, i, p);
    /* The values are in the region until this rank pushes again (part.h). */
    if (!r && region && dst != x->view + off)
        memcpy(dst, x->view + off, len * sizeof(float));
    if (!r && params) {
        note_reply(acc, x, p, &ri);
        if (x->have)
            x->have[p] = ri.step;
        if (ri.step > acc->newest)
            acc->newest = ri.step;
    }
    return r;
}

/* Reads the replies to send_all's requests, in order: ACKs, or PARAMS into params[i - first].
 * A refused request is remembered (the first in err) and reading goes on, so the streams stay
 * in step; a transport error ends it. */
static ts_status read_all(struct tessera *t, int first, int last, float *const *params,
                          ts_status *first_err, struct ts_err *err)
{
    struct step_reads acc = { 0 };
    ts_status st = TS_OK;

    for (int i = first; !st && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++) {
            struct ts_err e = { 0 };
            ts_status r = sdk_read_one(t, i, p, params ? params[i - first] : NULL, &acc, &e);
            if (r && !*first_err) {
                *first_err = r;
                ts_err_set(err, r, "%s", e.msg);
            }
            if (sdk_transport_failed(r))
                st = r;
        }
    }
    sdk_reads_merge(t, &acc);
    return st;
}

/* One slot's gradients were readied by plan_step or tessera_push. */
void sdk_next_slot(struct tessera *t, int first, int last, size_t k)
{
    t->push_rank = t->step_slots[k];
    for (int i = first; t->nstep > 1 && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        if (x->active)
            prepare_push(t, x, t->push_mask ? x->slot_sum : t->step_grads[k][i]);
    }
}

/* exchange() in a local run: the same partitions, in this process. */
static ts_status exchange_local(struct tessera *t, int first, int last, bool push,
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

/* The active tensors of [first, last) (arrays indexed from first): pushes (if push, of every
 * slot of the step) and pulls (if params). Remote: every request goes out before any reply is
 * read, so the shards work in parallel and a step costs one round trip; or, where the bytes
 * leave the host, each shard's requests and replies flow at once (sdk_pipe.c). */
static ts_status exchange(struct tessera *t, int first, int last, bool push,
                          float *const *params, struct ts_err *err)
{
    uint32_t flags = push ? TS_PULL_AFTER_PUSH : 0;
    bool pushed[MAX_SHARDS] = { false }, pulled[MAX_SHARDS] = { false };
    ts_status st = TS_OK, first_err = TS_OK;

    if (t->local)
        return exchange_local(t, first, last, push, params, err);
    if ((st = sdk_usable(t, err)))
        return st;
    for (int i = first; i < last; i++)
        if (t->tensors[i]->active) {
            struct sdk_tensor *x = t->tensors[i];
            t->wait_step = push ? x->tstep : x->pull_version ? x->pull_version - 1 : 0;
            break;
        }
    if (sdk_pipe_pays(t, first, last, push, params))
        return sdk_pipe_exchange(t, first, last, push, params, flags, err);
    for (size_t k = 0; push && !st && k < sdk_npush(t); k++) {
        sdk_next_slot(t, first, last, k);
        st = send_all(t, first, last, true, 0, pushed, err);
    }
    if (!st && params)
        st = send_all(t, first, last, false, flags, pulled, err);
    for (size_t k = 0; push && !st && k < sdk_npush(t); k++)
        st = read_all(t, first, last, NULL, &first_err, err);
    if (!st && params)
        st = read_all(t, first, last, params, &first_err, err);
    return st ? st : first_err;
}

static ts_status check_id(const struct tessera *t, int id, struct ts_err *err)
{
    if (id < 0 || id >= t->ntensors)
        return ts_err_set(err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                          t->ntensors);
    return TS_OK;
}

/* Readies tensor id alone, at its own step `tstep` (pull: version `version`): the exchange
 * that follows covers [id, id + 1) only. */
static void only(struct tessera *t, int id, uint64_t tstep, uint64_t version)
{
    t->tensors[id]->active = true;
    t->tensors[id]->tstep = tstep;
    t->tensors[id]->pull_version = version;
}

ts_status sdk_fail_over(struct tessera *t, const char *what, uint64_t n, ts_status st,
                        sdk_redo_fn redo, void *ctx, struct ts_err *err)
{
    int64_t began = ts_now_ms();

    for (int k = 0; (st == TS_EUNAVAIL || st == TS_ESTALE) && sdk_can_fail_over(t) &&
                    (k < MAX_FAILOVERS || ts_now_ms() - began < t->timeout_ms); k++) {
        ts_log(TS_WARN, "sdk", "%s %" PRIu64 ": %s; failing over", what, n, err->msg);
        memset(err, 0, sizeof(*err));
        if (k >= MAX_FAILOVERS)
            ts_sleep_ms(FAILOVER_PAUSE_MS);
        if ((st = sdk_failover(t, err)))
            continue;   /* another shard died meanwhile (TS_EUNAVAIL): fail over again */
        if (t->generation > t->followed)   /* the new connections name a rollback */
            return ts_err_set(err, TS_EROLLBACK, "job '%s' went back to a snapshot while this "
                              "worker failed over", t->job.id);
        t->retrying = true;
        st = redo(t, ctx, err);
        t->retrying = false;
    }
    return st;
}

/* An exchange of tensors [first, last), for sdk_fail_over to do again. */
struct exchange_args {
    int first, last;
    bool push;
    float *const *params;
};

static ts_status exchange_again(struct tessera *t, void *ctx, struct ts_err *err)
{
    const struct exchange_args *a = ctx;

    return exchange(t, a->first, a->last, a->push, a->params, err);
}

/* An exchange of tensors [first, last) that ended with st, gone again to the new heads
 * (sdk_fail_over). */
static ts_status fail_over(struct tessera *t, const char *what, uint64_t n, int first,
                           int last, bool push, float *const *params, ts_status st,
                           struct ts_err *err)
{
    struct exchange_args a = { first, last, push, params };

    return sdk_fail_over(t, what, n, st, exchange_again, &a, err);
}

/* Exact mode with float pushes: the shards round each value, and one out of range would be
 * refused by its partition's shard after other shards took theirs, leaving the step half
 * pushed. So each gradient is checked here first, as tessera_to_fixed would check it (one
 * read of it), and a value out of range fails the step before anything is sent. (Float
 * pushes rule out sync periods: every tensor is pushed every step.) */
static ts_status check_f32(const struct tessera *t, const struct sdk_tensor *x, const void *g,
                           struct ts_err *err)
{
    bool below;   /* a bound of 2^31 is the range itself: nothing more to learn */
    ts_status st;

    if (!t->push_f32 || x->assign || !(st = ts_fixed_check_f32(g, x->numel, 0x1p31f, &below, err)))
        return TS_OK;
    ts_err_prefix(err, "tensor '%s'", x->name);
    return st;
}

int tessera_push(tessera *t, int id, uint64_t step, const void *grad, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err) || check_f32(t, t->tensors[id], grad, &err))
        return sdk_fail(e, &err);
    only(t, id, step, 0);
    t->nstep = 1;
    t->step_slots = &t->rank;
    prepare_push(t, t->tensors[id], grad);
    if (fail_over(t, "push of step", step, id, id + 1, true, NULL,
                  exchange(t, id, id + 1, true, NULL, &err), &err))
        return sdk_fail(e, &err);
    sdk_assign_done(t, id, id + 1);
    return sdk_ok(e);
}

int tessera_pull(tessera *t, int id, uint64_t version, float *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err))
        return sdk_fail(e, &err);
    if (t->job.mode == TS_MODE_REDUCE) {
        /* The parameters live here; the shards hold only sums. */
        struct sdk_tensor *x = t->tensors[id];
        if (version != x->local_version) {
            ts_err_set(&err, TS_ESTATE, "reduce mode: this worker holds tensor %d at version %"
                       PRIu64 " only, not %" PRIu64, id, x->local_version, version);
            return sdk_fail(e, &err);
        }
        memcpy(out, x->value, x->numel * sizeof(float));
        return sdk_ok(e);
    }
    only(t, id, 0, version);
    if (fail_over(t, "pull of version", version, id, id + 1, false, &out,
                  exchange(t, id, id + 1, false, &out, &err), &err))
        return sdk_fail(e, &err);
    return sdk_ok(e);
}

/* Sync periods: which tensors move at global step `step`, each at its own step. A tensor with
 * a period K > 1 adds this step's gradient to its running sum, and moves that sum every Kth
 * step. */
static ts_status plan_step(struct tessera *t, uint64_t step, const void *const *grads,
                           struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        const void *g = grads[i];
        ts_status st;

        x->active = (step + 1) % x->sync_every == 0;
        x->tstep = step / x->sync_every;
        x->pull_version = x->tstep + 1;
        if (x->sync_every > 1) {
            if (t->job.exact)
                st = ts_fixed_add(x->acc, g, x->numel, err);
            else
                ts_f32_add(x->acc, g, x->numel), st = TS_OK;
            if (st) {
                ts_err_prefix(err, "tensor '%s' (summed over its sync period)", x->name);
                return st;
            }
            g = x->acc;
        }
        if (x->active && t->nstep == 1)   /* several slots: next_slot readies each */
            prepare_push(t, x, g);
    }
    return TS_OK;
}

/* After a step's replies: sync sums restart, reduce mode applies the reduced gradients, the
 * loss scale follows GradScaler. */
static void finish_step(struct tessera *t, float *const *params)
{
    if (t->clip_max > 0 && t->job.mode == TS_MODE_REDUCE)
        sdk_clip_reduced(t);
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        size_t slen = ts_optim_state_len(t->job.optim.kind);

        if (!x->active)
            continue;
        sdk_assign_clear(x);
        if (x->sync_every > 1)
            memset(x->acc, 0, x->numel * elem_bytes(t));
        if (t->job.mode != TS_MODE_REDUCE)
            continue;
        /* The shard's own update, partition by partition, with the same code: the bits of a
         * PS-mode run. A partition whose sum overflowed is skipped, as a shard skips it. Its
         * t is the step + 1: a reduce job never assigns (bsp only), so every step counts, a
         * skipped one too, as a shard's update count does (lib/ps/part.h, "Update count"). */
        struct ts_optim_cfg cfg = t->job.optim;
        if (x->lr > 0)
            cfg.lr = x->lr;
        if (x->no_decay)
            cfg.weight_decay = 0;
        for (uint32_t p = 0; p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            if (!x->overflow[p])
                ts_optim_apply_range(&cfg, x->tstep + 1, x->value + off,
                                     x->state + slen * off, len, 0, x->rgrad + off, len);
        }
        x->local_version = x->tstep + 1;
        memcpy(params[i], x->value, x->numel * sizeof(float));
    }
    if (t->step_overflow) {
        t->stats.steps_skipped++;
        if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && t->scale_exp > -126)
            t->scale_exp--;
        t->good_steps = 0;
    } else if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && ++t->good_steps == LOSS_GROWTH_STEPS) {
        if (t->scale_exp < 127)
            t->scale_exp++;
        t->good_steps = 0;
    }
    t->stats.steps++;
    t->stats.staleness_last = t->step_stale;
    if (t->step_stale > t->stats.staleness_max)
        t->stats.staleness_max = t->step_stale;
}

/* Slots a step may push: 1..workers of them, ascending, each below workers; more than one
 * only where each slot's push is the caller's gradient alone (no sync sums, no top-k). */
static ts_status check_slots(const struct tessera *t, size_t n, const uint32_t *slots,
                             struct ts_err *err)
{
    if (n < 1 || n > t->job.workers || !slots)
        return ts_err_set(err, TS_EINVAL, "slots: %zu of them, want 1..%u (the job's workers)",
                          n, t->job.workers);
    for (size_t k = 0; k < n; k++)
        if (slots[k] >= t->job.workers || (k && slots[k] <= slots[k - 1]))
            return ts_err_set(err, TS_EINVAL, "slots[%zu]: %u; want ascending slots below %u",
                              k, slots[k], t->job.workers);
    for (int i = 0; n > 1 && i < t->ntensors; i++)
        if (t->tensors[i]->sync_every > 1 || t->tensors[i]->residual)
            return ts_err_set(err, TS_EINVAL, "slots: %zu, but tensor '%s' has a sync period or "
                              "top-k compression, whose state is one worker's own; push one "
                              "slot", n, t->tensors[i]->name);
    return TS_OK;
}

int tessera_step(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                 struct tessera_error *e)
{
    return tessera_step_slots(t, step, 1, &t->rank, &grads, params, e);
}

int tessera_step_clip(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                      float max_norm, double *total_norm, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    int rc;

    if (sdk_clip_check(t, max_norm, &err))
        return sdk_fail(e, &err);
    t->clip_max = max_norm;
    t->clip_total = 0;
    rc = tessera_step(t, step, grads, params, e);
    t->clip_max = 0;
    if (total_norm)
        *total_norm = t->clip_total;
    return rc;
}

int tessera_step_slots(tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                       const void *const *const *grads, float *const *params,
                       struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st = check_slots(t, n, slots, &err);
    bool sent = false;
    /* Clipped by the shards (bsp); a reduce job's workers clip in finish_step. */
    bool held = t->clip_max > 0 && t->job.mode == TS_MODE_BSP;

    if (!st)
        sdk_elastic_measure(t, n);
    t->step_overflow = false;
    t->step_stale = 0;
    t->nstep = n;
    t->step_slots = slots;
    t->step_grads = grads;
    t->newest = 0;
    if (!st)
        st = sdk_check_names(t, &err);
    if (!st && t->elastic && !(st = sdk_elastic_check(t, step, n, slots, &err)))
        st = sdk_elastic_keep(t, params, &err);
    for (size_t k = 0; !st && k < n; k++)
        for (int i = 0; !st && i < t->ntensors; i++)
            st = check_f32(t, t->tensors[i], grads[k][i], &err);
    if (!st)
        st = plan_step(t, step, grads[0], &err);
    if (!st) {
        sdk_combine_plan(t, step, n, slots, grads);
        sent = true;
        st = held ? sdk_clip_exchange(t, step, t->clip_max, params, &t->clip_total, &err)
                  : exchange(t, 0, t->ntensors, true, params, &err);
    }
    if (!held)   /* a clipped step fails over whole (sdk_clip.c) */
        st = fail_over(t, "step", step, 0, t->ntensors, true, params, st, &err);
    /* State was lost: the cluster takes the job back to its last snapshot, and so do we. */
    if (st == TS_EROLLBACK && sdk_can_fail_over(t)) {
        uint64_t back = 0;
        ts_log(TS_WARN, "sdk", "step %" PRIu64 ": %s", step, err.msg);
        memset(&err, 0, sizeof(err));
        if (!(st = sdk_rollback(t, params, &back, &err))) {
            t->resume_step = back;
            st = ts_err_set(&err, TS_EROLLBACK, "step %" PRIu64 ": the cluster took job '%s' "
                            "back to step %" PRIu64 " of its last snapshot (a partition lost "
                            "every copy); training goes on from there", step, t->job.id, back);
        }
    }
    /* Elastic: the slots changed hands, or the job went on past this worker's step. */
    if (t->elastic && sent && (st == TS_ESLOTS || (!st && t->newest > step + 1))) {
        memset(&err, 0, sizeof(err));
        st = sdk_elastic_recover(t, step, params, &err);
    }
    sdk_combine_done(t, step, st == TS_OK);
    t->nstep = 0;
    sdk_elastic_done(t, st);
    if (st)
        return sdk_fail(e, &err);
    finish_step(t, params);
    if (t->ms) {
        struct ts_worker_report r = { t->stats.staleness_last, t->stats.staleness_max,
                                      t->stats.steps_skipped, tessera_loss_scale(t) };
        ts_membership_set_clock(t->ms, step + 1);
        ts_membership_set_report(t->ms, &r);
    }
    return sdk_ok(e);
}

ts_status sdk_pull_all(struct tessera *t, uint64_t step, float *const *params,
                       struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        only(t, i, 0, step / x->sync_every);
        if (x->acc)   /* a sum since the last sync of steps that are undone */
            memset(x->acc, 0, x->numel * elem_bytes(t));
    }
    return exchange(t, 0, t->ntensors, false, params, err);
}

uint64_t tessera_resume_step(const tessera *t)
{
    return t->resume_step;
}

float tessera_loss_scale(const tessera *t)
{
    return t->loss_mode == TESSERA_LOSS_SCALE_NONE ? 1.0f : ldexpf(1.0f, t->scale_exp);
}

void tessera_stats(const tessera *t, struct tessera_stats *out)
{
    *out = t->stats;
    out->loss_scale = tessera_loss_scale(t);
    out->failovers = t->failovers;
}

/* For sdk_overlap.c (tessera_push_some, tessera_pull_some): tensor i's push of grad checked
 * (check_f32) and readied, and the exchange of the active tensors of [first, last) with its
 * failovers. */
ts_status sdk_check_push(struct tessera *t, int i, const void *grad, struct ts_err *err)
{
    return check_f32(t, t->tensors[i], grad, err);
}

void sdk_prepare_push(struct tessera *t, int i, const void *grad)
{
    prepare_push(t, t->tensors[i], grad);
}

ts_status sdk_exchange_once(struct tessera *t, bool push, float *const *params,
                            struct ts_err *err)
{
    return exchange(t, 0, t->ntensors, push, params, err);
}

ts_status sdk_exchange(struct tessera *t, const char *what, uint64_t n, int first, int last,
                       bool push, float *const *params, struct ts_err *err)
{
    return fail_over(t, what, n, first, last, push, params,
                     exchange(t, first, last, push, params, err), err);
}
