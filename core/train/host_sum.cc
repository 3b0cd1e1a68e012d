#include "core/train/host_sum.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/base/status_macros.h"

namespace replicad {

void SumOnHost(const std::vector<const void*>& sources, const GradientLayout& layout,
               HostGradients* sums) {
  for (size_t p = 0; p < sums->size(); ++p) {
    std::vector<float>& sum = (*sums)[p];
    const size_t first = layout.offsets[p] / sizeof(float);
    if (sources.empty()) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      continue;
    }
    std::memcpy(sum.data(), static_cast<const float*>(sources[0]) + first,
                sum.size() * sizeof(float));
    for (size_t i = 1; i < sources.size(); ++i) {
      const float* g = static_cast<const float*>(sources[i]) + first;
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
    }
  }
}

HostGradients SizedHostGradients(const GradientLayout& layout) {
  HostGradients sums;
  for (int64_t size : layout.sizes) sums.emplace_back(static_cast<size_t>(size));
  return sums;
}

HostSum::HostSum(std::vector<TrainingSlot*> slots, const GradientLayout* layout)
    : slots_(std::move(slots)), layout_(layout), sums_(SizedHostGradients(*layout)) {}

absl::StatusOr<std::unique_ptr<GradientReduction>> HostSum::Create(std::vector<TrainingSlot*> slots,
                                                                   const GradientLayout* layout,
                                                                   const OptimizerConfig& config) {
  REPLICAD_RETURN_IF_ERROR(CreateSlotOptimizers(slots, *layout, config));
  return std::unique_ptr<GradientReduction>(new HostSum(std::move(slots), layout));
}

void HostSum::Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) {
  std::vector<const void*> sources;
  for (const BatchSlice& slice : slices) {
    sources.push_back(slots_[slice.slot]->gradient_arena->data());
    *reduced_bytes += static_cast<int64_t>(layout_->gradient_bytes);
  }
  SumOnHost(sources, *layout_, &sums_);
}

absl::Status HostSum::ApplyUpdate() {
  // Every slot applies the same update to its copy, concurrently.
  std::vector<const float*> sums;
  for (const std::vector<float>& sum : sums_) sums.push_back(sum.data());
  return StepEveryOptimizer(slots_, [&sums](TrainingSlot&) { return sums; });
}

std::vector<Optimizer*> HostSum::optimizers() {
  std::vector<Optimizer*> optimizers;
  for (TrainingSlot* slot : slots_) optimizers.push_back(slot->optimizer.get());
  return optimizers;
}

}  // namespace replicad
