#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_FORM_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_FORM_H_

#include <cstdint>

#include "core/backends/cuda/kernels/integer_product_launch.h"
#include "core/device/kernel.h"
#include "core/ops/quantize_attributes.h"

namespace replicad {

// Internal to the CUDA integer products (cuda_integer_product_kernels.cc,
// cuda_integer_tensor_core_kernel.cc): their DeviceProduct and
// convolution shapes.

// The types and per-channel flags of `product` (`channels`: MatMul's N or
// Conv's M), decided as the CPU's ProductParameters decides them; no
// pointers yet.
DeviceProduct IntegerProductForm(const KernelSpec& spec, const IntegerProduct& product,
                                 int64_t channels);

// `form` with a run's parameters, where the node's inputs put them (-1:
// left out, read as 0).
DeviceProduct WithProductParameters(DeviceProduct form, const IntegerProductInputs& at,
                                    const void* const* inputs);

// A 2-D ConvInteger's or QLinearConv's sizes and window as the launches
// take them.
IntegerConvShape IntegerConvShapeOf(const KernelSpec& spec, const IntegerConv& conv);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_INTEGER_PRODUCT_FORM_H_
