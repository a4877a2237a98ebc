/* test_reflection.c - the reflection index and its answers, on the real embedded descriptor set.
 *
 * Every answer goes through protobuf-c pack and unpack, as a client receives it, so a response
 * that borrows a bad pointer or does not serialize fails here and not in grpcurl. The check a
 * client depends on is that the files returned for a service define every type its methods
 * use: that is what lets it call a method with no .proto file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "rpc/internal_reflection.h"

#define REQ(kind) GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##kind
#define RESP(kind) GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##kind

typedef Grpc__Reflection__V1__ServerReflectionRequest Request;
typedef Grpc__Reflection__V1__ServerReflectionResponse Response;
typedef Google__Protobuf__FileDescriptorProto FileProto;

static const char *const served[] = {
    "tessera.v1.Master",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};
#define NSERVED (sizeof(served) / sizeof(served[0]))

static const char host[] = "127.0.0.1:7070";

/* ---- helpers ---- */

static struct ts__reflection *index_of(void **state)
{
    return *state;
}

/* Answers req, sends it through the wire format and checks the echo of the request. */
static Response *roundtrip(const struct ts__reflection *r, const Request *req)
{
    struct ts__reflection_reply reply;
    Response *resp;
    uint8_t *buf;
    size_t n;

    ts__reflection_answer(r, req, &reply);
    n = protobuf_c_message_get_packed_size(&reply.resp.base);
    buf = malloc(n + 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(&reply.resp.base, buf), n);
    resp = grpc__reflection__v1__server_reflection_response__unpack(NULL, n, buf);
    free(buf);
    assert_non_null(resp);
    assert_string_equal(resp->valid_host, req->host);
    assert_non_null(resp->original_request);
    assert_int_equal(resp->original_request->message_request_case, req->message_request_case);
    return resp;
}

/* A request of a kind whose argument is a string. */
static Response *ask(const struct ts__reflection *r, int kind, const char *arg)
{
    Request req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    Response *resp;

    req.host = (char *)host;
    req.message_request_case = kind;
    switch (kind) {
    case REQ(FILE_BY_FILENAME):
        req.file_by_filename = (char *)arg;
        break;
    case REQ(FILE_CONTAINING_SYMBOL):
        req.file_containing_symbol = (char *)arg;
        break;
    case REQ(ALL_EXTENSION_NUMBERS_OF_TYPE):
        req.all_extension_numbers_of_type = (char *)arg;
        break;
    case REQ(LIST_SERVICES):
        req.list_services = (char *)arg;
        break;
    default:
        break;
    }
    resp = roundtrip(r, &req);
    switch (kind) {
    case REQ(FILE_BY_FILENAME):
        assert_string_equal(resp->original_request->file_by_filename, arg);
        break;
    case REQ(FILE_CONTAINING_SYMBOL):
        assert_string_equal(resp->original_request->file_containing_symbol, arg);
        break;
    default:
        break;
    }
    return resp;
}

static Response *ask_ext(const struct ts__reflection *r, const char *type, int32_t number)
{
    Grpc__Reflection__V1__ExtensionRequest x = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
    Request req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;

    x.containing_type = (char *)type;
    x.extension_number = number;
    req.host = (char *)host;
    req.message_request_case = REQ(FILE_CONTAINING_EXTENSION);
    req.file_containing_extension = &x;
    return roundtrip(r, &req);
}

static void expect_error(Response *resp, int code, const char *needle)
{
    assert_int_equal(resp->message_response_case, RESP(ERROR_RESPONSE));
    assert_int_equal(resp->error_response->error_code, code);
    if (needle && !strstr(resp->error_response->error_message, needle))
        fail_msg("error message '%s' does not name '%s'", resp->error_response->error_message,
                 needle);
}

struct files {
    FileProto *f[32];
    size_t n;
};

static bool has_file(const struct files *fs, const char *name)
{
    for (size_t i = 0; i < fs->n; i++)
        if (strcmp(fs->f[i]->name, name) == 0)
            return true;
    return false;
}

/* Unpacks a file_descriptor_response: first is want_first (unless NULL), no file twice, and
 * every import of every file is in it (a client can build a descriptor pool from it alone). */
