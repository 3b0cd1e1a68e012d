#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_

#include <oneapi/dnnl/dnnl.hpp>

#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CPU kernels: the data type a convolution or a matrix
// product reads its input and weights in. bf16 where the node is marked so
// (core/model/compute_precision.h) and this CPU has bf16 dot products
// (AVX512_BF16, or AMX); f32 otherwise, a marked node on a CPU without them
// logged once per process. The product accumulates and writes f32 either way.
dnnl::memory::data_type ProductDataType(const KernelSpec& spec);

// A convolution's: ProductDataType's where each output sums at least
// 64 products (input channels per group x kernel area: AMX's bf16 tiles
// take 32 pairs a row, and a depthwise convolution's 9 leave them empty) and
// each input element enters at least 64 (output channels per group x kernel
// area), since the input is converted from float32 on every run, a pass
// over it as long as reading it. All of mobilenet_v2's convolutions in bf16
// (batch 8, 2 cores, AMX) took 62.0 ms against 41.1 in float32, its
// depthwise and narrow high-resolution layers paying more in conversions
// than their products saved; resnet50's, all past both bounds, 212.5
// against 350.4 ms.
// Both bounds are waived where no conversion runs or one serves a chain:
// where X arrives in bfloat16 (written so by the convolution before it), or
// where this convolution writes bfloat16 (ConvWritesBFloat16).
// `group` and `weights` (W's shape) are the convolution's.
dnnl::memory::data_type ConvProductType(const KernelSpec& spec, int64_t group,
                                        const Shape& weights);

// Whether a 2-D convolution with constant weights writes its output in
// bfloat16: the node is marked so (kOutputPrecisionAttribute), this CPU
// computes its bf16 products, and the plan keeps the output in the kernel's
// own layout (KernelSpec::native_output, which carries the data type to
// its readers).
bool ConvWritesBFloat16(const KernelSpec& spec);

// Whether input `index` arrives in bfloat16 (in a native layout that says so).
bool ArrivesBFloat16(const KernelSpec& spec, int index);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_PRODUCT_PRECISION_H_
