/* sdk.c - include/tessera.h: the trainer's view of a cluster, or of an in-process store.
 *
 * Remote: at connect, the SDK joins the cluster as a worker (heartbeats show its step in
 * `tessera status`), reads the shard map, and opens one data-plane connection per shard, over
 * the first transport both ends can use (shm on the same host, else tcp). Registration is a
 * gRPC call to every alive shard under the cached map (a stale map is refreshed by
 * ts_cluster_call); each partition is owned by the shard the ring names under the tensor's
 * placement salt, proposed here for balance and fixed by the shards (docs/placement.md). A
 * step sends every PUSH to every shard before reading any ACK, then every PULL before reading
 * any PARAMS, so the shards work in parallel while the SDK stays single-threaded; replies on
 * one connection come in request order.
 * Local ("local"): the same partitions (lib/ps) live in this process, so `tessera train
 * --local` applies steps with exactly the shard's code.
 * Modes, compression, sync periods and loss scaling (docs/modes.md) live on the worker's
 * side too: a tensor's gradient is summed over its sync period, compressed per partition (with
 * the top-k residual kept here), and in reduce mode the reduced gradient goes through this
 * worker's copy of the optimizer, the same code a shard runs.
 * Files: this one connects, registers, hands out buffers and audits, at the top of the
 * SDK's layers; sdk_internal.h lists every file with its layer and holds the state they
 * share. */
#include "client/sdk_internal.h"
#include "client/emulate.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/shard.h"
#include "transport/frame.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"

/* A registration the map moved under is made again, this often, this far apart. */
#define REGISTER_TRIES 10
#define REGISTER_PAUSE_MS 200

/* include/tessera.h promises its codes are ts_status's values: the SDK returns one as the
 * other. A code added to one enum and not the other stops the build here. */
#define SAME_CODE(x) _Static_assert((int)TESSERA_##x == (int)TS_##x, "TESSERA_" #x " != TS_" #x)
SAME_CODE(OK);
SAME_CODE(EINVAL);
SAME_CODE(ENOTFOUND);
SAME_CODE(EEXIST);
SAME_CODE(ESTATE);
SAME_CODE(ESTALE);
SAME_CODE(ETIMEDOUT);
SAME_CODE(EUNAVAIL);
SAME_CODE(ENOMEM);
SAME_CODE(ECORRUPT);
SAME_CODE(EIO);
SAME_CODE(EAUTH);
SAME_CODE(ENOTSUP);
SAME_CODE(ENODEV);
SAME_CODE(ECANCELLED);
SAME_CODE(EINTERNAL);
SAME_CODE(EROLLBACK);
SAME_CODE(ESLOTS);
SAME_CODE(EPERM);
#undef SAME_CODE
#include "rpc/rpc.h"
#include "verify/verify.h"

int tessera_grpc_code(int code)
{
    return ts_rpc_code_from_status((ts_status)code);
}

const char *tessera_grpc_code_name(int grpc_code)
{
    return ts_rpc_code_name(grpc_code);
}

/* ---- connecting ---- */

/* $TESSERA_PLACEMENT_SALT: unset, "" or "auto", each tensor is proposed with the salt that
 * balances it best (docs/placement.md); a number, with that salt (0: as before salts, for
 * comparison). */
static ts_status salt_mode(struct tessera *t, struct ts_err *err)
{
    long long n = ts_knob_int(TS_KNOB_PLACEMENT_SALT);
    ts_status st;

    t->salt_fixed = false;
    if ((st = ts_knob_check(TS_KNOB_PLACEMENT_SALT, err)))
        return st;
    if (n < 0)
        return TS_OK;   /* auto */
    t->salt_fixed = true;
    t->salt = (uint32_t)n;
    return TS_OK;
}

/* The membership's question: when a shard last answered this worker (sdk_reply.c). */
static int64_t last_reply(void *arg)
{
    struct tessera *t = arg;

    return atomic_load_explicit(&t->last_reply_ms, memory_order_relaxed);
}

