/* test_launch.c - tessera_launch_env (lib/client/sdk_launch.c): which variable each field
 * takes, in which order, and the refusals, naming the variable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera.h"

static const char *const vars[] = {
    "TESSERA_MASTER", "TESSERA_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "TESSERA_RANK", "RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX", "TESSERA_WORKERS",
    "WORLD_SIZE", "SLURM_NTASKS", "LOCAL_RANK", "SLURM_LOCALID", "TESSERA_RESTARTS",
    "TORCHELASTIC_RESTART_COUNT", NULL,
};

static int clean(void **state)
{
    (void)state;
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    return 0;
}

static void nothing_set(void **state)
{
    struct tessera_launch l;

    (void)state;
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_null(l.master);
    assert_null(l.job);
    assert_int_equal(l.rank, -1);
    assert_int_equal(l.workers, 0);
    assert_int_equal(l.local_rank, -1);
    assert_int_equal(l.restarts, 0);
}

static void tessera_names_win(void **state)
{
    struct tessera_launch l;

    (void)state;
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("SLURM_PROCID", "3", 1);
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_int_equal(l.rank, 1);   /* torchrun's RANK before Slurm's */
    assert_string_equal(l.rank_from, "RANK");
    setenv("TESSERA_RANK", "2", 1);
    setenv("TESSERA_WORKERS", "3", 1);
    setenv("TESSERA_MASTER", "10.0.0.1:7070", 1);
    setenv("TESSERA_JOB", "j7", 1);
    setenv("TORCHELASTIC_RUN_ID", "tr", 1);
    setenv("TESSERA_RESTARTS", "2", 1);
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_int_equal(l.rank, 2);
    assert_int_equal(l.workers, 3);
    assert_string_equal(l.master, "10.0.0.1:7070");
    assert_string_equal(l.job, "j7");
    assert_int_equal(l.restarts, 2);
    setenv("TESSERA_RANK", "", 1);   /* empty: not set */
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_int_equal(l.rank, 1);
}

static void slurm_and_kubernetes(void **state)
{
    struct tessera_launch l;

    (void)state;
    setenv("SLURM_JOB_ID", "4711", 1);
    setenv("SLURM_STEP_ID", "2", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", "0", 1);
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_string_equal(l.job, "slurm-4711.2");
    assert_int_equal(l.rank, 1);
    assert_int_equal(l.workers, 2);
    assert_int_equal(l.local_rank, 0);
    clean(NULL);
    setenv("JOB_COMPLETION_INDEX", "3", 1);
    setenv("TESSERA_WORKERS", "4", 1);
    setenv("TORCHELASTIC_RUN_ID", "none", 1);   /* torchrun without --rdzv-id */
    assert_int_equal(tessera_launch_env(&l, NULL), TESSERA_OK);
    assert_int_equal(l.rank, 3);
    assert_null(l.job);
}

static void refusals_name_the_variable(void **state)
{
    static const struct {
        const char *var, *value, *needle;
    } bad[] = {
        { "RANK", "x", "$RANK: 'x' is not an integer in 0..1023" },
        { "RANK", "1024", "$RANK: '1024'" },
        { "WORLD_SIZE", "0", "$WORLD_SIZE: '0' is not an integer in 1..1024" },
        { "TESSERA_RESTARTS", "-1", "$TESSERA_RESTARTS" },
        { "TESSERA_JOB", "a b", "$TESSERA_JOB: byte 1" },
    };
    struct tessera_launch l;
    struct tessera_error e;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        clean(NULL);
        setenv(bad[i].var, bad[i].value, 1);
        assert_int_equal(tessera_launch_env(&l, &e), TESSERA_EINVAL);
        assert_non_null(strstr(e.message, bad[i].needle));
    }
    clean(NULL);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "3", 1);
    assert_int_equal(tessera_launch_env(&l, &e), TESSERA_EINVAL);
    assert_non_null(strstr(e.message, "$RANK is 3, not below $WORLD_SIZE 3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(nothing_set, clean),
        cmocka_unit_test_setup(tessera_names_win, clean),
        cmocka_unit_test_setup(slurm_and_kubernetes, clean),
        cmocka_unit_test_setup(refusals_name_the_variable, clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
