// Resize and Upsample on a CUDA slot (resize_launch.h): the per-axis tables
// that ParseResize and ParseUpsample compute are uploaded once, and Run is
// one launch that reads them.

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/resize_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/resize_attributes.h"

namespace replicad {

KernelOrStatus MakeCudaResizeKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ResizeLayout layout,
                            spec.op_type == "Upsample" ? ParseUpsample(spec) : ParseResize(spec));
  const int rank = static_cast<int>(layout.axes.size());
  if (rank > kMaxRank) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend resizes tensors of at most ",
                                                kMaxRank, " dims; received ", rank));
  }
  const DType dtype = spec.inputs[0]->dtype;
  // A 0-D tensor is copied whatever the mode, as the CPU kernel does.
  const bool linear = layout.linear && rank > 0;
  if (linear && dtype != DType::kFloat32) {
    return NodeUnimplemented(spec, absl::StrCat("linear mode computes float32; received ",
                                                TensorTypeToString(*spec.inputs[0])));
  }
  DeviceResize resize;
  resize.rank = rank;
  int64_t n = 1;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const ResizeAxis& axis = layout.axes[d];
    resize.out_dims[d] = axis.output;
    resize.in_strides[d] = stride;
    stride *= axis.input;
    n *= axis.output;
    for (float w : axis.weight) resize.interpolated[d] |= w != 0.0f;
  }
  // Every table in one upload: the int64 ones (per axis low, then high in
  // linear mode), then the float weights, so that each stays aligned.
  std::vector<char> host;
  auto append = [&host](const void* data, size_t bytes) {
    const size_t at = host.size();
    host.resize(at + bytes);
    if (bytes != 0) std::memcpy(host.data() + at, data, bytes);
    return at;
  };
  size_t low_at[kMaxRank] = {}, high_at[kMaxRank] = {}, weight_at[kMaxRank] = {};
  for (int d = 0; d < rank; ++d) {
    const ResizeAxis& axis = layout.axes[d];
    low_at[d] = append(axis.low.data(), axis.low.size() * sizeof(int64_t));
    if (linear) high_at[d] = append(axis.high.data(), axis.high.size() * sizeof(int64_t));
  }
  for (int d = 0; linear && d < rank; ++d) {
    const ResizeAxis& axis = layout.axes[d];
    weight_at[d] = append(axis.weight.data(), axis.weight.size() * sizeof(float));
  }
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> tables,
                            UploadToDevice(context, host.data(), host.size()));
  const char* base = static_cast<const char*>(tables->data());
  for (int d = 0; d < rank; ++d) {
    resize.low[d] = reinterpret_cast<const int64_t*>(base + low_at[d]);
    if (!linear) continue;
    resize.high[d] = reinterpret_cast<const int64_t*>(base + high_at[d]);
    resize.weight[d] = reinterpret_cast<const float*>(base + weight_at[d]);
  }
  // The lambdas hold `tables`, which the DeviceResize points into.
  if (linear) {
    return std::make_unique<LaunchKernel>(
        context, "ResizeLinearKernel",
        [resize, n, tables](const void* const* in, void* const* out, cudaStream_t stream) {
          LaunchResizeLinear(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), n,
                             resize, stream);
        });
  }
  const size_t element_size = DTypeSize(dtype);
  return std::make_unique<LaunchKernel>(
      context, "ResizeNearestKernel",
      [resize, n, element_size, tables](const void* const* in, void* const* out,
                                        cudaStream_t stream) {
        LaunchResizeNearest(in[0], out[0], n, element_size, resize, stream);
      });
}

}  // namespace replicad
