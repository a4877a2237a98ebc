/* tier.c - the disk tier: a file of fixed-size slots per table store, an in-memory index
 * from row id to slot, and the writer thread that writes evicted rows in batches (tier.h).
 *
 * The store. A table store's rows are records of one size (rec), so its file is an array of
 * slots: a row keeps its slot for life and a write-back overwrites it in place (no log, no
 * compaction: the disk tier is a cache, emptied at each start, so nothing must be replayed).
 * The index (idmap.c, id -> slot) is in memory: 16 bytes an entry, 21 to 32 bytes a row at
 * its 3/4 load, against the row's 200 to 1000 bytes. A deleted row's slot goes on a free
 * list for the next new row. The file grows in segments, each reserved on disk with
 * posix_fallocate before it is used (so a full disk is an error the writer sees and retries,
 * never a SIGBUS in a mapped write) and mapped shared: a read is an index probe and a
 * memcpy from the mapping, a write a memcpy into it; the kernel writes the dirty pages back
 * and, for a table larger than memory, drops clean ones. Segments double from 64 KiB up to
 * 64 MiB, so a small table takes little disk and a large one leaves at most 64 MiB unused
 * in few mappings (a thousand for 60 GB). Measured against RocksDB and LMDB on this
 * workload: docs/embeddings.md, "Choosing the disk tier's store".
 *
 * Locks. `lk` (writers preferred) guards the stores, their indexes and their segments: the
 * readers (tier_get_many, tier_ids, tier_space_bytes) hold it shared for their whole call,
 * the writer takes it exclusively to change an index or a segment list, and shared to copy
 * records into slots. A record being copied is never one a reader reads: rows.c reads the
 * disk only for rows in no batch not yet written, and a prefetch's reads without the
 * table's lock are discarded for any row an operation touched meanwhile (rows.c, the guard).
 *
 * The writer takes batches in the order tables hand them (a FIFO), so a row evicted twice is
 * on disk as of its later eviction. A batch that fails (the disk full) stays at the head of
 * the queue and is tried again every TS_TIER_RETRY_MS: the table still finds its rows in it
 * (rows.c), so nothing is lost while the disk refuses; a retry writes the same records into
 * the slots the failed try gave them. */
#include "table/internal.h"
#include "table/tier.h"

#include "util/proc.h"

/* A batch of at least ASK_FIRST_MIN rows asks for their pages before it copies them, when
 * one of ASK_SAMPLE of them is not in memory (ask_first). */
#define ASK_FIRST_MIN 16
#define ASK_SAMPLE 16

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
#include <time.h>
#include <unistd.h>

#define SEG_MIN_BYTES (64u << 10)
#define SEG_MAX_BYTES (64u << 20)
#define PAGE 4096u
#define LOCK_FILE "tier.lock"
#define FILE_PREFIX "space-"

struct seg {
    uint64_t first, n;             /* its slots */
    uint8_t *base;                 /* mapped: slot first + i at base + i * rec */
    size_t len;                    /* the mapping's bytes (whole pages) */
};

/* One table store's rows (a key space, tier_space). */
struct space {
    uint64_t id;
    size_t rec;                    /* fixed by its first write */
    struct idmap index;            /* row id -> slot */
    uint64_t *free;                /* slots of deleted rows, nfree of them */
    size_t nfree, free_cap;
    uint64_t next;                 /* slots handed out from the end */
    struct seg *segs;
    size_t nsegs;
    uint64_t cap;                  /* slots in segments */
    uint64_t bytes;                /* reserved on disk */
};

struct ts_tier {
    char dir[PATH_MAX];
    int lock_fd;
    pthread_rwlock_t lk;           /* the stores (above) */
    struct space **spaces;
    size_t nspaces, spaces_cap;
    struct idmap space_at;         /* space id -> index in spaces */
    pthread_t writer;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct tier_batch *head, *tail;    /* queued, oldest first; the head is being written */
    _Atomic uint64_t next_space;
    char failure[256];                 /* under mu */
    bool full;                         /* tests: writes fail as on a full disk (under mu) */
};

