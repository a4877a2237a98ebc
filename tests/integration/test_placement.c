/* test_placement.c - a tensor's placement salt (docs/placement.md, "Balance within a tensor:
 * the placement salt"), with a real master and four real shards (ids 1..4). A 4 MiB tensor "x"
 * in 1 MiB partitions, which salt 0 splits 1/0/2/1: the worker's chosen salt puts one
 * partition on each shard, and every shard holds exactly the partitions the ring names under
 * that salt (the client's owners agree, or its registration and step would fail);
 * TESSERA_PLACEMENT_SALT=0 places as before salts and a fixed salt places by it; a second
 * worker that proposes another salt adopts the shards'; a RegisterTensor with another salt is
 * answered with the salt in effect and changes nothing; shards that disagree on a tensor's
 * salt make a worker's registration fail, never train a split tensor; and a worker that
 * leaves the partition size to the SDK adopts the tensor's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "harness.h"
#include "tessera.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"

#define SHARDS 4
#define NUMEL (1u << 20)          /* 4 MiB of floats */
#define PART_BYTES (1u << 20)     /* in 4 partitions */
#define NPARTS 4

static const char *bin, *master;

static int setup(void **state)
{
    (void)state;
    if (!(master = harness_master(bin)))
        return -1;
    for (int i = 0; i < SHARDS; i++)
        if (harness_shard(bin, NULL, NULL) < 0)
            return -1;
    return harness_wait_shards(SHARDS);
}

static int teardown(void **state)
{
    (void)state;
    harness_stop();
    return 0;
}

static struct tessera_options options(const char *job, unsigned rank, unsigned workers)
{
    return (struct tessera_options){ .master = master, .job = job, .rank = rank,
                                     .workers = workers, .exact = 1,
                                     .optimizer = "sgd:lr=0.5", .batch = 4 };
}

/* A worker of job registering "x" in partitions of `bytes` (0: the SDK's choice);
 * TESSERA_PLACEMENT_SALT is env (NULL: unset). */
static tessera *worker_sized(const char *job, unsigned rank, unsigned workers, const char *env,
                             uint64_t bytes)
{
    struct tessera_options o = options(job, rank, workers);
    struct tessera_error e;
    uint64_t shape[1] = { NUMEL };
    tessera *t;
    int id;

    if (env)
        setenv("TESSERA_PLACEMENT_SALT", env, 1);
    else
        unsetenv("TESSERA_PLACEMENT_SALT");
    ts_knob_reread();
    if (tessera_connect(&o, &t, &e) ||
        tessera_register(t, "x", shape, 1, "normal:0.1", 3, 0, 0, bytes, &id, &e))
        fail_msg("job %s rank %u: %s", job, rank, e.message);
    unsetenv("TESSERA_PLACEMENT_SALT");
    ts_knob_reread();
    assert_int_equal(id, 0);
    return t;
}

static tessera *worker(const char *job, unsigned rank, unsigned workers, const char *env)
{
    return worker_sized(job, rank, workers, env, PART_BYTES);
}

/* Which shard heads each partition of job's "x" (PartitionDigests of every shard), and how
 * many each shard heads (count[id - 1]); fails on a partition headed twice or not at all. */
static void heads(struct ts_cluster *cl, const char *job, uint32_t owner[NPARTS],
                  unsigned count[SHARDS])
{
    memset(owner, 0, NPARTS * sizeof(*owner));
    memset(count, 0, SHARDS * sizeof(*count));
    for (uint32_t id = 1; id <= SHARDS; id++) {
        Tessera__V1__PartitionDigestsRequest req = TESSERA__V1__PARTITION_DIGESTS_REQUEST__INIT;
        Tessera__V1__PartitionDigestsResponse *r;
        struct ts_err err = { 0 };

        req.job = (char *)job;
        if (ts_cluster_partition_digests(cl, id, &req, 0, &r, &err))
            fail_msg("shard %u: %s", id, err.msg);
        for (size_t k = 0; k < r->n_partitions; k++) {
            const Tessera__V1__PartitionDigest *d = r->partitions[k];
            if (strcmp(d->tensor, "x") || d->follower)
                continue;
            assert_true(d->partition < NPARTS);
            if (owner[d->partition])
                fail_msg("partition %u headed by shards %u and %u", d->partition,
                         owner[d->partition], id);
            owner[d->partition] = id;
            count[id - 1]++;
        }
        tessera__v1__partition_digests_response__free_unpacked(r, NULL);
    }
    for (uint32_t p = 0; p < NPARTS; p++)
        if (!owner[p])
            fail_msg("job %s: no shard heads partition %u", job, p);
}