static ts_status connect_remote(struct tessera *t, const struct tessera_options *o,
                                struct ts_err *err)
{
    struct ts_membership_cfg mc = { .kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER };
    char host[256] = "localhost";
    ts_status st;

    gethostname(host, sizeof(host) - 1);
    mc.addr = host;
    mc.job = t->job.id;
    mc.rank = o->rank;
    mc.workers = o->workers;
    mc.keep = o->keep != 0;
    mc.elastic = t->elastic;
    mc.restarts = o->restarts;
    mc.start_workers = o->start_workers;
    mc.balance = o->balance != 0;
    mc.on_epoch = sdk_follow_epoch;
    mc.last_reply_ms = last_reply;
    mc.arg = t;
    if ((st = ts_master_open(o->master, &t->master, err)))
        return st;
    ts_master_set_call_ms(t->master, o->call_timeout_ms);
    if ((st = ts_membership_start(t->master, &mc, ts_master_call_ms(t->master) > 10000
                                                      ? ts_master_call_ms(t->master) : 10000,
                                  &t->ms, err))) {
        if (st == TS_EUNAVAIL && strstr(err->msg, "nothing listens"))
            ts_err_prefix(err, "no master at %s: start one with `tessera up`, or name the "
                          "one you run (master=, $TESSERA_MASTER)", o->master);
        return st;
    }
    if ((st = ts_cluster_open(o->master, &t->cl, err)))
        return st;
    ts_cluster_set_call_ms(t->cl, o->call_timeout_ms);
    t->el.registrations_seen = ts_membership_registrations(t->ms);
    snprintf(t->conns.want_transport, sizeof(t->conns.want_transport), "%s",
             o->transport ? o->transport : "");
    return sdk_start_over(t, sdk_connect_shards(t, o->transport, t->conns.delay_ms, err), err);
}

int tessera_connect(const struct tessera_options *o, tessera **out, struct tessera_error *e)
{
    return sdk_connect_delayed(o, 0, out, e);
}

int sdk_connect_delayed(const struct tessera_options *given, int delay_ms, tessera **out,
                        struct tessera_error *e)
{
    struct tessera_options opts, *o = &opts;
    struct ts_err err = { 0 };
    struct tessera *t;
    ts_status st;

    if (delay_ms < 0 || delay_ms > 60000) {
        ts_err_set(&err, TS_EINVAL, "--delay-ms: %d is outside 0..60000", delay_ms);
        return sdk_fail(e, &err);
    }
    if (sdk_options_copy(given, o, &err) || sdk_options_check(o, 0, &err))
        return sdk_fail(e, &err);
    if (!(t = calloc(1, sizeof(*t)))) {
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return sdk_fail(e, &err);
    }
    t->conns.delay_ms = delay_ms;
    pthread_mutex_init(&t->conns.mu, NULL);
    /* Inside a user's program the SDK speaks only of problems; TESSERA_LOG=info (or debug)
     * shows the rest (docs/launch.md, "Logs"). */
    if (!ts_knob_is_set(TS_KNOB_LOG))
        ts_log_set_level(TS_WARN);
    t->local = !o->master || !o->master[0] || strcmp(o->master, "local") == 0;
    t->rank = o->rank;
    t->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : (int)ts_knob_int(TS_KNOB_TIMEOUT_MS);
    t->data_seed = o->data_seed;
    t->micro = o->micro_batch;
    st = ts_job_init(&t->job, o->job ? o->job : "default", o->workers, o->exact != 0,
                     o->optimizer ? o->optimizer : "momentum", o->batch, &err);
    if (!st)
        sdk_set_modes(t, o);
    if (!st)
        st = sdk_pipe_mode(t, &err);
    if (!st && t->local)
        snprintf(t->conns.transport, sizeof(t->conns.transport), "local");
    if (!st && !t->local)
        st = salt_mode(t, &err);
    if (!st && !t->local)
        st = connect_remote(t, o, &err);
    if (st) {
        tessera_close(t);
        return sdk_fail(e, &err);
    }
    *out = t;
    return sdk_ok(e);
}

