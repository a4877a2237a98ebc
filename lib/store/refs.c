/* refs.c - named pointers to manifests, like git's: refs/heads/<branch>, refs/tags/<tag>.
 *
 * A ref is a file holding one id in hex and a newline, replaced by the crash-safe write, so
 * a reader sees the old value or the new one. Compare-and-swap needs more than rename: two
 * writers could both read the old value and both rename. Every update therefore holds an
 * exclusive flock on dir/refs.lock from its read to its rename; flock works across
 * processes, and on NFS (Linux emulates it with byte-range locks), so hosts sharing the store
 * serialize too. Ref updates are rare (one per snapshot), so one lock for all refs is enough. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/internal.h"

#define REF_FILE_LEN (TS_STORE_HEX_LEN + 1)

static bool component_ok(const char *c, size_t n)
{
    if (n == 0 || c[0] == '.' || (n >= 5 && memcmp(c + n - 5, ".lock", 5) == 0))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = c[i];

        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

bool ts_store_ref_valid(const char *name)
{
    const char *p, *slash;

    if (!name || strlen(name) > TS_STORE_REF_MAX)
        return false;
    if (strncmp(name, "heads/", 6) != 0 && strncmp(name, "tags/", 5) != 0)
        return false;
    /* Leading '.' bans ".", ".." and hidden names in every component. */
    for (p = strchr(name, '/') + 1;; p = slash + 1) {
        slash = strchr(p, '/');
        if (!component_ok(p, slash ? (size_t)(slash - p) : strlen(p)))
            return false;
        if (!slash)
            return true;
    }
}

static ts_status check_name(const char *name, struct ts_err *err)
{
    if (ts_store_ref_valid(name))
        return TS_OK;
    return ts_err_set(err, TS_EINVAL, "store: ref name '%.64s': want heads/... or tags/... of "
                      "[A-Za-z0-9._-] components, no '..' or leading '.', at most %d bytes",
                      name ? name : "(null)", TS_STORE_REF_MAX);
}

/* Reads up to cap bytes of the small file path (a ref, HEAD) into buf, *n set. TS_ENOTFOUND
 * (err untouched) when it does not exist. */
static ts_status read_small(struct ts_store *s, const char *path, char *buf, size_t cap,
                            ssize_t *n, struct ts_err *err)
{
    int fd = s->sys.open(path, O_RDONLY | O_CLOEXEC, 0);

    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        return TS_ENOTFOUND;
    if (fd < 0)
        return ts_err_set(err, TS_EIO, "store: open %s: %s", path, strerror(errno));
    *n = s->sys.read(fd, buf, cap);
    s->sys.close(fd);
    if (*n < 0)
        return ts_err_set(err, TS_EIO, "store: read %s: %s", path, strerror(errno));
    return TS_OK;
}

static ts_status read_ref(struct ts_store *s, const char *name, uint8_t id[TS_STORE_ID_LEN],
                          struct ts_err *err)
{
    char path[TS__PATH_MAX], text[REF_FILE_LEN + 1];
    ssize_t n = 0;
    ts_status st;

    snprintf(path, sizeof(path), "%s/refs/%s", s->dir, name);
    if ((st = read_small(s, path, text, sizeof(text), &n, err)) == TS_ENOTFOUND)
        return ts_err_set(err, TS_ENOTFOUND, "store: ref %s: not found", name);
    if (st)
        return st;
    if (n != REF_FILE_LEN || text[TS_STORE_HEX_LEN] != '\n')
        return ts_err_set(err, TS_ECORRUPT, "store: ref %s: file is not one hex id", name);
    text[TS_STORE_HEX_LEN] = '\0';
    if (!ts_store_unhex(text, id))
        return ts_err_set(err, TS_ECORRUPT, "store: ref %s: file is not one hex id", name);
    return TS_OK;
}

ts_status ts_store_ref_get(struct ts_store *s, const char *name, uint8_t id[TS_STORE_ID_LEN],
                           struct ts_err *err)
{
    ts_status st = check_name(name, err);

