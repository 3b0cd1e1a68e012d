// MaxPool and AveragePool over X [N, C, D, H, W] (core/ops/conv_attributes.h,
// Pool3dAttributes): a loop over the output, one (image, channel) plane per
// iteration, planes in parallel on the slot's OpenMP team. Video models pool
// little (a stem's max pooling, a global average), so oneDNN's 3-D pooling,
// with its layouts and the NaN repair the 2-D kernel needs, is not worth
// its weight here. Each output element is core/ops/pool3d_window.h's, which
// the CUDA kernel shares.
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/conv_attributes.h"
#include "core/ops/pool3d_window.h"

namespace replicad {
namespace {

class Pool3dKernel : public Kernel {
 public:
  Pool3dKernel(const Pool3dAttributes& pool, const Shape& x)
      : window_(Pool3dWindowOf(pool, x)), planes_(x[0] * x[1]) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    const Pool3dAxis* axes = window_.axes;
    const int64_t* out = window_.out;
    const int64_t in_plane = axes[0].size * axes[1].size * axes[2].size;
    const int64_t out_plane = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (planes_ * in_plane >= (1 << 15))
    for (int64_t p = 0; p < planes_; ++p) {
      PoolPlane(x + p * in_plane, y + p * out_plane);
    }
    return absl::OkStatus();
  }

 private:
  void PoolPlane(const float* x, float* y) const {
    const int64_t* out = window_.out;
    for (int64_t od = 0; od < out[0]; ++od)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow) {
          y[(od * out[1] + oh) * out[2] + ow] = Pool3dValue(window_, x, od, oh, ow);
        }
  }

  Pool3dWindow window_;
  int64_t planes_;
};

}  // namespace

KernelOrStatus MakePool3dKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Pool3dAttributes pool, ParsePool3dAttributes(spec));
  if (HasNativeInputs(spec)) return WithRowMajorInputs(spec, context, MakePool3dKernel);
  return std::unique_ptr<Kernel>(std::make_unique<Pool3dKernel>(pool, spec.inputs[0]->shape));
}

}  // namespace replicad
