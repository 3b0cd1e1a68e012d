// Dropout in training. Each element's mask comes from a counter-based
// generator keyed by (seed, step, node, global row, element), not from a
// stream of draws, so the mask of a row is the same whichever slot runs it.
// The generator lives in core/ops/dropout_mask.h, shared with the CUDA
// kernel, so both backends draw the same masks.

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/dropout_mask.h"
#include "core/ops/dropout_train_attributes.h"

namespace replicad {
namespace {

class DropoutTrainKernel : public Kernel {
 public:
  DropoutTrainKernel(int64_t rows, int64_t row_size, float ratio, uint64_t node_seed)
      : rows_(rows), row_size_(row_size), ratio_(ratio), node_seed_(node_seed) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    float* mask = static_cast<float*>(outputs[1]);
    const float keep_scale = ratio_ < 1.0f ? 1.0f / (1.0f - ratio_) : 0.0f;
    const uint64_t key = DropoutStepKey(run.seed, static_cast<uint64_t>(run.step), node_seed_);
    for (int64_t r = 0; r < rows_; ++r) {
      const uint64_t row_key = DropoutRowKey(key, run.first_row + r);
      for (int64_t e = 0; e < row_size_; ++e) {
        const float u = DropoutUniform(row_key, e);
        const int64_t i = r * row_size_ + e;
        mask[i] = u >= ratio_ ? keep_scale : 0.0f;
        y[i] = x[i] * mask[i];
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t rows_, row_size_;
  float ratio_;
  uint64_t node_seed_;
};

}  // namespace

KernelOrStatus MakeDropoutTrainKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(DropoutTrainAttributes a, ParseDropoutTrainAttributes(spec));
  return std::make_unique<DropoutTrainKernel>(a.rows, a.row_size, a.ratio, a.node_seed);
}

}  // namespace replicad
