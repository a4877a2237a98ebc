/* fuzz_shard_rpc.c - libFuzzer target: tessera.v1.Shard's handlers (services/shard/rpc.c)
 * over a real registry of partitions (params.c, walks.c, rollback.c, reclaim.c).
 *
 * A worker registers tensors on a shard, and the master arms, writes and releases its jobs'
 * snapshots and rolls them back; each request lands in the registry that holds the partitions.
 * fuzz_rpc decodes these requests; here sequences of up to 64 reach the handlers through the
 * service's method table, as the server runs them (rpc_run.h), on a shard that joined a
 * cluster: its map (shards 1, this one, and 2; chains of two: it heads some partitions and
 * follows the others) and its registration come from a fake master (fake_master.h), its memory
 * budget is 64 MiB, and its registry is made afresh for each run. No store: snapshots and
 * rollbacks are refused where they would read or write one (a store would fill the disk over a
 * long run), after every check that comes before.
 *
 * input[0] is kept for options; then records: the method (its index in shard.proto, modulo
 * their number), flags (bit 0: the caller sends the admin token), the request's length (u16),
 * the request. The map's epoch is 5 (RegisterTensorRequest.map_epoch).
 *
 * Checked by rpc_run.h: every status is one err.h names, every reply packs and unpacks as its
 * type and holds only valid UTF-8; ASan and UBSan on all of it. $TESSERA_FUZZ_TRACE set: each
 * request, its status and message on stderr. Seeds: tests/fuzz/corpus-shard_rpc (written by
 * fuzz_seeds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_master.h"
#include "rpc_run.h"
#include "shard.h"
#include "util/log.h"
#include "util/proc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* A run frees every partition it registered (up to the 64 MiB budget): with ASan's default
 * quarantine (256 MiB) each run faults in fresh pages, and the process holds half a GiB.
 * $ASAN_OPTIONS overrides it. */
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16";
}

#define MAX_REQUESTS 64
#define EPOCH 5

static struct shard sh;
static bool trace;

static void noop_remap(void *ctx)
{
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const uint32_t ids[] = { 1, 2 };
    struct ts_membership_cfg mc = { .kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD,
                                    .addr = "127.0.0.1:1", .instance = "fuzz-shard" };
    struct fake_master *fm;
    struct ts_err err = { 0 };
    char addr[64];

    ts_log_set_level(TS_ERROR);
    trace = getenv("TESSERA_FUZZ_TRACE") != NULL;
    fuzz_rpc_token();
    if (fake_master_start(EPOCH, ids, 2, 2, &fm, addr, &err) ||
        ts_master_open(addr, &sh.master, &err) || ts_cluster_open(addr, &sh.cluster, &err) ||
        ts_membership_start(sh.master, &mc, 5000, &sh.membership, &err)) {
        fprintf(stderr, "fuzz_shard_rpc: %s\n", err.msg);
        abort();
    }
    snprintf(sh.addr, sizeof(sh.addr), "127.0.0.1:1");
    snprintf(sh.instance, sizeof(sh.instance), "fuzz-shard");
    sh.master_addr = "fake";
    sh.started_ms = ts_now_ms();
    sh.dp.remap = noop_remap;     /* RollbackJob takes up the map first: it does not move */
    ts_shard_service.ctx = &sh;
    return 0;
}

/* The handler of method b of tessera.v1.Shard as the .proto lists them (modulo their number),
 * from the service's table; NULL where the table has none. */
static const struct ts_rpc_method *method(uint8_t b)
{
    const ProtobufCServiceDescriptor *d = &tessera__v1__shard__descriptor;
    const char *name = d->methods[b % d->n_methods].name;

    for (const struct ts_rpc_method *t = ts_shard_service.methods; t->name; t++)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    shard_params_init(&sh.params);
    sh.params.mem_budget = 64u << 20;   /* --mem-budget 64 */
    data++, size--;
    for (int k = 0; k < MAX_REQUESTS && size >= 4; k++) {
        const struct ts_rpc_method *meth = method(data[0]);
        size_t len = (size_t)data[2] | (size_t)data[3] << 8;
        bool admin = data[1] & 1;
        struct ts_err err = { 0 };
        int64_t t0 = ts_now_us();
        ts_status st;

        len = len < size - 4 ? len : size - 4;
        if (meth) {
            st = fuzz_rpc_run(&ts_shard_service, meth, data + 4, len, admin, &err);
            if (trace)
                fprintf(stderr, "%s%s: %s %s (%lld us)\n", meth->name, admin ? " (admin)" : "",
                        ts_status_name(st), err.msg, (long long)(ts_now_us() - t0));
        }
        data += 4 + len;
        size -= 4 + len;
    }
    shard_params_fini(&sh.params);
    return 0;
}
