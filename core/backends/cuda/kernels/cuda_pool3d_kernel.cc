// 3-D MaxPool and AveragePool, and an int8 model's 2-D MaxPool, on a CUDA
// slot (pool3d_launch.h): our own kernels rather than cuDNN's, whose pooling
// has no dilations, pads both sides alike, counts a ceil_mode window's
// divisor its own way and takes no uint8; these give the CPU kernel's bytes.

#include <cstdint>
#include <memory>

#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/pool3d_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/pool3d_window.h"

namespace replicad {

KernelOrStatus MakeCudaPool3dKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type == "MaxPool" && spec.outputs.size() > 1) {
    return NodeUnimplemented(spec, "MaxPool's Indices output is not implemented on CUDA slots");
  }
  REPLICAD_ASSIGN_OR_RETURN(Pool3dAttributes pool, ParsePool3dAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const Pool3dWindow window = Pool3dWindowOf(pool, x);
  const int64_t planes = x[0] * x[1];
  return std::make_unique<LaunchKernel>(
      context, "Pool3dKernel",
      [window, planes](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchPool3d(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), planes, window,
                     stream);
      });
}

KernelOrStatus MakeCudaIntegerMaxPoolKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.outputs.size() > 1) {
    return NodeUnimplemented(spec, "MaxPool's Indices output is not implemented on CUDA slots");
  }
  REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(spec));
  const Shape& x = spec.inputs[0]->shape;
  const Pool3dWindow pool = Pool3dWindowOf2d(window, x);
  const int64_t planes = x[0] * x[1];
  const bool is_signed = spec.inputs[0]->dtype == DType::kInt8;
  return std::make_unique<LaunchKernel>(
      context, "IntegerMaxPoolKernel",
      [pool, planes, is_signed](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchIntegerMaxPool(in[0], out[0], is_signed, planes, pool, stream);
      });
}

}  // namespace replicad
