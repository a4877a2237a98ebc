/* reflection.c - the index behind server reflection, and the answer to one request.
 *
 * The embedded FileDescriptorSet is scanned once at the wire level, so each file's
 * FileDescriptorProto is sent as the exact bytes protoc wrote (no re-serialization). Each file
 * is also unpacked once to learn its imports and the symbols it defines; the unpacked copies
 * are dropped after indexing. Everything an answer needs is precomputed: per file the list of
 * bytes of itself and its transitive imports, and the list_services response. So an answer is
 * a lookup plus pointers into the index: no allocation, no failure, no lock. */
#include "rpc/internal_reflection.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/status.h>

#include "google/protobuf/descriptor.pb-c.h"

#define REQ(kind) GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##kind
#define RESP(kind) GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##kind

struct file {
    char *name;                   /* "tessera/v1/master.proto" */
    ProtobufCBinaryData bytes;    /* its FileDescriptorProto, inside r->set */
    size_t *deps;                 /* indices in r->files of its direct imports */
    size_t ndeps;
    ProtobufCBinaryData *closure; /* itself, then its imports, transitively, each once */
    size_t nclosure;
};

struct sym {
    char *name;                   /* fully qualified, no leading dot */
    size_t file;
    bool service;
};

struct ext {
    char *extendee;               /* fully qualified, no leading dot */
    int32_t number;
    size_t file;
};

struct ts__reflection {
    unsigned char *set;           /* our copy of the descriptor set */
    struct file *files;
    size_t nfiles;
    struct sym *syms;             /* sorted by name once built */
    size_t nsyms, capsyms;
    struct ext *exts;
    size_t nexts, capexts;
    Grpc__Reflection__V1__ServiceResponse *svc;  /* names point at syms[].name */
    Grpc__Reflection__V1__ServiceResponse **svcp;
    size_t nsvc;
};

/* strdup() is POSIX, not C11. */
static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);

    return d ? memcpy(d, s, n) : NULL;
}

/* ---- reading the set ---- */

