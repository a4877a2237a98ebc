/* flags.c - see flags.h. */
#include "util/flags.h"
#include "util/hook.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct ts_flag *find(const struct ts_flag *flags, const char *name, size_t n)
{
    for (const struct ts_flag *f = flags; f->name; f++)
        if (strlen(f->name) == n && strncmp(f->name, name, n) == 0)
            return f;
    return NULL;
}

static ts_status set_value(const struct ts_flag *f, const char *v, struct ts_err *err)
{
    char *end;
    long long x;

    if (f->kind == TS_FLAG_STR) {
        *(const char **)f->ptr = v;
        return TS_OK;
    }
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || end == v || *end)
        return ts_err_set(err, TS_EINVAL, "--%s: '%s' is not an integer", f->name, v);
    if ((f->min || f->max) && (x < f->min || x > f->max))
        return ts_err_set(err, TS_EINVAL, "--%s: %lld is out of range %" PRId64 "..%" PRId64,
                          f->name, x, f->min, f->max);
    *(int64_t *)f->ptr = x;
    return TS_OK;
}

static ts_status parse_one(const struct ts_flag *flags, int argc, char **argv, int *i,
                           struct ts_err *err)
{
    /* "--name" and, for one-letter names, "-n" */
    const char *arg = argv[*i] + (argv[*i][1] == '-' ? 2 : 1), *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct ts_flag *f = find(flags, arg, n);

    if (!f)
        return ts_err_set(err, TS_EINVAL, "unknown option '%s' (try --help)", argv[*i]);
    if (f->kind == TS_FLAG_BOOL) {
        if (eq)
            return ts_err_set(err, TS_EINVAL, "--%s takes no value", f->name);
        *(bool *)f->ptr = true;
        return TS_OK;
    }
    if (eq)
        return set_value(f, eq + 1, err);
    if (*i + 1 >= argc)
        return ts_err_set(err, TS_EINVAL, "--%s needs a value (%s)", f->name,
                          f->metavar ? f->metavar : "VALUE");
    return set_value(f, argv[++*i], err);
}

ts_status ts_flags_parse(const struct ts_flag *flags, int argc, char **argv, char **pos,
                         int *npos, bool *help, struct ts_err *err)
{
    int cap = *npos, n = 0;
    bool opts = true;

    *help = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *help = true;
            return TS_OK;
        }
    }
    for (int i = 0; i < argc; i++) {
        if (opts && strcmp(argv[i], "--") == 0) {
            opts = false;
        } else if (opts && (strncmp(argv[i], "--", 2) == 0 ||
                            (argv[i][0] == '-' && argv[i][1] && !argv[i][2] &&
                             find(flags, argv[i] + 1, 1)))) {
            ts_status st = parse_one(flags, argc, argv, &i, err);
            if (st)
                return st;
        } else {
            if (n >= cap)
                return ts_err_set(err, TS_EINVAL, "unexpected argument '%s' (try --help)",
                                  argv[i]);
            pos[n++] = argv[i];
        }
    }
    *npos = n;
    return TS_OK;
}

void ts_flags_usage(FILE *f, const char *usage, const char *about, const struct ts_flag *flags)
{
    fprintf(f, "usage: %s\n\n%s\n\noptions:\n", usage, about);
    for (const struct ts_flag *o = flags; o->name; o++) {
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s%s", o->name[1] ? "--" : "-", o->name,
                 o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        fprintf(f, "  %-24s %s\n", left, o->help);
    }
    fprintf(f, "  %-24s %s\n", "--help", "show this help and exit");
}

int ts_flags_program(const char *prog, const char *usage, const char *about,
                     const struct ts_flag *flags, int argc, char **argv)
{
    struct ts_err err = { 0 };
    char line[128];
    int npos = 0;
    bool help;

    if (ts_flags_parse(flags, argc - 1, argv + 1, NULL, &npos, &help, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (!help)
        return -1;
    if (!usage) {
        snprintf(line, sizeof(line), "%s [options]", prog);
        usage = line;
    }
    ts_flags_usage(stdout, usage, about, flags);
#if TS_TEST_HOOKS   /* TEST_HOOKS in tessera_testlib.py reads this line */
    printf("\nThis build has test hooks compiled in (TESSERA_TEST_HOOKS): for tests only, "
           "never for production.\n");
#endif
    return 0;
}

ts_status ts_flags_size(const char *flag, const char *value, uint64_t unit, uint64_t *out,
                        struct ts_err *err)
{
    static const char *const suffix[] = { "K", "KB", "KiB", "M", "MB", "MiB", "G", "GB", "GiB" };
    unsigned long long n = 0;
    uint64_t mult = 0;
    char *end = NULL;

    errno = 0;
    if (value && *value >= '0' && *value <= '9')
        n = strtoull(value, &end, 10);
    if (end && !*end)
        mult = unit;
    for (size_t k = 0; end && *end && k < sizeof(suffix) / sizeof(suffix[0]); k++)
        if (strcasecmp(end, suffix[k]) == 0)
            mult = UINT64_C(1) << (10 * (k / 3 + 1));
    if (!n || errno || !mult || n > (UINT64_C(1) << 50) / mult)
        return ts_err_set(err, TS_EINVAL, "--%s: '%s' is not a size: want digits and K, M or "
                          "G (e.g. 256M), from 1 byte to 1 PiB", flag, value ? value : "");
    *out = (uint64_t)n * mult;
    return TS_OK;
}
