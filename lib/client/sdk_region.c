/* sdk_region.c - the SDK's shared regions (docs/transport.md, "Shared regions"): a tensor's
 * parameters mapped from the shards on this host, and the gradient buffer of tessera_buffers
 * that those shards read in place.
 *
 * A tensor's view is one range of numel floats. At registration (bsp), each shard on this host
 * that holds some of its partitions is asked for its region (MAP); the shard keeps every
 * partition's values at the partition's offset in the tensor, so the same offset in the view
 * maps it (MAP_FIXED, read-only). Partitions held by other shards, or not page-aligned, stay
 * private pages that pulls fill. A pull of a mapped partition carries no payload: the reply
 * says the version is there, and the SDK copies from the view only when the caller's buffer
 * is another one. */
#include "client/sdk_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/frame.h"
#include "util/log.h"

#define FD_WAIT_MS 5000          /* a descriptor is sent before the frame announcing it */

/* Whether shard slot s holds a partition of x. */
static bool holds(const struct sdk_tensor *x, uint32_t s)
{
    for (uint32_t p = 0; p < x->nparts; p++)
        if (x->owner[p] == s)
            return true;
    return false;
}

static ts_status grad_share(struct tessera *t, struct sdk_tensor *x, int id,
                            struct ts_err *err);

ts_status sdk_view_alloc(struct sdk_tensor *x, struct ts_err *err)
{
    size_t bytes = ts_page_round(x->numel * sizeof(float));
    void *v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (v == MAP_FAILED)
        return ts_err_set(err, TS_ENOMEM, "tensor '%s': no memory for %zu bytes of parameters",
                          x->name, bytes);
    x->view = v;
    x->view_bytes = bytes;
    return TS_OK;
}

/* Asks shard slot s for x's region and maps the partitions it holds. TS_OK with nothing
 * mapped when the shard declines (small tensor, no memfd): those partitions stay private. */
static ts_status map_from(struct tessera *t, struct sdk_tensor *x, int id, uint32_t s,
                          struct ts_err *err)
{
    struct ts_conn *c = t->conns.shards[s].conn;
    struct ts_frame_hdr h = { .type = TS_FRAME_MAP, .tensor = (uint32_t)id };
    struct ts_err e = { 0 };
    ts_status st;
    int fd = -1;

    if ((st = ts_frame_send(c, &h, NULL, 0, err)))
        return st;
    st = sdk_read_reply(t, s, TS_FRAME_SHARE, (uint32_t)id, 0, NULL, 0, NULL, &e);
    if (st == TS_ENOTSUP || st == TS_ESTATE) {
        ts_log(TS_DEBUG, "sdk", "tensor '%s': %s", x->name, e.msg);
        return TS_OK;
    }
    if (st || (st = ts_tp_recv_fd(c, FD_WAIT_MS, &fd, &e)))
        return ts_err_set(err, st, "tensor '%s': mapping its parameters: %s", x->name, e.msg);
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint64_t off, len;
        if (x->owner[p] != s)
            continue;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        st = ts_region_map_at(fd, x->view + off, off * sizeof(float), len * sizeof(float), err);
        x->view_part[p] = !st;
    }
    close(fd);
    if (st)
        ts_err_prefix(err, "tensor '%s' from shard %u", x->name, t->conns.shards[s].id);
    return st;
}

/* Maps x's partitions from every shard on this host that holds some. */
static ts_status map_all(struct tessera *t, struct sdk_tensor *x, int id, struct ts_err *err)
{
    ts_status st;

    for (uint32_t s = 0; s < t->conns.nshards; s++) {
        if (holds(x, s) && ts_tp_can_share(t->conns.shards[s].conn) &&
            (st = map_from(t, x, id, s, err)))
            return st;
    }
    return TS_OK;
}

