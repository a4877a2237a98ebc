/* certs.c - `tessera certs init|issue|ensure|show`: a cluster's CA and its members' certificates
 * (lib/sec/certs.h). Exit codes: 0 done, 1 failed, 2 usage. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "sec/certs.h"
#include "util/flags.h"

#define SHOW_MAX 64

static const struct {
    const char *name, *args, *about;
} subs[] = {
    { "init", "DIR [--shards N] [--hosts LIST] [--days N] [--force]",
      "make a CA and the certificates of master, shards 0..N-1, verify, client, admin" },
    { "issue", "DIR --member M [--hosts LIST] [--days N] [--force]",
      "one more member's certificate, from DIR's CA (needs DIR/ca.key)" },
    { "ensure", "DIR [--member M] [--shards N] [--hosts LIST] [--days N]",
      "a service's first start: make what DIR lacks, keep what it has: the CA and the set\n"
      "         of init (only for the master, or without --member), M's certificate, and\n"
      "         admin.token (where the CA is made); elsewhere copy DIR from the master's host" },
    { "show", "FILE...", "what each certificate says: member, roles, SANs, expiry" },
    { NULL, NULL, NULL },
};

static void usage(FILE *f, const struct ts_flag *flags)
{
    ts_flags_usage(f, "tessera certs <subcommand> [args] [options]",
                   "The certificates of a cluster: one CA, and for each member a certificate\n"
                   "that names it as a SAN URI (tessera:shard/3) and its roles as SAN DNS\n"
                   "names (shard.tessera, ..., and server.tessera on the servers').\n"
                   "Members: " TS_MEMBER_FORMS ".", flags);
    fprintf(f, "\nsubcommands:\n");
    for (int i = 0; subs[i].name; i++)
        fprintf(f, "  %-6s %s\n         %s\n", subs[i].name, subs[i].args, subs[i].about);
}

/* "2027-04-02 10:00 UTC, 824 days left" or "..., expired 3 days ago". */
static void expiry(int64_t not_after, char *out, size_t n)
{
    time_t t = (time_t)not_after;
    int64_t left = not_after - (int64_t)time(NULL);
    struct tm tm;
    char date[32];

    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime_r(&t, &tm));
    if (left >= 0)
        snprintf(out, n, "%s, %" PRId64 " days left", date, left / 86400);
    else
        snprintf(out, n, "%s, EXPIRED %" PRId64 " days ago", date, -left / 86400);
}

static int show_one(const char *path)
{
    struct ts_err err = { 0 };
    struct ts_cert_info ci;
    char roles[96], when[80];
    size_t len;
    char *pem;
    ts_status st;

    if (ts_read_file(path, &pem, &len, &err)) {
        fprintf(stderr, "tessera certs show: %s\n", err.msg);
        return 1;
    }
    st = ts_cert_info(pem, len, &ci, &err);
    free(pem);
    if (st) {
        size_t n = strlen(path);
        bool key = n > 4 && strcmp(path + n - 4, ".key") == 0;
        fprintf(stderr, "tessera certs show: %s: %s%s\n", path, err.msg,
                key ? " (give the .pem beside it: a .key holds the private key)" : "");
        return 1;
    }
    ts_roles_format(ci.roles, roles, sizeof(roles));
    expiry(ci.not_after, when, sizeof(when));
    printf("%s\n  member   %s\n  CN       %s\n  roles    %s\n  SANs     %s\n  expires  %s\n",
           path, ci.identity[0] ? ci.identity : "(none: a role certificate shared by every "
           "holder)", ci.cn, roles, ci.sans[0] ? ci.sans : "(none)", when);
    return 0;
}

