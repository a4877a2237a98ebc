/* chunk.c - the file format of chunks and objects, and putting and getting one of them.
 *
 * A file is a 32-byte header then the stored bytes (docs/store.md has the table):
 *   0 magic "TSCK" | 4 version | 5 codec | 6 kind | 7 zero | 8 ulen | 16 slen | 24 check
 * integers little-endian; check = XXH3-64 of header bytes 0..23 seeded with the XXH3-64 of the
 * stored bytes. The name is the SHA-256 of the uncompressed bytes, so the name is the
 * checksum: a read re-hashes what it returns. The XXH3 check is the cheap one that covers the
 * header too (a damaged length must not read as "buffer too small"), tells "the file is
 * damaged" from "it decompressed to the wrong thing", and runs before zstd parses anything. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "store/internal.h"

struct hdr {
    int codec, kind;
    uint64_t ulen, slen, xxh;
};

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void encode(uint8_t b[TS__HDR], const struct hdr *h)
{
    memcpy(b, TS__MAGIC, 4);
    b[4] = TS__VERSION;
    b[5] = (uint8_t)h->codec;
    b[6] = (uint8_t)h->kind;
    b[7] = 0;
    put_le64(b + 8, h->ulen);
    put_le64(b + 16, h->slen);
    put_le64(b + 24, h->xxh);
}

static uint64_t check_of(const uint8_t b[TS__HDR], const void *stored, size_t slen)
{
    return XXH3_64bits_withSeed(b, 24, XXH3_64bits(slen ? stored : "", slen));
}

static const char *what_of(int kind)
{
    return kind == TS__KIND_CHUNK ? "chunk" : "manifest";
}

static const char *sub_of(int kind)
{
    return kind == TS__KIND_CHUNK ? "chunks" : "manifests";
}

/* Checks a header read from a file of fsize bytes. */
static ts_status decode(const uint8_t b[TS__HDR], uint64_t fsize, int kind, const char *hex,
                        struct hdr *h, struct ts_err *err)
{
    const char *what = what_of(kind);

    if (memcmp(b, TS__MAGIC, 4) != 0 || b[4] != TS__VERSION || b[7] != 0)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: bad header (magic/version)", what,
                          hex);
    h->codec = b[5];
    h->kind = b[6];
    h->ulen = get_le64(b + 8);
    h->slen = get_le64(b + 16);
    h->xxh = get_le64(b + 24);
    if (h->kind != kind)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: header says kind %d, want %d", what,
                          hex, h->kind, kind);
    if (h->codec != TS__CODEC_RAW && h->codec != TS__CODEC_ZSTD)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: unknown codec %d", what, hex,
                          h->codec);
    if (h->ulen > TS_STORE_MAX_CHUNK * (uint64_t)4 ||
        (h->codec == TS__CODEC_RAW && h->slen != h->ulen) ||
        (h->codec == TS__CODEC_ZSTD && h->slen > ZSTD_compressBound(h->ulen)))
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: impossible lengths %llu/%llu", what,
                          hex, (unsigned long long)h->slen, (unsigned long long)h->ulen);
    if (fsize != TS__HDR + h->slen)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: file is %llu bytes, header says "
                          "%llu (truncated or appended to)", what, hex,
                          (unsigned long long)fsize, (unsigned long long)(TS__HDR + h->slen));
    return TS_OK;
}

/* Chunks are stored zstd only when that saves at least TS__MIN_SAVING percent, and a chunk
 * longer than TS__SAMPLE is first judged by compressing TS__SAMPLE bytes of it, taken in
 * TS__PIECES pieces spread over it (a chunk half zeros, half noise is seen as both). Weights
 * in fp32 save only ~7.5% at ~0.9 GB/s a core, most of a write's time (docs/store.md), while
 * the sample costs 1/16 of compressing a 1 MiB chunk; zeros and masks still compress. */
#define TS__SAMPLE (64u << 10)
#define TS__PIECES 4
#define TS__MIN_SAVING 10

