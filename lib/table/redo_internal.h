/* redo_internal.h - what the redo log's two files share; not public (redo.h is).
 *
 * redo.c is the log: records, the writer thread, generations, open and close, the replay,
 * blobs. redo_table.c is the tables' side: a table attached, its steps' records and images,
 * a replayed record applied to a table, a table's wait, and the checkpoint (every attached
 * table's image into a new generation). A record (struct redo_item) is malloc'ed by
 * redo_rec_new and belongs to the queue once queued (the writer frees it). */
#ifndef TS_TABLE_REDO_INTERNAL_H
#define TS_TABLE_REDO_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "table/redo.h"
#include "util/err.h"

#define MAGIC 0x4f445254u          /* "TRDO" */
#define IMAGE_MAGIC 0x4d495254u    /* "TRIM" */
#define IMAGE_HEAD 24u
#define IMAGE_CHUNK (4u << 20)     /* bytes of records an image writes at a time */
#define IMAGE_TMP "image-new-"     /* an image being written (removed at open) */
#define HEAD 40u
#define TAIL 8u
#define PREFIX "redo-"
#define SUFFIX ".log"

enum op { OP_DATA, OP_ROTATE, OP_CARRY, OP_CUT };

struct redo_item {
    struct redo_item *next;
    enum op op;
    uint64_t seq;                  /* OP_DATA: the record's number */
    uint64_t gen;                  /* OP_ROTATE: the generation to start; OP_CUT: the oldest
                                    * to keep; OP_CARRY: blobs older than this are carried */
    size_t len;
    uint8_t buf[];                 /* OP_DATA: the record */
};

/* Where a key's last blob lies (the writer's, ts_redo_put). */
struct blob_at {
    char key[TS_REDO_KEY_MAX + 1];
    uint64_t gen;
    off_t off;
    size_t len;
};

struct ts_redo {
    char dir[PATH_MAX];
    pthread_mutex_t attach_mu;
    struct ts_table *tables;       /* attached (ts_table.redo_next), under attach_mu */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct redo_item *head, *tail;
    uint64_t seq;                  /* records queued */
    uint64_t synced;               /* records on the disk */
    uint64_t gen;                  /* the generation records queued now go to */
    _Atomic uint64_t bytes;        /* written to the writer's generation */
    uint64_t syncs;
    char failure[256];
    bool sync_failed;              /* final */
    unsigned waiters;              /* in redo_wait_seq: the writer syncs at once */
    bool stop;
    pthread_t writer;
    bool started;
    int fd;                        /* the writer's generation (writer only, after open) */
    int lock_fd;                   /* DIR/redo.lock, flock'ed: one process a log */
    _Atomic uint64_t images;       /* image files made */
    /* The writer's: the generation it writes, and where each blob key's last blob is. */
    uint64_t wgen;
    struct blob_at *blobs;
    size_t nblobs, blobs_cap;
    uint64_t *old;                 /* the generations found at open, ascending */
    size_t nold;
    uint64_t torn;
};

/* DIR/image-<gen>-<k>.rows into buf. */
void redo_image_path(const struct ts_redo *redo, uint64_t gen, uint64_t k, char *buf,
                     size_t len);
/* fsync of a directory (its entries), errors ignored as the tier does. */
void redo_sync_dir(const char *dir);
/* A record of kind under key with room for n records of rec bytes; NULL without memory.
 * The caller fills the payload and queues it. */
struct redo_item *redo_rec_new(const char *key, enum ts_redo_kind kind, uint64_t step,
                               size_t rec, size_t n);
/* it at the queue's end, the writer woken (the log's mu held). */
void redo_enqueue(struct ts_redo *redo, struct redo_item *it);
/* Seals it (its checksum) and queues it (the log's mu held); its number. */
uint64_t redo_seal_queue(struct ts_redo *redo, struct redo_item *it);
/* write(2) until done; false with *e the errno. */
bool redo_write_all(int fd, const uint8_t *p, size_t len, int *e);
/* Waits up to ms for records up to seq to be synced: TS_EIO (the log's failure),
 * TS_ETIMEDOUT. */
ts_status redo_wait_seq(struct ts_redo *redo, uint64_t seq, int ms, struct ts_err *err);

#endif
