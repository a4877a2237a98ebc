/* option_flags.h - struct tessera_options as command-line flags, for the tree's own trainers
 * (tessera-worker and tessera train): each row of the options' schema that has a flag
 * (tessera_options_schema) becomes a ts_flag of lib/util/flags.h with the row's metavar and
 * help, its value is set with tessera_options_set (the SDK's parsing and ranges), and
 * tessera train hands a worker the same flags back with ts_option_argv. So a new option is
 * one row of lib/client/options.c, and both programs take it.
 * Not part of libtessera: the SDK's users have their own flags.
 * Ownership: values point into argv (borrowed), as with ts_flags_parse.
 * Threads: no shared state. */
#ifndef TS_CLIENT_OPTION_FLAGS_H
#define TS_CLIENT_OPTION_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
