/* test_certs.c - lib/sec: the certificate set ts_certs_init() writes and the member
 * certificates ts_certs_issue() adds, checked with libcrypto's own verifier (chain, purpose,
 * key match); the member each names; and their refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "sec/certs.h"

/* The default set's leaves; the first four are servers'. */
static const char *const leaf_stems[] = { "master", "shard-0", "shard-1", "verify", "client",
                                          "admin" };
#define NLEAF (sizeof(leaf_stems) / sizeof(leaf_stems[0]))
#define NSERVERS 4

static void path_of(char *out, size_t n, const char *dir, const char *stem, const char *ext)
{
    snprintf(out, n, "%s/%s.%s", dir, stem, ext);
}

static void mk_tmp(char *dir, size_t n)
{
    snprintf(dir, n, "%s/tessera-certs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void rm_pair(const char *dir, const char *stem)
{
    char p[512];

    path_of(p, sizeof(p), dir, stem, "pem");
    unlink(p);
    path_of(p, sizeof(p), dir, stem, "key");
    unlink(p);
}

/* Removes the default set (and stray temporary files would fail rmdir: the test sees them). */
static void rm_set(const char *dir)
{
    char stem[TS_MEMBER_MAX + 1];

    for (size_t i = 0; ts_certs_stem(NULL, i, stem, sizeof(stem)); i++)
        rm_pair(dir, stem);
    assert_int_equal(rmdir(dir), 0);
}

static X509 *load_cert(const char *dir, const char *stem)
{
    char p[512];
    FILE *f;
    X509 *x;

    path_of(p, sizeof(p), dir, stem, "pem");
    assert_non_null(f = fopen(p, "r"));
    x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    return x;
}

static EVP_PKEY *load_key(const char *dir, const char *stem)
{
    char p[512];
    FILE *f;
    EVP_PKEY *k;

    path_of(p, sizeof(p), dir, stem, "key");
    assert_non_null(f = fopen(p, "r"));
    k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(k);
    return k;
}

/* X509_V_OK when stem.pem verifies against ca.pem for purpose, else the verifier's error. */
static int verify(const char *dir, const char *stem, int purpose)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509 *ca = load_cert(dir, "ca"), *x = load_cert(dir, stem);
    int rc;

    assert_true(store && ctx);
    assert_int_equal(X509_STORE_add_cert(store, ca), 1);
    assert_int_equal(X509_STORE_CTX_init(ctx, store, x, NULL), 1);
    assert_int_equal(X509_STORE_CTX_set_purpose(ctx, purpose), 1);
    rc = X509_verify_cert(ctx) == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
    if (rc == X509_V_OK)
        assert_int_equal(X509_STORE_CTX_get_error(ctx), X509_V_OK);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    X509_free(ca);
    X509_free(x);
    return rc;
}

static struct ts_cert_info info_of(const char *dir, const char *stem)
{
    struct ts_cert_info ci;
    struct ts_err e = { 0 };
    char p[512], *pem;
    size_t len;

    path_of(p, sizeof(p), dir, stem, "pem");
    assert_int_equal(ts_read_file(p, &pem, &len, &e), TS_OK);
    assert_int_equal(strlen(pem), len);
    assert_int_equal(ts_cert_info(pem, len, &ci, &e), TS_OK);
    free(pem);
    return ci;
}

static mode_t mode_of(const char *dir, const char *stem, const char *ext)
{
    char p[512];
    struct stat st;

    path_of(p, sizeof(p), dir, stem, ext);
    assert_int_equal(stat(p, &st), 0);
    return st.st_mode & 07777;
}

static void init_ok(const char *dir, const char *hosts, int days, bool force)
{
    struct ts_certs_opts o = { .hosts = hosts, .days = days, .force = force };
    struct ts_err e = { 0 };

    if (ts_certs_init(dir, &o, &e) != TS_OK)
        fail_msg("ts_certs_init: %s", e.msg);
}

static void every_leaf_verifies_for_its_purpose(void **state)
{
    char top[256], dir[300];
    struct ts_cert_info ca;

    mk_tmp(top, sizeof(top));
    snprintf(dir, sizeof(dir), "%s/tls", top);   /* made by init */
    init_ok(dir, "10.1.2.3,node7", 0, false);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);

    for (size_t i = 0; i < NLEAF; i++) {
        bool server = i < NSERVERS;
        int purpose = server ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT;
        if (verify(dir, leaf_stems[i], purpose) != X509_V_OK)
            fail_msg("%s.pem: %s", leaf_stems[i],
                     X509_verify_cert_error_string(verify(dir, leaf_stems[i], purpose)));
        /* The servers' certificates are also their client certificates. */
        assert_int_equal(verify(dir, leaf_stems[i], X509_PURPOSE_SSL_CLIENT), X509_V_OK);
    }
    assert_int_equal(verify(dir, "client", X509_PURPOSE_SSL_SERVER), X509_V_ERR_INVALID_PURPOSE);
    assert_int_equal(verify(dir, "admin", X509_PURPOSE_SSL_SERVER), X509_V_ERR_INVALID_PURPOSE);

    ca = info_of(dir, "ca");
    assert_int_equal(ca.roles, 0);
    assert_int_equal(strncmp(ca.cn, "Tessera CA ", 11), 0);
    assert_int_equal(strlen(ca.cn), 11 + 8);
    assert_int_equal(strspn(ca.cn + 11, "0123456789abcdef"), 8);
    rm_set(dir);
    assert_int_equal(rmdir(top), 0);
}

