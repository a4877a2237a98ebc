/* file.c - see file.h. */
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CAP 4096

static ts_status write_all(int fd, const void *p, size_t n, const char *path, struct ts_err *err)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return ts_err_set(err, TS_EIO, "cannot write %s: %s", path, strerror(errno));
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return TS_OK;
}

/* f's bytes into a new temporary beside f->path, named into tmp, synced and closed. */
static ts_status write_tmp(const struct ts_file_out *f, char *tmp, struct ts_err *err)
{
    static atomic_uint counter;
    ts_status st;
    int fd;

    if (snprintf(tmp, PATH_CAP, "%s.tmp.%d.%u", f->path, (int)getpid(),
                 atomic_fetch_add(&counter, 1)) >= PATH_CAP)
        return ts_err_set(err, TS_EINVAL, "%s: path too long", f->path);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, f->mode)) < 0)
        return ts_err_set(err, TS_EIO, "cannot write %s: %s", f->path, strerror(errno));
    /* The mode asked for, whatever the umask: a key must not come out wider or narrower. */
    st = fchmod(fd, f->mode) < 0 ? ts_err_set(err, TS_EIO, "cannot write %s: chmod: %s",
                                              f->path, strerror(errno)) : TS_OK;
    if (!st)
        st = write_all(fd, f->head, f->head_len, f->path, err);
    if (!st)
        st = write_all(fd, f->body, f->body_len, f->path, err);
    if (!st && fsync(fd) < 0)
        st = ts_err_set(err, TS_EIO, "cannot write %s: fsync: %s", f->path, strerror(errno));
    /* close can report a deferred write error (NFS): it counts as a failed write. */
    if (close(fd) < 0 && !st)
        st = ts_err_set(err, TS_EIO, "cannot write %s: close: %s", f->path, strerror(errno));
    if (st)
        unlink(tmp);
    return st;
}

/* Syncs the directory holding path, so that a rename into it survives a crash. */
static ts_status sync_dir_of(const char *path, struct ts_err *err)
{
    char dir[PATH_CAP];
    const char *slash = strrchr(path, '/');
    int fd, e = 0;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(fd) < 0)
        e = errno;
    if (fd >= 0)
        close(fd);
    return e ? ts_err_set(err, TS_EIO, "cannot sync %s (holding %s): %s", dir, path,
                          strerror(e)) : TS_OK;
}

static bool same_dir(const char *a, const char *b)
{
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    size_t na = sa ? (size_t)(sa - a) : 0, nb = sb ? (size_t)(sb - b) : 0;

    return na == nb && !strncmp(a, b, na);
}

ts_status ts_files_replace(const struct ts_file_out *f, size_t n, struct ts_err *err)
{
    char (*tmp)[PATH_CAP] = calloc(n ? n : 1, sizeof(*tmp));
    ts_status st = TS_OK;
    size_t written = 0, renamed = 0;

    if (!tmp)
        return ts_err_set(err, TS_ENOMEM, "cannot write %s: out of memory",
                          n ? f[0].path : "files");
    while (written < n && !(st = write_tmp(&f[written], tmp[written], err)))
        written++;
    while (!st && renamed < n) {
        if (rename(tmp[renamed], f[renamed].path) < 0)
            st = ts_err_set(err, TS_EIO, "cannot replace %s: %s", f[renamed].path,
                            strerror(errno));
        else
            renamed++;
    }
    for (size_t i = renamed; i < written; i++)
        unlink(tmp[i]);
    for (size_t i = 0; i < renamed && !st; i++)
        if (i == 0 || !same_dir(f[i - 1].path, f[i].path))
            st = sync_dir_of(f[i].path, err);
    free(tmp);
    return st;
}

size_t ts_files_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;

    while (d && (e = readdir(d))) {
        const char *t = strstr(e->d_name, ".tmp.");
        unsigned pid, k;
        char end;
        if (t && t != e->d_name && sscanf(t, ".tmp.%u.%u%c", &pid, &k, &end) == 2 &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

ts_status ts_file_replace(const char *path, const void *p, size_t len, mode_t mode,
                          struct ts_err *err)
{
    struct ts_file_out f = { .path = path, .body = p, .body_len = len, .mode = mode };

    return ts_files_replace(&f, 1, err);
}
