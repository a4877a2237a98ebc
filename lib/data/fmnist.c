/* fmnist.c - Fashion-MNIST from its gzip IDX files.
 *
 * IDX is a big-endian header (magic, counts, dimensions) followed by raw bytes: 2051 for an
 * image file (count, 28, 28, then count*784 pixels), 2049 for a label file (count, then count
 * labels). zlib's gzread inflates while we read, so nothing is unpacked to disk. Everything in
 * the header is checked before it sizes an allocation, and the payload must end exactly where
 * the header says, so a truncated or padded download is refused rather than half-used.
 * Errors name the file; a missing one says which Debian package provides it. */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* For XXH3_state_t on the stack: the digest cannot fail, so it must not allocate. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#include <zlib.h>

#define IDX_IMAGES 2051u
#define IDX_LABELS 2049u
#define SIDE 28u
/* Far above Fashion-MNIST's 60000, low enough that a corrupt count cannot ask for gigabytes. */
#define MAX_SAMPLES (1u << 21)
#define CHUNK (1u << 20)

struct idx {
    gzFile gz;
    char path[160];
};

static ts_status idx_open(struct idx *f, const char *dir, const char *stem, struct ts_err *err)
{
    int fd, e;

    snprintf(f->path, sizeof(f->path), "%s/%s.gz", dir, stem);
    fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        if (e == ENOENT)
            return ts_err_set(err, TS_ENOTFOUND,
                              "fashion-mnist: %s: no such file; install Debian's "
                              "dataset-fashion-mnist (make deps does)", f->path);
        return ts_err_set(err, TS_EIO, "fashion-mnist: %s: %s", f->path, strerror(e));
    }
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return ts_err_set(err, TS_ENOMEM, "fashion-mnist: %s: gzdopen: out of memory", f->path);
    }
    return TS_OK;
}

static void idx_close(struct idx *f)
{
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
}

/* zlib's message without the "<fd:N>: " that gzdopen'ed files carry (our messages name the
 * path themselves). */
static const char *gz_message(gzFile gz, int *zerr)
{
    const char *msg = gzerror(gz, zerr), *colon = strstr(msg, ": ");

    return msg[0] == '<' && colon ? colon + 2 : msg;
}

/* Reads exactly len bytes; a short read is a truncated file, a zlib error a corrupt one. */
static ts_status idx_read(struct idx *f, void *buf, size_t len, const char *what,
                          struct ts_err *err)
{
    unsigned char *p = buf;

    while (len > 0) {
        unsigned want = len < CHUNK ? (unsigned)len : CHUNK;
        int got = gzread(f->gz, p, want);
        int zerr;

        if (got < 0) {
            const char *msg = gz_message(f->gz, &zerr);

            if (zerr == Z_ERRNO)
                return ts_err_set(err, TS_EIO, "fashion-mnist: %s: reading %s: %s", f->path,
                                  what, strerror(errno));
            return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: corrupt gzip data (%s); "
                              "reinstall dataset-fashion-mnist", f->path, msg);
        }
        if (got == 0)
            return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: truncated in %s; "
                              "reinstall dataset-fashion-mnist", f->path, what);
        p += got;
        len -= (size_t)got;
    }
    return TS_OK;
}

/* Nothing may follow the payload the header announced. */
static ts_status idx_expect_end(struct idx *f, struct ts_err *err)
{
    unsigned char extra;
    int zerr, got = gzread(f->gz, &extra, 1);

    if (got < 0)
        return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: corrupt gzip data (%s); "
                          "reinstall dataset-fashion-mnist", f->path, gz_message(f->gz, &zerr));
    if (got > 0)
        return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: bytes past the end of the data "
                          "its header announces", f->path);
    return TS_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads the header of f: the magic must be `magic`, then ndims dimensions into dims[]. */
static ts_status idx_header(struct idx *f, uint32_t magic, int ndims, uint32_t *dims,
                            struct ts_err *err)
{
    unsigned char b[16];
    uint32_t got;
    ts_status st;

    for (int i = 0; i < ndims; i++)
        dims[i] = 0;
    st = idx_read(f, b, 4 + 4 * (size_t)ndims, "the header", err);
    if (st != TS_OK)
        return st;
    got = be32(b);
    if (got != magic)
        return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: magic %u, want %u (an IDX %s "
                          "file)", f->path, got, magic, magic == IDX_IMAGES ? "image" : "label");
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(b + 4 + 4 * i);
    if (dims[0] == 0 || dims[0] > MAX_SAMPLES)
        return ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: %u samples, want 1..%u",
                          f->path, dims[0], MAX_SAMPLES);
    return TS_OK;
}