static void tensor_free(struct sdk_tensor *x)
{
    if (!x)
        return;
    for (uint32_t p = 0; x->parts && p < x->nparts; p++)
        ts_part_free(x->parts[p]);
    free(x->parts);
    free(x->owner);
    free(x->acc);
    free(x->residual);
    sdk_pullc_free(x);
    free(x->enc);
    free(x->enc_off);
    free(x->enc_len);
    free(x->overflow);
    free(x->value);
    free(x->state);
    free(x->rgrad);
    free(x->have);
    free(x->torn);
    free(x->prev);
    free(x->assign_buf);
    free(x->slot_sum);
    sdk_region_free(x);
    free(x);
}

void tessera_set_result(tessera *t, int failed, const char *text)
{
    if (t)
        ts_membership_end(t->ms, failed != 0, text);
}

void tessera_close(tessera *t)
{
    if (!t)
        return;
    sdk_metrics_close(t);   /* before what its scrapes read goes */
    sdk_close_shards(t);
    ts_membership_stop(t->ms, true);
    ts_cluster_close(t->cl);
    ts_master_close(t->master);
    if (t->rec.followed_map)
        protobuf_c_message_free_unpacked(&t->rec.followed_map->base, NULL);
    for (int i = 0; i < t->ntensors; i++)
        tensor_free(t->tensors[i]);
    sdk_rows_free(t);
    pthread_mutex_destroy(&t->conns.mu);
    free(t);
}

const char *tessera_transport(const tessera *t)
{
    return t->conns.transport;
}

uint32_t tessera_worker_id(const tessera *t)
{
    return t->ms ? ts_membership_id(t->ms) : 0;
}

uint64_t tessera_numel(const tessera *t, int id)
{
    return id >= 0 && id < t->ntensors ? t->tensors[id]->numel : 0;
}

uint64_t tessera_partition_bytes(const tessera *t, int id)
{
    return id >= 0 && id < t->ntensors ? t->tensors[id]->partition_bytes : 0;
}

/* ---- registration ---- */

/* The salt to propose for x: the fixed one, or the one that balances its bytes best over the
 * shards of the cached map (every worker under that map proposes the same). */
static uint32_t propose_salt(struct tessera *t, const struct sdk_tensor *x)
{
    uint64_t off, full, last;
    struct ts_ring_salt rs;
    uint32_t salt;

    if (t->salt_fixed)
        return t->salt;
    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, 0, &off, &full);
    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, x->nparts - 1, &off, &last);
    salt = ts_cluster_choose_salt(t->cl, x->name, x->nparts, full * sizeof(float),
                                  last * sizeof(float), &rs);
    ts_log(TS_DEBUG, "sdk", "tensor '%s': placement salt %u (%u tried): the busiest shard heads "
           "%" PRIu64 " bytes, %" PRIu64 " with salt 0, %" PRIu64 " at best", x->name, salt,
           rs.tried, rs.max_share, rs.salt0_share, rs.floor);
    return salt;
}

/* Which shard slot the k-th RegisterTensor goes to: the lowest shard id first, whose answer
 * fixes the salt (docs/placement.md: every worker under one map asks the same shard first),
 * then the others in map order. */
static size_t register_order(const struct tessera *t, size_t k)
{
    size_t low = 0;

    for (size_t i = 1; i < t->conns.nshards; i++)
        low = t->conns.shards[i].id < t->conns.shards[low].id ? i : low;
    if (k == 0)
        return low;
    return k - 1 < low ? k - 1 : k;
}

