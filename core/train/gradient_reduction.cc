#include "core/train/gradient_reduction.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/train/host_sum.h"
#include "core/train/nccl_all_reduce.h"
#include "core/train/parameter_server.h"

namespace replicad {

std::unique_ptr<SlotReducer> GradientReduction::ForSlot(int slot, float scale) {
  return std::make_unique<SlotReducer>();
}

absl::Status CheckFloat16Reduction(const TrainerReduction& reduction) {
  if (!reduction.parameter_server.has_value() ||
      (reduction.parameter_server->device != nullptr &&
       InHostMemory(*reduction.parameter_server->device))) {
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "precision fp16 checks every step's summed gradients for float16 overflow: on the host, "
      "or on the GPUs where GPU slots reduce with allreduce; a parameter server on ",
      DeviceIdToString(reduction.parameter_server->device_id),
      " sums after that check, so fp16 trains with allreduce or a server on cpu:0"));
}

absl::Status CheckGradientReduction(const std::vector<TrainerSlot>& slots,
                                    const TrainerReduction& reduction, bool across_ranks) {
  const TrainerSlot* cpu_slot = nullptr;
  const TrainerSlot* gpu_slot = nullptr;
  for (const TrainerSlot& slot : slots) {
    const TrainerSlot*& first = InHostMemory(*slot.device) ? cpu_slot : gpu_slot;
    if (first == nullptr) first = &slot;
  }
  // allreduce sums where the slots are (the host, or NCCL among the GPUs);
  // a parameter server takes every slot's gradients into its own memory.
  if (cpu_slot != nullptr && gpu_slot != nullptr && !reduction.parameter_server) {
    return absl::UnimplementedError(absl::StrCat(
        "reduction: allreduce trains all CPU or all GPU slots in this version, and slot ",
        gpu_slot->slot.name, " is on ", DeviceIdToString(gpu_slot->slot.device), " while slot ",
        cpu_slot->slot.name, " is on ", DeviceIdToString(cpu_slot->slot.device),
        "; a mix of CPU and GPU slots trains with reduction 'ps' (a parameter server, e.g. "
        "ps_device cpu:0)"));
  }
  if (across_ranks && reduction.parameter_server) {
    return absl::UnimplementedError(
        "reduction 'ps' (a parameter server) trains within one process; across ranks use "
        "'allreduce'");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GradientReduction>> CreateGradientReduction(
    std::vector<TrainingSlot*> slots, const GradientLayout* layout, const TrainingGraph& training,
    const Graph& source, const OptimizerConfig& config, TrainerReduction& reduction,
    const SlotAllReducePeers* peers) {
  if (reduction.parameter_server) {
    return ParameterServer::Create(std::move(slots), layout, training, source, config,
                                   std::move(*reduction.parameter_server));
  }
  bool on_host = true;
  for (TrainingSlot* slot : slots) on_host = on_host && InHostMemory(*slot->where.device);
  if (on_host) return HostSum::Create(std::move(slots), layout, config);
  return NcclAllReduce::Create(std::move(slots), layout, config, reduction.slot_all_reduce, peers);
}

}  // namespace replicad
