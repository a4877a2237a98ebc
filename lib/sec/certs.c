/* certs.c - see certs.h.
 *
 * ts_certs_init() checks its options, then makes every key and certificate in memory, then
 * writes each file to a temporary name (mkstemp: 0600 from the start, so a key is never
 * readable by others, then fchmod to its mode), and only when the whole set is on disk renames
 * them into place, ca.pem last. A failure before the renames leaves the directory as it was.
 * ts_certs_issue() does the same for one member's pair, with the CA read from the directory.
 * A leaf's SANs come from the member it names alone (member.c: its kind decides its roles). */
#include "sec/certs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/bn.h>
#include <openssl/buffer.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "util/file.h"

#define CA_DAYS 3650
#define LEAF_DAYS 825
#define HOSTS_MAX 2048              /* the --hosts list, in characters */
/* Its SANs: an entry of L characters and its comma become at most L + 5 <= 3 (L + 1). */
#define HOSTS_SAN_MAX (3 * (HOSTS_MAX + 1) + 1)
#define PEM_MAX (1u << 20)          /* ts_read_file's limit */
#define DEFAULT_SHARDS 2            /* what `tessera up` starts */
#define SET_AFTER_SHARDS 3          /* verify, worker/ *, admin */

static const char *const role_names[] = { "master", "shard", "verify", "worker", "admin",
                                          "server" };
#define NROLES (sizeof(role_names) / sizeof(role_names[0]))

/* ---- roles ---- */

const char *ts_role_name(unsigned role)
{
    for (unsigned i = 0; i < NROLES; i++)
        if (role == 1u << i)
            return role_names[i];
    return NULL;
}

unsigned ts_role_of_name(const char *dns)
{
    static const char suffix[] = ".tessera";
    size_t n = dns ? strlen(dns) : 0, s = sizeof(suffix) - 1;

    if (n <= s || strcasecmp(dns + n - s, suffix) != 0)
        return 0;
    for (unsigned i = 0; i < NROLES; i++)
        if (strlen(role_names[i]) == n - s && strncasecmp(dns, role_names[i], n - s) == 0)
            return 1u << i;
    return 0;
}

void ts_roles_format(unsigned roles, char *buf, size_t len)
{
    size_t n = 0;

    if (!len)
        return;
    buf[0] = '\0';
    for (unsigned i = 0; i < NROLES && n < len; i++)
        if (roles & (1u << i))
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", role_names[i]);
    if (roles >> NROLES && n < len)
        n += (size_t)snprintf(buf + n, len - n, "%s0x%x", n ? "," : "",
                              roles & ~((1u << NROLES) - 1));
    if (!roles)
        snprintf(buf, len, "none");
}

/* ---- what ts_certs_init writes ---- */

static int set_shards(const struct ts_certs_opts *o)
{
    return o && o->shards ? o->shards : DEFAULT_SHARDS;
}

/* The member of leaf i of a set with `shards` shard certificates (certs.h, ts_certs_stem),
 * written into buf when it has a name; NULL past the last leaf. */
static const char *set_member(int shards, size_t i, char *buf, size_t n)
{
    static const char *const after[SET_AFTER_SHARDS] = { "verify", "worker/*", "admin" };

    if (i == 0)
        return "master";
    if (i <= (size_t)shards) {
        snprintf(buf, n, "shard/%zu", i - 1);
        return buf;
    }
    i -= (size_t)shards + 1;
    return i < SET_AFTER_SHARDS ? after[i] : NULL;
}

bool ts_certs_stem(const struct ts_certs_opts *o, size_t i, char *buf, size_t n)
{
    char m[TS_MEMBER_MAX + 1];
    const char *member = set_member(set_shards(o), i, m, sizeof(m));

    if (member)
        ts_member_stem(member, buf, n);
    else if (i == 1 + (size_t)set_shards(o) + SET_AFTER_SHARDS)
        snprintf(buf, n, "ca");
    return member || i == 1 + (size_t)set_shards(o) + SET_AFTER_SHARDS;
}

/* An extension in openssl's config syntax: { NID_key_usage, "critical,digitalSignature" }. */
struct ext {
    int nid;
    const char *v;
};

