/* test_util.c - lib/util (errors, JSON writer, flags, job ids, port files, environment knobs)
 * and lib/rpc/status.c's mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <grpc/status.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc/rpc.h"
#include "util/err.h"
#include "util/file.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/knobs.h"
#include "util/launch.h"
#include "util/names.h"
#include "util/proc.h"

static void err_first_message_wins(void **state)
{
    struct ts_err e = { 0 };

    assert_int_equal(ts_err_set(&e, TS_EINVAL, "addr: %s", "required"), TS_EINVAL);
    assert_int_equal(ts_err_set(&e, TS_EIO, "later"), TS_EIO);
    assert_int_equal(e.code, TS_EINVAL);
    assert_string_equal(e.msg, "addr: required");
    ts_err_prefix(&e, "RegisterShard");
    assert_string_equal(e.msg, "RegisterShard: addr: required");
    assert_int_equal(ts_err_set(NULL, TS_ENOMEM, "x"), TS_ENOMEM);
    ts_err_clear(&e);
    assert_int_equal(e.code, TS_OK);
    assert_string_equal(e.msg, "");
    ts_err_prefix(&e, "nothing to prefix");
    assert_string_equal(e.msg, "");
    assert_string_equal(ts_status_name(TS_ESTALE), "ESTALE");
    assert_string_equal(ts_status_name((ts_status)999), "EUNKNOWN");
}

static bool ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), m = strlen(end);

    return n >= m && !strcmp(s + n - m, end);
}

/* A disk-full write under many layers of context: the cause, at the end, is what the reader
 * needs, and it once fell off the end ("store: write .../tmp/2b60cc35ff..."). */
static void err_deep_prefix_keeps_cause(void **state)
{
    struct ts_err e = { 0 };

    ts_err_set(&e, TS_EIO, "store: write /var/lib/tessera/store/tmp/2b60cc35ff0a4e1c9d"
               "7b3f2a1e0d9c8b.tmp: No space left on device");
    for (int i = 0; i < 40; i++)
        ts_err_prefix(&e, "layer %d of a deep call chain, tensor 'embedding.weight'", i);
    assert_int_equal(e.code, TS_EIO);
    assert_true(strlen(e.msg) < sizeof(e.msg));
    assert_true(ends_with(e.msg, "/tmp/2b60cc35ff0a4e1c9d7b3f2a1e0d9c8b.tmp: No space left "
                                 "on device"));
    assert_non_null(strstr(e.msg, "layer 39 of a deep call chain"));  /* the outermost */
    assert_non_null(strstr(e.msg, "..."));
    assert_null(strstr(strstr(e.msg, "...") + 3, "..."));  /* one cut, not one per layer */
}

/* A path longer than the message (and than the format buffer) is shortened in its middle:
 * its start, its last components and the cause after it stay. */
static void err_long_path_cut_in_middle(void **state)
{
    char path[2100], fit[256], word[700];
    struct ts_err e = { 0 };
    size_t n = 0;

    n += (size_t)snprintf(path + n, sizeof(path) - n, "/data");
    while (n < 2000)
        n += (size_t)snprintf(path + n, sizeof(path) - n, "/run-%04zu", n);
    snprintf(path + n, sizeof(path) - n, "/tmp/2b60cc35ff.tmp");
    ts_err_set(&e, TS_EIO, "store: write %s: %s", path, "No space left on device");
    assert_true(strncmp(e.msg, "store: write /data/run-", 23) == 0);
    assert_true(ends_with(e.msg, "/tmp/2b60cc35ff.tmp: No space left on device"));
    assert_non_null(strstr(e.msg, ".../run-"));  /* cut where a component begins */

    /* The SDK's 256-byte message: the same, from an error of the full size. */
    ts_str_fit(fit, sizeof(fit), e.msg);
    assert_true(strlen(fit) < sizeof(fit));
    assert_true(strncmp(fit, "store: write /data/", 19) == 0);
    assert_true(ends_with(fit, "/tmp/2b60cc35ff.tmp: No space left on device"));

    /* One word with nowhere to break: cut inside it, the ends kept. */
    memset(word, 'a', sizeof(word) - 1);
    word[sizeof(word) - 1] = '\0';
    ts_err_clear(&e);
    ts_err_set(&e, TS_EIO, "open %s: Permission denied", word);
    assert_true(strncmp(e.msg, "open aaaa", 9) == 0);
    assert_true(ends_with(e.msg, "aaa...aaaa: Permission denied") ||
                ends_with(e.msg, "aaaa: Permission denied"));
    assert_non_null(strstr(e.msg, "a...a"));

    /* What fits is kept whole; a cut never splits a UTF-8 character. */
    ts_str_fit(fit, 8, "1234567");
    assert_string_equal(fit, "1234567");
    memset(word, 0, sizeof(word));
    for (int i = 0; i < 200; i++)
        memcpy(word + 2 * i, "\xc3\xa9", 2);  /* U+00E9, two bytes each */
    ts_str_fit(fit, 104, word);  /* both ends of the cut fall inside a character */
    assert_true(strlen(fit) <= 103);
    assert_true(strncmp(strstr(fit, "..."), "...\xc3\xa9", 5) == 0);
    assert_true(((unsigned char)strstr(fit, "...")[-1] & 0xC0) == 0x80 &&
                (unsigned char)strstr(fit, "...")[-2] == 0xc3);
}

