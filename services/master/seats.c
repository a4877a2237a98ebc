/* seats.c - see seats.h. */
#include "seats.h"

#include <stdlib.h>
#include <string.h>

void seat_index_init(struct seat_index *si)
{
    memset(si, 0, sizeof(*si));
}

void seat_index_free(struct seat_index *si)
{
    free(si->map);
    free(si->rank_alive);
    free(si->came);
    seat_index_init(si);
}

/* Fibonacci hashing of a worker id into a map of cap (a power of two) slots. */
static size_t slot_of(uint32_t worker, size_t cap)
{
    return (size_t)((worker * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

static struct seat_entry *lookup(const struct seat_index *si, uint32_t worker)
{
    if (!si->cap || !worker)
        return NULL;
    for (size_t s = slot_of(worker, si->cap); si->map[s].worker; s = (s + 1) & (si->cap - 1))
        if (si->map[s].worker == worker)
            return &si->map[s];
    return NULL;
}

static void put(struct seat_entry *map, size_t cap, const struct seat_entry *e)
{
    size_t s = slot_of(e->worker, cap);

    while (map[s].worker)
        s = (s + 1) & (cap - 1);
    map[s] = *e;
}

ts_status seat_index_reset(struct seat_index *si, uint32_t ranks, uint32_t start,
                           struct ts_err *err)
{
    int32_t *ra = realloc(si->rank_alive, ((size_t)ranks + 1) * sizeof(*ra));
    uint8_t *came = ra ? realloc(si->came, (size_t)ranks + 1) : NULL;

    if (ra)
        si->rank_alive = ra;
    if (came)
        si->came = came;
    if (!ra || !came)
        return ts_err_set(err, TS_ENOMEM, "jobs: out of memory for %u ranks", ranks);
    for (uint32_t r = 0; r < ranks; r++)
        ra[r] = -1;
    memset(came, 0, ranks);
    if (si->map)
        memset(si->map, 0, si->cap * sizeof(*si->map));
    si->n = 0;
    si->ranks = ranks;
    si->start = start < ranks ? start : ranks;
    si->came_below = 0;
    return TS_OK;
}

ts_status seat_index_add(struct seat_index *si, uint32_t worker, uint32_t seat, uint32_t rank,
                         bool alive, struct ts_err *err)
{
    struct seat_entry e = { worker, seat, 0 };

    if (2 * (si->n + 1) > si->cap) {   /* at most half full */
        size_t cap = si->cap ? 2 * si->cap : 16;
        struct seat_entry *map = calloc(cap, sizeof(*map));
        if (!map)
            return ts_err_set(err, TS_ENOMEM, "jobs: out of memory for %zu workers", si->n + 1);
        for (size_t i = 0; i < si->cap; i++)
            if (si->map[i].worker)
                put(map, cap, &si->map[i]);
        free(si->map);
        si->map = map;
        si->cap = cap;
    }
    put(si->map, si->cap, &e);
    si->n++;
    if (rank < si->ranks) {
        if (!si->came[rank]) {
            si->came[rank] = 1;
            si->came_below += rank < si->start;
        }
        if (alive)
            si->rank_alive[rank] = (int32_t)seat;
    }
    return TS_OK;
}

int32_t seat_index_of(const struct seat_index *si, uint32_t worker)
{
    const struct seat_entry *e = lookup(si, worker);

    return e ? (int32_t)e->seat : -1;
}

int32_t seat_index_rank(const struct seat_index *si, uint32_t rank)
{
    return rank < si->ranks ? si->rank_alive[rank] : -1;
}

void seat_index_alive(struct seat_index *si, uint32_t rank, uint32_t seat)
{
    if (rank < si->ranks)
        si->rank_alive[rank] = (int32_t)seat;
}

void seat_index_gone(struct seat_index *si, uint32_t rank, uint32_t seat)
{
    if (rank < si->ranks && si->rank_alive[rank] == (int32_t)seat)
        si->rank_alive[rank] = -1;
}

bool seat_index_all_came(const struct seat_index *si)
{
    return si->came_below == si->start;
}

void seat_index_move(struct seat_index *si, uint32_t from, uint32_t to)
{
    struct seat_entry *e;

    if (from == to)
        return;
    if ((e = lookup(si, from)) && e->load)
        e->load--;
    if ((e = lookup(si, to)))
        e->load++;
}

uint32_t seat_index_load(const struct seat_index *si, uint32_t worker)
{
    const struct seat_entry *e = lookup(si, worker);

    return e ? e->load : 0;
}
