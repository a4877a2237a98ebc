/* test_dataplane.c - a worker that sends a wrong-shape tensor or a corrupted frame, or an
 * image that does not come from the shard before in the chain, gets a clear error, and the
 * shard's state is unchanged. Real master and shard processes; the bad frames
 * come from a raw transport connection (tcp, or shm) wrapped in lib/transport's fault layer.
 * Shared regions (tessera_buffers): the same bits as copies, really mapped on shm, and every
 * misuse of SHARE (a worker's gradients, a shard's values) / MAP / region pushes and pulls
 * refused with nothing changed; so are SEEDs of the wrong job or length. Compressed pulls
 * (docs/compression.md, "Pulls"): a delta only for the token of the mirror's copy, in full
 * otherwise; malformed ones refused by name, the connection still usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "codec/codec.h"
#include "ps/part.h"
#include "harness.h"
#include "tessera.h"
#include "transport/fault.h"
#include "transport/frame.h"
#include "transport/region.h"
#include "util/log.h"
#include "util/proc.h"

#define N 1000

static const char *bin, *master;
static pid_t shard_pid;

static int setup(void **state)
{
    if (!(master = harness_master(bin)) || (shard_pid = harness_shard(bin, NULL, NULL)) < 0 ||
        harness_wait_shards(1))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    harness_stop();
    return 0;
}

/* A raw data-plane connection to the only shard over `transport`, job named, as the worker
 * t (whose slots alone it may push). */
static struct ts_conn *raw_connect(const char *transport, const char *job, const tessera *t)
{
    struct ts_conn *c = harness_connect(transport, job, 0, tessera_worker_id(t));

    assert_non_null(c);
    return c;
}

/* The only shard's ShardStatus; the caller frees it
 * (tessera__v1__shard_status_response__free_unpacked). */
static Tessera__V1__ShardStatusResponse *shard_status(void)
{
    Tessera__V1__ShardStatusResponse *r;
    struct ts_cluster *cl;

    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    assert_int_equal(ts_cluster_shard_status(cl, 1, &r, NULL), TS_OK);
    ts_cluster_close(cl);
    return r;
}

/* The shard's count of refused data-plane frames. */
static uint64_t frames_refused(void)
{
    Tessera__V1__ShardStatusResponse *r = shard_status();
    uint64_t n = r->frames_refused;

    tessera__v1__shard_status_response__free_unpacked(r, NULL);
    return n;
}

/* How many times the shard refused for `reason` (ShardStatus.refusals). */
static uint64_t refusals(const char *reason)
{
    Tessera__V1__ShardStatusResponse *r = shard_status();
    uint64_t n = 0;

    for (size_t i = 0; i < r->n_refusals; i++)
        if (!strcmp(r->refusals[i]->reason, reason))
            n = r->refusals[i]->count;
    tessera__v1__shard_status_response__free_unpacked(r, NULL);
    return n;
}

/* Expects an ERROR frame whose message contains `says`; returns its status. */
static unsigned expect_error(struct ts_conn *c, const char *says)
{
    struct ts_frame_hdr h;
    char msg[512];

    assert_int_equal(ts_frame_recv(c, &h, msg, sizeof(msg) - 1, 5000, NULL), TS_OK);
    assert_int_equal(h.type, TS_FRAME_ERROR);
    msg[h.len] = '\0';
    if (!strstr(msg, says))
        fail_msg("error '%s' does not say '%s'", msg, says);
    return h.flags;
}

