/* test_table_redo.c - lib/table's redo log (issue 48, deliverable 3): a table replayed from
 * its log is the table that wrote it, bit for bit, through steps, the row lifetime's sweeps,
 * a rollback's reset and load, a checkpoint, a torn end, a refusing disk, and a process
 * killed with SIGKILL in the middle of its steps. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "table/internal.h"
#include "table/redo.h"
#include "table/tier.h"

#define DIM 8
#define WORKERS 2
#define STEPS 30

static char dir[64], tdir[80], ldir[80];
static struct ts_tier *tier;

static int setup(void **state)
{
    struct ts_err e = { 0 };

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ts-redo-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(tdir, sizeof(tdir), "%s/tier", dir);
    snprintf(ldir, sizeof(ldir), "%s/log", dir);
    if (ts_tier_open(tdir, &tier, &e))
        fail_msg("ts_tier_open: %s", e.msg);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    ts_tier_close(tier);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct ts_job job(void)
{
    struct ts_job j;

    assert_int_equal(ts_job_init(&j, "redo-job", WORKERS, true, "sgd", 64, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_BSP, 0, NULL), TS_OK);
    return j;
}

/* A table of the test's configuration; ttl 4 steps when asked (sweeps in the log). */
static struct ts_table *mk(const struct ts_job *j, struct ts_table_budget *b, const char *name,
                           bool ttl)
{
    struct ts_table_cfg c = { .name = name, .dim = DIM, .max_id = 1u << 20,
                              .init = "normal:0.1", .seed = 7, .optimizer = "adagrad:lr=0.05",
                              .ttl_steps = ttl ? 4 : 0 };
    struct ts_table *t;
    struct ts_err e = { 0 };

    if (ts_table_create(j, &c, b, &t, &e))
        fail_msg("ts_table_create: %s", e.msg);
    return t;
}

/* Rank r's push of step s: the same ids and gradients for every run of the test. */
static size_t batch(uint64_t s, uint32_t r, uint64_t *ids, float *g)
{
    unsigned seed = (unsigned)(s * 31 + r * 7 + 1);
    size_t n = 0;

    for (uint64_t id = (s * 13 + r * 5) % 50; id < 600; id += 1 + (uint64_t)(rand_r(&seed) % 9))
        ids[n++] = id;
    for (size_t i = 0; i < n * DIM; i++)
        g[i] = (float)((rand_r(&seed) % 2001) - 1000) / 997.0f;
    return n;
}

static void step(struct ts_table *const *ts, size_t nt, uint64_t s)
{
    static uint64_t ids[700];
    static float g[700 * DIM];
    struct ts_err e = { 0 };
    bool applied;

    for (uint32_t r = 0; r < WORKERS; r++) {
        struct ts_row_push in = { .rank = r, .step = s, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_FIXED_F32 };

        in.n = batch(s, r, ids, g);
        for (size_t k = 0; k < nt; k++)
            if (ts_table_push(ts[k], &in, &applied, &e))
                fail_msg("push of step %" PRIu64 ": %s", s, e.msg);
    }
}

static void hash(struct ts_table *t, char out[65])
{
    struct ts_err e = { 0 };

    if (ts_table_sha256(&t, 1, out, &e))
        fail_msg("sha256: %s", e.msg);
}