static char *fail_text(const char *what, const struct ts_tier *tier, int e)
{
    char *s = NULL;

    if (asprintf(&s, "%s in %s: %s", what, tier->dir, strerror(e)) < 0)
        s = strdup(strerror(e));
    return s ? s : strdup("out of memory");
}

/* ---- stores (lk held) ---- */

static struct space *space_find(const struct ts_tier *tier, uint64_t id)
{
    uint64_t at;

    return idmap_find(&tier->space_at, id, &at) ? tier->spaces[at] : NULL;
}

static void file_of(const struct ts_tier *tier, uint64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/" FILE_PREFIX "%" PRIu64 ".rows", tier->dir, id);
}

static void space_free(struct ts_tier *tier, struct space *s, bool unlink_file)
{
    char path[PATH_MAX + 64];

    for (size_t i = 0; i < s->nsegs; i++)
        munmap(s->segs[i].base, s->segs[i].len);
    if (unlink_file) {
        file_of(tier, s->id, path, sizeof(path));
        unlink(path);
    }
    idmap_fini(&s->index);
    free(s->free);
    free(s->segs);
    free(s);
}

/* The store `id` with records of rec bytes, made (its file created) if new; a malloc'd text
 * on failure. */
static char *space_get(struct ts_tier *tier, uint64_t id, size_t rec, struct space **out)
{
    char path[PATH_MAX + 64];
    struct space *s = space_find(tier, id);
    char *e = NULL;
    int fd;

    if (s) {
        if (s->rec != rec && asprintf(&e, "disk tier %s: records of %zu bytes for a store of "
                                      "%zu-byte records", tier->dir, rec, s->rec) < 0)
            e = strdup("disk tier: record size changed");
        *out = s;
        return e;
    }
    if (tier->nspaces == tier->spaces_cap) {
        size_t cap = tier->spaces_cap ? 2 * tier->spaces_cap : 8;
        struct space **v = realloc(tier->spaces, cap * sizeof(*v));

        if (!v)
            return strdup("disk tier: out of memory");
        tier->spaces = v;
        tier->spaces_cap = cap;
    }
    if (idmap_reserve(&tier->space_at, 1, NULL) || !(s = calloc(1, sizeof(*s))))
        return strdup("disk tier: out of memory");
    s->id = id;
    s->rec = rec;
    file_of(tier, id, path, sizeof(path));
    /* Not kept open (a shard may hold hundreds of stores): the mappings need no descriptor. */
    if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        e = fail_text("creating a store's file", tier, errno);
        free(s);
        return e;
    }
    close(fd);
    idmap_put(&tier->space_at, id, tier->nspaces);
    tier->spaces[tier->nspaces++] = s;
    *out = s;
    return NULL;
}

static void space_drop(struct ts_tier *tier, uint64_t id)
{
    struct space *s = space_find(tier, id);
    size_t at;

    if (!s)
        return;
    for (at = 0; tier->spaces[at] != s; at++)
        ;
    idmap_del(&tier->space_at, id);
    if (at != --tier->nspaces) {
        tier->spaces[at] = tier->spaces[tier->nspaces];
        idmap_del(&tier->space_at, tier->spaces[at]->id);
        idmap_put(&tier->space_at, tier->spaces[at]->id, at);
    }
    space_free(tier, s, true);
}

/* One more segment, twice the last one's size (up to SEG_MAX_BYTES). */
static char *space_grow(struct ts_tier *tier, struct space *s)
{
    uint64_t last = s->nsegs ? s->segs[s->nsegs - 1].n * s->rec : SEG_MIN_BYTES / 2;
    uint64_t bytes = last * 2 > SEG_MAX_BYTES ? SEG_MAX_BYTES : last * 2;
    uint64_t n = bytes / s->rec ? bytes / s->rec : 1, len, off = s->bytes;
    char path[PATH_MAX + 64];
    struct seg *v;
    uint8_t *base;
    int fd, rc;

    len = (n * s->rec + PAGE - 1) / PAGE * PAGE;
    n = len / s->rec;
    if (!(v = realloc(s->segs, (s->nsegs + 1) * sizeof(*v))))
        return strdup("disk tier: out of memory");
    s->segs = v;
    file_of(tier, s->id, path, sizeof(path));
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
        return fail_text("opening a store's file", tier, errno);
    /* Reserved first: a mapped write past what the disk can hold would be a SIGBUS. */
    if ((rc = posix_fallocate(fd, (off_t)off, (off_t)len))) {
        close(fd);
        return fail_text("reserving disk for rows", tier, rc);
    }
    base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    rc = errno;
    close(fd);
    if (base == MAP_FAILED)
        return fail_text("mapping a store's file", tier, rc);
    madvise(base, len, MADV_RANDOM);   /* rows are read one by one: no read-ahead */
    s->segs[s->nsegs++] = (struct seg){ .first = s->cap, .n = n, .base = base, .len = len };
    s->cap += n;
    s->bytes += len;
    return NULL;
}

