/* test_part_replica.c - lib/ps's replication pieces (part.h, "Replication"): a follower
 * loaded with the head's image after each step holds the head's bits and, promoted, trains
 * on to the same bits; images that do not fit are refused with nothing changed; in SSP and
 * ASP images carry the ranks' clocks, an older image changes nothing and a retried push
 * counts once; a held
 * update is not pulled until it is published; after a rollback to a snapshot, the partition
 * holds the snapshot at its step, trains on to the bits of a run without the detour, and
 * refuses pushes, pulls and images of before (a pull waiting under the rollback ends); a
 * reduce partition that lost every copy is seeded again by its ranks (seed.c). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "part_test.h"
#include "util/proc.h"

#define N 777
#define W 3

static struct ts_job job(bool exact, const char *opt, enum ts_mode mode)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "t", W, exact, opt, 64, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, mode, 0, NULL), TS_OK);
    return j;
}

static struct ts_part *mk(const struct ts_job *j, uint32_t index, uint64_t len)
{
    struct ts_part *p;
    assert_int_equal(ts_part_create(j, 2, "w", index, 100, len, "normal:0.1", 5, 0, 0, NULL, &p,
                                    NULL), TS_OK);
    return p;
}

/* Rank r's fixed-point gradient for step s. */
static void grad(uint32_t r, uint64_t s, int64_t *out)
{
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = (float)((i % 5) - 2) * 1e-2f * (float)(r + 1) + (float)s * 1e-4f;
    assert_int_equal(ts_fixed_from_f32(g, N, out, NULL), TS_OK);
}

