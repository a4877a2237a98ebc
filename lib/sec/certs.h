/* certs.h - the certificates of a Tessera cluster: one CA, one certificate per role.
 *
 * A certificate says what its holder may do by its SAN DNS names, "<role>.tessera"; the
 * services read the roles from the peer's certificate, so nothing but the CA's signature
 * decides who is what. Servers (master, shard, verify) also carry "server.tessera", the one
 * name every Tessera client checks a server against, so a client needs no host names.
 * ts_certs_init() makes the whole set with libcrypto (what `tessera certs init` runs):
 * EC P-256 keys, SHA-256 signatures, X509 v3, unencrypted PKCS#8 keys, every file written to
 * a temporary name and renamed, ca.pem last, so a set with ca.pem is complete.
 * Ownership: ts_read_file() returns a buffer the caller frees with free(); nothing else here
 * allocates what it returns. Threads: no shared state; call from any thread. */
#ifndef TS_SEC_CERTS_H
#define TS_SEC_CERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Roles a certificate grants, as bits; a certificate carries its roles as SAN DNS names
 * "<role>.tessera" (master.tessera, shard.tessera, verify.tessera, worker.tessera,
 * admin.tessera). Servers' certificates (master, shard, verify) also carry
 * "server.tessera": the name every Tessera client checks the server against. */
enum ts_role {
    TS_ROLE_MASTER = 1u << 0,
    TS_ROLE_SHARD = 1u << 1,
    TS_ROLE_VERIFY = 1u << 2,
    TS_ROLE_WORKER = 1u << 3,
    TS_ROLE_ADMIN = 1u << 4,
    TS_ROLE_SERVER = 1u << 5,
};
#define TS_TLS_SERVER_NAME "server.tessera"

/* "master", ..., "server" for one bit; NULL otherwise (no bit, several, or an unknown one). */
const char *ts_role_name(unsigned role);
/* The role bits named by one SAN DNS name ("shard.tessera" -> TS_ROLE_SHARD, any case), 0 for
 * any other name (and for NULL). */
unsigned ts_role_of_name(const char *dns);
/* Writes "shard,worker" style names of the bits into buf (a comma list in bit order, "none"
 * for 0, unknown bits as one hex number at the end), truncated to fit len. */
void ts_roles_format(unsigned roles, char *buf, size_t len);

/* The stems of the files ts_certs_init() writes, in the order it writes them (ca last):
 * "master", "shard", "verify", "client", "admin", "ca", then NULL; each is STEM.pem and
 * STEM.key. Static storage. */
extern const char *const ts_certs_stems[];

struct ts_certs_opts {
    const char *hosts;   /* extra SAN entries for the server certificates: "10.0.0.5,node1"
                          * (IP literals become IP:, the rest DNS:); NULL: none. Names under
                          * ".tessera" are refused: they would grant roles */
    int days;            /* leaf validity, 1..3650 (the CA's); 0: 825 */
    bool force;          /* replace existing files */
};

/* Makes a CA and one certificate per role in dir (created 0700 if missing; its parent must
 * exist): ca.pem ca.key, master.pem master.key, shard.pem shard.key, verify.pem verify.key,
 * client.pem client.key (role worker: what the CLI, SDK and Python use), admin.pem admin.key
 * (roles admin and worker). Keys are written 0600, certificates 0644. o NULL: the defaults.
 * Errors: TS_EINVAL naming the field ("hosts", "days") for a bad host or days, checked before
 * anything is written; TS_EEXIST naming the file when one of the twelve exists (ca.pem first)
 * and !force, with nothing changed; TS_EIO with the OS error for a file that cannot be
 * written; TS_EINTERNAL when libcrypto fails. Nothing half-written stays: each file goes to a
 * temporary name then is renamed, and on failure the temporary files are removed. */
ts_status ts_certs_init(const char *dir, const struct ts_certs_opts *o,
                        struct ts_err *err) TS_MUST_CHECK;

/* What a PEM certificate says: its roles (from its SAN DNS names), its subject CN, its
 * notAfter as Unix seconds, its SANs as "DNS:a,IP:10.0.0.5" (truncated with "..." to fit). */
struct ts_cert_info {
    unsigned roles;
    char cn[128];
    int64_t not_after;
    char sans[512];
};
/* Reads the first certificate of pem (len bytes, borrowed; need not be NUL-terminated).
 * TS_ECORRUPT if pem is not a certificate. */
ts_status ts_cert_info(const char *pem, size_t len, struct ts_cert_info *out,
                       struct ts_err *err) TS_MUST_CHECK;

/* keys.c: TS_OK if key_pem (NUL-terminated, unencrypted PEM) is the private key of cert_pem's
 * certificate; TS_EINVAL if it is another's, TS_ECORRUPT if either does not parse. */
ts_status ts_cert_key_match(const char *cert_pem, const char *key_pem,
                            struct ts_err *err) TS_MUST_CHECK;

/* keys.c: writes a fresh admin token to path (created 0600, never replaced): 64 hex digits
 * of libcrypto's random bytes and a newline, what --token-file reads. TS_EEXIST if path
 * exists, TS_EIO naming it if it cannot be written. */
ts_status ts_token_init(const char *path, struct ts_err *err) TS_MUST_CHECK;

/* Reads a whole file (for PEMs, so at most 1 MiB): *out malloc'd, NUL-terminated, the caller
 * frees; *len is the size without the NUL. TS_EIO naming path; TS_EINVAL naming path when
 * the file is larger than 1 MiB. */
ts_status ts_read_file(const char *path, char **out, size_t *len, struct ts_err *err) TS_MUST_CHECK;

#endif
