/* region.c - sealed memfds, mapped whole or in page-aligned parts (region.h). */
#include "transport/region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW)
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010      /* Linux 5.1; older C libraries lack the name */
#endif
#define SEALS_OWNED (F_SEAL_FUTURE_WRITE | F_SEAL_WRITE)   /* either keeps others out */

size_t ts_page_size(void)
{
    long pg = sysconf(_SC_PAGESIZE);

    return pg > 0 ? (size_t)pg : 4096;
}

ts_status ts_region_create(const char *name, size_t bytes, enum ts_region_access access,
                           struct ts_region *r, struct ts_err *err)
{
    size_t size = ts_page_round(bytes ? bytes : 1);
    int fd, seals = access == TS_REGION_OWNED ? F_SEAL_FUTURE_WRITE | F_SEAL_SEAL : F_SEAL_SEAL;
    void *p;

    *r = TS_REGION_NONE;
    if ((fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        return ts_err_set(err, TS_ENODEV, "region '%s': memfd_create: %s", name,
                          strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, SEALS) != 0) {
        ts_status st = ts_err_set(err, TS_ENOMEM, "region '%s': sizing %zu bytes: %s", name,
                                  size, strerror(errno));
        close(fd);
        return st;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        ts_status st = ts_err_set(err, TS_ENOMEM, "region '%s': mapping %zu bytes: %s", name,
                                  size, strerror(errno));
        close(fd);
        return st;
    }
    /* After our mapping, which F_SEAL_FUTURE_WRITE leaves writable, and before anyone else
     * has the descriptor. EINVAL: a kernel older than 5.1 knows no such seal. */
    if (fcntl(fd, F_ADD_SEALS, seals) != 0) {
        ts_status st = ts_err_set(err, errno == EINVAL ? TS_ENODEV : TS_EIO, "region '%s': "
                                  "sealing it against writes by others: %s", name,
                                  strerror(errno));
        munmap(p, size);
        close(fd);
        return st;
    }
    *r = (struct ts_region){ p, size, fd };
    return TS_OK;
}

/* The size of a peer's memfd, once its seals are checked: against resizing always, against
 * writes by others for TS_REGION_OWNED. */
static ts_status sealed_size(int fd, enum ts_region_access access, size_t *size,
                            struct ts_err *err)
{
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);

    if (seals < 0 || (seals & SEALS) != SEALS)
        return ts_err_set(err, TS_ECORRUPT, "region: the descriptor is not a memfd sealed "
                          "against shrinking and growing");
    if (access == TS_REGION_OWNED && !(seals & SEALS_OWNED))
        return ts_err_set(err, TS_ECORRUPT, "region: the memfd is not sealed against writes "
                          "by others (F_SEAL_FUTURE_WRITE): a third process could change it");
    if (fstat(fd, &sb) != 0 || sb.st_size < 0)
        return ts_err_set(err, TS_ECORRUPT, "region: fstat: %s", strerror(errno));
    *size = (size_t)sb.st_size;
    return TS_OK;
}

ts_status ts_region_map(int fd, size_t min_bytes, enum ts_region_access access,
                        struct ts_region *r, struct ts_err *err)
{
    size_t size = 0;
    ts_status st = sealed_size(fd, access, &size, err);
    int prot = access == TS_REGION_OWNED ? PROT_READ : PROT_READ | PROT_WRITE;

    *r = TS_REGION_NONE;
    if (!st && (size < min_bytes || size == 0))
        st = ts_err_set(err, TS_ECORRUPT, "region: %zu bytes, want at least %zu", size,
                        min_bytes);
    if (!st) {
        void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            st = ts_err_set(err, TS_ENOMEM, "region: mapping %zu bytes: %s", size,
                            strerror(errno));
        else
            *r = (struct ts_region){ p, size, -1 };
    }
    close(fd);
    return st;
}

ts_status ts_region_map_at(int fd, void *addr, size_t off, size_t len, struct ts_err *err)
{
    size_t size = 0, pg = ts_page_size();
    ts_status st = sealed_size(fd, TS_REGION_OWNED, &size, err);

    if (st)
        return st;
    if (off % pg || (uintptr_t)addr % pg || len == 0 || off > size ||
        ts_page_round(len) > size - off)
        return ts_err_set(err, TS_ECORRUPT, "region: bytes %zu..%zu are not a page-aligned "
                          "part of its %zu", off, off + len, size);
    if (mmap(addr, ts_page_round(len), PROT_READ, MAP_SHARED | MAP_FIXED, fd, (off_t)off) ==
        MAP_FAILED)
        return ts_err_set(err, TS_ENOMEM, "region: mapping %zu bytes at %zu: %s", len, off,
                          strerror(errno));
    return TS_OK;
}

void ts_region_free(struct ts_region *r)
{
    if (r->base)
        munmap(r->base, r->size);
    if (r->fd >= 0)
        close(r->fd);
    *r = TS_REGION_NONE;
}
