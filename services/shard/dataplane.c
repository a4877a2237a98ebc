/* dataplane.c - the shard's side of the data plane: the frames of one connection, PUSH/PULL
 * applied to the partitions (lib/ps); its listeners and threads are dp_listen.c's.
 *
 * Each connection is served in order by its own thread, so a PULL that waits for the next
 * version blocks only that worker's connection, while the other workers' pushes arrive on
 * theirs. A frame refused by lib/transport (torn, oversized, corrupted) is answered with an
 * ERROR frame and the connection is closed: after a bad frame the byte stream is not trusted,
 * and nothing from it was applied.
 *
 * Copies: a push arriving over shm is added to the aggregation straight from the ring
 * (ts_frame_recv_view), and a pull is sent straight from the partition's values. Where frames
 * carry hashes (connections that leave the host), a version's hash is computed once and reused
 * for every worker's pull of it (pull_sum). Images down a partition's chain, sent after a
 * push and taken from the shard before in it, are dp_chain.c's. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "durable.h"
#include "metrics/metrics.h"
#include "testhooks.h"
#include "transport/frame.h"
#include "transport/region.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

/* The hash of a partition's values at one version, shared by the connection threads: every
 * worker pulls the same bytes. Direct-mapped by partition address; a collision only costs a
 * recomputation. An entry is right while its version is the partition's (values change only
 * when the version moves, part.h). */
static uint64_t pull_sum(struct dataplane *dp, struct ts_part *p, uint64_t version)
{
    size_t i = ((uintptr_t)p >> 6) % DP_SUM_CACHE;
    struct dp_sum *s = &dp->sums[i];
    uint64_t sum;

    pthread_mutex_lock(&dp->sum_mu);
    if (s->part == p && s->version == version) {
        sum = s->sum;
        pthread_mutex_unlock(&dp->sum_mu);
        return sum;
    }
    pthread_mutex_unlock(&dp->sum_mu);
    sum = ts_frame_hash(ts_part_values(p), ts_part_len(p) * sizeof(float));
    pthread_mutex_lock(&dp->sum_mu);
    *s = (struct dp_sum){ p, version, sum };
    pthread_mutex_unlock(&dp->sum_mu);
    return sum;
}

ts_status dp_reply_error(struct ts_conn *c, const struct ts_frame_hdr *req,
                        const struct ts_err *e)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_ERROR, .tensor = req->tensor,
                              .partition = req->partition, .step = req->step,
                              .flags = (uint32_t)e->code };
    struct ts_err ignore = { 0 };

    return ts_frame_send(c, &h, e->msg, strlen(e->msg), &ignore);
}

/* The bytes of one element of a push (or of a shared gradient region) in this encoding. */
static size_t push_elem(unsigned encoding)
{
    return encoding == TS_ENC_FIXED ? sizeof(int64_t) : sizeof(float);
}

/* Points a push that says TS_PUSH_REGION at partition p's slice of the worker's gradient
 * region: floats, or int64 (TS_ENC_FIXED), at the partition's offset. A push whose encoding
 * says another element size than the SHARE did runs past the region's end, and is refused. */
static ts_status in_region(struct dp_conn *dc, const struct ts_frame_hdr *h,
                           const struct ts_part *p, struct ts_push *in, struct ts_err *err)
{
    const struct ts_region *r = dc->regions ? &dc->regions[h->tensor].grad : NULL;
    size_t elem = push_elem(h->encoding);

    if (!r || !r->base)
        return ts_err_set(err, TS_ESTATE, "tensor %u: a push from a shared region, but this "
                          "connection shared none for it (send SHARE first)", h->tensor);
    if (h->len || (h->encoding != TS_ENC_RAW && h->encoding != TS_ENC_FIXED &&
                   h->encoding != TS_ENC_FIXED_F32))
        return ts_err_set(err, TS_EINVAL, "tensor %u: a push from a shared region carries no "
                          "payload and is raw (encoding %u, %" PRIu64 " bytes)", h->tensor,
                          h->encoding, h->len);
    if ((ts_part_offset(p) + ts_part_len(p)) * elem > r->size)
        return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: past the end of the shared "
                          "region (%zu bytes)", h->tensor, h->partition, r->size);
    in->payload = (const char *)r->base + ts_part_offset(p) * elem;
    in->bytes = ts_part_len(p) * elem;
    return TS_OK;
}

/* The partition a worker's PUSH or PULL names, which this shard must head, pinned (the caller
 * puts it); *next: the shard after it in its chain (0: none). */
