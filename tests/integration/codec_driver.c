/* codec_driver.c - lib/codec on a file of floats, for test_codec_numpy.py to hold against
 * numpy's and torch's conversions.
 *
 *   codec_driver SPEC IN OUT [PAYLOAD]
 * reads IN (raw little-endian float32), encodes it with codec SPEC (scale 1, no residual),
 * checks the payload as a shard would, decodes it and writes the decoded float32 to OUT, and
 * the payload itself to PAYLOAD when given. Prints "ok <payload bytes>"; on an error prints
 * "ERR <status> <message>" and exits 1. */
#include <stdio.h>
#include <stdlib.h>

#include "codec/codec.h"

static ts_status read_floats(const char *path, float **x, size_t *n, struct ts_err *err)
{
    FILE *f = fopen(path, "rb");
    long len;

    if (!f)
        return ts_err_set(err, TS_EIO, "%s: cannot open", path);
    if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || len % 4 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return ts_err_set(err, TS_EINVAL, "%s: not a whole number of float32", path);
    }
    *n = (size_t)len / 4;
    *x = malloc((size_t)len + 4);
    if (!*x || fread(*x, 4, *n, f) != *n) {
        fclose(f);
        free(*x);
        return ts_err_set(err, TS_EIO, "%s: cannot read %ld bytes", path, len);
    }
    fclose(f);
    return TS_OK;
}

static ts_status write_file(const char *path, const void *p, size_t bytes, struct ts_err *err)
{
    FILE *f = fopen(path, "wb");

    if (!f)
        return ts_err_set(err, TS_EIO, "%s: cannot create", path);
    if (fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
        if (f)
            fclose(f);
        return ts_err_set(err, TS_EIO, "%s: cannot write %zu bytes", path, bytes);
    }
    return TS_OK;
}

static ts_status run(char **av, int ac, size_t *bytes, struct ts_err *err)
{
    struct ts_codec c;
    float *x = NULL, *out = NULL;
    unsigned char *payload = NULL;
    size_t n = 0;
    ts_status st = ts_codec_parse(av[1], &c, err);

    if (st == TS_OK)
        st = read_floats(av[2], &x, &n, err);
    if (st == TS_OK) {
        payload = malloc(ts_codec_max_bytes(&c, n) + 1);
        out = malloc(n * 4 + 4);
        if (!payload || !out)
            st = ts_err_set(err, TS_ENOMEM, "no memory for %zu elements", n);
    }
    if (st == TS_OK) {
        ts_codec_encode(&c, x, n, 1.0f, NULL, payload, bytes);
        st = ts_codec_check(c.kind, payload, *bytes, n, err);
    }
    if (st == TS_OK) {
        ts_codec_decode(c.kind, payload, *bytes, n, out);
        st = write_file(av[3], out, n * 4, err);
    }
    if (st == TS_OK && ac > 4)
        st = write_file(av[4], payload, *bytes, err);
    free(x);
    free(out);
    free(payload);
    return st;
}

int main(int argc, char **argv)
{
    struct ts_err err = { 0 };
    size_t bytes = 0;

    if (argc < 4) {
        fprintf(stderr, "usage: codec_driver SPEC IN OUT [PAYLOAD]\n");
        return 2;
    }
    if (run(argv, argc, &bytes, &err) != TS_OK) {
        printf("ERR %s %s\n", ts_status_name(err.code), err.msg);
        return 1;
    }
    printf("ok %zu\n", bytes);
    return 0;
}
