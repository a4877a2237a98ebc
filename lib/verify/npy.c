/* npy.c - NumPy .npy files and raw little-endian float32 files, read and written whole.
 *
 * A .npy file is a magic string, a version, a header length, a Python dict literal
 * ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }") and the raw data. The
 * parser accepts exactly that literal grammar (quoted keys, strings, True/False, tuples of
 * integers, optional trailing commas), requires the three keys and no others, and checks
 * that the data is exactly as long as the shape says: an audit must not compare a truncated
 * file as if it were whole. The writer produces the bytes numpy.save does (same dict text,
 * same growth padding, same 64-byte alignment), so files round-trip either way. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "verify/verify.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define ALIGN 64
#define GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */

void ts_verify_array_fini(struct ts_verify_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof(*a));
}

/* ---- whole-file I/O ---- */

static ts_status slurp(const char *path, char **buf, size_t *len, struct ts_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    size_t got = 0;
    char *p;

    if (fd < 0)
        return ts_err_set(err, errno == ENOENT ? TS_ENOTFOUND : TS_EIO, "%s: open: %s", path,
                          strerror(errno));
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ts_err_set(err, TS_EIO, "%s: fstat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ts_err_set(err, TS_EIO, "%s: not a regular file", path);
    }
    p = malloc((size_t)sb.st_size + 1);
    if (!p) {
        close(fd);
        return ts_err_set(err, TS_ENOMEM, "%s: no memory for %jd bytes", path,
                          (intmax_t)sb.st_size);
    }
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, p + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(p);
            close(fd);
            return ts_err_set(err, TS_EIO, "%s: read: %s", path,
                              r == 0 ? "file shrank while reading" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = p;
    *len = got;
    return TS_OK;
}

/* Writes head then body to path, replacing it atomically (lib/util/file.h). */
static ts_status spit(const char *path, const void *head, size_t hlen, const void *body,
                      size_t blen, struct ts_err *err)
{
    struct ts_file_out f = { .path = path, .head = head, .head_len = hlen, .body = body,
                             .body_len = blen, .mode = 0644 };

    return ts_files_replace(&f, 1, err);
}

/* ---- the header's dict literal ---- */

struct lex {
    const char *p, *end, *start, *name;
    struct ts_err *err;
};

static void skip_ws(struct lex *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
        l->p++;
}

static bool eat(struct lex *l, char c)
{
    skip_ws(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return true;
    }
    return false;
}

static ts_status bad(struct lex *l, const char *what)
{
    return ts_err_set(l->err, TS_ECORRUPT, "%s: npy header: %s at byte %td of the dict",
                      l->name, what, l->p - l->start);
}

/* A quoted string without escapes into out[cap]. */
static ts_status string(struct lex *l, char *out, size_t cap)
{
    char q;
    size_t n = 0;

    skip_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
        return bad(l, "expected a quoted string");
    q = *l->p++;
    while (l->p < l->end && *l->p != q) {
        if (*l->p == '\\' || n + 1 >= cap)
            return bad(l, "string too long or escaped");
        out[n++] = *l->p++;
    }
    if (l->p >= l->end)
        return bad(l, "unterminated string");
    l->p++;
    out[n] = '\0';
    return TS_OK;
}

static ts_status boolean(struct lex *l, bool *v)
{
    skip_ws(l);
    if ((size_t)(l->end - l->p) >= 4 && memcmp(l->p, "True", 4) == 0) {
        l->p += 4;
        *v = true;
        return TS_OK;
    }
    if ((size_t)(l->end - l->p) >= 5 && memcmp(l->p, "False", 5) == 0) {
        l->p += 5;
        *v = false;
        return TS_OK;
    }
    return bad(l, "fortran_order is not True or False");
}

static ts_status shape(struct lex *l, struct ts_verify_array *a)
{
    if (!eat(l, '('))
        return bad(l, "shape is not a tuple");
    a->ndim = 0;
    while (!eat(l, ')')) {
        uint64_t v = 0;
        skip_ws(l);
        if (l->p >= l->end || *l->p < '0' || *l->p > '9')
            return bad(l, "shape holds something other than a non-negative integer");
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return bad(l, "shape dimension overflows 64 bits");
            v = v * 10 + (uint64_t)(*l->p++ - '0');
        }
        if (l->p < l->end && *l->p == 'L') /* Python 2 long */
            l->p++;
        if (a->ndim == TS_VERIFY_NPY_MAXDIM)
            return ts_err_set(l->err, TS_EINVAL, "%s: npy shape has more than %d dimensions",
                              l->name, TS_VERIFY_NPY_MAXDIM);
        a->shape[a->ndim++] = v;
        if (!eat(l, ',')) {
            if (!eat(l, ')'))
                return bad(l, "shape tuple: expected ',' or ')'");
            if (a->ndim == 1)
                return bad(l, "1-tuple shape without its comma");
            break;
        }
    }
    return TS_OK;
}

