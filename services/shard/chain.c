/* chain.c - see chain.h. */
#include "chain.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <openssl/crypto.h>
#include <string.h>

#include "transport/auth.h"
#include "util/log.h"

#define LINK_CONNECT_MS 10000
#define LINK_POLL_MS 1000
#define LINK_ACK_MS 120000   /* the rest of the chain applies the image: generous */
#define REPLY_MAX 1024       /* an ERROR's message */

static void drop(struct chain_links *cs, size_t i)
{
    ts_tp_close(cs->links[i].c);
    free(cs->links[i].maps);
    cs->links[i] = cs->links[--cs->n];
}

/* What a wait for the next shard's reply watches: the map (cl, the heartbeat thread keeps it
 * current) and the epoch the link was made under. A hung next shard (stopped, a frozen VM)
 * keeps the link open and the kernel acknowledges what is sent to it: the wait ends when the
 * master drops it from the map, not when it wakes (docs/replication.md, "A hung head"). */
struct link_watch {
    struct ts_cluster *cl;
    uint64_t since;
};

/* Waits for the reply to the frame just sent on c: TS_OK for an ACK, the peer's status and
 * message for an ERROR. */
/* ack, if not NULL, receives the ACK's header, and data its payload (REPLY_MAX bytes). */
static ts_status await_ack(struct ts_conn *c, uint32_t shard, const atomic_bool *stop,
                           struct link_watch w, struct ts_frame_hdr *ack, char *data,
                           struct ts_err *err)
{
    char msg[REPLY_MAX + 1];
    struct ts_frame_hdr h;
    ts_status st;
    int waited = 0;

    while ((st = ts_frame_recv(c, &h, msg, REPLY_MAX, LINK_POLL_MS, err)) == TS_ETIMEDOUT &&
           waited < LINK_ACK_MS && !(stop && atomic_load(stop))) {
        memset(err, 0, sizeof(*err));
        waited += LINK_POLL_MS;
        if (!ts_cluster_holds(w.cl, shard, w.since))
            return ts_err_set(err, TS_EUNAVAIL, "replica shard %u left the shard map (epoch "
                              "%" PRIu64 ") while this shard waited %d ms for its "
                              "acknowledgement", shard, ts_cluster_epoch(w.cl), waited);
    }
    if (st)
        return ts_err_set(err, TS_EUNAVAIL, "replica shard %u: %s", shard,
                          err->msg[0] ? err->msg : "no reply");
    if (h.type == TS_FRAME_ACK) {
        if (ack) {
            *ack = h;
            memcpy(data, msg, h.len);
        }
        return TS_OK;
    }
    msg[h.len < REPLY_MAX ? h.len : REPLY_MAX] = '\0';
    if (h.type == TS_FRAME_ERROR)
        return ts_err_set(err, ts_frame_error_status(&h), "replica shard %u: %s", shard, msg);
    return ts_err_set(err, TS_EUNAVAIL, "replica shard %u answered with frame type %u",
                      shard, h.type);
}

static ts_status await_reply(struct ts_conn *c, uint32_t shard, const atomic_bool *stop,
                             struct link_watch w, struct ts_err *err)
{
    return await_ack(c, shard, stop, w, NULL, NULL, err);
}

/* The HELLO of a new link, and with keys the handshake (transport/auth.h): the job's chain
 * key, which workers never hold, proves a shard of this cluster to the next. */
static ts_status hello(struct chain_links *cs, struct ts_conn *c, const char *job, uint32_t next,
                       const atomic_bool *stop, struct link_watch w, struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .rank = cs->self }, ack;
    uint8_t payload[TS_JOB_ID_MAX + TS_DP_NONCE_LEN];
    char reply[REPLY_MAX];
    struct ts_dp_hs hs = { .job = job, .rank = cs->self };
    size_t jl = strlen(job);
    ts_status st;

    memcpy(payload, job, jl);
    if (cs->keys) {
        h.flags = TS_HELLO_AUTH | TS_HELLO_CHAIN;
        if ((st = cs->keys(cs->keys_ctx, job, hs.key, err)) || (st = ts_dp_nonce(hs.nc, err))) {
            OPENSSL_cleanse(&hs, sizeof(hs));
            return st;
        }
        memcpy(payload + jl, hs.nc, TS_DP_NONCE_LEN);
    }
    if (!(st = ts_frame_send(c, &h, payload, jl + (cs->keys ? TS_DP_NONCE_LEN : 0), err)) &&
        !(st = await_ack(c, next, stop, w, &ack, reply, err)) && cs->keys)
        st = ts_dp_initiate_finish(c, &hs, &ack, reply, err);
    OPENSSL_cleanse(&hs, sizeof(hs));
    return st;
}

/* The link to shard next, opened (and its HELLO answered) if there is none. */
static ts_status link_to(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                         uint32_t next, const atomic_bool *stop, size_t *at,
                         struct ts_err *err)
{
    struct link_watch w = { cl, ts_cluster_epoch(cl) };
    struct ts_conn *c;
    ts_status st;