static void json_writer(void **state)
{
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_uint(&j, "epoch", 7);
    ts_json_str(&j, "s", "a\"b\\c\n\x01");
    ts_json_arr(&j, "xs");
    ts_json_int(&j, NULL, -1);
    ts_json_num(&j, NULL, 0.5);
    ts_json_num(&j, NULL, 1.0 / 0.0);
    ts_json_obj(&j, NULL);
    ts_json_bool(&j, "ok", true);
    ts_json_end(&j);
    ts_json_end(&j);
    ts_json_arr(&j, "empty");
    ts_json_end(&j);
    ts_json_end(&j);
    assert_string_equal(j.buf, "{\"epoch\":7,\"s\":\"a\\\"b\\\\c\\u000a\\u0001\","
                               "\"xs\":[-1,0.5,null,{\"ok\":true}],\"empty\":[]}");
    ts_json_fini(&j);
}

static void flags_parse(void **state)
{
    int64_t n = 2;
    const char *s = NULL;
    bool b = false, help;
    const struct ts_flag f[] = {
        { "shards", TS_FLAG_INT, &n, "N", "", 1, 64 },
        { "dir", TS_FLAG_STR, &s, "DIR", "", 0, 0 },
        { "json", TS_FLAG_BOOL, &b, NULL, "", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    char *ok[] = { "--shards", "3", "--dir=/tmp/x", "--json", "pos" };
    char *pos[2];
    int npos = 2;
    struct ts_err e = { 0 };

    assert_int_equal(ts_flags_parse(f, 5, ok, pos, &npos, &help, &e), TS_OK);
    assert_int_equal(n, 3);
    assert_string_equal(s, "/tmp/x");
    assert_true(b);
    assert_false(help);
    assert_int_equal(npos, 1);
    assert_string_equal(pos[0], "pos");

    char *range[] = { "--shards", "65" };
    npos = 0;
    assert_int_equal(ts_flags_parse(f, 2, range, NULL, &npos, &help, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "--shards"));
    assert_non_null(strstr(e.msg, "1..64"));
    assert_int_equal(n, 3); /* unchanged */

    char *bad[][2] = { { "--shards", "x" }, { "--nope", "1" }, { "--json=1", "" },
                       { "extra", "" } };
    for (size_t i = 0; i < 4; i++) {
        ts_err_clear(&e);
        npos = 0;
        assert_int_equal(ts_flags_parse(f, bad[i][1][0] ? 2 : 1, bad[i], NULL, &npos, &help, &e),
                         TS_EINVAL);
    }
    char *missing[] = { "--dir" };
    ts_err_clear(&e);
    assert_int_equal(ts_flags_parse(f, 1, missing, NULL, &npos, &help, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "needs a value"));

    char *h[] = { "--nope", "--help" };
    assert_int_equal(ts_flags_parse(f, 2, h, NULL, &npos, &help, &e), TS_OK);
    assert_true(help);
}

static void status_mapping(void **state)
{
    static const struct { ts_status st; int code; } m[] = {
        { TS_OK, GRPC_STATUS_OK },
        { TS_EINVAL, GRPC_STATUS_INVALID_ARGUMENT },
        { TS_ENOTFOUND, GRPC_STATUS_NOT_FOUND },
        { TS_EEXIST, GRPC_STATUS_ALREADY_EXISTS },
        { TS_ESTATE, GRPC_STATUS_FAILED_PRECONDITION },
        { TS_ESTALE, GRPC_STATUS_ABORTED },
        { TS_ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED },
        { TS_EUNAVAIL, GRPC_STATUS_UNAVAILABLE },
        { TS_ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED },
        { TS_ECORRUPT, GRPC_STATUS_DATA_LOSS },
        { TS_EAUTH, GRPC_STATUS_UNAUTHENTICATED },
        { TS_ENOTSUP, GRPC_STATUS_UNIMPLEMENTED },
        { TS_ECANCELLED, GRPC_STATUS_CANCELLED },
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        assert_int_equal(ts_rpc_code_from_status(m[i].st), m[i].code);
        assert_int_equal(ts_rpc_status_from_code(m[i].code), m[i].st);
    }
    assert_int_equal(ts_rpc_code_from_status(TS_EIO), GRPC_STATUS_INTERNAL);
    assert_int_equal(ts_rpc_code_from_status(TS_EINTERNAL), GRPC_STATUS_INTERNAL);
    assert_int_equal(ts_rpc_status_from_code(GRPC_STATUS_UNKNOWN), TS_EINTERNAL);
    assert_string_equal(ts_rpc_code_name(GRPC_STATUS_ABORTED), "ABORTED");
    assert_string_equal(ts_rpc_code_name(99), "UNKNOWN");
}

/* One rule for job ids wherever one arrives (util/names.h). */
static void job_id_rule(void **state)
{
    struct ts_err e = { 0 };
    char id[TS_JOB_ID_MAX + 2];

    (void)state;
    memset(id, 'j', sizeof(id));
    id[TS_JOB_ID_MAX] = '\0';
    assert_int_equal(ts_job_id_check("job", id, &e), TS_OK);            /* 64 bytes */
    assert_int_equal(ts_job_id_check("job", "run-1.a_B", &e), TS_OK);
    id[TS_JOB_ID_MAX] = 'j';
    id[TS_JOB_ID_MAX + 1] = '\0';
    assert_int_equal(ts_job_id_check("job", id, &e), TS_EINVAL);        /* 65 */
    assert_string_equal(e.msg, "job: 65 bytes, at most 64");
    ts_err_clear(&e);
    assert_int_equal(ts_job_id_check("job.id", "", &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "job.id: required"));
    ts_err_clear(&e);
    assert_int_equal(ts_job_id_check("job", NULL, &e), TS_EINVAL);
    ts_err_clear(&e);
    assert_int_equal(ts_job_id_check("job", "a b", &e), TS_EINVAL);
    assert_string_equal(e.msg, "job: byte 1 is 0x20; only letters, digits, '.', '_' and '-' "
                        "are allowed");
    ts_err_clear(&e);
    assert_int_equal(ts_job_id_check("job", "caf\xc3\xa9", &e), TS_EINVAL); /* not ASCII */
    assert_non_null(strstr(e.msg, "byte 3 is 0xc3"));
}

/* ts_port_file_write: a reader polling the file sees a whole port or no file, never an empty
 * or partial one (what a launcher waiting for a service relies on). */
struct port_writer {
    const char *path;
    atomic_bool done;
    ts_status st;
};

static void *port_writer_main(void *arg)
{
    struct port_writer *w = arg;

    for (int i = 0; i < 3000 && !w->st; i++)
        w->st = ts_port_file_write(w->path, i % 2 ? 7 : 65535, NULL);
    atomic_store(&w->done, true);
    return NULL;
}

static void port_file_atomic(void **state)
{
    char dir[] = "/tmp/tessera-port.XXXXXX", path[64], buf[16];
    struct port_writer w = { .path = path };
    struct ts_err e = { 0 };
    pthread_t th;
    long reads = 0;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/x.port", dir);
    assert_int_equal(pthread_create(&th, NULL, port_writer_main, &w), 0);
    while (!atomic_load(&w.done)) {
        FILE *f = fopen(path, "r");
        size_t n;
        if (!f)
            continue;            /* not written yet */
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        if (strcmp(buf, "7\n") && strcmp(buf, "65535\n"))
            fail_msg("read '%s' (%zu bytes) from the port file", buf, n);
        reads++;
    }
    pthread_join(th, NULL);
    assert_int_equal(w.st, TS_OK);
    assert_true(reads > 0);
    assert_int_equal(ts_port_file_read(path), 7);       /* the last one written (i = 2999) */
    unlink(path);
    assert_int_equal(ts_port_file_read(path), 0);       /* not there (yet) */
    /* A directory that is not there: TS_EIO naming the path, and nothing left behind. */
    snprintf(path, sizeof(path), "%s/no/x.port", dir);
    assert_int_equal(ts_port_file_write(path, 80, &e), TS_EIO);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(rmdir(dir), 0);   /* empty: no temporary file left */
}

/* ts_files_replace: the new bytes with exactly the mode asked for; several files all or none
 * when one cannot be written; a failed rename names its file; no temporary left behind. */
static int count_entries(const char *dir)
{
    struct dirent *d;
    DIR *dh = opendir(dir);
    int n = 0;

    assert_non_null(dh);
    while ((d = readdir(dh)))
        n += strcmp(d->d_name, ".") && strcmp(d->d_name, "..");
    closedir(dh);
    return n;
}

static void files_replace_all_or_none(void **state)
{
    char dir[] = "/tmp/tessera-file.XXXXXX", a[64], b[64], bad[64], buf[16] = "";
    struct ts_err e = { 0 };
    struct stat st;
    mode_t old = umask(077);   /* the mode asked for wins over the umask */
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof(a), "%s/a.pem", dir);
    snprintf(b, sizeof(b), "%s/b.key", dir);
    snprintf(bad, sizeof(bad), "%s/no/c", dir);
    assert_int_equal(ts_file_replace(a, "old", 3, 0644, &e), TS_OK);
    {
        struct ts_file_out two[] = {
            { .path = a, .head = "ne", .head_len = 2, .body = "w", .body_len = 1,
              .mode = 0644 },
            { .path = b, .body = "key", .body_len = 3, .mode = 0600 } };
        assert_int_equal(ts_files_replace(two, 2, &e), TS_OK);
    }
    assert_non_null(f = fopen(a, "r"));
    assert_int_equal(fread(buf, 1, sizeof(buf) - 1, f), 3);
    fclose(f);
    assert_string_equal(buf, "new");
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(stat(b, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    /* The second cannot be written (no such directory): the first stays as it was. */
    {
        struct ts_file_out two[] = { { .path = a, .body = "xyz!", .body_len = 4, .mode = 0644 },
                                     { .path = bad, .body = "k", .body_len = 1, .mode = 0600 } };
        assert_int_equal(ts_files_replace(two, 2, &e), TS_EIO);
    }
    assert_non_null(strstr(e.msg, bad));
    assert_non_null(strstr(e.msg, "No such file or directory"));
    assert_int_equal(stat(a, &st), 0);
    assert_int_equal(st.st_size, 3);
    assert_int_equal(count_entries(dir), 2);   /* a.pem, b.key: no temporary */
    /* A rename that fails (a directory in the way) names the file. */
    assert_int_equal(unlink(b), 0);
    assert_int_equal(mkdir(b, 0700), 0);
    ts_err_clear(&e);
    assert_int_equal(ts_file_replace(b, "k", 1, 0600, &e), TS_EIO);
    assert_non_null(strstr(e.msg, b));
    assert_int_equal(count_entries(dir), 2);
    assert_int_equal(rmdir(b), 0);
    /* What a writer killed mid-write leaves is swept; nothing else is. */
    {
        char left[96], near[96];
        snprintf(left, sizeof(left), "%s/state.tmp.4242.7", dir);
        snprintf(near, sizeof(near), "%s/notes.tmp.txt", dir);
        assert_non_null(f = fopen(left, "w"));
        fclose(f);
        assert_non_null(f = fopen(near, "w"));
        fclose(f);
        assert_int_equal(ts_files_sweep(dir), 1);
        assert_int_equal(access(left, F_OK), -1);
        assert_int_equal(access(near, F_OK), 0);
        assert_int_equal(unlink(near), 0);
    }
    assert_int_equal(unlink(a), 0);
    assert_int_equal(rmdir(dir), 0);
    umask(old);
}

/* util/launch.h with /bin/sh as the child: its log and last line, the port it writes, an early
 * exit, a stop. */
static void launch_wait_stop(void **state)
{
    char dir[] = "/tmp/tessera-launch.XXXXXX", log[64], port[64], script[256], text[64] = "";
    char *argv[] = { "sh", "-c", script, NULL };
    struct ts_err e = { 0 };
    int got = 0, status = 0;
    pid_t pid;
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/child.log", dir);
    snprintf(port, sizeof(port), "%s/child.port", dir);
    /* Writes its port after a while, then waits to be stopped. */
    snprintf(script, sizeof(script), "echo starting; sleep 0.2; echo 4242 > %s.tmp; "
             "mv %s.tmp %s; exec sleep 30", port, port, port);
    assert_int_equal(ts_launch("/bin/sh", argv, log, -1, &pid, &e), TS_OK);
    assert_int_equal(ts_launch_wait_port(pid, port, 10000, &got, NULL, &e), TS_OK);
    assert_int_equal(got, 4242);
    assert_false(ts_launch_exited(pid, NULL));
    status = ts_launch_stop(pid, 5000);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    ts_launch_describe(status, text, sizeof(text));
    assert_string_equal(text, "was killed by signal 15 (Terminated)");
    assert_non_null(f = fopen(log, "r"));
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_string_equal(text, "starting\n");
    ts_launch_last_line(log, text, sizeof(text));   /* what a launcher quotes when it died */
    assert_string_equal(text, "starting");
    /* Exits before writing a port: TS_EUNAVAIL with its status, reaped. */
    unlink(port);
    snprintf(script, sizeof(script), "exit 3");
    assert_int_equal(ts_launch("/bin/sh", argv, NULL, -1, &pid, &e), TS_OK);
    assert_int_equal(ts_launch_wait_port(pid, port, 10000, &got, &status, &e), TS_EUNAVAIL);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    ts_launch_describe(status, text, sizeof(text));
    assert_string_equal(text, "exited with status 3");
    assert_non_null(strstr(e.msg, port));
    assert_int_equal(ts_launch_stop(pid, 100), 0);   /* already reaped */
    /* A log that cannot be created: nothing started. */
    snprintf(log, sizeof(log), "%s/no/child.log", dir);
    ts_err_clear(&e);
    assert_int_equal(ts_launch("/bin/sh", argv, log, -1, &pid, &e), TS_EIO);
    ts_launch_last_line(log, text, sizeof(text));
    assert_string_equal(text, "no log");
    snprintf(log, sizeof(log), "%s/child.log", dir);
    assert_non_null(f = fopen(log, "w"));
    fputs("\n\n", f);
    fclose(f);
    ts_launch_last_line(log, text, sizeof(text));
    assert_string_equal(text, "(empty)");
    unlink(log);
    assert_int_equal(rmdir(dir), 0);
}

/* v into k's variable (NULL: unset), read again as a process that starts with it would. */
static void knob_env(enum ts_knob k, const char *v)
{
    if (v)
        setenv(ts_knob_name(k), v, 1);
    else
        unsetenv(ts_knob_name(k));
    ts_knob_reread();
}

static void knobs_read_once_by_their_rows(void **state)
{
    static const struct { const char *env; long long want; bool ok; } ring[] = {
        { NULL, 16 << 20, true }, { "", 16 << 20, true }, { "65536", 65536, true },
        { "1073741824", 1 << 30, true }, { "100000", 16 << 20, false },
        { "32768", 16 << 20, false }, { "2147483648", 16 << 20, false },
        { "65536x", 16 << 20, false }, { " 65536", 16 << 20, false },
        { "+65536", 16 << 20, false }, { "1M", 16 << 20, false },
    };
    struct ts_err e = { 0 };

    (void)state;
    for (int k = 0; k < TS_KNOB_COUNT; k++)
        assert_int_equal(strncmp(ts_knob_name((enum ts_knob)k), "TESSERA_", 8), 0);
    for (size_t i = 0; i < sizeof(ring) / sizeof(ring[0]); i++) {
        knob_env(TS_KNOB_SHM_RING, ring[i].env);
        assert_int_equal(ts_knob_int(TS_KNOB_SHM_RING), ring[i].want);
        assert_int_equal(ts_knob_check(TS_KNOB_SHM_RING, NULL) == TS_OK, ring[i].ok);
    }
    /* Read once: a change after the first use is not seen until a re-read. */
    setenv("TESSERA_SHM_RING", "131072", 1);
    assert_int_equal(ts_knob_int(TS_KNOB_SHM_RING), 16 << 20);
    ts_knob_reread();
    assert_int_equal(ts_knob_int(TS_KNOB_SHM_RING), 131072);
    knob_env(TS_KNOB_SHM_RING, NULL);

    /* Choices: case ignored; another word leaves the default, and ts_knob_check says why. */
    knob_env(TS_KNOB_PIPELINE, "ON");
    assert_true(ts_knob_is(TS_KNOB_PIPELINE, "on"));
    assert_false(ts_knob_is(TS_KNOB_PIPELINE, "auto"));
    knob_env(TS_KNOB_PIPELINE, "sometimes");
    assert_true(ts_knob_is(TS_KNOB_PIPELINE, "auto"));
    assert_true(ts_knob_is_set(TS_KNOB_PIPELINE));
    assert_int_equal(ts_knob_check(TS_KNOB_PIPELINE, &e), TS_EINVAL);
    assert_string_equal(e.msg, "TESSERA_PIPELINE: 'sometimes'; want auto, on or off");
    knob_env(TS_KNOB_PIPELINE, NULL);
    assert_int_equal(ts_knob_check(TS_KNOB_PIPELINE, NULL), TS_OK);
    knob_env(TS_KNOB_LOG, "Debug");
    assert_int_equal(ts_knob_choice(TS_KNOB_LOG), 3);
    knob_env(TS_KNOB_LOG, NULL);
    assert_int_equal(ts_knob_choice(TS_KNOB_LOG), 2);
    assert_false(ts_knob_is_set(TS_KNOB_LOG));

    /* An integer with a word for its default. */
    knob_env(TS_KNOB_PLACEMENT_SALT, "auto");
    assert_int_equal(ts_knob_int(TS_KNOB_PLACEMENT_SALT), -1);
    knob_env(TS_KNOB_PLACEMENT_SALT, "4294967295");
    assert_int_equal(ts_knob_int(TS_KNOB_PLACEMENT_SALT), 4294967295LL);
    knob_env(TS_KNOB_PLACEMENT_SALT, "-1");
    ts_err_clear(&e);
    assert_int_equal(ts_knob_check(TS_KNOB_PLACEMENT_SALT, &e), TS_EINVAL);
    assert_string_equal(e.msg, "TESSERA_PLACEMENT_SALT: '-1'; want auto, or 0..4294967295");
    knob_env(TS_KNOB_PLACEMENT_SALT, NULL);

    /* Strings: empty is unset; a row's default stands in. */
    knob_env(TS_KNOB_SHM_DIR, "");
    assert_null(ts_knob_str(TS_KNOB_SHM_DIR));
    assert_false(ts_knob_is_set(TS_KNOB_SHM_DIR));
    knob_env(TS_KNOB_SHM_DIR, NULL);
    knob_env(TS_KNOB_MASTER, NULL);
    assert_string_equal(ts_knob_str(TS_KNOB_MASTER), "127.0.0.1:7070");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(err_first_message_wins),
        cmocka_unit_test(err_deep_prefix_keeps_cause),
        cmocka_unit_test(err_long_path_cut_in_middle),
        cmocka_unit_test(json_writer),
        cmocka_unit_test(flags_parse),
        cmocka_unit_test(status_mapping),
        cmocka_unit_test(job_id_rule),
        cmocka_unit_test(port_file_atomic),
        cmocka_unit_test(files_replace_all_or_none),
        cmocka_unit_test(launch_wait_stop),
        cmocka_unit_test(knobs_read_once_by_their_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