static void roles_names_modes_and_keys(void **state)
{
    static const struct {
        const char *stem, *member;
        unsigned roles;
    } want[] = {
        { "master", "master", TS_ROLE_MASTER | TS_ROLE_SERVER },
        { "shard-0", "shard/0", TS_ROLE_SHARD | TS_ROLE_SERVER },
        { "shard-1", "shard/1", TS_ROLE_SHARD | TS_ROLE_SERVER },
        { "verify", "verify", TS_ROLE_VERIFY | TS_ROLE_SERVER },
        { "client", "worker/*", TS_ROLE_WORKER },
        { "admin", "admin", TS_ROLE_ADMIN | TS_ROLE_WORKER },
    };
    int64_t now = (int64_t)time(NULL);
    char dir[256];

    mk_tmp(dir, sizeof(dir));       /* exists already: init writes into it */
    init_ok(dir, "10.1.2.3,node7", 30, false);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct ts_cert_info ci = info_of(dir, want[i].stem);
        X509 *x = load_cert(dir, want[i].stem), *other = load_cert(dir, "ca");
        EVP_PKEY *k = load_key(dir, want[i].stem);
        const ASN1_INTEGER *serial = X509_get0_serialNumber(x);
        bool server = ci.roles & TS_ROLE_SERVER;

        char uri[128];

        assert_int_equal(ci.roles, want[i].roles);
        assert_string_equal(ci.identity, want[i].member);
        assert_string_equal(ci.cn, want[i].member);
        snprintf(uri, sizeof(uri), "URI:tessera:%s", want[i].member);
        assert_non_null(strstr(ci.sans, uri));
        assert_true(ci.not_after >= now + 30 * 86400 - 5 && ci.not_after <= now + 30 * 86400 + 5);
        assert_int_equal(mode_of(dir, want[i].stem, "key"), 0600);
        assert_int_equal(mode_of(dir, want[i].stem, "pem"), 0644);
        assert_int_equal(X509_check_private_key(x, k), 1);
        assert_int_equal(X509_check_private_key(other, k), 0);
        assert_true(EVP_PKEY_is_a(k, "EC"));
        assert_int_equal(EVP_PKEY_get_bits(k), 256);
        assert_int_equal(X509_get_signature_nid(x), NID_ecdsa_with_SHA256);
        assert_int_equal(X509_get_version(x), X509_VERSION_3);
        assert_int_equal(ASN1_STRING_type(serial), V_ASN1_INTEGER);   /* positive */
        assert_int_equal(ASN1_STRING_length(serial), 16);
        /* --hosts reach the servers' certificates only */
        assert_int_equal(strstr(ci.sans, "IP:10.1.2.3") != NULL, server);
        assert_int_equal(strstr(ci.sans, "DNS:node7") != NULL, server);
        assert_int_equal(strstr(ci.sans, "DNS:localhost,IP:127.0.0.1") != NULL, server);
        assert_int_equal(strstr(ci.sans, "DNS:" TS_TLS_SERVER_NAME) != NULL, server);
        X509_free(x);
        X509_free(other);
        EVP_PKEY_free(k);
        ERR_clear_error();   /* X509_check_private_key's mismatch */
    }
    assert_int_equal(mode_of(dir, "ca", "key"), 0600);
    assert_int_equal(mode_of(dir, "ca", "pem"), 0644);
    assert_true(info_of(dir, "ca").not_after > now + 3649 * 86400);
    rm_set(dir);
}