static void bad_frames_change_nothing(const char *transport, const char *job)
{
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = transport };
    struct tessera_error e;
    tessera *t;
    uint64_t shape[1] = { N };
    static float before[N], after[N], g[N];
    static int64_t fixed[N];
    struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = 0, .partition = 0,
                                 .step = 0, .rank = 0, .encoding = 5, .dtype = 1 };
    struct ts_fault_cfg corrupt = { .kind = TS_FAULT_CORRUPT, .nth = 1,
                                    .offset = TS_FRAME_HDR_LEN + 100 };
    struct ts_conn *c, *fc;
    uint64_t refused;
    int id;

    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e))
        fail_msg("%s", e.message);
    assert_string_equal(tessera_transport(t), transport);
    assert_int_equal(tessera_pull(t, id, 0, before, &e), 0);
    for (int i = 0; i < N; i++)
        g[i] = 0.25f * (float)(i % 5);
    assert_int_equal(tessera_to_fixed(g, N, fixed, &e), 0);

    /* A wrong-shape push: refused by the shard, the connection stays usable. */
    c = raw_connect(transport, job, t);
    assert_int_equal(ts_frame_send(c, &push, fixed, (N - 1) * sizeof(int64_t), NULL), TS_OK);
    assert_int_equal(expect_error(c, "payload"), TS_EINVAL);
    push.encoding = 0; /* float in an exact job */
    assert_int_equal(ts_frame_send(c, &push, fixed, N * sizeof(float), NULL), TS_OK);
    assert_int_equal(expect_error(c, "encoding"), TS_EINVAL);
    ts_tp_close(c);

    /* An image from a shard that is not the one before this shard in the partition's chain
     * (here the only shard, which heads it), or naming no sender: refused naming the field,
     * nothing loaded (checked below with the values). */
    {
        static char image[72 + N * sizeof(float)];
        struct ts_frame_hdr im = { .type = TS_FRAME_IMAGE, .tensor = 0, .partition = 0,
                                   .step = 9, .rank = 7 };
        c = raw_connect(transport, job, t);
        assert_int_equal(ts_frame_send(c, &im, image, sizeof(image), NULL), TS_OK);
        assert_int_equal(expect_error(c, "image.from: shard 7"), TS_ESTALE);
        im.rank = 0;
        assert_int_equal(ts_frame_send(c, &im, image, sizeof(image), NULL), TS_OK);
        assert_int_equal(expect_error(c, "image.from: required"), TS_EINVAL);
        ts_tp_close(c);
    }

    /* A SEED (docs/replication.md, "Reduce jobs that lose every copy") in a bsp job. */
    {
        struct ts_frame_hdr sd = { .type = TS_FRAME_SEED, .tensor = 0, .partition = 0,
                                   .step = 1, .rank = 0 };
        c = raw_connect(transport, job, t);
        assert_int_equal(ts_frame_send(c, &sd, NULL, 0, NULL), TS_OK);
        assert_int_equal(expect_error(c, "only a reduce job's workers seed"), TS_EINVAL);
        ts_tp_close(c);
    }

    /* A corrupted payload: refused by the frame layer, counted, the connection closed. */
    refused = frames_refused();
    c = raw_connect(transport, job, t);
    assert_int_equal(ts_fault_wrap(c, &corrupt, &fc, NULL), TS_OK);
    push.encoding = 5;
    assert_int_equal(ts_frame_send(fc, &push, fixed, N * sizeof(int64_t), NULL), TS_OK);
    assert_int_equal(expect_error(fc, "checksum"), TS_ECORRUPT);
    ts_tp_close(fc);
    for (int i = 0; i < 100 && frames_refused() == refused; i++)
        ts_sleep_ms(10); /* the shard counts the connection as it reaps it */
    assert_int_equal(frames_refused(), refused + 1);

    /* Nothing was applied: still version 0 with the same values, and rank 0 may push step 0. */
    assert_int_equal(tessera_pull(t, id, 0, after, &e), 0);
    assert_memory_equal(before, after, sizeof(before));
    if (tessera_push(t, id, 0, fixed, &e) || tessera_pull(t, id, 1, after, &e))
        fail_msg("%s", e.message);
    for (int i = 0; i < N; i++)
        assert_true(after[i] == before[i] - 0.5f * (g[i] / 4));

    /* A step whose push is refused (step 5 at version 1) fails at once: the pulls sent right
     * behind it are refused too, rather than waiting for a version that cannot come. The
     * 10-float tensor's refusal (longer than its 40-byte payload) must still be read as an
     * error, or the stream would fall out of step. */
    {
        static int64_t small_fixed[10];
        static float small[10];
        const void *gs[2] = { fixed, small_fixed };
        float *ps[2] = { after, small };
        uint64_t bshape[1] = { 10 };
        int64_t t0;
        int bid;
        if (tessera_register(t, "b", bshape, 1, "zeros", 3, 0, 0, 0, &bid, &e) ||
            tessera_push(t, bid, 0, small_fixed, &e) || tessera_pull(t, bid, 1, small, &e))
            fail_msg("%s", e.message);
        t0 = ts_now_ms();
        assert_int_equal(tessera_step(t, 5, gs, ps, &e), TESSERA_EINVAL);
        assert_non_null(strstr(e.message, "step: 5"));
        assert_true(ts_now_ms() - t0 < 5000);
        if (tessera_step(t, 1, gs, ps, &e)) /* and the streams are still in step */
            fail_msg("%s", e.message);
    }
    tessera_close(t);
}

