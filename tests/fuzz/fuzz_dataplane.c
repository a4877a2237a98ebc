/* fuzz_dataplane.c - libFuzzer target: the shard's data-plane frame handlers
 * (services/shard/dataplane.c, dp_auth.c, dp_access.c, dp_chain.c, dp_guard.c, dp_pullc.c,
 * slots.c), with a real registry of partitions behind them.
 *
 * A worker's frames reach the shard after frame.c took them off the wire; fuzz_frame covers
 * that half. This covers the other: what the shard does with a well-framed request from a
 * peer it has not vetted. The registry (services/shard/params.c) holds five jobs, bsp, exact
 * (bsp, fixed point, momentum), ssp (elastic), reduce (exact) and shared (bsp), each with a
 * tensor of three partitions it heads and one of two partitions it follows (registered under
 * a second map, in which another shard heads every partition: IMAGE frames load them), and
 * "shared" a third large enough for a shared region (MAP, SHARE, pushes and pulls in place).
 * Every run finds them as registered: a job that a connection named is released after the
 * run and registered again. Who may push which slot, and each job's key, come from a fetch
 * function here (the master's JobAccess): of the three slots of each job worker 101 owns 0
 * and 2, 102 owns 1, and 103 owned slot 0 before.
 *
 * The input's first byte picks the connections' kind (bit 0: host-local like shm, with
 * unhashed payloads and descriptors passed; else like tcp, hashed), whether the shard
 * requires the handshake (bit 1: mutual TLS), and whether the peers hang up at the end
 * (bit 2; else the shard stops). Then records, each a frame on one of three connections:
 *   type, ctl, flags (u32), tensor (u16), partition (u16), step (u32), rank, encoding, len
 *   (u16), then len payload bytes (fewer if the input ends).
 * ctl bits 0-1: the connection (3 is 0 again); bit 2: make the payload right for the frame
 * (a HELLO names job payload[0] % 6, the sixth unknown, with a nonce if it asks for the
 * handshake; an AUTH carries the proof for the ACK the shard sent; a PUSH or SEED is sized
 * for its partition from the payload's bytes; an IMAGE is the partition's own image with the
 * frame's step as version and the payload XORed into its values); bit 3: a descriptor goes
 * beside a SHARE, bits 4-5 its kind (a memfd sealed by its creator against writes, one
 * sealed against resizing only, one not sealed, a pipe), bits 6-7 its size (0, 4 KiB,
 * 64 KiB, 128 KiB). A connection that the shard ends opens afresh at its next frame.
 *
 * Each frame goes through dp_conn_serve, as conn_main hands it over; the connection is a
 * transport here that keeps what the shard sends. Checked: what the shard sends decodes as
 * a frame, an ERROR carries a status and a message, a PARAMS answering a plain pull holds the
 * partition's values; a PUSH, SEED or IMAGE answered with an ERROR left its partition as it
 * was (values, version, the step's pushes and sum, the slots' marks); the refusal counters
 * never go down. Waits: a pull for a version that is not there is cancelled at once (the
 * connection ends, as it would after a shard stops), and the second look at the owners of a
 * slot, which waits ACCESS_REFRESH_MS for a fresh table, is let through within a few hundred
 * microseconds by a helper thread that marks the tables stale (prod_main).
 * $TESSERA_FUZZ_TRACE set: each frame and what the shard answered on stderr.
 * Seeds: tests/fuzz/corpus-dataplane (written by fuzz_seeds). */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <xxhash.h>

#include "dataplane_facts.h"
#include "dp_internal.h"
#include "dp_prefetch.h"
#include "fake_master.h"
#include "ps/part_internal.h"
#include "shard.h"
#include "transport/region.h"
#include "util/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* A run frees the jobs it touched and registers them again: with ASan's default quarantine
 * (256 MiB) every run faults in fresh pages for them, a third of its time. 16 MiB still
 * holds the frees of many runs. $ASAN_OPTIONS overrides it. */
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16";
}

