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
#include "service.h"

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0", *master = NULL, *store_dir = NULL, *port_file = NULL;
    const char *data = NULL;
    int64_t threads = 2, grace_ms = 5000, lease_ms = 0;
    bool help;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR", "master address (default $TESSERA_MASTER, "
                                                  "then 127.0.0.1:7070)", 0, 0 },
        { "store", TS_FLAG_STR, &store_dir, "DIR", "the snapshot store to audit (required; "
                                                   "the cluster's for \"live\")", 0, 0 },
        { "listen", TS_FLAG_STR, &listen, "ADDR", "gRPC address (default 127.0.0.1:0: a free "
                                                  "port)", 0, 0 },
        { "port-file", TS_FLAG_STR, &port_file, "FILE", "write the bound port here", 0, 0 },
        { "data", TS_FLAG_STR, &data, "DIR", "Fashion-MNIST for the MLP probe (default "
                                             "Debian's)", 0, 0 },
        { "lease-ms", TS_FLAG_INT, &lease_ms, "MS", "lease to ask for (default: the master's)",
          0, 600000 },
        { "threads", TS_FLAG_INT, &threads, "N", "completion-queue threads (default 2)", 1, 64 },
        { "grace-ms", TS_FLAG_INT, &grace_ms, "MS", "on SIGTERM, time for calls in flight "
                                                    "(default 5000)", 0, 600000 },
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
    int npos = 0, rc = 1, sig;

    ts_proc_block_signals();
    if (ts_flags_parse(flags, argc - 1, argv + 1, NULL, &npos, &help, &err)) {
        fprintf(stderr, "tessera-verify: %s\n", err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, "tessera-verify --store DIR [options]",
                       "The Tessera audit service: tessera.v1.Verify/Compare of two snapshots,\n"
                       "or of a snapshot and the live job (docs/verify.md). Registers with the\n"
                       "master (role verify); stops cleanly on SIGTERM.", flags);
        return 0;
    }
    if (!store_dir) {
        fprintf(stderr, "tessera-verify: --store DIR is required (the snapshot store to audit)\n");
        return 2;
    }
    v.master_addr = ts_master_default_addr(master);
    v.data_dir = data;
    ts_verify_service.ctx = &v;
    if (ts_store_open(store_dir, NULL, &v.store, &err) ||
        ts_master_open(v.master_addr, &v.master, &err) ||
        ts_rpc_server_create(&(struct ts_rpc_server_opts){ .listen = listen,
                                                           .threads = (int)threads },
                             &srv, &err) ||
        ts_rpc_server_add(srv, &ts_verify_service, &err) || ts_rpc_server_start(srv, &err))
        goto out;
    snprintf(host, sizeof(host), "%.*s", (int)(strrchr(listen, ':') - listen), listen);
    snprintf(addr, sizeof(addr), "%s:%d", host, ts_rpc_server_port(srv));
    if (port_file && ts_port_file_write(port_file, ts_rpc_server_port(srv), &err))
        goto out;
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
    ts_rpc_server_shutdown(srv, (int)grace_ms);
    ts_membership_stop(ms, rc == 0);
    ts_rpc_server_free(srv);
    ts_master_close(m);
    ts_master_close(v.master);
    ts_store_close(v.store);
    return rc;
}