static uint8_t *slot_ptr(const struct space *s, uint64_t slot)
{
    size_t lo = 0, hi = s->nsegs;

    while (hi - lo > 1) {   /* the last segment whose first slot is <= slot */
        size_t mid = lo + (hi - lo) / 2;

        if (s->segs[mid].first <= slot)
            lo = mid;
        else
            hi = mid;
    }
    return s->segs[lo].base + (slot - s->segs[lo].first) * s->rec;
}

/* Gives each of b's rows that has none a slot (slots[i]: row i's), deleting b's dels first;
 * nothing is given when a segment cannot be made. */
static char *assign(struct ts_tier *tier, const struct tier_batch *b, struct space *s,
                    uint64_t *slots)
{
    uint64_t k;
    size_t fresh = 0;
    char *e;

    for (size_t i = 0; i < b->ndels; i++)
        if (idmap_find(&s->index, b->dels[i], &k)) {
            if (s->nfree == s->free_cap) {
                size_t cap = s->free_cap ? 2 * s->free_cap : 64;
                uint64_t *v = realloc(s->free, cap * sizeof(*v));

                if (!v)
                    return strdup("disk tier: out of memory");
                s->free = v;
                s->free_cap = cap;
            }
            idmap_del(&s->index, b->dels[i]);
            s->free[s->nfree++] = k;
        }
    for (size_t i = 0; i < b->n; i++)
        fresh += !idmap_find(&s->index, b->ids[i], &k);
    if (idmap_reserve(&s->index, fresh, NULL))
        return strdup("disk tier: out of memory for the index");
    while (fresh > s->nfree && s->cap - s->next < fresh - s->nfree)
        if ((e = space_grow(tier, s)))
            return e;
    for (size_t i = 0; i < b->n; i++)
        if (!idmap_find(&s->index, b->ids[i], &slots[i])) {
            slots[i] = s->nfree ? s->free[--s->nfree] : s->next++;
            idmap_put(&s->index, b->ids[i], slots[i]);
        }
    return NULL;
}

/* Writes b: its space dropped (b->drop), then its dropped rows (b->dels), then its rows. */
static char *write_batch(struct ts_tier *tier, const struct tier_batch *b)
{
    uint64_t *slots = NULL;
    struct space *s = NULL;
    char *e = NULL;

    if (b->n && !(slots = malloc(b->n * sizeof(*slots))))
        return strdup("disk tier: out of memory");
    pthread_rwlock_wrlock(&tier->lk);
    if (b->drop)
        space_drop(tier, b->space);
    if (b->n)
        e = space_get(tier, b->space, b->rec, &s);
    else
        s = space_find(tier, b->space);
    if (!e && s)
        e = assign(tier, b, s, slots);
    pthread_rwlock_unlock(&tier->lk);
    if (!e && b->n) {   /* the copies, with readers of other rows going on */
        pthread_rwlock_rdlock(&tier->lk);
        for (size_t i = 0; i < b->n; i++)
            memcpy(slot_ptr(s, slots[i]), b->recs + i * b->rec, b->rec);
        pthread_rwlock_unlock(&tier->lk);
    }
    free(slots);
    return e;
}

