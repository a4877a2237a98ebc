/* fuzz_manifest.c - libFuzzer target: ts_manifest_parse on arbitrary bytes.
 *
 * A manifest is the one structure read from the store that decides what a restore reads and
 * where it writes, so its parser must refuse anything malformed without crashing, leaking or
 * reading out of bounds, and whatever it accepts must hold what validation promises. Built with
 * clang -fsanitize=fuzzer,address,undefined (make fuzz; a short run is in make test).
 * Seeds: tests/fuzz/corpus (real manifests from a training run). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ts_err err = { 0 };
    ts_manifest *m = NULL;

    if (ts_manifest_parse(data, size, &m, &err) != TS_OK) {
        if (!err.msg[0] || strncmp(err.msg, "manifest", 8) != 0)
            abort(); /* every refusal says what was wrong, naming the manifest field */
        return 0;
    }
    /* Accepted: the promises code above relies on must hold. */
    for (size_t t = 0; t < m->n_tensors; t++) {
        uint64_t next = 0;
        for (size_t p = 0; p < m->tensors[t]->n_partitions; p++) {
            const ts_partition_manifest *pm = m->tensors[t]->partitions[p];
            if (pm->offset != next || pm->version != m->step)
                abort();
            for (size_t c = 0; c < pm->n_value_chunks; c++)
                if (pm->value_chunks[c].len != TS_STORE_ID_LEN)
                    abort();
            next += pm->length;
        }
        if (next != m->tensors[t]->numel)
            abort();
    }
    if (ts_manifest_validate(m, &err) != TS_OK)
        abort();
    ts_manifest_free(m);
    return 0;
}
