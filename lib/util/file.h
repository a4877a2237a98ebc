/* file.h - replacing whole files atomically and durably.
 *
 * Why: the master's state, certificates and keys, port files and .npy exports must never be
 * read half-written, and what was written must survive a crash. This is the one way to do
 * it: each file goes to a temporary file in its own directory (so the rename cannot cross a
 * file system), is synced and closed, and is renamed over its name; then its directory is
 * synced, so the rename itself survives a crash. A reader sees the old bytes or the new, never
 * a mix. (lib/store keeps its own: its writes go through the store's injectable system calls,
 * which its fault tests drive.)
 *
 * Several files at once (ts_files_replace): every temporary is written before the first
 * rename, so a failure while writing (a full disk) replaces none of them; a rename that fails
 * (the directory changed under us) leaves the ones before it replaced, and the error names it.
 * Errors are TS_EIO naming the file and the system's reason ("No space left on device"), with
 * no temporary left behind.
 * Ownership: nothing is kept; the caller's buffers are only read.
 * Threads: safe; temporaries are named after the process and a counter. */
#ifndef TS_UTIL_FILE_H
#define TS_UTIL_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/* One file to write: head then body (either may be empty), with exactly mode whatever the
 * umask (0600 for a secret). */
struct ts_file_out {
    const char *path;
    const void *head, *body;
    size_t head_len, body_len;
    mode_t mode;
};

ts_status ts_files_replace(const struct ts_file_out *f, size_t n, struct ts_err *err) TS_MUST_CHECK;
/* One file of len bytes at p. */
ts_status ts_file_replace(const char *path, const void *p, size_t len, mode_t mode,
                          struct ts_err *err) TS_MUST_CHECK;
/* Removes the temporaries (NAME.tmp.PID.N) that writers killed mid-write left in dir; returns
 * how many. Only for a directory no other writer can be at work in (the master's state
 * directory, under its lock). */
size_t ts_files_sweep(const char *dir);

#endif
