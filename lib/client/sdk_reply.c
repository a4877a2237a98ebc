/* sdk_reply.c - the SDK's conversation with one shard below a step: the HELLO that names the
 * job, and reading the reply to the oldest request on a connection. sdk_step.c and
 * sdk_region.c both use it; it uses neither. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <string.h>

#include "transport/frame.h"

ts_status sdk_read_reply(struct tessera *t, uint32_t s, uint16_t want, uint32_t tensor,
                         uint32_t part, void *dst, size_t cap, struct reply_info *ri,
                         struct ts_err *err)
{
    struct ts_frame_hdr h;
    char small[512];
    bool params = want == TS_FRAME_PARAMS;
    /* A reply is PARAMS of cap bytes or an ERROR of at most a message's length: small ones go
     * to a local buffer, so that an error always fits (a 10-float bias is 40 bytes). */
    bool direct = params && cap >= sizeof(small);
    char *buf = direct ? dst : small;
    ts_status st;

    st = ts_frame_recv(t->shards[s].conn, &h, buf, direct ? cap : sizeof(small), t->timeout_ms,
                       err);
    if (st) {
        sdk_note_broken(t, s, st);
        return st;
    }
    if (h.type == TS_FRAME_ERROR) {
        char text[256];
        size_t n = h.len < sizeof(text) - 1 ? h.len : sizeof(text) - 1;
        memcpy(text, buf, n);
        text[n] = '\0';
        return ts_err_set(err, ts_frame_error_status(&h), "shard %u: %s", t->shards[s].id,
                          text);
    }
    if (h.type != want || h.tensor != tensor || h.partition != part)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: reply type %u for tensor %u partition %u,"
                          " expected type %u for %u/%u", t->shards[s].id, h.type, h.tensor,
                          h.partition, want, tensor, part);
    if (params && h.len != cap)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: %" PRIu64 " bytes for tensor %u partition "
                          "%u, want %zu", t->shards[s].id, h.len, tensor, part, cap);
    if (params && !direct && cap)
        memcpy(dst, small, cap);
    if (ri) {
        ri->flags = h.flags;
        ri->staleness = h.rank;
        ri->step = h.step;
    }
    return TS_OK;
}

/* Names the job on every connection, once the shards know it (after a registration). */
ts_status sdk_hello(struct tessera *t, struct ts_err *err)
{
    ts_status st = TS_OK;

    t->hello_epoch = t->cl ? ts_cluster_epoch(t->cl) : 0;
    for (size_t i = 0; !st && i < t->nshards; i++) {
        /* An elastic worker names itself: a shard that sees it hang up tells the master. The
         * map epoch: a reduce job's shard refuses pulls under an older one (dataplane.h). */
        struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .rank = t->rank,
                                  .step = t->hello_epoch,
                                  .tensor = t->elastic ? ts_membership_id(t->ms) : 0,
                                  .flags = t->elastic ? TS_HELLO_ELASTIC : 0 };
        st = ts_frame_send(t->shards[i].conn, &h, t->job.id, strlen(t->job.id), err);
    }
    t->generation = 0;
    for (size_t i = 0; !st && i < t->nshards; i++) {
        struct reply_info ri = { 0 };
        st = sdk_read_reply(t, (uint32_t)i, TS_FRAME_ACK, 0, 0, NULL, 0, &ri, err);
        if (!st && ri.step > t->generation)
            t->generation = (uint32_t)ri.step;
    }
    t->hello_done = !st;
    t->hello_said |= !st;
    if (!st && !t->followed_set) {
        t->followed = t->generation;
        t->followed_set = true;
    }
    return st;
}
