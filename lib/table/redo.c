/* redo.c - the tables' redo log (redo.h): records, the writer thread, generations, open and
 * close, the replay, blobs. The tables' side (what push.c and capture.c log, images and the
 * checkpoint) is redo_table.c; what the two share, redo_internal.h.
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
#include "table/redo_internal.h"

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

static void gen_path(const struct ts_redo *redo, uint64_t gen, char *buf, size_t len)
{
    snprintf(buf, len, "%s/" PREFIX "%016" PRIx64 SUFFIX, redo->dir, gen);
}

void redo_image_path(const struct ts_redo *redo, uint64_t gen, uint64_t k, char *buf,
                     size_t len)
{
    snprintf(buf, len, "%s/image-%016" PRIx64 "-%016" PRIx64 ".rows", redo->dir, gen, k);
}

void redo_sync_dir(const char *dir)
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

struct redo_item *redo_rec_new(const char *key, enum ts_redo_kind kind, uint64_t step,
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

void redo_enqueue(struct ts_redo *redo, struct redo_item *it)
{
    it->next = NULL;
    if (redo->tail)
        redo->tail->next = it;
    else
        redo->head = it;
    redo->tail = it;
    pthread_cond_signal(&redo->work);
}

uint64_t redo_seal_queue(struct ts_redo *redo, struct redo_item *it)
{
    uint64_t sum = XXH3_64bits(it->buf, it->len - TAIL);

    memcpy(it->buf + it->len - TAIL, &sum, 8);
    it->seq = ++redo->seq;
    redo_enqueue(redo, it);
    return it->seq;
}

/* ---- The writer ---- */

bool redo_write_all(int fd, const uint8_t *p, size_t len, int *e)
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
    redo_sync_dir(redo->dir);
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
        if (!e && !redo_write_all(redo->fd, buf, b->len, &e) && at >= 0 && ftruncate(redo->fd, at))
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

        if (!redo_write_all(redo->fd, it->buf, it->len, &e)) {
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
        redo_sync_dir(redo->dir);
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

/* Whether what the writer wrote and has not synced must be synced now (mu held): someone
 * waits for it, the log is closing, or it has waited TS_REDO_LAZY_MS. */
static bool sync_due(const struct ts_redo *redo, int64_t sync_by)
{
    return redo->waiters || redo->stop || ts_now_ms() >= sync_by;
}

/* The writer: appends what is queued, and syncs when it is due (sync_due): records nobody
 * waits for yet are written at once and synced with the next that someone does, so the
 * tables of one step, logged one after another, share one sync (group commit by demand). */
static void *writer_main(void *arg)
{
    struct ts_redo *redo = arg;
    bool unsynced = false;         /* written since the last sync */
    uint64_t written = 0;          /* the last record written */
    int64_t sync_by = 0;           /* unsynced: when it is synced if nobody asks first */

    pthread_mutex_lock(&redo->mu);
    for (;;) {
        struct redo_item *group, *it;
        int e = 0;

        while (!redo->head && !(unsynced ? sync_due(redo, sync_by) : redo->stop)) {
            if (unsynced) {
                struct timespec ts;

                ts_abstime_ms(&ts, sync_by - ts_now_ms());
                pthread_cond_timedwait(&redo->work, &redo->mu, &ts);
            } else {
                pthread_cond_wait(&redo->work, &redo->mu);
            }
        }
        if (redo->sync_failed || (!redo->head && !unsynced))
            break;
        group = redo->head;        /* everything queued now */
        redo->head = redo->tail = NULL;
        pthread_mutex_unlock(&redo->mu);
        bool before = unsynced;
        for (it = group; it && !(e = do_item(redo, it, &unsynced)); it = it->next)
            if (it->op == OP_DATA)
                written = it->seq;
        if (unsynced && !before)
            sync_by = ts_now_ms() + TS_REDO_LAZY_MS;
        pthread_mutex_lock(&redo->mu);
        if (e >= 0 && unsynced && sync_due(redo, sync_by)) {
            pthread_mutex_unlock(&redo->mu);
            int r = fdatasync(redo->fd);   /* what was written, synced */
            int se = errno;
            pthread_mutex_lock(&redo->mu);
            if (r)
                e = -se;
            else
                unsynced = false;
        }
        while (group != it) {      /* [group, it) are done */
            struct redo_item *next = group->next;

            free(group);
            group = next;
        }
        if (e >= 0 && !unsynced && redo->synced < written) {
            redo->synced = written;
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
    redo_sync_dir(dir);
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
                                   .syncs = redo->syncs, .final = redo->sync_failed };
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

    redo_image_path(redo, gen, r->cut, path, sizeof(path));
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

ts_status redo_wait_seq(struct ts_redo *redo, uint64_t seq, int ms, struct ts_err *err)
{
    struct timespec ts;
    ts_status st = TS_OK;
    bool waiting;

    ts_abstime_ms(&ts, ms);
    pthread_mutex_lock(&redo->mu);
    if ((waiting = redo->synced < seq)) {   /* the writer syncs at once (sync_due) */
        redo->waiters++;
        pthread_cond_signal(&redo->work);
    }
    while (redo->synced < seq && !st) {
        if (redo->failure[0])
            st = ts_err_set(err, TS_EIO, "%s", redo->failure);
        else if (pthread_cond_timedwait(&redo->done, &redo->mu, &ts) == ETIMEDOUT &&
                 redo->synced < seq)
            st = ts_err_set(err, TS_ETIMEDOUT, "the redo log in %s did not sync within %d ms",
                            redo->dir, ms);
    }
    if (waiting)
        redo->waiters--;
    pthread_mutex_unlock(&redo->mu);
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
    if (!(it = redo_rec_new(key, TS_REDO_BLOB, version, 1, len)))
        return ts_err_set(err, TS_ENOMEM, "redo log: no memory for a blob of %zu bytes", len);
    out = it->buf + HEAD + kl;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(out, iov[i].iov_base, iov[i].iov_len);
        out += iov[i].iov_len;
    }
    pthread_mutex_lock(&redo->mu);
    *seq = redo_seal_queue(redo, it);
    pthread_mutex_unlock(&redo->mu);
    return TS_OK;
}

void ts_redo_forget(struct ts_redo *redo, const char *key)
{
    struct redo_item *it = redo_rec_new(key, TS_REDO_DROP, 0, 1, 0);

    if (!it)
        return;   /* the blob is replayed, and its key's owner drops it again */
    pthread_mutex_lock(&redo->mu);
    redo_seal_queue(redo, it);
    pthread_mutex_unlock(&redo->mu);
}

ts_status ts_redo_wait(struct ts_redo *redo, uint64_t seq, int ms, struct ts_err *err)
{
    return redo_wait_seq(redo, seq, ms, err);
}
