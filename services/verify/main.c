/* main.c - tessera-verify: the audit service. Serves tessera.v1.Verify (with health and
 * reflection, like every Tessera server) over a snapshot store, registers with the master as a
 * member with role "verify" (so `tessera status` lists it and clients can find it), and
 * leaves cleanly on SIGTERM. */
#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "util/flags.h"
#include "util/log.h"
#include "util/proc.h"
#include "rpc/serve.h"
#include "service.h"

int main(int argc, char **argv)
{
    struct ts_serve_opts so = TS_SERVE_DEFAULTS("127.0.0.1:0");
    const char *master = NULL, *store_dir = NULL, *data = NULL, *adv = NULL;
    int64_t lease_ms = 0;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR", "master address (default $TESSERA_MASTER, "
                                                  "then 127.0.0.1:7070)", 0, 0 },
        { "store", TS_FLAG_STR, &store_dir, "DIR", "the snapshot store to audit (required; "
                                                   "the cluster's for \"live\")", 0, 0 },
        TS_SERVE_FLAGS(&so, "gRPC address (default 127.0.0.1:0: a free port)"),
        TS_ADVERTISE_FLAG(&adv),
        { "data", TS_FLAG_STR, &data, "DIR", "Fashion-MNIST for the MLP probe (default "
                                             "Debian's)", 0, 0 },
        { "lease-ms", TS_FLAG_INT, &lease_ms, "MS", "lease to ask for (default: the master's)",
          0, 600000 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_membership_cfg mcfg = { .kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER,
                                      .role = "verify" };
    struct verifier v = { 0 };
    struct ts_rpc_server *srv = NULL;
    struct ts_master *m = NULL;
    struct ts_membership *ms = NULL;
    struct ts_err err = { 0 };
    char addr[300], host[256];
    int rc, sig;

    ts_proc_block_signals();
    if ((rc = ts_flags_program("tessera-verify", "tessera-verify --store DIR [options]",
                               "The Tessera audit service: tessera.v1.Verify/Compare of two "
                               "snapshots,\nor of a snapshot and the live job (docs/verify.md). "
                               "Registers with the\nmaster (role verify); stops cleanly on "
                               "SIGTERM.", flags, argc, argv)) >= 0)
        return rc;
    rc = 1;
    if (!store_dir) {
        fprintf(stderr, "tessera-verify: --store DIR is required (the snapshot store to audit)\n");
        return 2;
    }
    v.master_addr = ts_master_default_addr(master);
    v.data_dir = data;
    ts_verify_service.ctx = &v;
    if (ts_store_open(store_dir, NULL, &v.store, &err) ||
        ts_rpc_tls_setup(&so.tls, &err) ||   /* before the master's channel is made */
        ts_master_open(v.master_addr, &v.master, &err) ||
        ts_serve_start(&so, &ts_verify_service, &srv, &err) ||
        ts_serve_advertised(so.listen, adv, ts_rpc_server_port(srv), addr, sizeof(addr), &err))
        goto out;
    snprintf(host, sizeof(host), "%.*s", (int)(strrchr(addr, ':') - addr), addr);
    mcfg.addr = host;
    mcfg.service = addr;
    mcfg.lease_ms = (uint32_t)lease_ms;
    if (ts_master_open(v.master_addr, &m, &err) ||
        ts_membership_start(m, &mcfg, 30000, &ms, &err)) {
        ts_err_prefix(&err, "cannot join the cluster (is the master running at %s?)",
                      v.master_addr);
        goto out;
    }
    ts_log(TS_INFO, "verify", "tessera-verify serving at %s over store %s", addr, store_dir);
    sig = ts_proc_wait_signal(-1);
    ts_log(TS_INFO, "verify", "signal %d: leaving the cluster and draining calls", sig);
    rc = 0;
out:
    if (rc)
        ts_log(TS_ERROR, "verify", "%s", err.msg);
    ts_serve_metrics_stop();   /* before what its collectors read goes */
    ts_rpc_server_shutdown(srv, (int)so.grace_ms);
    ts_membership_stop(ms, rc == 0);
    ts_rpc_server_free(srv);
    ts_master_close(m);
    ts_master_close(v.master);
    ts_store_close(v.store);
    return rc;
}