    for (*at = 0; *at < cs->n; (*at)++)
        if (cs->links[*at].shard == next && strcmp(cs->links[*at].job, job) == 0)
            return TS_OK;
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 4;
        struct chain_link *l = realloc(cs->links, cap * sizeof(*l));
        if (!l)
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        cs->links = l;
        cs->cap = cap;
    }
    if ((st = ts_cluster_connect(cl, next, NULL, LINK_CONNECT_MS, &c, err)))
        return ts_err_set(err, TS_EUNAVAIL, "replica shard %u: %s", next, err->msg);
    if ((st = hello(cs, c, job, next, stop, w, err))) {
        ts_tp_close(c);
        return st;
    }
    cs->links[cs->n] = (struct chain_link){ .shard = next, .c = c, .since = w.since,
                                            .maps = calloc(CHAIN_MAX_TENSORS, 1) };
    snprintf(cs->links[cs->n].job, sizeof(cs->links[cs->n].job), "%s", job);
    *at = cs->n++;
    ts_log(TS_DEBUG, "chain", "job %s: linked to shard %u over %s", job, next, ts_tp_name(c));
    return TS_OK;
}

/* Whether the next shard of link l maps this shard's values of tensor (the region fd): asked
 * once per link and tensor. A refusal (it cannot map, or a test corrupts its copies) is
 * remembered: whole images then. TS_EUNAVAIL if the link broke. */
static ts_status maps_values(struct chain_link *l, uint32_t tensor, int fd,
                             const atomic_bool *stop, struct link_watch w, bool *maps,
                             struct ts_err *err)
{
    struct ts_frame_hdr share = { .type = TS_FRAME_SHARE, .tensor = tensor,
                                  .flags = TS_SHARE_PARAMS };
    ts_status st;

    *maps = false;
    if (!l->maps || tensor >= CHAIN_MAX_TENSORS || !ts_tp_can_share(l->c))
        return TS_OK;
    if (!l->maps[tensor]) {
        if ((st = ts_tp_send_fd(l->c, fd, err)) ||
            (st = ts_frame_send(l->c, &share, NULL, 0, err)))
            return ts_err_set(err, TS_EUNAVAIL, "replica shard %u: %s", l->shard, err->msg);
        st = await_reply(l->c, l->shard, stop, w, err);
        if (st == TS_EUNAVAIL)
            return st;
        if (st)
            ts_log(TS_DEBUG, "chain", "tensor %u: whole images to shard %u: %s", tensor,
                   l->shard, err->msg);
        memset(err, 0, sizeof(*err));
        l->maps[tensor] = st ? -1 : 1;
    }
    *maps = l->maps[tensor] > 0;
    return TS_OK;
}

/* The link to next (link_to) and what a wait on it watches. */
static ts_status open_link(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                           uint32_t next, const atomic_bool *stop, size_t *at,
                           struct link_watch *w, struct ts_err *err)
{
    ts_status st;

    *w = (struct link_watch){ cl, 0 };
    if (!cl)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet");
    if ((st = link_to(cs, cl, job, next, stop, at, err)))
        return st;
    *w = (struct link_watch){ cl, cs->links[*at].since };
    return TS_OK;
}

/* Frame h with iov[0..n) on link `at` to next, and its ACK; a link that broke (TS_EUNAVAIL)
 * is out of step or gone: closed, so the next call opens a new one. */
static ts_status exchange(struct chain_links *cs, size_t at, uint32_t next,
                          struct ts_frame_hdr *h, const struct iovec *iov, size_t n,
                          const atomic_bool *stop, struct link_watch w, struct ts_err *err)
{
    ts_status st;

    if ((st = ts_frame_sendv(cs->links[at].c, h, iov, n, err)))
        st = ts_err_set(err, TS_EUNAVAIL, "replica shard %u: %s", next, err->msg);
    else
        st = await_reply(cs->links[at].c, next, stop, w, err);
    if (st == TS_EUNAVAIL)
        drop(cs, at);
    return st;
}

ts_status chain_send(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                     uint32_t next, uint32_t tensor, uint32_t partition, uint64_t version,
                     const struct chain_image *img, const atomic_bool *stop,
                     struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_IMAGE, .tensor = tensor, .partition = partition,
                              .step = version, .rank = cs->self };
    struct link_watch w;
    bool maps = false;
    size_t at = 0;
    ts_status st;

    if ((st = open_link(cs, cl, job, next, stop, &at, &w, err)))
        return st;
    if (img->values_fd >= 0 &&
        (st = maps_values(&cs->links[at], tensor, img->values_fd, stop, w, &maps, err))) {
        drop(cs, at);   /* maps_values fails only with the link broken */
        return st;
    }
    h.flags = maps ? TS_IMAGE_REGION : 0;
    return exchange(cs, at, next, &h, maps ? img->rest : img->whole,
                    maps ? img->nrest : img->nwhole, stop, w, err);
}

ts_status chain_send_frame(struct chain_links *cs, struct ts_cluster *cl, const char *job,
                           uint32_t next, struct ts_frame_hdr *h, const struct iovec *iov,
                           size_t n, const atomic_bool *stop, struct ts_err *err)
{
    struct link_watch w;
    size_t at = 0;
    ts_status st;

    if ((st = open_link(cs, cl, job, next, stop, &at, &w, err)))
        return st;
    return exchange(cs, at, next, h, iov, n, stop, w, err);
}

ts_status chain_image_room(struct chain_links *cs, size_t n, struct ts_err *err)
{
    void *b;

    if (n <= cs->image_cap)
        return TS_OK;
    if (!(b = realloc(cs->image, n)))
        return ts_err_set(err, TS_ENOMEM, "out of memory for a %zu-byte image", n);
    cs->image = b;
    cs->image_cap = n;
    return TS_OK;
}

void chain_links_close(struct chain_links *cs)
{
    while (cs->n)
        drop(cs, cs->n - 1);
    free(cs->links);
    free(cs->image);
    memset(cs, 0, sizeof(*cs));
}
