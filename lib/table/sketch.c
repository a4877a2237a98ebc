/* sketch.c - how often the memory tier saw each row, roughly (internal.h, struct sketch).
 *
 * A count-min sketch: SKETCH_DEPTH rows of 8-bit counters, a row's count the least of its
 * counters (never below the true count since the last halving; above it where other rows
 * share all of its counters). Once the additions reach SKETCH_PERIOD times a row's
 * counters, every counter is halved, so that the counts follow what is hot now (TinyLFU's
 * ageing). */
#include "table/internal.h"

#include <stdlib.h>
#include <string.h>

#define SKETCH_DEPTH 4
#define SKETCH_PERIOD 20   /* bench/table_policy.c: 20 beat 5 and 10 at 1% and 10% in memory */

static uint64_t sketch_at(const struct sketch *s, uint64_t id, unsigned k)
{
    uint64_t x = (id + 1) * (0x9E3779B97F4A7C15ull + 2 * k);   /* odd: a bijection */

    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return k * (s->mask + 1) + (x & s->mask);
}

bool sketch_fit(struct sketch *s, uint64_t rows)
{
    uint64_t w = 64;
    uint8_t *c;

    if (s->c && s->mask + 1 >= rows)
        return true;
    while (w < rows && w < (1ull << 40))
        w <<= 1;
    if (!(c = calloc(SKETCH_DEPTH, w)))
        return s->c != NULL;   /* the smaller one goes on counting */
    free(s->c);
    s->c = c;
    s->mask = w - 1;
    s->adds = 0;
    return true;
}

uint64_t sketch_bytes(const struct sketch *s)
{
    return s->c ? SKETCH_DEPTH * (s->mask + 1) : 0;
}

unsigned sketch_get(const struct sketch *s, uint64_t id)
{
    unsigned v = 255;

    if (!s->c)
        return 0;
    for (unsigned k = 0; k < SKETCH_DEPTH; k++) {
        unsigned c = s->c[sketch_at(s, id, k)];
        v = c < v ? c : v;
    }
    return v;
}

void sketch_add(struct sketch *s, uint64_t id)
{
    unsigned v = sketch_get(s, id);

    if (!s->c)
        return;
    /* Only the counters at the least grow (the conservative update: less overcounting). */
    for (unsigned k = 0; v < 255 && k < SKETCH_DEPTH; k++) {
        uint8_t *c = &s->c[sketch_at(s, id, k)];
        *c += *c == v;
    }
    if (++s->adds >= SKETCH_PERIOD * (s->mask + 1)) {
        for (uint64_t i = 0; i < SKETCH_DEPTH * (s->mask + 1); i++)
            s->c[i] >>= 1;
        s->adds /= 2;
    }
}

void sketch_fini(struct sketch *s)
{
    free(s->c);
    memset(s, 0, sizeof(*s));
}
