/* dtype.c - element sizes and names of the wire dtypes (values match tessera.v1.DType). */
#include "tensor/tensor.h"

size_t ts_dtype_size(enum ts_dtype dt)
{
    switch (dt) {
    case TS_DTYPE_F32:
        return 4;
    case TS_DTYPE_F16:
    case TS_DTYPE_BF16:
        return 2;
    case TS_DTYPE_F64:
        return 8;
    }
    return 0;
}

const char *ts_dtype_name(enum ts_dtype dt)
{
    switch (dt) {
    case TS_DTYPE_F32:
        return "f32";
    case TS_DTYPE_F16:
        return "f16";
    case TS_DTYPE_BF16:
        return "bf16";
    case TS_DTYPE_F64:
        return "f64";
    }
    return "unknown";
}