static ts_status head_of(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part **p,
                         uint32_t *next, struct ts_err *err)
{
    struct shard_params *sp = dc->dp->params;
    bool follows = false;

    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    *p = shard_params_find(sp, dc->job, h->tensor, h->partition, &follows, next);
    if ((!*p || follows) && atomic_load(&dc->dp->cluster) && dc->dp->remap) {
        /* A worker that failed over may know the new map before this shard does: in it this
         * shard heads the partition, or heads one whose every copy is lost. */
        shard_params_put(*p);
        dc->dp->remap(dc->dp->remap_ctx);
        *p = shard_params_find(sp, dc->job, h->tensor, h->partition, &follows, next);
    }
    if (!*p && shard_params_lost(sp, dc->job, h->tensor, h->partition))
        return ts_err_set(err, TS_EROLLBACK, "tensor %u partition %u lost every copy (the "
                          "shards of its chain died): the job goes back to its last snapshot; "
                          "wait for the master", h->tensor, h->partition);
    if (!*p && shard_params_tensor(sp, dc->job, h->tensor))
        return ts_err_set(err, TS_ESTALE, "tensor %u partition %u is not on this shard under "
                          "the shard map (epoch %" PRIu64 "): refresh the shard map", h->tensor,
                          h->partition, ts_cluster_epoch(atomic_load(&dc->dp->cluster)));
    if (!*p)
        return ts_err_set(err, TS_ENOTFOUND, "tensor %u is not registered in job '%s' on this "
                          "shard: register the tensor first", h->tensor, dc->job->job.id);
    if (follows) {
        shard_params_put(*p);
        *p = NULL;
        return ts_err_set(err, TS_ESTALE, "tensor %u partition %u: this shard is a replica, "
                          "not the head of its chain; refresh the shard map", h->tensor,
                          h->partition);
    }
    return TS_OK;
}

/* A combined push (TS_PUSH_SLOTS): the mask in front of the gradient goes to in->slots, the
 * rest is the payload. */
static ts_status take_slots(const struct ts_frame_hdr *h, struct ts_push *in,
                            struct ts_err *err)
{
    const uint8_t *b = in->payload;

    if (!(h->flags & TS_PUSH_SLOTS))
        return TS_OK;
    if ((h->flags & TS_PUSH_REGION) || h->len < TS_PUSH_SLOTS_LEN)
        return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: a push of several slots "
                          "carries their mask (%d bytes) and then its gradient, never from a "
                          "shared region (%" PRIu64 " bytes)", h->tensor, h->partition,
                          TS_PUSH_SLOTS_LEN, h->len);
    in->slots = 0;
    for (int k = TS_PUSH_SLOTS_LEN - 1; k >= 0; k--)
        in->slots = in->slots << 8 | b[k];
    if (!in->slots)
        return ts_err_set(err, TS_EINVAL, "slots: 0 in a push of several slots of tensor %u "
                          "partition %u (want a mask of two slots or more)", h->tensor,
                          h->partition);
    in->payload = b + TS_PUSH_SLOTS_LEN;
    in->bytes = h->len - TS_PUSH_SLOTS_LEN;
    return TS_OK;
}

ts_status dp_owns(struct dp_conn *dc, uint32_t rank, uint64_t slots, struct ts_err *err)
{
    ts_status st;

    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    if ((st = dp_access_check(dc->dp->access, dc->job->job.id, dc->member, rank, slots, err)) ==
        TS_EPERM)
        dp_refuse(dc->dp, DP_REFUSED_IDENTITY, dc->c->peer, err->msg);
    return st;
}