/* The shards place job's "x" exactly as the ring does under salt. */
static void placed_by(struct ts_cluster *cl, const char *job, uint32_t salt,
                      unsigned count[SHARDS])
{
    uint32_t owner[NPARTS];

    heads(cl, job, owner, count);
    for (uint32_t p = 0; p < NPARTS; p++) {
        uint32_t want = 0;
        assert_int_equal(ts_cluster_locate(cl, "x", salt, p, &want, NULL), TS_OK);
        if (owner[p] != want)
            fail_msg("job %s partition %u: on shard %u, the ring under salt %u says %u", job, p,
                     owner[p], salt, want);
    }
}

/* Exact step `step` of a one-worker job: every push and pull reaches the shard that heads
 * its partition, or it fails. */
static void one_step(tessera *t, uint64_t step)
{
    static int64_t g[NUMEL];
    static float before[NUMEL], after[NUMEL];
    struct tessera_error e;

    if (tessera_pull(t, 0, step, before, &e) || tessera_push(t, 0, step, g, &e) ||
        tessera_pull(t, 0, step + 1, after, &e))
        fail_msg("%s", e.message);
    assert_memory_equal(before, after, sizeof(before));   /* a zero gradient, plain sgd */
}

/* RegisterTensor of job's "x" (of `workers`) on shard id, as the SDK sends it, with salt, in
 * partitions of bytes (proposed only, with partition_auto); err (may be NULL) gets the error. */
static Tessera__V1__RegisterTensorResponse *raw_register_sized(struct ts_cluster *cl,
                                                               uint32_t id, const char *job,
                                                               uint32_t workers,
                                                               uint32_t salt, uint64_t bytes,
                                                               bool proposed, ts_status want,
                                                               struct ts_err *err)
{
    Tessera__V1__JobSpec js = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TensorSpec spec = TESSERA__V1__TENSOR_SPEC__INIT;
    Tessera__V1__RegisterTensorRequest req = TESSERA__V1__REGISTER_TENSOR_REQUEST__INIT;
    Tessera__V1__RegisterTensorResponse *r = NULL;
    uint64_t shape[1] = { NUMEL };
    struct ts_err own = { 0 };
    ts_status st;

    err = err ? err : &own;
    js.id = (char *)job;
    js.workers = workers;
    js.exact = 1;
    js.optimizer = "sgd:lr=0.5";
    js.batch = 4;
    js.mode = TESSERA__V1__TRAIN_MODE__TRAIN_MODE_BSP;
    spec.name = "x";
    spec.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    spec.shape = shape;
    spec.n_shape = 1;
    spec.initializer = "normal:0.1";
    spec.seed = 3;
    spec.partition_bytes = bytes;
    spec.partition_auto = proposed;
    spec.placement_salt = salt;
    req.job = &js;
    req.tensor = &spec;
    st = ts_cluster_register_tensor(cl, id, &req, 0, &r, err);
    if (st != want)
        fail_msg("RegisterTensor on shard %u: %d (%s), want %d", id, st, err->msg, want);
    return r;
}

static Tessera__V1__RegisterTensorResponse *raw_register(struct ts_cluster *cl, uint32_t id,
                                                         const char *job, uint32_t salt,
                                                         ts_status want)
{
    return raw_register_sized(cl, id, job, 1, salt, PART_BYTES, false, want, NULL);
}

/* The chosen salt balances "x"; the shards and the client place it by that salt; another
 * salt in a RegisterTensor is answered with the one in effect, and nothing changes. */
