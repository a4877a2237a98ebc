/* redo.c - the tables' redo log (redo.h): records, the writer thread, generations and
 * checkpoints, the replay, and the tables' side (what push.c and capture.c log).
 *
 * A record on disk, host order (little-endian, as capture.c requires):
 *
 *     0  u32 magic "TRDO"     4  u16 kind       6  u16 key bytes   8  u32 record bytes
 *    12  u32 0               16  u64 step      24  u64 arg       32  u64 records n
 *    40  key, then n records, then u64 XXH3-64 of everything before it
 *
 * arg: a step's sweep cut; an image's number. An image's rows are not in the log but in a
 * file of their own, DIR/image-<generation>-<number>.rows (u32 magic "TRIM", u32 record
 * bytes, u64 rows, u64 step, the records ascending, u64 XXH3-64 of everything before it),
 * written and synced before its record is queued: so an image is in the log whole or not at
 * all, and a table's rows never pass through memory at once.
 *
 * Locks: attach_mu (the list of attached tables) -> a table's mu -> mu (the queue). The
 * writer takes mu only, and never while it writes; tables hand records under their own lock,
 * so each table's records are queued in the order its changes happened. */
#include "table/redo.h"
#include "table/internal.h"

#include "util/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

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

static void gen_path(const struct ts_redo *redo, uint64_t gen, char *buf, size_t len)
{
    snprintf(buf, len, "%s/" PREFIX "%016" PRIx64 SUFFIX, redo->dir, gen);
}

