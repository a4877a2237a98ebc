/* gc.c - garbage collection and the consistency check.
 *
 * Both walk chunks/<ab>/ (and fsck also manifests/<ab>/). gc is told what is live rather than
 * reading manifests itself: the manifest schema lives above this layer. It sorts a copy of the
 * live ids and binary-searches each file name, so a store of N chunks costs N log N compares
 * and no reads. fsck re-reads and re-hashes every file with the same checks as a get. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/internal.h"

typedef ts_status (*visit_fn)(struct ts_store *s, void *ctx, const char *path, const char *name,
                              const struct stat *sb, struct ts_err *err);

/* Calls fn for each regular file in dir/<sub>/<two hex>/ (sub "tmp": in dir/tmp/). */
static ts_status scan(struct ts_store *s, const char *sub, bool fan, visit_fn fn, void *ctx,
                      struct ts_err *err)
{
    char path[TS__PATH_MAX], file[TS__PATH_MAX];
    ts_status st = TS_OK;
    struct dirent *de;
    struct stat sb;
    DIR *d;

    snprintf(path, sizeof(path), "%s/%s", s->dir, sub);
    d = opendir(path);
    if (!d)
        return ts_err_set(err, TS_EIO, "store: opendir %s: %s", path, strerror(errno));
    while (st == TS_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
        if (lstat(file, &sb) != 0)
            continue; /* removed meanwhile */
        if (fan && S_ISDIR(sb.st_mode)) {
            char inner[TS__PATH_MAX];

            snprintf(inner, sizeof(inner), "%s/%s", sub, de->d_name);
            st = scan(s, inner, false, fn, ctx, err);
        } else if (S_ISREG(sb.st_mode)) {
            st = fn(s, ctx, file, de->d_name, &sb, err);
        }
    }
    closedir(d);
    return st;
}

static int by_id(const void *a, const void *b)
{
    return memcmp(a, b, TS_STORE_ID_LEN);
}

struct gc {
    uint8_t (*live)[TS_STORE_ID_LEN];
    size_t nlive;
    time_t cutoff;
    struct ts_store_stats st;
};

static ts_status gc_chunk(struct ts_store *s, void *ctx, const char *path, const char *name,
                          const struct stat *sb, struct ts_err *err)
{
    struct gc *g = ctx;
    uint8_t id[TS_STORE_ID_LEN];

    g->st.scanned++;
    g->st.scanned_bytes += (uint64_t)sb->st_size;
    /* Names that are not ids are not ours to judge: fsck reports them, gc keeps them. */
    if (!ts_store_unhex(name, id) ||
        (g->nlive && bsearch(id, g->live, g->nlive, TS_STORE_ID_LEN, by_id)))
        return TS_OK;
    if (s->sys.unlink(path) != 0 && errno != ENOENT)
        return ts_err_set(err, TS_EIO, "store: gc: unlink %s: %s", path, strerror(errno));
    g->st.removed++;
    g->st.removed_bytes += (uint64_t)sb->st_size;
    return TS_OK;
}

static ts_status gc_tmp(struct ts_store *s, void *ctx, const char *path, const char *name,
                        const struct stat *sb, struct ts_err *err)
{
    struct gc *g = ctx;

    if (sb->st_mtime > g->cutoff)
        return TS_OK;
    if (s->sys.unlink(path) != 0 && errno != ENOENT)
        return ts_err_set(err, TS_EIO, "store: gc: unlink %s: %s", path, strerror(errno));
    g->st.tmp_removed++;
    return TS_OK;
}

ts_status ts_store_gc(struct ts_store *s, const uint8_t (*live)[TS_STORE_ID_LEN], size_t nlive,
                      unsigned tmp_grace_s, struct ts_store_stats *stats, struct ts_err *err)
{
    struct gc g = { .nlive = nlive };
    ts_status st;

    if (nlive && !live)
        return ts_err_set(err, TS_EINVAL, "store: gc: live is NULL with nlive %zu", nlive);
    if (nlive) {
        g.live = malloc(nlive * TS_STORE_ID_LEN);
        if (!g.live)
            return ts_err_set(err, TS_ENOMEM, "store: gc: %zu live ids: out of memory", nlive);
        memcpy(g.live, live, nlive * TS_STORE_ID_LEN);
        qsort(g.live, nlive, TS_STORE_ID_LEN, by_id);
    }
    /* tmp_grace_s 0 means every file, even one written this second. */
    g.cutoff = tmp_grace_s ? time(NULL) - (time_t)tmp_grace_s : (time_t)1 << 62;
    st = scan(s, "chunks", true, gc_chunk, &g, err);
    if (st == TS_OK)
        st = scan(s, "tmp", false, gc_tmp, &g, err);
    free(g.live);
    /* Unlinks need no directory fsync: a chunk that comes back after a crash is only garbage
     * again, and the next gc removes it. */
    if (st == TS_OK && stats)
        *stats = g.st;
    return st;
}

struct fsck {
    ts_store_fsck_cb cb;
    void *ctx;
    const char *what;
    int kind;
    struct ts__worker w;
    void *buf;
    size_t cap;
    struct ts_store_stats st;
};

static ts_status bad(struct fsck *f, const char *name, const struct ts_err *why)
{
    f->st.bad++;
    if (f->cb)
        f->cb(f->ctx, f->what, name, why);
    return TS_OK;
}

static ts_status fsck_one(struct ts_store *s, void *ctx, const char *path, const char *name,
                          const struct stat *sb, struct ts_err *err)
{
    struct fsck *f = ctx;
    struct ts_err why = { 0 };
    uint8_t id[TS_STORE_ID_LEN];
    uint64_t ulen;
    size_t len;
    ts_status st;

    f->st.scanned++;
    f->st.scanned_bytes += (uint64_t)sb->st_size;
    if (!ts_store_unhex(name, id)) {
        ts_err_set(&why, TS_ECORRUPT, "store: %s: stray file, not named by an id", path);
        return bad(f, name, &why);
    }
    st = ts__stat_obj(s, f->kind, id, &ulen, &why);
    if (st == TS_OK && ulen > f->cap) {
        void *p = realloc(f->buf, ulen);

        if (!p)
            return ts_err_set(err, TS_ENOMEM, "store: fsck: out of memory");
        f->buf = p;
        f->cap = ulen;
    }
    if (st == TS_OK)
        st = ts__get(s, &f->w, f->kind, id, f->buf, f->cap, &len, &why);
    if (st == TS_ENOMEM || st == TS_EIO)
        return ts_err_set(err, st, "%s", why.msg);
    return st == TS_OK ? TS_OK : bad(f, name, &why);
}

ts_status ts_store_fsck(struct ts_store *s, ts_store_fsck_cb cb, void *ctx,
                        struct ts_store_stats *stats, struct ts_err *err)
{
    struct fsck f = { .cb = cb, .ctx = ctx, .what = "chunk", .kind = TS__KIND_CHUNK };
    ts_status st = scan(s, "chunks", true, fsck_one, &f, err);

    if (st == TS_OK) {
        f.what = "manifest";
        f.kind = TS_STORE_MANIFEST;
        st = scan(s, "manifests", true, fsck_one, &f, err);
    }
    ts__worker_fini(&f.w);
    free(f.buf);
    if (st == TS_OK && stats)
        *stats = f.st;
    return st;
}
