/* channels.c - see channels.h. */
#include "channels.h"

#include <stdio.h>
#include <string.h>

ts_status shard_channels_get(struct shard_channels *sc, const char *addr,
                             struct ts_rpc_channel **ch, struct ts_err *err)
{
    ts_status st;

    for (size_t i = 0; i < sc->n; i++)
        if (strcmp(sc->v[i].addr, addr) == 0) {
            *ch = sc->v[i].ch;
            return TS_OK;
        }
    if (sc->n == SHARD_CHANNELS_MAX)
        shard_channels_free(sc);
    if ((st = ts_rpc_channel_create(addr, NULL, ch, err)))
        return st;
    snprintf(sc->v[sc->n].addr, sizeof(sc->v[0].addr), "%s", addr);
    sc->v[sc->n++].ch = *ch;
    return TS_OK;
}

void shard_channels_reserve(struct shard_channels *sc, size_t n)
{
    if (sc->n + n > SHARD_CHANNELS_MAX)
        shard_channels_free(sc);
}

void shard_channels_free(struct shard_channels *sc)
{
    for (size_t i = 0; i < sc->n; i++)
        ts_rpc_channel_free(sc->v[i].ch);
    sc->n = 0;
}