static int do_show(char **files, int n)
{
    int rc = 0;

    if (n < 1) {
        fprintf(stderr, "tessera certs show: name at least one certificate (tessera certs show "
                        "DIR/*.pem)\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        if (i)
            printf("\n");
        rc |= show_one(files[i]);
    }
    return rc;
}

static int do_init(char **pos, int npos, const struct ts_certs_opts *o)
{
    struct ts_err err = { 0 };
    char abs[PATH_MAX], stem[TS_MEMBER_MAX + 1];
    const char *dir;

    if (npos != 1) {
        fprintf(stderr, "tessera certs init: %s (tessera certs init DIR)\n",
                npos ? "one DIR only" : "name the directory to write into");
        return 2;
    }
    dir = pos[0];
    if (ts_certs_init(dir, o, &err)) {
        fprintf(stderr, "tessera certs init: %s\n", err.msg);
        if (err.code == TS_EEXIST)
            fprintf(stderr, "pass --force to replace every file, or use another DIR\n");
        return err.code == TS_EINVAL ? 2 : 1;
    }
    if (!realpath(dir, abs))
        snprintf(abs, sizeof(abs), "%s", dir);
    for (size_t i = 0; ts_certs_stem(o, i, stem, sizeof(stem)); i++)
        printf("wrote %s/%s.pem %s/%s.key\n", abs, stem, abs, stem);
    printf("each shard runs with its own shard-K.pem; more: tessera certs issue %s --member "
           "shard/NAME\n", abs);
    printf("the keys are unencrypted (mode 0600): keep ca.key off the cluster's machines\n");
    printf("export TESSERA_TLS_DIR=%s\n", abs);
    return 0;
}

static int do_issue(char **pos, int npos, const char *member, const struct ts_certs_opts *o)
{
    struct ts_err err = { 0 };
    char abs[PATH_MAX], stem[TS_MEMBER_MAX + 1];

    if (npos != 1 || !member) {
        fprintf(stderr, "tessera certs issue: %s (tessera certs issue DIR --member shard/3)\n",
                npos > 1 ? "one DIR only" : npos ? "--member: required"
                                                 : "name the directory of the CA");
        return 2;
    }
    if (ts_certs_issue(pos[0], member, o, stem, &err)) {
        fprintf(stderr, "tessera certs issue: %s\n", err.msg);
        if (err.code == TS_EEXIST)
            fprintf(stderr, "pass --force to replace it\n");
        /* a bad option is a usage error; a CA that does not match its key is not */
        return err.code == TS_EINVAL && (!strncmp(err.msg, "member:", 7) ||
                                         !strncmp(err.msg, "hosts:", 6) ||
                                         !strncmp(err.msg, "days:", 5)) ? 2 : 1;
    }
    if (!realpath(pos[0], abs))
        snprintf(abs, sizeof(abs), "%s", pos[0]);
    printf("wrote %s/%s.pem %s/%s.key (%s)\n", abs, stem, abs, stem, member);
    return 0;
}

static int do_ensure(char **pos, int npos, const char *member, const struct ts_certs_opts *o)
{
    struct ts_err err = { 0 };
    char abs[PATH_MAX];
    unsigned made = 0;
    bool master = !member || strcmp(member, "master") == 0;

    if (npos != 1) {
        fprintf(stderr, "tessera certs ensure: %s (tessera certs ensure DIR --member shard/3)\n",
                npos ? "one DIR only" : "name the certificate directory");
        return 2;
    }
    if (o->force) {
        fprintf(stderr, "tessera certs ensure: --force: ensure never replaces a file (use "
                        "init or issue with --force)\n");
        return 2;
    }
    if (ts_certs_ensure(pos[0], member, master, o, &made, &err)) {
        fprintf(stderr, "tessera certs ensure: %s\n", err.msg);
        return err.code == TS_EINVAL && !strncmp(err.msg, "member:", 7) ? 2 : 1;
    }
    if (!realpath(pos[0], abs))
        snprintf(abs, sizeof(abs), "%s", pos[0]);
    if (made & TS_ENSURED_SET)
        printf("made a CA and the certificates of tessera certs init in %s (keys 0600)\n", abs);
    if (made & TS_ENSURED_MEMBER)
        printf("made %s's certificate in %s\n", member, abs);
    if (made & TS_ENSURED_TOKEN)
        printf("made the admin token %s/admin.token (0600)\n", abs);
    if (!made)
        printf("%s: has what %s needs; nothing made\n", abs, member ? member : "the set");
    return 0;
}

int cmd_certs(int argc, char **argv)
{
    const char *hosts = NULL, *member = NULL;
    int64_t days = 0, shards = 0;
    bool force = false, help;
    const struct ts_flag flags[] = {
        { "hosts", TS_FLAG_STR, &hosts, "LIST", "init, issue: more names of the servers, IP "
                                                "addresses or DNS names: 10.0.0.5,node1", 0, 0 },
        { "days", TS_FLAG_INT, &days, "N", "init, issue: the members' certificates' validity "
                                           "(default 825; the CA's is 3650)", 1, 3650 },
        { "force", TS_FLAG_BOOL, &force, NULL, "init, issue: replace the files DIR has", 0, 0 },
        { "shards", TS_FLAG_INT, &shards, "N", "init, ensure: certificates for shards 0..N-1, "
          "shard-0.pem ... (default 2, what tessera up starts)", 1, TS_CERTS_MAX_SHARDS },
        { "member", TS_FLAG_STR, &member, "M", "issue, ensure: whom for: " TS_MEMBER_FORMS, 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_certs_opts o;
    struct ts_err err = { 0 };
    char *pos[SHOW_MAX + 1];
    int npos = SHOW_MAX + 1;

    if (ts_flags_parse(flags, argc, argv, pos, &npos, &help, &err)) {
        fprintf(stderr, "tessera certs: %s\n", err.msg);
        return 2;
    }
    if (help || npos < 1) {
        usage(help ? stdout : stderr, flags);
        return help ? 0 : 2;
    }
    o = (struct ts_certs_opts){ .hosts = hosts, .days = (int)days, .force = force,
                                .shards = (int)shards };
    if (strcmp(pos[0], "init") == 0 && !member)
        return do_init(pos + 1, npos - 1, &o);
    if (strcmp(pos[0], "issue") == 0 && !shards)
        return do_issue(pos + 1, npos - 1, member, &o);
    if (strcmp(pos[0], "ensure") == 0)
        return do_ensure(pos + 1, npos - 1, member, &o);
    if (member || shards || ((hosts || days || force) && strcmp(pos[0], "show") == 0)) {
        fprintf(stderr, "tessera certs %s: --shards is for init, --member for issue; --hosts, "
                        "--days and --force for both\n", pos[0]);
        return 2;
    }
    if (strcmp(pos[0], "show") == 0)
        return do_show(pos + 1, npos - 1);
    fprintf(stderr, "tessera certs: unknown subcommand '%s' (tessera certs --help)\n", pos[0]);
    return 2;
}
