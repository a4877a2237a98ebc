/* fingerprint.c - see fingerprint.h. */
#include "tensor/fingerprint.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

void ts_fp_put_f32(EVP_MD_CTX *c, const float *v, uint64_t n)
{
    uint8_t buf[4096];
    size_t k = 0;

    for (uint64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        buf[k++] = (uint8_t)u;
        buf[k++] = (uint8_t)(u >> 8);
        buf[k++] = (uint8_t)(u >> 16);
        buf[k++] = (uint8_t)(u >> 24);
        if (k == sizeof(buf)) {
            EVP_DigestUpdate(c, buf, k);
            k = 0;
        }
    }
    EVP_DigestUpdate(c, buf, k);
}

void ts_fp_put_u64(EVP_MD_CTX *c, uint64_t v)
{
    uint8_t le[8];

    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)(v >> (8 * b));
    EVP_DigestUpdate(c, le, sizeof(le));
}

ts_status ts_params_sha256(const struct ts_fp_tensor *t, size_t n, char hex[65],
                           struct ts_err *err)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned int len = 0;

    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return ts_err_set(err, TS_EINTERNAL, "params_sha256: OpenSSL SHA-256 unavailable");
    }
    for (size_t i = 0; i < n; i++) {
        EVP_DigestUpdate(c, t[i].name, strlen(t[i].name) + 1);
        ts_fp_put_u64(c, t[i].numel);
        ts_fp_put_f32(c, t[i].data, t[i].numel);
    }
    EVP_DigestFinal_ex(c, md, &len);
    EVP_MD_CTX_free(c);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return TS_OK;
}