/* The failure as a reader wants it: the common causes said the same way, once. */
static void set_failure(struct ts_tier *tier, const char *e)
{
    static const struct { const char *text, *say; } known[] = {
        { "No space left on device", "no space left on the device (ENOSPC)" },
        { "Disk quota exceeded", "the disk quota is exceeded (EDQUOT)" },
        { "Read-only file system", "the file system is read-only (EROFS)" },
        { "Permission denied", "permission denied (EACCES)" },
        { "Input/output error", "an I/O error (EIO)" },
    };

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strstr(e, known[i].text)) {
            snprintf(tier->failure, sizeof(tier->failure), "%s", known[i].say);
            return;
        }
    snprintf(tier->failure, sizeof(tier->failure), "%s", e);
}

static void *writer_main(void *arg)
{
    struct ts_tier *tier = arg;

    pthread_mutex_lock(&tier->mu);
    for (;;) {
        struct tier_batch *b;
        char *e;

        while (!tier->head && !tier->stop)
            pthread_cond_wait(&tier->work, &tier->mu);
        if (!(b = tier->head))
            break;
        if (tier->full && !b->skip) {
            e = strdup("IO error: No space left on device (tier_set_full)");
        } else {
            pthread_mutex_unlock(&tier->mu);
            e = b->skip ? NULL : write_batch(tier, b);
            pthread_mutex_lock(&tier->mu);
        }
        if (e) {
            set_failure(tier, e);
            free(e);
            pthread_cond_broadcast(&tier->done);   /* waiters see the failure (tier_wait) */
            if (tier->stop) {
                b->skip = true;      /* closing: what the disk refuses is dropped */
            } else {
                struct timespec ts;

                ts_abstime_ms(&ts, TS_TIER_RETRY_MS);
                pthread_cond_timedwait(&tier->work, &tier->mu, &ts);
            }
            continue;
        }
        tier->failure[0] = '\0';
        if (!(tier->head = b->next))
            tier->tail = NULL;
        if (b->orphan)
            tier_batch_free(b);
        else
            atomic_store(&b->done, true);
        pthread_cond_broadcast(&tier->done);
    }
    pthread_mutex_unlock(&tier->mu);
    return NULL;
}

static void tier_free(struct ts_tier *tier)
{
    for (size_t i = 0; i < tier->nspaces; i++)
        space_free(tier, tier->spaces[i], true);
    free(tier->spaces);
    idmap_fini(&tier->space_at);
    if (tier->lock_fd >= 0)
        close(tier->lock_fd);   /* lets the lock go */
    pthread_rwlock_destroy(&tier->lk);
    pthread_mutex_destroy(&tier->mu);
    pthread_cond_destroy(&tier->work);
    pthread_cond_destroy(&tier->done);
    free(tier);
}

/* A cache of rows, never read back by a new process (tier.h): the stores' files a shard
 * killed before it closed its tier left are removed. */
static ts_status empty_dir(const char *dir, struct ts_err *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[PATH_MAX + 256];

    if (!d)
        return ts_err_set(err, TS_EIO, "table-dir %s: cannot read it: %s", dir,
                          strerror(errno));
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, FILE_PREFIX, strlen(FILE_PREFIX))) {
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            if (unlink(path) && errno != ENOENT) {
                ts_err_set(err, TS_EIO, "table-dir %s: cannot remove the old %s: %s", dir,
                           de->d_name, strerror(errno));
                closedir(d);
                return TS_EIO;
            }
        }
    closedir(d);
    return TS_OK;
}

