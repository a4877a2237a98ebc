/* knobs.c - see knobs.h. The table below is the one list of tuning variables; its rows are
 * docs/operations.md's "Environment variables" (test_docs_map checks the names). */
#include "util/knobs.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum kind { KNOB_INT, KNOB_CHOICE, KNOB_STR };

#define POW2 1u     /* an integer knob takes only powers of two */

struct row {
    const char *name;
    enum kind kind;
    long long min, max;      /* KNOB_INT: the range accepted, inclusive */
    long long dflt;          /* KNOB_INT: the value when unset; KNOB_CHOICE: its word's index */
    const char *words;       /* KNOB_CHOICE: "auto|on|off"; KNOB_INT: a word for the default */
    const char *dflt_str;    /* KNOB_STR: the value when unset (NULL: none) */
    unsigned flags;
    const char *effect;      /* one line; docs/operations.md says more */
};

#define INT(n, lo, hi, d, w, f, e) { n, KNOB_INT, lo, hi, d, w, NULL, f, e }
#define CHOICE(n, w, d, e) { n, KNOB_CHOICE, 0, 0, d, w, NULL, 0, e }
#define STR(n, d, e) { n, KNOB_STR, 0, 0, 0, NULL, d, 0, e }

static const struct row rows[TS_KNOB_COUNT] = {
    [TS_KNOB_LOG] = CHOICE("TESSERA_LOG", "error|warn|info|debug", 2,
                           "the log level; the SDK and tessera-worker take warn when unset"),
    [TS_KNOB_LOG_SUBSYS] = STR("TESSERA_LOG_SUBSYS", NULL,
                               "only these subsystems' lines (rpc,master), errors always"),
    [TS_KNOB_MASTER] = STR("TESSERA_MASTER", "127.0.0.1:7070",
                           "the master a process dials when --master is not given"),
    [TS_KNOB_CALL_TIMEOUT_MS] = INT("TESSERA_CALL_TIMEOUT_MS", 1, INT32_MAX, 5000, NULL, 0,
                                    "the deadline of a call to the master, ms"),
    [TS_KNOB_TLS_DIR] = STR("TESSERA_TLS_DIR", NULL,
                            "where client.pem, client.key and ca.pem are, for --tls-*"),
    [TS_KNOB_TLS_CERT] = STR("TESSERA_TLS_CERT", NULL, "--tls-cert when not given"),
    [TS_KNOB_TLS_KEY] = STR("TESSERA_TLS_KEY", NULL, "--tls-key when not given"),
    [TS_KNOB_TLS_CA] = STR("TESSERA_TLS_CA", NULL, "--tls-ca when not given"),
    [TS_KNOB_TOKEN_FILE] = STR("TESSERA_TOKEN_FILE", NULL, "--token-file when not given"),
    [TS_KNOB_TIMEOUT_MS] = INT("TESSERA_TIMEOUT_MS", 1, INT32_MAX, 120000, NULL, 0,
                               "the SDK's wait for one push or pull, ms"),
    [TS_KNOB_PLACEMENT_SALT] = INT("TESSERA_PLACEMENT_SALT", 0, UINT32_MAX, -1, "auto", 0,
                                   "the salt of a tensor's placement; auto: the best balanced"),
    [TS_KNOB_PIPELINE] = CHOICE("TESSERA_PIPELINE", "auto|on|off", 0,
                                "push and pull at once; auto: where bytes leave the host"),
    [TS_KNOB_COMBINE_SLOTS] = CHOICE("TESSERA_COMBINE_SLOTS", "on|off", 0,
                                     "off: a worker pushes every slot alone"),
    [TS_KNOB_SHM_DIR] = STR("TESSERA_SHM_DIR", NULL,
                            "the shm sockets' base directory (else $XDG_RUNTIME_DIR, /tmp)"),
    [TS_KNOB_SHM_GROUP] = STR("TESSERA_SHM_GROUP", NULL,
                              "a group (name or gid) whose processes may use the shm socket"),
    [TS_KNOB_SHM_RING] = INT("TESSERA_SHM_RING", 64 << 10, 1 << 30, 16 << 20, NULL, POW2,
                             "the bytes of each direction's shm ring"),
    [TS_KNOB_TCP_SOCKBUF] = INT("TESSERA_TCP_SOCKBUF", 1, 1 << 30, 0, NULL, 0,
                                "fixed SO_SNDBUF/SO_RCVBUF bytes; unset: autotuning"),
    [TS_KNOB_TCP_LOOPBACK] = CHOICE("TESSERA_TCP_LOOPBACK", "local|remote", 0,
                                    "remote: a loopback tcp peer counts as another host"),
    [TS_KNOB_FRAME_HASH] = CHOICE("TESSERA_FRAME_HASH", "auto|always", 0,
                                  "always: hash frames on shm and loopback tcp too"),
    [TS_KNOB_DATA_MAC] = CHOICE("TESSERA_DATA_MAC", "auto|always|never", 0,
                                "always: MAC host-local frames too; never: test hooks only"),
};

