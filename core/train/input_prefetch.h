#ifndef REPLICAD_CORE_TRAIN_INPUT_PREFETCH_H_
#define REPLICAD_CORE_TRAIN_INPUT_PREFETCH_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/device/batch_split.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"
#include "core/train/upcoming_batch.h"

namespace replicad {

// Internal to DataParallelTrainer: one slot's device copies of the next
// step's rows, uploaded on the device's upload lane while the current step
// computes, so that the next step's kernels need not wait for its inputs
// (a GPU's copy engines run beside its kernels; the host's part of the
// copy overlaps them too). For slots whose memory the host does not read.
// Two sets of buffers alternate: the one the running step reads and the one
// the next upload fills. Used on the slot's stream thread only.
class InputPrefetch {
 public:
  // Uploads `slice`'s rows of `batch`'s inputs and targets into the set the
  // running step does not read (its buffers grow as needed), and marks the
  // upload lane. A slot without room for the buffers skips it: OK, and the
  // next step copies as ever. Errors: a copy that could not be issued.
  absl::Status Upload(Device& device, std::shared_ptr<const UpcomingBatch> batch,
                      const BatchSlice& slice);

  // For the step about to run `slice`'s rows of `inputs` and `targets`: the
  // device copies of its inputs then targets when a set holds exactly those
  // rows of those very tensors (the compute lane then waits for their
  // upload), else empty. That set is the running step's until the next
  // Take; sets holding other batches let them go.
  absl::StatusOr<std::vector<const void*>> Take(Device& device, const std::vector<Tensor>& inputs,
                                                const Tensor& targets, const BatchSlice& slice);

 private:
  struct Set {
    std::vector<std::shared_ptr<Buffer>> buffers;  // Per input, then the targets.
    std::shared_ptr<const UpcomingBatch> batch;    // Null: holds nothing.
    int64_t begin = 0, end = 0;
    std::shared_ptr<Device::LaneMark> uploaded;
  };
  Set sets_[2];
  int reading_ = -1;  // The set the running step reads; -1: none.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_INPUT_PREFETCH_H_
