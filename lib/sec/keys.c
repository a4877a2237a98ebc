/* keys.c - does a private key belong to a certificate; a fresh admin token; see certs.h. */
#include "sec/certs.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ts_status ts_cert_key_match(const char *cert_pem, const char *key_pem, struct ts_err *err)
{
    BIO *cb = BIO_new_mem_buf(cert_pem, (int)strlen(cert_pem));
    BIO *kb = BIO_new_mem_buf(key_pem, (int)strlen(key_pem));
    X509 *cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
    EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    ts_status st = TS_OK;

    if (!cert)
        st = ts_err_set(err, TS_ECORRUPT, "not a PEM certificate");
    else if (!key)
        st = ts_err_set(err, TS_ECORRUPT, "--tls-key: not an unencrypted PEM private key");
    else if (X509_check_private_key(cert, key) != 1)
        st = ts_err_set(err, TS_EINVAL, "--tls-key: not the private key of this certificate");
    ERR_clear_error();
    EVP_PKEY_free(key);
    X509_free(cert);
    BIO_free(kb);
    BIO_free(cb);
    return st;
}

ts_status ts_token_init(const char *path, struct ts_err *err)
{
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 2];
    int fd;
    ts_status st = TS_OK;

    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return ts_err_set(err, TS_EINTERNAL, "admin token: no random bytes from libcrypto");
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * sizeof(raw)] = '\n';
    hex[2 * sizeof(raw) + 1] = '\0';
    OPENSSL_cleanse(raw, sizeof(raw));
    if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        st = errno == EEXIST ? TS_EEXIST : TS_EIO;
        ts_err_set(err, st, "admin token %s: %s", path, strerror(errno));
    } else {
        if (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) < 0)
            st = ts_err_set(err, TS_EIO, "admin token %s: %s", path, strerror(errno));
        close(fd);
        if (st)
            unlink(path);
    }
    OPENSSL_cleanse(hex, sizeof(hex));
    return st;
}