static ts_status on_push(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct ts_err *err)
{
    struct ts_part *p = NULL;
    uint32_t next = 0;
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor,
                                .partition = h->partition, .step = h->step };
    struct ts_push in = { .rank = h->rank, .step = h->step, .encoding = h->encoding,
                          .scale_exp = TS_PUSH_SCALE_EXP(h->flags), .payload = buf,
                          .bytes = h->len, .retry = (h->flags & TS_PUSH_RETRY) != 0,
                          .gen = dc->gen, .member = dc->member,
                          .payload_sum = h->unhashed ? 0 : h->checksum,
                          .assign = (h->flags & TS_PUSH_ASSIGN) != 0,
                          .state = (h->flags & TS_PUSH_STATE) != 0, .lr = h->lr,
                          .no_decay = (h->flags & TS_PUSH_NO_DECAY) != 0,
                          .hold = (h->flags & TS_PUSH_HOLD) != 0,
                          .apply = (h->flags & TS_PUSH_APPLY) != 0 };
    int64_t t0 = ts_now_ns();
    bool applied = false;
    ts_status st;

    if (((in.state || (h->flags & TS_PUSH_UPDATES)) && !in.assign) ||
        (in.assign && (h->flags & (TS_PUSH_REGION | TS_PUSH_SLOTS))))
        return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: an assignment carries its "
                          "values (and state, and update count) in the frame (flags 0x%x: not "
                          "from a shared region, not several slots, state and count only with "
                          "an assignment)", h->tensor, h->partition, h->flags);
    if (in.apply) {   /* the coefficient is the payload (frame.h) */
        if (h->len != TS_COEF_LEN || in.hold ||
            (h->flags & (TS_PUSH_REGION | TS_PUSH_SLOTS | TS_PUSH_ASSIGN | TS_PUSH_UPDATES)))
            return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: an apply carries its "
                              "clipping coefficient alone (%d bytes; %" PRIu64 " came, flags "
                              "0x%x)", h->tensor, h->partition, TS_COEF_LEN, (uint64_t)h->len,
                              h->flags);
        in.coef = ts_coef_get(buf);
        in.payload = NULL;
        in.bytes = 0;
    }
    if (h->flags & TS_PUSH_UPDATES) {   /* the count ends the payload (frame.h) */
        if (h->len <= TS_UPDATES_LEN)
            return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: an assignment's update "
                              "count comes after its values (%" PRIu64 " bytes in all)",
                              h->tensor, h->partition, (uint64_t)h->len);
        in.bytes = h->len - TS_UPDATES_LEN;
        in.has_updates = true;
        in.updates = ts_updates_get((const uint8_t *)buf + in.bytes);
    }
    if ((st = take_slots(h, &in, err)) || (st = dp_owns(dc, in.rank, in.slots, err)) ||
        (st = head_of(dc, h, &p, &next, err)))
        return st;
    if (!((h->flags & TS_PUSH_REGION) && in_region(dc, h, p, &in, err))) {
        int64_t t1 = ts_now_ns();
        if ((st = ts_part_push(p, &in, &applied, err)) == TS_EPERM)
            dp_refuse(dc->dp, DP_REFUSED_CONFLICT, dc->c->peer, err->msg);
        if (!st && applied) {
            /* (the registry's lock taken only with a log) */
            struct shard_tensor *t = dc->dp->params->durable
                ? shard_params_tensor(dc->dp->params, dc->job, h->tensor) : NULL;
            bool logged = t && shard_durable_holds(t);

            ts_histogram_observe(dc->metrics.aggregate_s, (double)(ts_now_ns() - t1) / 1e9);
            hook_applied(ts_part_version(p));
            /* --redo-dir: the update's image logged while the partition holds it, a pull of
             * it answered once that is synced (pull_from). Not logged (no memory): not
             * published either, and the pusher hears why. */
            ts_status lst = logged ? shard_durable_part(dc->job, t, h->partition, p, true, err)
                                   : TS_OK;
            if (!lst && next) {
                hook_reach(HOOK_PUSH);
                (void)dp_replicate(dc, h, p, next, err);
            } else if (!lst && logged) {
                ts_part_publish(p, ts_part_version(p));
            }
        }
    }
    shard_params_put(p);
    if (err->code)
        return err->code;
    ts_counter_add(dc->metrics.updates, applied);
    ts_counter_add(dc->metrics.push_bytes, in.bytes);
    st = ts_frame_send(dc->c, &ack, NULL, 0, err);
    ts_histogram_observe(dc->metrics.push_s, (double)(ts_now_ns() - t0) / 1e9);
    return st;
}

/* TS_ESTALE for a pull of a reduce job on a connection begun under an older shard map than
 * this shard's (dataplane_remapped). */
static ts_status map_moved(struct dp_conn *dc, struct ts_err *err)
{
    struct ts_cluster *cl = atomic_load(&dc->dp->cluster);
    uint64_t now;

    if (!dc->reduce || !dc->hello_epoch || !cl || (now = ts_cluster_epoch(cl)) <= dc->hello_epoch)
        return TS_OK;
    return ts_err_set(err, TS_ESTALE, "the shard map moved to epoch %" PRIu64 " since this "
                      "connection began (epoch %" PRIu64 "): a partition of reduce job '%s' may "
                      "have lost every copy, which its workers seed; fail over and send the step "
                      "again", now, dc->hello_epoch, dc->job->job.id);
}

void dataplane_remapped(struct dataplane *dp, uint64_t epoch)
{
    pthread_mutex_lock(&dp->id_mu);
    for (struct dp_conn *dc = dp->conns; dc; dc = dc->next)
        if (dc->reduce && dc->hello_epoch && dc->hello_epoch < epoch)
            atomic_fetch_or(&dc->cancel, DP_CANCEL_WAKE);
    pthread_mutex_unlock(&dp->id_mu);
}

/* A SEED from a worker of a reduce job that failed over: the version of the partition its
 * rank holds, with the values; taken if the partition is being seeded (lib/ps/seed.c). */