/* A worker's own copy against the shards: equal after a pull, one element off found. */
static void local_copy_audit(void **state)
{
    struct tessera_options o = { .master = master, .job = "audit", .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4 };
    struct tessera_error e;
    struct tessera_local_audit a;
    tessera *t;
    uint64_t shape[1] = { N };
    static float w[N];
    float *params[1] = { w };
    int id;

    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 5, 0, 0, 0, &id, &e) ||
        tessera_pull(t, id, 0, w, &e))
        fail_msg("%s", e.message);
    assert_int_equal(tessera_verify_local(t, params, 0, &a, &e), 0);
    assert_true(a.elements == N && a.differing == 0 && a.first_tensor == -1);
    float was = w[123];
    w[123] = nextafterf(w[123], 1.0f);
    assert_int_equal(tessera_verify_local(t, params, 0, &a, &e), 0);
    assert_true(a.differing == 1 && a.first_tensor == id && a.first_index == 123);
    assert_true(a.max_ulp == 1 && a.first_local == w[123] && a.first_shard == was);
    tessera_close(t);
}

/* ---- shared regions ---- */

#define BIG (64 * 1024)      /* floats: 256 KiB, over the shard's region threshold */
#define BIG_PART (64 << 10)  /* 4 page-aligned partitions */

/* Whether process pid maps a memfd called name (at addr, when addr is not NULL). */
static bool maps_memfd(pid_t pid, const char *name, const void *addr)
{
    char path[64], line[512], want[80];
    bool found = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    snprintf(want, sizeof(want), "/memfd:%s", name);
    assert_non_null(f = fopen(path, "r"));
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (!strstr(line, want) || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        found = !addr || ((uintptr_t)addr >= lo && (uintptr_t)addr < hi);
    }
    fclose(f);
    return found;
}

/* One worker, exact: a step through tessera_buffers gives the bits of the copy path, with the
 * parameters mapped from the shard (shm) and the gradient read in place by it. */
