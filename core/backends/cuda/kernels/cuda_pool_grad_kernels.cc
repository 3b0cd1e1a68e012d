// The pooling gradients on our own kernels (pool_grad.cu): cuDNN's
// cudnnPoolingBackward needs the forward output Y, which the training graph
// does not pass (replicad.*PoolGrad read X and dY), and its max pooling
// breaks ties and spreads padding differently from the CPU kernels. These
// gather per dX element, so they are deterministic and match the CPU backend
// (core/backends/cpu/kernels/gradient_kernels.cc) bit for bit.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/pool_grad_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/training_ops.h"

namespace replicad {
namespace {

enum class PoolGradKind { kMax, kAverage, kGlobalAverage };

PoolGradGeometry ToGeometry(const Shape& x, const Window2d& window, bool count_include_pad) {
  PoolGradGeometry g;
  g.planes = x[0] * x[1];
  g.height = x[2];
  g.width = x[3];
  g.out_height = window.output[0];
  g.out_width = window.output[1];
  for (int i = 0; i < 2; ++i) {
    g.kernel[i] = window.kernel[i];
    g.strides[i] = window.strides[i];
    g.dilations[i] = window.dilations[i];
    g.pads_begin[i] = window.pads_begin[i];
    g.pads_end[i] = window.pads_end[i];
  }
  g.count_include_pad = count_include_pad;
  return g;
}

// Inputs (X, dY), output dX. Max pooling keeps each window's argmax in the
// workspace between its two passes.
class CudaPoolGradKernel : public Kernel {
 public:
  CudaPoolGradKernel(const CudaKernelContext& context, PoolGradKind kind,
                     const PoolGradGeometry& geometry)
      : device_(context.device), stream_(context.stream), kind_(kind), g_(geometry) {}

  // GlobalAveragePoolGrad: `planes` planes of `plane_size` elements.
  CudaPoolGradKernel(const CudaKernelContext& context, int64_t planes, int64_t plane_size)
      : device_(context.device),
        stream_(context.stream),
        kind_(PoolGradKind::kGlobalAverage),
        planes_(planes),
        plane_size_(plane_size),
        // As the CPU kernel scales: by the float reciprocal, not a division.
        scale_(1.0f / static_cast<float>(plane_size)) {}

  size_t workspace_bytes() const override {
    if (kind_ != PoolGradKind::kMax) return 0;
    return static_cast<size_t>(g_.planes * g_.out_height * g_.out_width) * sizeof(int64_t);
  }
  void SetWorkspace(void* workspace) override { argmax_ = static_cast<int64_t*>(workspace); }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* dy = static_cast<const float*>(inputs[1]);
    float* dx = static_cast<float*>(outputs[0]);
    switch (kind_) {
      case PoolGradKind::kMax:
        LaunchMaxPoolArgmax(x, argmax_, g_, stream_);
        REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(device_, "LaunchMaxPoolArgmax"));
        LaunchMaxPoolGradGather(dy, argmax_, dx, g_, stream_);
        return LastLaunchStatus(device_, "LaunchMaxPoolGradGather");
      case PoolGradKind::kAverage:
        LaunchAveragePoolGrad(dy, dx, g_, stream_);
        return LastLaunchStatus(device_, "LaunchAveragePoolGrad");
      case PoolGradKind::kGlobalAverage:
        LaunchGlobalAveragePoolGrad(dy, dx, planes_, plane_size_, scale_, stream_);
        return LastLaunchStatus(device_, "LaunchGlobalAveragePoolGrad");
    }
    return absl::InternalError("unknown pooling gradient");
  }

 private:
  std::string device_;
  cudaStream_t stream_;
  PoolGradKind kind_;
  PoolGradGeometry g_;
  int64_t planes_ = 0;
  int64_t plane_size_ = 0;
  float scale_ = 0.0f;
  int64_t* argmax_ = nullptr;
};

}  // namespace

KernelOrStatus MakeCudaPoolGradKernel(const KernelSpec& spec, CudaKernelContext& context) {
  // The forward node: the pooling with X as its only input.
  const KernelSpec forward = ForwardInputs(spec, 1);
  const Shape& x = spec.inputs[0]->shape;
  if (spec.op_type == kGlobalAveragePoolGrad) {
    // Any rank >= 3: the spatial dims, flattened, make a plane.
    const int64_t planes = x[0] * x[1];
    return std::make_unique<CudaPoolGradKernel>(context, planes,
                                                planes == 0 ? 0 : NumElements(x) / planes);
  }
  if (spec.op_type == kMaxPoolGrad) {
    REPLICAD_ASSIGN_OR_RETURN(Window2d window, ParseMaxPoolAttributes(forward));
    return std::make_unique<CudaPoolGradKernel>(context, PoolGradKind::kMax,
                                                ToGeometry(x, window, /*count_include_pad=*/false));
  }
  if (spec.op_type == kAveragePoolGrad) {
    REPLICAD_ASSIGN_OR_RETURN(AveragePoolAttributes pool, ParseAveragePoolAttributes(forward));
    // The CPU kernel's windows are dense, as is the CUDA forward pass
    // (cuDNN pooling has no dilation).
    if (pool.window.dilations != std::array<int64_t, 2>{1, 1}) {
      return NodeUnimplemented(
          spec, absl::StrCat("average pooling gradients have no dilation, received dilations [",
                             absl::StrJoin(pool.window.dilations, ","), "]"));
    }
    return std::make_unique<CudaPoolGradKernel>(context, PoolGradKind::kAverage,
                                                ToGeometry(x, pool.window, pool.count_include_pad));
  }
  return NodeUnimplemented(spec, "the CUDA pooling gradient kernel has no such op");
}

}  // namespace replicad
