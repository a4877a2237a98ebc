/* chain.h - a shard's links down its partitions' chains (docs/replication.md).
 *
 * A head that applied a step sends the partition's image to the next shard of its chain, and
 * a follower that is not the tail passes it on; each waits for the acknowledgement, which
 * comes once the rest of the chain holds the image. A link is a data-plane connection to the
 * next shard, opened on first use with a HELLO naming the job, and kept for the next step.
 * Ownership: a struct chain_links belongs to one data-plane connection thread, which alone
 * uses it and closes it (chain_links_close) when it ends.
 * Threads: none of its own; a send blocks its caller until the acknowledgement. */
#ifndef TS_SHARD_CHAIN_H
#define TS_SHARD_CHAIN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "transport/frame.h"
#include "util/names.h"

/* A link names one job (its HELLO): images of another job need another link. maps[tensor]:
 * whether the next shard maps this shard's values of the tensor (1), declined to (-1), or was
 * not asked yet (0). */
struct chain_link {
    uint32_t shard;
    char job[TS_JOB_ID_MAX + 1];
    struct ts_conn *c;
    uint64_t since;                  /* the map epoch it was made under */
    int8_t *maps;                    /* CHAIN_MAX_TENSORS */
};
#define CHAIN_MAX_TENSORS 4096       /* SHARD_MAX_TENSORS */

/* An image to send: whole, as pieces sent where they lie (ts_frame_sendv). A head whose
 * tensor's values live in a shared region (values_fd >= 0) sends `rest`, the pieces without
 * the values, to a next shard on this host that maps the region (the values cross once,
 * read by the next shard, rather than copied through the link and out of it again). */
struct chain_image {
    const struct iovec *whole;
    size_t nwhole;
    int values_fd;
    const struct iovec *rest;
    size_t nrest;
};

struct chain_links {
    uint32_t self;                   /* this shard's id: an IMAGE names its sender in `rank` */
    /* With keys set (the shard serves mutual TLS), a new link does the handshake with the
     * job's chain key (transport/auth.h), which keys(ctx, job, out, err) gives. */
    ts_status (*keys)(void *ctx, const char *job, uint8_t out[32], struct ts_err *err);
    void *keys_ctx;
    struct chain_link *links;
    size_t n, cap;
    void *image;                     /* an image, or a step's small pieces, reused per step */
    size_t image_cap;
};

/* Sends an IMAGE frame (tensor, partition, version in `step`, cs->self in `rank`: the next
 * shard takes images from the shard before it in the chain only) with the image to shard
 * `next` of job, through cl's map, and waits for its ACK. With img->values_fd, the first image
 * of a tensor on a link that can pass descriptors offers the region (SHARE, TS_SHARE_PARAMS);
 * once the next shard maps it, images go without their values (TS_IMAGE_REGION). `stop` (may
 * be NULL) ends the wait early. TS_EUNAVAIL if the link broke or the next shard is not in the
 * map (or leaves it while this waits: a hung next shard costs its lease, not its hang): the
 * link is closed and the next call opens a new one; the next shard's refusal comes
 * back with its status and message. */
ts_status chain_send(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                     uint32_t next, uint32_t tensor, uint32_t partition, uint64_t version,
                     const struct chain_image *img, const atomic_bool *stop,
                     struct ts_err *err) TS_MUST_CHECK;
/* Sends frame h (any type; its payload the pieces iov[0..n)) to shard `next` of job over the
 * link and waits for its ACK, as chain_send does (TS_EUNAVAIL: the link is closed; the next
 * shard's refusal with its status). For frames other than images: copies of table rows'
 * pushes (rowcopy.h). */
ts_status chain_send_frame(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                           uint32_t next, struct ts_frame_hdr *h, const struct iovec *iov,
                           size_t n, const atomic_bool *stop, struct ts_err *err) TS_MUST_CHECK;
/* Room for n bytes of image in cs->image (TS_ENOMEM). */
ts_status chain_image_room(struct chain_links *cs, size_t n, struct ts_err *err) TS_MUST_CHECK;
void chain_links_close(struct chain_links *cs);

#endif
