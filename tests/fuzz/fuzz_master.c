/* fuzz_master.c - libFuzzer target: tessera.v1.Master's handlers (services/master/rpc.c,
 * tasks_rpc.c, admit.c) over a real state: the members table, the jobs table, the data maps,
 * the work queues and tasks, as main.c makes them for a master without --store or
 * --state-dir.
 *
 * fuzz_rpc stops at the decoder and the validators that run alone; here a sequence of
 * requests reaches the handlers through the service's method table, each decoded as the
 * server decodes it, with the roles checked as the server checks them, then packed as it
 * would be sent (rpc_run.h). The state carries over from one request to the next within a run
 * (shards and workers register, heartbeat, join jobs, claim work, report each other, leave)
 * and is made afresh for each run. The caller is a member on a plaintext server with an admin
 * token: admin only in requests that send the token.
 *
 * input[0]: bit 0 chains of two shards (--replicas 2), else one. Then records: the method
 * (its index in master.proto, modulo their number), flags (bit 0: the caller sends the admin
 * token), the request's length (u16), the request. A shard's address that is host:port is
 * made 127.0.0.N:1 (N from its port) before the request is sent: the master probes the
 * addresses shards register at (admit.c) and ReportUnreachable asks them (ts_tcp_refused), and
 * port 1 of a loopback address refuses at once, where a name would be looked up and another
 * address might take seconds to answer.
 *
 * Checked by rpc_run.h: every status is one err.h names, every reply packs and unpacks as its
 * type and holds only valid UTF-8 (a client in any language reads it); ASan and UBSan on all
 * of it. $TESSERA_FUZZ_TRACE set: each request, its status and message on stderr.
 * Seeds: tests/fuzz/corpus-master (written by fuzz_seeds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master.h"
#include "rpc_run.h"
#include "util/log.h"
#include "util/proc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQUESTS 64

static struct master m;
/* The tables of tasks and of progress hold a few MiB each, made once: a run that left
 * nothing in them (no SubmitTask; no Heartbeat, which notes progress) hands them on as they
 * were made, and one that may have is given new ones (master_free). */
static struct tasks *tasks;
static struct progress *progress;
static bool trace;                 /* $TESSERA_FUZZ_TRACE: each request and its answer */

/* The handler of method b of tessera.v1.Master as the .proto lists them (modulo their
 * number), from the service's table; NULL where the table has none. */
static const struct ts_rpc_method *method(uint8_t b)
{
    const ProtobufCServiceDescriptor *d = &tessera__v1__master__descriptor;
    const char *name = d->methods[b % d->n_methods].name;

    for (const struct ts_rpc_method *t = ts_master_service.methods; t->name; t++)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ts_log_set_level(TS_ERROR);   /* registrations log at INFO, refusals at WARN */
    fuzz_rpc_token();
    trace = getenv("TESSERA_FUZZ_TRACE") != NULL;
    ts_master_service.ctx = &m;
    master_metrics_init(&m);      /* read at scrapes only: none here */
    if (tasks_create(NULL, &tasks, NULL) || !(progress = progress_create()))
        abort();
    return 0;
}

/* The master as main.c makes it, without a store or a state directory. */
static void master_new(uint32_t replicas)
{
    struct ts_members_cfg cfg = { .default_lease_ms = 3000, .vnodes = 64,
                                  .replicas = replicas };
    struct jobs_cfg jcfg = { .max_jobs = 8, .per_owner = 4 };
    struct ts_err err = { 0 };

    memset(&m, 0, sizeof(m));
    m.started_ms = ts_now_ms();
    m.lease_ms = cfg.default_lease_ms;
    memset(m.data_key, 0x42, sizeof(m.data_key));
    datamap_init(&m.data);
    rollbacks_init(&m.rb);
    maphist_init(&m.maps);
    if (master_state_open(&m.state, NULL, &err) || ts_members_create(&cfg, &m.members, &err) ||
        jobs_create(&jcfg, &m.jobs, &err) ||
        snapper_open(&m.snap, m.members, &m.data, m.jobs, NULL, NULL, NULL, NULL, 0, &err) ||
        workq_create(&m.state, &m.work, &err)) {
        fprintf(stderr, "fuzz_master: %s\n", err.msg);
        abort();
    }
    m.tasks = tasks;
    m.progress = progress;
}