ts_status sdk_map_params(struct tessera *t, struct sdk_tensor *x, int id, struct ts_err *err)
{
    ts_status st;

    /* Elastic jobs recompute a step from values that must not change under them
     * (sdk_elastic.c): pulled into private pages, not mapped. */
    if (t->local || t->elastic || t->job.mode != TS_MODE_BSP ||
        x->partition_bytes % ts_page_size() != 0)
        return TS_OK;
    if ((st = sdk_view_alloc(x, err)))
        return st;
    if (!(x->view_part = calloc(x->nparts, 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    return map_all(t, x, id, err);
}

ts_status sdk_region_reconnect(struct tessera *t, struct sdk_tensor *x, int id,
                               struct ts_err *err)
{
    ts_status st;

    for (uint32_t p = 0; x->view_part && p < x->nparts; p++) {
        uint64_t off, len;
        if (!x->view_part[p])
            continue;
        /* Private pages where the shard's were: the values stay until the next pull. */
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        size_t bytes = ts_page_round(len * sizeof(float));
        void *keep = malloc(len * sizeof(float) + 1);
        if (!keep)
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        memcpy(keep, x->view + off, len * sizeof(float));
        if (mmap(x->view + off, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
            free(keep);
            return ts_err_set(err, TS_ENOMEM, "tensor '%s': no memory to unmap partition %u",
                              x->name, p);
        }
        memcpy(x->view + off, keep, len * sizeof(float));
        free(keep);
        x->view_part[p] = 0;
    }
    if (x->view_part && (st = map_all(t, x, id, err)))
        return st;
    return x->grad_shared ? grad_share(t, x, id, err) : TS_OK;
}

bool sdk_push_in_region(const struct sdk_tensor *x, uint32_t p)
{
    /* grad_shared exists only for remote shards (sdk_grad_alloc). */
    return !x->encoded && x->grad_shared && x->src == x->grad.base && x->grad_shared[x->owner[p]];
}

ts_status sdk_grad_alloc(struct tessera *t, struct sdk_tensor *x, int id, struct ts_err *err)
{
    size_t bytes = x->numel * sdk_push_bytes(t);
    /* Owned: the shards that map it can read it, only this process can write it. */
    ts_status st = ts_region_create("tessera-grad", bytes, TS_REGION_OWNED, &x->grad, err);

    if (st == TS_ENODEV) {   /* no memfds (or seals) here: private memory, always copied */
        void *g = mmap(NULL, ts_page_round(bytes), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g == MAP_FAILED)
            return ts_err_set(err, TS_ENOMEM, "tensor '%s': no memory for its gradient",
                              x->name);
        x->grad = (struct ts_region){ g, ts_page_round(bytes), -1 };
        x->grad_pin = ts_tp_pin(x->grad.base, x->grad.size);
        return TS_OK;
    }
    if (st)
        return st;
    /* Pushed from again and again: a backend that can send it in place does (rdma). */
    x->grad_pin = ts_tp_pin(x->grad.base, x->grad.size);
    return t->local ? TS_OK : grad_share(t, x, id, err);
}

/* Shares x's gradient region with every shard on this host that holds a partition of x; a
 * shard that declines is left out (its pushes copy). */
static ts_status grad_share(struct tessera *t, struct sdk_tensor *x, int id, struct ts_err *err)
{
    ts_status st;

    free(x->grad_shared);
    if (!(x->grad_shared = calloc(t->conns.nshards + 1, 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (uint32_t s = 0; s < t->conns.nshards; s++) {
        struct ts_frame_hdr h = { .type = TS_FRAME_SHARE, .tensor = (uint32_t)id,
                                  .flags = TS_SHARE_GRAD,
                                  .encoding = (uint16_t)sdk_push_encoding(t) };
        struct ts_conn *c = t->conns.shards[s].conn;
        struct ts_err e = { 0 };

        if (!holds(x, s) || !ts_tp_can_share(c))
            continue;
        if ((st = ts_tp_send_fd(c, x->grad.fd, err)) ||
            (st = ts_frame_send(c, &h, NULL, 0, err))) {
            sdk_note_broken(t, s, st);
            return st;
        }
        st = sdk_read_reply(t, s, TS_FRAME_ACK, (uint32_t)id, 0, NULL, 0, NULL, &e);
        sdk_note_broken(t, s, st);
        if (sdk_transport_failed(st))
            return ts_err_set(err, st, "tensor '%s': sharing its gradient: %s", x->name, e.msg);
        if (st)
            ts_log(TS_DEBUG, "sdk", "tensor '%s': shard %u: %s", x->name, t->conns.shards[s].id,
                   e.msg);
        x->grad_shared[s] = !st;
    }
    return TS_OK;
}

void sdk_region_free(struct sdk_tensor *x)
{
    if (x->view)
        munmap(x->view, x->view_bytes);
    x->view = NULL;
    free(x->view_part);
    x->view_part = NULL;
    ts_tp_unpin(x->grad_pin);   /* before its pages go */
    x->grad_pin = 0;
    ts_region_free(&x->grad);
    free(x->grad_shared);
    x->grad_shared = NULL;
}
