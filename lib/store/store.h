/* store.h - the content-addressed snapshot store: chunks, objects and refs in one directory.
 *
 * Snapshots must be incremental, crash-safe and checked on read. Partition data is cut into
 * fixed-size chunks; each is named by the SHA-256 of its uncompressed bytes, compressed with
 * Zstandard when a sample says that saves at least 10%, and written once: a chunk that did
 * not change since the last snapshot already has its name on disk, so putting it again writes
 * nothing. Manifests (schema above this layer) are objects named by hash as well; refs
 * ("heads/main", "tags/v1") point at them like git's. Every file reaches its name by write to
 * tmp/, fsync, rename, fsync of the directory (put_blob: once per directory, at the end);
 * a failed fsync fails the call and is never retried (the data may be gone from the
 * page cache). Each read re-hashes what it returns; a mismatch is TS_ECORRUPT naming the id.
 * docs/store.md describes the layout, the chunk format and the measurements behind defaults.
 *
 * Layout: dir/chunks/ab/abcd...(64 hex), dir/manifests/ab/..., dir/refs/{heads,tags}/...,
 * dir/tmp/ (files being written), dir/refs.lock (flock for ref compare-and-swap).
 *
 * Ownership: ts_store_open() returns a store the caller frees with ts_store_close(); every
 * other function borrows the store and its buffers and keeps neither. ts_store_get_object()
 * and ts_store_ref_list() return malloc'd memory the caller frees with free().
 * Threads: a store may be used by several threads at once (each call has its own contexts);
 * ref updates are serialized by flock, so several processes or hosts sharing dir are safe for
 * refs. gc must not run while any writer puts: it would delete a chunk that a put just found
 * existing (the caller excludes writers, e.g. gc only under the master's snapshot lock).
 * Errors: TS_EINVAL (bad argument, named), TS_ENOTFOUND, TS_ESTATE (ref compare-and-swap lost),
 * TS_ECORRUPT (hash, header or length mismatch; names the id), TS_EIO (a syscall failed; names
 * the path and errno), TS_ENOMEM. */
#ifndef TS_STORE_STORE_H
#define TS_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

#define TS_STORE_ID_LEN 32             /* SHA-256 */
#define TS_STORE_HEX_LEN 64            /* an id in lowercase hex, without the NUL */
#define TS_STORE_REF_MAX 200           /* longest ref name in bytes */
#define TS_STORE_DEFAULT_CHUNK (1u << 20) /* put_blob's chunk size; see docs/store.md */
#define TS_STORE_DEFAULT_LEVEL 1       /* zstd level; see docs/store.md */
#define TS_STORE_MAX_CHUNK (1u << 30)  /* the largest chunk ts_store_put accepts */

/* The syscalls the store makes on its files, swappable so tests can inject ENOSPC, EIO, short
 * writes and a failing fsync (SQLite aSyscall). Each has the POSIX contract (-1 and errno on
 * failure). A NULL member means the real call; a NULL table means all real calls. The table
 * is borrowed for the store's life. */
struct ts_store_syscalls {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*read)(int fd, void *buf, size_t n);
    ssize_t (*write)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);     /* directories */
    int (*fdatasync)(int fd); /* files: data plus the size needed to read it back */
    int (*rename)(const char *from, const char *to);
    int (*unlink)(const char *path);
    int (*mkdir)(const char *path, mode_t mode);
};

struct ts_store_opts {
    int zstd_level;   /* 0: TS_STORE_DEFAULT_LEVEL; 1..19 */
    /* false: a chunk is stored zstd only if that saves >= 10%, judged first on a 64 KiB sample
     * (fp32 weights save ~7.5% and are stored raw, at twice the write speed); true: every
     * chunk is compressed and kept compressed whenever that is smaller. docs/store.md. */
    bool always_compress;
    int threads;      /* put_blob/get_blob workers; 0: online CPUs, at most 8 */
    const struct ts_store_syscalls *sys; /* NULL: the real syscalls; borrowed */
};

struct ts_store;

/* What ts_store_gc and ts_store_fsck looked at and did. */
struct ts_store_stats {
    uint64_t scanned;       /* chunk and object files looked at */
    uint64_t scanned_bytes;
    uint64_t removed;       /* gc: chunk files unlinked */
    uint64_t removed_bytes;
    uint64_t tmp_removed;   /* gc: stale files unlinked from tmp/ */
    uint64_t bad;           /* fsck: files that failed a check */
};

