/* handshake_facts.h - the fixed handshake facts fuzz_handshake checks proofs against and
 * fuzz_seeds makes its good seeds with (corpus-handshake). */
#ifndef TS_FUZZ_HANDSHAKE_FACTS_H
#define TS_FUZZ_HANDSHAKE_FACTS_H

#include <string.h>

#include "transport/auth.h"

static inline void handshake_facts(struct ts_dp_hs *hs)
{
    memset(hs, 0, sizeof(*hs));
    memset(hs->key, 0x11, sizeof(hs->key));
    memset(hs->nc, 0x22, sizeof(hs->nc));
    memset(hs->ns, 0x33, sizeof(hs->ns));
    hs->job = "fuzz-job";
    hs->rank = 1;
}

#endif
