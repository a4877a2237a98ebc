/* datamap.c - see datamap.h. */
#include "datamap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTITIONS 100000

void datamap_init(struct datamap *d)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->mu, NULL);
}

void datamap_fini(struct datamap *d)
{
    for (size_t i = 0; i < d->njobs; i++)
        free(d->jobs[i].e);
    free(d->restored.e);
    pthread_mutex_destroy(&d->mu);
}

static void hex8(const uint8_t *sha, char out[17])
{
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", sha[i]);
}

ts_status datamap_restore(struct datamap *d, const Tessera__V1__Manifest *m, const char *source,
                          struct ts_err *err)
{
    struct datamap_job *r = &d->restored;

    if (!m->n_data_checksums)
        return TS_OK;
    if (!(r->e = calloc(m->n_data_checksums, sizeof(*r->e))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->n_data_checksums; i++) {
        snprintf(r->e[i].name, sizeof(r->e[i].name), "%s", m->data_checksums[i]->key);
        memcpy(r->e[i].sha, m->data_checksums[i]->value.data, 32);
    }
    r->n = m->n_data_checksums;
    snprintf(r->source, sizeof(r->source), "%s", source);
    return TS_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const Tessera__V1__DataChecksum *const *)a)->name,
                  (*(const Tessera__V1__DataChecksum *const *)b)->name);
}

/* Names are unique (master.proto): compare() looks a name up in the reference and takes the
 * first, so a map holding one twice would not even match itself. Sorted, in n log n. */
static ts_status check_unique(const Tessera__V1__CheckDataRequest *req, struct ts_err *err)
{
    Tessera__V1__DataChecksum **v = malloc(req->n_checksums * sizeof(*v));
    ts_status st = TS_OK;

    if (!v)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    memcpy(v, req->checksums, req->n_checksums * sizeof(*v));
    qsort(v, req->n_checksums, sizeof(*v), by_name);
    for (size_t i = 1; i < req->n_checksums && !st; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            st = ts_err_set(err, TS_EINVAL, "checksums: name '%.128s' appears twice (names are "
                            "unique)", v[i]->name);
    free(v);
    return st;
}

static ts_status check_request(const Tessera__V1__CheckDataRequest *req, struct ts_err *err)
{
    if (ts_job_id_check("job", req->job, err))
        return TS_EINVAL;
    if (req->n_checksums < 1 || req->n_checksums > MAX_PARTITIONS)
        return ts_err_set(err, TS_EINVAL, "checksums: %zu, want 1..%d", req->n_checksums,
                          MAX_PARTITIONS);
    for (size_t i = 0; i < req->n_checksums; i++) {
        const Tessera__V1__DataChecksum *c = req->checksums[i];
        if (!c->name[0] || strlen(c->name) > 128)
            return ts_err_set(err, TS_EINVAL, "checksums[%zu].name: 1..128 bytes", i);
        if (c->sha256.len != 32)
            return ts_err_set(err, TS_EINVAL, "checksums[%zu].sha256: %zu bytes, want 32", i,
                              c->sha256.len);
        if (strlen(c->file) > 256)
            return ts_err_set(err, TS_EINVAL, "checksums[%zu].file: at most 256 bytes", i);
    }
    return check_unique(req, err);
}

/* Compares req with ref: every partition of each must be in the other with the same hash. */
static ts_status compare(const struct datamap_job *ref, const Tessera__V1__CheckDataRequest *req,
                         struct ts_err *err)
{
    char mine[17], theirs[17];

    for (size_t i = 0; i < req->n_checksums; i++) {
        const Tessera__V1__DataChecksum *c = req->checksums[i];
        const struct datamap_entry *e = NULL;

        for (size_t j = 0; j < ref->n && !e; j++)
            if (strcmp(ref->e[j].name, c->name) == 0)
                e = &ref->e[j];
        if (!e)
            return ts_err_set(err, TS_ESTATE, "data partition %s (%s): not in %s's data "
                              "(another dataset or split?)", c->name, c->file, ref->source);
        if (memcmp(e->sha, c->sha256.data, 32) != 0) {
            hex8(c->sha256.data, mine);
            hex8(e->sha, theirs);
            return ts_err_set(err, TS_ESTATE, "data partition %s (file %s): rank %u has "
                              "SHA-256 %s..., %s has %s...: the data differ; fix the file and "
                              "restart", c->name, c->file[0] ? c->file : "?", req->rank, mine,
                              ref->source, theirs);
        }
    }
    if (req->n_checksums != ref->n)
        return ts_err_set(err, TS_ESTATE, "checksums: rank %u has %zu data partitions, %s has "
                          "%zu (another dataset?)", req->rank, req->n_checksums, ref->source,
                          ref->n);
    return TS_OK;
}

ts_status datamap_check(struct datamap *d, const Tessera__V1__CheckDataRequest *req,
                        bool may_add, char *source, size_t source_len, struct ts_err *err)
{
    struct datamap_job *j = NULL;
    ts_status st = check_request(req, err);

    if (st)
        return st;
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->njobs && !j; i++)
        if (strcmp(d->jobs[i].job, req->job) == 0)
            j = &d->jobs[i];
    if (d->restored.n)
        st = compare(&d->restored, req, err);
    if (!st && j) {
        st = compare(j, req, err);
    } else if (!st && !may_add) {
        st = ts_err_set(err, TS_ESTATE, "job: '%s' has no registered worker; a worker of the "
                        "job registers (RegisterWorker.job) before it checks its data", req->job);
    } else if (!st && d->njobs == DATAMAP_MAX_JOBS) {
        st = ts_err_set(err, TS_ENOMEM, "job: the master holds %d data maps, its most; wait "
                        "for a job to end", DATAMAP_MAX_JOBS);
    } else if (!st) { /* the first worker's map is the job's reference */
        j = &d->jobs[d->njobs];
        if (!(j->e = calloc(req->n_checksums, sizeof(*j->e)))) {
            st = ts_err_set(err, TS_ENOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < req->n_checksums; i++) {
                snprintf(j->e[i].name, sizeof(j->e[i].name), "%s", req->checksums[i]->name);
                snprintf(j->e[i].file, sizeof(j->e[i].file), "%s", req->checksums[i]->file);
                memcpy(j->e[i].sha, req->checksums[i]->sha256.data, 32);
            }
            j->n = req->n_checksums;
            snprintf(j->job, sizeof(j->job), "%s", req->job);
            snprintf(j->source, sizeof(j->source), "rank %u", req->rank);
            j->rank = req->rank;
            d->njobs++;
        }
    }
    if (!st)
        snprintf(source, source_len, "%s", d->restored.n ? d->restored.source : j->source);
    pthread_mutex_unlock(&d->mu);
    return st;
}