static void unpack_files(Response *resp, const char *want_first, struct files *fs)
{
    Grpc__Reflection__V1__FileDescriptorResponse *fdr;

    if (resp->message_response_case != RESP(FILE_DESCRIPTOR_RESPONSE))
        fail_msg("want files, got case %d (%s)", resp->message_response_case,
                 resp->message_response_case == RESP(ERROR_RESPONSE)
                     ? resp->error_response->error_message : "");
    fdr = resp->file_descriptor_response;
    assert_true(fdr->n_file_descriptor_proto >= 1);
    assert_true(fdr->n_file_descriptor_proto <= 32);
    for (fs->n = 0; fs->n < fdr->n_file_descriptor_proto; fs->n++) {
        ProtobufCBinaryData *b = &fdr->file_descriptor_proto[fs->n];
        FileProto *f = google__protobuf__file_descriptor_proto__unpack(NULL, b->len, b->data);
        assert_non_null(f);
        assert_non_null(f->name);
        assert_false(has_file(fs, f->name));
        fs->f[fs->n] = f;
    }
    if (want_first)
        assert_string_equal(fs->f[0]->name, want_first);
    for (size_t i = 0; i < fs->n; i++)
        for (size_t d = 0; d < fs->f[i]->n_dependency; d++)
            if (!has_file(fs, fs->f[i]->dependency[d]))
                fail_msg("'%s' imports '%s', missing from the answer", fs->f[i]->name,
                         fs->f[i]->dependency[d]);
}

static void free_files(struct files *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        google__protobuf__file_descriptor_proto__free_unpacked(fs->f[i], NULL);
    fs->n = 0;
}

/* Whether the messages m[0..n) in scope define the type want (".pkg.Outer.Inner"). */
static bool defines(const char *scope, Google__Protobuf__DescriptorProto *const *m, size_t n,
                    const char *want)
{
    char full[512];

    for (size_t i = 0; i < n; i++) {
        snprintf(full, sizeof(full), "%s.%s", scope, m[i]->name);
        if (strcmp(full, want) == 0 || defines(full, m[i]->nested_type, m[i]->n_nested_type,
                                               want))
            return true;
    }
    return false;
}

static bool files_define(const struct files *fs, const char *want)
{
    char scope[256];

    for (size_t i = 0; i < fs->n; i++) {
        const FileProto *f = fs->f[i];
        snprintf(scope, sizeof(scope), "%s%s", f->package ? "." : "", f->package ? f->package : "");
        if (defines(scope, f->message_type, f->n_message_type, want))
            return true;
    }
    return false;
}

static unsigned char *pack_set(FileProto **files, size_t n, size_t *len)
{
    Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;
    unsigned char *buf;

    set.n_file = n;
    set.file = files;
    *len = google__protobuf__file_descriptor_set__get_packed_size(&set);
    buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(google__protobuf__file_descriptor_set__pack(&set, buf), *len);
    return buf;
}

static FileProto *embedded_file(Google__Protobuf__FileDescriptorSet *set, const char *name)
{
    for (size_t i = 0; i < set->n_file; i++)
        if (strcmp(set->file[i]->name, name) == 0)
            return set->file[i];
    fail_msg("'%s' is not in the embedded set", name);
    return NULL;
}

static void expect_create_fails(const unsigned char *set, size_t len, const char *const *svc,
                                size_t nsvc, ts_status code, const char *needle)
{
    struct ts__reflection *r = (struct ts__reflection *)&r; /* must stay untouched */
    struct ts_err err = { 0 };

    assert_int_equal(ts__reflection_create(set, len, svc, nsvc, &r, &err), code);
    assert_int_equal(err.code, code);
    assert_ptr_equal(r, (struct ts__reflection *)&r);
    if (needle && !strstr(err.msg, needle))
        fail_msg("error '%s' does not name '%s'", err.msg, needle);
    /* err is optional. */
    assert_int_equal(ts__reflection_create(set, len, svc, nsvc, &r, NULL), code);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
    struct ts__reflection *r = NULL;
    struct ts_err err = { 0 };

    if (ts__reflection_create(ts_descset, ts_descset_len, served, NSERVED, &r, &err) != TS_OK) {
        fprintf(stderr, "ts__reflection_create: %s\n", err.msg);
        return -1;
    }
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    ts__reflection_free(*state);
    return 0;
}

/* ---- tests ---- */

