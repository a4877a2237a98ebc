/* dp_clip.c - the shard's part of clipping by global norm (lib/ps/part.h, "Clipping"): the
 * norm pull. Held pushes and applies are pushes (dataplane.c's on_push reads their flags);
 * a norm pull waits, as a pull waits for its version, until every rank pushed the held step,
 * and answers with the partition's sum of squares. */
#include "dp_internal.h"

#include <inttypes.h>

#include "transport/frame.h"

ts_status dp_norm_from(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_part *p,
                       struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_PARAMS, .tensor = h->tensor,
                                .partition = h->partition, .dtype = 1, .step = h->step,
                                .flags = TS_PARAMS_NORM };
    uint8_t v[TS_NORM_LEN];
    double sumsq;

    if (h->flags & ~(uint32_t)(TS_PULL_NORM | TS_PULL_ROUND | TS_PULL_AFTER_PUSH))
        return ts_err_set(err, TS_EINVAL, "tensor %u: a norm pull takes no other flag (0x%x)",
                          h->tensor, h->flags);
    if ((h->flags & TS_PULL_AFTER_PUSH) && dc->push_refused)
        return ts_err_set(err, TS_ESTATE, "norm of step %" PRIu64 " refused: a push of this "
                          "step was refused (see the error before)", h->step);
    if (ts_part_norm(p, h->rank, h->step, dc->gen, DP_PULL_WAIT_MS, &dc->cancel, &sumsq, err))
        return err->code;
    ts_norm_put(v, sumsq);
    return ts_frame_send(dc->c, &out, v, sizeof(v), err);
}
