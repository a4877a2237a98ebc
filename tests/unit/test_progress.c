/* test_progress.c - the master's store of training progress (services/master/progress.c):
 * points in step order; a step heard again replaces its point; a step below the last (the job
 * went back to a snapshot) drops the points past it; a full series keeps every other point;
 * a new job beyond PROGRESS_JOBS takes the place of the one heard from longest ago; the JSON
 * lists [step, loss, accuracy or null, samples/s]. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/progress.h"

static char *json_of(struct progress *p, const char *job)
{
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    progress_json(p, job, &j);
    ts_json_end(&j);
    return ts_json_take(&j);
}

static void note(struct progress *p, const char *job, uint64_t step, int64_t now)
{
    progress_note(p, job, &(struct progress_point){ step, 1.5, step % 2 ? NAN : 0.25, 100 },
                  now);
}

static void series_rules(void **state)
{
    struct progress *p = progress_create();
    char *s;

    (void)state;
    note(p, "a", 10, 1);
    note(p, "a", 20, 2);
    note(p, "a", 20, 3);   /* the same step again */
    s = json_of(p, "a");
    assert_string_equal(s, "{\"points\":[[10,1.5,0.25,100],[20,1.5,0.25,100]]}");
    free(s);
    note(p, "a", 15, 4);   /* back to 15: 20 goes */
    s = json_of(p, "a");
    assert_string_equal(s, "{\"points\":[[10,1.5,0.25,100],[15,1.5,null,100]]}");
    free(s);
    s = json_of(p, "none");
    assert_string_equal(s, "{\"points\":[]}");
    free(s);
    progress_free(p);
}

static void bounded(void **state)
{
    struct progress *p = progress_create();
    char id[16], *s;

    (void)state;
    for (uint64_t k = 1; k <= PROGRESS_POINTS + 1; k++)
        note(p, "long", k, 1);
    s = json_of(p, "long");   /* 512 points: the odd ones went (steps 2, 4, ...), then 513 */
    assert_non_null(strstr(s, "[[2,"));
    assert_non_null(strstr(s, "[512,1.5,0.25,100],[513,"));
    assert_null(strstr(s, "[3,"));
    free(s);
    for (int k = 0; k < PROGRESS_JOBS; k++) {   /* "long", heard at 1, is the oldest */
        snprintf(id, sizeof(id), "j%d", k);
        note(p, id, 1, 10 + k);
    }
    s = json_of(p, "long");
    assert_string_equal(s, "{\"points\":[]}");
    free(s);
    s = json_of(p, "j0");
    assert_string_equal(s, "{\"points\":[[1,1.5,null,100]]}");
    free(s);
    progress_free(p);
    progress_note(NULL, "x", &(struct progress_point){ 0 }, 0);   /* no store: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(series_rules),
        cmocka_unit_test(bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