static void test_list_services(void **state)
{
    Response *resp = ask(index_of(state), REQ(LIST_SERVICES), "*");
    Grpc__Reflection__V1__ListServiceResponse *l;

    assert_int_equal(resp->message_response_case, RESP(LIST_SERVICES_RESPONSE));
    l = resp->list_services_response;
    assert_int_equal(l->n_service, NSERVED);
    for (size_t i = 0; i < NSERVED; i++)
        assert_string_equal(l->service[i]->name, served[i]);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

static void test_list_no_services(void **state)
{
    struct ts__reflection *r = NULL;
    Response *resp;

    (void)state;
    assert_int_equal(ts__reflection_create(ts_descset, ts_descset_len, NULL, 0, &r, NULL), TS_OK);
    resp = ask(r, REQ(LIST_SERVICES), "");
    assert_int_equal(resp->message_response_case, RESP(LIST_SERVICES_RESPONSE));
    assert_int_equal(resp->list_services_response->n_service, 0);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    ts__reflection_free(r);
}

static void test_file_containing_symbol(void **state)
{
    static const struct {
        const char *symbol, *file, *also;  /* also: an import that must come with it */
        size_t nfiles;
    } cases[] = {
        { "tessera.v1.Master", "tessera/v1/master.proto", "tessera/v1/common.proto", 2 },
        { "tessera.v1.Master.ClusterStatus", "tessera/v1/master.proto", "tessera/v1/common.proto",
          2 },
        { "tessera.v1.ClusterStatusResponse", "tessera/v1/master.proto", NULL, 2 },
        { "tessera.v1.Shard", "tessera/v1/shard.proto", "tessera/v1/snapshot.proto", 3 },
        { "tessera.v1.Manifest", "tessera/v1/snapshot.proto", "tessera/v1/common.proto", 2 },
        { "tessera.v1.ShardInfo", "tessera/v1/common.proto", NULL, 1 },
        { "tessera.v1.MemberState", "tessera/v1/common.proto", NULL, 1 },
        { "tessera.v1.MEMBER_STATE_ALIVE", "tessera/v1/common.proto", NULL, 1 },
        { "tessera.v1.ShardInfo.addr", "tessera/v1/common.proto", NULL, 1 },
        { ".tessera.v1.ShardInfo", "tessera/v1/common.proto", NULL, 1 },
        { "grpc.health.v1.Health", "grpc/health/v1/health.proto", NULL, 1 },
        { "grpc.health.v1.Health.Watch", "grpc/health/v1/health.proto", NULL, 1 },
        { "grpc.health.v1.HealthCheckResponse.ServingStatus", "grpc/health/v1/health.proto",
          NULL, 1 },
        { "grpc.health.v1.HealthCheckResponse.SERVING", "grpc/health/v1/health.proto", NULL, 1 },
        { "grpc.reflection.v1.ServerReflection", "grpc/reflection/v1/reflection.proto", NULL, 1 },
        { "grpc.reflection.v1alpha.ServerReflection", "grpc/reflection/v1alpha/reflection.proto",
          NULL, 1 },
        { "grpc.reflection.v1alpha.ServerReflectionRequest.file_containing_symbol",
          "grpc/reflection/v1alpha/reflection.proto", NULL, 1 },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Response *resp = ask(index_of(state), REQ(FILE_CONTAINING_SYMBOL), cases[i].symbol);
        struct files fs;

        unpack_files(resp, cases[i].file, &fs);
        assert_int_equal(fs.n, cases[i].nfiles);
        if (cases[i].also)
            assert_true(has_file(&fs, cases[i].also));
        free_files(&fs);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    }
}

/* What a client does with no .proto: list, fetch each service's files, resolve each method. */
static void test_every_method_resolves(void **state)
{
    for (size_t i = 0; i < NSERVED; i++) {
        Response *resp = ask(index_of(state), REQ(FILE_CONTAINING_SYMBOL), served[i]);
        const Google__Protobuf__ServiceDescriptorProto *svc = NULL;
        char full[256];
        struct files fs;

        unpack_files(resp, NULL, &fs);
        for (size_t k = 0; k < fs.f[0]->n_service; k++) {
            snprintf(full, sizeof(full), "%s.%s", fs.f[0]->package, fs.f[0]->service[k]->name);
            if (strcmp(full, served[i]) == 0)
                svc = fs.f[0]->service[k];
        }
        if (!svc)
            fail_msg("'%s' is not in '%s', the first file returned", served[i], fs.f[0]->name);
        assert_true(svc->n_method > 0);
        for (size_t m = 0; m < svc->n_method; m++) {
            assert_true(files_define(&fs, svc->method[m]->input_type));
            assert_true(files_define(&fs, svc->method[m]->output_type));
        }
        free_files(&fs);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    }
}

static void test_unknown_symbol(void **state)
{
    static const char *const names[] = {
        "tessera.v1.Nope", "tessera.v1", "tessera", "", ".", "tessera.v1.Master.Nope",
        "Master", "tessera.v1.master",
        /* Enum values are scoped beside their enum, not inside it (as protoc does). */
        "tessera.v1.MemberState.MEMBER_STATE_ALIVE",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        Response *resp = ask(index_of(state), REQ(FILE_CONTAINING_SYMBOL), names[i]);
        char quoted[128];

        snprintf(quoted, sizeof(quoted), "'%s'", names[i]);
        expect_error(resp, 5, quoted);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    }
}

static void test_long_symbol(void **state)
{
    char name[2000];
    Response *resp;

    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    resp = ask(index_of(state), REQ(FILE_CONTAINING_SYMBOL), name);
    expect_error(resp, 5, "xxxxxxxx");
    assert_true(strlen(resp->error_response->error_message) < 320);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

static void test_file_by_filename(void **state)
{
    static const struct {
        const char *file, *also;
        size_t nfiles;
    } cases[] = {
        { "tessera/v1/master.proto", "tessera/v1/common.proto", 2 },
        { "tessera/v1/common.proto", NULL, 1 },
        { "grpc/health/v1/health.proto", NULL, 1 },
        { "grpc/reflection/v1alpha/reflection.proto", NULL, 1 },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Response *resp = ask(index_of(state), REQ(FILE_BY_FILENAME), cases[i].file);
        struct files fs;

        unpack_files(resp, cases[i].file, &fs);
        assert_int_equal(fs.n, cases[i].nfiles);
        if (cases[i].also)
            assert_true(has_file(&fs, cases[i].also));
        free_files(&fs);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    }
}

static void test_unknown_file(void **state)
{
    static const char *const names[] = { "tessera/v1/nope.proto", "master.proto", "" };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        Response *resp = ask(index_of(state), REQ(FILE_BY_FILENAME), names[i]);
        char quoted[128];

        snprintf(quoted, sizeof(quoted), "'%s'", names[i]);
        expect_error(resp, 5, quoted);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    }
}

static void test_extension_requests(void **state)
{
    Response *resp = ask_ext(index_of(state), "tessera.v1.ShardInfo", 100);

    expect_error(resp, 5, "'tessera.v1.ShardInfo'");
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);

    resp = ask_ext(index_of(state), "google.protobuf.FileOptions", 1000);
    expect_error(resp, 5, "1000");
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);

    resp = ask(index_of(state), REQ(ALL_EXTENSION_NUMBERS_OF_TYPE), "tessera.v1.ShardInfo");
    expect_error(resp, 12, "all_extension_numbers_of_type");
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