/* Kinds of objects stored under manifests/; the kind is recorded and checked on read. */
enum ts_store_kind { TS_STORE_MANIFEST = 1 };

/* A ref as listed by ts_store_ref_list. */
struct ts_store_ref {
    char name[TS_STORE_REF_MAX + 1]; /* e.g. "heads/main" */
    uint8_t id[TS_STORE_ID_LEN];
};

/* Opens the store in dir, creating dir and its subdirectories if missing. o may be NULL. */
TS_MUST_CHECK ts_status ts_store_open(const char *dir, const struct ts_store_opts *o,
                                      struct ts_store **out, struct ts_err *err);
/* Frees the store; NULL is a no-op. Cannot fail: nothing is buffered. */
void ts_store_close(struct ts_store *s);

/* Writes the chunk data[0..len) (len <= TS_STORE_MAX_CHUNK) under the SHA-256 of its bytes,
 * which it returns in id. If a chunk of that name exists nothing is written and *existed is
 * true (existed may be NULL). Durable on TS_OK. On failure no file of that name was created
 * and the tmp file is removed. */
TS_MUST_CHECK ts_status ts_store_put(struct ts_store *s, const void *data, size_t len,
                                     uint8_t id[TS_STORE_ID_LEN], bool *existed,
                                     struct ts_err *err);
/* Reads chunk id into buf[0..cap), sets *len, and checks its header, its stored-bytes XXH3
 * and the SHA-256 of what it returns: TS_ECORRUPT naming the chunk otherwise. TS_ENOTFOUND if
 * absent; TS_EINVAL if cap is too small (the message says how much is needed). */
TS_MUST_CHECK ts_status ts_store_get(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN],
                                     void *buf, size_t cap, size_t *len, struct ts_err *err);
/* Whether chunk id exists (its content is not checked). */
bool ts_store_has(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN]);

/* Number of chunks ts_store_put_blob cuts len bytes into: ceil(len / chunk); 0 for len 0. */
size_t ts_store_nchunks(size_t len, size_t chunk);
/* Cuts data[0..len) into chunks of `chunk` bytes (0: TS_STORE_DEFAULT_CHUNK; the last may be
 * shorter) and puts them on the store's worker threads. ids (caller-allocated,
 * ts_store_nchunks(len, chunk) entries) receives their ids in order; *bytes_written (may be
 * NULL) the bytes of chunk files actually written, headers included. Durable on TS_OK: the
 * directory fsyncs are batched, one per fan-out directory touched, at the end. On failure
 * some chunks may have been written (each is complete and valid) and ids is unspecified. */
TS_MUST_CHECK ts_status ts_store_put_blob(struct ts_store *s, const void *data, size_t len,
                                          size_t chunk, uint8_t (*ids)[TS_STORE_ID_LEN],
                                          uint64_t *bytes_written, struct ts_err *err);
/* Reads the blob written by ts_store_put_blob(len, chunk) back into buf[0..len), every chunk
 * checked as in ts_store_get and required to have its expected length. */
TS_MUST_CHECK ts_status ts_store_get_blob(struct ts_store *s,
                                          const uint8_t (*ids)[TS_STORE_ID_LEN], void *buf,
                                          size_t len, size_t chunk, struct ts_err *err);

/* Stores data[0..len) uncompressed under manifests/, named by its SHA-256 (returned in id),
 * with its kind recorded; written as ts_store_put writes chunks. */
TS_MUST_CHECK ts_status ts_store_put_object(struct ts_store *s, enum ts_store_kind kind,
                                            const void *data, size_t len,
                                            uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);
/* Reads object id of the given kind; *data is malloc'd (caller frees with free()), *len set.
 * TS_ENOTFOUND, TS_ECORRUPT (also when the stored kind differs). */
TS_MUST_CHECK ts_status ts_store_get_object(struct ts_store *s, enum ts_store_kind kind,
                                            const uint8_t id[TS_STORE_ID_LEN], void **data,
                                            size_t *len, struct ts_err *err);

