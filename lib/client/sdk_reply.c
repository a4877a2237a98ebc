/* sdk_reply.c - the SDK's conversation with one shard below a step: the HELLO that names the
 * job (with the handshake), and reading the reply to the oldest request on a connection.
 * Above sdk_conn.c, below everything that sends: it calls only sdk_conn.c and sdk_wait.c. A
 * HELLO on connections bound to an older worker id connects anew instead (sdk_failover.c,
 * sdk_hello_or_remap), since making connections again is recovery's. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <string.h>

#include <openssl/crypto.h>

#include "transport/auth.h"
#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

ts_status sdk_read_reply(struct tessera *t, uint32_t s, uint16_t want, uint32_t tensor,
                         uint32_t part, void *dst, size_t cap, struct reply_info *ri,
                         struct ts_err *err)
{
    struct ts_frame_hdr h;
    char small[512];
    bool params = want == TS_FRAME_PARAMS || want == TS_FRAME_ROWS;
    /* A reply is PARAMS of cap bytes or an ERROR of at most a message's length: small ones go
     * to a local buffer, so that an error always fits (a 10-float bias is 40 bytes). */
    bool direct = params && cap >= sizeof(small);
    char *buf = direct ? dst : small;
    ts_status st;

    st = sdk_recv(t, s, &h, buf, direct ? cap : sizeof(small), tensor, part, err);
    if (st) {
        sdk_note_broken(t, s, st);
        return st;
    }
    /* A shard answered: it vouches for this worker at its next heartbeat (may_rest). */
    atomic_store_explicit(&t->last_reply_ms, ts_now_ms(), memory_order_relaxed);
    if (h.type == TS_FRAME_ERROR) {
        char text[256];
        size_t n = h.len < sizeof(text) - 1 ? h.len : sizeof(text) - 1;
        memcpy(text, buf, n);
        text[n] = '\0';
        return ts_err_set(err, ts_frame_error_status(&h), "shard %u: %s", t->conns.shards[s].id,
                          text);
    }
    if (h.type != want || h.tensor != tensor || h.partition != part)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: reply type %u for tensor %u partition %u,"
                          " expected type %u for %u/%u", t->conns.shards[s].id, h.type, h.tensor,
                          h.partition, want, tensor, part);
    if (params && (ri && ri->upto ? h.len > cap : h.len != cap))
        return ts_err_set(err, TS_ECORRUPT, "shard %u: %" PRIu64 " bytes for tensor %u partition "
                          "%u, want %zu", t->conns.shards[s].id, h.len, tensor, part, cap);
    if (params && !direct && h.len)
        memcpy(dst, small, h.len);
    if (ri) {
        ri->flags = h.flags;
        ri->staleness = h.rank;
        ri->step = h.step;
        ri->len = h.len;
        ri->encoding = h.encoding;
        ri->data_len = !params && h.len <= sizeof(ri->data) ? (size_t)h.len : 0;
        memcpy(ri->data, small, ri->data_len);
    }
    return TS_OK;
}

/* One HELLO on every connection (sdk_hello). */
static ts_status hello_round(struct tessera *t, struct ts_err *err)
{
    struct ts_dp_hs hs[MAX_SHARDS];
    size_t jl = strlen(t->job.id);
    uint8_t hello[TS_JOB_ID_MAX + TS_DP_NONCE_LEN], key[TS_DP_KEY_LEN];
    bool keyed = t->ms && ts_membership_data_key(t->ms, key);
    uint32_t member = t->ms ? ts_membership_id(t->ms) : 0;
    ts_status st = TS_OK;

    t->hello.epoch = t->cl ? ts_cluster_epoch(t->cl) : 0;
    memcpy(hello, t->job.id, jl);
    for (size_t i = 0; !st && i < t->conns.nshards; i++) {
        /* The worker names itself: a shard takes from the connection only the pushes of the
         * slots this worker owns (docs/security.md), and one that sees an elastic worker hang
         * up tells the master. The map epoch: a reduce job's shard refuses pulls under an
         * older one (dataplane.h). */
        struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .rank = t->rank,
                                  .step = t->hello.epoch, .tensor = member,
                                  .flags = t->elastic ? TS_HELLO_ELASTIC : 0 };
        bool auth = keyed && !t->conns.shards[i].conn->authed;
        if (auth) {
            memcpy(hs[i].key, key, TS_DP_KEY_LEN);
            hs[i].job = t->job.id;
            hs[i].rank = t->rank;
            hs[i].member = member;
            h.flags |= TS_HELLO_AUTH;
            if ((st = ts_dp_nonce(hs[i].nc, err)))
                break;
            memcpy(hello + jl, hs[i].nc, TS_DP_NONCE_LEN);
        }
        st = ts_frame_send(t->conns.shards[i].conn, &h, hello,
                           jl + (auth ? TS_DP_NONCE_LEN : 0), err);
    }
    t->hello.generation = 0;
    for (size_t i = 0; !st && i < t->conns.nshards; i++) {
        struct reply_info ri = { 0 };
        bool auth = keyed && !t->conns.shards[i].conn->authed;
        st = sdk_read_reply(t, (uint32_t)i, TS_FRAME_ACK, 0, 0, NULL, 0, &ri, err);
        if (!st && auth) {
            struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .flags = ri.flags,
                                        .len = ri.data_len };
            if ((st = ts_dp_initiate_finish(t->conns.shards[i].conn, &hs[i], &ack, ri.data, err)))
                ts_err_prefix(err, "shard %u", t->conns.shards[i].id);
        }
        if (!st && ri.step > t->hello.generation)
            t->hello.generation = (uint32_t)ri.step;
    }
    OPENSSL_cleanse(hs, sizeof(hs));
    OPENSSL_cleanse(key, sizeof(key));
    t->hello.done = !st;
    t->hello.said |= !st;
    if (!st && !t->rec.followed_set) {
        t->rec.followed = t->hello.generation;
        t->rec.followed_set = true;
    }
    return st;
}

bool sdk_any_authed(const struct tessera *t)
{
    for (size_t i = 0; i < t->conns.nshards; i++)
        if (t->conns.shards[i].conn->authed)
            return true;
    return false;
}

/* Names the job on every connection, once the shards know it (after a registration). A
 * connection not yet authenticated does the handshake on the way, when the master gave this
 * worker its key (mutual TLS; transport/auth.h). */
ts_status sdk_hello(struct tessera *t, struct ts_err *err)
{
    uint32_t member = t->ms ? ts_membership_id(t->ms) : 0;
    ts_status st;

    st = hello_round(t, err);
    /* A shard cuts a connection that stays silent before its HELLO for long (docs/
     * security.md, "Bounded before trust"): a first HELLO after a long registration may find
     * its connections gone. Nothing was said on them yet: connect again, once. */
    if (st == TS_EUNAVAIL && !t->hello.said && t->cl) {
        ts_log(TS_INFO, "sdk", "the first HELLO found a shard connection closed (%s): "
               "connecting again", err->msg);
        ts_err_clear(err);
        sdk_close_shards(t);
        if (!(st = sdk_connect_shards(t, sdk_want_transport(t), t->conns.delay_ms, err)))
            st = hello_round(t, err);
    }
    if (!st)
        t->hello.member = member;
    return st;
}