/* a and b hold the same rows: ids, values, state, counts, and step. */
static void same(struct ts_table *a, struct ts_table *b)
{
    char ha[65], hb[65];
    uint64_t *ia, *ib;
    size_t na, nb;
    float va[3 * DIM], vb[3 * DIM];
    struct ts_row_meta ma, mb;
    struct ts_err e = { 0 };

    assert_int_equal(ts_table_step(a), ts_table_step(b));
    assert_int_equal(ts_table_count(a), ts_table_count(b));
    hash(a, ha);
    hash(b, hb);
    assert_string_equal(ha, hb);
    assert_int_equal(ts_table_ids(a, ts_table_step(a), 100, &ia, &na, &e), TS_OK);
    assert_int_equal(ts_table_ids(b, ts_table_step(b), 100, &ib, &nb, &e), TS_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, na * sizeof(*ia));
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(ts_table_row(a, ia[i], va, va + DIM, &ma, &e), TS_OK);
        assert_int_equal(ts_table_row(b, ia[i], vb, vb + DIM, &mb, &e), TS_OK);
        assert_memory_equal(va, vb, 2 * DIM * sizeof(float));   /* values and adagrad state */
        assert_int_equal(ma.updates, mb.updates);
        assert_int_equal(ma.step, mb.step);
    }
    free(ia);
    free(ib);
}

/* The replay's tables, by key. */
struct into {
    const char *keys[4];
    struct ts_table *t[4];
    size_t n, dropped, records;
};

static ts_status into_fn(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct into *in = ctx;

    in->records++;
    for (size_t k = 0; k < in->n; k++)
        if (!strcmp(in->keys[k], r->key)) {
            in->dropped += r->kind == TS_REDO_DROP;
            return ts_table_redo_apply(in->t[k], r, err);
        }
    return ts_err_set(err, TS_ENOTFOUND, "no table '%s'", r->key);
}

static struct ts_redo *open_log(void)
{
    struct ts_redo *redo;
    struct ts_err e = { 0 };

    if (ts_redo_open(ldir, &redo, &e))
        fail_msg("ts_redo_open: %s", e.msg);
    return redo;
}

static void attach(struct ts_table *t, struct ts_redo *redo, const char *key)
{
    struct ts_err e = { 0 };

    if (ts_table_redo(t, redo, key, &e))
        fail_msg("ts_table_redo: %s", e.msg);
}

static void synced(struct ts_table *t)
{
    struct ts_err e = { 0 };

    if (ts_table_redo_wait(t, 5000, &e))
        fail_msg("ts_table_redo_wait: %s", e.msg);
}

