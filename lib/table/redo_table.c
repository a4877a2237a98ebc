/* redo_table.c - the tables' side of the redo log (redo.h, redo_internal.h): a table
 * attached, the records of its steps (push.c) and its images (attach, a restore's end in
 * capture.c, a checkpoint), a replayed record applied to a table, a table's wait.
 *
 * Locks as in redo.c: attach_mu -> a table's mu -> the log's mu. */
#include "table/internal.h"
#include "table/redo_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

/* A record of kind for t with room for n of its records (mu held); NULL (t's log marked not
 * whole) without memory. */
static struct redo_item *item_new(struct ts_table *t, enum ts_redo_kind kind, uint64_t step,
                                  size_t n)
{
    struct redo_item *it = redo_rec_new(t->redo_key, kind, step, ts_table_record_bytes(t), n);

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

/* it queued as t's latest record (t's mu and the log's mu held). */
static void redo_queue_locked(struct ts_table *t, struct redo_item *it)
{
    t->redo_seq = redo_seal_queue(t->redo, it);
}

static void redo_queue(struct ts_table *t, struct redo_item *it)
{
    pthread_mutex_lock(&t->redo->mu);
    redo_queue_locked(t, it);
    pthread_mutex_unlock(&t->redo->mu);
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
        if (!redo_write_all(fd, buf, m * rb, &e))
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
    if (!redo_write_all(fd, (const uint8_t *)head32, 8, &e) ||
        !redo_write_all(fd, (const uint8_t *)&n, 8, &e) ||
        !redo_write_all(fd, (const uint8_t *)&t->step, 8, &e))
        st = ts_err_set(err, TS_EIO, "redo log: writing %s: %s", tmp, strerror(e));
    if (!st)
        st = image_rows(t, fd, ids, n, &xs, tmp, err);
    sum = XXH3_64bits_digest(&xs);
    if (!st && !redo_write_all(fd, (const uint8_t *)&sum, 8, &e))
        st = ts_err_set(err, TS_EIO, "redo log: writing %s: %s", tmp, strerror(e));
    if (!st && fdatasync(fd))
        st = ts_err_set(err, TS_EIO, "redo log: syncing %s: %s", tmp, strerror(errno));
    close(fd);
    if (!st) {
        pthread_mutex_lock(&redo->mu);
        redo_image_path(redo, redo->gen, k, path, sizeof(path));
        if (rename(tmp, path)) {
            st = ts_err_set(err, TS_EIO, "redo log: naming %s: %s", path, strerror(errno));
        } else {
            redo_sync_dir(redo->dir);
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
    return st || !redo ? st : redo_wait_seq(redo, seq, ms, err);
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
    redo_enqueue(redo, rot);
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
        redo_enqueue(redo, cry);
        redo_enqueue(redo, cut);
        pthread_mutex_unlock(&redo->mu);
    } else {
        free(cut);
        free(cry);
    }
    pthread_mutex_unlock(&redo->attach_mu);
    return st;
}