static void chosen_salt_balances(void **state)
{
    struct ts_cluster *cl;
    struct ts_ring_salt rs;
    unsigned count[SHARDS], again[SHARDS];
    uint32_t salt, owner[NPARTS], owner2[NPARTS];
    tessera *t;

    (void)state;
    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    salt = ts_cluster_choose_salt(cl, "x", NPARTS, PART_BYTES, PART_BYTES, &rs);
    assert_int_equal(rs.salt0_share, 2 * PART_BYTES);   /* salt 0: 1/0/2/1 */
    assert_int_equal(rs.max_share, PART_BYTES);
    assert_true(salt != 0);
    t = worker("salted", 0, 1, NULL);
    placed_by(cl, "salted", salt, count);
    for (int i = 0; i < SHARDS; i++)
        assert_int_equal(count[i], 1);
    one_step(t, 0);

    /* Salt 0 and salt + 1 again, on every shard: each answers with the salt in effect and the
     * partitions it heads under it; nothing moves. */
    heads(cl, "salted", owner, count);
    for (uint32_t id = 1; id <= SHARDS; id++)
        for (uint32_t other = 0; other < 2; other++) {
            Tessera__V1__RegisterTensorResponse *r =
                raw_register(cl, id, "salted", other ? salt + 1 : 0, TS_OK);
            assert_int_equal(r->placement_salt, salt);
            assert_int_equal(r->partition_count, NPARTS);
            assert_int_equal(r->n_partitions, 1);
            assert_int_equal(owner[r->partitions[0]], id);
            tessera__v1__register_tensor_response__free_unpacked(r, NULL);
        }
    heads(cl, "salted", owner2, again);
    assert_memory_equal(owner, owner2, sizeof(owner));
    one_step(t, 1);
    tessera_close(t);
    ts_cluster_close(cl);
}

/* TESSERA_PLACEMENT_SALT=0 places as before salts (salt 0's 1/0/2/1); a fixed salt places by
 * it; a bad value is refused naming the variable. */
static void salt_from_the_environment(void **state)
{
    static const unsigned lumpy[SHARDS] = { 1, 0, 2, 1 };
    struct tessera_options o = options("bad-salt", 0, 1);
    struct tessera_error e;
    struct ts_cluster *cl;
    unsigned count[SHARDS];
    tessera *t;

    (void)state;
    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    t = worker("plain", 0, 1, "0");
    placed_by(cl, "plain", 0, count);
    assert_memory_equal(count, lumpy, sizeof(count));
    one_step(t, 0);
    tessera_close(t);

    t = worker("fixed", 0, 1, "7");
    placed_by(cl, "fixed", 7, count);
    one_step(t, 0);
    tessera_close(t);

    setenv("TESSERA_PLACEMENT_SALT", "-1", 1);
    ts_knob_reread();
    assert_int_equal(tessera_connect(&o, &t, &e), TESSERA_EINVAL);
    unsetenv("TESSERA_PLACEMENT_SALT");
    ts_knob_reread();
    assert_non_null(strstr(e.message, "TESSERA_PLACEMENT_SALT"));
    ts_cluster_close(cl);
}

/* Rank 0 registers "x" with salt 7; rank 1, which would choose another, adopts 7 from the
 * shards' answer (else its owner check would fail: the shards hold the tensor under 7). */
static void second_worker_adopts(void **state)
{
    struct ts_cluster *cl;
    unsigned count[SHARDS];
    tessera *a, *b;

    (void)state;
    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    assert_int_not_equal(ts_cluster_choose_salt(cl, "x", NPARTS, PART_BYTES, PART_BYTES, NULL),
                         7);
    a = worker("adopt", 0, 2, "7");
    b = worker("adopt", 1, 2, NULL);
    placed_by(cl, "adopt", 7, count);
    tessera_close(b);
    tessera_close(a);
    ts_cluster_close(cl);
}

/* Shards that hold a tensor under different salts (as a registration racing a map change
 * could leave them): a worker's registration fails naming both, and changes neither. */