struct file {
    char path[4096];
    mode_t mode;
    char *data;                 /* the PEM, malloc'd */
    size_t len;
};

/* The first libcrypto error, as text, then the queue cleared. */
static ts_status crypto_err(struct ts_err *err, const char *what)
{
    char buf[160] = "no detail";
    unsigned long e = ERR_get_error();

    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return ts_err_set(err, TS_EINTERNAL, "certs: %s: libcrypto: %s", what, buf);
}

/* ---- options ---- */

static bool is_dns_name(const char *h)
{
    size_t n = strlen(h), label = 0;
    const char *last = h;

    if (n == 0 || n > 253 || h[0] == '.' || h[n - 1] == '.')
        return false;
    for (const char *p = h; *p; p++) {
        bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9');
        if (*p == '.') {
            if (label == 0 || p[-1] == '-')
                return false;
            label = 0;
            last = p + 1;
            continue;
        }
        if (!alnum && *p != '-')
            return false;
        if ((label == 0 && *p == '-') || ++label > 63)
            return false;
    }
    /* An all-digit last label is a mistyped address ("10.0.0"), not a name. */
    return h[n - 1] != '-' && strspn(last, "0123456789") != strlen(last);
}

/* One host of the list into san as ",IP:..." or ",DNS:...". */
static ts_status add_host(const char *h, char *san, size_t cap, struct ts_err *err)
{
    unsigned char ip[16];
    size_t n = strlen(san);

    if (!*h)
        return ts_err_set(err, TS_EINVAL, "hosts: an empty entry (give a comma list such as "
                          "10.0.0.5,node1)");
    if (strcasecmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0)
        return TS_OK;       /* every server certificate has them */
    if (inet_pton(AF_INET, h, ip) == 1 || inet_pton(AF_INET6, h, ip) == 1) {
        snprintf(san + n, cap - n, ",IP:%s", h);
        return TS_OK;
    }
    if (!is_dns_name(h))
        return ts_err_set(err, TS_EINVAL, "hosts: '%.64s' is neither an IP address nor a DNS "
                          "name (letters, digits, '-' and '.')", h);
    if (ts_role_of_name(h) || strcasecmp(h, "tessera") == 0 ||
        (strlen(h) > 8 && strcasecmp(h + strlen(h) - 8, ".tessera") == 0))
        return ts_err_set(err, TS_EINVAL, "hosts: '%.64s': names under .tessera are the roles' "
                          "and would grant one; give the host's own name", h);
    snprintf(san + n, cap - n, ",DNS:%s", h);
    return TS_OK;
}

/* The server certificates' extra SANs ("" or ",IP:10.0.0.5,DNS:node1") from o->hosts. */
static ts_status parse_hosts(const char *hosts, char *san, size_t cap, struct ts_err *err)
{
    char item[HOSTS_MAX + 1];
    const char *p = hosts;

    san[0] = '\0';
    if (!hosts)
        return TS_OK;
    if (strlen(hosts) > HOSTS_MAX)
        return ts_err_set(err, TS_EINVAL, "hosts: longer than %d characters", HOSTS_MAX);
    for (;;) {
        size_t n = strcspn(p, ",");
        ts_status st;

        memcpy(item, p, n);
        item[n] = '\0';
        if ((st = add_host(item, san, cap, err)))
            return st;
        if (!p[n])
            return TS_OK;
        p += n + 1;
    }
}

/* ---- making keys and certificates ---- */

static bool set_serial(X509 *x)
{
    unsigned char b[16];
    BIGNUM *bn;
    bool ok;

    if (RAND_bytes(b, sizeof(b)) != 1)
        return false;
    b[0] = (b[0] & 0x7f) | 0x40;     /* positive, and all 16 bytes in DER */
    bn = BN_bin2bn(b, sizeof(b), NULL);
    ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    return ok;
}

static bool add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
    X509_EXTENSION *e = X509V3_EXT_nconf_nid(NULL, ctx, nid, value);
    bool ok = e && X509_add_ext(x, e, -1);

    X509_EXTENSION_free(e);
    return ok;
}

