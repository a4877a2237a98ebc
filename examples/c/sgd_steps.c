/* sgd_steps.c - the smallest trainer on the installed SDK (docs/install.md).
 *
 * Connects to a cluster (argv[1], "host:port", or "local"), registers one tensor of 1000
 * floats as job argv[2] with one exact worker, runs 20 steps of a fixed gradient through the
 * shards and prints a checksum of the parameters: the same on any
 * cluster (exact mode), with the shared or the static library. Build it outside the source tree:
 *
 *     cc sgd_steps.c $(pkg-config --cflags --libs tessera) -o sgd_steps
 *     ./sgd_steps 127.0.0.1:7070 hello
 *
 * against a `tessera up`, which runs mutual TLS: the SDK finds the certificates in
 * $TESSERA_TLS_DIR, which `tessera up` prints right after the master's address.
 *
 * or with CMake: find_package(Tessera) and link Tessera::tessera (examples/c/CMakeLists.txt). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tessera.h>

#define N 1000
#define STEPS 20

int main(int argc, char **argv)
{
    struct tessera_options o = { .size = sizeof(o), .master = argc > 1 ? argv[1] : "local",
                                 .job = argc > 2 ? argv[2] : "sgd-steps", .rank = 0,
                                 .workers = 1, .exact = 1, .optimizer = "sgd:lr=0.5",
                                 .batch = 4 };
    static float w[N], g[N];
    static int64_t fixed[N];
    const void *grads[1] = { fixed };
    float *params[1] = { w };
    uint64_t shape[1] = { N }, sum = 0;
    struct tessera_error e;
    tessera *t;
    int id, rc;

    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: sgd_steps [MASTER [JOB]]\n20 exact SGD steps of one tensor through a "
               "Tessera cluster (MASTER host:port, default local); prints a checksum.\n");
        return 0;
    }
    if (tessera_connect(&o, &t, &e)) {
        fprintf(stderr, "sgd_steps: %s\n", e.message);
        return 1;
    }
    for (int i = 0; i < N; i++)
        g[i] = 0.25f * (float)(i % 7) - 0.5f;
    rc = tessera_register(t, "w", shape, 1, "normal:0.1", 7, 0, 0, 0, &id, &e) ||
         tessera_pull(t, id, 0, w, &e) || tessera_to_fixed(g, N, fixed, &e);
    for (uint64_t s = 0; !rc && s < STEPS; s++)
        rc = tessera_step(t, s, grads, params, &e);
    if (rc) {
        fprintf(stderr, "sgd_steps: %s\n", e.message);
        tessera_close(t);
        return 1;
    }
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &w[i], sizeof(u));
        sum = sum * 1000003u + u;
    }
    printf("%d steps, checksum %016llx\n", STEPS, (unsigned long long)sum);
    tessera_close(t);
    return 0;
}