/* x was proposed in partitions of another size than the tensor has (registered first by a
 * worker that chose another, or restored from a snapshot): takes the tensor's. */
static ts_status adopt_partition_bytes(struct sdk_tensor *x,
                                       Tessera__V1__RegisterTensorRequest *req, uint64_t bytes,
                                       struct ts_err *err)
{
    uint32_t n = ts_partition_count(x->numel, sizeof(float), bytes);
    uint32_t *owner = calloc(n, sizeof(*owner));

    if (!owner)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    ts_log(TS_INFO, "sdk", "tensor '%s': in %" PRIu64 "-byte partitions, as the shards have it "
           "(proposed %" PRIu64 ")", x->name, bytes, x->partition_bytes);
    free(x->owner);
    x->owner = owner;
    x->nparts = n;
    x->partition_bytes = req->tensor->partition_bytes = bytes;
    return TS_OK;
}

/* A shard's RegisterTensor allocates and initialises its partitions of x (and, with replicas,
 * the copies it follows): its deadline is the call deadline plus REGISTER_MS_PER_GIB for each
 * GiB of the tensor, so that a big tensor registers on a loaded machine. */
#define REGISTER_MS_PER_GIB 8000
static int register_ms(const struct tessera *t, const struct sdk_tensor *x)
{
    uint64_t ms = (uint64_t)ts_master_call_ms(t->master) +
                  x->numel * sizeof(float) * REGISTER_MS_PER_GIB / (1ull << 30);

    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static ts_status register_remote(struct tessera *t, struct sdk_tensor *x,
                                 Tessera__V1__RegisterTensorRequest *req, struct ts_err *err)
{
    uint64_t epoch = ts_cluster_epoch(t->cl);
    uint32_t seen = 0, first = 0;
    bool adopted = false;
    ts_status st = TS_OK;

    x->version = UINT64_MAX;
    req->tensor->placement_salt = propose_salt(t, x);
    for (size_t k = 0; !st && k < t->conns.nshards; k++) {
        size_t i = register_order(t, k);
        Tessera__V1__RegisterTensorResponse *r;
        st = ts_cluster_register_tensor(t->cl, t->conns.shards[i].id, req, register_ms(t, x), &r,
                                        err);
        /* Another shard's newer map dropped this one (the call refreshed it): retry. */
        if (st == TS_ENOTFOUND && ts_cluster_epoch(t->cl) != epoch) {
            err->code = st = TS_ESTALE;
            ts_err_prefix(err, "tensor '%s'", x->name);
        }
        if (st) {
            sdk_note_broken(t, i, st);
            break;
        }
        /* A size we only proposed, where the tensor has another: take it, and ask every
         * shard again with it, the first too (once: the first shard's answer is the same). */
        if (k == 0 && !adopted && req->tensor->partition_auto && r->partition_bytes &&
            r->partition_bytes != x->partition_bytes) {
            st = adopt_partition_bytes(x, req, r->partition_bytes, err);
            tessera__v1__register_tensor_response__free_unpacked(r, NULL);
            adopted = true;
            k = (size_t)-1;
            continue;
        }
        /* The first answer's salt is the tensor's: the others are asked with it, and must
         * have it, and its partition size. A shard with another got the tensor from a worker
         * under another map, while the map moved: retry, asking the first shard again under
         * the newest map. */
        if (k == 0) {
            x->salt = req->tensor->placement_salt = r->placement_salt;
            first = t->conns.shards[i].id;
        } else if (r->placement_salt != x->salt) {
            st = ts_err_set(err, TS_ESTALE, "tensor '%s': shard %u places it with placement "
                            "salt %u, shard %u with %u (registered under two maps at once): "
                            "retry", x->name, first, x->salt, t->conns.shards[i].id,
                            r->placement_salt);
        } else if (r->partition_bytes && r->partition_bytes != x->partition_bytes) {
            st = ts_err_set(err, TS_ESTALE, "tensor '%s': shard %u has it in %" PRIu64 "-byte "
                            "partitions, shard %u in %" PRIu64 " (registered under two maps at "
                            "once): retry", x->name, first, x->partition_bytes,
                            t->conns.shards[i].id, r->partition_bytes);
        }
        for (size_t j = 0; !st && j < r->n_partitions; j++)
            if (r->partitions[j] < x->nparts) {
                x->owner[r->partitions[j]] = (uint32_t)i;
                seen++;
            }
        if (r->n_partitions && r->version < x->version)
            x->version = r->version;
        tessera__v1__register_tensor_response__free_unpacked(r, NULL);
    }
    /* Every partition must have exactly one owner, the one our ring names under its salt. */
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint32_t id = 0, slot = 0;
        if (!(st = ts_cluster_locate(t->cl, x->name, x->salt, p, &id, err)) &&
            !(st = sdk_slot_of(t, id, &slot, err)) && slot != x->owner[p])
            st = ts_err_set(err, TS_ESTALE, "tensor '%s' partition %u: the shards disagree on "
                            "its owner (map changing?): retry", x->name, p);
    }
    if (!st && seen != x->nparts)
        st = ts_err_set(err, TS_ESTALE, "tensor '%s': %u of %u partitions placed: retry",
                        x->name, seen, x->nparts);
    return st;
}

