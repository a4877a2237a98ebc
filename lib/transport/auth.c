/* auth.c - the data plane's handshake; see auth.h. */
#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/hook.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/names.h"

/* HMAC-SHA256(key, label || Nc || Ns || rank (LE) || member (LE) || job). */
static void tag(const struct ts_dp_hs *hs, const char *label, uint8_t out[TS_DP_TAG_LEN])
{
    uint8_t msg[8 + 2 * TS_DP_NONCE_LEN + 8 + TS_JOB_ID_MAX];
    size_t n = strlen(label), j = strlen(hs->job);
    unsigned len = 0;

    if (j > TS_JOB_ID_MAX)
        j = TS_JOB_ID_MAX;
    memcpy(msg, label, n);
    memcpy(msg + n, hs->nc, TS_DP_NONCE_LEN);
    memcpy(msg + n + TS_DP_NONCE_LEN, hs->ns, TS_DP_NONCE_LEN);
    n += 2 * TS_DP_NONCE_LEN;
    for (int i = 0; i < 4; i++)
        msg[n++] = (uint8_t)(hs->rank >> (8 * i));
    for (int i = 0; i < 4; i++)
        msg[n++] = (uint8_t)(hs->member >> (8 * i));
    memcpy(msg + n, hs->job, j);
    HMAC(EVP_sha256(), hs->key, TS_DP_KEY_LEN, msg, n + j, out, &len);
    OPENSSL_cleanse(msg, sizeof(msg));
}

void ts_dp_proof(const struct ts_dp_hs *hs, bool initiator, uint8_t out[TS_DP_TAG_LEN])
{
    tag(hs, initiator ? "I" : "A", out);
}

/* HMAC-SHA256(key, label with its NUL || data): no label is a prefix of another's. */
static void derive(const uint8_t key[TS_DP_KEY_LEN], const char *label, const void *data,
                   size_t len, uint8_t out[TS_DP_KEY_LEN])
{
    uint8_t msg[32 + TS_JOB_ID_MAX];
    size_t n = strlen(label) + 1;
    unsigned got = 0;

    memcpy(msg, label, n);
    if (len)   /* NULL data with no bytes: memcpy may not get it */
        memcpy(msg + n, data, len);
    HMAC(EVP_sha256(), key, TS_DP_KEY_LEN, msg, n + len, out, &got);
    OPENSSL_cleanse(msg, sizeof(msg));
}

void ts_dp_job_key(const uint8_t cluster[TS_DP_KEY_LEN], const char *job,
                   uint8_t out[TS_DP_KEY_LEN])
{
    size_t j = strlen(job);

    derive(cluster, "tessera job key", job, j > TS_JOB_ID_MAX ? TS_JOB_ID_MAX : j, out);
}

void ts_dp_member_key(const uint8_t job_key[TS_DP_KEY_LEN], uint32_t member,
                      uint8_t out[TS_DP_KEY_LEN])
{
    uint8_t le[4] = { (uint8_t)member, (uint8_t)(member >> 8), (uint8_t)(member >> 16),
                      (uint8_t)(member >> 24) };

    derive(job_key, "tessera member key", le, sizeof(le), out);
}

void ts_dp_chain_key(const uint8_t job_key[TS_DP_KEY_LEN], uint8_t out[TS_DP_KEY_LEN])
{
    derive(job_key, "tessera chain key", NULL, 0, out);
}

ts_status ts_dp_nonce(uint8_t out[TS_DP_NONCE_LEN], struct ts_err *err)
{
    if (RAND_bytes(out, TS_DP_NONCE_LEN) != 1)
        return ts_err_set(err, TS_EINTERNAL, "data-plane handshake: no random bytes from "
                          "libcrypto");
    return TS_OK;
}