/* Files in the log's directory whose name starts with prefix. */
static size_t files(const char *prefix)
{
    DIR *d = opendir(ldir);
    struct dirent *de;
    size_t n = 0;

    assert_non_null(d);
    while ((de = readdir(d)))
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Two tables written through steps, a sweep every 4 steps, one attached late, a rollback
 * (reset, load of a capture, set step), and a checkpoint: a replay into tables held in
 * memory and into tables on a small disk tier gives each its writer's rows; trained on, they
 * stay equal. */
static void t_replay_gives_the_same_tables(void **state)
{
    struct ts_job j = job();
    struct ts_table_budget mem, small;
    struct ts_table *live[2], *back[2], *cold[2];
    struct ts_table_capture cap;
    struct ts_redo *redo = open_log();
    struct ts_redo_replayed got;
    struct ts_redo_stats rs;
    struct ts_err e = { 0 };
    bool armed, ready;

    (void)state;
    ts_table_budget_init(&mem, 0);
    ts_table_budget_init(&small, 0);
    small.tier = tier;
    live[0] = mk(&j, &mem, "xa", true);
    live[1] = mk(&j, &mem, "xb", false);
    attach(live[0], redo, "job/xa");
    assert_int_equal(ts_table_arm(live[0], 12, true, &armed, &e), TS_OK);
    for (uint64_t s = 0; s < STEPS; s++) {
        if (s == 10)   /* a table attached with rows: its image first */
            attach(live[1], redo, "job/xb");
        step(live, 2, s);
        if (s == 12) {
            assert_int_equal(ts_table_capture_take(live[0], 12, &cap, &ready, &e), TS_OK);
            assert_true(ready);
        }
        if (s == 20) {   /* a rollback to the capture of step 12 */
            ts_table_reset(live[0]);
            assert_int_equal(ts_table_load(live[0], cap.records, cap.n, NULL, NULL, &e),
                             TS_OK);
            assert_int_equal(ts_table_set_step(live[0], 21, &e), TS_OK);
        }
        if (s == 24) {
            assert_int_equal(ts_redo_checkpoint(redo, &e), TS_OK);
        }
    }
    free(cap.records);
    synced(live[0]);
    synced(live[1]);
    ts_redo_stats(redo, &rs);
    assert_int_equal(rs.synced, rs.records);
    assert_string_equal(rs.failure, "");
    assert_int_equal(files("redo-"), 1);   /* the checkpoint cut the first generation */
    assert_int_equal(files("image-"), 2);  /* and its three images: the checkpoint's two */
    ts_redo_close(redo);

    redo = open_log();
    back[0] = mk(&j, &mem, "xa", true);
    back[1] = mk(&j, &mem, "xb", false);
    cold[0] = mk(&j, &small, "xa", true);
    cold[1] = mk(&j, &small, "xb", false);
    small.limit = 40 * ts_table_row_bytes(cold[0]);   /* a tenth of the rows in memory */
    struct into in = { .keys = { "job/xa", "job/xb" }, .t = { back[0], back[1] }, .n = 2 };
    assert_int_equal(ts_redo_replay(redo, into_fn, &in, &got, &e), TS_OK);
    assert_int_equal(got.files, 1);
    assert_int_equal(got.torn, 0);
    assert_int_equal(got.records, in.records);
    struct into in2 = { .keys = { "job/xa", "job/xb" }, .t = { cold[0], cold[1] }, .n = 2 };
    assert_int_equal(ts_redo_replay(redo, into_fn, &in2, NULL, &e), TS_OK);
    for (int k = 0; k < 2; k++) {
        same(live[k], back[k]);
        same(live[k], cold[k]);
    }
    {
        struct ts_table_tiers st;

        ts_table_tiers(cold[0], &st);
        assert_true(st.evictions > 100);   /* the replay went through the disk tier */
    }
    for (uint64_t s = STEPS; s < STEPS + 6; s++) {
        step(live, 2, s);
        step(back, 2, s);
        step(cold, 2, s);
    }
    for (int k = 0; k < 2; k++) {
        same(live[k], back[k]);
        same(live[k], cold[k]);
    }
    ts_table_free(live[0]);
    ts_table_free(live[1]);
    for (int k = 0; k < 2; k++) {
        ts_table_free(back[k]);
        ts_table_free(cold[k]);
    }
    ts_redo_close(redo);
}

/* The newest generation's last records torn off (a crash in the middle of a write): open
 * cuts them, and the replay ends at the last whole step, the writer's rows as of then. An
 * older generation that fails its checksum is refused, naming the file. */
static void t_torn_end_is_cut(void **state)
{
    struct ts_job j = job();
    struct ts_table_budget mem;
    struct ts_table *t, *ref, *back;
    struct ts_redo *redo = open_log();
    struct ts_redo_replayed got;
    struct ts_err e = { 0 };
    char path[300], want[65], have[65];
    struct stat sb;
    off_t before;

    (void)state;
    ts_table_budget_init(&mem, 0);
    t = mk(&j, &mem, "xt", false);
    ref = mk(&j, &mem, "xt", false);
    attach(t, redo, "xt");
    for (uint64_t s = 0; s < 8; s++) {
        struct ts_table *both[2] = { t, ref };

        step(both, s < 7 ? 2 : 1, s);   /* ref stops at step 7 */
        synced(t);
        if (s == 6) {
            assert_int_equal(ts_redo_checkpoint(redo, &e), TS_OK);   /* a second generation */
            synced(t);
        }
    }
    hash(ref, want);
    ts_redo_close(redo);
    snprintf(path, sizeof(path), "%s/redo-%016x.log", ldir, 2);
    assert_int_equal(stat(path, &sb), 0);
    before = sb.st_size;
    assert_int_equal(truncate(path, before - 100), 0);   /* step 7's record, torn */

    redo = open_log();
    back = mk(&j, &mem, "xt", false);
    struct into in = { .keys = { "xt" }, .t = { back }, .n = 1 };
    assert_int_equal(ts_redo_replay(redo, into_fn, &in, &got, &e), TS_OK);
    assert_true(got.torn > 0 && got.torn < (uint64_t)before);
    assert_int_equal(ts_table_step(back), 7);
    hash(back, have);
    assert_string_equal(have, want);
    same(ref, back);
    ts_redo_close(redo);   /* generation 3, empty, after the cut 2 */

    /* generation 2 is an older one now: a byte changed in it is refused by name */
    {
        int fd = open(path, O_RDWR);
        char c;

        assert_true(fd >= 0);
        assert_int_equal(pread(fd, &c, 1, 20), 1);
        c ^= 1;
        assert_int_equal(pwrite(fd, &c, 1, 20), 1);
        close(fd);
    }
    redo = open_log();
    ts_table_reset(back);
    struct into in2 = { .keys = { "xt" }, .t = { back }, .n = 1 };
    assert_int_equal(ts_redo_replay(redo, into_fn, &in2, NULL, &e), TS_ECORRUPT);
    assert_non_null(strstr(e.msg, "redo-0000000000000002.log"));
    assert_non_null(strstr(e.msg, "fails its checksum"));
    ts_redo_close(redo);
    /* an image the log names, gone: refused by name */
    snprintf(path, sizeof(path), "%s/image-%016x-%016x.rows", ldir, 2, 2);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/redo-%016x.log", ldir, 2);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/redo-%016x.log", ldir, 3);
    assert_int_equal(truncate(path, 0), 0);
    {   /* generation 4 made by the open above: an image record naming a missing file */
        struct ts_redo *w = open_log();
        struct ts_table *x = mk(&j, &mem, "xt", false);

        attach(x, w, "xt");
        synced(x);
        ts_table_free(x);
        ts_redo_close(w);
        snprintf(path, sizeof(path), "%s/image-%016x-%016x.rows", ldir, 5, 1);
        assert_int_equal(unlink(path), 0);
    }
    redo = open_log();
    ts_table_reset(back);
    ts_err_clear(&e);
    assert_int_equal(ts_redo_replay(redo, into_fn, &in2, NULL, &e), TS_ECORRUPT);
    assert_non_null(strstr(e.msg, "the image of 'xt' the log names is missing"));
    ts_redo_close(redo);
    ts_table_free(t);
    ts_table_free(ref);
    ts_table_free(back);
}

