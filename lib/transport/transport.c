/* transport.c - the table of backends, in preference order: shared memory when the peer is on
 * this host (its usable() says so), else TCP. RDMA and NCCL join here, ahead of tcp. */
#include "transport/transport.h"

#include <string.h>

const struct ts_transport_ops *const ts_transports[] = { &ts_transport_shm, &ts_transport_tcp,
                                                         NULL };

const struct ts_transport_ops *ts_transport_find(const char *name)
{
    for (int i = 0; name && ts_transports[i]; i++)
        if (strcmp(ts_transports[i]->name, name) == 0)
            return ts_transports[i];
    return NULL;
}