static bool saves_enough(const struct ts_store *s, size_t c, size_t len)
{
    if (s->always_compress)
        return c < len;
    return c <= len - len * TS__MIN_SAVING / 100;
}

/* Whether the sample of data[0..len) (len > TS__SAMPLE) compresses well enough. */
static bool sample_shrinks(const struct ts_store *s, struct ts__worker *w, const uint8_t *data,
                           size_t len)
{
    size_t piece = TS__SAMPLE / TS__PIECES, total = 0;

    for (size_t k = 0; k < TS__PIECES; k++) {
        size_t off = k * (len - piece) / (TS__PIECES - 1);
        size_t c = ZSTD_compressCCtx(w->cctx, w->buf, w->cap, data + off, piece, s->level);

        total += ZSTD_isError(c) ? piece : c;
    }
    return saves_enough(s, total, TS__SAMPLE);
}

/* Compresses data into w->buf when worth it: *out is the compressed size, 0 to store raw. */
static ts_status compress(struct ts_store *s, struct ts__worker *w, const void *data,
                          size_t len, size_t *out, struct ts_err *err)
{
    size_t bound = ZSTD_compressBound(len), c;
    ts_status st;

    *out = 0;
    if (!w->cctx && !(w->cctx = ZSTD_createCCtx()))
        return ts_err_set(err, TS_ENOMEM, "store: zstd context: out of memory");
    st = ts__worker_reserve(w, bound, err);
    if (st != TS_OK)
        return st;
    if (!s->always_compress && len > TS__SAMPLE && !sample_shrinks(s, w, data, len))
        return TS_OK;
    c = ZSTD_compressCCtx(w->cctx, w->buf, bound, data, len, s->level);
    /* Not shrinking enough (random bytes) stores raw: reads then skip the decompressor. */
    if (!ZSTD_isError(c) && saves_enough(s, c, len))
        *out = c;
    return TS_OK;
}

ts_status ts__put(struct ts_store *s, struct ts__worker *w, int kind, const void *data,
                  size_t len, uint8_t id[TS_STORE_ID_LEN], bool defer_sync, bool *existed,
                  uint64_t *written, struct ts_err *err)
{
    char path[TS__PATH_MAX], fan[TS__PATH_MAX];
    uint8_t b[TS__HDR], sum[TS_STORE_ID_LEN];
    struct hdr h = { .codec = TS__CODEC_RAW, .kind = kind, .ulen = len, .slen = len };
    struct ts__iov parts[2] = { { b, TS__HDR }, { data, len } };
    size_t c = 0;
    ts_status st;

    if (len > TS_STORE_MAX_CHUNK || (len && !data))
        return ts_err_set(err, TS_EINVAL, "store: put: len %zu: want data and at most %u bytes",
                          len, TS_STORE_MAX_CHUNK);
    ts__sha256(data ? data : "", len, sum);
    ts__obj_path(s, sub_of(kind), sum, path, sizeof(path));
    snprintf(fan, sizeof(fan), "%.*s", (int)(strrchr(path, '/') - path), path);
    *written = 0;
    if (access(path, F_OK) == 0) {
        /* Found is not yet durable: it may be another put's, renamed but not synced. */
        st = defer_sync ? TS_OK : ts__fs_sync_dir(s, fan, err);
        if (st != TS_OK)
            return st;
        memcpy(id, sum, sizeof(sum));
        *existed = true;
        return TS_OK;
    }
    st = ts__fs_mkdir(s, fan, err);
    if (st == TS_OK && kind == TS__KIND_CHUNK && len > 0)
        st = compress(s, w, data, len, &c, err);
    if (st != TS_OK)
        return st;
    if (c) {
        h.codec = TS__CODEC_ZSTD;
        h.slen = c;
        parts[1].p = w->buf;
        parts[1].n = c;
    }
    encode(b, &h);
    put_le64(b + 24, check_of(b, parts[1].p, parts[1].n));
    st = ts__fs_publish(s, parts, 2, path, TS__PUB_UNDO | (defer_sync ? TS__PUB_NO_DIR_SYNC : 0),
                        err);
    if (st != TS_OK)
        return st;
    memcpy(id, sum, sizeof(sum));
    *existed = false;
    *written = TS__HDR + h.slen;
    return TS_OK;
}