/* The file system refuses the log's writes (a file size limit: EFBIG, as ENOSPC would): a
 * wait says why with TS_EIO, the table goes on, and once writes are allowed again the records
 * go out, nothing lost: the replay is the table. */
static void t_refused_writes_lose_nothing(void **state)
{
    struct ts_job j = job();
    struct ts_table_budget mem;
    struct ts_table *t, *back;
    struct ts_redo *redo = open_log();
    struct ts_err e = { 0 };
    struct rlimit was, small;
    struct stat sb;
    char path[300];

    (void)state;
    ts_table_budget_init(&mem, 0);
    t = mk(&j, &mem, "xf", true);
    attach(t, redo, "xf");
    step(&t, 1, 0);
    synced(t);
    snprintf(path, sizeof(path), "%s/redo-%016x.log", ldir, 1);
    assert_int_equal(stat(path, &sb), 0);
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    small = was;
    small.rlim_cur = (rlim_t)sb.st_size + 1000;   /* less than a step's record */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    for (uint64_t s = 1; s < 6; s++)
        step(&t, 1, s);
    assert_int_equal(ts_table_redo_wait(t, 3000, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "the redo log in"));
    assert_non_null(strstr(e.msg, "File too large"));
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size <= (off_t)small.rlim_cur);   /* a record half written was cut */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    for (int i = 0; ts_table_redo_wait(t, 1000, &e) != TS_OK; i++) {   /* tried again */
        assert_true(i < 50);
        usleep(100 * 1000);
    }
    ts_redo_close(redo);
    signal(SIGXFSZ, SIG_DFL);

    redo = open_log();
    back = mk(&j, &mem, "xf", true);
    struct into in = { .keys = { "xf" }, .t = { back }, .n = 1 };
    assert_int_equal(ts_redo_replay(redo, into_fn, &in, NULL, &e), TS_OK);
    same(t, back);
    ts_redo_close(redo);
    ts_table_free(t);
    ts_table_free(back);
}