/* A certificate for key named cn, signed by ca_key as ca (ca NULL: self-signed by key), with
 * these extensions ({ nid, value } pairs in openssl's config syntax, ending with nid 0). */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *ca, EVP_PKEY *ca_key, long days,
                       const struct ext *ext)
{
    X509 *x = X509_new();
    X509V3_CTX ctx;

    if (!x || !X509_set_version(x, X509_VERSION_3) || !set_serial(x) ||
        !X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_UTF8,
                                    (const unsigned char *)cn, -1, -1, 0) ||
        !X509_set_issuer_name(x, X509_get_subject_name(ca ? ca : x)) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||      /* clock skew */
        !X509_time_adj_ex(X509_getm_notAfter(x), (int)days, 0, NULL) ||
        !X509_set_pubkey(x, key))
        goto out_free_x;
    X509V3_set_ctx(&ctx, ca ? ca : x, x, NULL, NULL, 0);
    for (; ext->nid; ext++)
        if (!add_ext(x, &ctx, ext->nid, ext->v))
            goto out_free_x;
    if (!X509_sign(x, ca ? ca_key : key, EVP_sha256()))
        goto out_free_x;
    return x;
out_free_x:
    X509_free(x);
    return NULL;
}

/* The PEM of a certificate (key NULL) or of a key (PKCS#8, unencrypted) into f. */
static bool to_pem(X509 *x, EVP_PKEY *key, struct file *f)
{
    BIO *b = BIO_new(BIO_s_mem());
    BUF_MEM *m;
    bool ok = b && (key ? PEM_write_bio_PKCS8PrivateKey(b, key, NULL, NULL, 0, NULL, NULL)
                        : PEM_write_bio_X509(b, x));

    if (ok) {
        BIO_get_mem_ptr(b, &m);
        ok = (f->data = malloc(m->length)) != NULL;
        if (ok) {
            memcpy(f->data, m->data, m->length);
            f->len = m->length;
        }
    }
    BIO_free(b);
    return ok;
}

/* One key and its certificate into f[0] (.pem) and f[1] (.key). */
static ts_status make_pair(const char *cn, X509 *ca, EVP_PKEY *ca_key, long days,
                           const struct ext *ext, struct file *f,
                           X509 **cert_out, EVP_PKEY **key_out, struct ts_err *err)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = key ? make_cert(cn, key, ca, ca_key, days, ext) : NULL;

    if (!x || !to_pem(x, NULL, &f[0]) || !to_pem(NULL, key, &f[1])) {
        X509_free(x);
        EVP_PKEY_free(key);
        return crypto_err(err, cn);
    }
    if (cert_out) {
        *cert_out = x;
        *key_out = key;
    } else {
        X509_free(x);
        EVP_PKEY_free(key);
    }
    return TS_OK;
}

/* The SANs of member's certificate into out: a DNS name per role, its identity, and on a
 * server's, localhost and the hosts. */
static void leaf_sans(const char *member, const char *hosts_san, char *out, size_t n)
{
    unsigned roles = ts_member_roles(member);
    size_t k = 0;

    for (unsigned bit = 1; bit <= TS_ROLE_SERVER && k < n; bit <<= 1)
        if (roles & bit)
            k += (size_t)snprintf(out + k, n - k, "DNS:%s.tessera,", ts_role_name(bit));
    if (k < n)
        snprintf(out + k, n - k, "URI:" TS_MEMBER_URI_PREFIX "%s%s%s", member,
                 roles & TS_ROLE_SERVER ? ",DNS:localhost,IP:127.0.0.1" : "",
                 roles & TS_ROLE_SERVER ? hosts_san : "");
}

/* member's key and certificate (signed by ca) into f[0] (.pem) and f[1] (.key). Its CN is the
 * member too, cut to X.509's 64 characters: nothing reads it but people. */