static char *slurp(const char *dir, const char *stem, const char *ext, size_t *len)
{
    struct ts_err e = { 0 };
    char p[512], *b;

    path_of(p, sizeof(p), dir, stem, ext);
    assert_int_equal(ts_read_file(p, &b, len, &e), TS_OK);
    return b;
}

static void second_init_needs_force(void **state)
{
    struct ts_certs_opts o = { 0 };
    struct ts_err e = { 0 };
    char dir[256], *before[14], *after, stem[TS_MEMBER_MAX + 1];
    size_t blen[14], alen;
    int n = 0;

    mk_tmp(dir, sizeof(dir));
    init_ok(dir, NULL, 0, false);
    for (size_t i = 0; ts_certs_stem(NULL, i, stem, sizeof(stem)); i++) {
        assert_true(n < 14);
        before[n] = slurp(dir, stem, "pem", &blen[n]);
        n++;
        before[n] = slurp(dir, stem, "key", &blen[n]);
        n++;
    }
    assert_int_equal(n, 14);   /* master, shard-0, shard-1, verify, client, admin, ca */
    assert_int_equal(ts_certs_init(dir, &o, &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "/ca.pem exists"));
    for (size_t i = 0, k = 0; ts_certs_stem(NULL, i, stem, sizeof(stem)); i++, k += 2) {
        after = slurp(dir, stem, "pem", &alen);
        assert_int_equal(alen, blen[k]);
        assert_memory_equal(after, before[k], alen);
        free(after);
        after = slurp(dir, stem, "key", &alen);
        assert_int_equal(alen, blen[k + 1]);
        assert_memory_equal(after, before[k + 1], alen);
        free(after);
    }
    /* One leftover file of a set is enough to refuse. */
    char p[512];
    path_of(p, sizeof(p), dir, "ca", "pem");
    assert_int_equal(unlink(p), 0);
    ts_err_clear(&e);
    assert_int_equal(ts_certs_init(dir, &o, &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "/ca.key exists"));

    init_ok(dir, NULL, 0, true);
    for (size_t i = 0, k = 0; ts_certs_stem(NULL, i, stem, sizeof(stem)); i++, k += 2) {
        after = slurp(dir, stem, "key", &alen);
        assert_false(alen == blen[k + 1] && memcmp(after, before[k + 1], alen) == 0);
        free(after);
    }
    assert_int_equal(verify(dir, "master", X509_PURPOSE_SSL_SERVER), X509_V_OK);
    for (int i = 0; i < n; i++)
        free(before[i]);
    rm_set(dir);
}

static void bad_options_write_nothing(void **state)
{
    static const struct {
        const char *hosts;
        int days, shards;
        const char *field;
    } bad[] = {
        { "a b", 0, 0, "hosts" },           { "node1,,node2", 0, 0, "hosts" },
        { "", 0, 0, "hosts" },              { "node1,", 0, 0, "hosts" },
        { "admin.tessera", 0, 0, "hosts" }, { "x.TESSERA", 0, 0, "hosts" },
        { "10.0.0", 0, 0, "hosts" },        { "-node", 0, 0, "hosts" },
        { "a_b", 0, 0, "hosts" },           { "ok", -1, 0, "days" },
        { NULL, 3651, 0, "days" },          { NULL, 0, -1, "shards" },
        { NULL, 0, TS_CERTS_MAX_SHARDS + 1, "shards" },
    };
    char top[256], dir[300];

    mk_tmp(top, sizeof(top));
    snprintf(dir, sizeof(dir), "%s/tls", top);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_certs_opts o = { .hosts = bad[i].hosts, .days = bad[i].days,
                                   .shards = bad[i].shards };
        struct ts_err e = { 0 };
        struct stat st;
        assert_int_equal(ts_certs_init(dir, &o, &e), TS_EINVAL);
        if (strncmp(e.msg, bad[i].field, strlen(bad[i].field)) != 0)
            fail_msg("case %zu: '%s', want it to name %s", i, e.msg, bad[i].field);
        assert_int_equal(stat(dir, &st), -1);
    }
    struct ts_err e = { 0 };
    assert_int_equal(ts_certs_init("", NULL, &e), TS_EINVAL);
    assert_int_equal(rmdir(top), 0);
}

