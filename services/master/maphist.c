/* maphist.c - the shard maps handed out lately; see maphist.h. */
#include "maphist.h"

#include <stdlib.h>
#include <string.h>

void maphist_init(struct maphist *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
}

void maphist_count(struct maphist *h, bool delta, size_t bytes)
{
    pthread_mutex_lock(&h->mu);
    h->answers[delta]++;
    h->bytes[delta] += bytes;
    pthread_mutex_unlock(&h->mu);
}

void maphist_counts(struct maphist *h, uint64_t answers[2], uint64_t bytes[2])
{
    pthread_mutex_lock(&h->mu);
    memcpy(answers, h->answers, sizeof(h->answers));
    memcpy(bytes, h->bytes, sizeof(h->bytes));
    pthread_mutex_unlock(&h->mu);
}

void maphist_fini(struct maphist *h)
{
    for (size_t i = 0; i < MAPHIST_KEEP; i++) {
        free(h->maps[i].ids);
        free(h->maps[i].hashes);
    }
    pthread_mutex_destroy(&h->mu);
}

static struct maphist_map *find(struct maphist *h, uint64_t epoch, uint64_t hash)
{
    for (size_t i = 0; i < MAPHIST_KEEP; i++)
        if (h->maps[i].epoch == epoch && h->maps[i].hash == hash && epoch)
            return &h->maps[i];
    return NULL;
}

void maphist_note(struct maphist *h, uint64_t epoch, uint64_t hash, size_t n,
                  const uint32_t *ids, const uint64_t *hashes)
{
    struct maphist_map *p;
    uint32_t *i2;
    uint64_t *h2;

    pthread_mutex_lock(&h->mu);
    if (!find(h, epoch, hash)) {
        i2 = malloc((n + 1) * sizeof(*i2));
        h2 = malloc((n + 1) * sizeof(*h2));
        if (i2 && h2) {
            p = &h->maps[h->next];
            h->next = (h->next + 1) % MAPHIST_KEEP;
            free(p->ids);
            free(p->hashes);
            memcpy(i2, ids, n * sizeof(*i2));
            memcpy(h2, hashes, n * sizeof(*h2));
            *p = (struct maphist_map){ epoch, hash, n, i2, h2 };
        } else {
            free(i2);
            free(h2);
        }
    }
    pthread_mutex_unlock(&h->mu);
}

bool maphist_delta(struct maphist *h, uint64_t base_epoch, uint64_t base_hash, size_t n,
                   const uint32_t *ids, const uint64_t *hashes, bool *changed,
                   uint32_t *removed, size_t removed_cap, size_t *nremoved)
{
    const struct maphist_map *b;
    size_t i = 0, k = 0;
    bool ok = true;

    *nremoved = 0;
    pthread_mutex_lock(&h->mu);
    if (!(b = find(h, base_epoch, base_hash))) {
        pthread_mutex_unlock(&h->mu);
        return false;
    }
    /* both by id, ascending: one merge */
    while (ok && (i < n || k < b->n)) {
        if (k == b->n || (i < n && ids[i] < b->ids[k])) {
            changed[i++] = true;                            /* new */
        } else if (i == n || b->ids[k] < ids[i]) {
            if (*nremoved == removed_cap)
                ok = false;
            else
                removed[(*nremoved)++] = b->ids[k];         /* gone */
            k++;
        } else {
            changed[i] = hashes[i] != b->hashes[k];
            i++;
            k++;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return ok;
}
