/* dp_chain.c - the chain side of a shard's data-plane connections (docs/replication.md): a
 * head sending a partition's image down its chain after an update (dp_replicate), and a
 * follower taking one from the shard before it (dp_on_image). The links themselves are
 * chain.c's; this file decides what goes on them and what a follower loads.
 * Threads: each function runs on the calling connection's thread, with its chain links. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "testhooks.h"
#include "util/log.h"
#include "util/proc.h"

/* How long a head waits for the map to drop a dead next shard of a chain (its lease, and a
 * heartbeat to hear of the new map, must fit in it). */
#define CHAIN_REPAIR_MS 60000

/* Next shard `next` of a chain is unreachable: the master hears of it (and checks it), and if
 * it is out of the map now, this shard follows the new chains at once, not at its next
 * heartbeat. */
static void report(struct dataplane *dp, uint32_t next, const char *seen)
{
    char who[32];

    snprintf(who, sizeof(who), "shard %u", atomic_load(&dp->self));
    if (ts_cluster_report_unreachable(atomic_load(&dp->cluster), next, who, seen) ==
        TS_REPORT_DEAD && dp->remap)
        dp->remap(dp->remap_ctx);
}

/* Sends the image of partition (h->tensor, h->partition) at version down its chain, starting
 * at shard next; head: whether this shard sends it as the head (else it passes it on). A next
 * shard that is gone: wait for the map without it, then send to the new next (a new copy
 * takes the whole image); one that is no longer in the chain (TS_ESTALE): the same under the
 * newest map. TS_OK with nothing sent if the chain ends here now; TS_ESTALE if this shard's
 * place in it changed (a worker then sends the step to the new head). */
static ts_status send_down(struct dp_conn *dc, const struct ts_frame_hdr *h, uint32_t next,
                           bool head, uint64_t version, const struct chain_image *image,
                           struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int64_t until = ts_now_ms() + CHAIN_REPAIR_MS; next; ) {
        struct ts_err e = { 0 };
        uint32_t now = next;

        dc->chain.self = atomic_load(&dc->dp->self);
        dc->chain.keys = dc->dp->require_auth ? dp_access_chain_key : NULL;
        dc->chain.keys_ctx = dc->dp;
        st = chain_send(&dc->chain, atomic_load(&dc->dp->cluster), dc->job->job.id, next,
                        h->tensor, h->partition, version, image, &dc->dp->stop, &e);
        /* A joining shard not yet told of the job or tensor (the repair thread tells it, then
         * sends it the image): the chain ends here for now. */
        if (st == TS_ENOTFOUND && ts_cluster_is_joining(atomic_load(&dc->dp->cluster), next))
            return TS_OK;
        if ((st != TS_EUNAVAIL && st != TS_ESTALE) || ts_now_ms() > until ||
            atomic_load(&dc->dp->stop)) {
            if (st)
                ts_err_set(err, st, "%s", e.msg);
            break;
        }
        if (st == TS_EUNAVAIL) {
            ts_log(TS_WARN, "dataplane", "tensor %u partition %u: %s; waiting for the map to "
                   "drop it", h->tensor, h->partition, e.msg);
            report(dc->dp, next, e.msg);
        } else if (dc->dp->remap) {
            dc->dp->remap(dc->dp->remap_ctx);
        }
        while (now == next && ts_now_ms() <= until && !atomic_load(&dc->dp->stop)) {
            bool follows = false;
            struct ts_part *q = shard_params_find(dc->dp->params, dc->job, h->tensor,
                                                  h->partition, &follows, &now);
            shard_params_put(q);
            if (!q || follows == head)
                return ts_err_set(err, TS_ESTALE, "tensor %u partition %u: this shard's place "
                                  "in its chain changed; refresh the shard map", h->tensor,
                                  h->partition);
            if (now == next)
                ts_sleep_ms(50);
        }
        next = now;
        st = TS_OK;   /* a chain that ends here now is done */
    }
    return st;
}

ts_status dp_copy_rows(struct dp_conn *dc, uint32_t follower, uint64_t since,
                       struct ts_frame_hdr *h, const struct iovec *iov, size_t n,
                       struct ts_err *err)
{
    struct dataplane *dp = dc->dp;
    int64_t until = ts_now_ms() + CHAIN_REPAIR_MS;
    ts_status st;