/* A process trains a table on a small disk tier with its log, says each step once the wait
 * for its record returned, and is killed with SIGKILL at a moment of the parent's choosing:
 * the replay holds every step it said, and is the table as of its step. */
static void t_killed_process_loses_nothing_waited_for(void **state)
{
    struct ts_job j = job();
    enum { MAX = 200 };
    static char want[MAX + 1][65];
    struct ts_table_budget mem;
    struct ts_table *ref;

    (void)state;
    ts_table_budget_init(&mem, 0);
    ref = mk(&j, &mem, "xk", true);
    hash(ref, want[0]);
    for (uint64_t s = 0; s < MAX; s++) {
        step(&ref, 1, s);
        hash(ref, want[s + 1]);
    }
    for (int trial = 0; trial < 3; trial++) {
        int fds[2];
        pid_t pid;
        uint64_t said = 0, got;
        char cmd[200];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ldir);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(pipe(fds), 0);
        if (!(pid = fork())) {   /* the shard */
            struct ts_table_budget small;
            struct ts_redo *redo;
            struct ts_table *t;
            struct ts_err e = { 0 };
            char kdir[100];

            close(fds[0]);
            ts_table_budget_init(&small, 0);
            snprintf(kdir, sizeof(kdir), "%s/ktier", dir);   /* a tier of its own */
            if (ts_tier_open(kdir, &small.tier, &e) || ts_redo_open(ldir, &redo, &e))
                _exit(2);
            t = mk(&j, &small, "xk", true);
            small.limit = 40 * ts_table_row_bytes(t);
            if (ts_table_redo(t, redo, "xk", &e))
                _exit(3);
            for (uint64_t s = 0; s < MAX; s++) {
                step(&t, 1, s);
                if (ts_table_redo_wait(t, 5000, &e))
                    _exit(4);
                if (write(fds[1], &s, sizeof(s)) != sizeof(s))
                    _exit(5);
            }
            pause();
            _exit(0);
        }
        close(fds[1]);
        uint64_t stop_at = 20 + (uint64_t)trial * 40;
        while (read(fds[0], &got, sizeof(got)) == sizeof(got)) {
            said = got + 1;   /* steps durable */
            if (got >= stop_at)
                break;
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fds[0]);
        assert_true(said > stop_at);

        struct ts_redo *redo = open_log();
        struct ts_table *back = mk(&j, &mem, "xk", true);
        struct into in = { .keys = { "xk" }, .t = { back }, .n = 1 };
        struct ts_err e = { 0 };
        char have[65];

        assert_int_equal(ts_redo_replay(redo, into_fn, &in, NULL, &e), TS_OK);
        assert_true(ts_table_step(back) >= said);   /* nothing it said is lost */
        hash(back, have);
        assert_string_equal(have, want[ts_table_step(back)]);
        ts_redo_close(redo);
        ts_table_free(back);
    }
    ts_table_free(ref);
}