static ts_status on_seed(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor,
                                .partition = h->partition, .step = h->step };
    struct ts_part *p = NULL;
    ts_status st;

    if (dc->job && dc->job->job.mode != TS_MODE_REDUCE)
        return ts_err_set(err, TS_EINVAL, "seed: job '%s' is mode %s; only a reduce job's "
                          "workers seed partitions", dc->job->job.id,
                          ts_mode_name(dc->job->job.mode));
    if ((st = dp_owns(dc, h->rank, 0, err)) || (st = head_of(dc, h, &p, NULL, err)))
        return st;
    if (h->len && h->len != ts_part_len(p) * sizeof(float))
        st = ts_err_set(err, TS_EINVAL, "seed: %" PRIu64 " bytes of values for tensor %u "
                        "partition %u, want %" PRIu64 " (or none)", (uint64_t)h->len, h->tensor,
                        h->partition, ts_part_len(p) * sizeof(float));
    else
        st = ts_part_seed(p, h->rank, h->step, h->len ? buf : NULL,
                          (h->flags & TS_SEED_OVERFLOW) != 0, err);
    shard_params_put(p);
    return st ? st : ts_frame_send(dc->c, &ack, NULL, 0, err);
}

/* A PULL of partition p, which this shard heads (pinned by the caller). */
static ts_status pull_from(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                           struct ts_part *p, struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_PARAMS, .tensor = h->tensor,
                                .partition = h->partition, .dtype = 1 };
    struct ts_pull_info info;
    uint64_t len = ts_part_len(p);
    enum ts_mode mode = dc->job->job.mode;
    /* SSP and ASP values change under a reader. So do an elastic worker's in bsp: a step
     * completes without its pushes when another worker pushes its slots (a joiner catching
     * up, a slot that just changed hands), and a send straight from the partition could then
     * mix two versions under one version number. Those are copied under the lock. */
    bool copy = mode == TS_MODE_SSP || mode == TS_MODE_ASP || dc->worker != 0;
    bool coded = (h->flags & TS_PULL_CODED) != 0;
    struct dp_pullc_req rq = { 0 };

    /* The version asked for needs the push that was refused: it would never come. */
    if ((h->flags & TS_PULL_REGION) &&
        (copy || !dc->regions || !dc->regions[h->tensor].params))
        return ts_err_set(err, TS_ESTATE, "tensor %u: a pull from the shared region, but this "
                          "connection does not map it (send MAP first; bsp only)", h->tensor);
    if (coded && dp_pullc_check(dc, h, buf, &rq, err))
        return err->code;
    if ((h->flags & TS_PULL_AFTER_PUSH) && dc->push_refused)
        return ts_err_set(err, TS_ESTATE, "pull of version %" PRIu64 " refused: a push of this "
                          "step was refused (see the error before)", h->step);
    if (copy && dc->copy_cap < len) {
        float *c = realloc(dc->copy, len * sizeof(float));
        if (!c)
            return ts_err_set(err, TS_ENOMEM, "pull: no memory for a copy of %" PRIu64
                              " floats", len);
        dc->copy = c;
        dc->copy_cap = len;
    }
    for (;;) {   /* a wake (slots.c, dataplane_remapped) ends the wait */
        ts_status st = dp_slots_moved(dc, err);
        if (!st)
            st = map_moved(dc, err);
        if (!st)
            st = ts_part_pull(p, h->rank, h->step, dc->gen, DP_PULL_WAIT_MS, &dc->cancel,
                              copy ? dc->copy : NULL, &info, err);
        if (!st)
            break;
        if (st != TS_ECANCELLED || !dp_slots_rewait(dc))
            return st;
        ts_err_clear(err);   /* a wake already told: wait on */
    }
    /* --redo-dir: the version is answered once its image is on this shard's disk */
    struct shard_tensor *t = dc->dp->params->durable
        ? shard_params_tensor(dc->dp->params, dc->job, h->tensor) : NULL;
    if (t && shard_durable_part_wait(t, h->partition, DP_PULL_WAIT_MS, err))
        return err->code;
    hook_reach(HOOK_PULL);
    hook_pulled(info.version);
    out.step = info.version;
    out.flags = info.overflow ? TS_PARAMS_OVERFLOW : 0;
    out.rank = info.staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)info.staleness;
    /* From the copy where it was taken. Otherwise straight from the partition: it cannot
     * change before this rank pushes again (part.h), so neither can its hash; version is the
     * partition's until then. */
    if (h->flags & TS_PULL_REGION) {   /* the worker reads them where they are */
        out.flags |= TS_PARAMS_REGION;
        return ts_frame_send(dc->c, &out, NULL, 0, err);
    }
    if (coded)
        return dp_pullc_reply(dc, &out, &rq, copy ? dc->copy : ts_part_values(p), len,
                              info.version, err);
    if (copy)
        return ts_frame_send(dc->c, &out, dc->copy, len * sizeof(float), err);
    if (!ts_frame_wants_hash(dc->c))
        return ts_frame_send(dc->c, &out, ts_part_values(p), len * sizeof(float), err);
    return ts_frame_send_hashed(dc->c, &out, ts_part_values(p), len * sizeof(float),
                                pull_sum(dc->dp, p, info.version), err);
}