static void buffers_same_bits(const char *transport, const char *job)
{
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = transport };
    struct tessera_error e;
    tessera *t;
    uint64_t shape[1] = { BIG };
    static float before[BIG], copy[BIG], g[BIG];
    const float *params;
    void *grad;
    int id;

    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 9, 0, 0, BIG_PART, &id, &e) ||
        tessera_buffers(t, id, &params, &grad, &e))
        fail_msg("%s", e.message);
    assert_int_equal(tessera_pull(t, id, 0, before, &e), 0);
    assert_int_equal(tessera_pull(t, id, 0, (float *)params, &e), 0);
    assert_memory_equal(before, params, sizeof(before));
    if (strcmp(transport, "shm") == 0) {
        assert_true(maps_memfd(getpid(), "tessera-params", params));
        assert_true(maps_memfd(shard_pid, "tessera-grad", NULL));
        /* The shard's values are sealed against writers other than the shard: this
         * read-only mapping cannot be made writable. */
        assert_int_equal(mprotect((void *)params, ts_page_size(), PROT_READ | PROT_WRITE), -1);
    } else {
        assert_false(maps_memfd(getpid(), "tessera-params", params));
    }
    for (int i = 0; i < BIG; i++)
        g[i] = 0.25f * (float)(i % 5);
    assert_int_equal(tessera_to_fixed(g, BIG, grad, &e), 0);
    {
        const void *gs[1] = { grad };
        float *ps[1] = { (float *)params };
        if (tessera_step(t, 0, gs, ps, &e))
            fail_msg("%s", e.message);
    }
    for (int i = 0; i < BIG; i++)
        assert_true(params[i] == before[i] - 0.5f * (g[i] / 4));
    assert_int_equal(tessera_pull(t, id, 1, copy, &e), 0);
    assert_memory_equal(copy, params, sizeof(copy));
    /* The same pointers again; a buffer push from another array copies as before. */
    {
        const float *p2;
        void *g2;
        static int64_t fixed[BIG];
        assert_int_equal(tessera_buffers(t, id, &p2, &g2, &e), 0);
        assert_ptr_equal(p2, params);
        assert_ptr_equal(g2, grad);
        memcpy(fixed, grad, sizeof(fixed));
        if (tessera_push(t, id, 1, fixed, &e) || tessera_pull(t, id, 2, copy, &e))
            fail_msg("%s", e.message);
        for (int i = 0; i < BIG; i++)
            assert_true(copy[i] == (before[i] - 0.5f * (g[i] / 4)) - 0.5f * (g[i] / 4));
        /* Mapped, the view is the shard's values: version 2 already. Private, it holds what
         * was last pulled into it: version 1. */
        for (int i = 0; i < BIG; i++)
            assert_true(params[i] == (strcmp(transport, "shm") == 0 ? copy[i]
                                      : before[i] - 0.5f * (g[i] / 4)));
    }
    tessera_close(t);
}

static void buffers_shm(void **state)
{
    buffers_same_bits("shm", "buffers-shm");
}

static void buffers_tcp(void **state)
{
    buffers_same_bits("tcp", "buffers-tcp");
}

/* How a test memfd is sealed: not at all, against resizing only, or as an owned region is
 * (region.h: also against writes by others). */
enum seals { UNSEALED, SIZE_ONLY, OWNED };

static int memfd_of(size_t bytes, enum seals seals)
{
    int fd = memfd_create("test-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    if (seals != UNSEALED)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
                               (seals == OWNED ? F_SEAL_FUTURE_WRITE : 0)), 0);
    return fd;
}

/* SHARE of fd for tensor 0 as `flags`; expects an ERROR saying `says` (or an ACK when says is
 * NULL). */
/* A SHARE of fd as flags says; a gradient region's encoding says its element size. */
static void share_enc(struct ts_conn *c, uint32_t flags, unsigned encoding, int fd,
                      const char *says)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_SHARE, .tensor = 0, .flags = flags,
                              .encoding = (uint16_t)encoding };
    char buf[64];

    assert_int_equal(ts_tp_send_fd(c, fd, NULL), TS_OK);
    assert_int_equal(ts_frame_send(c, &h, NULL, 0, NULL), TS_OK);
    if (says) {
        expect_error(c, says);
        return;
    }
    assert_int_equal(ts_frame_recv(c, &h, buf, sizeof(buf), 5000, NULL), TS_OK);
    assert_int_equal(h.type, TS_FRAME_ACK);
}

static void share_as(struct ts_conn *c, uint32_t flags, int fd, const char *says)
{
    share_enc(c, flags, 0, fd, says);
}

/* An int64 gradient region (this file's jobs are exact). */
static void share(struct ts_conn *c, int fd, const char *says)
{
    share_enc(c, TS_SHARE_GRAD, TS_ENC_FIXED, fd, says);
}

