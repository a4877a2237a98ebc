/* verify_replicas.c - `tessera verify replicas`: every replica of every partition of a job,
 * compared with its chain's head bit for bit (docs/replication.md).
 *
 * Each alive shard gives the SHA-256 of each partition it holds (Shard.PartitionDigests): the
 * image of its values, optimizer state and version. A partition passes when exactly one shard
 * heads it and every other copy has the head's version and digest, and it has as many copies
 * as its chain should (the map's replicas, or the shards alive if fewer). Run it on a job that
 * is not stepping (trained with --keep, or between steps): a copy caught one step behind its
 * head is reported as such.
 * Exit codes: 0 every replica equals its head, 1 one differs or is missing, 2 usage or I/O. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cluster/cluster.h"
#include "cluster/shard.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/names.h"

struct copy {
    uint32_t shard;
    const Tessera__V1__PartitionDigest *d;
};

struct part {
    uint32_t tensor_id, partition;
    const char *tensor;
    struct copy *copies;
    size_t n;
    const struct copy *head;
    const char *verdict;            /* NULL: equal */
};

static int by_key(const void *a, const void *b)
{
    const struct part *x = a, *y = b;

    if (x->tensor_id != y->tensor_id)
        return x->tensor_id < y->tensor_id ? -1 : 1;
    return x->partition < y->partition ? -1 : x->partition > y->partition;
}

/* The partition of key (tensor_id, partition) in parts[0..*n), added if new. */
static struct part *part_of(struct part **parts, size_t *n, size_t *cap,
                            const Tessera__V1__PartitionDigest *d)
{
    for (size_t i = 0; i < *n; i++)
        if ((*parts)[i].tensor_id == d->tensor_id && (*parts)[i].partition == d->partition)
            return &(*parts)[i];
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        struct part *p = realloc(*parts, c * sizeof(*p));
        if (!p)
            return NULL;
        *parts = p;
        *cap = c;
    }
    (*parts)[*n] = (struct part){ .tensor_id = d->tensor_id, .partition = d->partition,
                                  .tensor = d->tensor };
    return &(*parts)[(*n)++];
}

static const char *judge(struct part *p, size_t want)
{
    static char why[160];

    for (size_t i = 0; i < p->n; i++)
        if (!p->copies[i].d->follower) {
            if (p->head)
                return "two heads";
            p->head = &p->copies[i];
        }
    if (!p->head)
        return "no head";
    for (size_t i = 0; i < p->n; i++) {
        const Tessera__V1__PartitionDigest *d = p->copies[i].d;
        if (d->version != p->head->d->version) {
            snprintf(why, sizeof(why), "shard %u at version %" PRIu64 ", head at %" PRIu64,
                     p->copies[i].shard, d->version, p->head->d->version);
            return why;
        }
        if (d->sha256.len != 32 || memcmp(d->sha256.data, p->head->d->sha256.data, 32)) {
            snprintf(why, sizeof(why), "shard %u differs from the head (shard %u)",
                     p->copies[i].shard, p->head->shard);
            return why;
        }
    }
    if (p->n != want) {
        snprintf(why, sizeof(why), "%zu copies, want %zu", p->n, want);
        return why;
    }
    return NULL;
}

static void print(const char *job, struct part *parts, size_t n, size_t want, size_t bad,
                  bool json)
{
    if (json) {
        struct ts_json j;
        ts_json_init(&j);
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "job", job);
        ts_json_uint(&j, "copies_wanted", want);
        ts_json_uint(&j, "partitions", n);
        ts_json_uint(&j, "differ", bad);
        ts_json_arr(&j, "details");
        for (size_t i = 0; i < n; i++) {
            ts_json_obj(&j, NULL);
            ts_json_str(&j, "tensor", parts[i].tensor);
            ts_json_uint(&j, "partition", parts[i].partition);
            ts_json_uint(&j, "head", parts[i].head ? parts[i].head->shard : 0);
            ts_json_uint(&j, "version", parts[i].head ? parts[i].head->d->version : 0);
            ts_json_uint(&j, "copies", parts[i].n);
            ts_json_bool(&j, "equal", !parts[i].verdict);
            ts_json_str(&j, "problem", parts[i].verdict ? parts[i].verdict : "");
            ts_json_end(&j);
        }
        ts_json_end(&j);
        ts_json_end(&j);
        printf("%s\n", j.buf);
        ts_json_fini(&j);
        return;
    }
    printf("job %s: %zu partitions, %zu copies each wanted\n\n", job, n, want);
    printf("%-24s %5s %5s %8s %7s  %s\n", "TENSOR", "PART", "HEAD", "VERSION", "COPIES",
           "RESULT");
    for (size_t i = 0; i < n; i++) {
        const struct part *p = &parts[i];
        char head[16] = "-", version[24] = "-";
        if (p->head) {
            snprintf(head, sizeof(head), "%u", p->head->shard);
            snprintf(version, sizeof(version), "%" PRIu64, p->head->d->version);
        }
        printf("%-24s %5u %5s %8s %7zu  %s\n", p->tensor, p->partition, head, version, p->n,
               p->verdict ? p->verdict : "equal");
    }
    printf("\n%s: %zu of %zu partitions have every replica equal to its head\n",
           bad ? "FAIL" : "PASS", n - bad, n);
}

