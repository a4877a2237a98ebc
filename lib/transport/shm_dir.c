/* shm_dir.c - where the shm listener's Unix socket lives, and who may reach it.
 *
 * Why a directory of its own: a socket in the abstract namespace can be reached by any local
 * process of any user, and its name cannot be protected. A socket file can: each listener
 * makes a directory with mkdtemp, mode 0700 (0750 and given to the group named by
 * $TESSERA_SHM_GROUP), and binds "sock" in it, so the kernel keeps every other user from
 * even reaching the socket; the acceptor then checks its peer's SO_PEERCRED (shm_setup.c),
 * and the connector that the socket's holder owns the directory. The directory goes under
 * $TESSERA_SHM_DIR, else $XDG_RUNTIME_DIR (when set and writable), else /tmp.
 *
 * A listener killed with SIGKILL leaves its directory behind. Its name is
 * tessera-shm-PIDNS-PID-XXXXXX, so the next listen of any process of the same user sweeps the
 * ones whose PID no longer runs. The pid namespace is in the name because a pid means
 * something only inside its namespace: a process in another one (a container sharing /tmp)
 * would look dead from here while its listener is alive.
 * Threads: no state of its own; any thread may listen or connect. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/shm_internal.h"
#include "util/knobs.h"

/* "pid:[4026531836]" -> "4026531836"; "0" where unknown (then nothing is swept). */
static void pidns_id(char *buf, size_t n)
{
    char link[64];
    ssize_t k = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);

    link[k > 0 ? k : 0] = '\0';
    snprintf(buf, n, "%.*s", (int)strspn(k > 5 ? link + 5 : "", "0123456789"),
             k > 5 ? link + 5 : "");
    if (!buf[0])
        snprintf(buf, n, "0");
}

/* $TESSERA_SHM_DIR, else $XDG_RUNTIME_DIR where we may create in it, else /tmp. */
static const char *base_dir(void)
{
    const char *d = ts_knob_str(TS_KNOB_SHM_DIR);

    if (d)
        return d;
    d = getenv("XDG_RUNTIME_DIR");
    if (d && *d && access(d, W_OK | X_OK) == 0)
        return d;
    return "/tmp";
}

/* $TESSERA_SHM_GROUP (a name or a number) into *gid; SHM_NO_GROUP when unset. */
static ts_status group_of(gid_t *gid, struct ts_err *e)
{
    const char *s = ts_knob_str(TS_KNOB_SHM_GROUP);
    char buf[4096], *end;
    struct group g, *found = NULL;
    unsigned long v;

    *gid = SHM_NO_GROUP;
    if (!s || !*s)
        return TS_OK;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (isdigit((unsigned char)s[0]) && !*end && !errno && v < SHM_NO_GROUP) {
        *gid = (gid_t)v;
        return TS_OK;
    }
    if (getgrnam_r(s, &g, buf, sizeof(buf), &found) != 0 || !found)
        return ts_err_set(e, TS_EINVAL, "shm listen: TESSERA_SHM_GROUP='%s' is no group of this "
                          "host (want a group name or a gid)", s);
    *gid = found->gr_gid;
    return TS_OK;
}

