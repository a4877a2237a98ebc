/* option_flags.h - a job's options as command-line flags, for the tree's own trainers
 * (tessera-worker and tessera train). Two tables: the SDK's schema (tessera_options_schema:
 * each row with a flag becomes a ts_flag of lib/util/flags.h with the row's metavar and help,
 * set with tessera_options_set, the SDK's parsing and ranges), and the built-in trainer's own
 * options that both programs take (struct ts_trainer_opts: epochs, batch, micro, ...). tessera
 * train hands each worker both back as flags (ts_option_argv, ts_trainer_argv), and both
 * programs check them with ts_trainer_check after the SDK's tessera_options_check. So a new
 * option is one row, and both programs take it, print it in --help and pass it on.
 * Not part of libtessera: the SDK's users have their own flags.
 * Ownership: values point into argv (borrowed), as with ts_flags_parse.
 * Threads: no shared state. */
#ifndef TS_CLIENT_OPTION_FLAGS_H
#define TS_CLIENT_OPTION_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"
#include "util/err.h"
#include "util/flags.h"

#define TS_OPTION_FLAGS_MAX 40   /* rows of the schema, with room to grow */
/* The optimizer of the trainers' jobs unless --optimizer says (the SDK's own is momentum). */
#define TS_TRAINER_OPTIMIZER "momentum:lr=0.02,momentum=0.9"

/* What the command line gave for each row (by the row's index in the schema). */
struct ts_option_flags {
    const char *text[TS_OPTION_FLAGS_MAX];
    bool set[TS_OPTION_FLAGS_MAX];
};

/* Appends to flags[*n..cap) a ts_flag for every schema row with a flag not named in skip
 * (NULL-terminated flag names, or NULL), parsed into s (zero it first). Returns how many. */
size_t ts_option_flags_add(struct ts_option_flags *s, struct ts_flag *flags, size_t *n,
                           size_t cap, const char *const *skip);
/* Sets o's fields from what the command line gave, leaving the others as they are.
 * TS_EINVAL names the flag ("--staleness: ..."). */
ts_status ts_option_flags_apply(const struct ts_option_flags *s, struct tessera_options *o,
                                struct ts_err *err) TS_MUST_CHECK;
/* "--flag VALUE" (or "--flag" for a bool) for each schema row with a flag, not in skip, that o
 * sets, appended to argv[*n..cap); the values are written into buf (cap bytes). TS_EINVAL
 * when argv or buf is too small. */
ts_status ts_option_argv(const struct tessera_options *o, const char *const *skip, char **argv,
                         int *n, int cap, char *buf, size_t bufcap,
                         struct ts_err *err) TS_MUST_CHECK;

/* The built-in trainer's options that tessera train takes and hands each worker as they are
 * (rows in option_flags.c). */
struct ts_trainer_opts {
    int64_t epochs, steps, seed, batch, micro, partition_kb, delay_ms;
    bool json, overlap, no_elastic;
    /* The model: "mlp" (Fashion-MNIST) or "ctr" (sparse tables, docs/embeddings.md), and the
     * CTR model's sizes. */
    const char *model, *table_optimizer;
    int64_t ctr_features, ctr_rows, ctr_dim, eval_samples, prefetch_depth;
    const char *row_ttl;   /* --row-ttl: T steps, or a time (ts_row_ttl_parse) */
};
/* Their defaults; tessera train trains 3 epochs where a worker started alone trains 1. */
#define TS_TRAINER_DEFAULTS                                                                     \
    { .epochs = 1, .seed = 1, .batch = 64, .micro = 16, .model = "mlp",                          \
      .table_optimizer = "adagrad:lr=0.05", .ctr_features = 8, .ctr_rows = 100000,               \
      .ctr_dim = 16, .eval_samples = 20000, .prefetch_depth = 2 }

/* Appends to flags[*n..cap) a ts_flag for each of the trainer's rows, parsed into o. */
void ts_trainer_flags_add(struct ts_trainer_opts *o, struct ts_flag *flags, size_t *n,
                          size_t cap);
/* "--flag VALUE" for every numeric or text row, "--flag" for each bool that is set, appended to
 * argv[*n..cap) with the values in buf (cap bytes); TS_EINVAL when either is too small. */
ts_status ts_trainer_argv(const struct ts_trainer_opts *o, char **argv, int *n, int cap,
                          char *buf, size_t bufcap, struct ts_err *err) TS_MUST_CHECK;
/* --row-ttl's text (NULL: none): "T" (steps, T >= 0) or a time, "Ns", "Nm", "Nh" or "Nd"
 * (seconds, minutes, hours, days; N >= 1), into *steps or *seconds (the other 0); TS_EINVAL
 * naming the flag otherwise. */
ts_status ts_row_ttl_parse(const char *text, uint64_t *steps, uint64_t *seconds,
                           struct ts_err *err) TS_MUST_CHECK;
/* The rules of the trainer's options, with the job's (sdk): the micro-batch divides the
 * batch, --overlap is for asp, --model is mlp or ctr (ctr: bsp, ssp or asp, not elastic),
 * --row-ttl parses (a time only without --exact). TS_EINVAL names the flags. */
ts_status ts_trainer_check(const struct ts_trainer_opts *o, const struct tessera_options *sdk,
                           struct ts_err *err) TS_MUST_CHECK;

#endif
