/* certs.h - the certificates of a Tessera cluster: one CA, and one certificate per member.
 *
 * A certificate says what its holder may do by its SAN DNS names, "<role>.tessera", and which
 * member it is by one SAN URI, "tessera:<member>" (shard/3, worker/JOB, ...: "Member
 * identities" below); the services read both from the peer's certificate, so nothing but the
 * CA's signature decides who is what. Servers (master, shard, verify) also carry
 * "server.tessera", the one name every Tessera client checks a server against, so a client
 * needs no host names. ts_certs_init() makes a cluster's set with libcrypto (what `tessera
 * certs init` runs), ts_certs_issue() one more certificate from the same CA: EC P-256 keys,
 * SHA-256 signatures, X509 v3, unencrypted PKCS#8 keys, every file written to a temporary
 * name and renamed, ca.pem last, so a set with ca.pem is complete.
 * Ownership: ts_read_file() returns a buffer the caller frees with free(); nothing else here
 * allocates what it returns. Threads: no shared state; call from any thread. */
#ifndef TS_SEC_CERTS_H
#define TS_SEC_CERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/names.h"

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

struct ts_certs_opts {
    const char *hosts;   /* extra SAN entries for the server certificates: "10.0.0.5,node1"
                          * (IP literals become IP:, the rest DNS:); NULL: none. Names under
                          * ".tessera" are refused: they would grant roles */
    int days;            /* leaf validity, 1..3650 (the CA's); 0: 825 */
    bool force;          /* replace existing files */
    int shards;          /* ts_certs_init: shard certificates, 1..TS_CERTS_MAX_SHARDS; 0: 2 */
};
#define TS_CERTS_MAX_SHARDS 1024

/* ---- member identities (member.c) ----
 * The member a certificate was issued to, as its one SAN URI "tessera:" MEMBER:
 *     master                the master
 *     shard/NAME            one shard (`tessera certs init` and `tessera up`: shard/0, ...)
 *     worker/JOB            a worker of job JOB, and of no other job
 *     worker/ *             a worker of any job (client.pem: the CLI, `tessera train`)
 *     verify, verify/NAME   a tessera-verify service
 *     admin, admin/NAME     an operator
 * (worker/ * without the space.) NAME and JOB follow the job-id rule (util/names.h). The kind
 * decides the roles the certificate carries beside it. A certificate names at most one member;
 * one that names none is a role certificate of an older `tessera certs init` (shard.pem). */
#define TS_MEMBER_URI_PREFIX "tessera:"
#define TS_MEMBER_MAX (7 + TS_JOB_ID_MAX)   /* "worker/" and a job id */
#define TS_MEMBER_FORMS "master, shard/NAME, worker/JOB, worker/*, verify[/NAME] or " \
                        "admin[/NAME]"

/* TS_OK if member is one of the forms above; else TS_EINVAL naming "member" and the form it
 * misses. member may be NULL. */
ts_status ts_member_check(const char *member, struct ts_err *err) TS_MUST_CHECK;
/* The roles (TS_ROLE_* bits) a certificate naming member carries; 0 if member is not valid. */
unsigned ts_member_roles(const char *member);
/* If member is of kind ("shard"), its name: "3" of "shard/3", "*" of "worker/ *", "" of
 * "verify"; else NULL. The result points into member. */
const char *ts_member_name(const char *member, const char *kind);
/* The stem of member's files in a certificate directory: the kind, then '-' and the name
 * (shard/3: "shard-3", admin: "admin"), except worker/ *, whose files are client.pem and
 * client.key. buf of TS_MEMBER_MAX + 1 bytes always holds it. */
void ts_member_stem(const char *member, char *buf, size_t n);

/* ts_certs_init's set: the members it issues certificates to, in the order it writes them,
 * and their stems: master, shard/0 .. shard/(shards - 1), verify, worker/ * (client), admin,
 * then the CA ("ca"). Writes the stem of file pair i of the set made with o (NULL: the
 * defaults) into buf; false past the last. */