    dc->chain.self = atomic_load(&dp->self);
    dc->chain.keys = dp->require_auth ? dp_access_chain_key : NULL;
    dc->chain.keys_ctx = dp;
    for (;;) {
        struct ts_err e = { 0 };
        struct ts_cluster *cl = atomic_load(&dp->cluster);

        if (!ts_cluster_holds(cl, follower, since))
            return TS_OK;   /* gone: these rows have one copy now (rowcopy.h) */
        st = chain_send_frame(&dc->chain, cl, dc->job->job.id, follower, h, iov, n, &dp->stop,
                              &e);
        if (!st)
            return TS_OK;
        if (st != TS_EUNAVAIL)   /* it took the rows over, or the job went back: no ACK */
            return ts_err_set(err, st, "table %u: shard %u did not take the copy of rank %u's "
                              "push of step %" PRIu64 ": %s", h->tensor, follower, h->rank,
                              h->step, e.msg);
        if (ts_now_ms() > until || atomic_load(&dp->stop))
            return ts_err_set(err, TS_EUNAVAIL, "table %u: the copy of its rows on shard %u is "
                              "unreachable and the map still holds it: %s", h->tensor,
                              follower, e.msg);
        ts_log(TS_WARN, "dataplane", "table %u: %s; waiting for the map to drop it", h->tensor,
               e.msg);
        report(dp, follower, e.msg);
        for (int64_t wait = ts_now_ms() + 1000;
             ts_cluster_holds(atomic_load(&dp->cluster), follower, since) &&
             ts_now_ms() < wait && !atomic_load(&dp->stop); )
            ts_sleep_ms(50);
    }
}

/* After p's update: its image down the chain, then the update is visible to pulls (BSP, REDUCE) or
 * the push is acknowledged (SSP, ASP: the caller acknowledges the push). In BSP and REDUCE the
 * values and state go from where they lie (ts_part_image_pieces: they cannot change before the
 * publish): a 64 MiB step with R = 2 took 33.5 ms so, 37.8 ms with the copy (bench_pushpull,
 * bench/README.md); and where the tensor's values live in a shared region, a next shard on this
 * host reads them there (chain_image). In SSP and ASP another rank's push may change them
 * meanwhile: a copy, taken under the partition's lock, goes. */
ts_status dp_replicate(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                       uint32_t next, struct ts_err *err)
{
    enum ts_mode mode = dc->job->job.mode;
    struct iovec pieces[4], rest[3];
    struct chain_image img = { .whole = pieces, .nwhole = 4, .values_fd = -1, .rest = rest,
                               .nrest = 3 };
    const struct shard_tensor *t;
    uint64_t version;
    ts_status st;

    if (mode == TS_MODE_SSP || mode == TS_MODE_ASP) {
        size_t n = ts_part_image_bytes(p);
        if ((st = chain_image_room(&dc->chain, n, err)) ||
            (st = ts_part_image(p, dc->chain.image, n, &version, err)))
            return st;
        pieces[0] = (struct iovec){ dc->chain.image, n };
        img.nwhole = 1;
    } else {
        if ((st = chain_image_room(&dc->chain, TS_PART_IMAGE_SMALL, err)) ||
            (st = ts_part_image_pieces(p, dc->chain.image, pieces, &version, err)))
            return st;
        if ((t = shard_params_tensor(dc->dp->params, dc->job, h->tensor)) && t->values.base) {
            rest[0] = pieces[0];   /* all but the values */
            rest[1] = pieces[2];
            rest[2] = pieces[3];
            img.values_fd = t->values.fd;
        }
    }
    if ((st = send_down(dc, h, next, true, version, &img, err)))
        return st;
    ts_part_publish(p, version);
    return TS_OK;
}

#if TS_TEST_HOOKS
/* The image with the lowest bit of its first value flipped, loaded
 * ($TESSERA_TEST_FLIP_REPLICA, dataplane.h). */
static ts_status load_flipped(struct dp_conn *dc, struct ts_part *p, const void *buf, size_t n,
                              struct ts_err *err)
{
    ts_status st;

    if (n <= TS_PART_IMAGE_HDR)
        return ts_part_load_image(p, buf, n, err);   /* refused as it is */
    if ((st = chain_image_room(&dc->chain, n, err)))
        return st;
    memcpy(dc->chain.image, buf, n);
    ((unsigned char *)dc->chain.image)[TS_PART_IMAGE_HDR] ^= 1;
    return ts_part_load_image(p, dc->chain.image, n, err);
}
#endif

/* An IMAGE must come from the shard before this one in the partition's chain (`rank`), under
 * the newest map: anything else (a sender with an older map, or one not in the chain at all)
 * is refused before it changes anything. A tensor this shard does not know passes: the image
 * is refused as unknown then. */