#define NCONN 3
#define NJOBS DP_FACTS_JOBS

static struct shard sh;
static struct ts_cluster *map_a, *map_b;   /* heads everything; follows everything */
static uint32_t follow_salt;
static Tessera__V1__RegisterTensorRequest *regs[32];
static size_t nregs;
static uint8_t access_pb[NJOBS][256];
static size_t access_len[NJOBS];
static atomic_uint serving;        /* the frame being served (0: none), counted from 1 */
static bool trace;                 /* $TESSERA_FUZZ_TRACE: each frame and its answer on stderr */

/* ---- a transport that keeps what the shard sends ---- */

struct fconn {
    struct ts_conn base;
    bool shut;
    int fd;                        /* handed to the next recv_fd (-1: none) */
    unsigned sent;                 /* frames sent */
    struct ts_frame_hdr last;      /* the last one's header */
    uint64_t body;                 /* its payload bytes so far */
    uint8_t ack[TS_DP_ACK_LEN];    /* the payload of an ACK that began a handshake */
    bool has_ack;
    char why[160];                 /* the last ERROR's message, for the trace */
};

static ts_status f_send(struct ts_conn *base, const void *head, size_t hlen, const void *body,
                        size_t blen, struct ts_err *e)
{
    struct fconn *c = (struct fconn *)base;

    if (c->shut)
        return ts_err_set(e, TS_EUNAVAIL, "fuzz conn: shut");
    if (head) {
        struct ts_err de = { 0 };
        if (hlen < (size_t)base->tx_pad + TS_FRAME_HDR_LEN ||
            ts_frame_decode((const uint8_t *)head + base->tx_pad, &c->last, &de))
            abort(); /* the shard sends only frames a worker can read */
        c->sent++;
        c->body = 0;
        if (c->last.type == TS_FRAME_ERROR && (!c->last.flags || !c->last.len))
            abort(); /* an ERROR says what and why */
        if (c->last.type == TS_FRAME_ERROR)
            snprintf(c->why, sizeof(c->why), "%.*s", (int)(blen < 159 ? blen : 159),
                     (const char *)body);
        if (c->last.type == TS_FRAME_ACK && (c->last.flags & TS_ACK_AUTH) &&
            blen == TS_DP_ACK_LEN) {
            memcpy(c->ack, body, TS_DP_ACK_LEN);
            c->has_ack = true;
        }
    }
    c->body += blen;
    return TS_OK;
}

static ts_status f_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    return ts_err_set(e, TS_EUNAVAIL, "fuzz conn: the peer sends nothing more");
}

static ts_status f_send_fd(struct ts_conn *base, int fd, struct ts_err *e)
{
    return ((struct fconn *)base)->shut ? ts_err_set(e, TS_EUNAVAIL, "fuzz conn: shut") : TS_OK;
}

static ts_status f_recv_fd(struct ts_conn *base, int ms, int *fd, struct ts_err *e)
{
    struct fconn *c = (struct fconn *)base;

    if (c->fd < 0)
        return ts_err_set(e, TS_ETIMEDOUT, "fuzz conn: no descriptor came");
    *fd = c->fd;
    c->fd = -1;
    return TS_OK;
}

static void f_shutdown(struct ts_conn *base)
{
    ((struct fconn *)base)->shut = true;
}

static void f_nothing(struct ts_conn *base)
{
}

