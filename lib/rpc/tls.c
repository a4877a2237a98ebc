/* tls.c - the process's credentials for every gRPC server and channel: its TLS material and
 * the admin token; see rpc.h, "TLS and the admin token", and docs/security.md.
 *
 * One set per process: a service's servers and its calls to other members show the same
 * certificate, and the SDK's channels (made deep inside lib/cluster) need no plumbing to get
 * it. Resolved once, from ts_rpc_tls_setup or, failing that, from the environment at the first
 * channel or server; a failed resolution is kept and reported by every later create. */
#include <ctype.h>
#include <grpc/grpc_security.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/internal.h"
#include "sec/certs.h"
#include "util/knobs.h"

static struct {
    pthread_mutex_t mu;
    bool resolved;
    struct ts_err failed;            /* code TS_OK: resolved fine */
    char *cert, *key, *ca;           /* PEM contents; NULL: none */
    char cert_path[512];
    unsigned roles;                  /* of our own certificate */
    char bearer[TS_RPC_TOKEN_MAX + 8]; /* "Bearer <token>"; "": no token */
} tls = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void forget(void)
{
    if (tls.key)   /* a private key: wiped, not only freed */
        OPENSSL_cleanse(tls.key, strlen(tls.key));
    free(tls.cert);
    free(tls.key);
    free(tls.ca);
    tls.cert = tls.key = tls.ca = NULL;
    tls.cert_path[0] = '\0';
    tls.roles = 0;
    OPENSSL_cleanse(tls.bearer, sizeof(tls.bearer));
}

/* The admin token from path: one line of 16 to TS_RPC_TOKEN_MAX printable characters, no
 * spaces (what `tessera certs init` writes). */
static ts_status load_token(const char *path, struct ts_err *err)
{
    char *text = NULL;
    size_t len;
    ts_status st;

    if (!path)
        return TS_OK;
    if ((st = ts_read_file(path, &text, &len, err))) {
        ts_err_prefix(err, "--token-file");
        return st;
    }
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    for (size_t i = 0; i < len && !st; i++)
        if (!isgraph((unsigned char)text[i]))
            st = ts_err_set(err, TS_EINVAL, "--token-file %s: byte %zu is not a printable "
                            "character (the token is one line, no spaces)", path, i);
    if (!st && (len < 16 || len > TS_RPC_TOKEN_MAX))
        st = ts_err_set(err, TS_EINVAL, "--token-file %s: the token has %zu characters; want "
                        "16 to %d (`openssl rand -hex 32 > FILE` makes one)", path, len,
                        TS_RPC_TOKEN_MAX);
    if (!st)
        snprintf(tls.bearer, sizeof(tls.bearer), "Bearer %.*s", (int)len, text);
    OPENSSL_cleanse(text, len);
    free(text);
    return st;
}

/* path: the flag's value, else env's (a knob's value, or NULL), else dir/file; NULL for
 * none. */
static const char *pick(const char *flag, const char *env, const char *dir, const char *file,
                        char *buf, size_t len)
{
    const char *v = flag && flag[0] ? flag : env;

    if (v && v[0])
        return v;
    if (!dir || !dir[0])
        return NULL;
    snprintf(buf, len, "%s/%s", dir, file);
    return buf;
}

static ts_status load(const char *path, const char *what, char **out, struct ts_err *err)
{
    size_t len;
    ts_status st;

    if (path && (st = ts_read_file(path, out, &len, err))) {
        ts_err_prefix(err, "%s", what);
        return st;
    }
    return TS_OK;
}

