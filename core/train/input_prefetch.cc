#include "core/train/input_prefetch.h"

#include <cstddef>
#include <utility>

#include "core/base/status_macros.h"
#include "core/train/training_batch.h"

namespace replicad {

absl::Status InputPrefetch::Upload(Device& device, std::shared_ptr<const UpcomingBatch> batch,
                                   const BatchSlice& slice) {
  Set& set = sets_[reading_ == 0 ? 1 : 0];
  set.batch = nullptr;
  const size_t count = batch->inputs.size() + 1;
  set.buffers.resize(count);
  const size_t rows = static_cast<size_t>(slice.end - slice.begin);
  for (size_t k = 0; k < count; ++k) {
    const Tensor& t = k < batch->inputs.size() ? batch->inputs[k] : batch->targets;
    const size_t bytes = RowBytes(t) * rows;
    if (set.buffers[k] != nullptr && set.buffers[k]->bytes() >= bytes) continue;
    set.buffers[k] = nullptr;  // The old one goes first: it may be the room.
    absl::StatusOr<std::shared_ptr<Buffer>> grown = device.Allocate(bytes);
    if (!grown.ok()) return absl::OkStatus();  // No room for a second copy: copy as ever.
    set.buffers[k] = *std::move(grown);
  }
  for (size_t k = 0; k < count; ++k) {
    const Tensor& t = k < batch->inputs.size() ? batch->inputs[k] : batch->targets;
    REPLICAD_RETURN_IF_ERROR(device.CopyOnLane(Device::Lane::kUpload, RowPointer(t, slice.begin),
                                               t.location(), set.buffers[k]->data(),
                                               device.memory_location(), RowBytes(t) * rows));
  }
  REPLICAD_ASSIGN_OR_RETURN(set.uploaded, device.MarkLane(Device::Lane::kUpload));
  set.batch = std::move(batch);
  set.begin = slice.begin;
  set.end = slice.end;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<const void*>> InputPrefetch::Take(Device& device,
                                                             const std::vector<Tensor>& inputs,
                                                             const Tensor& targets,
                                                             const BatchSlice& slice) {
  reading_ = -1;
  std::vector<const void*> copies;
  for (int s = 0; s < 2; ++s) {
    Set& set = sets_[s];
    if (set.batch == nullptr) continue;
    if (reading_ < 0 && set.begin == slice.begin && set.end == slice.end &&
        set.batch->Is(inputs, targets)) {
      REPLICAD_RETURN_IF_ERROR(device.WaitForMark(Device::Lane::kCompute, set.uploaded.get()));
      for (const std::shared_ptr<Buffer>& b : set.buffers) copies.push_back(b->data());
      reading_ = s;
    }
    // Taken or not, the batch is this step's or never will be.
    set.batch = nullptr;
    set.uploaded = nullptr;
  }
  return copies;
}

}  // namespace replicad
