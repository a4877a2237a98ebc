/* fingerprint.h - params_sha256: the fingerprint of a model's parameters.
 *
 * SHA-256 (OpenSSL EVP) over the tensors in the order given (Tessera's trainers give their
 * registration order, the model's own), each as: its name's bytes, one NUL byte, its element
 * count as 8 bytes little-endian, then its float32 values as 4 bytes little-endian each.
 * Two runs print the same fingerprint exactly when every parameter has the same bits.
 * Threads: reentrant. */
#ifndef TS_TENSOR_FINGERPRINT_H
#define TS_TENSOR_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct ts_fp_tensor {
    const char *name;
    const float *data;
    uint64_t numel;
};

/* The pieces of such a hash, for the fingerprints built the same way (lib/table's): n float32
 * values as 4 bytes little-endian each, and v as 8 bytes little-endian, into an OpenSSL
 * digest (EVP_MD_CTX, whose struct this is). */
struct evp_md_ctx_st;
void ts_fp_put_f32(struct evp_md_ctx_st *c, const float *v, uint64_t n);
void ts_fp_put_u64(struct evp_md_ctx_st *c, uint64_t v);

/* hex: 65 bytes, filled with 64 lowercase hex digits and a NUL. */
ts_status ts_params_sha256(const struct ts_fp_tensor *t, size_t n, char hex[65],
                           struct ts_err *err) TS_MUST_CHECK;

#endif
