/* option_flags.c - see option_flags.h. */
#include "client/option_flags.h"

#include <stdio.h>
#include <string.h>

static bool skipped(const char *flag, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (!strcmp(*skip, flag))
            return true;
    return false;
}

size_t ts_option_flags_add(struct ts_option_flags *s, struct ts_flag *flags, size_t *n,
                           size_t cap, const char *const *skip)
{
    size_t rows, added = 0;
    const struct tessera_option *r = tessera_options_schema(&rows);

    for (size_t i = 0; i < rows && i < TS_OPTION_FLAGS_MAX && *n < cap; i++) {
        if (!r[i].flag || skipped(r[i].flag, skip))
            continue;
        flags[(*n)++] = r[i].type == TESSERA_OPTION_BOOL
                            ? (struct ts_flag){ r[i].flag, TS_FLAG_BOOL, &s->set[i], NULL,
                                                r[i].help, 0, 0 }
                            : (struct ts_flag){ r[i].flag, TS_FLAG_STR, &s->text[i],
                                                r[i].metavar, r[i].help, 0, 0 };
        added++;
    }
    return added;
}

ts_status ts_option_flags_apply(const struct ts_option_flags *s, struct tessera_options *o,
                                struct ts_err *err)
{
    size_t rows;
    const struct tessera_option *r = tessera_options_schema(&rows);
    struct tessera_error e;
    char name[64];

    for (size_t i = 0; i < rows && i < TS_OPTION_FLAGS_MAX; i++) {
        if (!s->text[i] && !s->set[i])
            continue;
        snprintf(name, sizeof(name), "--%s", r[i].flag);
        if (tessera_options_set(o, name, s->text[i] ? s->text[i] : "1", &e))
            return ts_err_set(err, (ts_status)e.code, "%s", e.message);
    }
    return TS_OK;
}

ts_status ts_option_argv(const struct tessera_options *o, const char *const *skip, char **argv,
                         int *n, int cap, char *buf, size_t bufcap, struct ts_err *err)
{
    size_t rows, used = 0;
    const struct tessera_option *r = tessera_options_schema(&rows);

    for (size_t i = 0; i < rows; i++) {
        char v[4096];
        size_t len;
        if (!r[i].flag || skipped(r[i].flag, skip) || !tessera_options_get(o, &r[i], v, sizeof(v)))
            continue;
        len = strlen(r[i].flag) + 3 + (r[i].type == TESSERA_OPTION_BOOL ? 0 : strlen(v) + 1);
        if (*n + 2 >= cap || used + len > bufcap)
            return ts_err_set(err, TS_EINVAL, "--%s: no room for the worker's flags",
                              r[i].flag);
        argv[(*n)++] = buf + used;
        used += (size_t)snprintf(buf + used, bufcap - used, "--%s", r[i].flag) + 1;
        if (r[i].type != TESSERA_OPTION_BOOL) {
            argv[(*n)++] = buf + used;
            used += (size_t)snprintf(buf + used, bufcap - used, "%s", v) + 1;
        }
    }
    return TS_OK;
}