/* A TS_PULL_STATE pull: the optimizer's state of partition p at version h->step, and its
 * update count after it. */
static ts_status state_from(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                            struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_PARAMS, .tensor = h->tensor,
                                .partition = h->partition, .dtype = 1, .step = h->step,
                                .flags = TS_PARAMS_STATE | TS_PARAMS_UPDATES };
    size_t n = ts_optim_state_len(dc->job->job.optim.kind) * ts_part_len(p);
    uint8_t count[TS_UPDATES_LEN];
    uint64_t updates = 0;
    struct iovec pieces[2];
    size_t np = 0;

    if (h->flags & ~(uint32_t)(TS_PULL_STATE | TS_PULL_ROUND))
        return ts_err_set(err, TS_EINVAL, "tensor %u: a pull of optimizer state takes no other "
                          "flag (0x%x)", h->tensor, h->flags);
    if (dc->copy_cap < n) {
        float *c = realloc(dc->copy, n * sizeof(float));
        if (!c)
            return ts_err_set(err, TS_ENOMEM, "pull: no memory for %zu floats of state", n);
        dc->copy = c;
        dc->copy_cap = n;
    }
    if (ts_part_read_state(p, h->step, dc->copy, &updates, err))
        return err->code;
    ts_updates_put(count, updates);
    if (n)   /* sgd keeps no state: the count alone */
        pieces[np++] = (struct iovec){ dc->copy, n * sizeof(float) };
    pieces[np++] = (struct iovec){ count, sizeof(count) };
    return ts_frame_sendv(dc->c, &out, pieces, np, err);
}

static ts_status on_pull(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct ts_err *err)
{
    struct ts_part *p = NULL;
    int64_t t0 = ts_now_ns();
    ts_status st;

    if ((st = head_of(dc, h, &p, NULL, err)))
        return st;
    if (h->flags & (TS_PULL_STATE | TS_PULL_NORM)) {
        st = (h->flags & TS_PULL_STATE) ? state_from(dc, h, p, err) : dp_norm_from(dc, h, p, err);
        shard_params_put(p);
        return st;
    }
    st = pull_from(dc, h, buf, p, err);
    if (!st) {
        ts_counter_add(dc->metrics.pull_bytes, (h->flags & TS_PULL_CODED) ? dc->pullc_last
                                               : ts_part_len(p) * sizeof(float));
        ts_histogram_observe(dc->metrics.pull_s, (double)(ts_now_ns() - t0) / 1e9);
    }
    shard_params_put(p);
    return st;
}

/* Unmaps what the worker shared and forgets what it mapped. */
static void regions_free(struct dp_conn *dc)
{
    for (size_t i = 0; dc->regions && i < SHARD_MAX_TENSORS; i++) {
        ts_region_free(&dc->regions[i].grad);
        ts_region_free(&dc->regions[i].prev);
    }
    free(dc->regions);
    dc->regions = NULL;
}

/* The tensor a SHARE or MAP names, with this connection's region slot for it. */
static ts_status region_slot(struct dp_conn *dc, uint32_t tensor, struct shard_tensor **t,
                             struct dp_region **r, struct ts_err *err)
{
    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    if (!(*t = shard_params_tensor(dc->dp->params, dc->job, tensor)))
        return ts_err_set(err, TS_ENOTFOUND, "tensor %u is not registered in job '%s'", tensor,
                          dc->job->job.id);
    if (!dc->regions) {
        if (!(dc->regions = calloc(SHARD_MAX_TENSORS, sizeof(*dc->regions))))
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        for (size_t i = 0; i < SHARD_MAX_TENSORS; i++)
            dc->regions[i].grad = dc->regions[i].prev = TS_REGION_NONE;
    }
    *r = &dc->regions[tensor];
    return TS_OK;
}

/* The worker shares its gradient buffer of a tensor (TS_SHARE_GRAD), or the shard before this
 * one in a chain its values (TS_SHARE_PARAMS): map it read-only; pushes that say
 * TS_PUSH_REGION read from the first (in_region), images that say TS_IMAGE_REGION from the
 * second (on_image). Only a region its creator alone can write is taken (region.h,
 * TS_REGION_OWNED), so no third process that holds it can change what is added or copied
 * here. The descriptor comes first, beside the stream: a SHARE without one
 * leaves the two out of step, so the connection is closed. */
