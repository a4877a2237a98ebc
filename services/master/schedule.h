/* schedule.h - the master's schedule of an elastic job's slots over its live workers: which
 * worker computes which slot, in proportion to their measured speed (docs/scheduler.md).
 *
 * Why: a bsp step waits for its slowest worker. A job of W slots (a slot is a fixed set of
 * micro-batches: its gradient is the same bits whoever computes it) run by fewer, unequal
 * workers goes fastest when each worker's slots times its seconds per slot are as even as
 * they can be. Moving a slot is the elastic takeover (docs/elastic.md) of a slot whose worker
 * is alive: the same roster, wake and retry protocol, so a move is exactly once.
 * Pure functions over arrays; jobs.c holds the table and the lock. */
#ifndef TS_MASTER_SCHEDULE_H
#define TS_MASTER_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

/* A worker that may own slots: alive and caught up. */
struct sched_seat {
    uint32_t worker, rank;
    double slot_s;        /* its measured compute seconds per slot; 0: not measured yet */
};

struct sched_move {
    uint32_t slot, from, to;   /* worker ids */
};

/* Moves slots of owners[0..nslots) (worker ids) between seats so that the most any seat
 * takes (its slots x slot_s) is least: slot k stays with the seat of rank k (its home); the
 * others go, one at a time, where they add least. Slots owned by no seat stay as they are.
 * Nothing moves unless every seat was measured and the predicted step time falls by more
 * than min_gain (a fraction: 0.1 is 10%), so noise in the measurements does not make slots
 * flap. Returns the moves made (written to moves, the first max of them); 0 on no memory. */
size_t sched_balance(uint32_t *owners, uint32_t nslots, const struct sched_seat *seats,
                     size_t nseats, double min_gain, struct sched_move *moves, size_t max);

/* The predicted step time of owners over seats: the largest slots x slot_s (0 if any seat
 * is not measured). */
double sched_makespan(const uint32_t *owners, uint32_t nslots, const struct sched_seat *seats,
                      size_t nseats);

#endif