static void step(struct ts_part *p, uint64_t s)
{
    static int64_t g[N];
    bool applied;

    for (uint32_t r = 0; r < W; r++) {
        grad(r, s, g);
        assert_int_equal(push(p, r, s, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
        assert_int_equal(applied, r == W - 1);
    }
}

/* Copies head's image into follower; returns its version. The image in pieces, as a head
 * sends it down its chain (ts_part_image_pieces), joins into the same bytes. */
static uint64_t replicate(struct ts_part *head, struct ts_part *follower)
{
    size_t n = ts_part_image_bytes(head), at = 0;
    char *img = malloc(n), *joined = malloc(n), small[TS_PART_IMAGE_SMALL];
    struct iovec pieces[4];
    uint64_t v, pv;

    assert_int_equal(ts_part_image(head, img, n, &v, NULL), TS_OK);
    assert_int_equal(ts_part_image_pieces(head, small, pieces, &pv, NULL), TS_OK);
    assert_int_equal(pv, v);
    for (int i = 0; i < 4; i++) {
        assert_true(at + pieces[i].iov_len <= n);
        memcpy(joined + at, pieces[i].iov_base, pieces[i].iov_len);
        at += pieces[i].iov_len;
    }
    assert_int_equal(at, n);
    assert_memory_equal(joined, img, n);
    /* Every other time, the values apart (a chain link that maps the head's values): the
     * pieces but the values, joined, and the values where they lie. */
    if (v % 2) {
        at = 0;
        for (int i = 0; i < 4; i++)
            if (i != 1) {
                memcpy(joined + at, pieces[i].iov_base, pieces[i].iov_len);
                at += pieces[i].iov_len;
            }
        assert_int_equal(ts_part_load_image_split(follower, joined, at, pieces[1].iov_base,
                                                  NULL), TS_OK);
    } else {
        assert_int_equal(ts_part_load_image(follower, img, n, NULL), TS_OK);
    }
    free(joined);
    free(img);
    return v;
}

static void same_bits(struct ts_part *a, struct ts_part *b)
{
    size_t n = ts_part_image_bytes(a);
    char *x = malloc(n), *y = malloc(n);
    uint64_t va, vb;

    assert_int_equal(ts_part_image(a, x, n, &va, NULL), TS_OK);
    assert_int_equal(ts_part_image(b, y, n, &vb, NULL), TS_OK);
    assert_int_equal(va, vb);
    assert_memory_equal(x, y, n);   /* values, optimizer state, overflow flags */
    free(x);
    free(y);
}

/* The head trains; the follower gets its image after every step; then the head "dies" in the
 * middle of a step (two ranks had pushed to it), the follower takes the step from every rank
 * again and ends where a partition that never failed ends. */
static void follower_takes_over_bit_exact(void **state)
{
    struct ts_job j = job(true, "adam:lr=0.01", TS_MODE_BSP);
    struct ts_part *head = mk(&j, 1, N), *follower = mk(&j, 1, N), *ref = mk(&j, 1, N);
    static int64_t g[N];
    bool applied;

    (void)state;
    for (uint64_t s = 0; s < 4; s++) {
        step(head, s);
        step(ref, s);
        assert_int_equal(replicate(head, follower), s + 1);
        same_bits(head, follower);
    }
    /* Step 4: ranks 0 and 1 push to the head, which then dies before applying it. A rank
     * also pushed to the follower before the failover was noticed: the next image drops it. */
    for (uint32_t r = 0; r < 2; r++) {
        grad(r, 4, g);
        assert_int_equal(push(head, r, 4, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
    }
    assert_int_equal(push(follower, 0, 4, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
    assert_int_equal(replicate(head, follower), 4);   /* the resend of version 4 */
    ts_part_free(head);
    for (uint64_t s = 4; s < 6; s++) {
        step(follower, s);
        step(ref, s);
    }
    same_bits(follower, ref);
    assert_int_equal(ts_part_version(follower), 6);
    ts_part_free(follower);
    ts_part_free(ref);
}

/* Each refused image names what does not match and leaves the follower as it was. */
static void bad_images_change_nothing(void **state)
{
    struct ts_job j = job(true, "momentum:lr=0.1,momentum=0.9", TS_MODE_BSP);
    struct ts_job sgd = job(true, "sgd:lr=0.1", TS_MODE_BSP);
    struct ts_job ssp = job(false, "sgd:lr=0.1", TS_MODE_SSP);
    struct ts_part *head = mk(&j, 1, N), *follower = mk(&j, 1, N);
    struct ts_part *other = mk(&j, 2, N), *shorter = mk(&j, 1, N - 1), *plain = mk(&sgd, 1, N);
    struct ts_part *async = mk(&ssp, 1, N);
    size_t n = ts_part_image_bytes(head);
    char *img = malloc(n), *before = malloc(n), *after = malloc(n);
    struct ts_err e = { 0 };
    uint64_t v;

    (void)state;
    step(head, 0);
    step(head, 1);
    assert_int_equal(ts_part_image(head, img, n, &v, NULL), TS_OK);
    assert_int_equal(v, 2);
    assert_int_equal(ts_part_image(head, img, n - 1, &v, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "room"));
    {   /* SSP and ASP have no pieces to send: every push changes their values */
        char small[TS_PART_IMAGE_SMALL];
        struct iovec pieces[4];
        memset(&e, 0, sizeof(e));
        assert_int_equal(ts_part_image_pieces(async, small, pieces, &v, &e), TS_EINVAL);
        assert_non_null(strstr(e.msg, "take the image with ts_part_image"));
    }

    struct { struct ts_part *to; size_t n; ts_status want; const char *says; } cases[] = {
        { other, n, TS_EINVAL, "not this one" },
        { shorter, n, TS_EINVAL, "not this one" },
        { plain, n, TS_EINVAL, "state_floats" },
        { follower, n - 1, TS_EINVAL, "bytes, want" },
        { follower, 10, TS_EINVAL, "shorter than its header" },
        { async, n, TS_EINVAL, "this partition's job is ssp" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t m = ts_part_image_bytes(cases[k].to);
        char *b = malloc(m + 1), *c = malloc(m + 1);
        uint64_t vb = 0;

        memset(&e, 0, sizeof(e));
        assert_int_equal(ts_part_image(cases[k].to, b, m, &vb, NULL), TS_OK);
        assert_int_equal(ts_part_load_image(cases[k].to, img, cases[k].n, &e), cases[k].want);
        if (!strstr(e.msg, cases[k].says))
            fail_msg("case %zu: '%s' does not say '%s'", k, e.msg, cases[k].says);
        assert_int_equal(ts_part_image(cases[k].to, c, m, &vb, NULL), TS_OK);
        assert_memory_equal(b, c, m);
        free(b);
        free(c);
    }
    /* A bad magic, and an image older than the follower. */
    memset(&e, 0, sizeof(e));
    img[0] ^= 1;
    assert_int_equal(ts_part_load_image(follower, img, n, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "magic"));
    img[0] ^= 1;
    step(follower, 0);
    step(follower, 1);
    step(follower, 2);
    assert_int_equal(ts_part_image(follower, before, n, &v, NULL), TS_OK);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_load_image(follower, img, n, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "older than the 3 held here"));
    assert_int_equal(ts_part_image(follower, after, n, &v, NULL), TS_OK);
    assert_memory_equal(before, after, n);
    free(img);
    free(before);
    free(after);
    ts_part_free(head);
    ts_part_free(follower);
    ts_part_free(other);
    ts_part_free(shorter);
    ts_part_free(plain);
    ts_part_free(async);
}

/* ASP (float) push of rank r at step s to p, flagged as a retry or not. */
static ts_status async_push(struct ts_part *p, uint32_t r, uint64_t s, bool retry)
{
    float g[N];
    struct ts_push in = { .rank = r, .step = s, .encoding = TS_ENC_RAW, .payload = g,
                          .bytes = sizeof(g), .retry = retry };
    bool applied;

    for (int i = 0; i < N; i++)
        g[i] = (float)((i % 7) - 3) * 1e-3f * (float)(r + 1) + (float)s * 1e-5f;
    return ts_part_push(p, &in, &applied, NULL);
}

/* SSP and ASP: every push is an update, and its image carries each rank's clock. Images of
 * pushes applied one after another may arrive out of order: the older one changes nothing.
 * The head dies having applied a push the chain never got: on the promoted follower, each
 * rank sends its last step again flagged as a retry, and the one it holds (a rank's clock
 * past the step) is acknowledged without being added, the lost one applied. Every push
 * counts once, in the order of a partition that never failed. */
static void async_images_carry_clocks_and_retries_apply_once(void **state)
{
    struct ts_job j = job(false, "momentum:lr=0.1,momentum=0.9", TS_MODE_ASP);
    struct ts_part *head = mk(&j, 1, N), *follower = mk(&j, 1, N), *ref = mk(&j, 1, N);
    size_t n = ts_part_image_bytes(head);
    char *older = malloc(n), *newer = malloc(n);
    uint64_t v, lo, hi;

    (void)state;
    for (uint32_t r = 0; r < W; r++) {   /* step 0 of each rank */
        assert_int_equal(async_push(head, r, 0, false), TS_OK);
        assert_int_equal(async_push(ref, r, 0, false), TS_OK);
    }
    assert_int_equal(async_push(head, 0, 1, false), TS_OK);
    assert_int_equal(async_push(ref, 0, 1, false), TS_OK);
    assert_int_equal(ts_part_image(head, older, n, &v, NULL), TS_OK);
    assert_int_equal(v, W + 1);
    assert_int_equal(async_push(head, 1, 1, false), TS_OK);   /* never reaches the chain */
    assert_int_equal(ts_part_load_image(follower, older, n, NULL), TS_OK);
    {   /* a newer image, then an older one: the older one is already held */
        struct ts_part *f2 = mk(&j, 1, N);
        assert_int_equal(ts_part_image(head, newer, n, &v, NULL), TS_OK);
        assert_int_equal(ts_part_load_image(f2, newer, n, NULL), TS_OK);
        assert_int_equal(ts_part_load_image(f2, older, n, NULL), TS_OK);
        same_bits(head, f2);
        ts_part_free(f2);
    }
    ts_part_free(head);
    ts_part_steps(follower, &lo, &hi);
    assert_int_equal(lo, 1);   /* the clocks came with the image: ranks at 2, 1, 1 */
    assert_int_equal(hi, 2);
    assert_int_equal(async_push(follower, 0, 1, true), TS_OK);   /* held: a duplicate */
    assert_int_equal(ts_part_version(follower), W + 1);
    assert_int_equal(async_push(follower, 1, 1, true), TS_OK);   /* lost with the head */
    assert_int_equal(async_push(ref, 1, 1, false), TS_OK);
    assert_int_equal(async_push(follower, 2, 1, false), TS_OK);
    assert_int_equal(async_push(ref, 2, 1, false), TS_OK);
    /* Not a retry: a step below the rank's clock is refused, nothing changed. */
    assert_int_equal(async_push(follower, 2, 0, false), TS_ESTATE);
    same_bits(follower, ref);
    assert_int_equal(ts_part_version(follower), 2 * W);
    free(older);
    free(newer);
    ts_part_free(follower);
    ts_part_free(ref);
}

/* Held: the applied update waits for its publication, and no further. */
static void held_updates_wait_for_publish(void **state)
{
    struct ts_job j = job(true, "sgd:lr=0.5", TS_MODE_REDUCE);
    struct ts_part *p = mk(&j, 0, N);
    float out[N];
    struct ts_err e = { 0 };
    uint64_t v;

    (void)state;
    ts_part_hold(p, true);
    step(p, 0);
    assert_int_equal(ts_part_version(p), 1);
    assert_int_equal(ts_part_visible(p), 0);
    assert_int_equal(read_at(p, 1, 30, out, &v, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "chain did not hold it"));
    ts_part_publish(p, 7);    /* never past what is applied */
    assert_int_equal(ts_part_visible(p), 1);
    assert_int_equal(read_at(p, 1, 30, out, &v, NULL), TS_OK);
    assert_int_equal(v, 1);
    step(p, 1);
    assert_int_equal(ts_part_visible(p), 1);
    ts_part_hold(p, false);   /* unheld: all is visible */
    assert_int_equal(ts_part_visible(p), 2);
    assert_int_equal(read_at(p, 2, 30, out, &v, NULL), TS_OK);
    ts_part_free(p);
}

/* The snapshot a rollback loads: the values and state saved from another partition. */
struct saved {
    float *value, *state;
    size_t nv, ns;
};

static ts_status load_saved(void *ctx, float *value, float *state, uint64_t *updates,
                           struct ts_err *err)
{
    struct saved *s = ctx;

    (void)err;
    (void)updates;
    memcpy(value, s->value, s->nv * sizeof(float));
    memcpy(state, s->state, s->ns * sizeof(float));
    return TS_OK;
}

/* A pull of generation 0 for a version that never comes, in its own thread. */
struct waiting_pull {
    struct ts_part *p;
    uint64_t want;
    ts_status st;
    int64_t ms;   /* how long it waited */
};

static void *pull_waits(void *arg)
{
    struct waiting_pull *w = arg;
    struct ts_pull_info info;
    float *out = malloc(N * sizeof(float));
    int64_t t0 = ts_now_ms();

    w->st = ts_part_pull(w->p, 0, w->want, 0, 60000, NULL, out, &info, NULL);
    w->ms = ts_now_ms() - t0;
    free(out);
    return NULL;
}

static void rollback_goes_back_and_refuses_what_came_before(void **state)
{
    struct ts_job j = job(true, "adam:lr=0.01", TS_MODE_BSP);
    struct ts_part *p = mk(&j, 0, N), *straight = mk(&j, 0, N), *follower = mk(&j, 0, N);
    struct saved snap = { malloc(N * sizeof(float)), malloc(2 * N * sizeof(float)), N, 2 * N };
    size_t n = ts_part_image_bytes(p);
    void *old = malloc(n);
    static int64_t g[N];
    struct ts_err e = { 0 };
    bool applied;
    uint64_t v;

    (void)state;
    for (uint64_t s = 0; s < 3; s++) {
        step(p, s);
        step(straight, s);
    }
    memcpy(snap.value, ts_part_values(p), N * sizeof(float));
    assert_int_equal(ts_part_image(p, old, n, &v, NULL), TS_OK);   /* at 3, of rollback 0 */
    memcpy(snap.state, (const char *)old + TS_PART_IMAGE_HDR + N * sizeof(float),
           2 * N * sizeof(float));
    step(p, 3);
    step(p, 4);
    grad(0, 5, g);   /* rank 0 pushed step 5, then the job went back to step 3 */
    assert_int_equal(push(p, 0, 5, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
    /* Rank 0 waits for version 6, which the rollback makes never come: the wait ends. */
    struct waiting_pull w = { .p = p, .want = 6 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pull_waits, &w), 0);
    usleep(50 * 1000);
    assert_int_equal(ts_part_rollback(p, 3, 1, load_saved, &snap, NULL), TS_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.st, TS_EROLLBACK);
    assert_true(w.ms < 10000);
    assert_int_equal(ts_part_version(p), 3);
    assert_int_equal(ts_part_visible(p), 3);
    ts_part_set_generation(straight, 1);   /* the images differ only there */
    same_bits(p, straight);
    ts_part_set_generation(straight, 0);
    /* A push made before the rollback (generation 0) is refused, nothing changed. */
    grad(0, 3, g);
    assert_int_equal(push(p, 0, 3, TS_ENC_FIXED, g, sizeof(g), &applied, &e), TS_EROLLBACK);
    assert_non_null(strstr(e.msg, "before its job went back"));
    assert_int_equal(ts_part_version(p), 3);
    /* So is a pull, even of a version the partition holds. */
    float *seen = malloc(N * sizeof(float));
    struct ts_pull_info info;
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_pull(p, 0, 3, 0, 10, NULL, seen, &info, &e), TS_EROLLBACK);
    assert_non_null(strstr(e.msg, "pull of tensor 2 partition 0: made before"));
    assert_int_equal(ts_part_pull(p, 0, 3, 1, 10, NULL, seen, &info, NULL), TS_OK);
    assert_memory_equal(seen, snap.value, N * sizeof(float));
    free(seen);
    /* An image of before is refused by a copy that went back (it is of generation 0). */
    ts_part_set_generation(follower, 1);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_part_load_image(follower, old, n, &e), TS_EROLLBACK);
    assert_non_null(strstr(e.msg, "at rollback 0"));
    /* Training on from step 3 with the new generation reaches the straight run's bits. */
    for (uint64_t s = 3; s < 6; s++) {
        for (uint32_t r = 0; r < W; r++) {
            struct ts_push in = { .rank = r, .step = s, .encoding = TS_ENC_FIXED, .payload = g,
                                  .bytes = sizeof(g), .gen = 1 };
            grad(r, s, g);
            assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
        }
        step(straight, s);
    }
    assert_memory_equal(ts_part_values(p), ts_part_values(straight), N * sizeof(float));
    free(old);
    free(snap.value);
    free(snap.state);
    ts_part_free(p);
    ts_part_free(straight);
    ts_part_free(follower);
}

/* Rank r's pull of version want into out; its status. */
static ts_status pull_as(struct ts_part *p, uint32_t r, uint64_t want, float *out,
                         struct ts_err *e)
{
    struct ts_pull_info info;
    return ts_part_pull(p, r, want, 0, 30, NULL, out, &info, e);
}

/* A reduce partition lost with every copy: ranks 0 and 1 had pulled version 2, rank 2 only
 * version 1. A fresh copy seeded by them is at version 2 with the values rank 0 sent, rank 2
 * pulls them, and the next step ends where the partition that was never lost does. Reports
 * that contradict each other are refused, nothing changed; a version no rank sent the values
 * of, where a rank needs them, fails; versions of 0 need none. */
static void reduce_partition_seeded_by_its_ranks(void **state)
{
    struct ts_job j = job(true, "sgd:lr=0.5", TS_MODE_REDUCE);
    struct ts_part *ref = mk(&j, 0, N), *p = mk(&j, 0, N), *q = mk(&j, 0, N);
    float v1[N], v2[N], out[N], bad[N];
    static int64_t g[N];
    struct ts_err e = { 0 };
    bool applied;
    char img[TS_PART_IMAGE_HDR + N * sizeof(float) + W];
    uint64_t v;

    (void)state;
    step(ref, 0);
    assert_int_equal(pull_as(ref, 2, 1, v1, NULL), TS_OK);
    step(ref, 1);
    assert_int_equal(pull_as(ref, 0, 2, v2, NULL), TS_OK);
    assert_int_equal(ts_part_seed_begin(p, 1, NULL), TS_OK);
    assert_true(ts_part_seeding(p));
    e = (struct ts_err){ 0 };
    assert_int_equal(pull_as(p, 2, 2, out, &e), TS_ETIMEDOUT);
    assert_non_null(strstr(e.msg, "0 of 3 did"));
    assert_int_equal(ts_part_image(p, img, sizeof(img), &v, NULL), TS_EUNAVAIL);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_part_seed(p, W, 2, v2, false, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "rank"));
    assert_int_equal(ts_part_seed(p, 2, 1, v1, false, NULL), TS_OK);
    assert_int_equal(ts_part_seed(p, 0, 2, v2, false, NULL), TS_OK);
    assert_int_equal(ts_part_seed(p, 0, 2, v2, false, NULL), TS_OK);   /* said twice */
    memcpy(bad, v2, sizeof(bad));
    bad[7] += 1.0f;
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_part_seed(p, 1, 2, bad, false, &e), TS_ECORRUPT);
    assert_non_null(strstr(e.msg, "values"));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_part_seed(p, 1, 3, NULL, false, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "version"));
    assert_true(ts_part_seeding(p));
    /* Rank 1 says it with its push of step 2: the last word, then the push counts. */
    grad(1, 2, g);
    assert_int_equal(push(p, 1, 2, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
    assert_false(ts_part_seeding(p));
    assert_int_equal(ts_part_version(p), 2);
    assert_int_equal(pull_as(p, 2, 2, out, NULL), TS_OK);
    assert_memory_equal(out, v2, sizeof(v2));
    for (uint32_t r = 0; r < W; r += 2) {
        grad(r, 2, g);
        assert_int_equal(push(p, r, 2, TS_ENC_FIXED, g, sizeof(g), &applied, NULL), TS_OK);
    }
    step(ref, 2);
    same_bits(p, ref);
    /* Ranks 0 and 1 hold version 2 but sent no values; rank 2 needs them. The cluster runs
     * two replicas: the advice names three, not the two it has. */
    assert_int_equal(ts_part_seed_begin(q, 2, NULL), TS_OK);
    assert_int_equal(ts_part_seed(q, 0, 2, NULL, false, NULL), TS_OK);
    assert_int_equal(ts_part_seed(q, 1, 2, NULL, false, NULL), TS_OK);
    assert_int_equal(ts_part_seed(q, 2, 1, v1, false, NULL), TS_OK);
    assert_true(ts_part_seeding(q));
    e = (struct ts_err){ 0 };
    assert_int_equal(pull_as(q, 2, 2, out, &e), TS_ESTATE);
    assert_non_null(strstr(e.msg, "no rank that pulled its version 2"));
    assert_non_null(strstr(e.msg, "runs --replicas 2"));
    assert_non_null(strstr(e.msg, "--replicas 3"));
    assert_null(strstr(e.msg, "2 or more"));
    /* Every rank at version 0: nothing to send, zeros. */
    assert_int_equal(ts_part_seed_begin(q, 1, NULL), TS_OK);
    for (uint32_t r = 0; r < W; r++)
        assert_int_equal(ts_part_seed(q, r, 0, NULL, false, NULL), TS_OK);
    assert_int_equal(pull_as(q, 1, 0, out, NULL), TS_OK);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == 0.0f);
    assert_int_equal(ts_part_seed(q, 1, 0, NULL, false, NULL), TS_OK);   /* seeded: no-op */
    ts_part_free(q);
    ts_part_free(p);
    ts_part_free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(follower_takes_over_bit_exact),
        cmocka_unit_test(bad_images_change_nothing),
        cmocka_unit_test(async_images_carry_clocks_and_retries_apply_once),
        cmocka_unit_test(held_updates_wait_for_publish),
        cmocka_unit_test(rollback_goes_back_and_refuses_what_came_before),
        cmocka_unit_test(reduce_partition_seeded_by_its_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