    return st != TS_OK ? st : read_ref(s, name, id, err);
}

static ts_status lock_refs(struct ts_store *s, int *fdp, struct ts_err *err)
{
    char path[TS__PATH_MAX];
    int fd;

    snprintf(path, sizeof(path), "%s/refs.lock", s->dir);
    fd = s->sys.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return ts_err_set(err, TS_EIO, "store: open %s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;

            s->sys.close(fd);
            return ts_err_set(err, TS_EIO, "store: flock %s: %s", path, strerror(e));
        }
    }
    *fdp = fd;
    return TS_OK;
}

static void unlock_refs(struct ts_store *s, int fd)
{
    flock(fd, LOCK_UN);
    s->sys.close(fd);
}

/* Under the lock: compares the ref's current value with expect (NULL: any; zeros: absent). */
static ts_status compare(struct ts_store *s, const char *name, const uint8_t *expect,
                         struct ts_err *err)
{
    static const uint8_t zero[TS_STORE_ID_LEN];
    char want[TS_STORE_HEX_LEN + 1], have[TS_STORE_HEX_LEN + 1];
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    ts_status st;

    if (!expect)
        return TS_OK;
    st = read_ref(s, name, cur, &e);
    if (st == TS_ENOTFOUND && memcmp(expect, zero, sizeof(zero)) == 0)
        return TS_OK;
    if (st == TS_ENOTFOUND)
        return ts_err_set(err, TS_ESTATE, "store: ref %s: expected %s, but it does not exist",
                          name, ts_store_hex(expect, want));
    if (st != TS_OK)
        return ts_err_set(err, st, "%s", e.msg);
    if (memcmp(cur, expect, sizeof(cur)) != 0)
        return ts_err_set(err, TS_ESTATE, "store: ref %s: expected %s, but it is %s (another "
                          "writer moved it; re-read and retry)", name,
                          memcmp(expect, zero, sizeof(zero)) ? ts_store_hex(expect, want)
                                                             : "(absent)",
                          ts_store_hex(cur, have));
    return TS_OK;
}

/* Creates the directories between refs/ and the ref's file. */
static ts_status make_parents(struct ts_store *s, const char *name, struct ts_err *err)
{
    char path[TS__PATH_MAX];
    const char *slash = strchr(name, '/');
    ts_status st = TS_OK;

    /* The first component (heads, tags) exists since open. */
    while (st == TS_OK && (slash = strchr(slash + 1, '/')) != NULL) {
        snprintf(path, sizeof(path), "%s/refs/%.*s", s->dir, (int)(slash - name), name);
        st = ts__fs_mkdir(s, path, err);
    }
    return st;
}

ts_status ts_store_ref_set(struct ts_store *s, const char *name,
                           const uint8_t id[TS_STORE_ID_LEN], const uint8_t *expect_old,
                           struct ts_err *err)
{
    char path[TS__PATH_MAX], text[REF_FILE_LEN + 1];
    struct ts__iov part = { text, REF_FILE_LEN };
    ts_status st;
    int lk;

    st = check_name(name, err);
    if (st != TS_OK)
        return st;
    if (!id)
        return ts_err_set(err, TS_EINVAL, "store: ref %s: id is required", name);
    ts_store_hex(id, text);
    text[TS_STORE_HEX_LEN] = '\n';
    snprintf(path, sizeof(path), "%s/refs/%s", s->dir, name);
    st = lock_refs(s, &lk, err);
    if (st != TS_OK)
        return st;
    st = compare(s, name, expect_old, err);
    if (st == TS_OK)
        st = make_parents(s, name, err);
    if (st == TS_OK)
        st = ts__fs_publish(s, &part, 1, path, 0, err);
    unlock_refs(s, lk);
    return st;
}

ts_status ts_store_ref_delete(struct ts_store *s, const char *name, const uint8_t *expect_old,
                              struct ts_err *err)
{
    static const uint8_t zero[TS_STORE_ID_LEN];
    char path[TS__PATH_MAX], dir[TS__PATH_MAX];
    uint8_t cur[TS_STORE_ID_LEN];
    ts_status st;
    int lk;

