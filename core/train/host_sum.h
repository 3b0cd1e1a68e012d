#ifndef REPLICAD_CORE_TRAIN_HOST_SUM_H_
#define REPLICAD_CORE_TRAIN_HOST_SUM_H_

#include <memory>
#include <vector>

#include "core/train/gradient_reduction.h"

namespace replicad {

// Into `*sums` (sized by SizedHostGradients): per parameter, the sum of
// `sources` (gradient arenas laid out by `layout`, in host memory) in
// order, the same float operations whatever the sources; zeros when there
// are none.
void SumOnHost(const std::vector<const void*>& sources, const GradientLayout& layout,
               HostGradients* sums);
// Zeros, one vector per parameter of `layout`.
HostGradients SizedHostGradients(const GradientLayout& layout);

// allreduce on CPU slots: the host sums the slots' arenas (their memory is
// the host's) in slot order, and every slot's optimizer applies the same
// scaled sums to its copy, concurrently on the slots' streams.
class HostSum : public GradientReduction {
 public:
  // `slots` are CPU slots; `layout` outlives the reduction. Fails as
  // Optimizer::Create does.
  static absl::StatusOr<std::unique_ptr<GradientReduction>> Create(std::vector<TrainingSlot*> slots,
                                                                   const GradientLayout* layout,
                                                                   const OptimizerConfig& config);

  const char* kind() const override { return "CPU slots (the host)"; }
  void Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) override;
  HostGradients* host_sums() override { return &sums_; }
  TrainingSlot* host_applier() override { return slots_.front(); }
  absl::Status ApplyUpdate() override;
  std::vector<Optimizer*> optimizers() override;

 private:
  HostSum(std::vector<TrainingSlot*> slots, const GradientLayout* layout);

  const std::vector<TrainingSlot*> slots_;
  const GradientLayout* const layout_;
  HostGradients sums_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_HOST_SUM_H_
