/* test_local.c - lib/local with stand-ins for the services: /bin/sh scripts named
 * tessera-master and tessera-shard that write down their flags, write a port file and exit 0
 * on SIGTERM. Checked: the refusals made before anything starts, a master that cannot start,
 * the flags each child gets from the options, a master restarted by ts_local_check with its
 * events, a clean stop and the directory removed. Registration (ts_local_wait_shards) needs
 * a real master: the CLI's and the C integration tests cover it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local/local.h"
#include "util/proc.h"

/* Writes its flags to BIN/NAME.args, port 4242 to --port-file (the master), exits 0 on TERM.
 * The trap comes first: the test sends TERM once it read the args, and under load the shell
 * could get it before a trap set after them (it died of the signal: a stop not clean). */
static const char script[] =
    "#!/bin/sh\n"
    "trap 'exit 0' TERM\n"
    "a=\"$0.args\"; echo \"$*\" > \"$a.tmp\" && mv \"$a.tmp\" \"$a\"\n"
    "while [ $# -gt 0 ]; do [ \"$1\" = --port-file ] && pf=$2; shift; done\n"
    "case \"$0\" in *master) echo 4242 > \"$pf.tmp\" && mv \"$pf.tmp\" \"$pf\";; esac\n"
    "while :; do sleep 0.05; done\n";

static char bin[] = "/tmp/ts-test-local.XXXXXX";

static void write_exe(const char *name)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", bin, name);
    assert_non_null(f = fopen(path, "w"));
    fputs(script, f);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(bin))
        return -1;
    write_exe("tessera-master");
    write_exe("tessera-shard");
    return 0;
}

static int teardown(void **state)
{
    const char *files[] = { "tessera-master", "tessera-shard", "tessera-master.args",
                            "tessera-shard.args", NULL };
    char path[128];

    (void)state;
    for (int i = 0; files[i]; i++) {
        snprintf(path, sizeof(path), "%s/%s", bin, files[i]);
        unlink(path);
    }
    return rmdir(bin);
}

/* The flags the stand-in for name last got. */
static void args_of(const char *name, char *buf, size_t n)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.args", bin, name);
    for (int i = 0; i < 200 && access(path, R_OK) != 0; i++)
        ts_sleep_ms(10);
    assert_non_null(f = fopen(path, "r"));
    assert_non_null(fgets(buf, (int)n, f));
    fclose(f);
    unlink(path);
}

static void refusals(void **state)
{
    struct ts_local_opts o = { .bin = bin, .shards = TS_LOCAL_MAX_SHARDS + 1 };
    struct ts_local *c = NULL;
    struct ts_err e = { 0 };

    (void)state;
    assert_int_equal(ts_local_start(&o, &c, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "shards"));
    o = (struct ts_local_opts){ .bin = bin, .tls = true, .tls_as_is = true };
    ts_err_clear(&e);
    assert_int_equal(ts_local_start(&o, &c, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "tls_dir"));
    assert_null(c);
    ts_local_free(NULL);
    ts_local_kill(NULL);
}

/* No tessera-master there: its exec fails, the start says so at once and leaves no child. */
static void master_cannot_start(void **state)
{
    char dir[128];
    struct ts_local_opts o = { .bin = "/nonexistent", .dir = dir, .no_logs = true,
                               .no_state = true, .keep_process_tls = true };
    struct ts_local *c = NULL;
    struct ts_err e = { 0 };

    (void)state;
    snprintf(dir, sizeof(dir), "%s/cluster", bin);
    assert_int_equal(ts_local_start(&o, &c, &e), TS_EUNAVAIL);
    assert_string_equal(e.msg, "tessera-master exited with status 127 before listening; its "
                               "stderr is above");
    assert_null(c);
    assert_int_equal(rmdir(dir), 0);   /* the caller's directory, made, left empty */
}

struct seen {
    int n;
    struct ts_local_event ev[8];
};

static void on_event(void *arg, const struct ts_local_event *ev)
{
    struct seen *s = arg;

    if (s->n < 8)
        s->ev[s->n++] = *ev;   /* its strings are not kept */
}

static void start_restart_stop(void **state)
{
    struct seen seen = { 0 };
    struct ts_local_opts o = { .bin = bin, .tmp_prefix = "ts-test-local", .lease_ms = 1000,
                               .grace_ms = 7, .replicas = 2, .keep_process_tls = true,
                               .on_event = on_event, .event_arg = &seen };
    const char *extra[] = { "--transport", "tcp", NULL };
    char args[1024], dir[512], path[600];
    struct ts_local *c = NULL;
    struct ts_err e = { 0 };
    pid_t pid = 0;

    (void)state;
    assert_int_equal(ts_local_start(&o, &c, &e), TS_OK);
    snprintf(dir, sizeof(dir), "%s", ts_local_dir(c));
    assert_string_equal(ts_local_master_addr(c), "127.0.0.1:4242");
    assert_null(ts_local_tls_dir(c));
    args_of("tessera-master", args, sizeof(args));
    assert_non_null(strstr(args, "--listen 127.0.0.1:0 --port-file "));
    assert_non_null(strstr(args, "/master.port --state-dir "));
    assert_non_null(strstr(args, "--lease-ms 1000 --grace-ms 7 --replicas 2 --insecure"));
    assert_null(strstr(args, "--restarts"));

    /* The master dies: said, and started again after 0.5 s on its port with --restarts 1. */
    kill(ts_local_master_pid(c), SIGKILL);
    for (int i = 0; i < 200 && seen.n < 2; i++) {
        assert_true(ts_local_check(c));
        ts_sleep_ms(10);
    }
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.ev[0].kind, TS_LOCAL_MASTER_EXITED);
    assert_int_equal(seen.ev[0].delay_ms, 500);
    assert_int_equal(seen.ev[0].restart, 1);
    assert_int_equal(seen.ev[1].kind, TS_LOCAL_MASTER_RESTARTED);
    assert_int_equal(seen.ev[1].restart, 1);
    assert_true(ts_local_master_pid(c) > 0);
    args_of("tessera-master", args, sizeof(args));
    assert_non_null(strstr(args, "--listen 127.0.0.1:4242 "));
    assert_non_null(strstr(args, "--restarts 1"));
    snprintf(path, sizeof(path), "%s/master.0.log", dir);
    assert_int_equal(access(path, R_OK), 0);

    /* A shard with flags of its own: after the options' flags. */
    assert_int_equal(ts_local_add_shard(c, extra, &pid, &e), TS_OK);
    assert_true(pid > 0);
    assert_int_equal(ts_local_shards(c), 1);
    assert_int_equal(ts_local_shard_pid(c, 0), pid);
    args_of("tessera-shard", args, sizeof(args));
    assert_non_null(strstr(args, "--master 127.0.0.1:4242 --port-file "));
    assert_non_null(strstr(args, "/shard-new-1.port"));
    assert_null(strstr(args, "--mem-budget"));   /* shards 0: the shard's default */
    assert_non_null(strstr(args, "--grace-ms 7 --insecure --transport tcp"));

    /* SIGTERM: both exit 0; then the directory, made by the start, goes. */
    assert_true(ts_local_stop(c, &e));
    assert_int_equal(ts_local_master_pid(c), 0);
    assert_int_equal(ts_local_shard_pid(c, 0), 0);
    assert_true(ts_local_stop(c, &e));   /* again: nothing to do */
    ts_local_remove_logs(c);
    ts_local_free(c);
    assert_int_equal(access(dir, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refusals),
        cmocka_unit_test(master_cannot_start),
        cmocka_unit_test(start_restart_stop),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