    st = check_name(name, err);
    if (st != TS_OK)
        return st;
    if (expect_old && memcmp(expect_old, zero, sizeof(zero)) == 0)
        return ts_err_set(err, TS_EINVAL, "store: ref %s: delete: expect_old of zeros", name);
    snprintf(path, sizeof(path), "%s/refs/%s", s->dir, name);
    st = lock_refs(s, &lk, err);
    if (st != TS_OK)
        return st;
    st = read_ref(s, name, cur, err);
    if (st == TS_OK)
        st = compare(s, name, expect_old, err);
    if (st == TS_OK && s->sys.unlink(path) != 0)
        st = ts_err_set(err, TS_EIO, "store: unlink %s: %s", path, strerror(errno));
    if (st == TS_OK) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
        st = ts__fs_sync_dir(s, dir, err);
    }
    unlock_refs(s, lk);
    return st;
}

struct list {
    struct ts_store_ref *v;
    size_t n, cap;
    const char *prefix;
};

static ts_status add(struct ts_store *s, struct list *l, const char *name, struct ts_err *err)
{
    uint8_t id[TS_STORE_ID_LEN];
    ts_status st;

    if (!ts_store_ref_valid(name) || strncmp(name, l->prefix, strlen(l->prefix)) != 0)
        return TS_OK;
    st = read_ref(s, name, id, err);
    if (st == TS_ENOTFOUND) /* deleted while we listed */
        return TS_OK;
    if (st != TS_OK)
        return st;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        void *p = realloc(l->v, cap * sizeof(*l->v));

        if (!p)
            return ts_err_set(err, TS_ENOMEM, "store: ref list: out of memory");
        l->v = p;
        l->cap = cap;
    }
    snprintf(l->v[l->n].name, sizeof(l->v[l->n].name), "%s", name);
    memcpy(l->v[l->n].id, id, sizeof(id));
    l->n++;
    return TS_OK;
}

static bool is_dir(const char *dir, const char *name)
{
    char p[TS__PATH_MAX];
    struct stat sb;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Walks refs/<rel>; depth is bounded by the name length limit. */
static ts_status walk(struct ts_store *s, struct list *l, const char *rel, struct ts_err *err)
{
    char path[TS__PATH_MAX], sub[TS__PATH_MAX];
    ts_status st = TS_OK;
    struct dirent *de;
    DIR *d;

    snprintf(path, sizeof(path), "%s/refs/%s", s->dir, rel);
    d = opendir(path);
    if (!d)
        return errno == ENOENT ? TS_OK
                               : ts_err_set(err, TS_EIO, "store: opendir %s: %s", path,
                                            strerror(errno));
    while (st == TS_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strlen(rel) + strlen(de->d_name) + 1 > TS_STORE_REF_MAX)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name);
        if (de->d_type == DT_DIR || (de->d_type == DT_UNKNOWN && is_dir(path, de->d_name)))
            st = walk(s, l, sub, err);
        else
            st = add(s, l, sub, err);
    }
    closedir(d);
    return st;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct ts_store_ref *)a)->name, ((const struct ts_store_ref *)b)->name);
}

ts_status ts_store_ref_list(struct ts_store *s, const char *prefix, struct ts_store_ref **refs,
                            size_t *n, struct ts_err *err)
{
    struct list l = { .prefix = prefix ? prefix : "" };
    ts_status st = walk(s, &l, "heads", err);

    if (st == TS_OK)
        st = walk(s, &l, "tags", err);
    if (st != TS_OK) {
        free(l.v);
        return st;
    }
    if (l.n)
        qsort(l.v, l.n, sizeof(*l.v), by_name);
    *refs = l.v;
    *n = l.n;
    return TS_OK;
}

