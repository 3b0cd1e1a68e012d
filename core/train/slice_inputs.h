#ifndef REPLICAD_CORE_TRAIN_SLICE_INPUTS_H_
#define REPLICAD_CORE_TRAIN_SLICE_INPUTS_H_

#include <vector>

#include "absl/status/status.h"
#include "core/train/step_state.h"
#include "core/train/training_graph.h"
#include "core/train/training_slot.h"

namespace replicad {

// Internal to DataParallelTrainer: appends to `in` the inputs of slice `i`
// of `step` for its plan on `slot`, in the training graph's order: the
// model's inputs and the targets (the slice's rows of the step's host
// tensors, read in place by a slot in host memory, else copied on the
// slot's stream into the plan's buffers, or taken from the slot's
// InputPrefetch when it uploaded them ahead: then `*prefetched`), the
// slot's parameters and
// buffers, then the fp16 loss scale where `training` has one (read in place,
// or copied likewise). Call on the slot's stream thread; `step` must outlive
// the slot's work. The first failed copy's error (`in` may then be short).
absl::Status SliceInputs(const TrainingGraph& training, const StepState& step, int i,
                         TrainingSlot& slot, std::vector<const void*>* in, bool* prefetched);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_SLICE_INPUTS_H_
