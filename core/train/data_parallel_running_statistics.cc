// DataParallelTrainer's running statistics after a step
// (data_parallel_trainer_impl.h): the first row's slot's, onto every slot.

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/train/data_parallel_trainer_impl.h"

namespace replicad {

absl::Status DataParallelTrainer::Impl::ShareRunningStatistics(StepState& step) {
  // Running statistics: the first participant's (with SyncBatchNorm every
  // participant computed the same), on every slot, through the host.
  absl::Status copied;
  const std::vector<Tensor>& running = step.running;
  if (step.runs_first_row && ranks_ == nullptr) {
    Device& first = *slots_[step.slices[0].slot]->where.device;
    for (size_t b = 0; b < buffer_staging_.size(); ++b) {
      first.EnqueueCopy(running[b].raw_data(), running[b].location(), buffer_staging_[b].raw_data(),
                        buffer_staging_[b].location(), buffer_staging_[b].byte_size());
    }
    copied = first.Synchronize();
  } else {
    // Across ranks they came in host memory, the first row's rank's.
    for (size_t b = 0; b < buffer_staging_.size() && b < running.size(); ++b) {
      std::memcpy(buffer_staging_[b].raw_data(), running[b].raw_data(),
                  std::min(buffer_staging_[b].byte_size(), running[b].byte_size()));
    }
  }
  for (auto& slot : slots_) {
    for (size_t b = 0; b < slot->buffers.size(); ++b) {
      slot->where.device->EnqueueCopy(buffer_staging_[b].raw_data(), buffer_staging_[b].location(),
                                      slot->buffers[b].raw_data(), slot->buffers[b].location(),
                                      slot->buffers[b].byte_size());
    }
  }
  for (auto& slot : slots_) {
    absl::Status synced = slot->where.device->Synchronize();
    if (copied.ok()) copied = synced;
  }
  if (!copied.ok()) {
    return absl::Status(copied.code(), absl::StrCat("the running statistics could not be copied "
                                                    "to every slot, so the replicas may no "
                                                    "longer agree: ",
                                                    copied.message()));
  }
  return absl::OkStatus();
}

}  // namespace replicad