/* Removes the directories of this user's dead listeners in base (see the file comment). */
static void sweep(const char *base, const char *prefix)
{
    size_t plen = strlen(prefix);
    DIR *d = opendir(base);
    struct dirent *de;

    while (d && (de = readdir(d))) {
        struct stat st;
        char *end;
        long pid;
        int sub;

        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        pid = strtol(de->d_name + plen, &end, 10);
        /* Alive, or alive under another user (EPERM): not ours to judge. */
        if (pid <= 0 || *end != '-' || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        /* Opened without following a link, and its owner checked on what was opened. */
        sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue;
        if (fstat(sub, &st) == 0 && st.st_uid == geteuid()) {
            unlinkat(sub, SHM_SOCK_NAME, 0);
            unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        }
        close(sub);
    }
    if (d)
        closedir(d);
}

/* Gives dir (and later its socket) to group: 0750, so its members may reach the socket. */
static ts_status give_to_group(const char *dir, gid_t group, struct ts_err *e)
{
    if (chown(dir, (uid_t)-1, group) != 0 || chmod(dir, 0750) != 0)
        return ts_err_set(e, TS_EINVAL, "shm listen: TESSERA_SHM_GROUP: cannot give %s to "
                          "group %u: %s (this user must be a member of it)", dir,
                          (unsigned)group, strerror(errno));
    return TS_OK;
}

ts_status shm_dir_make(char *dir, gid_t *group, struct ts_err *e)
{
    const char *base = base_dir();
    char ns[24], prefix[64];
    ts_status st;
    size_t n;

    if ((st = group_of(group, e)))
        return st;
    if (base[0] != '/' || base[strcspn(base, " \t\n")])
        return ts_err_set(e, TS_EINVAL, "shm listen: the socket directory's base '%s' %s: set "
                          "TESSERA_SHM_DIR to another", base, base[0] != '/' ?
                          "is not an absolute path, which peers elsewhere could not follow" :
                          "holds white space, which the address cannot carry");
    pidns_id(ns, sizeof(ns));
    snprintf(prefix, sizeof(prefix), "tessera-shm-%s-", ns);
    n = (size_t)snprintf(dir, SHM_PATH_MAX, "%s/%s%d-XXXXXX", base, prefix, (int)getpid());
    /* The socket's path must fit sun_path with its NUL. */
    if (n + 1 + strlen(SHM_SOCK_NAME) >= SHM_PATH_MAX)
        return ts_err_set(e, TS_EINVAL, "shm listen: base directory '%s' is too long: the "
                          "socket's path would take %zu bytes of a Unix socket's %d: set "
                          "TESSERA_SHM_DIR to a shorter one", base,
                          n + 2 + strlen(SHM_SOCK_NAME), SHM_PATH_MAX);
    if (strcmp(ns, "0") != 0)
        sweep(base, prefix);
    if (!mkdtemp(dir))
        return ts_err_set(e, TS_EIO, "shm listen: cannot make a directory in '%s'%s: %s", base,
                          ts_knob_is_set(TS_KNOB_SHM_DIR) ? " (TESSERA_SHM_DIR)" : "",
                          strerror(errno));
    if (*group != SHM_NO_GROUP && (st = give_to_group(dir, *group, e))) {
        rmdir(dir);
        return st;
    }
    return TS_OK;
}

ts_status shm_dir_bind(int fd, const char *dir, gid_t group, char *path, struct ts_err *e)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, SHM_SOCK_NAME);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return ts_err_set(e, TS_EIO, "shm listen: bind %s: %s", sa.sun_path, strerror(errno));
    /* Connecting takes write permission on the socket: the owner's, and the group's when
     * one is let in (the directory already keeps everyone else out). */
    if ((group != SHM_NO_GROUP && chown(sa.sun_path, (uid_t)-1, group) != 0) ||
        chmod(sa.sun_path, group != SHM_NO_GROUP ? 0660 : 0600) != 0)
        return ts_err_set(e, TS_EIO, "shm listen: setting who may use %s: %s", sa.sun_path,
                          strerror(errno));
    snprintf(path, SHM_PATH_MAX, "%s", sa.sun_path);
    return TS_OK;
}

void shm_dir_remove(const char *dir)
{
    char path[SHM_PATH_MAX + 8];

    snprintf(path, sizeof(path), "%s/%s", dir, SHM_SOCK_NAME);
    unlink(path);
    rmdir(dir);
}

bool shm_dir_check(const char *path, uid_t *owner)
{
    char dir[SHM_PATH_MAX];
    struct stat so, di;
    char *slash;

    if (strlen(path) >= sizeof(dir) || lstat(path, &so) != 0 || !S_ISSOCK(so.st_mode))
        return false;
    snprintf(dir, sizeof(dir), "%s", path);
    if (!(slash = strrchr(dir, '/')) || slash == dir)
        return false;
    *slash = '\0';
    /* Only its owner can have put the socket there, and the owner holds it. */
    if (lstat(dir, &di) != 0 || !S_ISDIR(di.st_mode) || (di.st_mode & 022) ||
        di.st_uid != so.st_uid)
        return false;
    /* The acceptor's rule (shm_setup.c, allowed): our uid, or our group let in. */
    if (so.st_uid != geteuid() && !((so.st_mode & S_IWGRP) && so.st_gid == getegid()))
        return false;
    *owner = di.st_uid;
    return true;
}
