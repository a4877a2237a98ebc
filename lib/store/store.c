/* store.c - opening and closing a store, ids, paths and per-thread scratch.
 * Opening creates the fixed directories (syncing each parent it adds to), so a store that
 * opened has every directory a put needs except the 256-way fan-out, made on demand. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "store/internal.h"

static int real_open(const char *path, int flags, mode_t mode)
{
    return open(path, flags, mode);
}

static void fill_sys(struct ts_store_syscalls *d, const struct ts_store_syscalls *o)
{
    static const struct ts_store_syscalls real = {
        .open = real_open, .close = close, .read = read, .write = write, .fsync = fsync,
        .fdatasync = fdatasync, .rename = rename, .unlink = unlink, .mkdir = mkdir,
    };
    *d = real;
    if (!o)
        return;
#define TAKE(f) if (o->f) d->f = o->f
    TAKE(open); TAKE(close); TAKE(read); TAKE(write); TAKE(fsync); TAKE(fdatasync);
    TAKE(rename); TAKE(unlink); TAKE(mkdir);
#undef TAKE
}

ts_status ts_store_open(const char *dir, const struct ts_store_opts *o, struct ts_store **out,
                        struct ts_err *err)
{
    static const char *const subs[] = { "chunks", "manifests", "refs", "refs/heads",
                                        "refs/tags", "tmp" };
    struct ts_store *s;
    char path[TS__PATH_MAX];
    ts_status st;

    if (!dir || !*dir || strlen(dir) > TS__PATH_MAX - 200)
        return ts_err_set(err, TS_EINVAL, "store: dir: required, at most %d bytes",
                          TS__PATH_MAX - 200);
    if (o && (o->zstd_level < 0 || o->zstd_level > 19))
        return ts_err_set(err, TS_EINVAL, "store: zstd_level %d: want 0 (default) to 19",
                          o->zstd_level);
    if (o && (o->threads < 0 || o->threads > 64))
        return ts_err_set(err, TS_EINVAL, "store: threads %d: want 0 (default) to 64",
                          o->threads);
    s = calloc(1, sizeof(*s));
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return ts_err_set(err, TS_ENOMEM, "store: out of memory");
    }
    fill_sys(&s->sys, o ? o->sys : NULL);
    s->level = o && o->zstd_level ? o->zstd_level : TS_STORE_DEFAULT_LEVEL;
    s->always_compress = o && o->always_compress;
    s->threads = o && o->threads ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    s->threads = s->threads < 1 ? 1 : s->threads > 8 && !(o && o->threads) ? 8 : s->threads;
    st = ts__fs_mkdir(s, dir, err);
    for (size_t i = 0; st == TS_OK && i < sizeof(subs) / sizeof(subs[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, subs[i]);
        st = ts__fs_mkdir(s, path, err);
    }
    if (st != TS_OK) {
        ts_store_close(s);
        return st;
    }
    *out = s;
    return TS_OK;
}

void ts_store_close(struct ts_store *s)
{
    if (!s)
        return;
    free(s->dir);
    free(s);
}

char *ts_store_hex(const uint8_t id[TS_STORE_ID_LEN], char hex[TS_STORE_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < TS_STORE_ID_LEN; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 15];
    }
    hex[TS_STORE_HEX_LEN] = '\0';
    return hex;
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool ts_store_unhex(const char *hex, uint8_t id[TS_STORE_ID_LEN])
{
    uint8_t tmp[TS_STORE_ID_LEN];

    for (int i = 0; i < TS_STORE_ID_LEN; i++) {
        int hi = nibble(hex[2 * i]), lo = hi < 0 ? -1 : nibble(hex[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return false;
        tmp[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[TS_STORE_HEX_LEN] != '\0')
        return false;
    memcpy(id, tmp, sizeof(tmp));
    return true;
}

void ts__obj_path(const struct ts_store *s, const char *sub, const uint8_t id[TS_STORE_ID_LEN],
                  char *path, size_t cap)
{
    char hex[TS_STORE_HEX_LEN + 1];

    ts_store_hex(id, hex);
    snprintf(path, cap, "%s/%s/%.2s/%s", s->dir, sub, hex, hex);
}

void ts__sha256(const void *data, size_t len, uint8_t id[TS_STORE_ID_LEN])
{
    unsigned int n = TS_STORE_ID_LEN;

    /* EVP_Digest only fails on allocation; an all-zero id then never matches a real one. */
    if (!EVP_Digest(data, len, id, &n, EVP_sha256(), NULL))
        memset(id, 0, TS_STORE_ID_LEN);
}

void ts__worker_fini(struct ts__worker *w)
{
    ZSTD_freeCCtx(w->cctx);
    ZSTD_freeDCtx(w->dctx);
    free(w->buf);
    memset(w, 0, sizeof(*w));
}

ts_status ts__worker_reserve(struct ts__worker *w, size_t n, struct ts_err *err)
{
    void *p;

    if (w->cap >= n)
        return TS_OK;
    p = realloc(w->buf, n);
    if (!p)
        return ts_err_set(err, TS_ENOMEM, "store: scratch of %zu bytes: out of memory", n);
    w->buf = p;
    w->cap = n;
    return TS_OK;
}

size_t ts_store_nchunks(size_t len, size_t chunk)
{
    if (!chunk)
        chunk = TS_STORE_DEFAULT_CHUNK;
    return len / chunk + (len % chunk != 0);
}