ts_status ts_tier_open(const char *dir, struct ts_tier **out, struct ts_err *err)
{
    pthread_rwlockattr_t attr;
    char path[PATH_MAX + 64];
    struct ts_tier *tier;
    struct stat sb;
    ts_status st;

    if (!dir || !*dir || strlen(dir) >= PATH_MAX)
        return ts_err_set(err, TS_EINVAL, "table-dir: required, under %d bytes", PATH_MAX);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "table-dir %s: cannot create it: %s", dir,
                          strerror(errno));
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return ts_err_set(err, TS_EIO, "table-dir %s: not a directory", dir);
    if (!(tier = calloc(1, sizeof(*tier))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the disk tier");
    tier->lock_fd = -1;
    pthread_rwlockattr_init(&attr);
    /* The writer's short exclusive holds must not wait behind a stream of readers. */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&tier->lk, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&tier->mu, NULL);
    pthread_cond_init(&tier->work, NULL);
    pthread_cond_init(&tier->done, NULL);
    snprintf(tier->dir, sizeof(tier->dir), "%s", dir);
    atomic_init(&tier->next_space, 1);
    snprintf(path, sizeof(path), "%s/" LOCK_FILE, dir);
    if ((tier->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        st = ts_err_set(err, TS_EIO, "table-dir %s: cannot open %s: %s", dir, LOCK_FILE,
                        strerror(errno));
        tier_free(tier);
        return st;
    }
    if (flock(tier->lock_fd, LOCK_EX | LOCK_NB)) {
        st = ts_err_set(err, TS_EIO, "table-dir %s: another process holds its disk tier (%s); "
                        "give each shard a directory of its own", dir,
                        errno == EWOULDBLOCK ? "locked" : strerror(errno));
        tier_free(tier);
        return st;
    }
    if ((st = empty_dir(dir, err))) {
        tier_free(tier);
        return st;
    }
    if (pthread_create(&tier->writer, NULL, writer_main, tier)) {
        tier_free(tier);
        return ts_err_set(err, TS_EIO, "cannot start the disk tier's writer thread");
    }
    tier->started = true;
    *out = tier;
    return TS_OK;
}

void ts_tier_close(struct ts_tier *tier)
{
    if (!tier)
        return;
    pthread_mutex_lock(&tier->mu);
    tier->stop = true;
    pthread_cond_broadcast(&tier->work);
    pthread_mutex_unlock(&tier->mu);
    if (tier->started)
        pthread_join(tier->writer, NULL);
    tier_free(tier);
}

const char *ts_tier_dir(const struct ts_tier *tier)
{
    return tier->dir;
}

void ts_tier_failure(struct ts_tier *tier, char *buf, size_t len)
{
    pthread_mutex_lock(&tier->mu);
    snprintf(buf, len, "%s", tier->failure);
    pthread_mutex_unlock(&tier->mu);
}

uint64_t tier_space(struct ts_tier *tier)
{
    return atomic_fetch_add(&tier->next_space, 1);
}

void tier_submit(struct ts_tier *tier, struct tier_batch *b)
{
    b->next = NULL;
    pthread_mutex_lock(&tier->mu);
    if (tier->tail)
        tier->tail->next = b;
    else
        tier->head = b;
    tier->tail = b;
    pthread_cond_signal(&tier->work);
    pthread_mutex_unlock(&tier->mu);
}

bool tier_wait(struct ts_tier *tier, struct tier_batch *b)
{
    bool done;

    pthread_mutex_lock(&tier->mu);
    while (!(done = atomic_load(&b->done)) && !tier->failure[0])
        pthread_cond_wait(&tier->done, &tier->mu);
    pthread_mutex_unlock(&tier->mu);
    return done;
}

bool tier_failing(struct ts_tier *tier, char *why, size_t len)
{
    bool failing;

    pthread_mutex_lock(&tier->mu);
    if ((failing = tier->failure[0] != '\0') && why)
        snprintf(why, len, "%s", tier->failure);
    pthread_mutex_unlock(&tier->mu);
    return failing;
}

void tier_set_full(struct ts_tier *tier, bool full)
{
    pthread_mutex_lock(&tier->mu);
    tier->full = full;
    pthread_cond_broadcast(&tier->work);
    pthread_mutex_unlock(&tier->mu);
}

bool tier_orphan(struct ts_tier *tier, struct tier_batch *b)
{
    bool done;

    pthread_mutex_lock(&tier->mu);
    if (!(done = atomic_load(&b->done))) {
        b->orphan = true;
        b->skip = true;      /* its table is gone: nothing reads these rows again */
    }
    pthread_mutex_unlock(&tier->mu);
    return done;
}

void tier_drop_space(struct ts_tier *tier, uint64_t space)
{
    struct tier_batch *b = calloc(1, sizeof(*b));

    if (!b)
        return;     /* the file stays until the tier closes */
    b->space = space;
    b->drop = true;
    b->orphan = true;
    tier_submit(tier, b);
}

/* Asks the kernel for the pages of rows ids[0..n) of s (MADV_WILLNEED: it starts their
 * reads and returns), so that the copies that follow find pages already on their way and
 * the disk serves the batch at its queue's depth rather than one fault at a time. A sample
 * of ASK_SAMPLE rows goes first (mincore): when every page of it is in memory (the files
 * fit in the page cache), asking would be a system call a row for nothing. */
static void ask_first(const struct space *s, size_t n, const uint64_t *ids)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t cold = 0;
    uint64_t slot;

    for (size_t k = 0; k < ASK_SAMPLE && !cold; k++) {
        unsigned char in = 1;

        if (idmap_find(&s->index, ids[k * n / ASK_SAMPLE], &slot) &&
            !mincore((void *)((uintptr_t)slot_ptr(s, slot) & ~(page - 1)), 1, &in))
            cold += !(in & 1);
    }
    for (size_t i = 0; cold && i < n; i++)
        if (idmap_find(&s->index, ids[i], &slot)) {
            uintptr_t at = (uintptr_t)slot_ptr(s, slot), from = at & ~(page - 1);

            madvise((void *)from, at + s->rec - from, MADV_WILLNEED);
        }
}