static ts_status resolve(const struct ts_rpc_tls *t, struct ts_err *err)
{
    bool env = !(t && t->no_env);
    const char *dir = env ? ts_knob_str(TS_KNOB_TLS_DIR) : NULL;
    char b1[512], b2[512], b3[512];
    const char *cert = pick(t ? t->cert : NULL, env ? ts_knob_str(TS_KNOB_TLS_CERT) : NULL, dir,
                            "client.pem", b1, sizeof(b1));
    const char *key = pick(t ? t->key : NULL, env ? ts_knob_str(TS_KNOB_TLS_KEY) : NULL, dir,
                           "client.key", b2, sizeof(b2));
    const char *ca = pick(t ? t->ca : NULL, env ? ts_knob_str(TS_KNOB_TLS_CA) : NULL, dir,
                          "ca.pem", b3, sizeof(b3));
    const char *token = pick(t ? t->token_file : NULL,
                             env ? ts_knob_str(TS_KNOB_TOKEN_FILE) : NULL, NULL, NULL, NULL, 0);
    struct ts_cert_info info;
    ts_status st;

    forget();
    if (!cert != !key)
        return ts_err_set(err, TS_EINVAL, "%s: required with %s (a certificate and its key "
                          "come together)", cert ? "--tls-key" : "--tls-cert",
                          cert ? "--tls-cert" : "--tls-key");
    if ((st = load(cert, "--tls-cert", &tls.cert, err)) ||
        (st = load(key, "--tls-key", &tls.key, err)) ||
        (st = load(ca, "--tls-ca", &tls.ca, err)) || (st = load_token(token, err)))
        goto fail;
    /* A token read from this process's own settings would go in the clear with every call:
     * a client refuses to start so, a service checks it on its servers and never sends it
     * (ts__client_md; ts_serve_start warns). */
    if (tls.bearer[0] && !tls.cert && !tls.ca && !(t && t->server)) {
        bool flag = t && t->token_file && t->token_file[0];
        /* Short: ts_err_prefix keeps 150 bytes of it. */
        st = ts_err_set(err, TS_EINVAL, "%s: the admin token would go over plaintext, readable "
                        "on the path; use TLS ($TESSERA_TLS_DIR, --tls-*) or %s",
                        flag ? "--token-file" : "$TESSERA_TOKEN_FILE",
                        flag ? "drop --token-file" : "unset TESSERA_TOKEN_FILE");
        goto fail;
    }
    if (tls.cert) {
        if ((st = ts_cert_info(tls.cert, strlen(tls.cert), &info, err)) ||
            (st = ts_cert_key_match(tls.cert, tls.key, err))) {
            ts_err_prefix(err, "--tls-cert %s", cert);
            goto fail;
        }
        tls.roles = info.roles;
        snprintf(tls.cert_path, sizeof(tls.cert_path), "%s", cert);
    }
    return TS_OK;
fail:
    forget();
    return st;
}

ts_status ts_rpc_tls_setup(const struct ts_rpc_tls *t, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&tls.mu);
    ts_err_clear(&tls.failed);
    if ((st = resolve(t, &tls.failed)) && err)
        *err = tls.failed;
    tls.resolved = true;
    pthread_mutex_unlock(&tls.mu);
    return st;
}

/* Resolves from the environment if nothing did yet; the resolution's error, if it failed.
 * Called with tls.mu held. */
static ts_status resolved(struct ts_err *err)
{
    if (!tls.resolved) {
        ts_err_clear(&tls.failed);
        (void)resolve(NULL, &tls.failed);
        tls.resolved = true;
    }
    if (tls.failed.code && err && !err->code)
        *err = tls.failed;
    return tls.failed.code;
}

const char *ts_rpc_tls_mode(void)
{
    const char *mode;

    pthread_mutex_lock(&tls.mu);
    mode = resolved(NULL) || !tls.cert ? "plaintext" : tls.ca ? "mtls" : "tls";
    pthread_mutex_unlock(&tls.mu);
    return mode;
}

bool ts_rpc_tls_mutual(void)
{
    return !strcmp(ts_rpc_tls_mode(), "mtls");
}

unsigned ts_rpc_tls_roles(void)
{
    unsigned r;

    pthread_mutex_lock(&tls.mu);
    r = resolved(NULL) ? 0 : tls.roles;
    pthread_mutex_unlock(&tls.mu);
    return r;
}

