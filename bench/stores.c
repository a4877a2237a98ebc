/* stores.c - what bench_table_store's stores share: the directory a store lives in, its
 * allocation, its bytes on disk, and the files' cold start. See stores.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stores.h"

ts_status store_create(const struct store_ops *ops, int variant, const char *path, size_t rec,
                       size_t nrows, struct store **out, struct ts_err *err)
{
    struct store *t = calloc(1, ops->size);
    ts_status st;

    if (!t)
        return ts_err_set(err, TS_ENOMEM, "out of memory for a store");
    t->ops = ops;
    t->variant = variant;
    t->rec = rec;
    snprintf(t->path, sizeof(t->path), "%s", path);
    if (mkdir(t->path, 0755) != 0)
        st = ts_err_set(err, TS_EIO, "mkdir %s: %s", t->path, strerror(errno));
    else
        st = ops->create(t, nrows, err);
    if (st != TS_OK) {
        store_destroy(t);
        return st;
    }
    *out = t;
    return TS_OK;
}

void store_destroy(struct store *t)
{
    if (!t)
        return;
    t->ops->fini(t);
    store_rm_tree(t->path);
    free(t);
}

static int64_t du_total;
static int du_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)p, (void)type, (void)f;
    du_total += (int64_t)st->st_blocks * 512;
    return 0;
}

int64_t store_disk_bytes(const struct store *t)
{
    du_total = 0;
    if (nftw(t->path, du_one, 16, FTW_PHYS) != 0)
        return -1;
    return du_total;
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st, (void)type, (void)f;
    if (remove(p) != 0)
        fprintf(stderr, "bench_table_store: remove %s: %s\n", p, strerror(errno));
    return 0;
}

void store_rm_tree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* Writes a file's dirty pages and drops its pages from the page cache. */
static int evict_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st, (void)f;
    if (type == FTW_F) {
        int fd = open(p, O_RDONLY);

        if (fd >= 0) {
            if (fdatasync(fd) != 0)
                fprintf(stderr, "bench_table_store: fdatasync %s: %s\n", p, strerror(errno));
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    return 0;
}

void store_evict(const struct store *t) { nftw(t->path, evict_one, 16, FTW_PHYS); }
