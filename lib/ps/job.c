/* job.c - a job as the partitions see it (struct ts_job, part.h): its validation, its mode
 * by name, and comparing two. Apart from part.c, which is the partition itself. */
#include "ps/part.h"

#include <stdio.h>
#include <string.h>

#include "util/names.h"

ts_status ts_job_init(struct ts_job *j, const char *id, uint32_t workers, bool exact,
                      const char *optimizer, double batch, struct ts_err *err)
{
    struct ts_err e = { 0 };

    memset(j, 0, sizeof(*j));
    if (ts_job_id_check("job.id", id, err))
        return TS_EINVAL;
    if (workers < 1 || workers > TS_JOB_MAX_WORKERS)
        return ts_err_set(err, TS_EINVAL, "job.workers: %u is outside 1..%d", workers,
                          TS_JOB_MAX_WORKERS);
    if (!(batch >= 1 && batch < 1e12))
        return ts_err_set(err, TS_EINVAL, "job.batch: %g is not a batch size (>= 1)", batch);
    if (!optimizer || strlen(optimizer) >= sizeof(j->optimizer))
        return ts_err_set(err, TS_EINVAL, "job.optimizer: required, under %zu bytes",
                          sizeof(j->optimizer));
    if (ts_optim_parse(optimizer, &j->optim, &e))
        return ts_err_set(err, TS_EINVAL, "job.optimizer: %s", e.msg);
    snprintf(j->id, sizeof(j->id), "%s", id);
    snprintf(j->optimizer, sizeof(j->optimizer), "%s", optimizer);
    j->workers = workers;
    j->exact = exact;
    j->batch = batch;
    j->mode = TS_MODE_BSP;
    return TS_OK;
}

static const char *const mode_names[] = { [TS_MODE_BSP] = "bsp", [TS_MODE_SSP] = "ssp",
                                           [TS_MODE_ASP] = "asp", [TS_MODE_REDUCE] = "reduce" };

ts_status ts_mode_parse(const char *s, enum ts_mode *out, struct ts_err *err)
{
    if (!s || !s[0]) {
        *out = TS_MODE_BSP;
        return TS_OK;
    }
    for (int m = TS_MODE_BSP; m <= TS_MODE_REDUCE; m++)
        if (strcmp(s, mode_names[m]) == 0) {
            *out = (enum ts_mode)m;
            return TS_OK;
        }
    return ts_err_set(err, TS_EINVAL, "mode: '%s' is not one of bsp, ssp, asp, reduce", s);
}

const char *ts_mode_name(enum ts_mode m)
{
    return m >= TS_MODE_BSP && m <= TS_MODE_REDUCE ? mode_names[m] : "unknown";
}

ts_status ts_job_set_mode(struct ts_job *j, enum ts_mode mode, uint32_t staleness,
                          struct ts_err *err)
{
    if (mode < TS_MODE_BSP || mode > TS_MODE_REDUCE)
        return ts_err_set(err, TS_EINVAL, "job.mode: %d is not a mode (bsp, ssp, asp, reduce)",
                          (int)mode);
    if (j->exact && (mode == TS_MODE_SSP || mode == TS_MODE_ASP))
        return ts_err_set(err, TS_EINVAL, "job.mode: %s applies updates in the order pushes "
                          "arrive, which exact mode rules out; use bsp or reduce with --exact",
                          mode_names[mode]);
    if (staleness && mode != TS_MODE_SSP)
        return ts_err_set(err, TS_EINVAL, "job.staleness: %u, but only ssp takes a bound "
                          "(mode %s)", staleness, mode_names[mode]);
    j->mode = mode;
    j->staleness = staleness;
    return TS_OK;
}

bool ts_job_equal(const struct ts_job *a, const struct ts_job *b)
{
    return strcmp(a->id, b->id) == 0 && a->workers == b->workers && a->exact == b->exact &&
           strcmp(a->optimizer, b->optimizer) == 0 && a->batch == b->batch &&
           a->mode == b->mode && a->staleness == b->staleness;
}
