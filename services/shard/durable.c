/* durable.c - see durable.h. */
#include "durable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "params.h"
#include "params_internal.h"
#include "tables.h"
#include "tables_internal.h"
#include "util/log.h"
#include "util/proc.h"

#define CHECK_MS 1000   /* how often the checkpoint thread looks at the log's size */

struct shard_durable {
    struct ts_redo *redo;
    _Atomic int64_t warned_ms;        /* when a pull last said the disk refuses the log */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop;
    pthread_t thread;
    uint64_t checkpoints, failures;   /* under mu */
    int64_t resumed_ms;               /* shard_durable_resumed's; -1: not */
};

static void *checkpointer(void *arg)
{
    struct shard_durable *d = arg;
    struct ts_redo_stats rs;
    struct timespec ts;
    struct ts_err err = { 0 };

    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        ts_abstime_ms(&ts, CHECK_MS);
        pthread_cond_timedwait(&d->wake, &d->mu, &ts);
        if (d->stop)
            break;
        ts_redo_stats(d->redo, &rs);
        if (rs.bytes < SHARD_REDO_CHECKPOINT_BYTES)
            continue;
        pthread_mutex_unlock(&d->mu);
        ts_status st = ts_redo_checkpoint(d->redo, &err);
        pthread_mutex_lock(&d->mu);
        if (st) {   /* the older generations stay: nothing is lost, the log only grows */
            d->failures++;
            ts_log(TS_WARN, "shard", "redo log: %s (tried again in %d ms)", err.msg, CHECK_MS);
            ts_err_clear(&err);
        } else {
            d->checkpoints++;
            ts_log(TS_INFO, "shard", "redo log: checkpoint at %" PRIu64 " MiB, generation %"
                   PRIu64 " started", rs.bytes >> 20, rs.generation + 1);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Whether name is one of a log's files (lib/table/redo.c: the generations, the images). */
static bool log_file(const char *name)
{
    return !strncmp(name, "redo-", 5) || !strncmp(name, "image-", 6);
}

/* A log an earlier process left in dir goes to dir/previous (what was there before goes):
 * this shard does not start from it (why says why), and what it logs now must not mix with
 * what the last one did. Under dir's redo.lock, so a shard that runs on dir keeps its files. */
static ts_status set_aside(const char *dir, const char *why, struct ts_err *err)
{
    char path[PATH_MAX], prev[PATH_MAX], from[PATH_MAX + 256], to[PATH_MAX + 256];
    struct dirent *de;
    ts_status st = TS_OK;
    bool any = false;
    DIR *dh;
    int lock;

    snprintf(path, sizeof(path), "%s/redo.lock", dir);
    snprintf(prev, sizeof(prev), "%s/previous", dir);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "%s: cannot make it: %s", dir, strerror(errno));
    if ((lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        return ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
    if (flock(lock, LOCK_EX | LOCK_NB)) {
        close(lock);
        return ts_err_set(err, TS_EIO, "redo log %s: another process holds it (redo.lock); one "
                          "shard a directory", dir);
    }
    if (!(dh = opendir(dir))) {
        close(lock);
        return ts_err_set(err, TS_EIO, "%s: %s", dir, strerror(errno));
    }
    while (!st && (de = readdir(dh))) {
        if (!log_file(de->d_name))
            continue;
        if (!any) {   /* the one set aside before goes */
            DIR *ph = opendir(prev);
            struct dirent *pe;
            while (ph && (pe = readdir(ph)))
                if (log_file(pe->d_name)) {
                    snprintf(from, sizeof(from), "%s/%s", prev, pe->d_name);
                    (void)unlink(from);
                }
            if (ph)
                closedir(ph);
            if (mkdir(prev, 0700) && errno != EEXIST)
                st = ts_err_set(err, TS_EIO, "%s: cannot make it: %s", prev, strerror(errno));
            any = true;
        }
        snprintf(from, sizeof(from), "%s/%s", dir, de->d_name);
        snprintf(to, sizeof(to), "%s/%s", prev, de->d_name);
        if (!st && rename(from, to))
            st = ts_err_set(err, TS_EIO, "%s: cannot move it to %s: %s", from, prev,
                            strerror(errno));
    }
    closedir(dh);
    if (!st && any)
        ts_log(TS_WARN, "shard", "redo log: the log an earlier shard left in %s is set aside in "
               "%s (%s; `tessera-shard --replay %s` reads it)", dir, prev,
               why && why[0] ? why : "this shard does not start from it", prev);
    close(lock);   /* ts_redo_open takes it again */
    return st;
}

/* DIR/identity: "instance INSTANCE\nsecret HEX\n" (mode 0600). */
static bool read_identity(const char *path, char *instance, size_t ilen,
                          uint8_t secret[TS_MEMBER_SECRET_LEN])
{
    char inst[128], hex[2 * TS_MEMBER_SECRET_LEN + 16];
    FILE *f = fopen(path, "r");
    bool ok;

    if (!f)
        return false;
    ok = fscanf(f, "instance %127s secret %72s", inst, hex) == 2 &&
         strlen(inst) < ilen && strlen(hex) == 2 * TS_MEMBER_SECRET_LEN;
    fclose(f);
    for (size_t i = 0; ok && i < TS_MEMBER_SECRET_LEN; i++) {
        unsigned v;
        ok = sscanf(hex + 2 * i, "%2x", &v) == 1;
        secret[i] = (uint8_t)v;
    }
    for (const char *c = inst; ok && *c; c++)
        ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
             *c == '.' || *c == '_' || *c == '-';
    if (ok)
        snprintf(instance, ilen, "%s", inst);
    return ok;
}

ts_status shard_durable_identity(const char *dir, char *instance, size_t ilen,
                                 uint8_t secret[TS_MEMBER_SECRET_LEN], bool *kept,
                                 struct ts_err *err)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    FILE *f;
    int fd;
    bool ok;

    snprintf(path, sizeof(path), "%s/identity", dir);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "%s: cannot make it: %s", dir, strerror(errno));
    if ((*kept = read_identity(path, instance, ilen, secret)))
        return TS_OK;
    if (access(path, F_OK) == 0)
        ts_log(TS_WARN, "shard", "%s: not an identity this shard wrote; a new one replaces it",
               path);
    ts_proc_instance_id(instance, ilen);
    if (getrandom(secret, TS_MEMBER_SECRET_LEN, 0) != TS_MEMBER_SECRET_LEN)
        return ts_err_set(err, TS_EIO, "getrandom: no random bytes for the shard's secret");
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
        !(f = fdopen(fd, "w"))) {
        if (fd >= 0)
            close(fd);
        return ts_err_set(err, TS_EIO, "%s: %s", tmp, strerror(errno));
    }
    fprintf(f, "instance %s\nsecret ", instance);
    for (size_t i = 0; i < TS_MEMBER_SECRET_LEN; i++)
        fprintf(f, "%02x", secret[i]);
    fprintf(f, "\n");
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path))
        return ts_err_set(err, TS_EIO, "%s: cannot write it: %s", path, strerror(errno));
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {   /* the name, durable */
        (void)fsync(fd);
        close(fd);
    }
    return TS_OK;
}