static ts_status make_leaf(const char *member, X509 *ca, EVP_PKEY *ca_key, long days,
                           const char *hosts_san, struct file *f, struct ts_err *err)
{
    char sans[HOSTS_SAN_MAX + 256], cn[65];
    bool server = ts_member_roles(member) & TS_ROLE_SERVER;
    const struct ext ext[] = {
        { NID_basic_constraints, "critical,CA:FALSE" },
        { NID_key_usage, "critical,digitalSignature" },
        { NID_subject_key_identifier, "hash" },
        { NID_authority_key_identifier, "keyid:always" },
        { NID_ext_key_usage, server ? "serverAuth,clientAuth" : "clientAuth" },
        { NID_subject_alt_name, sans }, { 0, NULL } };

    leaf_sans(member, hosts_san, sans, sizeof(sans));
    snprintf(cn, sizeof(cn), "%s", member);
    return make_pair(cn, ca, ca_key, days, ext, f, NULL, NULL, err);
}

/* Every key and certificate of the set, into f in ts_certs_stem's order (nleaves, then the
 * CA). */
static ts_status make_all(struct file *f, size_t nleaves, int shards, long days,
                          const char *hosts_san, struct ts_err *err)
{
    unsigned char r[4];
    char ca_cn[32], m[TS_MEMBER_MAX + 1];
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    ts_status st;
    const struct ext ca_ext[] = {
        { NID_basic_constraints, "critical,CA:TRUE" },
        { NID_key_usage, "critical,keyCertSign,cRLSign" },
        { NID_subject_key_identifier, "hash" }, { 0, NULL } };

    if (RAND_bytes(r, sizeof(r)) != 1)
        return crypto_err(err, "random");
    snprintf(ca_cn, sizeof(ca_cn), "Tessera CA %02x%02x%02x%02x", r[0], r[1], r[2], r[3]);
    if ((st = make_pair(ca_cn, NULL, NULL, CA_DAYS, ca_ext, &f[2 * nleaves], &ca, &ca_key,
                        err)))
        return st;
    for (size_t i = 0; i < nleaves && !st; i++)
        st = make_leaf(set_member(shards, i, m, sizeof(m)), ca, ca_key, days, hosts_san,
                       &f[2 * i], err);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    return st;
}

/* ---- writing ---- */

/* dir exists as a directory afterwards (made 0700 if it was missing). */
static ts_status make_dir(const char *dir, struct ts_err *err)
{
    struct stat st;

    if (mkdir(dir, 0700) == 0)
        return TS_OK;
    if (errno != EEXIST)
        return ts_err_set(err, TS_EIO, "mkdir %s: %s%s", dir, strerror(errno),
                          errno == ENOENT ? " (make its parent first)" : "");
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return ts_err_set(err, TS_EIO, "%s exists and is not a directory", dir);
    return TS_OK;
}

/* The set's files, all or none (lib/util/file.h). */
static ts_status write_all(const struct file *f, size_t nfiles, struct ts_err *err)
{
    struct ts_file_out *out = calloc(nfiles, sizeof(*out));
    ts_status st;

    if (!out)
        return ts_err_set(err, TS_ENOMEM, "certs: out of memory");
    for (size_t i = 0; i < nfiles; i++)
        out[i] = (struct ts_file_out){ .path = f[i].path, .body = f[i].data,
                                       .body_len = f[i].len, .mode = f[i].mode };
    st = ts_files_replace(out, nfiles, err);
    free(out);
    return st;
}

/* The options both ts_certs_init and ts_certs_issue take: dir, days and hosts (into
 * hosts_san). */
static ts_status check_opts(const char *dir, const struct ts_certs_opts *o, char *hosts_san,
                            size_t cap, struct ts_err *err)
{
    if (!dir || !*dir || strlen(dir) > 3000)
        return ts_err_set(err, TS_EINVAL, "dir: %s", dir && *dir ? "too long" : "required");
    if (o->days < 0 || o->days > CA_DAYS)
        return ts_err_set(err, TS_EINVAL, "days: %d, want 1..%d (the CA's validity), or 0 for "
                          "%d", o->days, CA_DAYS, LEAF_DAYS);
    return parse_hosts(o->hosts, hosts_san, cap, err);
}

/* Unless force, TS_EEXIST naming the first of the n files that exists, looking from f[first]
 * on (the one a complete set always has). */