static void master_free(bool submitted, bool beat)
{
    struct ts_err err = { 0 };

    snapper_close(&m.snap);
    master_state_close(&m.state);
    datamap_fini(&m.data);
    maphist_fini(&m.maps);
    rollbacks_fini(&m.rb);
    ts_members_free(m.members);
    jobs_free(m.jobs);
    workq_free(m.work);
    if (submitted) {
        tasks_free(tasks);
        if (tasks_create(NULL, &tasks, &err))
            abort();
    }
    if (beat) {
        progress_free(progress);
        progress = progress_create();
    }
}

/* A RegisterShard whose address is host:port, with the address made 127.0.0.N:1 (see the
 * header), into *out (malloc'd, *n bytes); false to send the request as it came. */
static bool loopback_shard(const uint8_t *p, size_t len, uint8_t **out, size_t *n)
{
    Tessera__V1__RegisterShardRequest *r = NULL;
    char addr[32];
    bool done = false;

    /* Bytes the server refuses stay as they are: unpacked here, a NUL would cut a string. */
    if (!ts__wire_check(&tessera__v1__register_shard_request__descriptor, p, len, NULL))
        r = tessera__v1__register_shard_request__unpack(NULL, len, p);
    if (r && ts_members_check_addr("addr", r->addr, true, NULL) == TS_OK) {
        snprintf(addr, sizeof(addr), "127.0.0.%ld:1", 1 + strtol(strrchr(r->addr, ':') + 1,
                                                                    NULL, 10) % 250);
        free(r->addr);
        if (!(r->addr = strdup(addr)))
            abort();
        *n = tessera__v1__register_shard_request__get_packed_size(r);
        if (!(*out = malloc(*n ? *n : 1)))
            abort();
        tessera__v1__register_shard_request__pack(r, *out);
        done = true;
    }
    if (r)
        tessera__v1__register_shard_request__free_unpacked(r, NULL);
    return done;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool submitted = false, beat = false;

    if (size < 1)
        return 0;
    master_new(data[0] & 1 ? 2 : 1);
    data++, size--;
    for (int k = 0; k < MAX_REQUESTS && size >= 4; k++) {
        const struct ts_rpc_method *meth = method(data[0]);
        size_t len = (size_t)data[2] | (size_t)data[3] << 8;
        bool admin = data[1] & 1;
        struct ts_err err = { 0 };
        uint8_t *safe = NULL;
        size_t n;

        len = len < size - 4 ? len : size - 4;
        int64_t t0 = ts_now_us();
        ts_status st = TS_OK;

        if (!meth)
            ;   /* a method of the service the master does not serve */
        else if (meth->req == &tessera__v1__register_shard_request__descriptor &&
                 loopback_shard(data + 4, len, &safe, &n))
            st = fuzz_rpc_run(&ts_master_service, meth, safe, n, admin, &err);
        else
            st = fuzz_rpc_run(&ts_master_service, meth, data + 4, len, admin, &err);
        submitted |= meth && meth->fn == master_submit_task;
        beat |= meth && !strcmp(meth->name, "Heartbeat");
        if (trace && meth)
            fprintf(stderr, "%s%s: %s %s (%lld us)\n", meth->name, admin ? " (admin)" : "",
                    ts_status_name(st), err.msg, (long long)(ts_now_us() - t0));
        free(safe);
        data += 4 + len;
        size -= 4 + len;
    }
    master_free(submitted, beat);
    return 0;
}