static ts_status load_labels(const char *dir, const char *set, struct ts_dataset *d,
                             struct ts_err *err)
{
    char stem[32];
    struct idx f = { 0 };
    uint32_t n;
    ts_status st;

    snprintf(stem, sizeof(stem), "%s-labels-idx1-ubyte", set);
    st = idx_open(&f, dir, stem, err);
    if (st != TS_OK)
        return st;
    st = idx_header(&f, IDX_LABELS, 1, &n, err);
    if (st != TS_OK)
        goto out_close;
    d->y = malloc(n);
    if (!d->y) {
        st = ts_err_set(err, TS_ENOMEM, "fashion-mnist: %s: %u labels: out of memory", f.path,
                        n);
        goto out_close;
    }
    d->n = n;
    st = idx_read(&f, d->y, n, "the labels", err);
    if (st == TS_OK)
        st = idx_expect_end(&f, err);
    for (uint32_t i = 0; st == TS_OK && i < n; i++)
        if (d->y[i] >= 10)
            st = ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: label %u of sample %u, "
                            "want 0..9", f.path, d->y[i], i);
out_close:
    idx_close(&f);
    return st;
}

/* Pixels become byte / 255.0f (correctly rounded, as torchvision's ToTensor), via a table. */
static ts_status load_images(const char *dir, const char *set, struct ts_dataset *d,
                             struct ts_err *err)
{
    char stem[32];
    struct idx f = { 0 };
    uint32_t dims[3];
    unsigned char *raw = NULL;
    float lut[256];
    size_t total;
    ts_status st;

    snprintf(stem, sizeof(stem), "%s-images-idx3-ubyte", set);
    st = idx_open(&f, dir, stem, err);
    if (st != TS_OK)
        return st;
    st = idx_header(&f, IDX_IMAGES, 3, dims, err);
    if (st != TS_OK)
        goto out_close;
    if (dims[1] != SIDE || dims[2] != SIDE) {
        st = ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: images %ux%u, want %ux%u",
                        f.path, dims[1], dims[2], SIDE, SIDE);
        goto out_close;
    }
    if (dims[0] != d->n) {
        st = ts_err_set(err, TS_ECORRUPT, "fashion-mnist: %s: %u images for %u labels",
                        f.path, dims[0], d->n);
        goto out_close;
    }
    d->dim = SIDE * SIDE;
    total = (size_t)d->n * d->dim;
    raw = malloc(total);
    d->x = malloc(total * sizeof(float));
    if (!raw || !d->x) {
        st = ts_err_set(err, TS_ENOMEM, "fashion-mnist: %s: %u images: out of memory", f.path,
                        d->n);
        goto out_free_raw;
    }
    st = idx_read(&f, raw, total, "the pixels", err);
    if (st == TS_OK)
        st = idx_expect_end(&f, err);
    if (st != TS_OK)
        goto out_free_raw;
    for (int v = 0; v < 256; v++)
        lut[v] = (float)v / 255.0f;
    for (size_t i = 0; i < total; i++)
        d->x[i] = lut[raw[i]];
out_free_raw:
    free(raw);
out_close:
    idx_close(&f);
    return st;
}

ts_status ts_fmnist_load(const char *dir, bool train, struct ts_dataset *out, struct ts_err *err)
{
    struct ts_dataset d = { 0 };
    const char *set = train ? "train" : "t10k";
    ts_status st;

    if (!dir)
        dir = TS_FMNIST_DIR;
    if (strlen(dir) > 100)
        return ts_err_set(err, TS_EINVAL, "fashion-mnist: dir '%.40s...': longer than 100 "
                          "characters", dir);
    st = load_labels(dir, set, &d, err);
    if (st == TS_OK)
        st = load_images(dir, set, &d, err);
    if (st != TS_OK) {
        ts_data_free(&d);
        return st;
    }
    *out = d;
    return TS_OK;
}

void ts_data_free(struct ts_dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof(*d));
}

uint64_t ts_data_digest(const struct ts_dataset *d)
{
    XXH3_state_t st;

    XXH3_64bits_reset(&st);
    if (d->n > 0) {
        XXH3_64bits_update(&st, d->y, d->n);
        XXH3_64bits_update(&st, d->x, (size_t)d->n * d->dim * sizeof(float));
    }
    return XXH3_64bits_digest(&st);
}
