/* wirecheck.c - refuses string fields that protobuf-c would silently cut short.
 *
 * protobuf-c hands a string field to C as a NUL-terminated copy, so "addr\0junk" arrives as
 * "addr" and passes every check made on it; proto3 also requires strings to be valid UTF-8,
 * which protobuf-c does not check. This walks the wire bytes of a request with its descriptor,
 * before unpacking, and refuses a string field that holds a NUL byte or invalid UTF-8, naming
 * the field. Nested messages are walked too (bounded depth). */
#include <stdio.h>
#include <string.h>

#include "rpc/internal.h"

#define MAX_DEPTH 16

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

static bool utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        uint32_t cp;

        if (c == 0 || len == 0 || i + len > n)
            return false;
        cp = len == 1 ? c : c & (0xff >> (len + 1));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return false;
        i += len;
    }
    return true;
}

static ts_status walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                      int depth, struct ts_err *err)
{
    while (p < end) {
        uint64_t key, v;
        const ProtobufCFieldDescriptor *f;

        if (!varint(&p, end, &key))
            return TS_OK; /* malformed: protobuf-c's unpack reports it */
        f = protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3));
        switch (key & 7) {
        case 0:
            if (!varint(&p, end, &v))
                return TS_OK;
            break;
        case 1:
            p += 8;
            break;
        case 5:
            p += 4;
            break;
        case 2:
            if (!varint(&p, end, &v) || v > (uint64_t)(end - p))
                return TS_OK;
            if (f && f->type == PROTOBUF_C_TYPE_STRING && !utf8_ok(p, (size_t)v))
                return ts_err_set(err, TS_EINVAL, "%s: holds a NUL byte or invalid UTF-8",
                                  f->name);
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < MAX_DEPTH) {
                ts_status st = walk(f->descriptor, p, p + v, depth + 1, err);
                if (st)
                    return st;
            }
            p += v;
            break;
        default:
            return TS_OK;
        }
    }
    return TS_OK;
}

ts_status ts__wire_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                         struct ts_err *err)
{
    return walk(d, data, data + len, 0, err);
}