static void ipv6_and_duplicate_hosts(void **state)
{
    char dir[256];
    struct ts_cert_info ci;

    mk_tmp(dir, sizeof(dir));
    init_ok(dir, "fd00::5,localhost,127.0.0.1,Node-1.example.com", 0, false);
    ci = info_of(dir, "shard-0");
    assert_string_equal(ci.sans, "DNS:shard.tessera,DNS:server.tessera,URI:tessera:shard/0,"
                                 "DNS:localhost,IP:127.0.0.1,IP:fd00::5,DNS:Node-1.example.com");
    assert_int_equal(verify(dir, "shard-0", X509_PURPOSE_SSL_SERVER), X509_V_OK);
    rm_set(dir);
}

/* A file that cannot be put in place: EIO naming it, and no temporary file stays. */
static void unwritable_file_leaves_nothing(void **state)
{
    struct ts_certs_opts o = { .force = true };
    struct ts_err e = { 0 };
    char dir[256], p[300];
    struct dirent *d;
    DIR *dh;
    int n = 0;

    mk_tmp(dir, sizeof(dir));
    path_of(p, sizeof(p), dir, "master", "pem");
    assert_int_equal(mkdir(p, 0700), 0);     /* rename onto a directory fails */
    assert_int_equal(ts_certs_init(dir, &o, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "master.pem"));
    assert_non_null(dh = opendir(dir));
    while ((d = readdir(dh)))
        if (d->d_name[0] != '.' || strncmp(d->d_name, ".certs-tmp", 10) == 0)
            n++;
    closedir(dh);
    assert_int_equal(n, 1);                  /* master.pem, the directory */
    assert_int_equal(rmdir(p), 0);
    /* A dir that is a file. */
    ts_err_clear(&e);
    path_of(p, sizeof(p), dir, "file", "pem");
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(ts_certs_init(p, NULL, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "not a directory"));
    unlink(p);
    assert_int_equal(rmdir(dir), 0);
}

static void cert_info_refuses_what_is_not_a_certificate(void **state)
{
    static const char garbage[] = "-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                                  "-----END CERTIFICATE-----\n";
    struct ts_cert_info ci;
    struct ts_err e = { 0 };
    char dir[256], *key;
    size_t len;

    assert_int_equal(ts_cert_info("garbage", 7, &ci, &e), TS_ECORRUPT);
    ts_err_clear(&e);
    assert_int_equal(ts_cert_info(garbage, sizeof(garbage) - 1, &ci, &e), TS_ECORRUPT);
    assert_int_equal(ts_cert_info("", 0, &ci, NULL), TS_ECORRUPT);
    mk_tmp(dir, sizeof(dir));
    init_ok(dir, NULL, 0, false);
    key = slurp(dir, "master", "key", &len);
    assert_int_equal(ts_cert_info(key, len, &ci, NULL), TS_ECORRUPT);
    free(key);
    rm_set(dir);
}

static void read_file_errors(void **state)
{
    struct ts_err e = { 0 };
    char dir[256], p[300], *buf = NULL;
    size_t len;
    FILE *f;

    mk_tmp(dir, sizeof(dir));
    snprintf(p, sizeof(p), "%s/nope.pem", dir);
    assert_int_equal(ts_read_file(p, &buf, &len, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "nope.pem"));
    assert_null(buf);
    /* past 1 MiB: not a PEM */
    assert_non_null(f = fopen(p, "w"));
    for (int i = 0; i < (1 << 20) / 64 + 1; i++)
        fputs("0123456789012345678901234567890123456789012345678901234567890123", f);
    fclose(f);
    ts_err_clear(&e);
    assert_int_equal(ts_read_file(p, &buf, &len, &e), TS_EINVAL);
    assert_null(buf);
    /* empty: a buffer of "" */
    assert_non_null(f = fopen(p, "w"));
    fclose(f);
    assert_int_equal(ts_read_file(p, &buf, &len, NULL), TS_OK);
    assert_int_equal(len, 0);
    assert_string_equal(buf, "");
    free(buf);
    unlink(p);
    assert_int_equal(rmdir(dir), 0);
}