static void f_close(struct ts_conn *base)
{
    struct fconn *c = (struct fconn *)base;

    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static const struct ts_transport_ops tcp_like = {
    .name = "fuzztcp", .send = f_send, .recv = f_recv, .interrupt = f_nothing,
    .shutdown = f_shutdown, .close = f_close,
};
static const struct ts_transport_ops shm_like = {
    .name = "fuzzshm", .send = f_send, .recv = f_recv, .send_fd = f_send_fd,
    .recv_fd = f_recv_fd, .interrupt = f_nothing, .shutdown = f_shutdown, .close = f_close,
};

/* ---- the registry and the master's word ---- */

static void noop_remap(void *ctx)
{
}

static ts_status fetch(void *ctx, const char *job, Tessera__V1__JobAccessResponse **out,
                       struct ts_err *err)
{
    for (size_t j = 0; j < NJOBS; j++)
        if (!strcmp(job, dp_facts_jobs[j].id)) {
            *out = tessera__v1__job_access_response__unpack(NULL, access_len[j], access_pb[j]);
            if (!*out)
                abort();
            return TS_OK;
        }
    return ts_err_set(err, TS_ENOTFOUND, "job: '%s' is not running", job);
}

/* While a frame is served, a second look at a slot's owners (dp_access.c) waits for the table
 * to be ACCESS_REFRESH_MS old; marked stale, it is fetched again at once. The answer is the
 * same: only the wait goes. A frame still served at two looks in a row is one that waits
 * (the others take microseconds); the flag and a count are all the runs pay. */
static void *prod_main(void *arg)
{
    unsigned seen = 0;

    for (;;) {
        unsigned now = atomic_load(&serving);
        if (now && now == seen) {
            for (size_t j = 0; j < NJOBS; j++)
                dp_access_roster(sh.dp.access, dp_facts_jobs[j].id, 1);
            dataplane_set_access(&sh.dp, fetch, NULL);   /* wakes a waiter */
        }
        seen = now;
        usleep(100);
    }
    return NULL;
}

static Tessera__V1__RegisterTensorRequest *reg_new(const struct dp_facts_job *j,
                                                    const struct dp_facts_tensor *t)
{
    Tessera__V1__RegisterTensorRequest *r = calloc(1, sizeof(*r));
    Tessera__V1__JobSpec *js = calloc(1, sizeof(*js));
    Tessera__V1__TensorSpec *ts = calloc(1, sizeof(*ts));
    uint64_t *shape = calloc(1, sizeof(*shape));

    if (!r || !js || !ts || !shape)
        abort();
    tessera__v1__register_tensor_request__init(r);
    tessera__v1__job_spec__init(js);
    tessera__v1__tensor_spec__init(ts);
    js->id = (char *)j->id;
    js->workers = DP_FACTS_WORKERS;
    js->exact = j->exact;
    js->optimizer = (char *)j->optimizer;
    js->batch = 4;
    js->mode = (Tessera__V1__TrainMode)j->mode;
    js->staleness = j->staleness;
    *shape = t->numel;
    ts->name = (char *)t->name;
    ts->dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ts->n_shape = 1;
    ts->shape = shape;
    ts->initializer = (char *)t->init;
    ts->seed = 7;
    ts->partition_bytes = t->partition_bytes;
    ts->placement_salt = t->follow ? follow_salt : 0;
    r->job = js;
    r->tensor = ts;
    r->tensor_id = t->id;
    r->map_epoch = t->follow ? DP_FACTS_EPOCH_B : DP_FACTS_EPOCH_A;
    return r;
}

/* A salt under which the other shard heads every partition of the followed tensor in map B,
 * so that this shard follows them all and sends no image on. */
static uint32_t find_follow_salt(void)
{
    const struct dp_facts_tensor *t = &dp_facts_tensors[DP_FACTS_FOLLOW];
    uint32_t n = ts_partition_count(t->numel, sizeof(float), t->partition_bytes);

    for (uint32_t salt = 1; salt < 100000; salt++) {
        bool all = true;
        for (uint32_t p = 0; p < n && all; p++) {
            uint32_t chain[TS_MAX_CHAIN];
            all = ts_cluster_chain(map_b, t->name, salt, p, chain, NULL) == 2 &&
                  chain[0] == DP_FACTS_OTHER && chain[1] == DP_FACTS_ME;
        }
        if (all)
            return salt;
    }
    abort();
}

static void pack_access(void)
{
    static const uint8_t key[TS_DP_KEY_LEN] = DP_FACTS_JOB_KEY;
    static uint32_t owners[DP_FACTS_WORKERS] = { DP_FACTS_WORKER0, DP_FACTS_WORKER0 + 1,
                                                 DP_FACTS_WORKER0 };
    static uint32_t past[DP_FACTS_WORKERS * 3] = { DP_FACTS_WORKER0 + 2 };

    for (size_t j = 0; j < NJOBS; j++) {
        Tessera__V1__JobAccessResponse r = TESSERA__V1__JOB_ACCESS_RESPONSE__INIT;
        r.n_owners = DP_FACTS_WORKERS;
        r.owners = owners;
        r.n_past_owners = DP_FACTS_WORKERS * 3;
        r.past_owners = past;
        r.elastic = dp_facts_jobs[j].elastic;
        r.data_key = (ProtobufCBinaryData){ sizeof(key), (uint8_t *)key };
        if (tessera__v1__job_access_response__get_packed_size(&r) > sizeof(access_pb[j]))
            abort();
        access_len[j] = tessera__v1__job_access_response__pack(&r, access_pb[j]);
    }
}

/* Registers job j's tensors (all jobs: j < 0), as its workers would. */
static void job_register(int j)
{
    struct ts_err err = { 0 };

    for (size_t i = 0; i < nregs; i++) {
        uint32_t *owned, nparts, salt;
        uint64_t version, pbytes;
        size_t n;
        struct ts_cluster *cl = regs[i]->map_epoch == DP_FACTS_EPOCH_B ? map_b : map_a;

        if (j >= 0 && strcmp(regs[i]->job->id, dp_facts_jobs[j].id))
            continue;
        if (shard_params_register(&sh.params, cl, DP_FACTS_ME, regs[i], &owned, &n, &nparts,
                                  &version, &salt, &pbytes, &err)) {
            fprintf(stderr, "fuzz_dataplane: registering: %s\n", err.msg);
            abort();
        }
        free(owned);
    }
}

/* Job j as a run found it: released (its partitions freed, as ReleaseJob does) and
 * registered again. A run reaches a job only through a connection that named it. */
static void job_renew(int j)
{
    struct ts_err err = { 0 };
    uint64_t bytes;
    bool held;

    if (shard_params_release(&sh.params, dp_facts_jobs[j].id, &held, &bytes, &err) || !held) {
        fprintf(stderr, "fuzz_dataplane: releasing %s: %s\n", dp_facts_jobs[j].id, err.msg);
        abort();
    }
    job_register(j);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const uint32_t a[] = { DP_FACTS_ME }, b[] = { DP_FACTS_ME, DP_FACTS_OTHER };
    struct fake_master *fa, *fb;
    char addr_a[64], addr_b[64];
    struct ts_err err = { 0 };
    pthread_t prod;

    ts_log_set_level(TS_ERROR);   /* every refusal logs a warning */
    trace = getenv("TESSERA_FUZZ_TRACE") != NULL;
    if (fake_master_start(DP_FACTS_EPOCH_A, a, 1, 1, &fa, addr_a, &err) ||
        fake_master_start(DP_FACTS_EPOCH_B, b, 2, 2, &fb, addr_b, &err) ||
        ts_cluster_open(addr_a, &map_a, &err) || ts_cluster_open(addr_b, &map_b, &err)) {
        fprintf(stderr, "fuzz_dataplane: %s\n", err.msg);
        abort();
    }
    follow_salt = find_follow_salt();
    for (size_t j = 0; j < NJOBS; j++)
        for (size_t t = 0; t < DP_FACTS_TENSORS; t++)
            if (!dp_facts_tensors[t].shared_only || j == DP_FACTS_SHARED)
                regs[nregs++] = reg_new(&dp_facts_jobs[j], &dp_facts_tensors[t]);
    pack_access();
    shard_metrics_init(&sh);
    /* The data plane as dataplane_start leaves it, without its listeners. */
    sh.dp.params = &sh.params;
    sh.dp.max_conns = DP_DEFAULT_MAX_CONNS;
    if (dp_access_create(&sh.dp.access, &err) || dp_prefetch_create(&sh.dp.prefetch, &err))
        abort();
    pthread_mutex_init(&sh.dp.mu, NULL);
    pthread_mutex_init(&sh.dp.sum_mu, NULL);
    pthread_mutex_init(&sh.dp.id_mu, NULL);
    dataplane_set_access(&sh.dp, fetch, NULL);
    atomic_store(&sh.dp.self, DP_FACTS_ME);
    shard_params_init(&sh.params);
    sh.params.on_release = dataplane_forget;
    sh.params.release_ctx = &sh.dp;
    job_register(-1);
    sh.dp.remap = noop_remap;
    atomic_store(&sh.dp.cluster, map_a);
    if (pthread_create(&prod, NULL, prod_main, NULL))
        abort();
    pthread_detach(prod);
    return 0;
}

/* ---- one run ---- */

struct rec {
    uint8_t type, ctl;
    uint32_t flags;
    uint16_t tensor, partition;
    uint32_t step;
    uint8_t rank, enc;
    uint16_t len;
};
#define REC_HDR 18

struct peer {
    struct dp_conn *dc;
    struct fconn *c;
    struct ts_dp_hs hs;            /* its side of a handshake it began */
    char job[TS_JOB_ID_MAX + 1];
    bool chain;
};

static struct {
    bool local;
    struct peer peers[NCONN];
    unsigned opened;
    uint64_t refused[DP_REFUSED_N];
    bool touched[NJOBS];           /* named by a connection: renewed after the run */
} run;
static unsigned frames;            /* served so far, for prod_main */

static uint32_t get_le(const uint8_t *p, int n)
{
    uint32_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void peer_open(struct peer *pr)
{
    struct fconn *c = calloc(1, sizeof(*c));
    struct dp_conn *dc = calloc(1, sizeof(*dc));

    if (!c || !dc)
        abort();
    c->fd = -1;
    c->base.ops = run.local ? &shm_like : &tcp_like;
    c->base.local_in = c->base.local_out = run.local;
    snprintf(c->base.peer, sizeof(c->base.peer), "fuzz:10.0.0.%u:%u", run.opened % 4,
             run.opened);
    run.opened++;
    dc->dp = &sh.dp;
    dc->c = &c->base;
    atomic_store(&dc->cancel, DP_CANCEL_END);   /* a pull never waits (see the header) */
    pthread_mutex_lock(&sh.dp.mu);
    if (!dp_guard_admit(&sh.dp, dc)) {
        pthread_mutex_unlock(&sh.dp.mu);
        ts_tp_close(&c->base);
        free(dc);
        return;
    }
    dc->next = sh.dp.conns;
    sh.dp.conns = dc;
    pthread_mutex_unlock(&sh.dp.mu);
    *pr = (struct peer){ .dc = dc, .c = c };
}

static void peer_close(struct peer *pr, bool hung_up)
{
    struct dp_conn **pp;

    if (!pr->dc)
        return;
    dp_conn_end(pr->dc, hung_up);
    pthread_mutex_lock(&sh.dp.mu);
    for (pp = &sh.dp.conns; *pp != pr->dc; pp = &(*pp)->next)
        ;
    *pp = pr->dc->next;
    pthread_mutex_unlock(&sh.dp.mu);
    ts_tp_close(pr->dc->c);
    free(pr->dc);
    pr->dc = NULL;
    pr->c = NULL;
}

/* What a partition holds, for "a refused frame changes nothing": its image (values, state,
 * version, overflow flags, clocks), the step's pushes so far with their sum, and each slot's
 * last counted push. An exact sum is compared by value: a refusal may change the form it is
 * kept in (sum.c), never what it adds up to. */
static uint64_t part_digest(struct ts_part *p)
{
    uint64_t workers = p->job->workers, d = 0;

#define MIX(ptr, n) (d = XXH3_64bits_withSeed((ptr), (n), d))
    pthread_mutex_lock(&p->mu);
    MIX(&p->version, sizeof(p->version));
    MIX(&p->skipped, sizeof(p->skipped));
    MIX(p->value, p->len * sizeof(float));
    MIX(p->overflow, workers);
    MIX(p->pushed, workers);
    MIX(&p->npushed, sizeof(p->npushed));
    MIX(p->marks, workers * sizeof(*p->marks));
    if (p->clock)
        MIX(p->clock, workers * sizeof(*p->clock));
    if (p->npushed && p->acc_fixed) {   /* the sum's value, whatever form it is kept in */
        int64_t *sum = malloc(p->len * sizeof(int64_t));
        if (!sum)
            abort();
        memcpy(sum, p->acc_fixed, p->len * sizeof(int64_t));
        if (p->acc_form == TS_ACC_F64)
            ts_fixed_f64_to_i64(sum, p->len);
        else if (p->acc_form == TS_ACC_HELD &&
                 ts_fixed_from_f32((const float *)(const void *)p->acc_fixed, p->len, sum,
                                   NULL))
            abort(); /* held floats were checked when they came */
        MIX(sum, p->len * sizeof(int64_t));
        free(sum);
    }
    if (p->npushed && p->acc_f32)
        MIX(p->acc_f32, p->len * sizeof(float));
    pthread_mutex_unlock(&p->mu);
#undef MIX
    return d;
}

/* A descriptor for a SHARE, as ctl says (see the header). */
static int make_fd(uint8_t ctl)
{
    static const size_t sizes[4] = { 0, 4096, 65536, 131072 };
    unsigned kind = (ctl >> 4) & 3;
    size_t size = sizes[(ctl >> 6) & 3];
    struct ts_region r;
    int fd, p[2];

    if (kind == 0 && size) {   /* as a worker makes its gradient region */
        if (ts_region_create("fuzz-grad", size, TS_REGION_OWNED, &r, NULL))
            abort();
        memset(r.base, ctl, r.size);
        fd = r.fd;
        r.fd = -1;
        ts_region_free(&r);
        return fd;
    }
    if (kind == 3) {
        if (pipe2(p, O_CLOEXEC))
            abort();
        close(p[1]);
        return p[0];
    }
    if ((fd = memfd_create("fuzz-grad", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0 ||
        ftruncate(fd, (off_t)size))
        abort();
    if (kind != 2 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW))
        abort();
    return fd;
}

/* The payload of a frame made right for it (ctl bit 2; see the header), into *out. */
static size_t synth(struct peer *pr, struct ts_frame_hdr *h, const uint8_t *in, size_t n,
                    uint8_t **out)
{
    struct ts_part *p = NULL;
    size_t len = 0, elem;
    uint8_t *b;

    switch (h->type) {
    case TS_FRAME_HELLO: {
        const char *id = dp_facts_job_name(n ? in[0] : 0);
        len = strlen(id) + (h->flags & TS_HELLO_AUTH ? TS_DP_NONCE_LEN : 0);
        if (!(b = calloc(1, len)))
            abort();
        memcpy(b, id, strlen(id));
        for (size_t i = strlen(id); i < len; i++)
            b[i] = i - strlen(id) + 1 < n ? in[i - strlen(id) + 1] : 0;
        if (h->flags & TS_HELLO_AUTH) {   /* what this peer's AUTH will need */
            memset(&pr->hs, 0, sizeof(pr->hs));
            memcpy(pr->hs.nc, b + strlen(id), TS_DP_NONCE_LEN);
            snprintf(pr->job, sizeof(pr->job), "%s", id);
            pr->hs.job = pr->job;
            pr->hs.rank = h->rank;
            pr->chain = h->flags & TS_HELLO_CHAIN;
            pr->hs.member = pr->chain ? 0 : h->tensor;
        }
        *out = b;
        return len;
    }
    case TS_FRAME_AUTH: {
        static const uint8_t job_key[TS_DP_KEY_LEN] = DP_FACTS_JOB_KEY;
        if (!pr->c->has_ack || !pr->hs.job)
            break;
        if (pr->chain)
            ts_dp_chain_key(job_key, pr->hs.key);
        else
            ts_dp_member_key(job_key, pr->hs.member, pr->hs.key);
        memcpy(pr->hs.ns, pr->c->ack, TS_DP_NONCE_LEN);
        if (!(b = malloc(TS_DP_TAG_LEN)))
            abort();
        ts_dp_proof(&pr->hs, true, b);
        *out = b;
        return TS_DP_TAG_LEN;
    }
    case TS_FRAME_PUSH:
    case TS_FRAME_SEED:
    case TS_FRAME_IMAGE:
        p = shard_params_find(&sh.params, pr->dc->job, h->tensor, h->partition, NULL, NULL);
        break;
    default:
        break;
    }
    if (!p) {   /* nothing to make: the payload as it came */
        if (!(b = malloc(n ? n : 1)))
            abort();
        memcpy(b, in, n);
        *out = b;
        return n;
    }
    if (h->type == TS_FRAME_IMAGE) {
        uint64_t version = h->step;
        len = ts_part_image_bytes(p);
        if (!(b = malloc(len)) || ts_part_image(p, b, len, &version, NULL))
            abort();
        memcpy(b + 48, &version, sizeof(version));   /* image_hdr.version (replica.c) */
        for (size_t i = 0; i < n && TS_PART_IMAGE_HDR + i < len; i++)
            b[TS_PART_IMAGE_HDR + i] ^= in[i];
    } else {
        size_t mask = h->type == TS_FRAME_PUSH && (h->flags & TS_PUSH_SLOTS) ? TS_PUSH_SLOTS_LEN
                                                                            : 0;
        elem = h->type == TS_FRAME_PUSH && h->encoding == TS_ENC_FIXED ? 8 : 4;
        len = mask + ts_part_len(p) * elem;
        if (!(b = calloc(1, len)))
            abort();
        for (size_t i = 0; n && i < len; i++)
            b[i] = in[i % n];
    }
    shard_params_put(p);
    *out = b;
    return len;
}

/* Serves one record's frame on its connection; false once the input is used up. */
static bool one_frame(const uint8_t **data, size_t *size)
{
    static _Alignas(8) uint8_t buf[DP_UNTRUSTED_FRAME];
    const uint8_t *d = *data;
    struct rec r;
    struct ts_frame_hdr h = { 0 };
    struct peer *pr;
    struct ts_part *p = NULL;
    uint64_t before = 0, now[DP_REFUSED_N];
    unsigned sent;
    uint8_t *payload;
    size_t n;
    bool hung_up = false, ok;

    if (*size < REC_HDR)
        return false;
    r = (struct rec){ d[0], d[1], get_le(d + 2, 4), (uint16_t)get_le(d + 6, 2),
                      (uint16_t)get_le(d + 8, 2), get_le(d + 10, 4), d[14], d[15],
                      (uint16_t)get_le(d + 16, 2) };
    n = r.len < *size - REC_HDR ? r.len : *size - REC_HDR;
    *data += REC_HDR + n;
    *size -= REC_HDR + n;
    pr = &run.peers[(r.ctl & 3) % NCONN];
    if (!pr->dc)
        peer_open(pr);
    if (!pr->dc)
        return true;   /* refused at the door (dp_guard_admit counted it) */
    h = (struct ts_frame_hdr){ .type = (uint16_t)(1 + r.type % TS_FRAME_TYPE_MAX),
                               .tensor = r.tensor, .partition = r.partition, .step = r.step,
                               .rank = r.rank, .encoding = r.enc, .flags = r.flags };
    if (r.ctl & 4) {
        n = synth(pr, &h, d + REC_HDR, n, &payload);
    } else {
        if (!(payload = malloc(n ? n : 1)))   /* exactly n bytes, so that ASan sees overreads */
            abort();
        memcpy(payload, d + REC_HDR, n);
    }
    h.len = n;
    h.unhashed = run.local;   /* frame.c lets a host-local peer skip the hash */
    h.checksum = run.local ? 0 : ts_frame_hash(payload, n);
    if (n > dp_guard_cap(pr->dc)) {   /* frame.c refuses it on its header: the end */
        free(payload);
        peer_close(pr, false);
        return true;
    }
    if (h.type == TS_FRAME_SHARE && (r.ctl & 8) && run.local)
        pr->c->fd = make_fd(r.ctl);
    if ((h.type == TS_FRAME_PUSH || h.type == TS_FRAME_SEED || h.type == TS_FRAME_IMAGE) &&
        (p = shard_params_find(&sh.params, pr->dc->job, h.tensor, h.partition, NULL, NULL)))
        before = part_digest(p);
    sent = pr->c->sent;
    atomic_store(&serving, ++frames ? frames : ++frames);
    ok = dp_conn_serve(pr->dc, &h, payload, buf, sizeof(buf), &hung_up);
    atomic_store(&serving, 0);
    if (trace)
        fprintf(stderr, "conn %d: type %u tensor %u partition %u step %u rank %u flags %#x "
                "len %zu -> %s %u%s%s\n", (int)(pr - run.peers), h.type, h.tensor, h.partition,
                (unsigned)h.step, h.rank, h.flags, n, ok ? "served" : "ended",
                pr->c->sent > sent ? pr->c->last.type : 0,
                pr->c->sent > sent && pr->c->last.type == TS_FRAME_ERROR ? ": " : "",
                pr->c->sent > sent && pr->c->last.type == TS_FRAME_ERROR ? pr->c->why : "");
    if (p && pr->c->sent > sent && pr->c->last.type == TS_FRAME_ERROR &&
        part_digest(p) != before)
        abort(); /* a refused push, seed or image changed its partition */
    shard_params_put(p);
    if (ok && h.type == TS_FRAME_PULL && pr->c->sent > sent &&
        pr->c->last.type == TS_FRAME_PARAMS && !(h.flags & (TS_PULL_CODED | TS_PULL_REGION)) &&
        (p = shard_params_find(&sh.params, pr->dc->job, h.tensor, h.partition, NULL, NULL))) {
        if (pr->c->last.len != ts_part_len(p) * sizeof(float) || pr->c->body != pr->c->last.len)
            abort(); /* a pull's answer is the partition's values */
        shard_params_put(p);
    }
    dataplane_refusals(&sh.dp, now);
    for (int i = 0; i < DP_REFUSED_N; i++) {
        if (now[i] < run.refused[i])
            abort(); /* refusals are counted, never taken back */
        run.refused[i] = now[i];
    }
    if (pr->c->fd >= 0) {   /* a descriptor the shard did not take */
        close(pr->c->fd);
        pr->c->fd = -1;
    }
    free(payload);
    for (int j = 0; pr->dc && pr->dc->job && j < NJOBS; j++)
        run.touched[j] |= !strcmp(pr->dc->job->job.id, dp_facts_jobs[j].id);
    if (!ok)
        peer_close(pr, hung_up);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool hang_up;

    if (size < 1)
        return 0;
    memset(&run, 0, sizeof(run));
    run.local = data[0] & 1;
    sh.dp.require_auth = (data[0] & 2) != 0;
    hang_up = (data[0] & 4) != 0;
    dataplane_refusals(&sh.dp, run.refused);
    data++, size--;
    while (one_frame(&data, &size))
        ;
    for (int i = 0; i < NCONN; i++)
        peer_close(&run.peers[i], hang_up);
    for (int j = 0; j < NJOBS; j++) {   /* the next run finds what this one did */
        dp_access_forget(sh.dp.access, dp_facts_jobs[j].id);
        if (run.touched[j])
            job_renew(j);
    }
    return 0;
}