static ts_status on_share(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct shard_tensor *t;
    struct dp_region *r;
    struct ts_region g, *slot;
    /* A gradient region holds the pushes' encoding: int64 only for TS_ENC_FIXED. */
    size_t elem = h->flags == TS_SHARE_GRAD ? push_elem(h->encoding) : sizeof(float);
    int fd = -1;

    if (!ts_tp_can_share(dc->c) || ts_tp_recv_fd(dc->c, 1000, &fd, err)) {
        if (!err->code)
            ts_err_set(err, TS_EINVAL, "SHARE on a %s connection, which cannot pass regions",
                       ts_tp_name(dc->c));
        dp_reply_error(dc->c, h, err);
        return TS_EUNAVAIL;
    }
    if (h->flags != TS_SHARE_GRAD && h->flags != TS_SHARE_PARAMS) {
        close(fd);
        return ts_err_set(err, TS_EINVAL, "SHARE flags %#x: a worker shares gradients (%#x), a "
                          "shard its values (%#x)", h->flags, TS_SHARE_GRAD, TS_SHARE_PARAMS);
    }
#if TS_TEST_HOOKS
    /* A test that corrupts the copies it follows needs the values in the images. */
    if (h->flags == TS_SHARE_PARAMS && dc->dp->flip) {
        close(fd);
        return ts_err_set(err, TS_ENOTSUP, "this shard corrupts a replica for a test "
                          "(TESSERA_TEST_FLIP_REPLICA): send whole images");
    }
#endif
    if (region_slot(dc, h->tensor, &t, &r, err)) {
        close(fd);
        return err->code;
    }
    if (ts_region_map(fd, t->numel * elem, TS_REGION_OWNED, &g, err)) {
        ts_err_prefix(err, "tensor '%s' %s", t->name,
                      h->flags == TS_SHARE_GRAD ? "gradient" : "values");
        return err->code;
    }
    slot = h->flags == TS_SHARE_GRAD ? &r->grad : &r->prev;
    ts_region_free(slot);
    *slot = g;
    return ts_frame_send(dc->c, &(struct ts_frame_hdr){ .type = TS_FRAME_ACK,
                                                        .tensor = h->tensor }, NULL, 0, err);
}

/* The worker asks to map a tensor's values: pass the region's descriptor, then a SHARE. Only
 * where values change just between a rank's push and its next pull (bsp, reduce). */
static ts_status on_map(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_SHARE, .tensor = h->tensor,
                                .flags = TS_SHARE_PARAMS };
    struct shard_tensor *t;
    struct dp_region *r;

    if (region_slot(dc, h->tensor, &t, &r, err))
        return err->code;
    if (dc->job->job.mode == TS_MODE_SSP || dc->job->job.mode == TS_MODE_ASP)
        return ts_err_set(err, TS_ESTATE, "tensor '%s': mode %s updates values under a reader; "
                          "pull copies instead", t->name, ts_mode_name(dc->job->job.mode));
    if (!t->values.base || !ts_tp_can_share(dc->c))
        return ts_err_set(err, TS_ENOTSUP, "tensor '%s': its values are not shared (%s); pull "
                          "copies instead", t->name, t->values.base ? "the connection cannot "
                          "pass regions" : "small, or no memfd");
    if (ts_tp_send_fd(dc->c, t->values.fd, err))
        return TS_EUNAVAIL;   /* the worker waits for a descriptor: hang up */
    r->params = true;
    return ts_frame_send(dc->c, &out, NULL, 0, err);
}