static void split_salts_refused(void **state)
{
    struct tessera_options o = options("split", 0, 1);
    struct tessera_error e;
    struct ts_cluster *cl;
    uint64_t shape[1] = { NUMEL };
    tessera *t;
    int id;

    (void)state;
    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    tessera__v1__register_tensor_response__free_unpacked(raw_register(cl, 1, "split", 3, TS_OK),
                                                         NULL);
    tessera__v1__register_tensor_response__free_unpacked(raw_register(cl, 2, "split", 5, TS_OK),
                                                         NULL);
    if (tessera_connect(&o, &t, &e))
        fail_msg("%s", e.message);
    assert_int_equal(tessera_register(t, "x", shape, 1, "normal:0.1", 3, 0, 0, PART_BYTES, &id,
                                      &e), TESSERA_ESTALE);
    assert_non_null(strstr(e.message, "placement salt 3"));
    assert_non_null(strstr(e.message, "with 5"));
    for (uint32_t s = 1; s <= 2; s++) {
        Tessera__V1__RegisterTensorResponse *r = raw_register(cl, s, "split", 0, TS_OK);
        assert_int_equal(r->placement_salt, s == 1 ? 3 : 5);
        tessera__v1__register_tensor_response__free_unpacked(r, NULL);
    }
    tessera_close(t);
    ts_cluster_close(cl);
}

/* Rank 0 registers "x" in 1 MiB partitions. Rank 1 leaves the size to the SDK, which
 * proposes 4 MiB on one host (docs/placement.md, "Partition size"), and takes the tensor's
 * 1 MiB from the shards' answer: its registration's owner check and its step follow it (in 4
 * MiB it would see one partition where the shards hold four). A RegisterTensor that proposes
 * another size is answered with the tensor's; one that demands another is refused, naming
 * the size the tensor has. */
static void partition_size_adopted(void **state)
{
    static int64_t g[NUMEL];
    static float pa[NUMEL], pb[NUMEL];
    struct tessera_error e;
    struct ts_cluster *cl;
    struct ts_err err = { 0 };
    tessera *a, *b;

    (void)state;
    assert_int_equal(ts_cluster_open(master, &cl, NULL), TS_OK);
    a = worker_sized("sized", 0, 2, NULL, PART_BYTES);
    b = worker_sized("sized", 1, 2, NULL, 0);
    for (uint32_t k = 0; k < NUMEL; k++)
        g[k] = (int64_t)(k % 7) << 28;
    if (tessera_push(a, 0, 0, g, &e) || tessera_push(b, 0, 0, g, &e) ||
        tessera_pull(a, 0, 1, pa, &e) || tessera_pull(b, 0, 1, pb, &e))
        fail_msg("%s", e.message);
    assert_memory_equal(pa, pb, sizeof(pa));
    for (uint32_t id = 1; id <= SHARDS; id++) {
        Tessera__V1__RegisterTensorResponse *r =
            raw_register_sized(cl, id, "sized", 2, 0, 4 * PART_BYTES, true, TS_OK, NULL);
        assert_int_equal(r->partition_bytes, PART_BYTES);
        assert_int_equal(r->partition_count, NPARTS);
        tessera__v1__register_tensor_response__free_unpacked(r, NULL);
    }
    assert_null(raw_register_sized(cl, 1, "sized", 2, 0, 4 * PART_BYTES, false, TS_EEXIST,
                                   &err));
    assert_non_null(strstr(err.msg, "partition size (1048576 bytes)"));
    tessera_close(b);
    tessera_close(a);
    ts_cluster_close(cl);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chosen_salt_balances),
        cmocka_unit_test(salt_from_the_environment),
        cmocka_unit_test(second_worker_adopts),
        cmocka_unit_test(split_salts_refused),
        cmocka_unit_test(partition_size_adopted),
    };
    if (argc < 2) {
        fprintf(stderr, "usage: test_placement BIN_DIR (where tessera-master is)\n");
        return 2;
    }
    bin = argv[1];
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