/* register_remote, again under the newest map while the map moves under it (a shard died,
 * or joined the ring: the shards answer under different maps for a moment). A shard that
 * does not answer is reported and the registration waits for the map without it, as a step
 * does (sdk_failover): a shard may die while workers start. */
static ts_status register_settled(struct tessera *t, struct sdk_tensor *x,
                                  Tessera__V1__RegisterTensorRequest *req, struct ts_err *err)
{
    ts_status st;

    for (int k = 0; ; k++) {
        memset(x->owner, 0, x->nparts * sizeof(*x->owner));
        st = register_remote(t, x, req, err);
        if ((st != TS_ESTALE && st != TS_EUNAVAIL) || k == REGISTER_TRIES ||
            !sdk_can_fail_over(t))
            return st;
        if (st == TS_EUNAVAIL) {   /* a shard died: as when connecting */
            if ((st = sdk_start_over(t, st, err)))
                return st;
            continue;
        }
        ts_log(TS_INFO, "sdk", "%s; again under the newest map", err->msg);
        memset(err, 0, sizeof(*err));
        ts_sleep_ms(REGISTER_PAUSE_MS);
        if ((st = sdk_remap(t, err)))
            return st;
    }
}

static ts_status register_local(struct tessera *t, struct sdk_tensor *x,
                                const Tessera__V1__RegisterTensorRequest *req,
                                struct ts_err *err)
{
    ts_status st = TS_OK;

    x->parts = calloc(x->nparts, sizeof(*x->parts));
    if (!x->parts)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint64_t off, len;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        st = ts_part_create(&t->job, req->tensor_id, x->name, p, off, len,
                            req->tensor->initializer, req->tensor->seed, req->fan_in,
                            req->fan_out, NULL, &x->parts[p], err);
        if (!st)
            ts_part_set_sync(x->parts[p], x->sync_every);
    }
    return st;
}

/* The partition size the SDK proposes when the caller leaves it to us (docs/placement.md,
 * "Partition size"): 4 MiB while every shard is on this host (shm, or tcp to a loopback
 * address: larger partitions cost less there), else ts_partition_bytes_between_hosts. The
 * first registration's proposal becomes the tensor's; every later one adopts it. */
static uint64_t propose_partition_bytes(const struct tessera *t, uint64_t numel)
{
    for (size_t i = 0; i < t->conns.nshards; i++)
        if (!t->conns.shards[i].conn->local_in)
            return ts_partition_bytes_between_hosts(numel * sizeof(float),
                                                    (uint32_t)t->conns.nshards);
    return TS_PARTITION_BYTES_DEFAULT;
}