bool ts_certs_stem(const struct ts_certs_opts *o, size_t i, char *buf, size_t n);

/* Makes a CA and one certificate per member of the set (ts_certs_stem) in dir (created 0700
 * if missing; its parent must exist): ca.pem ca.key, master.pem master.key, shard-0.pem
 * shard-0.key ..., verify.pem verify.key, client.pem client.key (worker/ *: what the CLI, SDK
 * and Python use), admin.pem admin.key (roles admin and worker). Keys are written 0600,
 * certificates 0644. o NULL: the defaults.
 * Errors: TS_EINVAL naming the field ("hosts", "days", "shards") for a bad option, checked
 * before anything is written; TS_EEXIST naming the file when one of the set exists (ca.pem
 * first) and !force, with nothing changed; TS_EIO with the OS error for a file that cannot be
 * written; TS_EINTERNAL when libcrypto fails. Nothing half-written stays: each file goes to a
 * temporary name then is renamed, and on failure the temporary files are removed. */
ts_status ts_certs_init(const char *dir, const struct ts_certs_opts *o,
                        struct ts_err *err) TS_MUST_CHECK;

/* Issues one more certificate, for member, signed by the CA of dir (dir/ca.pem, dir/ca.key),
 * as dir/<stem>.pem and .key (ts_member_stem; the stem is written to stem, which may be
 * NULL), the same way ts_certs_init writes its own: o->hosts reach a server's certificate
 * (master, shard, verify), o->days is its validity, o->force replaces the two files; o->shards
 * is not used. Errors: TS_EINVAL naming "member", "hosts" or "days", or when ca.key is not
 * the key of ca.pem; TS_ENOTFOUND naming dir/ca.key (or ca.pem) when it is not there (a CA
 * whose key is kept elsewhere: issue there, then copy the two files); TS_EEXIST naming the
 * file when it exists and !force; TS_ECORRUPT for a CA file that is not PEM; TS_EIO, TS_EINTERNAL
 * as ts_certs_init. */
ts_status ts_certs_issue(const char *dir, const char *member, const struct ts_certs_opts *o,
                         char stem[TS_MEMBER_MAX + 1], struct ts_err *err) TS_MUST_CHECK;

/* What ts_certs_ensure wrote: bits of TS_ENSURED_*. */
#define TS_ENSURED_SET    1u   /* the CA and the set of ts_certs_init */
#define TS_ENSURED_MEMBER 2u   /* member's certificate */
#define TS_ENSURED_TOKEN  4u   /* admin.token */

/* ensure.c: a service's first start: makes what dir lacks and keeps every file it has. When
 * dir has no ca.pem and new_ca, the set of ts_certs_init (with o); then, when member is not
 * NULL and its certificate (ts_member_stem) is missing, ts_certs_issue; then dir/admin.token
 * when missing and new_ca (ts_token_init). *made (may be NULL) gets the TS_ENSURED_* bits of what
 * was written. The CA and the token are made only where new_ca says they live (the master's
 * host): elsewhere a missing ca.pem or admin.token is TS_ENOTFOUND naming the file and saying
 * to copy it from there. Errors otherwise as ts_certs_init and ts_certs_issue. */
ts_status ts_certs_ensure(const char *dir, const char *member, bool new_ca,
                          const struct ts_certs_opts *o, unsigned *made,
                          struct ts_err *err) TS_MUST_CHECK;

/* What a PEM certificate says: its roles (from its SAN DNS names), the member it names (from
 * its "tessera:" SAN URI; "" for none), its subject CN, its notAfter as Unix seconds, its SANs
 * as "DNS:a,IP:10.0.0.5" (truncated with "..." to fit). */
struct ts_cert_info {
    unsigned roles;
    char identity[TS_MEMBER_MAX + 1];
    char cn[128];
    int64_t not_after;
    char sans[512];
};
/* Reads the first certificate of pem (len bytes, borrowed; need not be NUL-terminated).
 * TS_ECORRUPT if pem is not a certificate, or if it has a "tessera:" SAN URI that is not a
 * member (ts_member_check) or more than one. */
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