static ts_status check_from(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct dataplane *dp = dc->dp;
    struct ts_cluster *cl = atomic_load(&dp->cluster);
    uint32_t prev;

    if (!cl || !shard_params_tensor(dp->params, dc->job, h->tensor))
        return TS_OK;
    if (!h->rank)
        return ts_err_set(err, TS_EINVAL, "image.from: required (the sending shard's id, in "
                          "the frame's rank)");
    prev = shard_params_prev(dp->params, dc->job, h->tensor, h->partition);
    if (prev != h->rank && dp->remap) {
        dp->remap(dp->remap_ctx);
        prev = shard_params_prev(dp->params, dc->job, h->tensor, h->partition);
    }
    if (prev == h->rank)
        return TS_OK;
    if (!prev)
        return ts_err_set(err, TS_ESTALE, "image.from: shard %u sent an image of tensor %u "
                          "partition %u, but this shard heads its chain or is not in it (map "
                          "epoch %" PRIu64 "); refresh the shard map", h->rank, h->tensor,
                          h->partition, ts_cluster_epoch(cl));
    return ts_err_set(err, TS_ESTALE, "image.from: shard %u is not the shard before this one in "
                      "the chain of tensor %u partition %u (shard %u is, map epoch %" PRIu64 "); "
                      "refresh the shard map", h->rank, h->tensor, h->partition, prev,
                      ts_cluster_epoch(cl));
}

/* Loads an image whose values are in the previous shard's region (TS_IMAGE_REGION): buf holds
 * the rest. */
static ts_status load_split(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                            const void *buf, struct ts_err *err)
{
    const struct ts_region *r = dc->regions ? &dc->regions[h->tensor].prev : NULL;

    if (!r || !r->base)
        return ts_err_set(err, TS_ESTATE, "image.flags: the values are in the sender's region, "
                          "but it shared none for tensor %u on this connection", h->tensor);
    if ((ts_part_offset(p) + ts_part_len(p)) * sizeof(float) > r->size)
        return ts_err_set(err, TS_EINVAL, "image of tensor %u partition %u: past the end of the "
                          "sender's region (%zu bytes)", h->tensor, h->partition, r->size);
    if (ts_part_load_image_split(p, buf, h->len, (const float *)r->base + ts_part_offset(p),
                                 err))
        return err->code;
    atomic_fetch_add(&dc->dp->params->images_from_region, 1);
    return TS_OK;
}

/* A predecessor's image of a partition whose chain this shard follows: held, passed on to the
 * next shard if there is one, then acknowledged. An image whose values came from the
 * previous shard's region goes on whole, copied from this copy (chains of 3 or more). */
ts_status dp_on_image(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                      struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor,
                                .partition = h->partition, .step = h->step };
    struct chain_image img = { .nwhole = 1, .values_fd = -1 };
    struct iovec whole;
    uint64_t version = h->step;
    struct ts_part *p;
    bool follows = false;
    uint32_t next = 0;
    ts_status st;

    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    if ((st = check_from(dc, h, err)))
        return st;
    /* The partition, or a new copy of it if this shard joined its chain since. */
    if (!shard_params_adopt(dc->dp->params, dc->job, h->tensor, h->partition, err)) {
        if (err->code != TS_ESTALE || !atomic_load(&dc->dp->cluster) || !dc->dp->remap)
            return err->code;
        /* The sender follows a newer map, in which this shard joined the chain. */
        memset(err, 0, sizeof(*err));
        dc->dp->remap(dc->dp->remap_ctx);
        if (!shard_params_adopt(dc->dp->params, dc->job, h->tensor, h->partition, err))
            return err->code;
    }
    p = shard_params_find(dc->dp->params, dc->job, h->tensor, h->partition, &follows, &next);
    if (!p || !follows) {
        shard_params_put(p);
        return ts_err_set(err, TS_ESTALE, "image of tensor %u partition %u: this shard %s "
                          "its chain under the shard map it holds (epoch %" PRIu64 ")",
                          h->tensor, h->partition, p ? "heads" : "left",
                          ts_cluster_epoch(atomic_load(&dc->dp->cluster)));
    }
    if (h->flags & TS_IMAGE_REGION)
        st = load_split(dc, h, p, buf, err);
#if TS_TEST_HOOKS
    else if (dc->dp->flip && h->tensor == dc->dp->flip_tensor &&
             h->partition == dc->dp->flip_part)
        st = load_flipped(dc, p, buf, h->len, err);
#endif
    else
        st = ts_part_load_image(p, buf, h->len, err);
    img.whole = &whole;
    whole = (struct iovec){ (void *)buf, h->len };
    if (!st && next && (h->flags & TS_IMAGE_REGION)) {
        size_t n = ts_part_image_bytes(p);
        if (!(st = chain_image_room(&dc->chain, n, err)) &&
            !(st = ts_part_image(p, dc->chain.image, n, &version, err)))
            whole = (struct iovec){ dc->chain.image, n };
    }
    shard_params_put(p);
    if (st)
        return st;
    hook_reach(HOOK_IMAGE);
    if ((st = send_down(dc, h, next, false, version, &img, err)))
        return st;
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}
