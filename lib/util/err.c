/* err.c - see err.h. */
#include "util/err.h"

#include <stdio.h>
#include <string.h>

void ts_str_fit(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src), cut;

    if (n == 0)
        return;
    if (len < n) {
        memcpy(dst, src, len + 1);
        return;
    }
    /* Too long: end at a space, with "...", so that no word is cut in two. */
    cut = n > 4 ? n - 4 : 0;
    while (cut > n / 2 && src[cut] != ' ')
        cut--;
    if (cut <= n / 2)   /* one long word: cut it after all */
        cut = n > 4 ? n - 4 : 0;
    memcpy(dst, src, cut);
    snprintf(dst + cut, n - cut, "...");
}

ts_status ts_err_vset(struct ts_err *err, ts_status code, const char *fmt, va_list ap)
{
    char full[1024];

    if (!err || err->code != TS_OK)
        return code;
    err->code = code;
    vsnprintf(full, sizeof(full), fmt, ap);
    ts_str_fit(err->msg, sizeof(err->msg), full);
    return code;
}

ts_status ts_err_set(struct ts_err *err, ts_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ts_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void ts_err_clear(struct ts_err *err)
{
    if (!err)
        return;
    err->code = TS_OK;
    err->msg[0] = '\0';
}

void ts_err_prefix(struct ts_err *err, const char *fmt, ...)
{
    char head[128], old[sizeof(err->msg)], full[sizeof(head) + sizeof(old) + 2];
    va_list ap;

    if (!err || err->code == TS_OK)
        return;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(full, sizeof(full), "%s: %s", head, old);
    ts_str_fit(err->msg, sizeof(err->msg), full);
}

const char *ts_status_name(ts_status s)
{
    static const char *const names[] = {
        [TS_OK] = "OK",           [TS_EINVAL] = "EINVAL",       [TS_ENOTFOUND] = "ENOTFOUND",
        [TS_EEXIST] = "EEXIST",   [TS_ESTATE] = "ESTATE",       [TS_ESTALE] = "ESTALE",
        [TS_ETIMEDOUT] = "ETIMEDOUT", [TS_EUNAVAIL] = "EUNAVAIL", [TS_ENOMEM] = "ENOMEM",
        [TS_ECORRUPT] = "ECORRUPT", [TS_EIO] = "EIO",           [TS_EAUTH] = "EAUTH",
        [TS_ENOTSUP] = "ENOTSUP", [TS_ENODEV] = "ENODEV",       [TS_ECANCELLED] = "ECANCELLED",
        [TS_EINTERNAL] = "EINTERNAL", [TS_EROLLBACK] = "EROLLBACK",
        [TS_ESLOTS] = "ESLOTS",
        [TS_EPERM] = "EPERM",
    };
    if ((unsigned)s < sizeof(names) / sizeof(names[0]) && names[s])
        return names[s];
    return "EUNKNOWN";
}