/* A valid ref name: "heads/" or "tags/" then components of [A-Za-z0-9._-] separated by '/',
 * no empty, "." or ".." component, no component starting with '.' or ending in ".lock",
 * at most TS_STORE_REF_MAX bytes. */
bool ts_store_ref_valid(const char *name);
/* Points ref `name` at id, atomically and durably. expect_old NULL: whatever it was;
 * expect_old all zeros: only if the ref does not exist; otherwise only if it points at
 * *expect_old. A lost compare-and-swap is TS_ESTATE (the message names the current value).
 * Serialized with every other ref update on the store by flock(dir/refs.lock). */
TS_MUST_CHECK ts_status ts_store_ref_set(struct ts_store *s, const char *name,
                                         const uint8_t id[TS_STORE_ID_LEN],
                                         const uint8_t *expect_old, struct ts_err *err);
/* Reads ref `name`: TS_ENOTFOUND if absent, TS_ECORRUPT if its file is not one hex id. */
TS_MUST_CHECK ts_status ts_store_ref_get(struct ts_store *s, const char *name,
                                         uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);
/* Deletes ref `name` (expect_old as in ts_store_ref_set, zeros not allowed). TS_ENOTFOUND. */
TS_MUST_CHECK ts_status ts_store_ref_delete(struct ts_store *s, const char *name,
                                            const uint8_t *expect_old, struct ts_err *err);
/* Lists the refs whose name starts with prefix ("" or NULL: all), sorted by name. *refs is
 * malloc'd (caller frees with free(); NULL when *n is 0). */
TS_MUST_CHECK ts_status ts_store_ref_list(struct ts_store *s, const char *prefix,
                                          struct ts_store_ref **refs, size_t *n,
                                          struct ts_err *err);

/* HEAD names the current branch ("heads/main" when the file is absent), as git's does:
 * snapshots that name no branch go to it. head_set writes it crash-safely under the refs
 * lock; it must be a valid "heads/..." name. The branch need not exist yet. */
TS_MUST_CHECK ts_status ts_store_head_get(struct ts_store *s, char name[TS_STORE_REF_MAX + 1],
                                          struct ts_err *err);
TS_MUST_CHECK ts_status ts_store_head_set(struct ts_store *s, const char *name,
                                          struct ts_err *err);
/* The one object whose hex id starts with prefix (4..64 hex digits, either case):
 * TS_ENOTFOUND if none, TS_EINVAL if several (the message says to give more digits). */
TS_MUST_CHECK ts_status ts_store_object_find(struct ts_store *s, const char *prefix,
                                             uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);

/* Removes every chunk file whose id is not in live[0..nlive) (the caller computes
 * reachability from the manifests; live is borrowed, need not be sorted, may repeat), and
 * files in tmp/ last modified more than tmp_grace_s seconds ago (0: all; only when no writer
 * runs). Objects under manifests/ are not collected. stats may be NULL. */
TS_MUST_CHECK ts_status ts_store_gc(struct ts_store *s, const uint8_t (*live)[TS_STORE_ID_LEN],
                                    size_t nlive, unsigned tmp_grace_s,
                                    struct ts_store_stats *stats, struct ts_err *err);

/* Called by fsck for each bad file: what is "chunk" or "manifest", name the file's name (the
 * hex id, or whatever stray name it has), why the error that names it. */
typedef void (*ts_store_fsck_cb)(void *ctx, const char *what, const char *name,
                                 const struct ts_err *why);
/* Re-reads and re-hashes every chunk and object; calls cb (may be NULL) for each bad one.
 * Returns TS_OK when the walk completed, bad ones or not (count them in stats->bad); an error
 * only if the walk itself failed (then cb is not called for the rest). */
TS_MUST_CHECK ts_status ts_store_fsck(struct ts_store *s, ts_store_fsck_cb cb, void *ctx,
                                      struct ts_store_stats *stats, struct ts_err *err);

/* Lowercase hex of id into hex[TS_STORE_HEX_LEN + 1]; returns hex. */
char *ts_store_hex(const uint8_t id[TS_STORE_ID_LEN], char hex[TS_STORE_HEX_LEN + 1]);
/* Parses 64 hex digits (either case); false if it is not exactly that. */
bool ts_store_unhex(const char *hex, uint8_t id[TS_STORE_ID_LEN]);

#endif
