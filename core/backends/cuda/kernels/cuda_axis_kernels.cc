// ArgMax, ArgMin, Hardmax, CumSum (axis_launch.h) and Trilu on a CUDA slot.

#include <cstdint>
#include <memory>

#include "core/backends/cuda/kernels/axis_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/base/status_macros.h"
#include "core/ops/axis_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {

KernelOrStatus MakeCudaAxisKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType dtype = spec.inputs[0]->dtype;
  if (spec.op_type == "ArgMax" || spec.op_type == "ArgMin") {
    REPLICAD_ASSIGN_OR_RETURN(ArgReduceAttributes arg, ParseArgReduce(spec));
    const AxisLines l = arg.lines;
    const bool max = spec.op_type == "ArgMax";
    const bool last = arg.last_index;
    return std::make_unique<LaunchKernel>(
        context, "ArgReduceKernel",
        [l, max, last, dtype](const void* const* in, void* const* out, cudaStream_t stream) {
          int64_t* indices = static_cast<int64_t*>(out[0]);
          if (dtype == DType::kInt64) {
            LaunchArgReduce(static_cast<const int64_t*>(in[0]), indices, l.outer, l.axis_dim,
                            l.inner, max, last, stream);
          } else {
            LaunchArgReduce(static_cast<const float*>(in[0]), indices, l.outer, l.axis_dim, l.inner,
                            max, last, stream);
          }
        });
  }
  if (spec.op_type == "Hardmax") {
    REPLICAD_ASSIGN_OR_RETURN(AxisLines l, ParseHardmax(spec));
    return std::make_unique<LaunchKernel>(
        context, "HardmaxKernel",
        [l](const void* const* in, void* const* out, cudaStream_t stream) {
          LaunchHardmax(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), l.outer,
                        l.axis_dim, l.inner, stream);
        });
  }
  if (spec.op_type == "CumSum") {
    REPLICAD_ASSIGN_OR_RETURN(CumSumAttributes sum, ParseCumSum(spec));
    const AxisLines l = sum.lines;
    const bool exclusive = sum.exclusive, reverse = sum.reverse;
    return std::make_unique<LaunchKernel>(
        context, "CumSumKernel",
        [l, exclusive, reverse, dtype](const void* const* in, void* const* out,
                                       cudaStream_t stream) {
          if (dtype == DType::kInt64) {
            LaunchCumSum(static_cast<const int64_t*>(in[0]), static_cast<int64_t*>(out[0]), l.outer,
                         l.axis_dim, l.inner, exclusive, reverse, stream);
          } else {
            LaunchCumSum(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), l.outer,
                         l.axis_dim, l.inner, exclusive, reverse, stream);
          }
        });
  }
  REPLICAD_ASSIGN_OR_RETURN(TriluLayout trilu, ParseTrilu(spec));
  const size_t element_size = DTypeSize(dtype);
  return std::make_unique<LaunchKernel>(
      context, "TriluKernel",
      [trilu, element_size](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchTrilu(in[0], out[0], trilu.matrices, trilu.rows, trilu.cols, trilu.k, trilu.upper,
                    element_size, stream);
      });
}

}  // namespace replicad