/* Opens id's file and reads and checks its header. */
static ts_status open_obj(struct ts_store *s, int kind, const uint8_t id[TS_STORE_ID_LEN],
                          int *fdp, struct hdr *h, uint8_t b[TS__HDR], struct ts_err *err)
{
    char path[TS__PATH_MAX], hex[TS_STORE_HEX_LEN + 1];
    struct stat sb;
    ts_status st;
    int fd;

    ts_store_hex(id, hex);
    ts__obj_path(s, sub_of(kind), id, path, sizeof(path));
    fd = s->sys.open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0 && errno == ENOENT)
        return ts_err_set(err, TS_ENOTFOUND, "store: %s %s: not found", what_of(kind), hex);
    if (fd < 0)
        return ts_err_set(err, TS_EIO, "store: open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = ts_err_set(err, TS_EIO, "store: stat %s: %s", path, strerror(errno));
        goto out_close;
    }
    if ((uint64_t)sb.st_size < TS__HDR) {
        st = ts_err_set(err, TS_ECORRUPT, "store: %s %s: file of %lld bytes has no header "
                        "(truncated)", what_of(kind), hex, (long long)sb.st_size);
        goto out_close;
    }
    st = ts__fs_read_all(s, fd, b, TS__HDR, path, err);
    if (st == TS_OK)
        st = decode(b, (uint64_t)sb.st_size, kind, hex, h, err);
    if (st == TS_OK) {
        *fdp = fd;
        return TS_OK;
    }
out_close:
    s->sys.close(fd);
    return st;
}

ts_status ts__stat_obj(struct ts_store *s, int kind, const uint8_t id[TS_STORE_ID_LEN],
                       uint64_t *ulen, struct ts_err *err)
{
    uint8_t b[TS__HDR];
    struct hdr h;
    int fd;
    ts_status st = open_obj(s, kind, id, &fd, &h, b, err);

    if (st != TS_OK)
        return st;
    s->sys.close(fd);
    *ulen = h.ulen;
    return TS_OK;
}

/* Reads the stored bytes of an open file and turns them into buf[0..h->ulen); buf NULL: only
 * checks them (into scratch). */
static ts_status load(struct ts_store *s, struct ts__worker *w, int fd, const struct hdr *h,
                      const uint8_t b[TS__HDR], void *buf, const char *hex, struct ts_err *err)
{
    void *stored = buf;
    ts_status st;
    size_t n;

    if (h->codec == TS__CODEC_ZSTD || !buf) {
        st = ts__worker_reserve(w, h->slen, err);
        if (st != TS_OK)
            return st;
        stored = w->buf;
    }
    st = ts__fs_read_all(s, fd, stored, h->slen, hex, err);
    if (st != TS_OK)
        return st;
    if (check_of(b, stored, h->slen) != h->xxh)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: header or stored bytes fail their "
                          "XXH3 check (damaged file)", what_of(h->kind), hex);
    if (h->codec == TS__CODEC_RAW || !buf)
        return TS_OK;
    if (!w->dctx && !(w->dctx = ZSTD_createDCtx()))
        return ts_err_set(err, TS_ENOMEM, "store: zstd context: out of memory");
    n = ZSTD_decompressDCtx(w->dctx, buf, h->ulen, stored, h->slen);
    if (ZSTD_isError(n) || n != h->ulen)
        return ts_err_set(err, TS_ECORRUPT, "store: %s %s: zstd: %s", what_of(h->kind), hex,
                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output");
    return TS_OK;
}

ts_status ts__get(struct ts_store *s, struct ts__worker *w, int kind,
                  const uint8_t id[TS_STORE_ID_LEN], void *buf, size_t cap, size_t *len,
                  struct ts_err *err)
{
    char hex[TS_STORE_HEX_LEN + 1];
    uint8_t sum[TS_STORE_ID_LEN], b[TS__HDR];
    struct hdr h;
    ts_status st;
    int fd;

