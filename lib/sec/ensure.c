/* ensure.c - a service's first start: the certificate files a directory lacks, made from the
 * pieces of certs.c and keys.c (ts_certs_ensure; see certs.h). Where the CA may be made is
 * the caller's word (new_ca); nothing here replaces a file. */
#include "sec/certs.h"

#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

static bool exists(const char *dir, const char *file)
{
    char path[PATH_MAX];
    struct stat sb;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return stat(path, &sb) == 0;
}

static ts_status copy_from_master(const char *dir, const char *file, struct ts_err *err)
{
    return ts_err_set(err, TS_ENOTFOUND, "%s/%s: not there, and this member does not make "
                      "it: copy it from the master's host (its certificate directory), or "
                      "run `tessera certs init %s` there first", dir, file, dir);
}

ts_status ts_certs_ensure(const char *dir, const char *member, bool new_ca,
                          const struct ts_certs_opts *o, unsigned *made, struct ts_err *err)
{
    char stem[TS_MEMBER_MAX + 1], file[TS_MEMBER_MAX + 8], path[PATH_MAX];
    unsigned did = 0;
    ts_status st = TS_OK;

    if (member && (st = ts_member_check(member, err)))
        goto out;
    if (!exists(dir, "ca.pem")) {
        if (!new_ca) {
            st = copy_from_master(dir, "ca.pem", err);
            goto out;
        }
        if ((st = ts_certs_init(dir, o, err)))
            goto out;
        did |= TS_ENSURED_SET;
    }
    if (member) {
        ts_member_stem(member, stem, sizeof(stem));
        snprintf(file, sizeof(file), "%s.pem", stem);
        if (!exists(dir, file)) {
            if ((st = ts_certs_issue(dir, member, o, NULL, err)))
                goto out;
            did |= TS_ENSURED_MEMBER;
        }
    }
    if (!exists(dir, "admin.token")) {
        if (!new_ca) {
            st = copy_from_master(dir, "admin.token", err);
            goto out;
        }
        snprintf(path, sizeof(path), "%s/admin.token", dir);
        if ((st = ts_token_init(path, err)))
            goto out;
        did |= TS_ENSURED_TOKEN;
    }
out:
    if (made)
        *made = did;
    return st;
}