/* HEAD: one line "heads/<branch>\n", written like a ref under the same lock. */
ts_status ts_store_head_get(struct ts_store *s, char name[TS_STORE_REF_MAX + 1],
                            struct ts_err *err)
{
    char path[TS__PATH_MAX], text[TS_STORE_REF_MAX + 2];
    ssize_t n = 0;
    ts_status st;

    snprintf(path, sizeof(path), "%s/HEAD", s->dir);
    if ((st = read_small(s, path, text, sizeof(text), &n, err)) == TS_ENOTFOUND) {
        snprintf(name, TS_STORE_REF_MAX + 1, "heads/main");
        return TS_OK;
    }
    if (st)
        return st;
    if (n < 2 || text[n - 1] != '\n')
        return ts_err_set(err, TS_ECORRUPT, "store: HEAD: not one branch name and a newline");
    text[n - 1] = '\0';
    if (strncmp(text, "heads/", 6) != 0 || !ts_store_ref_valid(text))
        return ts_err_set(err, TS_ECORRUPT, "store: HEAD: '%.64s' is not a branch (heads/...)",
                          text);
    snprintf(name, TS_STORE_REF_MAX + 1, "%s", text);
    return TS_OK;
}

ts_status ts_store_head_set(struct ts_store *s, const char *name, struct ts_err *err)
{
    char path[TS__PATH_MAX], text[TS_STORE_REF_MAX + 2];
    struct ts__iov part = { text, 0 };
    ts_status st;
    int lk;

    if (!name || strncmp(name, "heads/", 6) != 0 || !ts_store_ref_valid(name))
        return ts_err_set(err, TS_EINVAL, "store: HEAD: '%.64s' is not a branch name "
                          "(heads/ then [A-Za-z0-9._-] components)", name ? name : "(null)");
    part.n = (size_t)snprintf(text, sizeof(text), "%s\n", name);
    snprintf(path, sizeof(path), "%s/HEAD", s->dir);
    if ((st = lock_refs(s, &lk, err)) != TS_OK)
        return st;
    st = ts__fs_publish(s, &part, 1, path, 0, err);
    unlock_refs(s, lk);
    return st;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

ts_status ts_store_object_find(struct ts_store *s, const char *prefix,
                               uint8_t id[TS_STORE_ID_LEN], struct ts_err *err)
{
    char path[TS__PATH_MAX], low[TS_STORE_HEX_LEN + 1];
    size_t n = prefix ? strlen(prefix) : 0, found = 0;
    struct dirent *de;
    DIR *d;

    if (n < 4 || n > TS_STORE_HEX_LEN)
        return ts_err_set(err, TS_EINVAL, "store: id prefix '%.70s': 4 to 64 hex digits",
                          prefix ? prefix : "");
    for (size_t i = 0; i < n; i++) {
        if (hexval(prefix[i]) < 0)
            return ts_err_set(err, TS_EINVAL, "store: id prefix '%.70s': not hex", prefix);
        low[i] = (char)(prefix[i] | 0x20);
    }
    low[n] = '\0';
    snprintf(path, sizeof(path), "%s/manifests/%.2s", s->dir, low);
    if (!(d = opendir(path)))
        return errno == ENOENT ? ts_err_set(err, TS_ENOTFOUND, "store: no snapshot id starts "
                                            "with %s", low)
                               : ts_err_set(err, TS_EIO, "store: opendir %s: %s", path,
                                            strerror(errno));
    while ((de = readdir(d)) != NULL) {
        if (strlen(de->d_name) != TS_STORE_HEX_LEN || strncmp(de->d_name, low, n) != 0)
            continue;
        if (found++ == 0 && !ts_store_unhex(de->d_name, id))
            found--;
    }
    closedir(d);
    if (found == 0)
        return ts_err_set(err, TS_ENOTFOUND, "store: no snapshot id starts with %s", low);
    if (found > 1)
        return ts_err_set(err, TS_EINVAL, "store: id prefix %s is ambiguous (%zu snapshots); "
                          "give more digits", low, found);
    return TS_OK;
}
