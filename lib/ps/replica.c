/* replica.c - a partition's image for chain replication, and the hold on what pulls may see
 * (part.h, "Replication"; docs/replication.md).
 *
 * The image is a fixed header (with the optimizer's update count), then the values, the
 * optimizer state, one overflow byte per rank and, in SSP and ASP, each rank's clock (8 bytes
 * each). The header names the partition (tensor, index, offset, length) and the job's shape
 * (mode, workers, state floats), so that a follower loads only an image of its own
 * partition. */
#include <inttypes.h>
#include <string.h>

#include "part_internal.h"

#define IMAGE_MAGIC "TSPIMG3"   /* 2: the clocks of SSP and ASP; 3: the update count */

struct image_hdr {
    char magic[8];
    uint32_t mode, workers;
    uint32_t tensor_id, index;
    uint64_t offset, len;
    uint64_t state_floats;
    uint64_t version, skipped;
    uint32_t gen, reserved;     /* gen: ts_part_rollback's; reserved: 0 */
    uint64_t updates;           /* the optimizer's update count (part.h, "Update count") */
};

_Static_assert(sizeof(struct image_hdr) == TS_PART_IMAGE_HDR, "part.h documents the header");

/* REDUCE keeps no optimizer state on the shard (the workers apply the update). */
static uint64_t state_floats(const struct ts_part *p)
{
    return p->job->mode == TS_MODE_REDUCE ? 0 : ts_optim_state_len(p->job->optim.kind) * p->len;
}

/* The bytes of each rank's clock: SSP and ASP keep one. */
static size_t clock_bytes(const struct ts_part *p)
{
    return async_mode(p->job) ? p->job->workers * sizeof(uint64_t) : 0;
}

size_t ts_part_image_bytes(const struct ts_part *p)
{
    return sizeof(struct image_hdr) + (p->len + state_floats(p)) * sizeof(float) +
           p->job->workers + clock_bytes(p);
}

/* The header of p's image at its current version. Called with mu held. */
static struct image_hdr header_now(const struct ts_part *p)
{
    return (struct image_hdr){ .magic = IMAGE_MAGIC, .mode = p->job->mode,
                               .workers = p->job->workers, .tensor_id = p->tensor_id,
                               .index = p->index, .offset = p->offset, .len = p->len,
                               .state_floats = state_floats(p), .version = p->version,
                               .skipped = p->skipped, .gen = p->gen, .updates = p->updates };
}

ts_status ts_part_image(struct ts_part *p, void *buf, size_t cap, uint64_t *version,
                        struct ts_err *err)
{
    size_t need = ts_part_image_bytes(p);
    struct image_hdr h;
    char *at = buf;

    if (cap < need)
        return ts_err_set(err, TS_EINVAL, "image: %zu bytes of room, want %zu", cap, need);
    pthread_mutex_lock(&p->mu);
    if (p->seed) {
        pthread_mutex_unlock(&p->mu);
        return ts_err_set(err, TS_EUNAVAIL, "tensor %u partition %u: its ranks are seeding it "
                          "(every copy was lost); its image comes once they did", p->tensor_id,
                          p->index);
    }
    h = header_now(p);
    *version = h.version;
    memcpy(at, &h, sizeof(h));
    at += sizeof(h);
    memcpy(at, p->value, p->len * sizeof(float));
    at += p->len * sizeof(float);
    memcpy(at, p->state, h.state_floats * sizeof(float));
    at += h.state_floats * sizeof(float);
    memcpy(at, p->overflow, p->job->workers);
    at += p->job->workers;
    if (clock_bytes(p))
        memcpy(at, p->clock, clock_bytes(p));
    pthread_mutex_unlock(&p->mu);
    return TS_OK;
}

ts_status ts_part_image_pieces(struct ts_part *p, void *small, struct iovec pieces[4],
                               uint64_t *version, struct ts_err *err)
{
    struct image_hdr h;
    char *flags = (char *)small + sizeof(h);

    if (async_mode(p->job))
        return ts_err_set(err, TS_EINVAL, "tensor %u partition %u: mode %s updates the values "
                          "under a reader; take the image with ts_part_image", p->tensor_id,
                          p->index, ts_mode_name(p->job->mode));
    pthread_mutex_lock(&p->mu);
    h = header_now(p);
    *version = h.version;
    memcpy(small, &h, sizeof(h));
    memcpy(flags, p->overflow, p->job->workers);   /* a pull of an older version clears them */
    pthread_mutex_unlock(&p->mu);
    pieces[0] = (struct iovec){ small, sizeof(h) };
    pieces[1] = (struct iovec){ p->value, p->len * sizeof(float) };
    pieces[2] = (struct iovec){ p->state, h.state_floats * sizeof(float) };
    pieces[3] = (struct iovec){ flags, p->job->workers };
    return TS_OK;
}