/* Names the connection's job. The reply (ACK or ERROR) tells the worker whether it exists. */
static ts_status on_hello(struct dp_conn *dc, const struct ts_frame_hdr *h, const char *buf,
                          struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK };
    struct ts_membership *ms;
    struct shard_job *job;
    char id[TS_JOB_ID_MAX + 1];
    uint8_t proof[TS_DP_ACK_LEN];
    size_t len = h->len;
    bool auth = (h->flags & TS_HELLO_AUTH) != 0;
    ts_status st;

    if ((st = dp_hello_auth(dc, h, buf, &len, &ack, proof, err)))
        return st;
    if (len == 0 || len >= sizeof(id))
        return ts_err_set(err, TS_EINVAL, "hello: job id of 1..%d bytes required",
                          TS_JOB_ID_MAX);
    if (memchr(buf, '\0', len))
        return ts_err_set(err, TS_EINVAL, "hello: job id holds a NUL byte");
    memcpy(id, buf, len);
    id[len] = '\0';
    if (ts_job_id_check("hello: job id", id, err))
        return TS_EINVAL;
    /* an authenticated connection stays with the job and worker it proved its key for */
    if (dc->c->authed && (strcmp(id, dc->hs_job) || (!dc->link && h->tensor != dc->hs.member)))
        return ts_err_set(err, TS_EAUTH, "hello: this connection is authenticated for worker %u "
                          "of job '%s', not worker %u of '%s'", dc->hs.member, dc->hs_job,
                          h->tensor, id);
    job = shard_params_attach(dc->dp->params, id);
    if (job != dc->job)   /* regions belong to the job's tensors */
        regions_free(dc);
    dp_pullc_free(dc);    /* charged to the job before; copies start again */
    shard_params_detach(dc->dp->params, dc->job);
    dc->job = job;
    pthread_mutex_lock(&dc->dp->id_mu);
    snprintf(dc->job_id, sizeof(dc->job_id), "%s", job ? id : "");
    dc->hello_epoch = h->step;
    dc->reduce = job && job->job.mode == TS_MODE_REDUCE;
    pthread_mutex_unlock(&dc->dp->id_mu);
    shard_metrics_drop(&dc->metrics);   /* the job named before, if any */
    if (job)
        shard_metrics_job(&dc->metrics, id);
    if (!dc->job)
        return ts_err_set(err, TS_ENOTFOUND, "hello: job '%s' has no tensors on this shard: "
                          "register them first", id);
    dc->gen = atomic_load(&dc->job->rollbacks);
    dc->member = h->flags & TS_HELLO_CHAIN ? 0 : h->tensor;
    dc->worker = h->flags & TS_HELLO_ELASTIC ? h->tensor : 0;
    if ((ms = atomic_load(&dc->dp->membership)))
        dc->registration = ts_membership_registrations(ms);
    dc->bye = false;
    ack.step = dc->gen;   /* the worker learns which rollback it works after */
    return ts_frame_send(dc->c, &ack, auth ? proof : NULL, auth ? sizeof(proof) : 0, err);
}

/* The connection's job is going back to a snapshot, or went back since its HELLO: every
 * request of it is refused (docs/replication.md, "Rollback"); the worker starts over from
 * the snapshot's step on new connections. */
ts_status dp_rolled_back(struct dp_conn *dc, struct ts_err *err)
{
    uint64_t fence;

    if (!dc->job)
        return TS_OK;
    if ((fence = atomic_load(&dc->job->fence)))
        return ts_err_set(err, TS_EROLLBACK, "job '%s' is going back to step %" PRIu64 " of "
                          "its last snapshot (a partition lost every copy); wait for the "
                          "master, then continue from there", dc->job->job.id, fence - 1);
    if (atomic_load(&dc->job->rollbacks) != dc->gen)
        return ts_err_set(err, TS_EROLLBACK, "job '%s' went back to step %" PRIu64 " of its "
                          "last snapshot since this connection named it: connect again and "
                          "continue from there", dc->job->job.id,
                          (uint64_t)atomic_load(&dc->job->rollback_step));
    return TS_OK;
}

void dataplane_forget(void *arg, const char *job)
{
    struct dataplane *dp = arg;

    pthread_mutex_lock(&dp->sum_mu);
    memset(dp->sums, 0, sizeof(dp->sums));
    pthread_mutex_unlock(&dp->sum_mu);
    if (job)
        shard_metrics_forget(job);
}

/* Answers one request frame h (payload in), which dp_allowed let through. */
static ts_status serve(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *in,
                       struct ts_err *err)
{
    ts_status st = TS_OK;

