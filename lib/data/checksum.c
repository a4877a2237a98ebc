/* checksum.c - SHA-256 of each data partition (data.h). */
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "data/data.h"

size_t ts_data_checksum_count(const struct ts_dataset *d)
{
    return 2 * ((d->n + TS_DATA_PARTITION - 1) / TS_DATA_PARTITION);
}

static void sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned len = 32;

    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

void ts_data_checksums(const struct ts_dataset *d, const char *set, struct ts_data_checksum *out)
{
    size_t k = 0;

    for (uint32_t at = 0; at < d->n; at += TS_DATA_PARTITION) {
        uint32_t n = d->n - at < TS_DATA_PARTITION ? d->n - at : TS_DATA_PARTITION;
        struct ts_data_checksum *img = &out[k++], *lab = &out[k++];

        snprintf(img->name, sizeof(img->name), "%s-images[%u:%u)", set, at, at + n);
        snprintf(img->file, sizeof(img->file), "%s-images-idx3-ubyte.gz", set);
        sha256(d->x + (size_t)at * d->dim, (size_t)n * d->dim * sizeof(float), img->sha256);
        snprintf(lab->name, sizeof(lab->name), "%s-labels[%u:%u)", set, at, at + n);
        snprintf(lab->file, sizeof(lab->file), "%s-labels-idx1-ubyte.gz", set);
        sha256(d->y + at, n, lab->sha256);
    }
}
