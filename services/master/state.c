/* state.c - see state.h. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "util/log.h"
#include "util/proc.h"

/* Replaces dir/name with the n bytes at p (0600: the state holds the cluster's data-plane
 * key). */
static ts_status replace_file(const char *dir, const char *name, const void *p, size_t n,
                              struct ts_err *err)
{
    char path[4096];

    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return ts_err_set(err, TS_EINVAL, "%s: path too long", dir);
    return ts_file_replace(path, p, n, 0600, err);
}

/* dir/name's bytes into *out (malloc'd, *n); *out NULL when there is no such file. */
static ts_status read_file(const char *dir, const char *name, uint8_t **out, size_t *n,
                           struct ts_err *err)
{
    char path[4096];
    struct stat st;
    ssize_t r = 0;
    int fd;

    *out = NULL;
    *n = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return errno == ENOENT ? TS_OK
                               : ts_err_set(err, TS_EIO, "cannot read %s: %s", path,
                                            strerror(errno));
    if (fstat(fd, &st) < 0 || !(*out = malloc((size_t)st.st_size + 1))) {
        close(fd);
        return ts_err_set(err, TS_EIO, "cannot read %s: %s", path, strerror(errno));
    }
    while (*n < (size_t)st.st_size &&
           ((r = read(fd, *out + *n, (size_t)st.st_size - *n)) > 0 || (r < 0 && errno == EINTR)))
        *n += r > 0 ? (size_t)r : 0;
    close(fd);
    if (*n != (size_t)st.st_size) {
        free(*out);
        *out = NULL;
        return ts_err_set(err, TS_EIO, "cannot read %s: short read", path);
    }
    return TS_OK;
}

ts_status master_state_open(struct master_state *s, const char *dir, struct ts_err *err)
{
    char path[4096];

    memset(s, 0, sizeof(*s));
    s->lock_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->synced, NULL);
    pthread_mutex_init(&s->save_mu, NULL);
    if (!dir)
        return TS_OK;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "--state-dir %s: %s", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/lock", dir);
    if ((s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return ts_err_set(err, TS_EIO, "--state-dir %s: %s", path, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return ts_err_set(err, errno == EWOULDBLOCK ? TS_EEXIST : TS_EIO, "--state-dir %s: %s",
                          dir, errno == EWOULDBLOCK ? "another master uses it; stop it first, "
                          "or give this one another directory" : strerror(errno));
    s->dir = strdup(dir);
    /* Under the lock no other master writes here: what a killed one was writing goes. */
    size_t swept = ts_files_sweep(dir);
    if (swept)
        ts_log(TS_INFO, "master", "--state-dir %s: removed %zu temporary files a killed master "
               "left", dir, swept);
    return TS_OK;
}

bool master_state_durable_dir(const struct master_state *s)
{
    return s->dir != NULL;
}

ts_status master_state_put(struct master_state *s, const char *name, const void *p, size_t n,
                           struct ts_err *err)
{
    return s->dir ? replace_file(s->dir, name, p, n, err) : TS_OK;
}

ts_status master_state_get(struct master_state *s, const char *name, uint8_t **out, size_t *n,
                           struct ts_err *err)
{
    *out = NULL;
    *n = 0;
    return s->dir ? read_file(s->dir, name, out, n, err) : TS_OK;
}

void master_state_keep(struct master_state *s, const char *name,
                       ts_status (*encode)(void *ctx, uint8_t **out, size_t *n,
                                           struct ts_err *err),
                       void *ctx)
{
    s->kept = name;
    s->encode = encode;
    s->ctx = ctx;
}

/* Writes the kept file if its bytes differ from what was last written; save_mu held, so that
 * two writers neither share the temporary file nor put older bytes over newer. */
static ts_status save_locked(struct master_state *s, struct ts_err *err)
{
    struct ts_err why = { 0 };
    uint8_t *buf = NULL;
    size_t n = 0;

    if (s->encode(s->ctx, &buf, &n, &why) || !buf) {
        free(buf);
        return ts_err_set(err, why.code ? why.code : TS_ENOMEM, "%s: %s", s->kept,
                          why.msg[0] ? why.msg : "out of memory");
    }
    if (n == s->last_len && !memcmp(buf, s->last, n)) {
        free(buf);   /* nothing changed */
        return TS_OK;
    }
    if (replace_file(s->dir, s->kept, buf, n, &why)) {
        free(buf);
        return ts_err_set(err, why.code, "%s: %s", s->kept, why.msg);
    }
    free(s->last);
    s->last = buf;
    s->last_len = n;
    return TS_OK;
}

/* The saver's write: a failure is logged, and the next period tries again. */
static void save(struct master_state *s)
{
    struct ts_err err = { 0 };

    pthread_mutex_lock(&s->save_mu);
    if (save_locked(s, &err))
        ts_log(TS_ERROR, "master", "%s (tried again in %d ms)", err.msg, STATE_PERIOD_MS);
    pthread_mutex_unlock(&s->save_mu);
}

/* A group commit: the caller's change is on disk once a write that began after it asked has
 * finished. One caller writes for all who asked before its write began; the others wait for
 * it, so N deregistrations at once cost a few writes of the whole state, not N (each is
 * O(members): 10,000 workers leaving one by one took 26 ms each, docs/scaling.md). */
ts_status master_state_sync(struct master_state *s, struct ts_err *err)
{
    uint64_t mine;
    ts_status st;

    if (!s->dir || !s->kept)
        return TS_OK;
    pthread_mutex_lock(&s->mu);
    mine = ++s->asked;
    while (s->covered < mine) {
        uint64_t upto;
        struct ts_err e = { 0 };
        if (s->syncing) {
            pthread_cond_wait(&s->synced, &s->mu);
            continue;
        }
        s->syncing = true;
        upto = s->asked;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->save_mu);
        st = save_locked(s, &e);
        pthread_mutex_unlock(&s->save_mu);
        pthread_mutex_lock(&s->mu);
        s->syncing = false;
        s->covered = upto;
        s->cover_st = st;
        s->cover_err = e;
        pthread_cond_broadcast(&s->synced);
    }
    /* the newest write's word: a later one that succeeded wrote this caller's change too */
    if ((st = s->cover_st) && err)
        *err = s->cover_err;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void *saver_main(void *arg)
{
    struct master_state *s = arg;
    bool stop;

    do {
        struct timespec ts;
        save(s);
        pthread_mutex_lock(&s->mu);
        ts_abstime_ms(&ts, STATE_PERIOD_MS);
        if (!s->stop)
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
    } while (!stop);
    save(s);   /* the last word before a clean exit */
    return NULL;
}

void master_state_start(struct master_state *s)
{
    if (!s->dir || !s->kept)
        return;
    s->saving = pthread_create(&s->saver, NULL, saver_main, s) == 0;
}

void master_state_stop(struct master_state *s)
{
    if (!s->saving)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->saver, NULL);
    s->saving = false;
}

void master_state_close(struct master_state *s)
{
    master_state_stop(s);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    free(s->dir);
    free(s->last);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->synced);
    pthread_mutex_destroy(&s->save_mu);
    s->dir = NULL;
    s->last = NULL;
    s->lock_fd = -1;
}
