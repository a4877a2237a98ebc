/* partition.c - cutting a tensor into partitions, the unit of placement and of pushes.
 *
 * Partition p covers elements [p * per, min((p + 1) * per, numel)) with per =
 * max(1, partition_bytes / elem_size): every partition but the last is full, so a partition's
 * range follows from (numel, elem_size, partition_bytes, p) alone and every process that
 * knows the tensor's shape agrees on it without asking anyone. */
#include "tensor/tensor.h"

/* Whole elements per partition, at least one; an elem_size of 0 counts as 1 byte. */
static uint64_t per_partition(size_t elem_size, uint64_t partition_bytes)
{
    uint64_t per = partition_bytes / (elem_size ? elem_size : 1);

    return per ? per : 1;
}

uint32_t ts_partition_count(uint64_t numel, size_t elem_size, uint64_t partition_bytes)
{
    uint64_t per = per_partition(elem_size, partition_bytes);
    uint64_t count = numel / per + (numel % per != 0);

    return count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
}

void ts_partition_range(uint64_t numel, size_t elem_size, uint64_t partition_bytes, uint32_t p,
                        uint64_t *offset, uint64_t *len)
{
    uint64_t per = per_partition(elem_size, partition_bytes);

    if (p >= ts_partition_count(numel, elem_size, partition_bytes)) {
        *offset = numel;
        *len = 0;
        return;
    }
    *offset = (uint64_t)p * per;
    *len = numel - *offset < per ? numel - *offset : per;
}

uint64_t ts_partition_bytes_between_hosts(uint64_t tensor_bytes, uint32_t shards)
{
    const uint64_t seg = 64u << 10, less = 4u << 10;
    uint64_t per = tensor_bytes / (64 * (uint64_t)(shards ? shards : 1)) / seg * seg;

    if (per < seg)
        per = seg;
    if (per > TS_PARTITION_BYTES_DEFAULT)
        per = TS_PARTITION_BYTES_DEFAULT;
    return per - less;
}
