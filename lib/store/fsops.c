/* fsops.c - every path by which the store writes goes through here and the syscall table.
 *
 * The crash-safe protocol (docs/store.md): write the whole file under a unique name in tmp/,
 * fdatasync it, rename it to its final name, fsync the final directory. A reader sees either
 * no file or a complete one; after a crash the file exists only if all its bytes do. A failed
 * fsync is never retried: Linux may already have dropped the dirty pages and marked them
 * clean, so a second fsync that "succeeds" proves nothing. The call fails instead. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "store/internal.h"

ts_status ts__fs_write_all(struct ts_store *s, int fd, const void *p, size_t n,
                           const char *path, struct ts_err *err)
{
    const char *c = p;

    while (n > 0) {
        ssize_t w = s->sys.write(fd, c, n > (1u << 30) ? (1u << 30) : n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return ts_err_set(err, TS_EIO, "store: write %s: %s", path, strerror(errno));
        if (w == 0)
            return ts_err_set(err, TS_EIO, "store: write %s: no progress (disk full?)", path);
        c += w;
        n -= (size_t)w;
    }
    return TS_OK;
}

ts_status ts__fs_read_all(struct ts_store *s, int fd, void *p, size_t n, const char *path,
                          struct ts_err *err)
{
    char *c = p;

    while (n > 0) {
        ssize_t r = s->sys.read(fd, c, n > (1u << 30) ? (1u << 30) : n);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ts_err_set(err, TS_EIO, "store: read %s: %s", path, strerror(errno));
        if (r == 0)
            return ts_err_set(err, TS_ECORRUPT, "store: read %s: file shorter than its header "
                              "says (truncated)", path);
        c += r;
        n -= (size_t)r;
    }
    return TS_OK;
}

ts_status ts__fs_sync_dir(struct ts_store *s, const char *dir, struct ts_err *err)
{
    int fd = s->sys.open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    int rc, e;

    if (fd < 0)
        return ts_err_set(err, TS_EIO, "store: open dir %s: %s", dir, strerror(errno));
    rc = s->sys.fsync(fd);
    e = errno;
    s->sys.close(fd);
    if (rc != 0)
        return ts_err_set(err, TS_EIO, "store: fsync dir %s: %s (not retried)", dir,
                          strerror(e));
    return TS_OK;
}

/* The directory part of path into out (path must contain a '/'). */
static void parent_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 1;

    if (!slash || n == 0) {
        snprintf(out, cap, slash ? "/" : ".");
        return;
    }
    snprintf(out, cap, "%.*s", (int)n, path);
}

ts_status ts__fs_mkdir(struct ts_store *s, const char *path, struct ts_err *err)
{
    char parent[TS__PATH_MAX];

    if (s->sys.mkdir(path, 0777) != 0) {
        if (errno == EEXIST)
            return TS_OK;
        return ts_err_set(err, TS_EIO, "store: mkdir %s: %s", path, strerror(errno));
    }
    /* A new directory entry is durable only once its parent is synced. */
    parent_of(path, parent, sizeof(parent));
    return ts__fs_sync_dir(s, parent, err);
}

ts_status ts__fs_tmpname(struct ts_store *s, char *path, size_t cap, struct ts_err *err)
{
    uint64_t r[2];

    /* Random, not pid-based: several hosts may share the directory. */
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return ts_err_set(err, TS_EIO, "store: getrandom: %s", strerror(errno));
    snprintf(path, cap, "%s/tmp/%016llx%016llx.tmp", s->dir, (unsigned long long)r[0],
             (unsigned long long)r[1]);
    return TS_OK;
}

/* Writes and syncs parts into a fresh tmp file; the file is closed on return. */
static ts_status write_tmp(struct ts_store *s, const struct ts__iov *parts, int n,
                           const char *tmp, struct ts_err *err)
{
    ts_status st = TS_OK;
    int fd = s->sys.open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);

    if (fd < 0)
        return ts_err_set(err, TS_EIO, "store: create %s: %s", tmp, strerror(errno));
    for (int i = 0; st == TS_OK && i < n; i++)
        st = ts__fs_write_all(s, fd, parts[i].p, parts[i].n, tmp, err);
    if (st == TS_OK && s->sys.fdatasync(fd) != 0)
        st = ts_err_set(err, TS_EIO, "store: fdatasync %s: %s (not retried)", tmp,
                        strerror(errno));
    /* close can report a deferred write error (NFS): it counts as a failed write. */
    if (s->sys.close(fd) != 0 && st == TS_OK)
        st = ts_err_set(err, TS_EIO, "store: close %s: %s", tmp, strerror(errno));
    return st;
}

ts_status ts__fs_publish(struct ts_store *s, const struct ts__iov *parts, int n,
                         const char *to, int flags, struct ts_err *err)
{
    char tmp[TS__PATH_MAX], dir[TS__PATH_MAX];
    ts_status st;

    st = ts__fs_tmpname(s, tmp, sizeof(tmp), err);
    if (st != TS_OK)
        return st;
    st = write_tmp(s, parts, n, tmp, err);
    if (st != TS_OK)
        goto out_unlink_tmp;
    if (s->sys.rename(tmp, to) != 0) {
        st = ts_err_set(err, TS_EIO, "store: rename %s -> %s: %s", tmp, to, strerror(errno));
        goto out_unlink_tmp;
    }
    if (flags & TS__PUB_NO_DIR_SYNC)
        return TS_OK;
    parent_of(to, dir, sizeof(dir));
    st = ts__fs_sync_dir(s, dir, err);
    /* The name may not survive a crash; a later put must not find it and trust it. */
    if (st != TS_OK && (flags & TS__PUB_UNDO))
        s->sys.unlink(to);
    return st;

out_unlink_tmp:
    s->sys.unlink(tmp);
    return st;
}
