/* mark.c - what a partition remembers of each slot's counted push, so that a push sent again
 * is told apart from a different one (part.h, "Duplicates").
 *
 * A worker sends a step again after a failover, and an elastic worker's pushes may repeat a
 * slot another worker sent: the partition acknowledges such a duplicate without adding it.
 * That must never let a second, different payload pass as the first one's retry, nor let a
 * first, forged one make the real push look like a retry (an attacker who pushes a rank's
 * step before the rank does). So each slot's mark holds a keyed digest of the push that
 * counted for it, and a duplicate whose digest differs is refused (TS_EPERM), nothing added.
 *
 * The digest must cost nothing next to the step: a push read in place from shared memory
 * costs the shard one pass over its bytes, and hashing all of them would cost a second one
 * (64 MiB at the ~3 GB/s of libxxhash's portable XXH3 is 20 ms, against a step of about 12 ms
 * on one host, docs/transport.md). So it hashes the push's fields, payloads up to
 * MARK_FULL_BYTES whole, and of a larger one MARK_SAMPLES blocks of MARK_BLOCK bytes at places
 * chosen by a keyed function of (tensor, partition, step) plus its tail; where the transport
 * verified a checksum of the whole payload (a frame that crossed a network, frame.h) that is
 * kept beside it and compared too. The key is random per process and never leaves it, so a
 * sender cannot know which bytes are sampled: two real gradients differ nearly everywhere and
 * are always told apart; a second payload that differs from the first in a few elements may
 * pass as its retry on one host, and is then not added either (docs/security.md, "Pushes
 * bound to their sender"). */
#include "ps/part_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

#define MARK_FULL_BYTES (64u << 10)  /* payloads up to this are hashed whole */
#define MARK_SAMPLES 32u
#define MARK_BLOCK 64u
#define MARK_SECRET 192u             /* at least XXH3_SECRET_SIZE_MIN (136) */

static uint8_t secret[MARK_SECRET];
static uint64_t place_seed;
static pthread_once_t secret_once = PTHREAD_ONCE_INIT;

static void secret_load(void)
{
    size_t got = 0;

    while (got < sizeof(secret)) {
        ssize_t n = getrandom(secret + got, sizeof(secret) - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (errno != EINTR)
            abort();   /* no entropy on Linux >= 3.17 is a broken host, not an input error */
    }
    memcpy(&place_seed, secret, sizeof(place_seed));
}

/* The push's fields and the sampled bytes of its payload, hashed under the process key. */
static uint64_t digest(const struct ts_part *p, const struct ts_push *in)
{
    struct {
        uint64_t step, slots, bytes, updates;
        uint32_t rank, encoding;
        int32_t scale_exp, flags;
        float lr;
        uint32_t pad;
    } head = { in->step, in->slots, in->bytes, in->has_updates ? in->updates : 0, in->rank,
               in->encoding, in->scale_exp,
               (int32_t)(in->assign | in->no_decay << 1 | in->state << 2 |
                         in->has_updates << 3), in->lr, 0 };
    const uint8_t *b = in->payload;
    XXH3_state_t st;

    pthread_once(&secret_once, secret_load);
    XXH3_64bits_reset_withSecret(&st, secret, sizeof(secret));
    XXH3_64bits_update(&st, &head, sizeof(head));
    if (in->bytes <= MARK_FULL_BYTES) {
        if (in->bytes)
            XXH3_64bits_update(&st, b, in->bytes);
        return XXH3_64bits_digest(&st);
    }
    for (uint32_t j = 0; j < MARK_SAMPLES; j++) {
        uint64_t where[4] = { p->tensor_id, p->index, in->step, j };
        uint64_t at = XXH3_64bits_withSeed(where, sizeof(where), place_seed) %
                      (in->bytes / MARK_BLOCK);
        XXH3_64bits_update(&st, b + at * MARK_BLOCK, MARK_BLOCK);
    }
    XXH3_64bits_update(&st, b + in->bytes - MARK_BLOCK, MARK_BLOCK);   /* the tail */
    return XXH3_64bits_digest(&st);
}

/* The group of a push: 0 alone, else its lowest slot + 1 (a combined push, whose mask is in
 * its digest). */
static uint32_t group_of(const struct ts_push *in)
{
    return in->slots ? in->rank + 1 : 0;
}

void part_mark_set(struct ts_part *p, const struct ts_push *in)
{
    struct part_mark m = { .step1 = in->step + 1, .sample = digest(p, in),
                           .whole = in->payload_sum, .member = in->member,
                           .group = group_of(in) };

    if (!in->slots) {
        p->marks[in->rank] = m;
        return;
    }
    for (uint64_t s = in->slots; s; s &= s - 1)
        p->marks[__builtin_ctzll(s)] = m;
}

/* Whether slot's mark and push `in` (of digest d) can be compared, and differ: TS_EPERM. */
static ts_status check_one(const struct ts_part *p, uint32_t slot, const struct ts_push *in,
                           uint64_t d, struct ts_err *err)
{
    const struct part_mark *m = &p->marks[slot];

    if (m->step1 != in->step + 1 || m->group != group_of(in))
        return TS_OK;   /* another step (not remembered) or another grouping: a regrouped
                         * retry (sdk_combine.c sends a step again slot by slot) */
    if (in->member && m->member && in->member != m->member && !p->job->exact)
        return TS_OK;   /* another owner of the slot: an elastic hand-over (its shard checked
                         * that the sender owns or owned the slot). In float mode two workers
                         * may compute a slot's gradient to other bits (another CPU, another
                         * BLAS kernel); in exact mode they never do, so it is compared. */
    if (m->sample == d && !(m->whole && in->payload_sum && m->whole != in->payload_sum))
        return TS_OK;
    return ts_err_set(err, TS_EPERM, "push of slot %u step %" PRIu64 " differs from the one "
                      "counted for it (from member %u; this one from member %u): refused, "
                      "nothing added; a forged push, or a worker that computed a step twice",
                      slot, in->step, m->member, in->member);
}

ts_status part_mark_check(const struct ts_part *p, const struct ts_push *in,
                          struct ts_err *err)
{
    uint64_t d = digest(p, in);
    ts_status st = TS_OK;

    if (!in->slots)
        return check_one(p, in->rank, in, d, err);
    for (uint64_t s = in->slots; !st && s; s &= s - 1)
        st = check_one(p, (uint32_t)__builtin_ctzll(s), in, d, err);
    return st;
}

void part_marks_clear(struct ts_part *p)
{
    memset(p->marks, 0, p->job->workers * sizeof(*p->marks));
}