ts_status ts__server_creds(grpc_server_credentials **out, bool *mtls, struct ts_err *err)
{
    ts_status st;
    char roles[96];

    pthread_mutex_lock(&tls.mu);
    *mtls = false;
    if ((st = resolved(err))) {
        ts_err_prefix(err, "TLS");
    } else if (!tls.cert && tls.ca) {
        st = ts_err_set(err, TS_EINVAL, "--tls-ca without --tls-cert: a server needs its own "
                        "certificate and key (--tls-cert, --tls-key; `tessera certs init DIR` "
                        "makes them)");
    } else if (tls.cert && !(tls.roles & TS_ROLE_SERVER)) {
        ts_roles_format(tls.roles, roles, sizeof(roles));
        st = ts_err_set(err, TS_EINVAL, "--tls-cert %s: not a server's certificate (its roles: "
                        "%s; a server's names DNS:%s): clients would refuse it; pass the "
                        "service's own (master.pem, shard.pem, verify.pem of `tessera certs "
                        "init`)", tls.cert_path, roles, TS_TLS_SERVER_NAME);
    } else if (!tls.cert) {
        *out = grpc_insecure_server_credentials_create();
    } else {
        grpc_ssl_pem_key_cert_pair pair = { .private_key = tls.key, .cert_chain = tls.cert };
        *mtls = tls.ca != NULL;
        *out = grpc_ssl_server_credentials_create_ex(
            tls.ca, &pair, 1,
            tls.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    }
    pthread_mutex_unlock(&tls.mu);
    return st;
}

ts_status ts__channel_creds(grpc_channel_credentials **out, bool *secure, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&tls.mu);
    *secure = false;
    if ((st = resolved(err))) {
        ts_err_prefix(err, "TLS");
    } else if (!tls.cert && !tls.ca) {
        *out = grpc_insecure_credentials_create();
    } else {
        grpc_ssl_pem_key_cert_pair pair = { .private_key = tls.key, .cert_chain = tls.cert };
        *secure = true;
        *out = grpc_ssl_credentials_create(tls.ca, tls.cert ? &pair : NULL, NULL, NULL);
    }
    pthread_mutex_unlock(&tls.mu);
    return st;
}

bool ts_rpc_tls_plain_token(void)
{
    bool plain;

    pthread_mutex_lock(&tls.mu);
    plain = !resolved(NULL) && tls.bearer[0] && !tls.cert && !tls.ca;
    pthread_mutex_unlock(&tls.mu);
    return plain;
}

size_t ts__client_md(grpc_metadata *md)
{
    size_t n = 0;

    pthread_mutex_lock(&tls.mu);
    /* Never in the clear: a channel without a certificate or a CA is plaintext (the same test
     * as ts__channel_creds). Only a service gets here so (resolve refuses a client). */
    if (!resolved(NULL) && tls.bearer[0] && (tls.cert || tls.ca)) {
        memset(md, 0, sizeof(*md));
        md->key = grpc_slice_from_static_string("authorization");
        md->value = grpc_slice_from_copied_string(tls.bearer);
        n = 1;
    }
    pthread_mutex_unlock(&tls.mu);
    return n;
}

unsigned ts_rpc_peer_roles(struct ts_rpc_call *c)
{
    grpc_auth_context *ctx;
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;
    unsigned roles = 0;
    char name[256];

    if (c->roles_known)
        return c->roles;
    if (c->call && (ctx = grpc_call_auth_context(c->call))) {   /* none: a scratch call */
        it = grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SAN_PROPERTY_NAME);
        while ((p = grpc_auth_property_iterator_next(&it))) {
            if (p->value_length >= sizeof(name))
                continue;
            memcpy(name, p->value, p->value_length);
            name[p->value_length] = '\0';
            roles |= ts_role_of_name(name);
        }
        grpc_auth_context_release(ctx);
    }
    c->roles = roles;
    c->roles_known = true;
    return roles;
}

void ts__peer_of(grpc_auth_context *ctx, struct ts_rpc_peer *out)
{
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;
    struct ts_cert_info info;

    memset(out, 0, sizeof(*out));
    if (!ctx)
        return;
    /* The certificate itself, read as `tessera certs show` reads a file: the same rules for
     * the member it names on every side (gRPC lists URI and DNS SANs under one name). */
    it = grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (!(p = grpc_auth_property_iterator_next(&it)))
        return;
    out->tls = true;
    if (ts_cert_info(p->value, p->value_length, &info, NULL) == TS_OK) {
        out->roles = info.roles;
        memcpy(out->identity, info.identity, sizeof(out->identity));
    }
}

