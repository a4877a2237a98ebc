/* seats.h - the indexes over one job's seats (jobs.c) that keep a registration, a heartbeat
 * and a slot hand-out from scanning every worker of the job.
 *
 * Why: with a scan per question, registering W workers of one job cost O(W^3) on the master
 * (each registration re-handed every slot, asking for each one which seat holds its rank and
 * whether every starting rank had come), and each heartbeat scanned every seat of every job
 * to find its own: 4096 workers took 40 s to register (issue "one master for ten thousand
 * workers", docs/scaling.md). These indexes answer each question in O(1):
 *   worker -> its seat, and the slots it owns (its load), in an open-addressing map;
 *   rank   -> the seat alive for it (at most one: jobs.c refuses a second);
 *   which ranks came this run, and how many of those below the run's start count.
 * The seats themselves stay jobs.c's (a worker's seat is never removed during a run, so a
 * seat's position is its id here); jobs.c tells the index every change: a seat made, alive or
 * not, a slot that changes owner; a state restored from disk is indexed anew the same way.
 * Memory: 24 bytes a worker in the map (12-byte entries, at most half full), 5 a rank.
 * Ownership: embedded in struct job; seat_index_free frees what it allocated. Threads: none of
 * its own; jobs.c calls it with its mutex held. */
#ifndef TS_MASTER_SEATS_H
#define TS_MASTER_SEATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct seat_entry {
    uint32_t worker;            /* 0: an empty slot of the map */
    uint32_t seat;              /* its position in the job's seats */
    uint32_t load;              /* the job's slots it owns */
};

struct seat_index {
    struct seat_entry *map;
    size_t cap, n;              /* cap: a power of two, or 0 */
    int32_t *rank_alive;        /* by rank: the alive seat, -1 none */
    uint8_t *came;              /* by rank: a seat of it was made this run */
    uint32_t ranks, start, came_below;
};

/* Empty, allocating nothing. */
void seat_index_init(struct seat_index *si);
void seat_index_free(struct seat_index *si);
/* A new run of `ranks` ranks starting with the first `start`: no seat, no rank came. */
ts_status seat_index_reset(struct seat_index *si, uint32_t ranks, uint32_t start,
                           struct ts_err *err) TS_MUST_CHECK;
/* Seat `seat` made for worker of rank (alive or not: a state restored); TS_ENOMEM leaves the
 * index as it was. */
ts_status seat_index_add(struct seat_index *si, uint32_t worker, uint32_t seat, uint32_t rank,
                         bool alive, struct ts_err *err) TS_MUST_CHECK;
/* The seat of worker (-1: none here). */
int32_t seat_index_of(const struct seat_index *si, uint32_t worker);
/* The seat alive for rank (-1: none; a rank out of range: none). */
int32_t seat_index_rank(const struct seat_index *si, uint32_t rank);
/* Seat `seat` of rank is alive again (a worker back from the dead) / no longer alive. */
void seat_index_alive(struct seat_index *si, uint32_t rank, uint32_t seat);
void seat_index_gone(struct seat_index *si, uint32_t rank, uint32_t seat);
/* Whether every rank below start came this run. */
bool seat_index_all_came(const struct seat_index *si);
/* A slot passes from worker `from` to worker `to` (0: none, either side): their loads. */
void seat_index_move(struct seat_index *si, uint32_t from, uint32_t to);
/* The slots worker owns (0 for a worker not here). */
uint32_t seat_index_load(const struct seat_index *si, uint32_t worker);
#endif
