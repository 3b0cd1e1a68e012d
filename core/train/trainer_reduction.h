#ifndef REPLICAD_CORE_TRAIN_TRAINER_REDUCTION_H_
#define REPLICAD_CORE_TRAIN_TRAINER_REDUCTION_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/device_id.h"
#include "core/device/slot_all_reduce.h"
#include "core/train/training_ranks.h"

namespace replicad {

// Where the parameter server of `ps` reduction runs (parameter_server.h):
// it holds the master copy of the weights and the one optimizer state,
// receives the reduced gradient, applies the update and broadcasts the
// weights to every slot.
struct ParameterServerDevice {
  DeviceId device_id;
  std::unique_ptr<Device> device;
};

// Makes the on-device gradient reduction of GPU slots under allreduce (the
// backends' CreateSlotAllReduce, core/backends/backends.h), for `slots` in
// participant order; `peers`: the other ranks' slots take part too (null
// when this process trains alone). Injected: the trainer does not choose
// backends.
using SlotAllReduceFactory = std::function<absl::StatusOr<std::unique_ptr<SlotAllReduce>>(
    const std::vector<Device*>& slots, const SlotAllReducePeers* peers)>;

// How a step's gradients are summed beyond each slot's own.
struct TrainerReduction {
  // `ps`: the parameter server that sums and updates. Unset: allreduce.
  std::optional<ParameterServerDevice> parameter_server;
  // Allreduce of GPU slots (FailedPrecondition without it there); CPU
  // slots and a parameter server sum on the host or the server.
  SlotAllReduceFactory slot_all_reduce;
  // A job of several ranks (training_ranks.h): the batch is split over
  // every rank's slots, and the gradients are summed across the ranks on
  // the host (CPU slots) or by slot_all_reduce (GPU slots, NCCL). Null:
  // this process trains alone.
  std::shared_ptr<TrainingRanks> ranks;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINER_REDUCTION_H_