    if ((h->type == TS_FRAME_PUSH || h->type == TS_FRAME_PULL || h->type == TS_FRAME_IMAGE ||
         h->type == TS_FRAME_ROWS_PUSH || h->type == TS_FRAME_ROWS_PULL ||
         h->type == TS_FRAME_ROWS_COPY) &&
        dp_rolled_back(dc, err))
        return TS_EROLLBACK;
    if (dc->member && !dc->link) {   /* a worker's frame: its shard vouches for it */
        atomic_store_explicit(&dc->answered, true, memory_order_relaxed);
        if ((h->type == TS_FRAME_PUSH || h->type == TS_FRAME_ROWS_PUSH) &&
            h->step > atomic_load_explicit(&dc->pushed_step, memory_order_relaxed))
            atomic_store_explicit(&dc->pushed_step, h->step, memory_order_relaxed);
    }
    switch (h->type) {
    case TS_FRAME_PUSH:
        if (h->flags & TS_PUSH_ROUND)   /* a new step's pushes begin */
            dc->push_refused = dc->reslot = false;
        st = on_push(dc, h, in, err);
        dc->push_refused |= st != TS_OK;
        return st;
    case TS_FRAME_PULL:
        if (h->flags & TS_PULL_ROUND)   /* a round begins: slots.c */
            dc->reslot = false;
        return on_pull(dc, h, in, err);
    case TS_FRAME_HELLO:
        if (!(st = on_hello(dc, h, in, err)))
            dp_guard_trust(dc);
        return st;
    case TS_FRAME_AUTH:
        if (!(st = dp_on_auth(dc, h, in, err)))
            dp_guard_trust(dc);
        return st;
    case TS_FRAME_BYE:
        dc->bye = true;   /* no reply: the worker is closing */
        return TS_OK;
    case TS_FRAME_SHARE:
        return on_share(dc, h, err);
    case TS_FRAME_MAP:
        return on_map(dc, h, err);
    case TS_FRAME_IMAGE:
        return dp_on_image(dc, h, in, err);
    case TS_FRAME_SEED:
        return on_seed(dc, h, in, err);
    case TS_FRAME_ROWS_PUSH:
        return dp_rows_push(dc, h, in, err);
    case TS_FRAME_ROWS_PULL:
        return dp_rows_pull(dc, h, in, err);
    case TS_FRAME_ROWS_SCAN:
        return dp_rows_scan(dc, h, err);
    case TS_FRAME_ROWS_COPY:
        return dp_rows_copy(dc, h, in, err);
    case TS_FRAME_ROWS_PREFETCH:
        dp_rows_prefetch(dc, h, in);   /* no reply, whatever it finds */
        return TS_OK;
    default:
        return ts_err_set(err, TS_EINVAL, "frame type %u is not a request", h->type);
    }
}

bool dp_conn_serve(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *in, void *buf,
                   size_t cap, bool *hung_up)
{
    struct dataplane *dp = dc->dp;
    struct ts_err err = { 0 };
    ts_status st;

    if (dc->forged.code) {
        /* Refused as a forgery or a conflict: the worker reads why from the reply to each
         * frame it sent after, rather than a send that failed because the shard hung up
         * first (its pipelined pushes raced the close). */
        ts_frame_release(dc->c);
        return h->type != TS_FRAME_BYE && !dp_reply_error(dc->c, h, &dc->forged);
    }
    if ((st = dp_allowed(dc, h->type, &err))) {
        dp_refuse(dp, dc->c->authed ? DP_REFUSED_KIND : DP_REFUSED_HANDSHAKE, dc->c->peer,
                  err.msg);
        ts_frame_release(dc->c);
        dp_reply_error(dc->c, h, &err);
        return false;
    }
    st = serve(dc, h, in, &err);
    /* Done with the payload: let the worker reuse its place in the ring. */
    ts_frame_release(dc->c);
    if (st == TS_ECANCELLED && dc->job && atomic_load(&dc->job->fence)) {
        err = (struct ts_err){ 0 };   /* a pull ended by a rollback: say so */
        st = dp_rolled_back(dc, &err);
    }
    if (st == TS_EAUTH) {   /* a failed proof: the end */
        dp_refuse(dp, h->type == TS_FRAME_HELLO && dc->c->authed ? DP_REFUSED_IDENTITY
                                                                 : DP_REFUSED_HANDSHAKE,
                  dc->c->peer, err.msg);
        dp_reply_error(dc->c, h, &err);
        return false;
    }
    if (st == TS_EPERM) {   /* a forgery or a conflict: nothing more is served (above) */
        dc->forged = err;
        return !dp_reply_error(dc->c, h, &err);
    }
    if (st == TS_EUNAVAIL || st == TS_ECANCELLED || (st && dp_reply_error(dc->c, h, &err))) {
        /* A reply that could not go: the worker may have hung up under it (slots.c). */
        *hung_up = st != TS_ECANCELLED && dp_slots_peer_gone(dc, buf, cap);
        return false;
    }
    return true;
}

void dp_conn_end(struct dp_conn *dc, bool hung_up)
{
    struct dataplane *dp = dc->dp;

    if (hung_up && !atomic_load(&dp->stop))
        dp_slots_lost(dc);
    free(dc->copy);
    dc->copy = NULL;
    dp_rows_free(dc);
    regions_free(dc);
    dp_pullc_free(dc);
    chain_links_close(&dc->chain);
    shard_metrics_drop(&dc->metrics);
    shard_params_detach(dp->params, dc->job);   /* the job may be released from now on */
    dc->job = NULL;
    ts_tp_shutdown(dc->c);   /* the worker sees the hang-up now, not when reap() closes it */
    atomic_store(&dc->done, true);
}
