/* service.h - tessera-verify's state and its gRPC table (main.c, rpc.c). Not verify.h: that
 * name is lib/verify's, and tests see services/ on their include path. */
#ifndef TS_VERIFY_SERVICE_H
#define TS_VERIFY_SERVICE_H

#include "cluster/cluster.h"
#include "rpc/rpc.h"
#include "store/store.h"

struct verifier {
    struct ts_store *store;         /* the snapshot store it audits (--store) */
    const char *master_addr;
    struct ts_master *master;       /* for "live": CreateSnapshot */
    const char *data_dir;           /* Fashion-MNIST for the MLP probe (NULL: Debian's) */
};

/* tessera.v1.Verify; ctx must be set to a struct verifier * before ts_rpc_server_add. */
extern struct ts_rpc_service ts_verify_service;

#endif