/* The job to check: --job, or the only one the shards hold. */
static ts_status pick_job(struct ts_cluster *cl, const Tessera__V1__ShardMap *map,
                          const char *flag, char *out, size_t cap, struct ts_err *err)
{
    if (flag) {
        snprintf(out, cap, "%s", flag);
        return TS_OK;
    }
    out[0] = '\0';
    for (size_t i = 0; i < map->n_shards; i++) {
        Tessera__V1__ShardStatusResponse *s;
        ts_status st = ts_cluster_shard_status(cl, map->shards[i]->id, &s, err);
        if (st)
            return st;
        for (size_t k = 0; k < s->n_jobs && !st; k++) {
            if (out[0] && strcmp(out, s->jobs[k]->id))
                st = ts_err_set(err, TS_EINVAL, "the shards hold jobs '%s' and '%s': name one "
                                "with --job", out, s->jobs[k]->id);
            snprintf(out, cap, "%s", s->jobs[k]->id);
        }
        protobuf_c_message_free_unpacked(&s->base, NULL);
        if (st)
            return st;
    }
    if (!out[0])
        return ts_err_set(err, TS_ENOTFOUND, "the shards hold no job (a finished job is "
                          "released unless trained with --keep)");
    return TS_OK;
}

int cmd_verify_replicas(int argc, char **argv)
{
    const char *master = NULL, *job_flag = NULL;
    bool json = false, help;
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &master, "ADDR", "the cluster's master (default "
                                                  "$TESSERA_MASTER, then 127.0.0.1:7070)", 0, 0 },
        { "job", TS_FLAG_STR, &job_flag, "ID", "the job (default: the only one the shards "
                                                "hold)", 0, 0 },
        { "json", TS_FLAG_BOOL, &json, NULL, "one JSON object on stdout", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    Tessera__V1__PartitionDigestsResponse **got = NULL;
    Tessera__V1__ShardMap *map = NULL;
    struct ts_master *m = NULL;
    struct ts_cluster *cl = NULL;
    struct ts_err err = { 0 };
    struct part *parts = NULL;
    size_t nparts = 0, cap = 0, bad = 0, want = 1;
    char job[TS_JOB_ID_MAX + 1];
    int npos = 0, rc = 2;
    ts_status st;

    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err)) {
        fprintf(stderr, "tessera verify replicas: %s\n", err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, "tessera verify replicas [--master ADDR] [--job ID] [--json]",
                       "Compares every replica of every partition of a job with its chain's\n"
                       "head, bit for bit (values, optimizer state, version), on the alive\n"
                       "shards. Run it on a job that is not stepping (trained with --keep).\n"
                       "Exit 0: every replica equals its head; 1: one differs or is missing;\n"
                       "2: usage or I/O.", flags);
        return 0;
    }
    master = ts_master_default_addr(master);
    if ((st = ts_master_open(master, &m, &err)) || (st = ts_master_shard_map(m, &map, &err)) ||
        (st = ts_cluster_open(master, &cl, &err)) ||
        (st = pick_job(cl, map, job_flag, job, sizeof(job), &err)))
        goto out;
    want = map->replicas > 1 ? map->replicas : 1;
    want = want < map->n_shards ? want : map->n_shards;
    if (!(got = calloc(map->n_shards + 1, sizeof(*got)))) {
        st = ts_err_set(&err, TS_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; !st && i < map->n_shards; i++) {
        Tessera__V1__PartitionDigestsRequest req = TESSERA__V1__PARTITION_DIGESTS_REQUEST__INIT;
        req.job = job;
        st = ts_cluster_partition_digests(cl, map->shards[i]->id, &req, 0, &got[i], &err);
        if (st == TS_ENOTFOUND) {   /* a shard that holds none of the job */
            st = TS_OK;
            memset(&err, 0, sizeof(err));
            continue;
        }
        for (size_t k = 0; !st && k < got[i]->n_partitions; k++) {
            struct part *p = part_of(&parts, &nparts, &cap, got[i]->partitions[k]);
            struct copy *c = p ? realloc(p->copies, (p->n + 1) * sizeof(*c)) : NULL;
            if (!c) {
                st = ts_err_set(&err, TS_ENOMEM, "out of memory");
                break;
            }
            p->copies = c;
            p->copies[p->n++] = (struct copy){ map->shards[i]->id, got[i]->partitions[k] };
        }
    }
    if (st)
        goto out;
    if (nparts)   /* qsort wants a real pointer even for 0 elements */
        qsort(parts, nparts, sizeof(*parts), by_key);
    for (size_t i = 0; i < nparts; i++)
        bad += (parts[i].verdict = judge(&parts[i], want)) != NULL;
    if (!nparts)
        st = ts_err_set(&err, TS_ENOTFOUND, "job '%s' is on no alive shard: name a running "
                        "job, or one trained with --keep (tessera status lists them)", job);
    else
        print(job, parts, nparts, want, bad, json);
    rc = st ? 2 : bad ? 1 : 0;
out:
    if (st && !map)   /* the master did not answer */
        cli_master_error("verify replicas", master, &err);
    else if (st)
        fprintf(stderr, "tessera verify replicas: %s\n", err.msg);
    for (size_t i = 0; i < nparts; i++)
        free(parts[i].copies);
    free(parts);
    for (size_t i = 0; got && map && i < map->n_shards; i++)
        if (got[i])
            protobuf_c_message_free_unpacked(&got[i]->base, NULL);
    free(got);
    if (map)
        protobuf_c_message_free_unpacked(&map->base, NULL);
    ts_cluster_close(cl);
    ts_master_close(m);
    return rc;
}