static ts_status descr(struct lex *l, const char *d, struct ts_verify_array *a)
{
    if (d[0] == '>' && (strcmp(d + 1, "f4") == 0 || strcmp(d + 1, "f8") == 0))
        return ts_err_set(l->err, TS_EINVAL, "%s: npy descr '%s' is big-endian; convert with "
                          "astype('<%s')", l->name, d, d + 1);
    if ((d[0] == '<' || d[0] == '=' || d[0] == '|') && strcmp(d + 1, "f4") == 0)
        a->dtype = TS_VERIFY_F32;
    else if ((d[0] == '<' || d[0] == '=' || d[0] == '|') && strcmp(d + 1, "f8") == 0)
        a->dtype = TS_VERIFY_F64;
    else
        return ts_err_set(l->err, TS_EINVAL, "%s: npy descr '%s' not supported, want '<f4' "
                          "or '<f8'", l->name, d);
    return TS_OK;
}

/* Parses the dict into a (dtype, shape); data untouched. */
static ts_status parse_dict(struct lex *l, struct ts_verify_array *a)
{
    bool have_d = false, have_f = false, have_s = false, fortran = false;
    char key[32], val[64];
    ts_status st;

    if (!eat(l, '{'))
        return bad(l, "expected '{'");
    while (!eat(l, '}')) {
        if ((st = string(l, key, sizeof(key))) != TS_OK)
            return st;
        if (!eat(l, ':'))
            return bad(l, "expected ':' after a key");
        if (strcmp(key, "descr") == 0 && !have_d) {
            skip_ws(l);
            if (l->p < l->end && *l->p == '[')
                return ts_err_set(l->err, TS_EINVAL, "%s: npy descr is a structured dtype, "
                                  "want '<f4' or '<f8'", l->name);
            if ((st = string(l, val, sizeof(val))) != TS_OK || (st = descr(l, val, a)) != TS_OK)
                return st;
            have_d = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_f) {
            if ((st = boolean(l, &fortran)) != TS_OK)
                return st;
            have_f = true;
        } else if (strcmp(key, "shape") == 0 && !have_s) {
            if ((st = shape(l, a)) != TS_OK)
                return st;
            have_s = true;
        } else {
            return bad(l, "unknown or repeated key");
        }
        if (!eat(l, ',')) {
            if (!eat(l, '}'))
                return bad(l, "expected ',' or '}'");
            break;
        }
    }
    skip_ws(l);
    if (l->p != l->end)
        return bad(l, "bytes after the dict");
    if (!have_d || !have_f || !have_s)
        return ts_err_set(l->err, TS_ECORRUPT, "%s: npy header lacks '%s'", l->name,
                          !have_d ? "descr" : !have_f ? "fortran_order" : "shape");
    if (fortran)
        return ts_err_set(l->err, TS_EINVAL, "%s: npy fortran_order is True; save it in C "
                          "order (numpy.ascontiguousarray) and retry", l->name);
    return TS_OK;
}

/* ---- .npy ---- */

ts_status ts_verify_npy_parse(const void *buf, size_t len, const char *name,
                              struct ts_verify_array *out, struct ts_err *err)
{
    const unsigned char *b = buf;
    struct ts_verify_array a = { 0 };
    struct lex l = { .name = name ? name : "npy", .err = err };
    size_t hlen, off, es, bytes;
    ts_status st;