static ts_status check_absent(const struct file *f, size_t n, size_t first, bool force,
                              struct ts_err *err)
{
    for (size_t k = 0; !force && k < n; k++) {
        const char *path = f[(k + first) % n].path;
        if (access(path, F_OK) == 0)
            return ts_err_set(err, TS_EEXIST, "%s exists", path);
        if (errno != ENOENT)
            return ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
    }
    return TS_OK;
}

static void set_path(struct file *f, const char *dir, const char *stem, bool key)
{
    snprintf(f->path, sizeof(f->path), "%s/%s.%s", dir, stem, key ? "key" : "pem");
    f->mode = key ? 0600 : 0644;
}

static void free_files(struct file *f, size_t n)
{
    for (size_t i = 0; f && i < n; i++) {
        if (f[i].data)
            OPENSSL_cleanse(f[i].data, f[i].len);   /* keys among them */
        free(f[i].data);
    }
    free(f);
}

ts_status ts_certs_init(const char *dir, const struct ts_certs_opts *o, struct ts_err *err)
{
    static const struct ts_certs_opts defaults = { 0 };
    char hosts_san[HOSTS_SAN_MAX], stem[TS_MEMBER_MAX + 1];
    size_t nleaves, nfiles;
    struct file *f;
    ts_status st;

    o = o ? o : &defaults;
    if ((st = check_opts(dir, o, hosts_san, sizeof(hosts_san), err)))
        return st;
    if (o->shards < 0 || o->shards > TS_CERTS_MAX_SHARDS)
        return ts_err_set(err, TS_EINVAL, "shards: %d, want 1..%d, or 0 for %d", o->shards,
                          TS_CERTS_MAX_SHARDS, DEFAULT_SHARDS);
    nleaves = 1 + (size_t)set_shards(o) + SET_AFTER_SHARDS;
    nfiles = 2 * (nleaves + 1);
    if (!(f = calloc(nfiles, sizeof(*f))))
        return ts_err_set(err, TS_ENOMEM, "certs: out of memory");
    for (size_t i = 0; i < nfiles; i++) {
        (void)ts_certs_stem(o, i / 2, stem, sizeof(stem));   /* nfiles counts its pairs */
        set_path(&f[i], dir, stem, i % 2);
    }
    /* ca.pem first: it is the one a complete set always has. */
    if (!(st = make_dir(dir, err)) &&
        !(st = check_absent(f, nfiles, 2 * nleaves, o->force, err)) &&
        !(st = make_all(f, nleaves, set_shards(o), o->days ? o->days : LEAF_DAYS, hosts_san,
                        err)))
        st = write_all(f, nfiles, err);
    free_files(f, nfiles);
    return st;
}

/* The PEM file at path, for issuing: TS_ENOTFOUND when it is not there, saying where the CA
 * lives. */
static ts_status read_ca_file(const char *path, char **pem, size_t *len, struct ts_err *err)
{
    if (access(path, F_OK) < 0 && errno == ENOENT)
        return ts_err_set(err, TS_ENOTFOUND, "%s: not there: issuing needs the cluster's CA and "
                          "its key (`tessera certs init` wrote them; run `tessera certs issue` "
                          "where ca.key is kept, then copy the new .pem and .key to the "
                          "member)", path);
    return ts_read_file(path, pem, len, err);
}