ts_status tier_get_many(struct ts_tier *tier, uint64_t space, size_t n, const uint64_t *ids,
                        uint8_t *recs, size_t rec, bool *found, struct ts_err *err)
{
    const struct space *s;
    ts_status st = TS_OK;
    uint64_t slot;

    pthread_rwlock_rdlock(&tier->lk);
    if ((s = space_find(tier, space)) && s->rec != rec)
        st = ts_err_set(err, TS_ECORRUPT, "disk tier %s: rows of %zu bytes asked of a store of "
                        "%zu-byte rows", tier->dir, rec, s->rec);
    if (!st && s && n >= ASK_FIRST_MIN)
        ask_first(s, n, ids);
    for (size_t i = 0; i < n; i++)
        if ((found[i] = !st && s && idmap_find(&s->index, ids[i], &slot)))
            memcpy(recs + i * rec, slot_ptr(s, slot), rec);
    pthread_rwlock_unlock(&tier->lk);
    return st;
}

ts_status tier_ids(struct ts_tier *tier, uint64_t space, uint64_t **out, size_t *n,
                   struct ts_err *err)
{
    const struct space *s;
    uint64_t *ids = NULL;
    size_t k = 0;

    pthread_rwlock_rdlock(&tier->lk);
    s = space_find(tier, space);
    if (s && s->index.n && !(ids = malloc(s->index.n * sizeof(*ids)))) {
        pthread_rwlock_unlock(&tier->lk);
        return ts_err_set(err, TS_ENOMEM, "no memory to list the disk tier's rows");
    }
    for (size_t i = 0; s && i < s->index.cap; i++)
        if (s->index.keys[i] != IDMAP_EMPTY)
            ids[k++] = s->index.keys[i];
    pthread_rwlock_unlock(&tier->lk);
    *out = ids;
    *n = k;
    return TS_OK;
}

uint64_t tier_space_bytes(struct ts_tier *tier, uint64_t space)
{
    const struct space *s;
    uint64_t bytes;

    pthread_rwlock_rdlock(&tier->lk);
    bytes = (s = space_find(tier, space)) ? s->bytes : 0;
    pthread_rwlock_unlock(&tier->lk);
    return bytes;
}

void tier_drop_cache(struct ts_tier *tier)
{
    char path[PATH_MAX + 64];
    int fd;

    pthread_rwlock_wrlock(&tier->lk);
    for (size_t i = 0; i < tier->nspaces; i++) {
        const struct space *s = tier->spaces[i];

        for (size_t k = 0; k < s->nsegs; k++) {
            msync(s->segs[k].base, s->segs[k].len, MS_SYNC);
            madvise(s->segs[k].base, s->segs[k].len, MADV_DONTNEED);   /* written: unmapped */
        }
        file_of(tier, s->id, path, sizeof(path));
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    pthread_rwlock_unlock(&tier->lk);
}

void tier_batch_free(struct tier_batch *b)
{
    if (!b)
        return;
    idmap_fini(&b->map);
    free(b->dels);
    free(b->ids);
    free(b->recs);
    free(b);
}