/* Region pushes and pulls, SHARE and MAP, misused: clear errors, nothing applied. */
static void regions_refused(void **state)
{
    const char *job = "regions-bad";
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = "shm" };
    struct tessera_error e;
    tessera *t;
    uint64_t shape[1] = { BIG }, small_shape[1] = { 10 };
    static float before[BIG], after[BIG];
    struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = 0, .partition = 0,
                                 .step = 0, .rank = 0, .encoding = 5, .dtype = 1,
                                 .flags = TS_PUSH_REGION };
    struct ts_frame_hdr pull = { .type = TS_FRAME_PULL, .tensor = 0, .partition = 0,
                                 .step = 0, .rank = 0, .flags = TS_PULL_REGION };
    struct ts_frame_hdr map = { .type = TS_FRAME_MAP, .tensor = 1 };
    struct ts_conn *c;
    int id, sid;

    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 4, 0, 0, BIG_PART, &id, &e) ||
        tessera_register(t, "b", small_shape, 1, "zeros", 4, 0, 0, 0, &sid, &e) ||
        tessera_pull(t, id, 0, before, &e))
        fail_msg("%s", e.message);
    c = raw_connect("shm", job, t);
    /* Before any SHARE or MAP: no region push, no region pull. */
    assert_int_equal(ts_frame_send(c, &push, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "send SHARE first"), TS_ESTATE);
    assert_int_equal(ts_frame_send(c, &pull, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "send MAP first"), TS_ESTATE);
    /* MAP: a small tensor has no region; an unknown one does not exist. */
    assert_int_equal(ts_frame_send(c, &map, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "not shared"), TS_ENOTSUP);
    map.tensor = 7;
    assert_int_equal(ts_frame_send(c, &map, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "not registered"), TS_ENOTFOUND);
    /* SHARE: unsealed, writable by whoever holds it, too small, then a good one with a
     * payload-carrying region push. */
    share(c, memfd_of(BIG * sizeof(int64_t), UNSEALED), "sealed");
    share(c, memfd_of(BIG * sizeof(int64_t), SIZE_ONLY), "writes by others");
    share(c, memfd_of(BIG * sizeof(int64_t) - 4096, OWNED), "at least");
    share(c, memfd_of(BIG * sizeof(int64_t), OWNED), NULL);
    /* A shard's values (what the shard before in a chain offers): float-sized, writable only
     * by that shard, and no other kind of region. */
    share_as(c, TS_SHARE_PARAMS, memfd_of(BIG * sizeof(float) - 4096, OWNED), "values");
    share_as(c, TS_SHARE_PARAMS, memfd_of(BIG * sizeof(float), SIZE_ONLY), "writes by others");
    share_as(c, 0x4, memfd_of(BIG * sizeof(float), OWNED), "SHARE flags 0x4");
    share_as(c, TS_SHARE_PARAMS, memfd_of(BIG * sizeof(float), OWNED), NULL);
    assert_int_equal(ts_frame_send(c, &push, before, 8, NULL), TS_OK);
    assert_int_equal(expect_error(c, "carries no payload"), TS_EINVAL);
    push.encoding = 0; /* raw float in an exact job */
    assert_int_equal(ts_frame_send(c, &push, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "encoding"), TS_EINVAL);
    /* A float gradient region (exact_push float) is half the size: too small for the int64
     * push that follows it. */
    share_enc(c, TS_SHARE_GRAD, TS_ENC_FIXED_F32, memfd_of(BIG * sizeof(float), OWNED), NULL);
    push.encoding = TS_ENC_FIXED;
    push.partition = 3;   /* its int64 elements end at 2x the float region's size */
    assert_int_equal(ts_frame_send(c, &push, NULL, 0, NULL), TS_OK);
    assert_int_equal(expect_error(c, "past the end of the shared region"), TS_EINVAL);
    ts_tp_close(c);
    /* SHARE on tcp: refused, and the connection closed (the stream and descriptors would be
     * out of step). */
    c = raw_connect("tcp", job, t);
    {
        struct ts_frame_hdr h = { .type = TS_FRAME_SHARE, .flags = TS_SHARE_GRAD };
        char buf[256];
        assert_int_equal(ts_frame_send(c, &h, NULL, 0, NULL), TS_OK);
        expect_error(c, "cannot pass regions");
        assert_int_not_equal(ts_frame_recv(c, &h, buf, sizeof(buf), 5000, NULL), TS_OK);
    }
    ts_tp_close(c);
    /* Nothing was applied: version 0, the same values, and a real step still works. */
    assert_int_equal(tessera_pull(t, id, 0, after, &e), 0);
    assert_memory_equal(before, after, sizeof(before));
    {
        const float *params;
        void *grad;
        if (tessera_buffers(t, id, &params, &grad, &e) || tessera_push(t, id, 0, grad, &e) ||
            tessera_pull(t, id, 1, after, &e))
            fail_msg("%s", e.message);
        assert_memory_equal(before, after, sizeof(before));   /* a zero gradient */
    }
    tessera_close(t);
}