/* The CA of dir: its certificate and its key, which must match; the caller frees both. */
static ts_status load_ca(const char *dir, X509 **ca, EVP_PKEY **key, struct ts_err *err)
{
    char cpath[3100], kpath[3100], *cpem = NULL, *kpem = NULL;
    size_t clen = 0, klen = 0;
    BIO *cb = NULL, *kb = NULL;
    ts_status st;

    *ca = NULL;
    *key = NULL;
    snprintf(cpath, sizeof(cpath), "%s/ca.pem", dir);
    snprintf(kpath, sizeof(kpath), "%s/ca.key", dir);
    if ((st = read_ca_file(cpath, &cpem, &clen, err)) ||
        (st = read_ca_file(kpath, &kpem, &klen, err)))
        goto out_free_pems;
    if ((cb = BIO_new_mem_buf(cpem, (int)clen)))
        *ca = PEM_read_bio_X509(cb, NULL, NULL, NULL);
    if ((kb = BIO_new_mem_buf(kpem, (int)klen)))
        *key = PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL);
    if (!*ca)
        st = ts_err_set(err, TS_ECORRUPT, "%s: not a PEM certificate", cpath);
    else if (!*key)
        st = ts_err_set(err, TS_ECORRUPT, "%s: not an unencrypted PEM private key", kpath);
    else if (X509_check_ca(*ca) < 1)
        st = ts_err_set(err, TS_EINVAL, "%s: not a CA's certificate", cpath);
    else if (X509_check_private_key(*ca, *key) != 1)
        st = ts_err_set(err, TS_EINVAL, "%s: not the key of %s", kpath, cpath);
    ERR_clear_error();
    BIO_free(cb);
    BIO_free(kb);
    if (st) {
        X509_free(*ca);
        EVP_PKEY_free(*key);
    }
out_free_pems:
    if (kpem)
        OPENSSL_cleanse(kpem, klen);
    free(cpem);
    free(kpem);
    return st;
}

ts_status ts_certs_issue(const char *dir, const char *member, const struct ts_certs_opts *o,
                         char stem[TS_MEMBER_MAX + 1], struct ts_err *err)
{
    static const struct ts_certs_opts defaults = { 0 };
    char hosts_san[HOSTS_SAN_MAX], s[TS_MEMBER_MAX + 1];
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    struct file *f;
    ts_status st;

    o = o ? o : &defaults;
    if ((st = ts_member_check(member, err)) ||
        (st = check_opts(dir, o, hosts_san, sizeof(hosts_san), err)))
        return st;
    if (!(f = calloc(2, sizeof(*f))))
        return ts_err_set(err, TS_ENOMEM, "certs: out of memory");
    ts_member_stem(member, s, sizeof(s));
    set_path(&f[0], dir, s, false);
    set_path(&f[1], dir, s, true);
    if (!(st = load_ca(dir, &ca, &ca_key, err))) {
        if (!(st = check_absent(f, 2, 0, o->force, err)) &&
            !(st = make_leaf(member, ca, ca_key, o->days ? o->days : LEAF_DAYS, hosts_san, f,
                             err)))
            st = write_all(f, 2, err);
        X509_free(ca);
        EVP_PKEY_free(ca_key);
    }
    free_files(f, 2);
    if (!st && stem)
        memcpy(stem, s, sizeof(s));
    return st;
}

/* ---- reading ---- */

/* Appends "kind:v" to the comma list sans, or "..." once it no longer fits. */
static void add_san(struct ts_cert_info *out, bool *full, const char *kind, const char *v)
{
    size_t n = strlen(out->sans), cap = sizeof(out->sans);
    int w;

    if (*full)
        return;
    w = snprintf(out->sans + n, cap - n, "%s%s:%s", n ? "," : "", kind, v);
    if (w < 0 || (size_t)w >= cap - n) {
        *full = true;
        memcpy(out->sans + (n + 4 <= cap ? n : cap - 4), "...", 4);
    }
}

/* A "tessera:" URI names the member (certs.h): one, and a valid one. */
static ts_status read_identity(const char *uri, struct ts_cert_info *out, struct ts_err *err)
{
    const char *member = uri + strlen(TS_MEMBER_URI_PREFIX);
    struct ts_err why = { 0 };

    if (out->identity[0])
        return ts_err_set(err, TS_ECORRUPT, "certificate: names two members (%s and %s); a "
                          "certificate is one member's", out->identity, member);
    if (ts_member_check(member, &why))
        return ts_err_set(err, TS_ECORRUPT, "certificate: its SAN URI %.100s: %s", uri,
                          why.msg);
    snprintf(out->identity, sizeof(out->identity), "%s", member);
    return TS_OK;
}

