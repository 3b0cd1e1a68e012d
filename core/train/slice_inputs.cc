#include "core/train/slice_inputs.h"

#include <cstddef>
#include <memory>

#include "core/base/status_macros.h"
#include "core/train/training_batch.h"

namespace replicad {

absl::Status SliceInputs(const TrainingGraph& training, const StepState& step, int i,
                         TrainingSlot& slot, std::vector<const void*>* in, bool* prefetched) {
  const BatchSlice& slice = step.slices[i];
  Device& device = *slot.where.device;
  absl::Status status;
  *prefetched = false;
  if (InHostMemory(device)) {
    for (const Tensor& t : step.inputs) in->push_back(RowPointer(t, slice.begin));
    in->push_back(RowPointer(step.targets, slice.begin));
  } else {
    REPLICAD_ASSIGN_OR_RETURN(std::vector<const void*> ahead,
                              slot.prefetch.Take(device, step.inputs, step.targets, slice));
    *prefetched = !ahead.empty();
    in->insert(in->end(), ahead.begin(), ahead.end());
    const std::vector<std::shared_ptr<Buffer>>& staged = step.plans[i]->inputs;
    for (size_t k = 0; !*prefetched && k <= step.inputs.size() && status.ok(); ++k) {
      const Tensor& t = k < step.inputs.size() ? step.inputs[k] : step.targets;
      status = device.CopyOnStream(RowPointer(t, slice.begin), t.location(), staged[k]->data(),
                                   device.memory_location(),
                                   RowBytes(t) * static_cast<size_t>(slice.rows()));
      in->push_back(staged[k]->data());
    }
  }
  for (const Tensor& p : slot.parameters) in->push_back(p.raw_data());
  for (const Tensor& b : slot.buffers) in->push_back(b.raw_data());
  if (training.loss_scale_input >= 0) {
    // A CPU slot reads the step's scale in place; another gets its copy.
    const std::shared_ptr<Buffer>& staged = step.plans[i]->loss_scale;
    if (staged == nullptr) {
      in->push_back(&step.loss_scale);
    } else {
      if (status.ok()) {
        status = device.CopyOnStream(&step.loss_scale, MemoryLocation{}, staged->data(),
                                     device.memory_location(), sizeof(float));
      }
      in->push_back(staged->data());
    }
  }
  return status;
}

}  // namespace replicad