/* SEEDs in a reduce job: values of the wrong length are refused naming the field; a
 * partition that lost nothing takes a good one as a no-op (ACK), and trains on. */
static void seeds_refused(void **state)
{
    struct tessera_options o = { .master = master, .job = "dp-seed", .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .mode = "reduce" };
    struct ts_frame_hdr sd = { .type = TS_FRAME_SEED, .tensor = 0, .partition = 0, .step = 1,
                               .rank = 0 };
    static float vals[N + 1], before[N], after[N];
    static int64_t fixed[N];
    uint64_t shape[1] = { N };
    struct tessera_error e;
    struct ts_conn *c;
    char buf[64];
    tessera *t;
    int id;

    (void)state;
    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e) ||
        tessera_pull(t, id, 0, before, &e))
        fail_msg("%s", e.message);
    c = raw_connect("tcp", "dp-seed", t);
    assert_int_equal(ts_frame_send(c, &sd, vals, (N + 1) * sizeof(float), NULL), TS_OK);
    assert_int_equal(expect_error(c, "seed: 4004 bytes"), TS_EINVAL);
    assert_int_equal(ts_frame_send(c, &sd, vals, N * sizeof(float), NULL), TS_OK);
    assert_int_equal(ts_frame_recv(c, &sd, buf, sizeof(buf), 5000, NULL), TS_OK);
    assert_int_equal(sd.type, TS_FRAME_ACK);
    ts_tp_close(c);
    for (int i = 0; i < N; i++)
        vals[i] = 0.25f;
    assert_int_equal(tessera_to_fixed(vals, N, fixed, &e), 0);
    if (tessera_step(t, 0, (const void *[]){ fixed }, (float *[]){ after }, &e))
        fail_msg("%s", e.message);
    assert_memory_not_equal(before, after, sizeof(after));
    tessera_close(t);
}

/* A compressed pull of tensor 0 partition 0 at version v naming token have (ratio: top-k's);
 * the reply's payload into buf (8 + 4N bytes at most), header into *h. */
static void coded_pull(struct ts_conn *c, uint64_t v, unsigned enc, uint64_t have,
                       double ratio, struct ts_frame_hdr *h, void *buf)
{
    struct ts_frame_hdr pull = { .type = TS_FRAME_PULL, .step = v, .dtype = 1,
                                 .flags = TS_PULL_CODED, .encoding = (uint16_t)enc };
    uint8_t req[16];

    memcpy(req, &have, 8);
    memcpy(req + 8, &ratio, 8);
    assert_int_equal(ts_frame_send(c, &pull, req, sizeof(req), NULL), TS_OK);
    assert_int_equal(ts_frame_recv(c, h, buf, 8 + 4 * N, 5000, NULL), TS_OK);
    assert_int_equal(h->type, TS_FRAME_PARAMS);
    assert_true(h->flags & TS_PARAMS_CODED);
}