static ts_status read_sans(X509 *x, struct ts_cert_info *out, struct ts_err *err)
{
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    bool full = false;
    ts_status st = TS_OK;

    for (int i = 0; i < sk_GENERAL_NAME_num(gens) && !st; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        char v[256];

        if (g->type == GEN_DNS || g->type == GEN_URI || g->type == GEN_EMAIL) {
            const ASN1_IA5STRING *s = g->d.ia5;
            /* A name with a NUL inside ("master.tessera\0x") must not pass for a role. */
            if (s->length <= 0 || memchr(s->data, '\0', (size_t)s->length))
                continue;
            snprintf(v, sizeof(v), "%.*s", s->length, (const char *)s->data);
            if (g->type == GEN_DNS)
                out->roles |= ts_role_of_name(v);
            if (g->type == GEN_URI && !strncmp(v, TS_MEMBER_URI_PREFIX,
                                               strlen(TS_MEMBER_URI_PREFIX)))
                st = read_identity(v, out, err);
            add_san(out, &full, g->type == GEN_DNS ? "DNS" : g->type == GEN_URI ? "URI"
                                                                                 : "email", v);
        } else if (g->type == GEN_IPADD && (g->d.ip->length == 4 || g->d.ip->length == 16)) {
            inet_ntop(g->d.ip->length == 4 ? AF_INET : AF_INET6, g->d.ip->data, v, sizeof(v));
            add_san(out, &full, "IP", v);
        }
    }
    GENERAL_NAMES_free(gens);
    return st;
}

static void read_cn(X509 *x, struct ts_cert_info *out)
{
    const X509_NAME *name = X509_get_subject_name(x);
    int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
    unsigned char *utf8 = NULL;
    int n;

    out->cn[0] = '\0';
    if (i < 0)
        return;
    n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i)));
    if (n >= 0)
        snprintf(out->cn, sizeof(out->cn), "%.*s", n, (const char *)utf8);
    OPENSSL_free(utf8);
}

ts_status ts_cert_info(const char *pem, size_t len, struct ts_cert_info *out,
                       struct ts_err *err)
{
    struct ts_cert_info r = { 0 };
    struct tm tm;
    BIO *b;
    X509 *x;

    if (!pem || len == 0 || len > PEM_MAX)
        return ts_err_set(err, TS_ECORRUPT, "certificate: %s", len ? "larger than 1 MiB"
                                                                    : "empty");
    if (!(b = BIO_new_mem_buf(pem, (int)len)))
        return crypto_err(err, "certificate");
    x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!x) {
        ERR_clear_error();
        return ts_err_set(err, TS_ECORRUPT, "not a PEM certificate (want a \"BEGIN "
                          "CERTIFICATE\" block)");
    }
    read_cn(x, &r);
    if (read_sans(x, &r, err)) {
        X509_free(x);
        return TS_ECORRUPT;
    }
    if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1) {
        X509_free(x);
        ERR_clear_error();
        return ts_err_set(err, TS_ECORRUPT, "certificate: its notAfter cannot be read");
    }
    r.not_after = (int64_t)timegm(&tm);
    X509_free(x);
    *out = r;
    return TS_OK;
}

ts_status ts_read_file(const char *path, char **out, size_t *len, struct ts_err *err)
{
    size_t n = 0, cap = 0;
    char *buf = NULL, *nb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ts_status st;
    ssize_t r;

    if (fd < 0)
        return ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
    for (;;) {
        if (cap - n < 2) {          /* room for a byte and the NUL */
            if (cap > PEM_MAX) {
                st = ts_err_set(err, TS_EINVAL, "%s: larger than 1 MiB, not a PEM file", path);
                goto out_free_buf;
            }
            if (!(nb = realloc(buf, cap ? 2 * cap : 4096))) {
                st = ts_err_set(err, TS_ENOMEM, "%s: out of memory", path);
                goto out_free_buf;
            }
            buf = nb;
            cap = cap ? 2 * cap : 4096;
        }
        r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
            goto out_free_buf;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n > PEM_MAX) {
        free(buf);
        return ts_err_set(err, TS_EINVAL, "%s: larger than 1 MiB, not a PEM file", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TS_OK;
out_free_buf:
    free(buf);
    close(fd);
    return st;
}
