// RoiAlign on a CUDA slot (roi_align_launch.h): the CPU kernel's bytes, its
// batch_indices, and with an adaptive sampling_ratio its rois' samples per
// bin, checked by the CPU kernel's own checks (CheckedInput).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/checked_indices.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/roi_align_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/roi_align_attributes.h"

namespace replicad {
namespace {

class CudaRoiAlignKernel final : public Kernel {
 public:
  CudaRoiAlignKernel(const CudaKernelContext& context, const RoiAlignAttributes& a, int64_t images,
                     CheckedIndices batch_indices, std::optional<CheckedInput<float>> rois)
      : context_(context),
        a_(a),
        images_(images),
        batch_indices_(std::move(batch_indices)),
        rois_(std::move(rois)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    REPLICAD_RETURN_IF_ERROR(batch_indices_.Fetch(context_, inputs[2]));
    if (rois_.has_value()) REPLICAD_RETURN_IF_ERROR(rois_->Fetch(context_, inputs[1]));
    // One wait for whatever was read back.
    if (!replayable()) {
      REPLICAD_CUDA_RETURN_IF_ERROR(context_.device, cudaStreamSynchronize(context_.stream));
    }
    REPLICAD_ASSIGN_OR_RETURN(const int64_t* batch_indices, batch_indices_.Checked(inputs[2]));
    const float* rois = static_cast<const float*>(inputs[1]);
    if (rois_.has_value()) {
      REPLICAD_ASSIGN_OR_RETURN(rois, rois_->Checked(inputs[1]));
    }
    LaunchRoiAlign(static_cast<const float*>(inputs[0]), rois, batch_indices,
                   static_cast<float*>(outputs[0]), a_, images_, context_.stream);
    return LastLaunchStatus(context_.device, "RoiAlignKernel");
  }

  bool replayable() const override {
    return batch_indices_.known_when_planned() && (!rois_ || rois_->known_when_planned());
  }

 private:
  const CudaKernelContext& context_;
  RoiAlignAttributes a_;
  int64_t images_;  // X's dim 0.
  CheckedIndices batch_indices_;
  // With sampling_ratio 0, the rois: their sizes set each bin's samples.
  std::optional<CheckedInput<float>> rois_;
};

}  // namespace

KernelOrStatus MakeCudaRoiAlignKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(RoiAlignAttributes a, ParseRoiAlign(spec));
  const int64_t images = spec.inputs[0]->shape[0];
  const std::string node = NodeLabel(spec);
  REPLICAD_ASSIGN_OR_RETURN(
      CheckedIndices batch_indices,
      CheckedIndices::Make(spec, context, /*input=*/2, a.rois,
                           [node, rois = a.rois, images](const int64_t* indices) {
                             return CheckRoiBatchIndices(node, indices, rois, images);
                           }));
  std::optional<CheckedInput<float>> rois;
  if (a.sampling_ratio == 0) {
    REPLICAD_ASSIGN_OR_RETURN(
        rois, CheckedInput<float>::Make(
                  spec, context, /*input=*/1, a.rois * 4,
                  [node, a](const float* r) { return CheckRoiSamples(node, r, a); }));
  }
  return std::make_unique<CudaRoiAlignKernel>(context, a, images, std::move(batch_indices),
                                              std::move(rois));
}

}  // namespace replicad
