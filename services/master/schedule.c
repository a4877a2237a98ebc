/* schedule.c - the master's schedule of slots over workers; see schedule.h.
 *
 * All slots cost the same on one worker, so spreading them is the classic makespan problem
 * with identical jobs on machines of different speeds, where the greedy rule (each next slot
 * to the worker whose time it raises least) is optimal. Moves then keep every slot where it
 * is unless its owner has more than its share: the fewest moves, each one a step redone. */
#include "schedule.h"

#include <stdbool.h>
#include <stdlib.h>

static size_t seat_of(const struct sched_seat *seats, size_t n, uint32_t worker)
{
    for (size_t i = 0; worker && i < n; i++)
        if (seats[i].worker == worker)
            return i;
    return n;
}

static bool measured(const struct sched_seat *seats, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(seats[i].slot_s > 0))
            return false;
    return n > 0;
}

static double span(const uint32_t *count, const struct sched_seat *seats, size_t n)
{
    double most = 0;

    for (size_t i = 0; i < n; i++)
        if (count[i] * seats[i].slot_s > most)
            most = count[i] * seats[i].slot_s;
    return most;
}

double sched_makespan(const uint32_t *owners, uint32_t nslots, const struct sched_seat *seats,
                      size_t nseats)
{
    uint32_t *count;
    double most;

    if (!measured(seats, nseats) || !(count = calloc(nseats, sizeof(*count))))
        return 0;
    for (uint32_t k = 0; k < nslots; k++) {
        size_t i = seat_of(seats, nseats, owners[k]);
        if (i < nseats)
            count[i]++;
    }
    most = span(count, seats, nseats);
    free(count);
    return most;
}

size_t sched_balance(uint32_t *owners, uint32_t nslots, const struct sched_seat *seats,
                     size_t nseats, double min_gain, struct sched_move *moves, size_t max)
{
    uint32_t *now, *want, movable = 0;
    size_t made = 0;

    if (!measured(seats, nseats) || !(now = calloc(2 * nseats, sizeof(*now))))
        return 0;
    want = now + nseats;
    for (uint32_t k = 0; k < nslots; k++) {
        size_t i = seat_of(seats, nseats, owners[k]);
        if (i == nseats)
            continue;
        now[i]++;
        if (seats[i].rank == k)
            want[i]++;   /* home: stays */
        else
            movable++;
    }
    /* Each to where it adds least; on a tie, to the seat holding most beyond its share so far
     * (a slot that need not move stays), then the lower rank. */
    for (; movable; movable--) {
        size_t best = 0;
        for (size_t i = 1; i < nseats; i++) {
            double a = (want[i] + 1) * seats[i].slot_s, b = (want[best] + 1) * seats[best].slot_s;
            int64_t ea = (int64_t)now[i] - want[i], eb = (int64_t)now[best] - want[best];
            if (a < b || (a == b && (ea > eb || (ea == eb && seats[i].rank < seats[best].rank))))
                best = i;
        }
        want[best]++;
    }
    if (!(span(want, seats, nseats) < span(now, seats, nseats) * (1.0 - min_gain))) {
        free(now);
        return 0;
    }
    for (uint32_t k = nslots; k-- > 0;) {   /* the highest slots move first */
        size_t from = seat_of(seats, nseats, owners[k]), to = nseats;
        if (from == nseats || seats[from].rank == k || now[from] <= want[from])
            continue;
        for (size_t i = 0; i < nseats; i++)   /* the one furthest below its share */
            if (now[i] < want[i] && (to == nseats || want[i] - now[i] > want[to] - now[to]))
                to = i;
        if (to == nseats)
            break;
        if (made < max)
            moves[made] = (struct sched_move){ k, owners[k], seats[to].worker };
        made++;
        owners[k] = seats[to].worker;
        now[from]--;
        now[to]++;
    }
    free(now);
    return made;
}