void datamap_drop(struct datamap *d, const char *job)
{
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->njobs; i++)
        if (strcmp(d->jobs[i].job, job) == 0) {
            free(d->jobs[i].e);
            d->jobs[i] = d->jobs[--d->njobs];
            memset(&d->jobs[d->njobs], 0, sizeof(d->jobs[0]));
            break;
        }
    pthread_mutex_unlock(&d->mu);
}

ts_status datamap_manifest(struct datamap *d, const char *job,
                           Tessera__V1__Manifest__DataChecksumsEntry ***entries, size_t *n,
                           struct ts_err *err)
{
    const struct datamap_job *j = NULL;

    *entries = NULL;
    *n = 0;
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->njobs && !j; i++)
        if (strcmp(d->jobs[i].job, job) == 0)
            j = &d->jobs[i];
    if (!j && d->restored.n)
        j = &d->restored;
    if (j) {
        /* One block: the pointers, the entries, then the names and hashes. */
        size_t size = j->n * (sizeof(void *) + sizeof(Tessera__V1__Manifest__DataChecksumsEntry) +
                              sizeof(j->e[0].name) + 32);
        char *block = malloc(size + 1);

        if (!block) {
            pthread_mutex_unlock(&d->mu);
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        }
        Tessera__V1__Manifest__DataChecksumsEntry **pp = (void *)block;
        Tessera__V1__Manifest__DataChecksumsEntry *ev = (void *)(pp + j->n);
        char *names = (char *)(ev + j->n);
        uint8_t *shas = (uint8_t *)(names + j->n * sizeof(j->e[0].name));

        for (size_t i = 0; i < j->n; i++) {
            Tessera__V1__Manifest__DataChecksumsEntry init =
                TESSERA__V1__MANIFEST__DATA_CHECKSUMS_ENTRY__INIT;
            ev[i] = init;
            ev[i].key = names + i * sizeof(j->e[0].name);
            memcpy(ev[i].key, j->e[i].name, sizeof(j->e[0].name));
            memcpy(shas + 32 * i, j->e[i].sha, 32);
            ev[i].value.data = shas + 32 * i;
            ev[i].value.len = 32;
            pp[i] = &ev[i];
        }
        *entries = pp;
        *n = j->n;
    }
    pthread_mutex_unlock(&d->mu);
    return TS_OK;
}

Tessera__V1__CheckDataRequest **datamap_requests(struct datamap *d, struct ts_rpc_call *call,
                                                 size_t *n)
{
    Tessera__V1__CheckDataRequest **out;

    pthread_mutex_lock(&d->mu);
    out = ts_rpc_alloc(call, (d->njobs + 1) * sizeof(*out));
    for (size_t i = 0; i < d->njobs; i++) {
        const struct datamap_job *j = &d->jobs[i];
        Tessera__V1__CheckDataRequest *r =
            ts_rpc_new(call, &tessera__v1__check_data_request__descriptor);
        r->job = ts_rpc_strdup(call, j->job);
        r->rank = j->rank;
        r->n_checksums = j->n;
        r->checksums = ts_rpc_alloc(call, (j->n + 1) * sizeof(*r->checksums));
        for (size_t k = 0; k < j->n; k++) {
            Tessera__V1__DataChecksum *c = ts_rpc_new(call,
                                                      &tessera__v1__data_checksum__descriptor);
            c->name = ts_rpc_strdup(call, j->e[k].name);
            c->file = ts_rpc_strdup(call, j->e[k].file);
            c->sha256.len = 32;
            c->sha256.data = memcpy(ts_rpc_alloc(call, 32), j->e[k].sha, 32);
            r->checksums[k] = c;
        }
        out[i] = r;
    }
    *n = d->njobs;
    pthread_mutex_unlock(&d->mu);
    return out;
}
