/* digest.c - a table's fingerprint over one or several stores (table.h, "Fingerprint").
 *
 * Each store's ids are sorted, then merged: every row in ascending id whichever store holds
 * it, so that a table split over any number of shards hashes as the one store that would
 * hold all its rows. */
#include "table/internal.h"
#include "tensor/fingerprint.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(struct ts_table *const *)a;
    uintptr_t y = (uintptr_t)*(struct ts_table *const *)b;

    return x < y ? -1 : x > y;
}

/* The stores' rows merged into f; stores locked, ids[s] sorted, pos[s] zeroed; rec: room
 * for the largest record. */
static ts_status merge(struct ts_table *const *stores, size_t n, uint64_t **ids, uint64_t *pos,
                       struct ts_table_fp *f, struct row *rec, struct ts_err *err)
{
    for (;;) {
        size_t best = n;

        for (size_t s = 0; s < n; s++) {
            if (pos[s] == stores[s]->rows.n)
                continue;
            if (best < n && ids[s][pos[s]] == ids[best][pos[best]])
                return ts_err_set(err, TS_ECORRUPT, "table '%s': row %" PRIu64 " is in store "
                                  "%zu and store %zu; each row belongs to one", stores[s]->name,
                                  ids[s][pos[s]], best, s);
            if (best == n || ids[s][pos[s]] < ids[best][pos[best]])
                best = s;
        }
        if (best == n)
            return TS_OK;
        bool found;
        ts_status st = rows_read(&stores[best]->rows, ids[best][pos[best]], rec, &found, err);
        if (st)
            return st;
        ts_table_fp_row(f, ids[best][pos[best]], row_values(rec));
        pos[best]++;
    }
}

static ts_status check_stores(struct ts_table *const *stores, size_t n, struct ts_err *err)
{
    if (!n)
        return ts_err_set(err, TS_EINVAL, "table fingerprint: no stores");
    for (size_t s = 0; s < n; s++) {
        if (strcmp(stores[s]->name, stores[0]->name) || stores[s]->dim != stores[0]->dim)
            return ts_err_set(err, TS_EINVAL, "table fingerprint: store %zu holds table '%s' "
                              "of dim %u, store 0 '%s' of dim %u", s, stores[s]->name,
                              stores[s]->dim, stores[0]->name, stores[0]->dim);
        for (size_t r = 0; r < s; r++)
            if (stores[r] == stores[s])
                return ts_err_set(err, TS_EINVAL, "table fingerprint: stores %zu and %zu are "
                                  "the same", r, s);
    }
    return TS_OK;
}

struct ts_table_fp {
    EVP_MD_CTX *c;
    uint32_t dim;
};

ts_status ts_table_fp_begin(const char *name, uint32_t dim, uint64_t count,
                            struct ts_table_fp **out, struct ts_err *err)
{
    struct ts_table_fp *f = calloc(1, sizeof(*f));
    uint8_t d[4];

    if (!f || !(f->c = EVP_MD_CTX_new()) || EVP_DigestInit_ex(f->c, EVP_sha256(), NULL) != 1) {
        ts_table_fp_end(f, NULL);
        return ts_err_set(err, TS_EINTERNAL, "table fingerprint: OpenSSL SHA-256 unavailable");
    }
    f->dim = dim;
    for (int b = 0; b < 4; b++)
        d[b] = (uint8_t)(dim >> (8 * b));
    EVP_DigestUpdate(f->c, name, strlen(name) + 1);
    EVP_DigestUpdate(f->c, d, sizeof(d));
    ts_fp_put_u64(f->c, count);
    *out = f;
    return TS_OK;
}

void ts_table_fp_row(struct ts_table_fp *f, uint64_t id, const float *values)
{
    ts_fp_put_u64(f->c, id);
    ts_fp_put_f32(f->c, values, f->dim);
}

void ts_table_fp_end(struct ts_table_fp *f, char hex[65])
{
    unsigned char md[32];
    unsigned int len = 0;

    if (!f)
        return;
    if (hex && f->c) {
        EVP_DigestFinal_ex(f->c, md, &len);
        for (unsigned i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
    }
    EVP_MD_CTX_free(f->c);
    free(f);
}

ts_status ts_table_sha256(struct ts_table *const *stores, size_t n, char hex[65],
                          struct ts_err *err)
{
    struct ts_table **locked;
    struct ts_table_fp *f = NULL;
    struct row *rec = NULL;
    size_t most = 0;
    uint64_t **ids, *pos, count = 0;
    ts_status st;

    if ((st = check_stores(stores, n, err)))
        return st;
    locked = malloc(n * sizeof(*locked));
    ids = calloc(n, sizeof(*ids));
    pos = calloc(n, sizeof(*pos));
    for (size_t s = 0; s < n; s++)
        most = stores[s]->rows.rec > most ? stores[s]->rows.rec : most;
    rec = malloc(most);
    if (!locked || !ids || !pos || !rec) {
        st = ts_err_set(err, TS_ENOMEM, "table fingerprint: out of memory");
        goto out_free;
    }
    memcpy(locked, stores, n * sizeof(*locked));
    qsort(locked, n, sizeof(*locked), cmp_ptr);    /* one lock order for every caller */
    for (size_t s = 0; s < n; s++)
        pthread_mutex_lock(&locked[s]->mu);
    for (size_t s = 0; !st && s < n; s++) {
        count += stores[s]->rows.n;
        st = rows_sorted_ids(&stores[s]->rows, &ids[s], err);
    }
    if (!st)
        st = ts_table_fp_begin(stores[0]->name, stores[0]->dim, count, &f, err);
    if (!st)
        st = merge(stores, n, ids, pos, f, rec, err);
    for (size_t s = 0; s < n; s++)
        pthread_mutex_unlock(&locked[s]->mu);
    ts_table_fp_end(f, st ? NULL : hex);
out_free:
    for (size_t s = 0; ids && s < n; s++)
        free(ids[s]);
    free(ids);
    free(pos);
    free(rec);
    free(locked);
    return st;
}