bool ts_dp_mac_wanted(const struct ts_conn *c)
{
    static atomic_bool warned;
    if (ts_knob_is(TS_KNOB_DATA_MAC, "always"))
        return true;
    /* Turning MACs off between hosts weakens what mutual TLS promises: only a build with test
     * hooks (util/hook.h) does it; any other says so once and keeps them. */
    if (ts_knob_is(TS_KNOB_DATA_MAC, "never")) {
        if (TS_TEST_HOOKS)
            return false;
        if (!atomic_exchange(&warned, true))
            ts_log(TS_WARN, "dataplane", "TESSERA_DATA_MAC=never is ignored: only a build with "
                   "test hooks turns MACs off; frames between hosts stay MAC'd");
    }
    return !c->local_in;
}

/* Keys c's MACs: the initiator sends under "i>a", the acceptor under "a>i". */
static ts_status key_conn(struct ts_conn *c, const struct ts_dp_hs *hs, bool initiator,
                          bool mac, struct ts_err *err)
{
    uint8_t i2a[TS_DP_TAG_LEN], a2i[TS_DP_TAG_LEN];
    ts_status st = TS_OK;

    if (mac) {
        tag(hs, "i>a", i2a);
        tag(hs, "a>i", a2i);
        st = initiator ? ts_frame_mac_start(c, i2a, a2i, err)
                       : ts_frame_mac_start(c, a2i, i2a, err);
        OPENSSL_cleanse(i2a, sizeof(i2a));
        OPENSSL_cleanse(a2i, sizeof(a2i));
    }
    if (!st)
        c->authed = true;
    return st;
}

ts_status ts_dp_accept_hello(struct ts_dp_hs *hs, uint8_t ack[TS_DP_ACK_LEN],
                             struct ts_err *err)
{
    ts_status st;

    if ((st = ts_dp_nonce(hs->ns, err)))
        return st;
    memcpy(ack, hs->ns, TS_DP_NONCE_LEN);
    tag(hs, "A", ack + TS_DP_NONCE_LEN);
    return TS_OK;
}

ts_status ts_dp_accept_auth(struct ts_conn *c, const struct ts_dp_hs *hs, const void *payload,
                            size_t len, bool mac, struct ts_err *err)
{
    uint8_t want[TS_DP_TAG_LEN];
    bool ok;

    tag(hs, "I", want);
    ok = len == TS_DP_TAG_LEN && CRYPTO_memcmp(want, payload, TS_DP_TAG_LEN) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    if (!ok)
        return ts_err_set(err, TS_EAUTH, "data-plane handshake: the peer's proof for job '%s' "
                          "as member %u is wrong (it does not hold that member's key, or it "
                          "replayed an old handshake)", hs->job, hs->member);
    return key_conn(c, hs, false, mac, err);
}

ts_status ts_dp_initiate_finish(struct ts_conn *c, struct ts_dp_hs *hs,
                                const struct ts_frame_hdr *ack, const void *payload,
                                struct ts_err *err)
{
    struct ts_frame_hdr auth = { .type = TS_FRAME_AUTH, .rank = hs->rank };
    uint8_t want[TS_DP_TAG_LEN], mine[TS_DP_TAG_LEN];
    ts_status st;
    bool ok;

    if (!(ack->flags & TS_ACK_AUTH) || ack->len != TS_DP_ACK_LEN)
        return ts_err_set(err, TS_EAUTH, "data-plane handshake: the shard at %s did not prove "
                          "it holds job '%s''s key (is it registered with this cluster's "
                          "master over mutual TLS?)", c->peer, hs->job);
    memcpy(hs->ns, payload, TS_DP_NONCE_LEN);
    tag(hs, "A", want);
    ok = CRYPTO_memcmp(want, (const uint8_t *)payload + TS_DP_NONCE_LEN, TS_DP_TAG_LEN) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    if (!ok)
        return ts_err_set(err, TS_EAUTH, "data-plane handshake: the shard at %s gave a wrong "
                          "proof for job '%s' (not this cluster's shard?)", c->peer, hs->job);
    tag(hs, "I", mine);
    st = ts_frame_send(c, &auth, mine, sizeof(mine), err);
    OPENSSL_cleanse(mine, sizeof(mine));
    return st ? st : key_conn(c, hs, true, (ack->flags & TS_ACK_MAC) != 0, err);
}
