/* state.h - the master's state directory (tessera-master --state-dir): files a restarted
 * master reads back, each replaced whole and atomically (written to a temporary file,
 * fsync'd, renamed over the old one, the directory fsync'd), so a kill at any instruction
 * leaves the old file or the new one, never a mix.
 *
 * Why a layer of its own: the tables that keep a file here (restart.h: "clock" and "state";
 * workq.h: "work"; tasks.h: "tasks") call down into it, and it knows none of them: it moves
 * bytes. A module writes its file when it must be on disk before a reply (master_state_put),
 * or registers it with the saver (master_state_keep): a thread of this file's that asks the
 * module's encoder for the file's bytes every STATE_PERIOD_MS and writes them when they
 * differ from what it last wrote, and at once for master_state_sync. A lock (flock) on the
 * directory keeps a second master off it; temporaries a killed master left are swept at open.
 * Without a directory (no --state-dir) nothing is written and nothing is read back.
 * Ownership: struct master_state is embedded by its user (struct master); dir is copied.
 * Threads: put and get from any thread (a file's own module serialises its writes);
 * master_state_sync from any thread, and the saver, one thread of its own, take save_mu. */
#ifndef TS_MASTER_STATE_H
#define TS_MASTER_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define STATE_PERIOD_MS 100

struct master_state {
    char *dir;                  /* NULL: nothing is kept (no --state-dir) */
    int lock_fd;
    pthread_t saver;
    bool saving;
    pthread_mutex_t mu;         /* stop, cv, and the group commit's fields below */
    pthread_cond_t cv;
    bool stop;
    pthread_mutex_t save_mu;    /* one writer of the kept file at a time; last, last_len */
    /* The file the saver keeps (master_state_keep; NULL: none) and its encoder. */
    const char *kept;
    ts_status (*encode)(void *ctx, uint8_t **out, size_t *n, struct ts_err *err);
    void *ctx;
    void *last;                 /* the kept file's bytes as last written */
    size_t last_len;
    /* master_state_sync's group commit (under mu): syncs asked for so far, those a finished
     * write covered (each write is of the whole state as it was when it began, so it covers
     * every sync asked before then), its status, and whether one is being written. */
    uint64_t asked, covered;
    bool syncing;
    ts_status cover_st;
    struct ts_err cover_err;
    pthread_cond_t synced;
};

/* Opens (creating) dir and locks it; dir NULL: a master without durable state. TS_EEXIST if
 * another master holds it; TS_EIO naming the path otherwise. */
ts_status master_state_open(struct master_state *s, const char *dir,
                            struct ts_err *err) TS_MUST_CHECK;
/* Whether there is a directory (false: nothing is durable, put does nothing). */
bool master_state_durable_dir(const struct master_state *s);
/* A file, name, replaced whole and atomically with the n bytes at p (mode 0600: files may
 * hold the cluster's data-plane key); and a file's bytes (*out malloc'd, the caller frees it;
 * NULL when there is no such file or no directory). TS_EIO naming the path. */
ts_status master_state_put(struct master_state *s, const char *name, const void *p, size_t n,
                           struct ts_err *err) TS_MUST_CHECK;
ts_status master_state_get(struct master_state *s, const char *name, uint8_t **out, size_t *n,
                           struct ts_err *err) TS_MUST_CHECK;
/* The saver keeps file name (static storage) with what encode returns (*out malloc'd, *n
 * bytes; ctx as given): written whenever it differs from the last bytes written. Once, before
 * master_state_start. A failed encode or write is logged and tried again the next period. */
void master_state_keep(struct master_state *s, const char *name,
                       ts_status (*encode)(void *ctx, uint8_t **out, size_t *n,
                                           struct ts_err *err),
                       void *ctx);
/* Writes the kept file now if it differs from what was last written, and returns once it is
 * on disk: for a change that a restarted master must not forget once it is acknowledged (a
 * Deregister). Blocks for the write (an fsync or two); callers that ask while a write is on
 * its way wait for the next one, which one of them makes for all (a group commit). TS_OK without a dir or a kept file; TS_EIO naming the path,
 * TS_ENOMEM, or the encoder's error. */
ts_status master_state_sync(struct master_state *s, struct ts_err *err) TS_MUST_CHECK;
/* Starts the saver thread (nothing without a dir or a kept file). */
void master_state_start(struct master_state *s);
/* Stops the saver after a last save. */
void master_state_stop(struct master_state *s);
void master_state_close(struct master_state *s);

#endif