/* What one knob's variable held when first used; ready says it was read. */
static struct slot {
    atomic_bool ready;
    const char *raw;        /* NULL: unset or empty */
    bool ok;                /* raw is a value the row accepts (or NULL) */
    long long num;          /* KNOB_INT: the value; KNOB_CHOICE: the index */
} slots[TS_KNOB_COUNT];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* The index of s among words ('|' between them), case ignored; -1 if none. */
static int word_index(const char *words, const char *s)
{
    size_t n = strlen(s);
    int i = 0;

    for (const char *w = words; w && *w; i++) {
        size_t len = strcspn(w, "|");
        if (len == n && strncasecmp(w, s, n) == 0)
            return i;
        w += len + (w[len] == '|');
    }
    return -1;
}

static bool parse_int(const struct row *r, const char *s, long long *out)
{
    char *end;
    long long v;

    if (r->words && word_index(r->words, s) == 0) {
        *out = r->dflt;
        return true;
    }
    if (!(s[0] >= '0' && s[0] <= '9'))
        return false;   /* no row is negative; strtoll would skip white space, take '+' */
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end || v < r->min || v > r->max || ((r->flags & POW2) && (v & (v - 1))))
        return false;
    *out = v;
    return true;
}

static void read_slot(enum ts_knob k, struct slot *s)
{
    const struct row *r = &rows[k];
    const char *v = getenv(r->name);
    int i;

    s->raw = v && v[0] ? v : NULL;
    s->num = r->dflt;
    s->ok = true;
    if (!s->raw)
        return;
    if (r->kind == KNOB_INT)
        s->ok = parse_int(r, s->raw, &s->num);
    else if (r->kind == KNOB_CHOICE && (s->ok = (i = word_index(r->words, s->raw)) >= 0))
        s->num = i;
    if (!s->ok)
        s->num = r->dflt;
}

static const struct slot *get(enum ts_knob k)
{
    struct slot *s = &slots[k];

    if (!atomic_load_explicit(&s->ready, memory_order_acquire)) {
        pthread_mutex_lock(&mu);
        if (!atomic_load_explicit(&s->ready, memory_order_relaxed)) {
            read_slot(k, s);
            atomic_store_explicit(&s->ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&mu);
    }
    return s;
}

const char *ts_knob_name(enum ts_knob k)
{
    return rows[k].name;
}

bool ts_knob_is_set(enum ts_knob k)
{
    return get(k)->raw != NULL;
}

const char *ts_knob_str(enum ts_knob k)
{
    const struct slot *s = get(k);

    return s->raw ? s->raw : rows[k].dflt_str;
}

long long ts_knob_int(enum ts_knob k)
{
    return get(k)->num;
}

int ts_knob_choice(enum ts_knob k)
{
    return (int)get(k)->num;
}

bool ts_knob_is(enum ts_knob k, const char *word)
{
    return word_index(rows[k].words, word) == ts_knob_choice(k);
}

/* "auto|on|off" as "auto, on or off". */
static void say_words(const char *words, char *buf, size_t n)
{
    size_t at = 0;

    buf[0] = '\0';
    for (const char *w = words; *w && at < n; ) {
        size_t len = strcspn(w, "|");
        bool last = !w[len], first = w == words;

        at += (size_t)snprintf(buf + at, n - at, "%s%.*s", first ? "" : last ? " or " : ", ",
                               (int)len, w);
        w += len + !last;
    }
}

ts_status ts_knob_check(enum ts_knob k, struct ts_err *err)
{
    const struct row *r = &rows[k];
    const struct slot *s = get(k);
    char want[128];

    if (s->ok)
        return TS_OK;
    if (r->kind == KNOB_CHOICE)
        say_words(r->words, want, sizeof(want));
    else
        snprintf(want, sizeof(want), "%s%s%lld..%lld%s", r->words ? r->words : "",
                 r->words ? ", or " : "", r->min, r->max,
                 r->flags & POW2 ? ", a power of two" : "");
    return ts_err_set(err, TS_EINVAL, "%s: '%.64s'; want %s", r->name, s->raw, want);
}

void ts_knob_reread(void)
{
    pthread_mutex_lock(&mu);
    for (int k = 0; k < TS_KNOB_COUNT; k++)
        atomic_store_explicit(&slots[k].ready, false, memory_order_relaxed);
    pthread_mutex_unlock(&mu);
}
