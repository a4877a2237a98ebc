/* optim_scalar.h - bench_optim's baseline: lib/tensor/optim.c compiled a second time as the
 * portable build (TS_TENSOR_NO_CLONES, no auto-vectorisation), its public names renamed by
 * bench/CMakeLists.txt so that it links beside lib/tensor's own. Same contract as
 * ts_optim_apply (tensor.h). */
#ifndef TS_BENCH_OPTIM_SCALAR_H
#define TS_BENCH_OPTIM_SCALAR_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

void bench_optim_apply_scalar(const struct ts_optim_cfg *cfg, uint64_t step, float *param,
                              float *state, const float *grad, size_t n);

#endif
