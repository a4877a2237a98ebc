/* dp_auth.c - the shard's side of the data-plane handshake (transport/auth.h;
 * docs/security.md): the HELLO that begins it, the AUTH that ends it, and which frames a
 * connection may send before and after. dataplane.c calls these from a connection's thread. */
#include "dp_internal.h"

#include <openssl/crypto.h>
#include <string.h>

#include "util/log.h"
#include "util/names.h"

/* A HELLO that begins the handshake (auth.h): its nonce is the last TS_DP_NONCE_LEN bytes
 * (taken off *len); the key is the worker's the HELLO names (its `tensor` field), or the
 * job's chain key for a chain link, from the job's key (dp_access.c). The proof goes in the
 * ACK (ack, its payload in out); the AUTH frame finishes it (on_auth). */
ts_status dp_hello_auth(struct dp_conn *dc, const struct ts_frame_hdr *h, const char *buf,
                        size_t *len, struct ts_frame_hdr *ack, uint8_t out[TS_DP_ACK_LEN],
                        struct ts_err *err)
{
    struct dataplane *dp = dc->dp;
    bool chain = (h->flags & TS_HELLO_CHAIN) != 0;
    ts_status st;

    if (!(h->flags & TS_HELLO_AUTH)) {
        if (dp->require_auth && !dc->c->authed)
            return ts_err_set(err, TS_EAUTH, "hello: this shard's data plane needs the "
                              "handshake (TS_HELLO_AUTH, with the worker's key from the "
                              "master; docs/security.md)");
        return TS_OK;
    }
    if (dc->c->authed)
        return ts_err_set(err, TS_ESTATE, "hello: the handshake is done on this connection");
    if (*len <= TS_DP_NONCE_LEN || *len - TS_DP_NONCE_LEN > TS_JOB_ID_MAX)
        return ts_err_set(err, TS_EINVAL, "hello: a handshake needs the job id and a %d-byte "
                          "nonce", TS_DP_NONCE_LEN);
    *len -= TS_DP_NONCE_LEN;
    memcpy(dc->hs_job, buf, *len);
    dc->hs_job[*len] = '\0';
    if (memchr(dc->hs_job, '\0', *len) || ts_job_id_check("hello: job id", dc->hs_job, err))
        return ts_err_set(err, TS_EINVAL, "hello: the job id is not a job id");
    if ((st = dp_access_key(dp->access, dc->hs_job, chain, chain ? 0 : h->tensor, dc->hs.key,
                            err)))
        return st;
    memcpy(dc->hs.nc, buf + *len, TS_DP_NONCE_LEN);
    dc->hs.job = dc->hs_job;
    dc->hs.rank = h->rank;
    dc->hs.member = chain ? 0 : h->tensor;
    dc->link = chain;
    dc->hs_mac = ts_dp_mac_wanted(dc->c);
    dc->hs_pending = true;
    ack->flags = TS_ACK_AUTH | (dc->hs_mac ? TS_ACK_MAC : 0);
    return ts_dp_accept_hello(&dc->hs, out, err);
}

/* The AUTH frame: the handshake's end; no reply (a wrong proof closes the connection). */
ts_status dp_on_auth(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                         struct ts_err *err)
{
    ts_status st;

    if (!dc->hs_pending)
        return ts_err_set(err, TS_EAUTH, "auth: no handshake begun on this connection");
    dc->hs_pending = false;
    st = ts_dp_accept_auth(dc->c, &dc->hs, buf, h->len, dc->hs_mac, err);
    OPENSSL_cleanse(dc->hs.key, sizeof(dc->hs.key));
    if (!st)
        ts_log(TS_DEBUG, "dataplane", "%s: authenticated for job %s%s%s", dc->c->peer,
               dc->hs_job, dc->link ? " (a chain link)" : "", dc->hs_mac ? ", frames MAC'd" :
               "");
    return st;
}

void dataplane_set_access(struct dataplane *dp, dp_access_fetch_fn fn, void *ctx)
{
    dp_access_set_fetch(dp->access, fn, ctx);
}

/* Whether a frame of type may come on dc now: with the handshake required, only HELLO and
 * AUTH before it is done; then a chain link (keyed with the chain key) sends images, their
 * regions and copies of table rows' pushes, a worker its requests. */
ts_status dp_allowed(struct dp_conn *dc, uint16_t type, struct ts_err *err)
{
    bool link = type == TS_FRAME_IMAGE || type == TS_FRAME_SHARE || type == TS_FRAME_HELLO ||
                type == TS_FRAME_ROWS_COPY;
    bool worker = type != TS_FRAME_IMAGE && type != TS_FRAME_AUTH &&
                  type != TS_FRAME_ROWS_COPY;

    if (!dc->dp->require_auth || type == TS_FRAME_HELLO ||
        (type == TS_FRAME_AUTH && dc->hs_pending))
        return TS_OK;
    if (!dc->c->authed)
        return ts_err_set(err, TS_EAUTH, "frame type %u before the data-plane handshake: "
                          "refused, nothing applied (docs/security.md)", type);
    if (dc->link ? !link : !worker)
        return ts_err_set(err, TS_EAUTH, "frame type %u is not for this connection (%s): "
                          "refused, nothing applied", type, dc->link ? "a chain link"
                                                                      : "a worker's");
    return TS_OK;
}
