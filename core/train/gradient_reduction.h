#ifndef REPLICAD_CORE_TRAIN_GRADIENT_REDUCTION_H_
#define REPLICAD_CORE_TRAIN_GRADIENT_REDUCTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/batch_split.h"
#include "core/device/slot_all_reduce.h"
#include "core/train/optimizer.h"
#include "core/train/trainer_reduction.h"
#include "core/train/training_slot.h"

namespace replicad {

// Per parameter, the host's sum of a step's gradients (float32).
using HostGradients = std::vector<std::vector<float>>;

// One slot's part in one step's reduction. Used on that slot's stream
// thread only (inside Device::Enqueue), in this order.
class SlotReducer {
 public:
  virtual ~SlotReducer() = default;
  // The backward pass issued the work writing parameter `parameter`'s
  // gradient (any other index: not a gradient, ignored).
  virtual absl::Status GradientWritten(int parameter) { return absl::OkStatus(); }
  // The slot's slice ran without error: every gradient is issued.
  virtual absl::Status SliceDone() { return absl::OkStatus(); }
  // Last, whatever happened, on every slot that ran this step: the
  // reduction's own failure, if any.
  virtual absl::Status Finish() { return absl::OkStatus(); }
};

// How a DataParallelTrainer sums its slots' gradients and updates the
// copies of the weights (data_parallel_trainer.h). Made once per trainer by
// CreateGradientReduction; it owns the optimizers and whatever it sums with.
// A step calls, on the trainer's thread unless said otherwise: ForSlot per
// slot that runs, Gather, then (unless the step is refused) SumOnDevices and
// ApplyUpdate. Not thread-safe: the trainer's lock guards it.
class GradientReduction {
 public:
  virtual ~GradientReduction() = default;

  // How it sums, as the ranks of a job compare it (they must sum alike).
  virtual const char* kind() const = 0;
  // Held for a whole step (NCCL's communicators on one GPU), or null.
  virtual absl::Mutex* step_mutex() const { return nullptr; }
  // Whether slots without rows in a step still take part in it.
  virtual bool every_slot_runs() const { return false; }
  // Slot `slot`'s part of a step whose sums are scaled by `scale`.
  virtual std::unique_ptr<SlotReducer> ForSlot(int slot, float scale);
  // Once every slot ran `slices` (this process's, on its slot indices): the
  // host's sums, in slot order, where the host sums; adds the gradient bytes
  // the reduction took in to `*reduced_bytes`.
  virtual void Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) = 0;
  // The host's sums (unscaled after Gather; the trainer sums them across
  // ranks and scales them), or null where the devices sum.
  virtual HostGradients* host_sums() { return nullptr; }
  // The copy of the weights that applies the host's sums first (for the
  // trainer's check that the update stays finite), or null.
  virtual TrainingSlot* host_applier() { return nullptr; }
  // Where the step's sums stay on the devices (GPU slots under allreduce,
  // every slot holding the same sums after Gather): the first parameter
  // (index into the training's parameters) whose summed gradient holds a
  // NaN or an infinity, as the trainer's host check names it; nullopt when
  // all are finite, and where there is nothing more to check: the host sums
  // (the trainer checks those) or a server on a GPU sums later
  // (SumOnDevices; its sums are not checked).
  virtual absl::StatusOr<std::optional<size_t>> FirstNonFiniteDeviceSum() { return std::nullopt; }
  // Where the devices hold the sums and apply them (GPU slots under
  // allreduce): whether the update would make a weight not finite, by the
  // first slot's optimizer's dry run on its device (Optimizer::
  // FindNonFiniteUpdate); nullopt when it would not, and where the host
  // applies the sums first (the trainer's own check) or a GPU server does
  // (not checked).
  virtual absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>> FirstNonFiniteDeviceUpdate() {
    return std::nullopt;
  }
  // Device sums that wait for the trainer's checks (a GPU server's).
  virtual absl::Status SumOnDevices(const std::vector<BatchSlice>& slices, float scale) {
    return absl::OkStatus();
  }
  // The optimizer on every copy of the weights; on failure (UpdateFailed)
  // the copies may disagree.
  virtual absl::Status ApplyUpdate() = 0;
  // Every optimizer; the first one's state is the one checkpoints hold.
  virtual std::vector<Optimizer*> optimizers() = 0;
};

// The one place a trainer's reduction is chosen. Fails Unimplemented for a
// mix of CPU and GPU slots without a parameter server, or a parameter server
// across ranks (`across_ranks`), before anything is made.
absl::Status CheckGradientReduction(const std::vector<TrainerSlot>& slots,
                                    const TrainerReduction& reduction, bool across_ranks);
// fp16 training (float16_products.h) checks every step's summed gradients
// for float16 overflow: on the host where it sums them (CPU slots, a
// parameter server in host memory), on a GPU where GPU slots reduce with
// allreduce (GradientReduction::FirstNonFiniteDeviceSum). A parameter server on a
// GPU sums after the trainer's checks: Unimplemented naming it.
absl::Status CheckFloat16Reduction(const TrainerReduction& reduction);
// `slots` (all made, in slot order) sum by HostSum (CPU slots), NcclAllReduce
// (GPU slots; `peers`: the other ranks' take part, null alone) or
// ParameterServer (reduction.parameter_server, which it takes). The
// optimizers' and devices' errors pass through.
absl::StatusOr<std::unique_ptr<GradientReduction>> CreateGradientReduction(
    std::vector<TrainingSlot*> slots, const GradientLayout* layout, const TrainingGraph& training,
    const Graph& source, const OptimizerConfig& config, TrainerReduction& reduction,
    const SlotAllReducePeers* peers);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_GRADIENT_REDUCTION_H_
