// DataParallelTrainer's checks of a step's sums before they are applied
// (data_parallel_trainer_impl.h): a loss or a gradient that is not finite,
// and an update that would make a weight not finite.

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/train/data_parallel_trainer_impl.h"
#include "core/train/finite_values.h"

namespace replicad {

std::string DataParallelTrainer::Impl::ScaleAndCheckFinite(StepState& step) {
  if (!std::isfinite(step.loss)) {
    return NonFiniteLossReason(step.loss);
  }
  // The host's sums over the global batch (GPU slots under allreduce
  // reduced on the devices, overlapped with the backward pass; a GPU
  // server scales with its kernels).
  HostGradients* sums = reduction_->host_sums();
  if (sums == nullptr) return "";
  for (size_t p = 0; p < sums->size(); ++p) {
    std::vector<float>& sum = (*sums)[p];
    for (float& v : sum) v *= step.scale;
    // Where the host sums the gradients it also checks them (GPU slots
    // under allreduce check theirs on a device: FirstNonFiniteDeviceSum).
    if (!AllFinite(sum.data(), static_cast<int64_t>(sum.size()))) {
      return NonFiniteGradientReason(training_, p);
    }
  }
  return "";
}

std::string DataParallelTrainer::Impl::CheckUpdateStaysFinite() {
  TrainingSlot* applying = reduction_->host_applier();
  HostGradients* host_sums = reduction_->host_sums();
  if (applying == nullptr || host_sums == nullptr || !InHostMemory(*applying->where.device)) {
    return "";
  }
  std::vector<float*> parameters;
  for (Tensor& p : applying->parameters) parameters.push_back(p.data<float>());
  std::vector<const float*> sums;
  for (const std::vector<float>& r : *host_sums) sums.push_back(r.data());
  const std::optional<Optimizer::NonFiniteUpdate> bad =
      applying->optimizer->FirstNonFiniteUpdate(parameters, sums);
  return bad ? NonFiniteUpdateReason(training_, *applying->optimizer, *bad) : "";
}

}  // namespace replicad