static void test_unset_request(void **state)
{
    Response *resp = ask(index_of(state), REQ(_NOT_SET), NULL);

    expect_error(resp, 12, "not supported");
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

/* The answer is what the stream handler sends: check it in place too, before any packing. */
static void test_answer_in_place(void **state)
{
    Request req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    struct ts__reflection_reply reply;

    req.host = (char *)host;
    req.message_request_case = REQ(FILE_CONTAINING_SYMBOL);
    req.file_containing_symbol = (char *)"tessera.v1.Master";
    ts__reflection_answer(index_of(state), &req, &reply);
    assert_ptr_equal(reply.resp.original_request, &req);
    assert_ptr_equal(reply.resp.valid_host, req.host);
    assert_int_equal(reply.resp.message_response_case, RESP(FILE_DESCRIPTOR_RESPONSE));
    assert_int_equal(reply.resp.file_descriptor_response->n_file_descriptor_proto, 2);
}

static void test_create_bad_input(void **state)
{
    static const unsigned char garbage[] = { 0xff, 0xff, 0xff };
    static const unsigned char wrong_field[] = { 0x10, 0x01 }; /* field 2, varint 1: no file */
    static const char *const nope[] = { "tessera.v1.Nope" };
    static const char *const message[] = { "tessera.v1.ShardInfo" };
    static const char *const method[] = { "tessera.v1.Master.ClusterStatus" };
    static const char *const null_name[] = { NULL };

    (void)state;
    expect_create_fails(NULL, 10, NULL, 0, TS_EINVAL, "empty");
    expect_create_fails(ts_descset, 0, NULL, 0, TS_EINVAL, "empty");
    expect_create_fails(ts_descset, ts_descset_len, NULL, 1, TS_EINVAL, NULL);
    expect_create_fails(garbage, sizeof(garbage), NULL, 0, TS_ECORRUPT, "descriptor set");
    expect_create_fails(wrong_field, sizeof(wrong_field), NULL, 0, TS_ECORRUPT, "no file");
    expect_create_fails(ts_descset, ts_descset_len - 1, NULL, 0, TS_ECORRUPT, "descriptor set");
    expect_create_fails(ts_descset, ts_descset_len, nope, 1, TS_EINVAL, "'tessera.v1.Nope'");
    expect_create_fails(ts_descset, ts_descset_len, message, 1, TS_EINVAL,
                        "'tessera.v1.ShardInfo' is not a service");
    expect_create_fails(ts_descset, ts_descset_len, method, 1, TS_EINVAL, "not a service");
    expect_create_fails(ts_descset, ts_descset_len, null_name, 1, TS_EINVAL, "(null)");
    ts__reflection_free(NULL);
}

/* Sets built from the embedded one: a missing import, a file twice, a symbol twice. */
static void test_create_bad_sets(void **state)
{
    Google__Protobuf__FileDescriptorSet *all;
    FileProto *files[2], *common, *master;
    unsigned char *buf, *one, *two;
    size_t len, len2;
    char *name;

    (void)state;
    all = google__protobuf__file_descriptor_set__unpack(NULL, ts_descset_len, ts_descset);
    assert_non_null(all);
    common = embedded_file(all, "tessera/v1/common.proto");
    master = embedded_file(all, "tessera/v1/master.proto");

    files[0] = master;
    buf = pack_set(files, 1, &len);
    expect_create_fails(buf, len, NULL, 0, TS_ECORRUPT, "'tessera/v1/common.proto'");
    free(buf);

    files[0] = common;
    files[1] = common;
    buf = pack_set(files, 2, &len);
    expect_create_fails(buf, len, NULL, 0, TS_ECORRUPT, "appears twice");
    free(buf);

    /* Two files defining the same symbols. A set's encoding is its files' records one after
     * another, so two packed sets concatenate into one. */
    one = pack_set(&common, 1, &len);
    name = common->name;
    common->name = (char *)"tessera/v1/common_copy.proto";
    two = pack_set(&common, 1, &len2);
    common->name = name;
    buf = malloc(len + len2);
    assert_non_null(buf);
    memcpy(buf, one, len);
    memcpy(buf + len, two, len2);
    expect_create_fails(buf, len + len2, NULL, 0, TS_ECORRUPT, "is defined in");
    free(buf);
    free(one);
    free(two);
    google__protobuf__file_descriptor_set__free_unpacked(all, NULL);
}

/* A hand-made proto2 file with no package and one extension: the empty scope, and the found
 * path of file_containing_extension, which Tessera's own protos never take. */
static void test_extension_found(void **state)
{
    Google__Protobuf__FieldDescriptorProto x = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT;
    Google__Protobuf__DescriptorProto base = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
    Google__Protobuf__FieldDescriptorProto *px = &x;
    Google__Protobuf__DescriptorProto *pbase = &base;
    FileProto f = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT, *pf = &f;
    static const char *const none[] = { "Base" };
    struct ts__reflection *r = NULL;
    struct ts_err err = { 0 };
    unsigned char *buf;
    struct files fs;
    Response *resp;
    size_t len;

    (void)state;
    x.name = (char *)"flag";
    x.number = 100;
    x.has_number = 1;
    x.extendee = (char *)".Base";
    base.name = (char *)"Base";
    f.name = (char *)"ext.proto";
    f.n_message_type = 1;
    f.message_type = &pbase;
    f.n_extension = 1;
    f.extension = &px;
    buf = pack_set(&pf, 1, &len);
    expect_create_fails(buf, len, none, 1, TS_EINVAL, "not a service");
    assert_int_equal(ts__reflection_create(buf, len, NULL, 0, &r, &err), TS_OK);
    free(buf); /* the index keeps its own copy */

    resp = ask_ext(r, "Base", 100);
    unpack_files(resp, "ext.proto", &fs);
    free_files(&fs);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    resp = ask_ext(r, ".Base", 100);
    unpack_files(resp, "ext.proto", &fs);
    free_files(&fs);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    resp = ask_ext(r, "Base", 101);
    expect_error(resp, 5, "101");
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    resp = ask(r, REQ(FILE_CONTAINING_SYMBOL), "flag");
    unpack_files(resp, "ext.proto", &fs);
    free_files(&fs);
    grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
    ts__reflection_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_services),
        cmocka_unit_test(test_list_no_services),
        cmocka_unit_test(test_file_containing_symbol),
        cmocka_unit_test(test_every_method_resolves),
        cmocka_unit_test(test_unknown_symbol),
        cmocka_unit_test(test_long_symbol),
        cmocka_unit_test(test_file_by_filename),
        cmocka_unit_test(test_unknown_file),
        cmocka_unit_test(test_extension_requests),
        cmocka_unit_test(test_unset_request),
        cmocka_unit_test(test_answer_in_place),
        cmocka_unit_test(test_create_bad_input),
        cmocka_unit_test(test_create_bad_sets),
        cmocka_unit_test(test_extension_found),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