static void t_refusals(void **state)
{
    struct ts_job j = job(), ja;
    struct ts_table_budget mem;
    struct ts_table *a, *b, *c;
    struct ts_redo *redo = open_log();
    struct ts_redo_rec r = { .kind = TS_REDO_STEP, .key = "x", .step = 5 };
    struct ts_err e = { 0 };

    (void)state;
    ts_table_budget_init(&mem, 0);
    a = mk(&j, &mem, "xa", false);
    b = mk(&j, &mem, "xb", false);
    attach(a, redo, "k");
    assert_int_equal(ts_table_redo(b, redo, "k", &e), TS_EEXIST);
    assert_non_null(strstr(e.msg, "key: 'k' is attached"));
    ts_err_clear(&e);
    assert_int_equal(ts_table_redo(a, redo, "k2", &e), TS_ESTATE);
    assert_int_equal(ts_table_redo(b, redo, "", &e), TS_EINVAL);
    assert_int_equal(ts_table_redo_apply(a, &r, &e), TS_ESTATE);   /* attached */
    ts_err_clear(&e);
    assert_int_equal(ts_table_redo_apply(b, &r, &e), TS_ECORRUPT);   /* step 5 at step 0 */
    assert_non_null(strstr(e.msg, "table 'xb': the redo log's step 5 does not follow"));
    assert_int_equal(ts_job_init(&ja, "redo-asp", 1, false, "sgd", 64, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&ja, TS_MODE_ASP, 0, NULL), TS_OK);
    c = mk(&ja, &mem, "xc", false);
    {   /* a second process on the same log is refused */
        pid_t pid = fork();

        if (!pid) {
            struct ts_redo *r2;
            struct ts_err e2 = { 0 };

            _exit(ts_redo_open(ldir, &r2, &e2) == TS_EIO &&
                  strstr(e2.msg, "another process holds it") ? 0 : 1);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    ts_err_clear(&e);
    assert_int_equal(ts_table_redo(c, redo, "c", &e), TS_ENOTSUP);
    assert_non_null(strstr(e.msg, "bsp only"));
    ts_table_free(a);   /* detached: its key free again */
    attach(b, redo, "k");
    ts_table_free(b);
    ts_table_free(c);
    ts_redo_close(redo);
}

/* ---- Blobs: dense partitions' images ---- */

#define PLEN 1000

static struct ts_part *mkpart(const struct ts_job *j, uint32_t index)
{
    struct ts_part *p;
    struct ts_err e = { 0 };

    if (ts_part_create(j, 0, "w", index, index * PLEN, PLEN, "normal:0.1", 7, 0, 0, NULL, &p,
                       &e))
        fail_msg("ts_part_create: %s", e.msg);
    return p;
}

/* Step s of p (every rank's push), its image logged under key; the record's number. */
static uint64_t part_step(struct ts_part *p, struct ts_redo *redo, const char *key, uint64_t s)
{
    static float g[PLEN];
    static uint8_t img[TS_PART_IMAGE_HDR + 4 * PLEN * 4 + TS_JOB_MAX_WORKERS];
    struct ts_err e = { 0 };
    uint64_t version, seq;
    bool applied;

    for (uint32_t r = 0; r < WORKERS; r++) {
        struct ts_push in = { .rank = r, .step = s, .encoding = TS_ENC_FIXED_F32,
                              .payload = g, .bytes = sizeof(g) };

        for (size_t i = 0; i < PLEN; i++)
            g[i] = (float)((int)((s * 7 + r * 3 + i) % 17) - 8) / 13.0f;
        if (ts_part_push(p, &in, &applied, &e))
            fail_msg("part push: %s", e.msg);
    }
    assert_true(applied);
    assert_int_equal(ts_part_image(p, img, sizeof(img), &version, &e), TS_OK);
    struct iovec iov[2] = { { img, 40 }, { img + 40, ts_part_image_bytes(p) - 40 } };
    assert_int_equal(ts_redo_put(redo, key, version, iov, 2, &seq, &e), TS_OK);
    return seq;
}

static void same_part(struct ts_part *a, struct ts_part *b)
{
    static uint8_t ia[TS_PART_IMAGE_HDR + 4 * PLEN * 4 + TS_JOB_MAX_WORKERS];
    static uint8_t ib[sizeof(ia)];
    uint64_t va, vb;

    assert_int_equal(ts_part_image(a, ia, sizeof(ia), &va, NULL), TS_OK);
    assert_int_equal(ts_part_image(b, ib, sizeof(ib), &vb, NULL), TS_OK);
    assert_int_equal(va, vb);
    assert_int_equal(ts_part_image_bytes(a), ts_part_image_bytes(b));
    assert_memory_equal(ia, ib, ts_part_image_bytes(a));
}

struct parts {
    struct ts_part *p[3];
    bool dropped[3];
    size_t blobs;
};

static ts_status parts_fn(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct parts *in = ctx;
    unsigned k;

    if (sscanf(r->key, "p/%u", &k) != 1 || k >= 3)
        return ts_err_set(err, TS_ENOTFOUND, "no partition '%s'", r->key);
    if (r->kind == TS_REDO_DROP) {
        in->dropped[k] = true;
        return TS_OK;
    }
    assert_int_equal(r->kind, TS_REDO_BLOB);
    assert_int_equal(r->rec, 1);
    in->blobs++;
    in->dropped[k] = false;
    return ts_part_load_image(in->p[k], r->records, r->n, err);
}

/* Three partitions' images after each step go to the log as blobs: p/0 steps throughout,
 * p/1 only before the checkpoint (its last image carried into the new generation, since the
 * older one is removed), p/2 forgotten before it (not carried; its drop replayed). A replay
 * loads the images into new partitions: the same bytes and versions as the live ones. */
static void t_blobs_carried_over_a_checkpoint(void **state)
{
    struct ts_job j = job();
    struct ts_part *live[3], *back[3];
    struct ts_redo *redo = open_log();
    struct ts_redo_replayed got;
    struct ts_err e = { 0 };
    uint64_t seq = 0;

    (void)state;
    for (uint32_t k = 0; k < 3; k++)
        live[k] = mkpart(&j, k);
    for (uint64_t s = 0; s < 12; s++) {
        seq = part_step(live[0], redo, "p/0", s);
        if (s < 5) {
            part_step(live[1], redo, "p/1", s);
            part_step(live[2], redo, "p/2", s);
        }
        if (s == 6) {
            ts_redo_forget(redo, "p/2");
            assert_int_equal(ts_redo_checkpoint(redo, &e), TS_OK);
        }
    }
    assert_int_equal(ts_redo_wait(redo, seq, 5000, &e), TS_OK);
    assert_int_equal(files("redo-"), 1);   /* the first generation is gone */
    ts_redo_close(redo);

    redo = open_log();
    struct parts in = { 0 };
    for (uint32_t k = 0; k < 3; k++)
        in.p[k] = back[k] = mkpart(&j, k);
    assert_int_equal(ts_redo_replay(redo, parts_fn, &in, &got, &e), TS_OK);
    assert_int_equal(got.files, 1);
    same_part(live[0], back[0]);
    same_part(live[1], back[1]);   /* carried: its step-4 image */
    assert_int_equal(ts_part_version(back[1]), 5);
    assert_int_equal(ts_part_version(back[2]), 0);   /* forgotten: nothing of it replayed */
    assert_false(in.dropped[0]);
    assert_int_equal(in.blobs, 2 + 12 - 7);   /* both carried, then p/0's steps 7 to 11 */
    ts_redo_close(redo);
    for (uint32_t k = 0; k < 3; k++) {
        ts_part_free(live[k]);
        ts_part_free(back[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(t_replay_gives_the_same_tables, setup, teardown),
        cmocka_unit_test_setup_teardown(t_torn_end_is_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(t_refused_writes_lose_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(t_killed_process_loses_nothing_waited_for, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(t_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(t_blobs_carried_over_a_checkpoint, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