bool ts_rpc_peer_identity(struct ts_rpc_call *c, char *buf, size_t n)
{
    /* A scratch call has no caller, so no certificate. */
    grpc_auth_context *ctx = c->call ? grpc_call_auth_context(c->call) : NULL;
    struct ts_rpc_peer peer;

    ts__peer_of(ctx, &peer);
    grpc_auth_context_release(ctx);
    if (n)
        snprintf(buf, n, "%s", peer.identity);
    return peer.identity[0] && strlen(peer.identity) < n;
}

void ts_rpc_caller(struct ts_rpc_call *c, char *out, size_t n)
{
    grpc_auth_context *ctx;
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;
    const char *peer, *host, *port;
    bool cn = false;

    snprintf(out, n, "local");
    if (!c->w)
        return;
    /* Under mutual TLS the CA vouches for the member and the CN; an address says nothing more
     * than where. */
    if (c->w->srv->mtls && ts_rpc_peer_identity(c, out, n))
        return;
    if (c->w->srv->mtls && (ctx = grpc_call_auth_context(c->call))) {
        it = grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_CN_PROPERTY_NAME);
        if ((p = grpc_auth_property_iterator_next(&it)) && p->value_length) {
            snprintf(out, n, "CN=%.*s", (int)p->value_length, p->value);
            cn = true;
        }
        grpc_auth_context_release(ctx);
        if (cn)
            return;
    }
    /* gRPC's peer: "ipv4:10.0.0.5:41234", "ipv6:[::1]:41234", "unix:/path": the host alone,
     * since every connection of a host comes from another port. */
    peer = ts_rpc_peer(c);
    if (!strncmp(peer, "unix:", 5)) {
        snprintf(out, n, "%s", peer);
        return;
    }
    host = strchr(peer, ':') ? strchr(peer, ':') + 1 : peer;
    port = strrchr(host, ':');
    snprintf(out, n, "%.*s", port ? (int)(port - host) : (int)strlen(host), host);
}

/* The caller sent the admin token (compared in constant time). */
static bool token_sent(const struct ts_rpc_call *c, const char *bearer, bool *sent_any)
{
    size_t want = strlen(bearer);

    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        if (!grpc_slice_str_cmp(m->key, "authorization")) {
            *sent_any = true;
            if (GRPC_SLICE_LENGTH(m->value) == want &&
                !CRYPTO_memcmp(GRPC_SLICE_START_PTR(m->value), bearer, want))
                return true;
        }
    }
    return false;
}

ts_status ts_rpc_need_role(struct ts_rpc_call *c, unsigned roles, struct ts_err *err)
{
    char want[96], have[96];
    bool mtls = c->w && c->w->srv->mtls, sent = false, token;
    unsigned got;

    if (!c->w)
        return TS_OK;   /* a scratch call: no caller */
    pthread_mutex_lock(&tls.mu);
    token = tls.bearer[0] ? token_sent(c, tls.bearer, &sent) : !mtls;
    pthread_mutex_unlock(&tls.mu);
    /* Without mutual TLS no member's role can be checked: only the admin token guards. */
    got = (mtls ? ts_rpc_peer_roles(c) : ~(unsigned)TS_ROLE_ADMIN) |
          (token ? (unsigned)TS_ROLE_ADMIN : 0);
    if (got & roles)
        return TS_OK;
    if (sent)
        return ts_err_set(err, TS_EAUTH, "%s: the bearer token sent is not this service's "
                          "admin token (--token-file)", ts_rpc_method_name(c));
    if (roles == TS_ROLE_ADMIN)
        return ts_err_set(err, TS_EAUTH, "%s is an admin call: send the admin token "
                          "(--token-file, or $TESSERA_TOKEN_FILE) or use an admin certificate "
                          "(docs/security.md)", ts_rpc_method_name(c));
    ts_roles_format(roles & ~(unsigned)TS_ROLE_ADMIN, want, sizeof(want));
    ts_roles_format(got, have, sizeof(have));
    return ts_err_set(err, TS_EPERM, "%s needs a certificate with a role of [%s]%s; the "
                      "caller's has [%s] (docs/security.md)", ts_rpc_method_name(c), want,
                      roles & TS_ROLE_ADMIN ? ", or the admin token" : "", have);
}
