/* err.c - see err.h. */
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a cut may fall just before src[i]: a word or a path component starts there. */
static bool at_break(const char *src, size_t i)
{
    return src[i] == ' ' || src[i] == '/';
}

/* Whether src[i] continues a UTF-8 sequence (a cut there would split a character). */
static bool mid_char(const char *src, size_t i)
{
    return ((unsigned char)src[i] & 0xC0) == 0x80;
}

void ts_str_fit(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src), head, tail, i;

    if (n == 0)
        return;
    if (len < n) {
        memcpy(dst, src, len + 1);
        return;
    }
    if (n < 16) {   /* no room for both ends */
        memcpy(dst, src, n - 1);
        dst[n - 1] = '\0';
        return;
    }
    /* Too long: the start says where it happened and the end why (the strerror text, the
     * gRPC status: the innermost cause, which every ts_err_prefix pushes further right), so
     * the middle gives way. A third of the room goes to the start, the rest to the end. */
    head = (n - 4) / 3;
    tail = n - 4 - head;
    /* Cut where a word or a path component begins, unless none is near. */
    for (i = head; i > head * 3 / 4 && !at_break(src, i); i--)
        ;
    if (at_break(src, i))
        head = i;
    for (i = len - tail; i < len - tail * 3 / 4 && !at_break(src, i); i++)
        ;
    if (at_break(src, i))
        tail = len - i;
    while (head > 0 && mid_char(src, head))
        head--;
    while (tail > 0 && mid_char(src, len - tail))
        tail--;
    memcpy(dst, src, head);
    memcpy(dst + head, "...", 3);
    memcpy(dst + head + 3, src + len - tail, tail + 1);
}

ts_status ts_err_vset(struct ts_err *err, ts_status code, const char *fmt, va_list ap)
{
    char small[1024], *full = small, *big = NULL;
    va_list again;
    int len;

    if (!err || err->code != TS_OK)
        return code;
    err->code = code;
    va_copy(again, ap);
    len = vsnprintf(small, sizeof(small), fmt, ap);
    /* A long argument (a path) must not push the cause at the end out before it is fitted;
     * without the memory the start of it is still better than nothing. */
    if (len >= (int)sizeof(small) && (big = malloc((size_t)len + 1))) {
        vsnprintf(big, (size_t)len + 1, fmt, again);
        full = big;
    }
    va_end(again);
    ts_str_fit(err->msg, sizeof(err->msg), full);
    free(big);
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
