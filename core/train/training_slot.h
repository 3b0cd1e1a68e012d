#ifndef REPLICAD_CORE_TRAIN_TRAINING_SLOT_H_
#define REPLICAD_CORE_TRAIN_TRAINING_SLOT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/execution_plan.h"
#include "core/train/input_prefetch.h"
#include "core/train/optimizer.h"
#include "core/train/trainer_options.h"
#include "core/train/training_graph.h"

namespace replicad {

// What DataParallelTrainer shares with its gradient reductions
// (gradient_reduction.h); not for use outside core/train.

bool InHostMemory(const Device& device);

// Host copies of `tensors`, which live in `device`'s memory; not on the
// device's stream thread. A failed copy fails the whole (naming the device):
// half-copied weights must never reach a checkpoint or a predict set.
absl::StatusOr<std::vector<Tensor>> HostCopies(Device& device, const std::vector<Tensor>& tensors);

// Where each parameter's gradient sits in a slot's gradient arena, the same
// on every slot: in the order the backward pass writes them, each aligned,
// cut into buckets of ~25 MiB that an all-reduce takes one call each.
struct GradientLayout {
  // A contiguous range of the arena reduced in one call, once its
  // `parameters` gradients are written.
  struct Bucket {
    size_t offset = 0;
    size_t bytes = 0;
    int parameters = 0;
  };
  std::vector<int64_t> sizes;   // Elements, per parameter.
  std::vector<size_t> offsets;  // Bytes, per parameter.
  std::vector<int> bucket_of;   // Per parameter.
  std::vector<Bucket> buckets;  // In the order the backward pass fills them.
  size_t arena_bytes = 0;       // Padding included.
  size_t gradient_bytes = 0;    // Of the gradients alone.

  // For `training`'s parameters, whose initial values are in `source`.
  static GradientLayout For(const TrainingGraph& training, const Graph& source);
  // Per parameter, its gradient in `arena`.
  std::vector<const float*> Gradients(const void* arena) const;
};

// One plan of a slot and, on a device whose memory the host does not read,
// that memory's copies of the slice's inputs and targets, and of the fp16
// loss scale (TrainingGraph::loss_scale_input) where the graph has one.
struct SlotPlan {
  std::unique_ptr<ExecutionPlan> plan;
  std::vector<std::shared_ptr<Buffer>> inputs;
  std::shared_ptr<Buffer> loss_scale;
};

// A slot's copy of the weights and everything its steps write, all in the
// slot's memory (host memory for CPU slots, which the host reduction and
// optimizer then read directly). A parameter server's copy uses `where`,
// `parameters` and `optimizer` only.
struct TrainingSlot {
  TrainerSlot where;
  std::map<int, Tensor> constants;  // Device copies of the training graph's initializers.
  std::vector<Tensor> parameters;
  // Of the sum of the slice's losses, in parameter order: views into one
  // arena laid out by GradientLayout.
  std::shared_ptr<Buffer> gradient_arena;
  std::vector<Tensor> gradients;
  std::vector<Tensor> buffers;  // Running statistics.
  std::vector<Tensor> buffer_updates;
  Tensor loss_sum;
  Tensor correct;
  float loss_sum_host = 0;  // Their host copies, once the slot's step ran.
  float correct_host = 0;
  std::unique_ptr<Optimizer> optimizer;  // Null where a parameter server updates.
  std::map<std::vector<Shape>, SlotPlan> plans;
  // The next step's rows, uploaded ahead (not for slots in host memory).
  InputPrefetch prefetch;
};

// A slot starting from `source`'s weights (the initial sync), all copies
// done; the device's errors (ResourceExhausted, ...) pass through.
absl::StatusOr<std::unique_ptr<TrainingSlot>> CreateTrainingSlot(TrainerSlot where,
                                                                 const TrainingGraph& training,
                                                                 const Graph& source,
                                                                 const GradientLayout& layout);

// An optimizer for each of `slots`, on the slot's device.
absl::Status CreateSlotOptimizers(const std::vector<TrainingSlot*>& slots,
                                  const GradientLayout& layout, const OptimizerConfig& config);

// Enqueues `slot`'s optimizer step on its stream; `*status` says how it went
// once the stream is synchronized.
void EnqueueOptimizerStep(TrainingSlot* slot, std::vector<const float*> gradients,
                          absl::Status* status);

// Every slot's optimizer on its own copy, concurrently, with the gradients
// `gradients` gives it; the first failure, as UpdateFailed words it.
absl::Status StepEveryOptimizer(
    const std::vector<TrainingSlot*>& slots,
    const std::function<std::vector<const float*>(TrainingSlot&)>& gradients);

// A device failed mid-update: the copies may now differ, which the step
// count cannot express, so the error says so.
absl::Status UpdateFailed(const absl::Status& status);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINING_SLOT_H_