    if (len < MAGIC_LEN + 4 || memcmp(b, MAGIC, MAGIC_LEN) != 0)
        return ts_err_set(err, TS_ECORRUPT, "%s: not a .npy file (no \\x93NUMPY magic)", l.name);
    if (b[6] == 1 && b[7] == 0) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        off = 10;
    } else if ((b[6] == 2 || b[6] == 3) && b[7] == 0 && len >= 12) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        off = 12;
    } else {
        return ts_err_set(err, TS_ECORRUPT, "%s: npy format version %u.%u, want 1.0, 2.0 or "
                          "3.0", l.name, b[6], b[7]);
    }
    if (hlen > TS_VERIFY_NPY_MAX_HEADER || hlen > len - off)
        return ts_err_set(err, TS_ECORRUPT, "%s: npy header length %zu exceeds the file (%zu "
                          "bytes) or %u", l.name, hlen, len, TS_VERIFY_NPY_MAX_HEADER);
    l.p = l.start = (const char *)b + off;
    l.end = l.p + hlen;
    if ((st = parse_dict(&l, &a)) != TS_OK)
        return st;
    es = ts_verify_dtype_size(a.dtype);
    a.n = 1;
    for (int i = 0; i < a.ndim; i++) {
        if (a.shape[i] != 0 && a.n > UINT64_MAX / es / a.shape[i])
            return ts_err_set(err, TS_ECORRUPT, "%s: npy shape overflows 64 bits", l.name);
        a.n *= a.shape[i];
    }
    bytes = (size_t)(a.n * es);
    off += hlen;
    if (len - off != bytes)
        return ts_err_set(err, TS_ECORRUPT, "%s: npy data is %zu bytes, shape needs %zu (%s)",
                          l.name, len - off, bytes,
                          len - off < bytes ? "truncated" : "trailing bytes");
    a.data = malloc(bytes ? bytes : 1);
    if (!a.data)
        return ts_err_set(err, TS_ENOMEM, "%s: no memory for %zu bytes", l.name, bytes);
    memcpy(a.data, b + off, bytes);
    *out = a;
    return TS_OK;
}

ts_status ts_verify_npy_read(const char *path, struct ts_verify_array *out, struct ts_err *err)
{
    char *buf;
    size_t len;
    ts_status st = slurp(path, &buf, &len, err);

    if (st != TS_OK)
        return st;
    st = ts_verify_npy_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

ts_status ts_verify_npy_write(const char *path, const struct ts_verify_array *a,
                              struct ts_err *err)
{
    char dict[TS_VERIFY_NPY_MAXDIM * 24 + 128], head[sizeof(dict) + 2 * ALIGN + 16];
    size_t es = ts_verify_dtype_size(a->dtype), n = 1, len, hl, pad, pre;
    int k;

    if (es == 0 || a->ndim < 0 || a->ndim > TS_VERIFY_NPY_MAXDIM)
        return ts_err_set(err, TS_EINVAL, "%s: dtype %d or ndim %d not writable", path,
                          (int)a->dtype, a->ndim);
    k = snprintf(dict, sizeof(dict), "{'descr': '<%s', 'fortran_order': False, 'shape': (",
                 a->dtype == TS_VERIFY_F32 ? "f4" : "f8");
    for (int i = 0; i < a->ndim; i++) {
        k += snprintf(dict + k, sizeof(dict) - (size_t)k, "%s%" PRIu64, i ? ", " : "",
                      a->shape[i]);
        n *= a->shape[i];
    }
    k += snprintf(dict + k, sizeof(dict) - (size_t)k, "%s), }", a->ndim == 1 ? "," : "");
    if (n != a->n)
        return ts_err_set(err, TS_EINVAL, "%s: n is %" PRIu64 ", shape holds %zu", path, a->n,
                          n);
    if (a->ndim > 0) { /* room to grow the first axis in place, as numpy leaves */
        char d0[24];
        int w = snprintf(d0, sizeof(d0), "%" PRIu64, a->shape[0]);
        for (int i = w; i < GROWTH_DIGITS; i++)
            dict[k++] = ' ';
        dict[k] = '\0';
    }
    len = (size_t)k;
    hl = len + 1; /* the final newline */
    pre = MAGIC_LEN + 2 + 2;
    pad = ALIGN - ((pre + hl) % ALIGN);
    memcpy(head, MAGIC "\x01\x00", MAGIC_LEN + 2);
    head[8] = (char)((hl + pad) & 0xff);
    head[9] = (char)((hl + pad) >> 8);
    memcpy(head + pre, dict, len);
    memset(head + pre + len, ' ', pad);
    head[pre + len + pad] = '\n';
    return spit(path, head, pre + len + pad + 1, a->data, n * es, err);
}

/* ---- raw float32 ---- */

ts_status ts_verify_raw_read_f32(const char *path, struct ts_verify_array *out,
                                 struct ts_err *err)
{
    char *buf;
    size_t len;
    ts_status st = slurp(path, &buf, &len, err);

    if (st != TS_OK)
        return st;
    if (len % 4 != 0) {
        free(buf);
        return ts_err_set(err, TS_ECORRUPT, "%s: %zu bytes is not a whole number of float32 "
                          "values", path, len);
    }
    memset(out, 0, sizeof(*out));
    out->dtype = TS_VERIFY_F32;
    out->ndim = 1;
    out->shape[0] = out->n = len / 4;
    out->data = buf;
    return TS_OK;
}

ts_status ts_verify_raw_write_f32(const char *path, const float *x, size_t n,
                                  struct ts_err *err)
{
    return spit(path, NULL, 0, x, n * sizeof(float), err);
}
