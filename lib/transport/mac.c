/* mac.c - frame MACs; see mac.h. */
#include "transport/mac.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

struct ts_mac_dir {
    EVP_CIPHER_CTX *ctx;
    uint64_t seq;                   /* frames MAC'd in this direction so far */
    bool failed;                    /* libcrypto refused an update of the frame begun */
};

struct ts_frame_mac {
    struct ts_mac_dir tx, rx;
};

static bool dir_init(struct ts_mac_dir *d, const uint8_t key[TS_DP_KEY_LEN])
{
    d->ctx = EVP_CIPHER_CTX_new();
    return d->ctx && EVP_EncryptInit_ex(d->ctx, EVP_aes_256_gcm(), NULL, key, NULL) == 1;
}

ts_status ts_frame_mac_start(struct ts_conn *c, const uint8_t tx[TS_DP_KEY_LEN],
                             const uint8_t rx[TS_DP_KEY_LEN], struct ts_err *err)
{
    struct ts_frame_mac *m;

    if (c->mac)
        return ts_err_set(err, TS_ESTATE, "frame MACs: started twice on %s", c->peer);
    if (!(m = calloc(1, sizeof(*m))))
        return ts_err_set(err, TS_ENOMEM, "frame MACs: out of memory");
    c->mac = m;
    if (!dir_init(&m->tx, tx) || !dir_init(&m->rx, rx)) {
        ts_frame_mac_free(c);
        return ts_err_set(err, TS_EINTERNAL, "frame MACs: libcrypto has no AES-256-GCM");
    }
    return TS_OK;
}

void ts_frame_mac_free(struct ts_conn *c)
{
    if (!c->mac)
        return;
    EVP_CIPHER_CTX_free(c->mac->tx.ctx);
    EVP_CIPHER_CTX_free(c->mac->rx.ctx);
    free(c->mac);
    c->mac = NULL;
}

struct ts_mac_dir *ts__mac_tx(struct ts_conn *c)
{
    return c->mac ? &c->mac->tx : NULL;
}

struct ts_mac_dir *ts__mac_rx(struct ts_conn *c)
{
    return c->mac ? &c->mac->rx : NULL;
}

void ts__mac_begin(struct ts_mac_dir *d)
{
    uint8_t iv[12] = { 0 };

    for (int i = 0; i < 8; i++)
        iv[i] = (uint8_t)(d->seq >> (8 * i));
    d->seq++;
    d->failed = EVP_EncryptInit_ex(d->ctx, NULL, NULL, NULL, iv) != 1;
}

void ts__mac_add(struct ts_mac_dir *d, const void *p, size_t n)
{
    const uint8_t *b = p;
    int out;

    while (n && !d->failed) {   /* EVP takes int lengths */
        int k = n > (1u << 30) ? 1 << 30 : (int)n;
        d->failed = EVP_EncryptUpdate(d->ctx, NULL, &out, b, k) != 1;
        b += k;
        n -= (size_t)k;
    }
}

bool ts__mac_end(struct ts_mac_dir *d, uint8_t tag[TS_FRAME_MAC_LEN])
{
    uint8_t none[16];
    int out;

    return !d->failed && EVP_EncryptFinal_ex(d->ctx, none, &out) == 1 &&
           EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_GCM_GET_TAG, TS_FRAME_MAC_LEN, tag) == 1;
}
