/* channels.h - the master's gRPC channels to its shards, by address, kept across calls.
 *
 * Why: the master calls every shard again and again (the automatic snapshot loop asks each for
 * its jobs every 50 ms while idle; the releaser frees each ended job on each shard), and a
 * gRPC channel is costly to make. Shards that left keep their entries until the table is full;
 * then it starts over.
 * Ownership: the table owns its channels; callers borrow one until they next call
 * shard_channels_get or shard_channels_free. Threads: none; each user keeps its own table
 * (under its own lock). */
#ifndef TS_MASTER_CHANNELS_H
#define TS_MASTER_CHANNELS_H

#include <stddef.h>

#include "members.h"
#include "rpc/rpc.h"

#define SHARD_CHANNELS_MAX 256

struct shard_channels {
    struct {
        char addr[TS_MEMBERS_MAX_ADDR + 1];
        struct ts_rpc_channel *ch;
    } v[SHARD_CHANNELS_MAX];
    size_t n;
};

/* Makes room for n new channels (starting over if need be): call it before a walk that keeps
 * the channels of n shards at once, so that none is freed under it. */
void shard_channels_reserve(struct shard_channels *sc, size_t n);
/* The channel to the shard at addr, made on first use. */
ts_status shard_channels_get(struct shard_channels *sc, const char *addr,
                             struct ts_rpc_channel **ch, struct ts_err *err) TS_MUST_CHECK;
void shard_channels_free(struct shard_channels *sc);

#endif
