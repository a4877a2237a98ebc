/* internal.h - helpers shared by the files of lib/store; not part of the public interface.
 * fsops.c wraps the syscall table (every write path goes through ts__fs_*), chunk.c owns the
 * on-disk file format, blob.c the worker threads, refs.c the refs, gc.c gc and fsck. */
#ifndef TS_STORE_INTERNAL_H
#define TS_STORE_INTERNAL_H

#include <limits.h>
#include <stdint.h>

#include <zstd.h>

#include "store/store.h"

#define TS__PATH_MAX 4096

/* The file header of chunks and objects; 32 bytes, little-endian. See docs/store.md. */
#define TS__MAGIC "TSCK"
#define TS__VERSION 1
#define TS__HDR 32
enum { TS__CODEC_RAW = 0, TS__CODEC_ZSTD = 1 };
enum { TS__KIND_CHUNK = 0 }; /* objects use enum ts_store_kind */

struct ts_store {
    char *dir;
    int level;
    int threads;
    bool always_compress;
    struct ts_store_syscalls sys; /* every member filled in */
};

/* Per-thread scratch: compression contexts and a buffer for stored bytes. */
struct ts__worker {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    void *buf;
    size_t cap;
};

void ts__worker_fini(struct ts__worker *w);
/* Makes w->buf at least n bytes. */
TS_MUST_CHECK ts_status ts__worker_reserve(struct ts__worker *w, size_t n, struct ts_err *err);

/* Where chunk/object id lives: dir/<sub>/ab/abcd... */
void ts__obj_path(const struct ts_store *s, const char *sub, const uint8_t id[TS_STORE_ID_LEN],
                  char *path, size_t cap);
void ts__sha256(const void *data, size_t len, uint8_t id[TS_STORE_ID_LEN]);

/* Chunk/object put and get with the caller's worker. kind: TS__KIND_CHUNK or an object kind
 * (objects are never compressed). *written: file bytes written (0 if it existed).
 * defer_sync false: durable on TS_OK, the fan-out directory fsynced after the name appeared
 * (also when it was found: it may be another writer's, not yet synced). defer_sync true
 * (put_blob): no directory fsync at all; the caller must fsync chunks/<id[0]> before it
 * trusts id, and unlink the chunk if that fsync fails and *existed is false. */
TS_MUST_CHECK ts_status ts__put(struct ts_store *s, struct ts__worker *w, int kind,
                                const void *data, size_t len, uint8_t id[TS_STORE_ID_LEN],
                                bool defer_sync, bool *existed, uint64_t *written,
                                struct ts_err *err);
TS_MUST_CHECK ts_status ts__get(struct ts_store *s, struct ts__worker *w, int kind,
                                const uint8_t id[TS_STORE_ID_LEN], void *buf, size_t cap,
                                size_t *len, struct ts_err *err);
/* Reads a file's header: its uncompressed length and kind. */
TS_MUST_CHECK ts_status ts__stat_obj(struct ts_store *s, int kind,
                                     const uint8_t id[TS_STORE_ID_LEN], uint64_t *ulen,
                                     struct ts_err *err);

/* fsops.c: loops over short reads/writes; EIO when write makes no progress. */
TS_MUST_CHECK ts_status ts__fs_write_all(struct ts_store *s, int fd, const void *p, size_t n,
                                         const char *path, struct ts_err *err);
TS_MUST_CHECK ts_status ts__fs_read_all(struct ts_store *s, int fd, void *p, size_t n,
                                        const char *path, struct ts_err *err);
/* fsync of the directory holding path (or of path itself when is_dir). */
TS_MUST_CHECK ts_status ts__fs_sync_dir(struct ts_store *s, const char *dir, struct ts_err *err);
/* mkdir that accepts an existing directory; syncs the parent when it created one. */
TS_MUST_CHECK ts_status ts__fs_mkdir(struct ts_store *s, const char *path, struct ts_err *err);
/* The crash-safe write: parts[0..n) to a fresh file in dir/tmp, fdatasync, rename to `to`,
 * fsync to's directory. On failure the tmp file is removed and `to` is not created; if only
 * the final directory fsync fails, `to` is unlinked again when undo (chunks, objects: a later
 * put must not trust a name that may not survive a crash) and left when not (refs: the old
 * value is gone either way, and the new one is complete). flags TS__PUB_NO_DIR_SYNC skips
 * that fsync: the caller does it (put_blob, once per directory) and undoes on failure. */
struct ts__iov {
    const void *p;
    size_t n;
};
enum { TS__PUB_UNDO = 1, TS__PUB_NO_DIR_SYNC = 2 };
TS_MUST_CHECK ts_status ts__fs_publish(struct ts_store *s, const struct ts__iov *parts, int n,
                                       const char *to, int flags, struct ts_err *err);
TS_MUST_CHECK ts_status ts__fs_tmpname(struct ts_store *s, char *path, size_t cap,
                                       struct ts_err *err);

#endif