ts_status shard_durable_open(const char *dir, bool keep, const char *why,
                             struct shard_durable **out, struct ts_err *err)
{
    struct shard_durable *d = calloc(1, sizeof(*d));
    ts_status st;
    int e;

    if (!d)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if ((!keep && (st = set_aside(dir, why, err))) || (st = ts_redo_open(dir, &d->redo, err))) {
        free(d);
        return st;
    }
    d->resumed_ms = -1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    if ((e = pthread_create(&d->thread, NULL, checkpointer, d))) {
        ts_redo_close(d->redo);
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return ts_err_set(err, TS_EINTERNAL, "redo log: cannot start its thread: %s",
                          strerror(e));
    }
    *out = d;
    return TS_OK;
}

struct ts_redo *shard_durable_redo(struct shard_durable *d)
{
    return d->redo;
}

void shard_durable_resumed(struct shard_durable *d, int64_t ms)
{
    d->resumed_ms = ms;   /* before any thread reads it: the shard serves nothing yet */
}

void shard_durable_close(struct shard_durable *d)
{
    if (!d || !d->redo)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    ts_redo_close(d->redo);
    d->redo = NULL;   /* what is freed after logs nothing (shard_durable_forget*) */
}

void shard_durable_free(struct shard_durable *d)
{
    if (!d)
        return;
    shard_durable_close(d);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* What a pull waits for (a table's records, or one record), again while the disk refuses the
 * log (its writer tries again every TS_REDO_RETRY_MS: room made on the disk lets the pull
 * go on, nothing lost), until ms pass or a sync failed (final). Said in the shard's log at
 * most every WARN_MS. */
#define WARN_MS 10000
static ts_status wait_synced(struct shard_durable *d, struct ts_table *t, uint64_t seq, int ms,
                             struct ts_err *err)
{
    int64_t until = ts_now_ms() + ms, now;
    struct ts_redo_stats rs;
    ts_status st;

    for (;;) {
        int left = (int)(until - ts_now_ms());
        st = t ? ts_table_redo_wait(t, left > 0 ? left : 0, err)
               : ts_redo_wait(d->redo, seq, left > 0 ? left : 0, err);
        if (st != TS_EIO || (now = ts_now_ms()) >= until)
            return st;
        ts_redo_stats(d->redo, &rs);
        if (rs.final)
            return st;
        int64_t last = atomic_load(&d->warned_ms);
        if (now - last >= WARN_MS && atomic_compare_exchange_strong(&d->warned_ms, &last, now))
            ts_log(TS_WARN, "shard", "%s; pulls wait for it (each up to %d s): make room on "
                   "the disk", err->msg, ms / 1000);
        ts_err_clear(err);
        ts_sleep_ms(TS_REDO_RETRY_MS);
    }
}

/* "r/JOB/TABLE" (the registration) or "t/JOB/TABLE" (the rows): job ids and table names are
 * 1..64 of [A-Za-z0-9._-], so the slash parts them. */
static void key_of(char kind, const char *job, const char *table, char *buf, size_t len)
{
    snprintf(buf, len, "%c/%s/%s", kind, job, table);
}

/* A registration's bytes (packed into a malloc'ed buffer) under key, as a blob. */
static ts_status put_packed(struct shard_durable *d, const char *key, size_t len,
                            void (*pack)(const void *msg, uint8_t *out), const void *msg,
                            struct ts_err *err)
{
    struct iovec iov = { .iov_len = len };
    uint64_t seq;
    ts_status st;

    if (!(iov.iov_base = malloc(len ? len : 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    pack(msg, iov.iov_base);
    st = ts_redo_put(d->redo, key, 0, &iov, 1, &seq, err);
    free(iov.iov_base);
    return st;
}

static void pack_table(const void *msg, uint8_t *out)
{
    tessera__v1__register_table_request__pack(msg, out);
}

static void pack_tensor(const void *msg, uint8_t *out)
{
    tessera__v1__register_tensor_request__pack(msg, out);
}

ts_status shard_durable_table(struct shard_durable *d, const struct shard_job *sj,
                              struct shard_table *t, struct ts_err *err)
{
    char tkey[TS_REDO_KEY_MAX + 1];
    ts_status st;

    if (!d)
        return TS_OK;
    /* What the table was made with, from the job and the table (a registration's request,
     * or a snapshot's spec where a rollback made it, carries only part of it). */
    Tessera__V1__RegisterTableRequest req = TESSERA__V1__REGISTER_TABLE_REQUEST__INIT;
    Tessera__V1__JobSpec js;
    Tessera__V1__TableSpec spec;
    params_job_spec(sj, &js);
    tables_spec(t, &spec);
    req.job = &js;
    req.table = &spec;
    req.table_id = t->id;
    key_of('r', sj->job.id, t->name, t->reg_key, sizeof(t->reg_key));
    key_of('t', sj->job.id, t->name, tkey, sizeof(tkey));
    st = put_packed(d, t->reg_key, tessera__v1__register_table_request__get_packed_size(&req),
                    pack_table, &req, err);
    if (!st && (st = ts_table_redo(t->t, d->redo, tkey, err)))
        ts_redo_forget(d->redo, t->reg_key);
    if (st) {
        t->reg_key[0] = '\0';
        ts_err_prefix(err, "--redo-dir");
        return st;
    }
    t->durable = d;
    return TS_OK;
}

/* ---- the dense partitions ---- */

/* The key of partition `index` of t: "p/JOB/ID/INDEX". */
static void part_key(const struct shard_tensor *t, uint32_t index, char *buf, size_t len)
{
    snprintf(buf, len, "p/%s/%u", t->redo_key, index);
}

/* Partition `index` of t (p) into the log under its key: a header with the job's rollbacks
 * (the image's generation: a replay gives it to the partition it loads the image into), then
 * the image; its record's number to t->redo_seq[index]. held: p holds the update it just
 * applied, whose image is read in place (ts_part_image_pieces); else a copy is taken. */
static ts_status put_part(struct shard_durable *d, struct shard_job *sj, struct shard_tensor *t,
                          uint32_t index, struct ts_part *p, bool held, struct ts_err *err)
{
    uint8_t small[TS_PART_IMAGE_SMALL];
    uint32_t head[2] = { atomic_load(&sj->rollbacks), 0 };
    struct iovec iov[5] = { { head, sizeof(head) } };
    char key[TS_REDO_KEY_MAX + 1];
    uint64_t version, seq;
    void *copy = NULL;
    int n = 5;
    ts_status st;

    if (held) {
        st = ts_part_image_pieces(p, small, iov + 1, &version, err);
    } else {
        size_t len = ts_part_image_bytes(p);
        if (!(copy = malloc(len)))
            return ts_err_set(err, TS_ENOMEM, "no memory for an image of %zu bytes", len);
        st = ts_part_image(p, copy, len, &version, err);
        iov[1] = (struct iovec){ copy, len };
        n = 2;
    }
    part_key(t, index, key, sizeof(key));
    if (!st)
        st = ts_redo_put(d->redo, key, version, iov, n, &seq, err);
    free(copy);
    if (!st)
        atomic_store(&t->redo_seq[index], seq);
    else
        ts_err_prefix(err, "--redo-dir: tensor '%s' partition %u", t->name, index);
    return st;
}

ts_status shard_durable_tensor(struct shard_durable *d, struct shard_job *sj,
                               struct shard_tensor *t, struct ts_err *err)
{
    Tessera__V1__RegisterTensorRequest req;
    Tessera__V1__TensorSpec spec;
    Tessera__V1__JobSpec js;
    char key[TS_REDO_KEY_MAX + 1];
    ts_status st;

    if (!d || sj->job.mode == TS_MODE_REDUCE)   /* its workers hold the parameters */
        return TS_OK;
    if (sj->job.mode != TS_MODE_BSP)
        return ts_err_set(err, TS_ENOTSUP, "--redo-dir: tensor '%s': a redo log of an ssp or "
                          "asp job's tensors is not built (bsp only)", t->name);
    params_tensor_request(sj, t, &js, &spec, &req);
    snprintf(t->redo_key, sizeof(t->redo_key), "%s/%u", sj->job.id, t->id);
    snprintf(key, sizeof(key), "R/%s", t->redo_key);
    if (!(t->redo_seq = calloc(t->nparts ? t->nparts : 1, sizeof(*t->redo_seq))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    st = put_packed(d, key, tessera__v1__register_tensor_request__get_packed_size(&req),
                    pack_tensor, &req, err);
    if (!st)
        t->durable = d;
    /* The heads hold each update until its image is logged (dataplane.c publishes it then). */
    for (uint32_t p = 0; !st && p < t->nparts; p++)
        if (t->parts[p] && !t->follows[p]) {
            ts_part_hold(t->parts[p], true);
            st = put_part(d, sj, t, p, t->parts[p], false, err);
        }
    if (st) {
        shard_durable_forget_tensor(t);
        t->durable = NULL;
    }
    return st;
}

ts_status shard_durable_part(struct shard_job *sj, struct shard_tensor *t, uint32_t index,
                             struct ts_part *p, bool held, struct ts_err *err)
{
    if (!t->durable || !t->durable->redo)
        return TS_OK;
    return put_part(t->durable, sj, t, index, p, held, err);
}

ts_status shard_durable_part_wait(struct shard_tensor *t, uint32_t index, int ms,
                                  struct ts_err *err)
{
    uint64_t seq;
    ts_status st;

    if (!t->durable || !t->durable->redo || index >= t->nparts ||
        !(seq = atomic_load(&t->redo_seq[index])))
        return TS_OK;
    if ((st = wait_synced(t->durable, NULL, seq, ms, err)))
        ts_err_prefix(err, "tensor '%s' partition %u: its values are not on this shard's disk "
                      "yet", t->name, index);
    return st;
}

void shard_durable_forget_part(struct shard_tensor *t, uint32_t index)
{
    char key[TS_REDO_KEY_MAX + 1];

    if (!t->durable || !t->durable->redo || index >= t->nparts ||
        !atomic_exchange(&t->redo_seq[index], 0))
        return;
    part_key(t, index, key, sizeof(key));
    ts_redo_forget(t->durable->redo, key);
}

void shard_durable_forget_tensor(struct shard_tensor *t)
{
    char key[TS_REDO_KEY_MAX + 1];

    if (!t->durable || !t->durable->redo)
        return;
    snprintf(key, sizeof(key), "R/%s", t->redo_key);
    ts_redo_forget(t->durable->redo, key);
    for (uint32_t p = 0; p < t->nparts; p++)
        shard_durable_forget_part(t, p);
}

void shard_durable_forget(struct shard_table *t)
{
    if (t->durable && t->durable->redo && t->reg_key[0])
        ts_redo_forget(t->durable->redo, t->reg_key);
}

ts_status shard_durable_wait(struct shard_table *t, int ms, struct ts_err *err)
{
    ts_status st;

    if (!t->durable || !t->durable->redo)
        return TS_OK;
    if ((st = wait_synced(t->durable, t->t, 0, ms, err)))
        ts_err_prefix(err, "table '%s': its rows are not on this shard's disk yet", t->name);
    return st;
}

void shard_durable_stats(struct shard_durable *d, struct shard_durable_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!d)
        return;
    ts_redo_stats(d->redo, &out->redo);
    pthread_mutex_lock(&d->mu);
    out->checkpoints = d->checkpoints;
    out->checkpoint_failures = d->failures;
    pthread_mutex_unlock(&d->mu);
    out->resumed_ms = d->resumed_ms;
}
