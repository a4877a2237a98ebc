/* json.c - see json.h. */
#include "util/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ts_json_init(struct ts_json *j)
{
    memset(j, 0, sizeof(*j));
    j->first[0] = true;
}

void ts_json_fini(struct ts_json *j)
{
    free(j->buf);
    j->buf = NULL;
}

char *ts_json_take(struct ts_json *j)
{
    char *b = j->buf;
    j->buf = NULL;
    return b ? b : strdup("");
}

static void put(struct ts_json *j, const char *s, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1)
            cap *= 2;
        j->buf = realloc(j->buf, cap);
        if (!j->buf)
            abort();
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void putf(struct ts_json *j, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    put(j, tmp, (size_t)n);
}

static void put_escaped(struct ts_json *j, const char *s)
{
    put(j, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(j, e, 2);
        } else if (c < 0x20) {
            putf(j, "\\u%04x", c);
        } else {
            put(j, (const char *)&c, 1);
        }
    }
    put(j, "\"", 1);
}

/* Writes the separator and the key of the next member. */
static void member(struct ts_json *j, const char *key)
{
    if (!j->first[j->depth])
        put(j, ",", 1);
    j->first[j->depth] = false;
    if (key) {
        put_escaped(j, key);
        put(j, ":", 1);
    }
}

static void open_level(struct ts_json *j, const char *key, const char *brace)
{
    member(j, key);
    put(j, brace, 1);
    if (j->depth + 1 >= (int)(sizeof(j->first) / sizeof(j->first[0])))
        abort(); /* deeper than any output of ours */
    j->depth++;
    j->first[j->depth] = true;
    j->close[j->depth] = brace[0] == '{' ? '}' : ']';
}

void ts_json_obj(struct ts_json *j, const char *key) { open_level(j, key, "{"); }
void ts_json_arr(struct ts_json *j, const char *key) { open_level(j, key, "["); }

void ts_json_end(struct ts_json *j)
{
    if (j->depth == 0)
        return;
    put(j, &j->close[j->depth], 1);
    j->depth--;
}

void ts_json_str(struct ts_json *j, const char *key, const char *v)
{
    member(j, key);
    put_escaped(j, v);
}

void ts_json_int(struct ts_json *j, const char *key, int64_t v)
{
    member(j, key);
    putf(j, "%" PRId64, v);
}

void ts_json_uint(struct ts_json *j, const char *key, uint64_t v)
{
    member(j, key);
    putf(j, "%" PRIu64, v);
}

void ts_json_num(struct ts_json *j, const char *key, double v)
{
    member(j, key);
    if (isfinite(v)) {
        /* The shortest of %.15g..%.17g that reads back as the same double. */
        char tmp[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
            if (strtod(tmp, NULL) == v)
                break;
        }
        put(j, tmp, strlen(tmp));
    }
    else
        put(j, "null", 4);
}

void ts_json_bool(struct ts_json *j, const char *key, bool v)
{
    member(j, key);
    put(j, v ? "true" : "false", v ? 4 : 5);
}