static void image_path(const struct ts_redo *redo, uint64_t gen, uint64_t k, char *buf,
                       size_t len)
{
    snprintf(buf, len, "%s/image-%016" PRIx64 "-%016" PRIx64 ".rows", redo->dir, gen, k);
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* ---- Records ---- */

static size_t rec_len(size_t keylen, size_t n, size_t rec)
{
    return HEAD + keylen + n * rec + TAIL;
}

/* A record of kind under key with room for n records of rec bytes; NULL without memory.
 * The caller fills the payload and queues it. */
static struct redo_item *rec_new(const char *key, enum ts_redo_kind kind, uint64_t step,
                                 size_t rec, size_t n)
{
    size_t keylen = strlen(key), len = rec_len(keylen, n, rec);
    struct redo_item *it = malloc(sizeof(*it) + len);
    uint32_t magic = MAGIC, rec32 = (uint32_t)rec, zero = 0;
    uint16_t k16 = (uint16_t)kind, kl16 = (uint16_t)keylen;
    uint64_t arg = 0, n64 = n;

    if (!it)
        return NULL;
    *it = (struct redo_item){ .op = OP_DATA, .len = len };
    memcpy(it->buf, &magic, 4);
    memcpy(it->buf + 4, &k16, 2);
    memcpy(it->buf + 6, &kl16, 2);
    memcpy(it->buf + 8, &rec32, 4);
    memcpy(it->buf + 12, &zero, 4);
    memcpy(it->buf + 16, &step, 8);
    memcpy(it->buf + 24, &arg, 8);
    memcpy(it->buf + 32, &n64, 8);
    memcpy(it->buf + HEAD, key, keylen);
    return it;
}

/* A record of kind for t with room for n of its records (mu held); NULL (t's log marked not
 * whole) without memory. */
static struct redo_item *item_new(struct ts_table *t, enum ts_redo_kind kind, uint64_t step,
                                  size_t n)
{
    struct redo_item *it = rec_new(t->redo_key, kind, step, ts_table_record_bytes(t), n);

    if (!it) {
        t->redo_lost = true;
        snprintf(t->redo_why, sizeof(t->redo_why), "a record of %zu rows: out of memory", n);
    }
    return it;
}

static uint8_t *item_payload(struct ts_table *t, struct redo_item *it)
{
    return it->buf + HEAD + strlen(t->redo_key);
}

static void queue(struct ts_redo *redo, struct redo_item *it)
{
    it->next = NULL;
    if (redo->tail)
        redo->tail->next = it;
    else
        redo->head = it;
    redo->tail = it;
    pthread_cond_signal(&redo->work);
}

/* Seals it (its checksum) and queues it (the log's mu held); its number. */
static uint64_t seal_queue(struct ts_redo *redo, struct redo_item *it)
{
    uint64_t sum = XXH3_64bits(it->buf, it->len - TAIL);

    memcpy(it->buf + it->len - TAIL, &sum, 8);
    it->seq = ++redo->seq;
    queue(redo, it);
    return it->seq;
}

/* it queued as t's latest record (t's mu and the log's mu held). */
static void redo_queue_locked(struct ts_table *t, struct redo_item *it)
{
    t->redo_seq = seal_queue(t->redo, it);
}

static void redo_queue(struct ts_table *t, struct redo_item *it)
{
    pthread_mutex_lock(&t->redo->mu);
    redo_queue_locked(t, it);
    pthread_mutex_unlock(&t->redo->mu);
}

/* ---- The writer ---- */

static bool write_all(int fd, const uint8_t *p, size_t len, int *e)
{
    while (len) {
        ssize_t w = write(fd, p, len);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            *e = w < 0 ? errno : ENOSPC;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}

static int open_gen(struct ts_redo *redo, uint64_t gen)
{
    char path[PATH_MAX + 64];

    gen_path(redo, gen, path, sizeof(path));
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
}

/* Removes the generations below keep (those found at open, and the writer's earlier ones). */
static void cut_below(struct ts_redo *redo, uint64_t keep)
{
    DIR *d = opendir(redo->dir);
    struct dirent *de;
    char path[PATH_MAX + 300];

    if (!d)
        return;
    while ((de = readdir(d))) {
        uint64_t g, k;
        char tail[8];

        if (((sscanf(de->d_name, PREFIX "%16" SCNx64 "%7s", &g, tail) == 2 &&
              !strcmp(tail, SUFFIX)) ||
             (sscanf(de->d_name, "image-%16" SCNx64 "-%16" SCNx64 "%7s", &g, &k, tail) == 3 &&
              !strcmp(tail, ".rows"))) && g < keep) {
            snprintf(path, sizeof(path), "%s/%s", redo->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
    sync_dir(redo->dir);
}

/* The key of record buf (its kind's), into key. */
static enum ts_redo_kind rec_key(const uint8_t *buf, char key[TS_REDO_KEY_MAX + 1])
{
    uint16_t kind, kl;

    memcpy(&kind, buf + 4, 2);
    memcpy(&kl, buf + 6, 2);
    memcpy(key, buf + HEAD, kl);
    key[kl] = '\0';
    return (enum ts_redo_kind)kind;
}

static struct blob_at *blob_find(struct ts_redo *redo, const char *key)
{
    for (size_t i = 0; i < redo->nblobs; i++)
        if (!strcmp(redo->blobs[i].key, key))
            return &redo->blobs[i];
    return NULL;
}

/* A blob written at `at` is its key's last; a drop forgets its key's. An errno. */
static int blob_note(struct ts_redo *redo, const struct redo_item *it, off_t at)
{
    char key[TS_REDO_KEY_MAX + 1];
    enum ts_redo_kind kind = rec_key(it->buf, key);
    struct blob_at *b;

    if (kind != TS_REDO_BLOB && kind != TS_REDO_DROP)
        return 0;
    b = blob_find(redo, key);   /* a scan: a shard has hundreds of partitions, not more */
    if (kind == TS_REDO_DROP) {
        if (b)
            *b = redo->blobs[--redo->nblobs];
        return 0;
    }
    if (!b) {
        if (redo->nblobs == redo->blobs_cap) {
            size_t cap = redo->blobs_cap ? 2 * redo->blobs_cap : 16;
            struct blob_at *v = realloc(redo->blobs, cap * sizeof(*v));

            if (!v)
                return ENOMEM;
            redo->blobs = v;
            redo->blobs_cap = cap;
        }
        b = &redo->blobs[redo->nblobs++];
        snprintf(b->key, sizeof(b->key), "%s", key);
    }
    b->gen = redo->wgen;
    b->off = at;
    b->len = it->len;
    return 0;
}

/* Every blob key's last blob written in a generation below gen, copied into the one being
 * written (a checkpoint, before the older ones go). An errno. */
static int carry(struct ts_redo *redo, uint64_t gen, bool *unsynced)
{
    char path[PATH_MAX + 64];

    for (size_t i = 0; i < redo->nblobs; i++) {
        struct blob_at *b = &redo->blobs[i];
        uint8_t *buf;
        off_t at;
        int fd, e = 0;

        if (b->gen >= gen)
            continue;
        gen_path(redo, b->gen, path, sizeof(path));
        if (!(buf = malloc(b->len)))
            return ENOMEM;
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
            pread(fd, buf, b->len, b->off) != (ssize_t)b->len)
            e = errno ? errno : EIO;
        if (fd >= 0)
            close(fd);
        at = lseek(redo->fd, 0, SEEK_END);
        if (!e && !write_all(redo->fd, buf, b->len, &e) && at >= 0 && ftruncate(redo->fd, at))
            e = errno;
        free(buf);
        if (e)
            return e;
        redo->bytes += b->len;
        *unsynced = true;
        b->gen = redo->wgen;
        b->off = at;
    }
    return 0;
}

/* Does one item; an errno (0: done). A record not written whole is cut off again. */
static int do_item(struct ts_redo *redo, const struct redo_item *it, bool *unsynced)
{
    int e = 0, fd;

    switch (it->op) {
    case OP_DATA: {
        off_t at = lseek(redo->fd, 0, SEEK_END);

        if (!write_all(redo->fd, it->buf, it->len, &e)) {
            if (at >= 0 && ftruncate(redo->fd, at))
                e = errno;
            return e;
        }
        redo->bytes += it->len;
        *unsynced = true;
        return blob_note(redo, it, at);
    }
    case OP_CARRY:
        return carry(redo, it->gen, unsynced);
    case OP_ROTATE:
        if (fdatasync(redo->fd))
            return -errno;
        *unsynced = false;
        if ((fd = open_gen(redo, it->gen)) < 0)
            return errno;
        close(redo->fd);
        redo->fd = fd;
        redo->wgen = it->gen;
        redo->bytes = 0;
        sync_dir(redo->dir);
        return 0;
    case OP_CUT:
        if (*unsynced && fdatasync(redo->fd))
            return -errno;
        *unsynced = false;
        cut_below(redo, it->gen);
        return 0;
    }
    return 0;
}

/* A failure, said the way the tier says it (errno < 0: a failed sync, final). */
static void set_failure(struct ts_redo *redo, int e)
{
    const char *what = e < 0 ? "syncing" : "writing";

    snprintf(redo->failure, sizeof(redo->failure), "the redo log in %s: %s failed: %s%s",
             redo->dir, what, strerror(e < 0 ? -e : e),
             e < 0 ? " (final: start the shard again)" : "");
    if (e < 0)
        redo->sync_failed = true;
}

static void *writer_main(void *arg)
{
    struct ts_redo *redo = arg;

    pthread_mutex_lock(&redo->mu);
    for (;;) {
        struct redo_item *group, *it;
        bool unsynced = false;
        uint64_t seq = 0;
        int e = 0;

        while (!redo->head && !redo->stop)
            pthread_cond_wait(&redo->work, &redo->mu);
        if (!redo->head || redo->sync_failed)
            break;
        group = redo->head;        /* everything queued now: one sync for all of it */
        redo->head = redo->tail = NULL;
        pthread_mutex_unlock(&redo->mu);
        for (it = group; it && !(e = do_item(redo, it, &unsynced)); it = it->next)
            ;
        if (e >= 0 && unsynced && fdatasync(redo->fd))   /* what was written, synced */
            e = -errno;
        pthread_mutex_lock(&redo->mu);
        while (group != it) {      /* [group, it) are done */
            struct redo_item *next = group->next;

            if (group->op == OP_DATA)
                seq = group->seq;
            free(group);
            group = next;
        }
        if (e >= 0 && seq) {
            redo->synced = seq;
            redo->syncs++;
        }
        if (e) {
            if (it) {              /* it and those after it: first again */
                struct redo_item *end = it;

                while (end->next)
                    end = end->next;
                if (!(end->next = redo->head))
                    redo->tail = end;
                redo->head = it;
            }
            set_failure(redo, e);
            pthread_cond_broadcast(&redo->done);
            if (e < 0 || redo->stop)
                break;
            struct timespec ts;

            ts_abstime_ms(&ts, TS_REDO_RETRY_MS);
            pthread_cond_timedwait(&redo->work, &redo->mu, &ts);
            continue;
        }
        redo->failure[0] = '\0';
        pthread_cond_broadcast(&redo->done);
    }
    pthread_mutex_unlock(&redo->mu);
    return NULL;
}

/* ---- Open, close ---- */

static int cmp_gen(const void *a, const void *b)
{
    return table_cmp_u64(a, b);
}

/* The generations in dir, ascending, into redo->old. */
static ts_status list_gens(struct ts_redo *redo, struct ts_err *err)
{
    DIR *d = opendir(redo->dir);
    struct dirent *de;
    size_t cap = 0;

    if (!d)
        return ts_err_set(err, TS_EIO, "redo log %s: cannot read it: %s", redo->dir,
                          strerror(errno));
    while ((de = readdir(d))) {
        uint64_t g;
        char tail[8], path[PATH_MAX + 300];

        if (!strncmp(de->d_name, IMAGE_TMP, strlen(IMAGE_TMP))) {   /* a crash's, unnamed */
            snprintf(path, sizeof(path), "%s/%s", redo->dir, de->d_name);
            unlink(path);
            continue;
        }
        if (sscanf(de->d_name, PREFIX "%16" SCNx64 "%7s", &g, tail) != 2 ||
            strcmp(tail, SUFFIX))
            continue;
        if (redo->nold == cap) {
            uint64_t *v = realloc(redo->old, (cap = cap ? 2 * cap : 8) * sizeof(*v));

            if (!v) {
                closedir(d);
                return ts_err_set(err, TS_ENOMEM, "no memory to list the redo log");
            }
            redo->old = v;
        }
        redo->old[redo->nold++] = g;
    }
    closedir(d);
    if (redo->nold)
        qsort(redo->old, redo->nold, sizeof(*redo->old), cmp_gen);
    return TS_OK;
}

/* The bytes of p[0..len) that are whole records. */
static size_t whole(const uint8_t *p, size_t len)
{
    size_t at = 0;

    while (len - at >= HEAD + TAIL) {
        uint32_t magic, rec;
        uint16_t kl;
        uint64_t n, sum, size;

        memcpy(&magic, p + at, 4);
        memcpy(&kl, p + at + 6, 2);
        memcpy(&rec, p + at + 8, 4);
        memcpy(&n, p + at + 32, 8);
        if (magic != MAGIC || (rec && n > (len - at) / rec))
            break;
        size = rec_len(kl, n, rec);
        if (size > len - at)
            break;
        memcpy(&sum, p + at + size - TAIL, 8);
        if (sum != XXH3_64bits(p + at, size - TAIL))
            break;
        at += size;
    }
    return at;
}

/* The file's bytes mapped (NULL, *len 0 for an empty file). */
static ts_status map_file(const char *path, const uint8_t **out, size_t *len,
                          struct ts_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    void *p;

    *out = NULL;
    *len = 0;
    if (fd < 0 || fstat(fd, &sb)) {
        ts_status st = ts_err_set(err, TS_EIO, "redo log %s: %s", path, strerror(errno));

        if (fd >= 0)
            close(fd);
        return st;
    }
    if (sb.st_size && (p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) ==
                          MAP_FAILED) {
        close(fd);
        return ts_err_set(err, TS_EIO, "redo log %s: cannot map it: %s", path, strerror(errno));
    }
    if (sb.st_size) {
        *out = p;
        *len = (size_t)sb.st_size;
    }
    close(fd);
    return TS_OK;
}

/* The newest generation found cut back to its whole records (a crash's torn tail). */
static ts_status cut_torn(struct ts_redo *redo, struct ts_err *err)
{
    char path[PATH_MAX + 64];
    const uint8_t *p;
    size_t len, keep;
    ts_status st;
    int fd;

    if (!redo->nold)
        return TS_OK;
    gen_path(redo, redo->old[redo->nold - 1], path, sizeof(path));
    if ((st = map_file(path, &p, &len, err)))
        return st;
    keep = whole(p, len);
    if (p)
        munmap((void *)p, len);
    if (keep == len)
        return TS_OK;
    if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0 || ftruncate(fd, (off_t)keep) ||
        fsync(fd)) {
        st = ts_err_set(err, TS_EIO, "redo log %s: cannot cut its torn end: %s", path,
                        strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    close(fd);
    redo->torn = len - keep;
    return TS_OK;
}

/* One process a log: a second one's records would interleave with the first's. */
static ts_status lock_dir(struct ts_redo *redo, struct ts_err *err)
{
    char path[PATH_MAX + 64];

    snprintf(path, sizeof(path), "%s/redo.lock", redo->dir);
    if ((redo->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        return ts_err_set(err, TS_EIO, "redo log %s: cannot open redo.lock: %s", redo->dir,
                          strerror(errno));
    if (flock(redo->lock_fd, LOCK_EX | LOCK_NB))
        return ts_err_set(err, TS_EIO, "redo log %s: another process holds it (%s); give each "
                          "shard a directory of its own", redo->dir,
                          errno == EWOULDBLOCK ? "locked" : strerror(errno));
    return TS_OK;
}

static void redo_free(struct ts_redo *redo)
{
    while (redo->head) {
        struct redo_item *next = redo->head->next;

        free(redo->head);
        redo->head = next;
    }
    if (redo->fd >= 0)
        close(redo->fd);
    if (redo->lock_fd >= 0)
        close(redo->lock_fd);   /* lets the lock go */
    free(redo->blobs);
    free(redo->old);
    pthread_mutex_destroy(&redo->attach_mu);
    pthread_mutex_destroy(&redo->mu);
    pthread_cond_destroy(&redo->work);
    pthread_cond_destroy(&redo->done);
    free(redo);
}

ts_status ts_redo_open(const char *dir, struct ts_redo **out, struct ts_err *err)
{
    struct ts_redo *redo;
    struct stat sb;
    ts_status st;

    if (!dir || !*dir || strlen(dir) >= PATH_MAX)
        return ts_err_set(err, TS_EINVAL, "redo log: a directory is required, under %d bytes",
                          PATH_MAX);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "redo log %s: cannot create it: %s", dir,
                          strerror(errno));
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return ts_err_set(err, TS_EIO, "redo log %s: not a directory", dir);
    if (!(redo = calloc(1, sizeof(*redo))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the redo log");
    redo->fd = redo->lock_fd = -1;
    snprintf(redo->dir, sizeof(redo->dir), "%s", dir);
    pthread_mutex_init(&redo->attach_mu, NULL);
    pthread_mutex_init(&redo->mu, NULL);
    pthread_cond_init(&redo->work, NULL);
    pthread_cond_init(&redo->done, NULL);
    if ((st = lock_dir(redo, err)) || (st = list_gens(redo, err)) ||
        (st = cut_torn(redo, err))) {
        redo_free(redo);
        return st;
    }
    redo->gen = redo->wgen = redo->nold ? redo->old[redo->nold - 1] + 1 : 1;
    if ((redo->fd = open_gen(redo, redo->gen)) < 0) {
        st = ts_err_set(err, TS_EIO, "redo log %s: cannot create generation %" PRIu64 ": %s",
                        dir, redo->gen, strerror(errno));
        redo_free(redo);
        return st;
    }
    sync_dir(dir);
    if (pthread_create(&redo->writer, NULL, writer_main, redo)) {
        redo_free(redo);
        return ts_err_set(err, TS_EIO, "cannot start the redo log's writer thread");
    }
    redo->started = true;
    *out = redo;
    return TS_OK;
}

void ts_redo_close(struct ts_redo *redo)
{
    if (!redo)
        return;
    pthread_mutex_lock(&redo->attach_mu);   /* tables still attached log nothing more */
    for (struct ts_table *t = redo->tables; t; t = t->redo_next) {
        pthread_mutex_lock(&t->mu);
        t->redo = NULL;
        pthread_mutex_unlock(&t->mu);
    }
    redo->tables = NULL;
    pthread_mutex_unlock(&redo->attach_mu);
    pthread_mutex_lock(&redo->mu);
    redo->stop = true;
    pthread_cond_broadcast(&redo->work);
    pthread_mutex_unlock(&redo->mu);
    if (redo->started)
        pthread_join(redo->writer, NULL);
    redo_free(redo);
}

void ts_redo_stats(struct ts_redo *redo, struct ts_redo_stats *out)
{
    pthread_mutex_lock(&redo->mu);
    *out = (struct ts_redo_stats){ .generation = redo->gen, .bytes = redo->bytes,
                                   .records = redo->seq, .synced = redo->synced,
                                   .syncs = redo->syncs };
    snprintf(out->failure, sizeof(out->failure), "%s", redo->failure);
    pthread_mutex_unlock(&redo->mu);
}

/* ---- Replay ---- */

/* An image's record (r: its key, step and number): its file checked and handed to fn. */
static ts_status replay_image(struct ts_redo *redo, uint64_t gen, struct ts_redo_rec *r,
                              ts_status (*fn)(void *, const struct ts_redo_rec *,
                                              struct ts_err *),
                              void *ctx, struct ts_redo_replayed *out, struct ts_err *err)
{
    char path[PATH_MAX + 64];
    const uint8_t *p;
    size_t len;
    uint32_t magic = 0, rec = 0;
    uint64_t n = 0, step = 0, sum = 0;
    ts_status st;

    image_path(redo, gen, r->cut, path, sizeof(path));
    if (map_file(path, &p, &len, &(struct ts_err){ 0 }))
        return ts_err_set(err, TS_ECORRUPT, "redo log: the image of '%s' the log names is "
                          "missing: %s", r->key, path);
    if (len >= IMAGE_HEAD + TAIL) {
        memcpy(&magic, p, 4);
        memcpy(&rec, p + 4, 4);
        memcpy(&n, p + 8, 8);
        memcpy(&step, p + 16, 8);
        memcpy(&sum, p + len - TAIL, 8);
    }
    if (len < IMAGE_HEAD + TAIL || magic != IMAGE_MAGIC || step != r->step ||
        (rec && n > (len - IMAGE_HEAD - TAIL) / rec) ||
        IMAGE_HEAD + n * rec + TAIL != len || sum != XXH3_64bits(p, len - TAIL)) {
        st = ts_err_set(err, TS_ECORRUPT, "redo log %s: the image of '%s' fails its check",
                        path, r->key);
    } else {
        r->rec = rec;
        r->n = n;
        r->records = n ? p + IMAGE_HEAD : NULL;
        st = fn(ctx, r, err);
        out->bytes += len;
    }
    if (p)
        munmap((void *)p, len);
    return st;
}

static ts_status replay_file(struct ts_redo *redo, uint64_t gen,
                             ts_status (*fn)(void *, const struct ts_redo_rec *,
                                             struct ts_err *),
                             void *ctx, struct ts_redo_replayed *out, struct ts_err *err)
{
    char path[PATH_MAX + 64], key[TS_REDO_KEY_MAX + 1];
    const uint8_t *p;
    size_t len, at = 0, good;
    ts_status st;

    gen_path(redo, gen, path, sizeof(path));
    if ((st = map_file(path, &p, &len, err)))
        return st;
    good = whole(p, len);
    if (good != len) {
        st = ts_err_set(err, TS_ECORRUPT, "redo log %s: the record at byte %zu fails its "
                        "checksum (only the newest generation may end torn)", path, good);
        goto out;
    }
    while (at < len) {
        struct ts_redo_rec r = { 0 };
        uint16_t kind, kl;
        uint32_t rec;
        uint64_t n;

        memcpy(&kind, p + at + 4, 2);
        memcpy(&kl, p + at + 6, 2);
        memcpy(&rec, p + at + 8, 4);
        memcpy(&r.step, p + at + 16, 8);
        memcpy(&r.cut, p + at + 24, 8);
        memcpy(&n, p + at + 32, 8);
        memcpy(key, p + at + HEAD, kl);
        key[kl] = '\0';
        r.kind = (enum ts_redo_kind)kind;
        r.key = key;
        r.rec = rec;
        r.n = n;
        r.records = n ? p + at + HEAD + kl : NULL;
        if (r.kind == TS_REDO_IMAGE) {
            st = replay_image(redo, gen, &r, fn, ctx, out, err);
        } else {
            st = fn(ctx, &r, err);
        }
        if (st)
            goto out;
        out->records++;
        at += rec_len(kl, n, rec);
    }
    out->files++;
    out->bytes += len;
out:
    if (p)
        munmap((void *)p, len);
    return st;
}

ts_status ts_redo_replay(struct ts_redo *redo,
                         ts_status (*fn)(void *ctx, const struct ts_redo_rec *r,
                                         struct ts_err *err),
                         void *ctx, struct ts_redo_replayed *out, struct ts_err *err)
{
    struct ts_redo_replayed got = { .torn = redo->torn };
    ts_status st = TS_OK;

    for (size_t i = 0; i < redo->nold && !st; i++)
        st = replay_file(redo, redo->old[i], fn, ctx, &got, err);
    if (out)
        *out = got;
    return st;
}

ts_status ts_table_redo_apply(struct ts_table *t, const struct ts_redo_rec *r,
                              struct ts_err *err)
{
    ts_status st = TS_OK;

    if (t->redo)
        return ts_err_set(err, TS_ESTATE, "table '%s': a replay goes into a table not "
                          "attached to a log", t->name);
    if (r->n && r->rec != ts_table_record_bytes(t))
        return ts_err_set(err, TS_ECORRUPT, "table '%s': the redo log's records are %zu bytes, "
                          "the table's %zu (another dim or optimizer)", t->name, r->rec,
                          ts_table_record_bytes(t));
    switch (r->kind) {
    case TS_REDO_IMAGE:
        ts_table_reset(t);
        if ((st = ts_table_load(t, r->records, r->n, NULL, NULL, err)) ||
            (st = ts_table_set_step(t, r->step, err)))
            return st;
        pthread_mutex_lock(&t->mu);
        t->lost_dirty = true;      /* the next capture is full */
        pthread_mutex_unlock(&t->mu);
        return TS_OK;
    case TS_REDO_DROP:
        return TS_OK;
    case TS_REDO_STEP:
        break;
    default:
        return ts_err_set(err, TS_ECORRUPT, "table '%s': a redo record of unknown kind %d",
                          t->name, (int)r->kind);
    }
    pthread_mutex_lock(&t->mu);
    if (table_async(t) || t->npushed || t->acc.n || r->step != t->step)
        st = ts_err_set(err, TS_ECORRUPT, "table '%s': the redo log's step %" PRIu64 " does "
                        "not follow the table's %" PRIu64, t->name, r->step, t->step);
    else if (!(st = table_load_locked(t, r->records, r->n, NULL, NULL, err))) {
        if (r->cut)
            table_expire(t, r->cut);
        t->step = r->step + 1;
        t->prev.valid = false;     /* no version before: as after a restore */
        t->lost_dirty = true;      /* the next capture is full */
        table_init_forget(t);
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* ---- The tables' side (t->mu held) ---- */

static void redo_drop(struct ts_table *t)
{
    struct redo_item *it;

    if (t->redo && (it = item_new(t, TS_REDO_DROP, 0, 0)))
        redo_queue(t, it);
}

struct redo_item *table_redo_step_begin(struct ts_table *t, size_t n)
{
    return t->redo ? item_new(t, TS_REDO_STEP, t->step, n) : NULL;
}

void table_redo_step_row(struct ts_table *t, struct redo_item *it, size_t k, struct row *w)
{
    if (it)
        table_record_put(t, w, item_payload(t, it) + k * ts_table_record_bytes(t));
}

void table_redo_step_end(struct ts_table *t, struct redo_item *it, uint64_t cut)
{
    if (!it)
        return;
    memcpy(it->buf + 24, &cut, 8);
    redo_queue(t, it);
}

/* The rows ids[0..n) of t, as records, and the file's checksum, into fd. */
static ts_status image_rows(struct ts_table *t, int fd, const uint64_t *ids, size_t n,
                            XXH3_state_t *xs, const char *path, struct ts_err *err)
{
    size_t rb = ts_table_record_bytes(t), chunk = IMAGE_CHUNK / rb ? IMAGE_CHUNK / rb : 1;
    uint8_t *buf = malloc((n < chunk ? n : chunk) * rb + 1);
    ts_status st = TS_OK;
    int e;

    if (!buf)
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory for its image", t->name);
    for (size_t at = 0; at < n && !st; at += chunk) {
        size_t m = n - at < chunk ? n - at : chunk;

        if ((st = table_records(t, ids + at, m, buf, err)))
            break;
        XXH3_64bits_update(xs, buf, m * rb);
        if (!write_all(fd, buf, m * rb, &e))
            st = ts_err_set(err, TS_EIO, "redo log: writing %s: %s", path, strerror(e));
    }
    free(buf);
    return st;
}

/* t's image (every row, its step) in a file of its own, synced, then its record queued
 * (t->mu held): the table as it is now, whole, for a replay. The file is written under a
 * name of its own and named after the generation its record goes to as the record is
 * queued, so that a checkpoint's new generation in between cannot part the two. */
static ts_status image(struct ts_table *t, struct ts_err *err)
{
    struct ts_redo *redo = t->redo;
    uint64_t *ids = NULL, k = atomic_fetch_add(&redo->images, 1) + 1, n = t->rows.n;
    uint32_t head32[2] = { IMAGE_MAGIC, (uint32_t)ts_table_record_bytes(t) };
    char tmp[PATH_MAX + 64], path[PATH_MAX + 64];
    struct redo_item *it;
    XXH3_state_t xs;
    uint64_t sum;
    ts_status st = TS_OK;
    int fd, e;

    snprintf(tmp, sizeof(tmp), "%s/" IMAGE_TMP "%016" PRIx64 ".rows", redo->dir, k);
    if (!(it = item_new(t, TS_REDO_IMAGE, t->step, 0)))
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory for its image", t->name);
    memcpy(it->buf + 24, &k, 8);
    if (n && (st = rows_sorted_ids(&t->rows, &ids, err))) {
        free(it);
        return st;
    }
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        st = ts_err_set(err, TS_EIO, "redo log: creating %s: %s", tmp, strerror(errno));
        goto out;
    }
    XXH3_64bits_reset(&xs);
    XXH3_64bits_update(&xs, head32, 8);
    XXH3_64bits_update(&xs, &n, 8);
    XXH3_64bits_update(&xs, &t->step, 8);
    if (!write_all(fd, (const uint8_t *)head32, 8, &e) ||
        !write_all(fd, (const uint8_t *)&n, 8, &e) ||
        !write_all(fd, (const uint8_t *)&t->step, 8, &e))
        st = ts_err_set(err, TS_EIO, "redo log: writing %s: %s", tmp, strerror(e));
    if (!st)
        st = image_rows(t, fd, ids, n, &xs, tmp, err);
    sum = XXH3_64bits_digest(&xs);
    if (!st && !write_all(fd, (const uint8_t *)&sum, 8, &e))
        st = ts_err_set(err, TS_EIO, "redo log: writing %s: %s", tmp, strerror(e));
    if (!st && fdatasync(fd))
        st = ts_err_set(err, TS_EIO, "redo log: syncing %s: %s", tmp, strerror(errno));
    close(fd);
    if (!st) {
        pthread_mutex_lock(&redo->mu);
        image_path(redo, redo->gen, k, path, sizeof(path));
        if (rename(tmp, path)) {
            st = ts_err_set(err, TS_EIO, "redo log: naming %s: %s", path, strerror(errno));
        } else {
            sync_dir(redo->dir);
            redo_queue_locked(t, it);
            it = NULL;
        }
        pthread_mutex_unlock(&redo->mu);
    }
    if (st) {
        unlink(tmp);
        goto out;
    }
    t->redo_lost = false;
    t->redo_restoring = false;
out:
    free(it);
    free(ids);
    return st;
}

void table_redo_restoring(struct ts_table *t)
{
    if (t->redo)
        t->redo_restoring = true;
}

void table_redo_restored(struct ts_table *t)
{
    struct ts_err err = { 0 };

    if (t->redo && image(t, &err)) {
        t->redo_lost = true;
        snprintf(t->redo_why, sizeof(t->redo_why), "its restore's image: %s", err.msg);
    }
}

ts_status ts_table_redo(struct ts_table *t, struct ts_redo *redo, const char *key,
                        struct ts_err *err)
{
    ts_status st = TS_OK;
    size_t kl = key ? strlen(key) : 0;

    if (table_async(t))
        return ts_err_set(err, TS_ENOTSUP, "table '%s': a redo log of a table in an ssp or asp "
                          "job is not built (bsp only)", t->name);
    if (!kl || kl > TS_REDO_KEY_MAX)
        return ts_err_set(err, TS_EINVAL, "key: 1 to %d bytes", TS_REDO_KEY_MAX);
    pthread_mutex_lock(&redo->attach_mu);
    for (struct ts_table *o = redo->tables; o; o = o->redo_next)
        if (!strcmp(o->redo_key, key)) {
            st = ts_err_set(err, TS_EEXIST, "key: '%s' is attached to the redo log already",
                            key);
            break;
        }
    pthread_mutex_lock(&t->mu);
    if (!st && t->redo)
        st = ts_err_set(err, TS_ESTATE, "table '%s': attached to a redo log already", t->name);
    if (!st) {
        t->redo = redo;
        memcpy(t->redo_key, key, kl + 1);
        if ((st = image(t, err)))
            t->redo = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    if (!st) {
        t->redo_next = redo->tables;
        redo->tables = t;
    }
    pthread_mutex_unlock(&redo->attach_mu);
    return st;
}

void table_redo_detach(struct ts_table *t)
{
    struct ts_redo *redo = t->redo;

    if (!redo)
        return;
    pthread_mutex_lock(&redo->attach_mu);
    for (struct ts_table **p = &redo->tables; *p; p = &(*p)->redo_next)
        if (*p == t) {
            *p = t->redo_next;
            break;
        }
    pthread_mutex_lock(&t->mu);
    redo_drop(t);
    t->redo = NULL;
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_unlock(&redo->attach_mu);
}

static ts_status wait_seq(struct ts_redo *redo, uint64_t seq, int ms, struct ts_err *err)
{
    struct timespec ts;
    ts_status st = TS_OK;

    ts_abstime_ms(&ts, ms);
    pthread_mutex_lock(&redo->mu);
    while (redo->synced < seq && !st) {
        if (redo->failure[0])
            st = ts_err_set(err, TS_EIO, "%s", redo->failure);
        else if (pthread_cond_timedwait(&redo->done, &redo->mu, &ts) == ETIMEDOUT &&
                 redo->synced < seq)
            st = ts_err_set(err, TS_ETIMEDOUT, "the redo log in %s did not sync within %d ms",
                            redo->dir, ms);
    }
    pthread_mutex_unlock(&redo->mu);
    return st;
}

ts_status ts_table_redo_wait(struct ts_table *t, int ms, struct ts_err *err)
{
    struct ts_redo *redo;
    uint64_t seq;
    ts_status st = TS_OK;

    pthread_mutex_lock(&t->mu);
    redo = t->redo;
    seq = t->redo_seq;
    if (redo && t->redo_lost)
        st = ts_err_set(err, TS_ENOMEM, "table '%s': the redo log is not whole for it until "
                        "the next checkpoint: %s", t->name, t->redo_why);
    pthread_mutex_unlock(&t->mu);
    return st || !redo ? st : wait_seq(redo, seq, ms, err);
}

ts_status ts_redo_checkpoint(struct ts_redo *redo, struct ts_err *err)
{
    struct redo_item *rot = malloc(sizeof(*rot)), *cut = malloc(sizeof(*cut));
    struct redo_item *cry = malloc(sizeof(*cry));
    ts_status st = TS_OK;
    uint64_t gen;

    if (!rot || !cut || !cry) {
        free(rot);
        free(cut);
        free(cry);
        return ts_err_set(err, TS_ENOMEM, "no memory for a checkpoint of the redo log");
    }
    pthread_mutex_lock(&redo->attach_mu);
    pthread_mutex_lock(&redo->mu);   /* records that see the new generation go after this */
    gen = ++redo->gen;
    *rot = (struct redo_item){ .op = OP_ROTATE, .gen = gen };
    queue(redo, rot);
    pthread_mutex_unlock(&redo->mu);
    for (struct ts_table *t = redo->tables; t && !st; t = t->redo_next) {
        pthread_mutex_lock(&t->mu);
        if ((st = image(t, err)))
            ts_err_prefix(err, "checkpoint");
        pthread_mutex_unlock(&t->mu);
    }
    if (!st) {   /* the blobs carried over; the older generations go once that is synced */
        *cry = (struct redo_item){ .op = OP_CARRY, .gen = gen };
        *cut = (struct redo_item){ .op = OP_CUT, .gen = gen };
        pthread_mutex_lock(&redo->mu);
        queue(redo, cry);
        queue(redo, cut);
        pthread_mutex_unlock(&redo->mu);
    } else {
        free(cut);
        free(cry);
    }
    pthread_mutex_unlock(&redo->attach_mu);
    return st;
}

/* ---- Blobs ---- */

ts_status ts_redo_put(struct ts_redo *redo, const char *key, uint64_t version,
                      const struct iovec *iov, int iovcnt, uint64_t *seq, struct ts_err *err)
{
    size_t kl = key ? strlen(key) : 0, len = 0;
    struct redo_item *it;
    uint8_t *out;

    if (!kl || kl > TS_REDO_KEY_MAX)
        return ts_err_set(err, TS_EINVAL, "key: 1 to %d bytes", TS_REDO_KEY_MAX);
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (!(it = rec_new(key, TS_REDO_BLOB, version, 1, len)))
        return ts_err_set(err, TS_ENOMEM, "redo log: no memory for a blob of %zu bytes", len);
    out = it->buf + HEAD + kl;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(out, iov[i].iov_base, iov[i].iov_len);
        out += iov[i].iov_len;
    }
    pthread_mutex_lock(&redo->mu);
    *seq = seal_queue(redo, it);
    pthread_mutex_unlock(&redo->mu);
    return TS_OK;
}

void ts_redo_forget(struct ts_redo *redo, const char *key)
{
    struct redo_item *it = rec_new(key, TS_REDO_DROP, 0, 1, 0);

    if (!it)
        return;   /* the blob is replayed, and its key's owner drops it again */
    pthread_mutex_lock(&redo->mu);
    seal_queue(redo, it);
    pthread_mutex_unlock(&redo->mu);
}

ts_status ts_redo_wait(struct ts_redo *redo, uint64_t seq, int ms, struct ts_err *err)
{
    return wait_seq(redo, seq, ms, err);
}
