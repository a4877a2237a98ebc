/* certs.c - `tessera certs init|show`: a cluster's CA and role certificates (lib/sec/certs.h).
 * Exit codes: 0 done, 1 failed, 2 usage. */
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
    { "init", "DIR [--hosts LIST] [--days N] [--force]", "make a CA and a certificate per role "
                                                         "in DIR" },
    { "show", "FILE...", "what each certificate says: CN, roles, SANs, expiry" },
    { NULL, NULL, NULL },
};

static void usage(FILE *f, const struct ts_flag *flags)
{
    ts_flags_usage(f, "tessera certs <subcommand> [args] [options]",
                   "The certificates of a cluster: one CA, and for each role a certificate\n"
                   "that names its roles as SAN DNS names (master.tessera, ..., and\n"
                   "server.tessera on the servers').", flags);
    fprintf(f, "\nsubcommands:\n");
    for (int i = 0; subs[i].name; i++)
        fprintf(f, "  %-6s %-40s %s\n", subs[i].name, subs[i].args, subs[i].about);
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
    printf("%s\n  CN       %s\n  roles    %s\n  SANs     %s\n  expires  %s\n", path, ci.cn,
           roles, ci.sans[0] ? ci.sans : "(none)", when);
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

static int do_init(char **pos, int npos, const char *hosts, int64_t days, bool force)
{
    struct ts_certs_opts o = { .hosts = hosts, .days = (int)days, .force = force };
    struct ts_err err = { 0 };
    char abs[PATH_MAX];
    const char *dir;

    if (npos != 1) {
        fprintf(stderr, "tessera certs init: %s (tessera certs init DIR)\n",
                npos ? "one DIR only" : "name the directory to write into");
        return 2;
    }
    dir = pos[0];
    if (ts_certs_init(dir, &o, &err)) {
        fprintf(stderr, "tessera certs init: %s\n", err.msg);
        if (err.code == TS_EEXIST)
            fprintf(stderr, "pass --force to replace every file, or use another DIR\n");
        return err.code == TS_EINVAL ? 2 : 1;
    }
    if (!realpath(dir, abs))
        snprintf(abs, sizeof(abs), "%s", dir);
    for (int i = 0; ts_certs_stems[i]; i++)
        printf("wrote %s/%s.pem %s/%s.key\n", abs, ts_certs_stems[i], abs, ts_certs_stems[i]);
    printf("the keys are unencrypted (mode 0600): keep ca.key off the cluster's machines\n");
    printf("export TESSERA_TLS_DIR=%s\n", abs);
    return 0;
}

int cmd_certs(int argc, char **argv)
{
    const char *hosts = NULL;
    int64_t days = 0;
    bool force = false, help;
    const struct ts_flag flags[] = {
        { "hosts", TS_FLAG_STR, &hosts, "LIST", "init: more names of the servers, IP addresses "
                                                "or DNS names: 10.0.0.5,node1", 0, 0 },
        { "days", TS_FLAG_INT, &days, "N", "init: the role certificates' validity (default "
                                           "825; the CA's is 3650)", 1, 3650 },
        { "force", TS_FLAG_BOOL, &force, NULL, "init: replace the files DIR has", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
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
    if (strcmp(pos[0], "init") == 0)
        return do_init(pos + 1, npos - 1, hosts, days, force);
    if (hosts || days || force) {
        fprintf(stderr, "tessera certs %s: --hosts, --days and --force are for init\n", pos[0]);
        return 2;
    }
    if (strcmp(pos[0], "show") == 0)
        return do_show(pos + 1, npos - 1);
    fprintf(stderr, "tessera certs: unknown subcommand '%s' (tessera certs --help)\n", pos[0]);
    return 2;
}