int tessera_register(tessera *t, const char *name, const uint64_t *shape, int ndim,
                     const char *init, uint64_t seed, uint64_t fan_in, uint64_t fan_out,
                     uint64_t partition_bytes, int *id, struct tessera_error *e)
{
    Tessera__V1__JobSpec job = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TensorSpec spec = TESSERA__V1__TENSOR_SPEC__INIT;
    Tessera__V1__RegisterTensorRequest req = TESSERA__V1__REGISTER_TENSOR_REQUEST__INIT;
    struct ts_err err = { 0 };
    struct sdk_tensor *x;
    ts_status st = TS_OK;

    if (t->ntensors == MAX_TENSORS || !name || strlen(name) >= sizeof(x->name) || ndim < 1 ||
        ndim > 8 || !shape) {
        ts_err_set(&err, TS_EINVAL, "tensor '%.64s': need a name under 129 bytes, 1..8 "
                   "dimensions, and at most %d tensors", name ? name : "", MAX_TENSORS);
        return sdk_fail(e, &err);
    }
    x = calloc(1, sizeof(*x));
    if (!x) {
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return sdk_fail(e, &err);
    }
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->grad = TS_REGION_NONE;
    x->numel = 1;
    for (int i = 0; i < ndim; i++)
        x->numel *= shape[i];
    x->partition_bytes = partition_bytes ? partition_bytes
                         : t->local ? TS_PARTITION_BYTES_DEFAULT
                                    : propose_partition_bytes(t, x->numel);
    x->nparts = ts_partition_count(x->numel, sizeof(float), x->partition_bytes);
    x->owner = calloc(x->nparts, sizeof(*x->owner));
    sdk_job_spec(t, &job);
    spec.name = x->name;
    spec.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    spec.shape = (uint64_t *)shape;
    spec.n_shape = (size_t)ndim;
    spec.initializer = (char *)(init ? init : "zeros");
    spec.seed = seed;
    spec.partition_bytes = x->partition_bytes;
    spec.partition_auto = partition_bytes == 0;
    req.job = &job;
    req.tensor = &spec;
    req.tensor_id = (uint32_t)t->ntensors;
    req.fan_in = fan_in;
    req.fan_out = fan_out;
    if (!x->owner)
        st = ts_err_set(&err, TS_ENOMEM, "out of memory");
    if (!st)
        st = sdk_tensor_options(t, x, &err);
    req.sync_every = x->sync_every;
    if (!st)
        st = t->local ? register_local(t, x, &req, &err) : register_settled(t, x, &req, &err);
    if (!st)
        st = sdk_tensor_buffers(t, x, &req, &err);
    if (!st && !t->local && !t->hello.done)
        st = sdk_hello_or_remap(t, &err);
    if (!st)
        st = sdk_map_params(t, x, (int)req.tensor_id, &err);
    if (st) {
        tensor_free(x);
        return sdk_fail(e, &err);
    }
    if (x->version == UINT64_MAX)
        x->version = 0;
    *id = t->ntensors;
    t->tensors[t->ntensors++] = x;
    return sdk_ok(e);
}