/* Whether the header describes p; the mismatch named in err. */
static ts_status check_hdr(const struct ts_part *p, const struct image_hdr *h, size_t n,
                           struct ts_err *err)
{
    if (memcmp(h->magic, IMAGE_MAGIC, sizeof(h->magic)) != 0)
        return ts_err_set(err, TS_EINVAL, "image: not a partition image (magic)");
    if (h->tensor_id != p->tensor_id || h->index != p->index || h->offset != p->offset ||
        h->len != p->len)
        return ts_err_set(err, TS_EINVAL, "image: of tensor %u partition %u (%" PRIu64
                          " elements from %" PRIu64 "), not this one", h->tensor_id, h->index,
                          h->len, h->offset);
    if (h->mode != (uint32_t)p->job->mode || h->workers != p->job->workers)
        return ts_err_set(err, TS_EINVAL, "image: job mode %u with %u workers, this "
                          "partition's job is %s with %u", h->mode, h->workers,
                          ts_mode_name(p->job->mode), p->job->workers);
    if (h->state_floats != state_floats(p))
        return ts_err_set(err, TS_EINVAL, "image: state_floats %" PRIu64 ", this partition's "
                          "optimizer keeps %" PRIu64, h->state_floats, state_floats(p));
    if (n != ts_part_image_bytes(p))
        return ts_err_set(err, TS_EINVAL, "image: %zu bytes, want %zu", n,
                          ts_part_image_bytes(p));
    return TS_OK;
}

/* Loads the image buf[0..n): whole, or with values given (ts_part_load_image_split) without
 * its values, which are at `values`. */
static ts_status load(struct ts_part *p, const void *buf, size_t n, const float *values,
                      struct ts_err *err)
{
    const char *after_hdr, *at;
    struct image_hdr h;
    ts_status st;

    if (n < sizeof(h))
        return ts_err_set(err, TS_EINVAL, "image: %zu bytes, shorter than its header", n);
    after_hdr = (const char *)buf + sizeof(h);
    memcpy(&h, buf, sizeof(h));
    if ((st = check_hdr(p, &h, values ? n + p->len * sizeof(float) : n, err)))
        return st;
    if (!values) {
        values = (const float *)(const void *)after_hdr;
        at = after_hdr + p->len * sizeof(float);
    } else {
        at = after_hdr;
    }
    pthread_mutex_lock(&p->mu);
    if (h.gen != p->gen) {
        uint32_t have = p->gen;
        pthread_mutex_unlock(&p->mu);
        return ts_err_set(err, TS_EROLLBACK, "image: of tensor %u partition %u at rollback %u "
                          "of its job, this copy is at rollback %u", p->tensor_id, p->index,
                          h.gen, have);
    }
    if (h.version < (p->moved && p->hold ? p->visible : p->version)) {
        uint64_t have = p->version;
        pthread_mutex_unlock(&p->mu);
        /* SSP and ASP: images of pushes applied one after another can overtake each other
         * on their way down; the newer one held here has every update the older one has. */
        if (async_mode(p->job))
            return TS_OK;
        return ts_err_set(err, TS_ESTATE, "image: version %" PRIu64 " of tensor %u partition "
                          "%u, older than the %" PRIu64 " held here", h.version, p->tensor_id,
                          p->index, have);
    }
    part_seed_drop(p);   /* a follower now: the image is the state */
    memcpy(p->value, values, p->len * sizeof(float));
    memcpy(p->state, at, h.state_floats * sizeof(float));
    at += h.state_floats * sizeof(float);
    memcpy(p->overflow, at, p->job->workers);
    at += p->job->workers;
    if (clock_bytes(p))
        memcpy(p->clock, at, clock_bytes(p));
    p->version = p->visible = h.version;
    p->skipped = h.skipped;
    p->updates = h.updates;
    part_step_reset(p);
    part_marks_clear(p);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return TS_OK;
}

ts_status ts_part_load_image(struct ts_part *p, const void *buf, size_t n, struct ts_err *err)
{
    return load(p, buf, n, NULL, err);
}

ts_status ts_part_load_image_split(struct ts_part *p, const void *buf, size_t n,
                                   const float *values, struct ts_err *err)
{
    return load(p, buf, n, values, err);
}

void ts_part_hold(struct ts_part *p, bool on)
{
    pthread_mutex_lock(&p->mu);
    p->hold = on;
    p->visible = p->version;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

bool ts_part_holding(struct ts_part *p)
{
    bool on;

    pthread_mutex_lock(&p->mu);
    on = p->hold;
    pthread_mutex_unlock(&p->mu);
    return on;
}

void ts_part_set_head(struct ts_part *p, bool head)
{
    pthread_mutex_lock(&p->mu);
    p->moved = !head;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void ts_part_pin(struct ts_part *p)
{
    atomic_fetch_add(&p->pins, 1);
}

void ts_part_unpin(struct ts_part *p)
{
    atomic_fetch_sub(&p->pins, 1);
}

bool ts_part_pinned(struct ts_part *p)
{
    return atomic_load(&p->pins) != 0;
}

void ts_part_publish(struct ts_part *p, uint64_t version)
{
    pthread_mutex_lock(&p->mu);
    if (version > p->version)   /* never past what is applied */
        version = p->version;
    if (version > p->visible) {
        p->visible = version;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

uint64_t ts_part_visible(struct ts_part *p)
{
    uint64_t v;

    pthread_mutex_lock(&p->mu);
    v = p->hold ? p->visible : p->version;
    pthread_mutex_unlock(&p->mu);
    return v;
}