    ts_store_hex(id, hex);
    st = open_obj(s, kind, id, &fd, &h, b, err);
    if (st != TS_OK)
        return st;
    if (h.ulen > cap) {
        /* Only a length the check vouches for is the caller's problem. */
        st = load(s, w, fd, &h, b, NULL, hex, err);
        if (st == TS_OK)
            st = ts_err_set(err, TS_EINVAL, "store: %s %s: cap %zu, need %llu bytes",
                            what_of(kind), hex, cap, (unsigned long long)h.ulen);
        goto out_close;
    }
    st = load(s, w, fd, &h, b, buf, hex, err);
    if (st != TS_OK)
        goto out_close;
    ts__sha256(h.ulen ? buf : "", h.ulen, sum);
    if (memcmp(sum, id, sizeof(sum)) != 0) {
        st = ts_err_set(err, TS_ECORRUPT, "store: %s %s: content hashes to a different id "
                        "(corrupt)", what_of(kind), hex);
        goto out_close;
    }
    *len = h.ulen;
out_close:
    s->sys.close(fd);
    return st;
}

ts_status ts_store_put(struct ts_store *s, const void *data, size_t len,
                       uint8_t id[TS_STORE_ID_LEN], bool *existed, struct ts_err *err)
{
    struct ts__worker w = { 0 };
    uint64_t written;
    bool ex;
    ts_status st = ts__put(s, &w, TS__KIND_CHUNK, data, len, id, false, &ex, &written, err);

    ts__worker_fini(&w);
    if (st == TS_OK && existed)
        *existed = ex;
    return st;
}

ts_status ts_store_get(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN], void *buf,
                       size_t cap, size_t *len, struct ts_err *err)
{
    struct ts__worker w = { 0 };
    ts_status st;

    if (!buf && cap)
        return ts_err_set(err, TS_EINVAL, "store: get: buf is NULL with cap %zu", cap);
    st = ts__get(s, &w, TS__KIND_CHUNK, id, buf, cap, len, err);
    ts__worker_fini(&w);
    return st;
}

bool ts_store_has(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN])
{
    char path[TS__PATH_MAX];

    ts__obj_path(s, "chunks", id, path, sizeof(path));
    return access(path, F_OK) == 0;
}

ts_status ts_store_put_object(struct ts_store *s, enum ts_store_kind kind, const void *data,
                              size_t len, uint8_t id[TS_STORE_ID_LEN], struct ts_err *err)
{
    struct ts__worker w = { 0 };
    uint64_t written;
    bool ex;

    if (kind != TS_STORE_MANIFEST)
        return ts_err_set(err, TS_EINVAL, "store: put_object: kind %d unknown", (int)kind);
    return ts__put(s, &w, (int)kind, data, len, id, false, &ex, &written, err);
}

ts_status ts_store_get_object(struct ts_store *s, enum ts_store_kind kind,
                              const uint8_t id[TS_STORE_ID_LEN], void **data, size_t *len,
                              struct ts_err *err)
{
    struct ts__worker w = { 0 };
    uint64_t ulen;
    ts_status st;
    void *p;

    if (kind != TS_STORE_MANIFEST)
        return ts_err_set(err, TS_EINVAL, "store: get_object: kind %d unknown", (int)kind);
    st = ts__stat_obj(s, (int)kind, id, &ulen, err);
    if (st != TS_OK)
        return st;
    p = malloc(ulen ? ulen : 1);
    if (!p)
        return ts_err_set(err, TS_ENOMEM, "store: object of %llu bytes: out of memory",
                          (unsigned long long)ulen);
    st = ts__get(s, &w, (int)kind, id, p, ulen, len, err);
    ts__worker_fini(&w);
    if (st != TS_OK) {
        free(p);
        return st;
    }
    *data = p;
    return TS_OK;
}