int tessera_check_data(tessera *t, const struct tessera_data_checksum *cs, size_t n,
                       char *reference, size_t reference_len, struct tessera_error *e)
{
    Tessera__V1__CheckDataRequest req = TESSERA__V1__CHECK_DATA_REQUEST__INIT;
    Tessera__V1__CheckDataResponse *r = NULL;
    Tessera__V1__DataChecksum *items, **ptrs;
    struct ts_err err = { 0 };
    struct sdk_master_wait w = sdk_master_wait();
    ts_status st;

    if (t->local) {
        if (reference && reference_len)
            snprintf(reference, reference_len, "local");
        return sdk_ok(e);
    }
    items = calloc(n + 1, sizeof(*items));
    ptrs = calloc(n + 1, sizeof(*ptrs));
    if (!items || !ptrs) {
        free(items);
        free(ptrs);
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return sdk_fail(e, &err);
    }
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__DataChecksum init = TESSERA__V1__DATA_CHECKSUM__INIT;
        items[i] = init;
        items[i].name = (char *)cs[i].name;
        items[i].file = (char *)(cs[i].file ? cs[i].file : "");
        items[i].sha256.data = (uint8_t *)cs[i].sha256;
        items[i].sha256.len = 32;
        ptrs[i] = &items[i];
    }
    req.job = t->job.id;
    req.rank = t->rank;
    req.checksums = ptrs;
    req.n_checksums = n;
    do {   /* a master that restarts meanwhile is waited for, as a claim waits */
        ts_err_clear(&err);
        st = ts_master_check_data(t->master, &req, &r, &err);
    } while (sdk_master_again(t, st, false, &w, "data check", &err));
    if (!st && reference && reference_len)
        snprintf(reference, reference_len, "%s", r->reference);
    if (r)
        tessera__v1__check_data_response__free_unpacked(r, NULL);
    free(items);
    free(ptrs);
    return st ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_verify_local(tessera *t, float *const *params, uint64_t version,
                         struct tessera_local_audit *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct tessera_error pe = { 0 };

    memset(out, 0, sizeof(*out));
    out->first_tensor = -1;
    for (int id = 0; id < t->ntensors; id++) {
        uint64_t n = t->tensors[id]->numel;
        float *shard = malloc(n * sizeof(float) + 1);
        struct ts_verify_bits r;

        if (!shard) {
            ts_err_set(&err, TS_ENOMEM, "out of memory");
            return sdk_fail(e, &err);
        }
        if (tessera_pull(t, id, version, shard, &pe)) {
            free(shard);
            *e = pe;
            return pe.code;
        }
        if (ts_verify_bits_compare(params[id], shard, n, NULL, &r, NULL, &err)) {
            free(shard);
            return sdk_fail(e, &err);
        }
        out->elements += n;
        out->differing += r.ndiff;
        out->max_ulp = r.max_ulp > out->max_ulp ? r.max_ulp : out->max_ulp;
        if (r.has_diff && out->first_tensor < 0) {
            out->first_tensor = id;
            out->first_index = r.first_index;
            out->first_local = (float)r.first_a;
            out->first_shard = (float)r.first_b;
        }
        free(shard);
    }
    return sdk_ok(e);
}

int tessera_buffers(tessera *t, int id, const float **params, void **grad,
                    struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct sdk_tensor *x;
    ts_status st;

    if (id < 0 || id >= t->ntensors) {
        ts_err_set(&err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                   t->ntensors);
        return sdk_fail(e, &err);
    }
    x = t->tensors[id];
    if (params && !x->view && sdk_view_alloc(x, &err))
        return sdk_fail(e, &err);
    /* A shard that died as the region was shared: connecting again shares it again. */
    if (grad && !x->grad.base && (st = sdk_grad_alloc(t, x, id, &err)) &&
        (!x->grad.base || sdk_start_over(t, st, &err)))
        return sdk_fail(e, &err);
    if (params)
        *params = x->view;
    if (grad)
        *grad = x->grad.base;
    return sdk_ok(e);
}

uint64_t tessera_version(const tessera *t, int id)
{
    return id >= 0 && id < t->ntensors ? t->tensors[id]->version : 0;
}

int tessera_to_fixed(const float *g, size_t n, int64_t *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_from_f32(g, n, out, &err) ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_fixed_add(int64_t *acc, const int64_t *x, size_t n, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_add(acc, x, n, &err) ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_fixed_add_f32(int64_t *acc, const float *g, size_t n, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_add_f32(acc, g, n, &err) ? sdk_fail(e, &err) : sdk_ok(e);
}
