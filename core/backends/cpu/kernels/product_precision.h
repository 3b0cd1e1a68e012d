#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_

#include <oneapi/dnnl/dnnl.hpp>

#include "core/device/kernel.h"

namespace replicad {

// Internal to the CPU kernels: the data type a convolution or a matrix
// product reads its input and weights in. bf16 where the node is marked so
// (core/model/compute_precision.h) and this CPU has bf16 dot products
// (AVX512_BF16, or AMX); f32 otherwise, a marked node on a CPU without them
// logged once per process. The product accumulates and writes f32 either way.
dnnl::memory::data_type ProductDataType(const KernelSpec& spec);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_
