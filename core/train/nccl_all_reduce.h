#ifndef REPLICAD_CORE_TRAIN_NCCL_ALL_REDUCE_H_
#define REPLICAD_CORE_TRAIN_NCCL_ALL_REDUCE_H_

#include <memory>
#include <vector>

#include "core/device/slot_all_reduce.h"
#include "core/train/gradient_reduction.h"
#include "core/train/standalone_kernel.h"

namespace replicad {

// allreduce on GPU slots: the gradients are summed on the devices by the
// backends' SlotAllReduce (NCCL across GPUs, after a local sum among slots
// that share a GPU; core/backends/cuda/nccl_all_reduce.cc), bucket by
// bucket (GradientLayout) as soon as the backward pass has written a
// bucket's gradients, overlapping the rest of it; every slot, with or
// without rows, takes part. Each slot's optimizer then updates its copy
// from its own summed arena. NCCL's summation order is its own, but every
// slot receives the same sums, so the copies agree bitwise.
class NcclAllReduce : public GradientReduction {
 public:
  // `slots` are GPU slots, in participant order; `layout` outlives the
  // reduction; `peers`: the other ranks' slots take part (null alone).
  // FailedPrecondition without `factory`; its errors and the optimizers'
  // pass through.
  static absl::StatusOr<std::unique_ptr<GradientReduction>> Create(
      std::vector<TrainingSlot*> slots, const GradientLayout* layout, const OptimizerConfig& config,
      const SlotAllReduceFactory& factory, const SlotAllReducePeers* peers);

  const char* kind() const override { return "GPU slots (NCCL)"; }
  // NCCL does not order the collectives of different communicators on one
  // GPU, and two trainers' steps interleaving there can deadlock, so the GPU
  // steps of every trainer that uses NCCL run one at a time.
  absl::Mutex* step_mutex() const override;
  bool every_slot_runs() const override { return true; }
  std::unique_ptr<SlotReducer> ForSlot(int slot, float scale) override;
  // Counts whole buckets, padding included, as NCCL reads them.
  void Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) override;
  absl::Status ApplyUpdate() override;
  std::vector<Optimizer*> optimizers() override;
  // The first slot's summed gradient arena through replicad.AllFinite on
  // its device (its padding is zeros: CreateTrainingSlot), one wait for it;
  // only when that finds one are the sums copied to the host to name the
  // parameter.
  absl::StatusOr<std::optional<size_t>> FirstNonFiniteDeviceSum() override;
  absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> FirstNonFiniteDeviceUpdate() override;

 private:
  NcclAllReduce(std::vector<TrainingSlot*> slots, const GradientLayout* layout,
                std::unique_ptr<SlotAllReduce> all_reduce);

  const std::vector<TrainingSlot*> slots_;
  const GradientLayout* const layout_;
  const std::unique_ptr<SlotAllReduce> all_reduce_;
  // FirstNonFiniteDeviceSum's kernel and its output on the first slot's device,
  // made by its first call.
  StandaloneKernel all_finite_;
  std::shared_ptr<Buffer> all_finite_flag_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_NCCL_ALL_REDUCE_H_