/* Reads a base-128 varint at *p and advances *p; false when truncated or over 64 bits. */
static bool get_varint(unsigned char **p, const unsigned char *end, uint64_t *v)
{
    uint64_t x = 0;

    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Finds the next `repeated FileDescriptorProto file = 1` of a FileDescriptorSet in [*p, end)
 * and puts its bytes in *f. Returns 1 when found, 0 at the end, -1 when the bytes are bad.
 * Other fields are skipped, as a parser must for fields it does not know. */
static int next_file(unsigned char **p, unsigned char *end, ProtobufCBinaryData *f)
{
    uint64_t tag, n;

    while (*p < end) {
        if (!get_varint(p, end, &tag))
            return -1;
        switch (tag & 7) {
        case 0:
            if (!get_varint(p, end, &n))
                return -1;
            break;
        case 1:
        case 5:
            n = (tag & 7) == 1 ? 8 : 4;
            if (n > (uint64_t)(end - *p))
                return -1;
            *p += n;
            break;
        case 2:
            if (!get_varint(p, end, &n) || n > (uint64_t)(end - *p))
                return -1;
            if (tag >> 3 == 1) {
                f->data = *p;
                f->len = (size_t)n;
                *p += n;
                return 1;
            }
            *p += n;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

/* Splits r->set[0..len) into r->files[].bytes. */
static ts_status split_set(struct ts__reflection *r, size_t len, struct ts_err *err)
{
    ProtobufCBinaryData f;
    unsigned char *p = r->set, *end = r->set + len;
    size_t n = 0;
    int rc;

    while ((rc = next_file(&p, end, &f)) == 1)
        n++;
    if (rc < 0 || n == 0)
        return ts_err_set(err, TS_ECORRUPT, "descriptor set: %s at byte %zu: regenerate it with "
                          "protoc --descriptor_set_out", rc < 0 ? "bad encoding" : "no file",
                          (size_t)(p - r->set));
    r->files = calloc(n, sizeof(*r->files));
    if (!r->files)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory for %zu files", n);
    for (p = r->set; r->nfiles < n; r->nfiles++)
        next_file(&p, end, &r->files[r->nfiles].bytes);
    return TS_OK;
}

/* A descriptor set holds tens of files: a linear search is the simplest index. */
static const struct file *find_file(const struct ts__reflection *r, const char *name)
{
    for (size_t i = 0; i < r->nfiles; i++)
        if (strcmp(r->files[i].name, name) == 0)
            return &r->files[i];
    return NULL;
}

/* ---- files and their imports ---- */

static ts_status name_files(struct ts__reflection *r, Google__Protobuf__FileDescriptorProto **fdp,
                            struct ts_err *err)
{
    for (size_t i = 0; i < r->nfiles; i++) {
        if (!fdp[i]->name || !fdp[i]->name[0])
            return ts_err_set(err, TS_ECORRUPT, "descriptor set: file %zu has no name", i);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(r->files[j].name, fdp[i]->name) == 0)
                return ts_err_set(err, TS_ECORRUPT, "descriptor set: file '%s' appears twice",
                                  fdp[i]->name);
        }
        r->files[i].name = dup_str(fdp[i]->name);
        if (!r->files[i].name)
            return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    }
    return TS_OK;
}

static ts_status link_deps(struct ts__reflection *r, size_t i,
                           const Google__Protobuf__FileDescriptorProto *fdp, struct ts_err *err)
{
    struct file *f = &r->files[i];

    if (fdp->n_dependency == 0)
        return TS_OK;
    f->deps = calloc(fdp->n_dependency, sizeof(*f->deps));
    if (!f->deps)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    for (; f->ndeps < fdp->n_dependency; f->ndeps++) {
        const struct file *d = find_file(r, fdp->dependency[f->ndeps]);
        if (!d)
            return ts_err_set(err, TS_ECORRUPT, "descriptor set: '%s' imports '%s', which is "
                              "not in the set: build it with --include_imports", f->name,
                              fdp->dependency[f->ndeps]);
        f->deps[f->ndeps] = (size_t)(d - r->files);
    }
    return TS_OK;
}

/* Breadth-first from file i, so the file itself comes first and each import once.
 * queue and seen are scratch arrays of r->nfiles entries. */
static ts_status close_deps(struct ts__reflection *r, size_t i, size_t *queue, bool *seen,
                            struct ts_err *err)
{
    struct file *f = &r->files[i];
    size_t head = 0, tail = 0;

    memset(seen, 0, r->nfiles * sizeof(*seen));
    queue[tail++] = i;
    seen[i] = true;
    while (head < tail) {
        const struct file *g = &r->files[queue[head++]];
        for (size_t d = 0; d < g->ndeps; d++) {
            if (!seen[g->deps[d]]) {
                seen[g->deps[d]] = true;
                queue[tail++] = g->deps[d];
            }
        }
    }
    f->closure = calloc(tail, sizeof(*f->closure));
    if (!f->closure)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    for (f->nclosure = 0; f->nclosure < tail; f->nclosure++)
        f->closure[f->nclosure] = r->files[queue[f->nclosure]].bytes;
    return TS_OK;
}

/* ---- symbols ---- */

/* "scope.name", or "name" in the empty scope (a file without a package). */
static char *join(const char *scope, const char *name)
{
    size_t a = strlen(scope), b = strlen(name);
    char *s = malloc(a + b + 2);

    if (!s)
        return NULL;
    memcpy(s, scope, a);
    if (a)
        s[a++] = '.';
    memcpy(s + a, name, b + 1);
    return s;
}

/* Adds scope.name as a symbol of file; *full (may be NULL) gets the index-owned full name,
 * the scope of what is nested in it. */
static ts_status add_sym(struct ts__reflection *r, const char *scope, const char *name,
                         size_t file, bool service, const char **full, struct ts_err *err)
{
    char *s;

    if (!name || !name[0])
        return ts_err_set(err, TS_ECORRUPT, "descriptor set: '%s': a definition in '%s' has no "
                          "name", r->files[file].name, scope);
    if (r->nsyms == r->capsyms) {
        size_t cap = r->capsyms ? 2 * r->capsyms : 256;
        struct sym *p = realloc(r->syms, cap * sizeof(*p));
        if (!p)
            return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
        r->syms = p;
        r->capsyms = cap;
    }
    s = join(scope, name);
    if (!s)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    r->syms[r->nsyms++] = (struct sym){ .name = s, .file = file, .service = service };
    if (full)
        *full = s;
    return TS_OK;
}

/* An extension is a symbol where it is declared, and an (extendee, number) pair. */
static ts_status add_ext(struct ts__reflection *r, const char *scope,
                         const Google__Protobuf__FieldDescriptorProto *x, size_t file,
                         struct ts_err *err)
{
    const char *t = x->extendee ? x->extendee : "";
    ts_status st = add_sym(r, scope, x->name, file, false, NULL, err);

    if (st != TS_OK)
        return st;
    if (r->nexts == r->capexts) {
        size_t cap = r->capexts ? 2 * r->capexts : 16;
        struct ext *p = realloc(r->exts, cap * sizeof(*p));
        if (!p)
            return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
        r->exts = p;
        r->capexts = cap;
    }
    r->exts[r->nexts].extendee = dup_str(t[0] == '.' ? t + 1 : t);
    if (!r->exts[r->nexts].extendee)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    r->exts[r->nexts].number = x->number;
    r->exts[r->nexts++].file = file;
    return TS_OK;
}

/* Enum values are siblings of their enum: tessera.v1.MEMBER_STATE_ALIVE, as protoc scopes
 * them. */
static ts_status add_enum(struct ts__reflection *r, const char *scope,
                          const Google__Protobuf__EnumDescriptorProto *e, size_t file,
                          struct ts_err *err)
{
    ts_status st = add_sym(r, scope, e->name, file, false, NULL, err);

    for (size_t i = 0; st == TS_OK && i < e->n_value; i++)
        st = add_sym(r, scope, e->value[i]->name, file, false, NULL, err);
    return st;
}

static ts_status add_message(struct ts__reflection *r, const char *scope,
                             const Google__Protobuf__DescriptorProto *m, size_t file,
                             struct ts_err *err)
{
    const char *full;
    ts_status st = add_sym(r, scope, m->name, file, false, &full, err);
    size_t i;

    for (i = 0; st == TS_OK && i < m->n_field; i++)
        st = add_sym(r, full, m->field[i]->name, file, false, NULL, err);
    for (i = 0; st == TS_OK && i < m->n_oneof_decl; i++)
        st = add_sym(r, full, m->oneof_decl[i]->name, file, false, NULL, err);
    for (i = 0; st == TS_OK && i < m->n_nested_type; i++)
        st = add_message(r, full, m->nested_type[i], file, err);
    for (i = 0; st == TS_OK && i < m->n_enum_type; i++)
        st = add_enum(r, full, m->enum_type[i], file, err);
    for (i = 0; st == TS_OK && i < m->n_extension; i++)
        st = add_ext(r, full, m->extension[i], file, err);
    return st;
}

static ts_status add_service(struct ts__reflection *r, const char *scope,
                             const Google__Protobuf__ServiceDescriptorProto *s, size_t file,
                             struct ts_err *err)
{
    const char *full;
    ts_status st = add_sym(r, scope, s->name, file, true, &full, err);

    for (size_t i = 0; st == TS_OK && i < s->n_method; i++)
        st = add_sym(r, full, s->method[i]->name, file, false, NULL, err);
    return st;
}

static ts_status add_file(struct ts__reflection *r, size_t file,
                          const Google__Protobuf__FileDescriptorProto *fdp, struct ts_err *err)
{
    const char *pkg = fdp->package ? fdp->package : "";
    ts_status st = TS_OK;
    size_t i;

    for (i = 0; st == TS_OK && i < fdp->n_message_type; i++)
        st = add_message(r, pkg, fdp->message_type[i], file, err);
    for (i = 0; st == TS_OK && i < fdp->n_enum_type; i++)
        st = add_enum(r, pkg, fdp->enum_type[i], file, err);
    for (i = 0; st == TS_OK && i < fdp->n_service; i++)
        st = add_service(r, pkg, fdp->service[i], file, err);
    for (i = 0; st == TS_OK && i < fdp->n_extension; i++)
        st = add_ext(r, pkg, fdp->extension[i], file, err);
    return st;
}

static int cmp_sym(const void *a, const void *b)
{
    return strcmp(((const struct sym *)a)->name, ((const struct sym *)b)->name);
}

static int cmp_key(const void *key, const void *s)
{
    return strcmp(key, ((const struct sym *)s)->name);
}

/* A leading dot, as in a field's type_name (".tessera.v1.ShardInfo"), is accepted. */
static const struct sym *find_sym(const struct ts__reflection *r, const char *name)
{
    if (name[0] == '.')
        name++;
    return r->nsyms ? bsearch(name, r->syms, r->nsyms, sizeof(*r->syms), cmp_key) : NULL;
}

static ts_status sort_syms(struct ts__reflection *r, struct ts_err *err)
{
    qsort(r->syms, r->nsyms, sizeof(*r->syms), cmp_sym);
    for (size_t i = 1; i < r->nsyms; i++) {
        if (strcmp(r->syms[i - 1].name, r->syms[i].name) == 0)
            return ts_err_set(err, TS_ECORRUPT, "descriptor set: symbol '%s' is defined in "
                              "'%s' and in '%s'", r->syms[i].name,
                              r->files[r->syms[i - 1].file].name, r->files[r->syms[i].file].name);
    }
    return TS_OK;
}

/* ---- building ---- */

/* Unpacks every file, learns names, imports and symbols, then drops the unpacked copies. */
static ts_status index_files(struct ts__reflection *r, struct ts_err *err)
{
    Google__Protobuf__FileDescriptorProto **fdp = calloc(r->nfiles, sizeof(*fdp));
    ts_status st = TS_OK;
    size_t i;

    if (!fdp)
        return ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    for (i = 0; st == TS_OK && i < r->nfiles; i++) {
        fdp[i] = google__protobuf__file_descriptor_proto__unpack(NULL, r->files[i].bytes.len,
                                                                 r->files[i].bytes.data);
        if (!fdp[i])
            st = ts_err_set(err, TS_ECORRUPT, "descriptor set: file %zu does not parse", i);
    }
    if (st == TS_OK)
        st = name_files(r, fdp, err);
    for (i = 0; st == TS_OK && i < r->nfiles; i++)
        st = link_deps(r, i, fdp[i], err);
    for (i = 0; st == TS_OK && i < r->nfiles; i++)
        st = add_file(r, i, fdp[i], err);
    for (i = 0; i < r->nfiles; i++) {
        if (fdp[i])
            google__protobuf__file_descriptor_proto__free_unpacked(fdp[i], NULL);
    }
    free(fdp);
    return st;
}

static ts_status close_all(struct ts__reflection *r, struct ts_err *err)
{
    size_t *queue = calloc(r->nfiles, sizeof(*queue));
    bool *seen = calloc(r->nfiles, sizeof(*seen));
    ts_status st = TS_OK;

    if (!queue || !seen)
        st = ts_err_set(err, TS_ENOMEM, "descriptor set: out of memory");
    for (size_t i = 0; st == TS_OK && i < r->nfiles; i++)
        st = close_deps(r, i, queue, seen, err);
    free(queue);
    free(seen);
    return st;
}

static ts_status list_services(struct ts__reflection *r, const char *const *services,
                               size_t n, struct ts_err *err)
{
    if (n == 0)
        return TS_OK;
    r->svc = calloc(n, sizeof(*r->svc));
    r->svcp = calloc(n, sizeof(*r->svcp));
    if (!r->svc || !r->svcp)
        return ts_err_set(err, TS_ENOMEM, "reflection: out of memory for %zu services", n);
    for (; r->nsvc < n; r->nsvc++) {
        const char *name = services[r->nsvc];
        const struct sym *s = name ? find_sym(r, name) : NULL;
        if (!s || !s->service)
            return ts_err_set(err, TS_EINVAL, "reflection: service '%s' is not %s the embedded "
                              "descriptor set: add its .proto to the set", name ? name : "(null)",
                              s ? "a service in" : "in");
        grpc__reflection__v1__service_response__init(&r->svc[r->nsvc]);
        r->svc[r->nsvc].name = s->name;
        r->svcp[r->nsvc] = &r->svc[r->nsvc];
    }
    return TS_OK;
}

ts_status ts__reflection_create(const unsigned char *set, size_t len,
                                const char *const *services, size_t nservices,
                                struct ts__reflection **out, struct ts_err *err)
{
    struct ts__reflection *r;
    ts_status st;

    if (!set || len == 0)
        return ts_err_set(err, TS_EINVAL, "reflection: descriptor set is empty");
    if (nservices && !services)
        return ts_err_set(err, TS_EINVAL, "reflection: %zu services but no names", nservices);
    r = calloc(1, sizeof(*r));
    if (!r || !(r->set = malloc(len))) {
        free(r);
        return ts_err_set(err, TS_ENOMEM, "reflection: out of memory for %zu bytes", len);
    }
    memcpy(r->set, set, len);
    st = split_set(r, len, err);
    if (st == TS_OK)
        st = index_files(r, err);
    if (st == TS_OK)
        st = close_all(r, err);
    if (st == TS_OK)
        st = sort_syms(r, err);
    if (st == TS_OK)
        st = list_services(r, services, nservices, err);
    if (st != TS_OK) {
        ts__reflection_free(r);
        return st;
    }
    *out = r;
    return TS_OK;
}

void ts__reflection_free(struct ts__reflection *r)
{
    size_t i;

    if (!r)
        return;
    for (i = 0; i < r->nfiles; i++) {
        free(r->files[i].name);
        free(r->files[i].deps);
        free(r->files[i].closure);
    }
    for (i = 0; i < r->nsyms; i++)
        free(r->syms[i].name);
    for (i = 0; i < r->nexts; i++)
        free(r->exts[i].extendee);
    free(r->files);
    free(r->syms);
    free(r->exts);
    free(r->svc);
    free(r->svcp);
    free(r->set);
    free(r);
}

/* ---- answering ---- */

/* The error codes are the error_response field's values, which the reflection protocol defines
 * as gRPC status codes; they are not a translation of a ts_status. */
static void set_error(struct ts__reflection_reply *out, int code, const char *fmt, ...)
    TS_PRINTF(3, 4);

static void set_error(struct ts__reflection_reply *out, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof(out->msg), fmt, ap);
    va_end(ap);
    grpc__reflection__v1__error_response__init(&out->u.error);
    out->u.error.error_code = code;
    out->u.error.error_message = out->msg;
    out->resp.message_response_case = RESP(ERROR_RESPONSE);
    out->resp.error_response = &out->u.error;
}

static void set_files(struct ts__reflection_reply *out, const struct file *f)
{
    grpc__reflection__v1__file_descriptor_response__init(&out->u.files);
    out->u.files.n_file_descriptor_proto = f->nclosure;
    out->u.files.file_descriptor_proto = f->closure;
    out->resp.message_response_case = RESP(FILE_DESCRIPTOR_RESPONSE);
    out->resp.file_descriptor_response = &out->u.files;
}

static void answer_extension(const struct ts__reflection *r,
                             const Grpc__Reflection__V1__ExtensionRequest *x,
                             struct ts__reflection_reply *out)
{
    const char *t = x && x->containing_type ? x->containing_type : "";
    int32_t n = x ? x->extension_number : 0;

    if (t[0] == '.')
        t++;
    for (size_t i = 0; i < r->nexts; i++) {
        if (r->exts[i].number == n && strcmp(r->exts[i].extendee, t) == 0) {
            set_files(out, &r->files[r->exts[i].file]);
            return;
        }
    }
    set_error(out, GRPC_STATUS_NOT_FOUND, "extension %d of '%.200s' not found", (int)n, t);
}

void ts__reflection_answer(const struct ts__reflection *r,
                           const Grpc__Reflection__V1__ServerReflectionRequest *req,
                           struct ts__reflection_reply *out)
{
    const struct file *f;
    const struct sym *s;

    grpc__reflection__v1__server_reflection_response__init(&out->resp);
    out->resp.valid_host = req->host;
    /* protobuf-c has no const message pointers; the response only reads the request. */
    out->resp.original_request = (Grpc__Reflection__V1__ServerReflectionRequest *)req;
    switch (req->message_request_case) {
    case REQ(LIST_SERVICES):
        grpc__reflection__v1__list_service_response__init(&out->u.list);
        out->u.list.n_service = r->nsvc;
        out->u.list.service = r->svcp;
        out->resp.message_response_case = RESP(LIST_SERVICES_RESPONSE);
        out->resp.list_services_response = &out->u.list;
        break;
    case REQ(FILE_BY_FILENAME):
        f = find_file(r, req->file_by_filename);
        if (f)
            set_files(out, f);
        else
            set_error(out, GRPC_STATUS_NOT_FOUND, "file '%.200s' not found",
                      req->file_by_filename);
        break;
    case REQ(FILE_CONTAINING_SYMBOL):
        s = find_sym(r, req->file_containing_symbol);
        if (s)
            set_files(out, &r->files[s->file]);
        else
            set_error(out, GRPC_STATUS_NOT_FOUND, "symbol '%.200s' not found",
                      req->file_containing_symbol);
        break;
    case REQ(FILE_CONTAINING_EXTENSION):
        answer_extension(r, req->file_containing_extension, out);
        break;
    case REQ(ALL_EXTENSION_NUMBERS_OF_TYPE):
        /* Optional in the protocol, which names UNIMPLEMENTED as the answer; proto3 messages
         * have no extension ranges, so clients do not need it for Tessera's types. */
        set_error(out, GRPC_STATUS_UNIMPLEMENTED, "all_extension_numbers_of_type is not "
                  "supported");
        break;
    default:
        /* Unset, or a kind added to the protocol after this binding was generated. */
        set_error(out, GRPC_STATUS_UNIMPLEMENTED, "reflection request kind %d is not supported",
                  (int)req->message_request_case);
        break;
    }
}
