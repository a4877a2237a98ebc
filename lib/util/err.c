/* err.c - see err.h. */
#include "util/err.h"

#include <stdio.h>
#include <string.h>

ts_status ts_err_vset(struct ts_err *err, ts_status code, const char *fmt, va_list ap)
{
    if (!err || err->code != TS_OK)
        return code;
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
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
    char head[128], old[sizeof(err->msg)];
    va_list ap;

    if (!err || err->code == TS_OK)
        return;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%.100s: %.150s", head, old);
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
