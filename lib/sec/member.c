/* member.c - the member a certificate names: its grammar, its roles, its files; see certs.h,
 * "Member identities".
 *
 * One table says, for each kind of member, the roles its certificate carries and whether a
 * name follows the kind; everything else (the check, the roles, the file stem, the SANs
 * certs.c writes) is read from it, so a kind is added in one row. */
#include "sec/certs.h"

#include <stdio.h>
#include <string.h>

static const struct kind {
    const char *kind;
    unsigned roles;
    enum { NONE, OPTIONAL, REQUIRED } name;
    bool any;                /* "*" is a name: every member of the kind (worker/ *) */
} kinds[] = {
    { "master", TS_ROLE_MASTER | TS_ROLE_SERVER, NONE, false },
    { "shard", TS_ROLE_SHARD | TS_ROLE_SERVER, REQUIRED, false },
    { "worker", TS_ROLE_WORKER, REQUIRED, true },
    { "verify", TS_ROLE_VERIFY | TS_ROLE_SERVER, OPTIONAL, false },
    { "admin", TS_ROLE_ADMIN | TS_ROLE_WORKER, OPTIONAL, false },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* The row of member's kind, and its name ("" for none) in *name; NULL for an unknown kind. */
static const struct kind *kind_of(const char *member, const char **name)
{
    size_t n = member ? strcspn(member, "/") : 0;

    for (size_t i = 0; i < NKINDS; i++)
        if (strlen(kinds[i].kind) == n && strncmp(member, kinds[i].kind, n) == 0) {
            *name = member[n] ? member + n + 1 : "";
            return &kinds[i];
        }
    return NULL;
}

ts_status ts_member_check(const char *member, struct ts_err *err)
{
    const char *name = "";
    const struct kind *k = kind_of(member, &name);
    struct ts_err why = { 0 };

    if (!member || !*member)
        return ts_err_set(err, TS_EINVAL, "member: required: " TS_MEMBER_FORMS);
    if (!k)
        return ts_err_set(err, TS_EINVAL, "member: '%.72s': unknown kind; want " TS_MEMBER_FORMS,
                          member);
    if (k->name == NONE && member[strlen(k->kind)])
        return ts_err_set(err, TS_EINVAL, "member: '%.72s': %s takes no name", member, k->kind);
    if (k->name == REQUIRED && !member[strlen(k->kind)])
        return ts_err_set(err, TS_EINVAL, "member: '%s' needs a name: %s/NAME (%s)", member,
                          k->kind, k->any ? "a job id, or * for any job" : "shard/0, shard/eu-1");
    if (k->name == NONE || !member[strlen(k->kind)] || (k->any && strcmp(name, "*") == 0))
        return TS_OK;
    if (ts_job_id_check("the name", name, &why))
        return ts_err_set(err, TS_EINVAL, "member: '%.72s': %s", member, why.msg);
    return TS_OK;
}

unsigned ts_member_roles(const char *member)
{
    const char *name;
    const struct kind *k = kind_of(member, &name);

    return k && !ts_member_check(member, NULL) ? k->roles : 0;
}

const char *ts_member_name(const char *member, const char *kind)
{
    const char *name;
    const struct kind *k = kind_of(member, &name);

    return k && strcmp(k->kind, kind) == 0 ? name : NULL;
}

void ts_member_stem(const char *member, char *buf, size_t n)
{
    const char *name = ts_member_name(member, "worker");
    char *slash;

    if (!n)
        return;
    if (name && strcmp(name, "*") == 0) {
        snprintf(buf, n, "client");   /* what TESSERA_TLS_DIR hands the CLI and trainers */
        return;
    }
    snprintf(buf, n, "%s", member);
    if ((slash = strchr(buf, '/')))
        *slash = '-';
}