static void issue_ok(const char *dir, const char *member, const char *hosts, bool force,
                     const char *want_stem)
{
    struct ts_certs_opts o = { .hosts = hosts, .force = force };
    struct ts_err e = { 0 };
    char stem[TS_MEMBER_MAX + 1];

    if (ts_certs_issue(dir, member, &o, stem, &e) != TS_OK)
        fail_msg("ts_certs_issue %s: %s", member, e.msg);
    assert_string_equal(stem, want_stem);
}

/* One more member's certificate from the set's CA: it verifies, names its member and carries
 * its kind's roles; a server's gets the hosts; a second issue needs force. */
static void issue_a_member_certificate(void **state)
{
    static const struct {
        const char *member, *stem;
        unsigned roles;
    } want[] = {
        { "shard/7", "shard-7", TS_ROLE_SHARD | TS_ROLE_SERVER },
        { "shard/eu-1.b", "shard-eu-1.b", TS_ROLE_SHARD | TS_ROLE_SERVER },
        { "worker/job-a", "worker-job-a", TS_ROLE_WORKER },
        { "verify/v2", "verify-v2", TS_ROLE_VERIFY | TS_ROLE_SERVER },
        { "admin/alice", "admin-alice", TS_ROLE_ADMIN | TS_ROLE_WORKER },
    };
    struct ts_certs_opts o = { 0 };
    struct ts_err e = { 0 };
    char dir[256], *before, *after;
    size_t blen, alen;

    mk_tmp(dir, sizeof(dir));
    init_ok(dir, NULL, 0, false);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        bool server = want[i].roles & TS_ROLE_SERVER;
        struct ts_cert_info ci;

        issue_ok(dir, want[i].member, "10.9.8.7", false, want[i].stem);
        ci = info_of(dir, want[i].stem);
        assert_string_equal(ci.identity, want[i].member);
        assert_int_equal(ci.roles, want[i].roles);
        assert_int_equal(strstr(ci.sans, "IP:10.9.8.7") != NULL, server);
        assert_int_equal(verify(dir, want[i].stem, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
        assert_int_equal(verify(dir, want[i].stem, X509_PURPOSE_SSL_SERVER),
                         server ? X509_V_OK : X509_V_ERR_INVALID_PURPOSE);
        assert_int_equal(mode_of(dir, want[i].stem, "key"), 0600);
        assert_int_equal(mode_of(dir, want[i].stem, "pem"), 0644);
        before = slurp(dir, want[i].stem, "pem", &blen);
        after = slurp(dir, want[i].stem, "key", &alen);
        assert_int_equal(ts_cert_key_match(before, after, NULL), TS_OK);
        free(before);
        free(after);
    }
    /* worker/ * is client.pem: there already, so only with force */
    before = slurp(dir, "client", "key", &blen);
    assert_int_equal(ts_certs_issue(dir, "worker/*", &o, NULL, &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "client.pem exists"));
    after = slurp(dir, "client", "key", &alen);
    assert_true(alen == blen && memcmp(after, before, alen) == 0);
    free(after);
    issue_ok(dir, "worker/*", NULL, true, "client");
    after = slurp(dir, "client", "key", &alen);
    assert_false(alen == blen && memcmp(after, before, alen) == 0);
    assert_string_equal(info_of(dir, "client").identity, "worker/*");
    free(after);
    free(before);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        rm_pair(dir, want[i].stem);
    rm_set(dir);
}

/* Without the CA's key nothing is issued, and the error says where the key must be. */
static void issue_needs_the_ca_key(void **state)
{
    struct ts_err e = { 0 };
    char dir[256], other[256], p[300], q[300];
    struct stat st;

    mk_tmp(dir, sizeof(dir));
    init_ok(dir, NULL, 0, false);
    path_of(p, sizeof(p), dir, "ca", "key");
    snprintf(q, sizeof(q), "%s/ca.key.offline", dir);
    assert_int_equal(rename(p, q), 0);
    assert_int_equal(ts_certs_issue(dir, "shard/5", NULL, NULL, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "/ca.key: not there"));
    path_of(p, sizeof(p), dir, "shard-5", "pem");
    assert_int_equal(stat(p, &st), -1);
    /* another CA's key: refused */
    mk_tmp(other, sizeof(other));
    init_ok(other, NULL, 0, false);
    path_of(p, sizeof(p), other, "ca", "key");
    path_of(q, sizeof(q), dir, "ca", "key");
    assert_int_equal(link(p, q), 0);
    ts_err_clear(&e);
    assert_int_equal(ts_certs_issue(dir, "shard/5", NULL, NULL, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "not the key of"));
    path_of(p, sizeof(p), dir, "shard-5", "pem");
    assert_int_equal(stat(p, &st), -1);
    /* a directory with no CA at all */
    ts_err_clear(&e);
    snprintf(p, sizeof(p), "%s/none", dir);
    assert_int_equal(ts_certs_issue(p, "shard/5", NULL, NULL, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "none/ca.pem"));
    snprintf(q, sizeof(q), "%s/ca.key.offline", dir);
    unlink(q);
    rm_set(other);
    rm_set(dir);
}

/* ensure: a first start makes the set and the token where the CA lives, a member's
 * certificate when missing, and replaces nothing; elsewhere a missing CA is not made. */
static void ensure_makes_only_what_is_missing(void **state)
{
    struct ts_err e = { 0 };
    char dir[256], p[300], before[300];
    unsigned made = 99;
    struct stat st, st2;

    (void)state;
    mk_tmp(dir, sizeof(dir));
    snprintf(p, sizeof(p), "%s/tls", dir);
    /* a shard's host with nothing copied yet: nothing made, the advice given */
    assert_int_equal(ts_certs_ensure(p, "shard/7001", false, NULL, &made, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "tls/ca.pem: not there"));
    assert_non_null(strstr(e.msg, "master's host"));
    assert_int_equal(made, 0);
    assert_int_equal(stat(p, &st), -1);
    /* the master's first start */
    assert_int_equal(ts_certs_ensure(p, "master", true, NULL, &made, NULL), TS_OK);
    assert_int_equal(made, TS_ENSURED_SET | TS_ENSURED_TOKEN);
    snprintf(before, sizeof(before), "%s/admin.token", p);
    assert_int_equal(stat(before, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    path_of(before, sizeof(before), p, "ca", "pem");
    assert_int_equal(stat(before, &st), 0);
    /* again: nothing made, nothing replaced */
    assert_int_equal(ts_certs_ensure(p, "master", true, NULL, &made, NULL), TS_OK);
    assert_int_equal(made, 0);
    /* a shard of the same host: its own certificate, from that CA */
    assert_int_equal(ts_certs_ensure(p, "shard/h-7001", false, NULL, &made, NULL), TS_OK);
    assert_int_equal(made, TS_ENSURED_MEMBER);
    assert_int_equal(stat(before, &st2), 0);
    assert_true(st.st_ino == st2.st_ino && st.st_mtime == st2.st_mtime);
    /* a bad member: refused before anything */
    ts_err_clear(&e);
    assert_int_equal(ts_certs_ensure(p, "shard", true, NULL, &made, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "member"));
    /* a shard's host with the CA but no token: not made there */
    snprintf(before, sizeof(before), "%s/admin.token", p);
    assert_int_equal(unlink(before), 0);
    ts_err_clear(&e);
    assert_int_equal(ts_certs_ensure(p, "shard/h-7001", false, NULL, &made, &e), TS_ENOTFOUND);
    assert_non_null(strstr(e.msg, "admin.token"));
    assert_int_equal(stat(before, &st), -1);
    rm_pair(p, "shard-h-7001");
    rm_set(p);
    assert_int_equal(rmdir(dir), 0);
}

/* The member grammar: what is refused names `member` and writes nothing. */
static void member_names(void **state)
{
    static const char *const good[] = { "master", "shard/0", "shard/eu-1", "worker/*",
                                        "worker/job.7", "verify", "verify/v2", "admin",
                                        "admin/alice" };
    static const char *const bad[] = { "", "shard", "shard/", "shard/a b", "shard/*",
                                       "shard/0/1", "master/x", "bogus/1", "worker",
                                       "worker/", "verify/", "admin/../x", "Shard/0",
                                       "shard/0123456789012345678901234567890123456789"
                                       "0123456789012345678901234" };
    char dir[256], stem[TS_MEMBER_MAX + 1];
    struct dirent *d;
    DIR *dh;
    int n = 0;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (ts_member_check(good[i], NULL) != TS_OK)
            fail_msg("'%s' refused", good[i]);
    mk_tmp(dir, sizeof(dir));
    init_ok(dir, NULL, 0, false);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_err e = { 0 };
        assert_int_equal(ts_member_check(bad[i], &e), TS_EINVAL);
        assert_int_equal(strncmp(e.msg, "member: ", 8), 0);
        assert_int_equal(ts_member_roles(bad[i]), 0);
        ts_err_clear(&e);
        assert_int_equal(ts_certs_issue(dir, bad[i], NULL, NULL, &e), TS_EINVAL);
        if (strncmp(e.msg, "member: ", 8) != 0)
            fail_msg("'%s': %s", bad[i], e.msg);
    }
    assert_int_equal(ts_member_check(NULL, NULL), TS_EINVAL);
    assert_non_null(dh = opendir(dir));
    while ((d = readdir(dh)))
        n += d->d_name[0] != '.';
    closedir(dh);
    assert_int_equal(n, 14);                 /* the set, and nothing more */
    rm_set(dir);

    assert_int_equal(ts_member_roles("shard/3"), TS_ROLE_SHARD | TS_ROLE_SERVER);
    assert_int_equal(ts_member_roles("worker/*"), TS_ROLE_WORKER);
    assert_string_equal(ts_member_name("shard/3", "shard"), "3");
    assert_string_equal(ts_member_name("worker/*", "worker"), "*");
    assert_string_equal(ts_member_name("verify", "verify"), "");
    assert_null(ts_member_name("shard/3", "worker"));
    assert_null(ts_member_name("shardx/3", "shard"));
    assert_null(ts_member_name("", "shard"));
    ts_member_stem("shard/3", stem, sizeof(stem));
    assert_string_equal(stem, "shard-3");
    ts_member_stem("worker/*", stem, sizeof(stem));
    assert_string_equal(stem, "client");
    ts_member_stem("master", stem, sizeof(stem));
    assert_string_equal(stem, "master");
}

/* A self-signed certificate with these SANs, as PEM (malloc'd). */
static char *cert_with_sans(const char *sans, size_t *len)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509V3_CTX ctx;
    X509_EXTENSION *ext;
    BIO *b = BIO_new(BIO_s_mem());
    char *data, *out;

    assert_true(k && x && b);
    X509_set_version(x, X509_VERSION_3);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    assert_non_null(ext = X509V3_EXT_nconf_nid(NULL, &ctx, NID_subject_alt_name, sans));
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    assert_int_equal(PEM_write_bio_X509(b, x), 1);
    *len = (size_t)BIO_get_mem_data(b, &data);
    out = malloc(*len);
    memcpy(out, data, *len);
    BIO_free(b);
    X509_free(x);
    EVP_PKEY_free(k);
    return out;
}

/* A certificate names one member, a valid one, or none. */
static void cert_info_reads_the_member(void **state)
{
    static const struct {
        const char *sans, *identity;
        ts_status st;
    } cases[] = {
        { "URI:tessera:shard/4,DNS:shard.tessera", "shard/4", TS_OK },
        { "DNS:shard.tessera,URI:https://example.com/x", "", TS_OK },
        { "DNS:tessera:shard/4", "", TS_OK },        /* a DNS name is not a member */
        { "URI:tessera:shard/1,URI:tessera:shard/2", NULL, TS_ECORRUPT },
        { "URI:tessera:bogus", NULL, TS_ECORRUPT },
        { "URI:tessera:shard/a b", NULL, TS_ECORRUPT },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ts_cert_info ci;
        struct ts_err e = { 0 };
        size_t len;
        char *pem = cert_with_sans(cases[i].sans, &len);

        assert_int_equal(ts_cert_info(pem, len, &ci, &e), cases[i].st);
        if (cases[i].identity)
            assert_string_equal(ci.identity, cases[i].identity);
        else
            assert_non_null(strstr(e.msg, "certificate: "));
        free(pem);
    }
}

/* --shards N: shard-0 .. shard-(N-1), each its own member. */
static void init_with_shards(void **state)
{
    struct ts_certs_opts o = { .shards = 3 };
    struct ts_err e = { 0 };
    char dir[256], stem[TS_MEMBER_MAX + 1], p[300];
    size_t n = 0;

    mk_tmp(dir, sizeof(dir));
    assert_int_equal(ts_certs_init(dir, &o, &e), TS_OK);
    for (size_t i = 0; ts_certs_stem(&o, i, stem, sizeof(stem)); i++, n++) {
        path_of(p, sizeof(p), dir, stem, "pem");
        assert_int_equal(access(p, R_OK), 0);
    }
    assert_int_equal(n, 8);
    assert_true(ts_certs_stem(&o, 3, stem, sizeof(stem)));
    assert_string_equal(stem, "shard-2");
    assert_string_equal(info_of(dir, "shard-2").identity, "shard/2");
    assert_true(ts_certs_stem(&o, 7, stem, sizeof(stem)));
    assert_string_equal(stem, "ca");
    for (size_t i = 0; ts_certs_stem(&o, i, stem, sizeof(stem)); i++)
        rm_pair(dir, stem);
    assert_int_equal(rmdir(dir), 0);
}

static void role_names(void **state)
{
    char buf[64], tiny[8];

    assert_int_equal(ts_role_of_name("shard.tessera"), TS_ROLE_SHARD);
    assert_int_equal(ts_role_of_name("Master.TESSERA"), TS_ROLE_MASTER);
    assert_int_equal(ts_role_of_name(TS_TLS_SERVER_NAME), TS_ROLE_SERVER);
    assert_int_equal(ts_role_of_name("admin.tessera"), TS_ROLE_ADMIN);
    assert_int_equal(ts_role_of_name("x.tessera"), 0);
    assert_int_equal(ts_role_of_name("shard.tessera.evil"), 0);
    assert_int_equal(ts_role_of_name("evil.shard.tessera"), 0);
    assert_int_equal(ts_role_of_name(".tessera"), 0);
    assert_int_equal(ts_role_of_name("tessera"), 0);
    assert_int_equal(ts_role_of_name(NULL), 0);
    assert_string_equal(ts_role_name(TS_ROLE_VERIFY), "verify");
    assert_string_equal(ts_role_name(TS_ROLE_SERVER), "server");
    assert_null(ts_role_name(0));
    assert_null(ts_role_name(TS_ROLE_SHARD | TS_ROLE_WORKER));
    assert_null(ts_role_name(1u << 6));

    ts_roles_format(0, buf, sizeof(buf));
    assert_string_equal(buf, "none");
    ts_roles_format(TS_ROLE_SHARD | TS_ROLE_WORKER, buf, sizeof(buf));
    assert_string_equal(buf, "shard,worker");
    ts_roles_format(TS_ROLE_MASTER | TS_ROLE_SERVER | (1u << 9), buf, sizeof(buf));
    assert_string_equal(buf, "master,server,0x200");
    ts_roles_format(TS_ROLE_MASTER | TS_ROLE_SHARD | TS_ROLE_VERIFY, tiny, sizeof(tiny));
    assert_string_equal(tiny, "master,");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_leaf_verifies_for_its_purpose),
        cmocka_unit_test(roles_names_modes_and_keys),
        cmocka_unit_test(second_init_needs_force),
        cmocka_unit_test(bad_options_write_nothing),
        cmocka_unit_test(ipv6_and_duplicate_hosts),
        cmocka_unit_test(unwritable_file_leaves_nothing),
        cmocka_unit_test(cert_info_refuses_what_is_not_a_certificate),
        cmocka_unit_test(read_file_errors),
        cmocka_unit_test(role_names),
        cmocka_unit_test(issue_a_member_certificate),
        cmocka_unit_test(issue_needs_the_ca_key),
        cmocka_unit_test(ensure_makes_only_what_is_missing),
        cmocka_unit_test(member_names),
        cmocka_unit_test(cert_info_reads_the_member),
        cmocka_unit_test(init_with_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
