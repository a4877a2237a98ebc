/* emulate.h - a slower link, for benchmarks: not part of include/tessera.h, not exported from
 * libtessera.so (tessera.map exports tessera_* only); programs linked with the static SDK
 * library call it (tessera-worker --delay-ms, which bench/modes.py uses to give emulated hosts
 * a latency where the kernel has no netem).
 * sdk_connect_delayed: tessera_connect whose every data-plane send first sleeps delay_ms
 * (0..60000; lib/transport/fault.h), on every connection it makes, reconnections included. */
#ifndef TS_CLIENT_EMULATE_H
#define TS_CLIENT_EMULATE_H

#include "tessera.h"

int sdk_connect_delayed(const struct tessera_options *o, int delay_ms, tessera **out,
                        struct tessera_error *e);

#endif
