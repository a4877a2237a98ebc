/* transport.c - the table of backends, in preference order: shared memory when the peer is on
 * this host (its usable() says so), RDMA where both ends have a verbs device that reaches the
 * peer's address (a build with it: TS_HAVE_RDMA), else TCP. NCCL joins here later. */
#include "transport/transport.h"

#include <string.h>

const struct ts_transport_ops *const ts_transports[] = { &ts_transport_shm,
#if TS_HAVE_RDMA
                                                         &ts_transport_rdma,
#endif
                                                         &ts_transport_tcp, NULL };

const struct ts_transport_ops *ts_transport_find(const char *name)
{
    for (int i = 0; name && ts_transports[i]; i++)
        if (strcmp(ts_transports[i]->name, name) == 0)
            return ts_transports[i];
    return NULL;
}