static void coded_pulls(void **state)
{
    struct tessera_options o = { .master = master, .job = "dp-coded", .rank = 0, .workers = 1,
                                 .optimizer = "sgd:lr=0.5", .batch = 4, .transport = "tcp" };
    struct ts_frame_hdr h, bad = { .type = TS_FRAME_PULL, .dtype = 1, .flags = TS_PULL_CODED,
                                   .encoding = 3 };
    static float vals[N], next[N], copy[N], scratch[N], g[N];
    static uint8_t buf[8 + 4 * N], req[16];
    uint64_t shape[1] = { N }, t1, t2, t3;
    struct tessera_error e;
    struct ts_conn *c;
    tessera *t;
    int id;

    (void)state;
    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e) ||
        tessera_pull(t, id, 0, vals, &e))
        fail_msg("%s", e.message);
    c = raw_connect("tcp", "dp-coded", t);
    coded_pull(c, 0, TS_CODEC_INT8, 0, 0, &h, buf);          /* no copy yet: in full */
    assert_int_equal(h.encoding, 0);
    assert_int_equal(h.len, 8 + 4 * N);
    assert_memory_equal(buf + 8, vals, sizeof(vals));
    memcpy(&t1, buf, 8);
    memcpy(copy, buf + 8, sizeof(copy));
    coded_pull(c, 0, TS_CODEC_INT8, t1, 0, &h, buf);         /* its token: a delta (of 0) */
    assert_int_equal(h.encoding, TS_CODEC_INT8);
    assert_int_equal(h.len, 8 + 4 + N);
    memcpy(&t2, buf, 8);
    assert_true(t2 != t1);
    coded_pull(c, 0, TS_CODEC_INT8, t1, 0, &h, buf);         /* a stale token: in full */
    assert_int_equal(h.encoding, 0);
    assert_memory_equal(buf + 8, vals, sizeof(vals));
    memcpy(&t3, buf, 8);
    /* Malformed: refused by name, and the connection goes on. */
    assert_int_equal(ts_frame_send(c, &bad, req, 8, NULL), TS_OK);
    assert_int_equal(expect_error(c, "carries 16 bytes"), TS_EINVAL);
    bad.encoding = 9;
    assert_int_equal(ts_frame_send(c, &bad, req, 16, NULL), TS_OK);
    assert_int_equal(expect_error(c, "encoding 9 is not a codec"), TS_EINVAL);
    bad.encoding = TS_CODEC_TOPK;
    memcpy(req + 8, &(double){ 2.0 }, 8);
    assert_int_equal(ts_frame_send(c, &bad, req, 16, NULL), TS_OK);
    assert_int_equal(expect_error(c, "top-k ratio 2"), TS_EINVAL);
    /* A step moves the values; the delta brings the copy to within int8's step of them. */
    for (int i = 0; i < N; i++)
        g[i] = (float)(i % 7) - 3.0f;
    if (tessera_step(t, 0, (const void *[]){ g }, (float *[]){ next }, &e))
        fail_msg("%s", e.message);
    coded_pull(c, 1, TS_CODEC_INT8, t3, 0, &h, buf);
    assert_int_equal(h.encoding, TS_CODEC_INT8);
    assert_int_equal(ts_codec_check(h.encoding, buf + 8, h.len - 8, N, NULL), TS_OK);
    ts_codec_delta_apply(h.encoding, buf + 8, h.len - 8, N, copy, scratch);
    for (int i = 0; i < N; i++)
        assert_true(fabsf(copy[i] - next[i]) <= 0.375f / 127 * 0.51f + 1e-6f);
    assert_memory_not_equal(copy, vals, sizeof(copy));
    ts_tp_close(c);
    tessera_close(t);
    /* Exact mode: refused naming the option. */
    o.job = "dp-coded-exact";
    o.exact = 1;
    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e))
        fail_msg("%s", e.message);
    c = raw_connect("tcp", "dp-coded-exact", t);
    bad.encoding = TS_CODEC_FP16;
    memset(req, 0, sizeof(req));
    assert_int_equal(ts_frame_send(c, &bad, req, 16, NULL), TS_OK);
    assert_int_equal(expect_error(c, "pull_compress: job 'dp-coded-exact' is in exact mode"),
                     TS_EINVAL);
    ts_tp_close(c);
    tessera_close(t);
}

/* A connection speaks for the worker its HELLO names, and takes only that worker's slots: a
 * push of rank 0 from a connection naming another worker is refused, nothing applied, the
 * connection closed and the refusal counted (docs/security.md, "Pushes bound to their
 * sender"). Before its HELLO, a connection may send no frame over 4 KiB: a 1 MiB HELLO is
 * refused on its header and counted, and the shard's memory does not take it in. */
