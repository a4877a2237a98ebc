/* flags.h - long-option parsing and --help for every Tessera command.
 *
 * A command describes its options in a table; ts_flags_parse() fills the variables the table
 * points at and collects positional arguments; --help (or -h) is always understood, and
 * ts_flags_usage() prints the table. Errors name the option and say what was expected.
 * Ownership: string values point into argv (borrowed). Threads: no shared state. */
#ifndef TS_UTIL_FLAGS_H
#define TS_UTIL_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

enum ts_flag_kind { TS_FLAG_BOOL, TS_FLAG_INT, TS_FLAG_STR };

struct ts_flag {
    const char *name;         /* without the dashes: "shards" */
    enum ts_flag_kind kind;
    void *ptr;                /* bool *, int64_t *, const char ** */
    const char *metavar;      /* "N", "ADDR"; NULL for bools */
    const char *help;         /* one line; say the default */
    int64_t min, max;         /* TS_FLAG_INT range, inclusive (min == max == 0: any) */
};

/* Parses argv[0..argc) (argv[0] is NOT skipped: pass argv + 1 for a program's own flags).
 * Non-option arguments go to pos (up to *npos slots; *npos becomes the count). "--" ends
 * options. Sets *help when --help/-h was given (nothing else is checked then). */
ts_status ts_flags_parse(const struct ts_flag *flags, int argc, char **argv, char **pos,
                         int *npos, bool *help, struct ts_err *err) TS_MUST_CHECK;

/* Prints "usage: <usage>\n\n<about>\n\noptions:\n  --name METAVAR  help" to f. */
void ts_flags_usage(FILE *f, const char *usage, const char *about, const struct ts_flag *flags);

/* A program's own options (argv[1..argc), no positional arguments), the way every Tessera
 * binary takes them: returns -1 to go on, or the exit status to return at once: 0 after
 * printing --help (usage, NULL for "PROG [options]", then about and the table) on stdout, 2
 * after printing "PROG: message" for a bad option on stderr. */
int ts_flags_program(const char *prog, const char *usage, const char *about,
                     const struct ts_flag *flags, int argc, char **argv);

/* A size flag's value: digits, then K, M or G (KiB, MiB, GiB), or no suffix for `unit` bytes
 * (1 << 20 for options that took MiB before sizes). TS_EINVAL names the flag otherwise, or
 * for 0 or more than 2^50 bytes. */
ts_status ts_flags_size(const char *flag, const char *value, uint64_t unit, uint64_t *out,
                        struct ts_err *err) TS_MUST_CHECK;

#endif