static void identity_and_limits(void **state)
{
    const char *job = "dp-identity";
    struct tessera_options o = { .master = master, .job = job, .rank = 0, .workers = 1,
                                 .exact = 1, .optimizer = "sgd:lr=0.5", .batch = 4,
                                 .transport = "tcp" };
    struct ts_frame_hdr push = { .type = TS_FRAME_PUSH, .tensor = 0, .partition = 0,
                                 .step = 0, .rank = 0, .encoding = TS_ENC_FIXED, .dtype = 1 };
    struct ts_frame_hdr hello = { .type = TS_FRAME_HELLO };
    static int64_t fixed[N];
    static float before[N], after[N];
    uint64_t shape[1] = { N }, identity = refusals("identity"), big = refusals("oversize");
    struct tessera_error e;
    struct ts_conn *c;
    char buf[256];
    tessera *t;
    int id;

    (void)state;
    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "w", shape, 1, "normal:0.1", 3, 0, 0, 0, &id, &e) ||
        tessera_pull(t, id, 0, before, &e))
        fail_msg("%s", e.message);
    assert_true(tessera_worker_id(t) > 0);
    for (int i = 0; i < N; i++)
        fixed[i] = (int64_t)1 << 40;
    c = harness_connect("tcp", job, 0, tessera_worker_id(t) + 1000);
    assert_non_null(c);
    assert_int_equal(ts_frame_send(c, &push, fixed, sizeof(fixed), NULL), TS_OK);
    assert_int_equal(expect_error(c, "this connection is worker"), TS_EPERM);
    assert_int_not_equal(ts_frame_recv(c, &push, buf, sizeof(buf), 5000, NULL), TS_OK);
    ts_tp_close(c);
    assert_int_equal(refusals("identity"), identity + 1);
    /* Nothing applied: the real worker's step 0 goes through, from the same values. */
    assert_int_equal(tessera_pull(t, id, 0, after, &e), 0);
    assert_memory_equal(before, after, sizeof(before));
    /* A HELLO of 1 MiB on a fresh connection: refused before its payload is read. */
    {
        struct ts_blob blob;
        const struct ts_transport_ops *ops;
        Tessera__V1__ShardMap *map;
        struct ts_master *m;
        static char huge[1 << 20];

        assert_int_equal(ts_master_open(master, &m, NULL), TS_OK);
        assert_int_equal(ts_master_shard_map(m, &map, NULL), TS_OK);
        assert_int_equal(ts_shard_pick_transport(map->shards[0], "tcp", &ops, &blob, NULL),
                         TS_OK);
        tessera__v1__shard_map__free_unpacked(map, NULL);
        ts_master_close(m);
        assert_int_equal(ts_tp_connect(ops, &blob, 5000, &c, NULL), TS_OK);
        memset(huge, 'a', sizeof(huge));
        if (ts_frame_send(c, &hello, huge, sizeof(huge), NULL))
            ts_log(TS_INFO, "test", "the huge HELLO was cut short: the shard hung up");
        expect_error(c, "over the receive buffer");
        ts_tp_close(c);
        for (int i = 0; i < 100 && refusals("oversize") == big; i++)
            ts_sleep_ms(10);
        assert_int_equal(refusals("oversize"), big + 1);
    }
    tessera_close(t);
}

static void over_tcp(void **state)
{
    bad_frames_change_nothing("tcp", "faults-tcp");
}

static void over_shm(void **state)
{
    bad_frames_change_nothing("shm", "faults-shm");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_tcp),
        cmocka_unit_test(over_shm),
        cmocka_unit_test(local_copy_audit),
        cmocka_unit_test(buffers_shm),
        cmocka_unit_test(buffers_tcp),
        cmocka_unit_test(regions_refused),
        cmocka_unit_test(seeds_refused),
        cmocka_unit_test(coded_pulls),
        cmocka_unit_test(identity_and_limits),
    };
    if (argc < 2) {
        fprintf(stderr, "usage: test_dataplane BIN_DIR\n");
        return 2;
    }
    bin = argv[1];
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
