#include "core/train/nccl_all_reduce.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/training_ops.h"
#include "core/train/finite_values.h"
#include "core/train/standalone_kernel.h"

namespace replicad {
namespace {

// A slot's buckets: each one's all-reduce is issued once the backward pass
// has written its gradients, in bucket order, so every participant issues
// the same calls in the same order.
class BucketReducer : public SlotReducer {
 public:
  BucketReducer(SlotAllReduce* all_reduce, const GradientLayout* layout, int slot, void* arena,
                float scale)
      : all_reduce_(all_reduce), layout_(layout), slot_(slot), arena_(arena), scale_(scale) {
    for (const GradientLayout::Bucket& bucket : layout_->buckets) {
      waiting_.push_back(bucket.parameters);
    }
  }

  absl::Status GradientWritten(int parameter) override {
    if (parameter < 0 || parameter >= static_cast<int>(layout_->bucket_of.size())) {
      return absl::OkStatus();
    }
    --waiting_[layout_->bucket_of[parameter]];
    return IssueReadyBuckets(/*contributes=*/true);
  }

  absl::Status Finish() override {
    // Whatever happened, the other slots' reductions need this one's: the
    // buckets not issued yet go with zeros.
    REPLICAD_RETURN_IF_ERROR(IssueReadyBuckets(/*contributes=*/false));
    return all_reduce_->Join(slot_);
  }

 private:
  absl::Status IssueReadyBuckets(bool contributes) {
    const std::vector<GradientLayout::Bucket>& buckets = layout_->buckets;
    for (; next_bucket_ < buckets.size() && (waiting_[next_bucket_] == 0 || !contributes);
         ++next_bucket_) {
      const GradientLayout::Bucket& bucket = buckets[next_bucket_];
      float* data = reinterpret_cast<float*>(static_cast<char*>(arena_) + bucket.offset);
      REPLICAD_RETURN_IF_ERROR(
          all_reduce_->AllReduce(slot_, data, bucket.bytes / sizeof(float), scale_, contributes));
    }
    return absl::OkStatus();
  }

  SlotAllReduce* const all_reduce_;
  const GradientLayout* const layout_;
  const int slot_;
  void* const arena_;
  const float scale_;
  size_t next_bucket_ = 0;    // Buckets issued so far.
  std::vector<int> waiting_;  // Per bucket, the gradients it still waits for.
};

}  // namespace

NcclAllReduce::NcclAllReduce(std::vector<TrainingSlot*> slots, const GradientLayout* layout,
                             std::unique_ptr<SlotAllReduce> all_reduce)
    : slots_(std::move(slots)), layout_(layout), all_reduce_(std::move(all_reduce)) {}

absl::StatusOr<std::unique_ptr<GradientReduction>> NcclAllReduce::Create(
    std::vector<TrainingSlot*> slots, const GradientLayout* layout, const OptimizerConfig& config,
    const SlotAllReduceFactory& factory, const SlotAllReducePeers* peers) {
  REPLICAD_RETURN_IF_ERROR(CreateSlotOptimizers(slots, *layout, config));
  if (!factory) {
    return absl::FailedPreconditionError(
        "GPU slots under allreduce need the backends' all-reduce (TrainerReduction)");
  }
  std::vector<Device*> devices;
  for (TrainingSlot* slot : slots) devices.push_back(slot->where.device.get());
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<SlotAllReduce> all_reduce, factory(devices, peers));
  return std::unique_ptr<GradientReduction>(
      new NcclAllReduce(std::move(slots), layout, std::move(all_reduce)));
}

absl::Mutex* NcclAllReduce::step_mutex() const {
  static absl::Mutex* mu = new absl::Mutex;
  return mu;
}

std::unique_ptr<SlotReducer> NcclAllReduce::ForSlot(int slot, float scale) {
  return std::make_unique<BucketReducer>(all_reduce_.get(), layout_, slot,
                                         slots_[slot]->gradient_arena->data(), scale);
}

void NcclAllReduce::Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) {
  for (const GradientLayout::Bucket& bucket : layout_->buckets) {
    *reduced_bytes += static_cast<int64_t>(bucket.bytes * slices.size());
  }
}

absl::Status NcclAllReduce::ApplyUpdate() {
  // Every slot's own sums, on its GPU.
  return StepEveryOptimizer(slots_, [this](TrainingSlot& slot) {
    return layout_->Gradients(slot.gradient_arena->data());
  });
}

absl::StatusOr<std::optional<size_t>> NcclAllReduce::FirstNonFiniteDeviceSum() {
  TrainingSlot& slot = *slots_.front();
  Device& device = *slot.where.device;
  if (all_finite_.kernel == nullptr) {
    const Shape arena{static_cast<int64_t>(layout_->arena_bytes / sizeof(float))};
    REPLICAD_ASSIGN_OR_RETURN(all_finite_flag_, device.Allocate(sizeof(float)));
    REPLICAD_ASSIGN_OR_RETURN(
        all_finite_, MakeStandaloneKernel(device, kAllFinite, "the summed gradients' check",
                                          Attributes(), {arena}));
  }
  float finite = 0.0f;
  absl::Status status;
  device.Enqueue([&] {
    const void* in[] = {slot.gradient_arena->data()};
    void* out[] = {all_finite_flag_->data()};
    status = all_finite_.kernel->Run(RunContext{}, in, out);
    if (status.ok()) {
      status = device.CopyOnStream(all_finite_flag_->data(), device.memory_location(), &finite,
                                   MemoryLocation{}, sizeof(float));
    }
  });
  REPLICAD_RETURN_IF_ERROR(device.Synchronize());
  REPLICAD_RETURN_IF_ERROR(status);
  if (finite == 1.0f) return std::nullopt;
  // Rare (a step about to be skipped or refused): the sums to the host.
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> sums, HostCopies(device, slot.gradients));
  for (size_t p = 0; p < sums.size(); ++p) {
    if (!AllFinite(sums[p].data<float>(), sums[p].num_elements())) return p;
  }
  return absl::InternalError(
      "replicad.AllFinite found a summed gradient that is not finite, but the host copy of "
      "every gradient is finite");
}

absl::StatusOr<std::optional<Optimizer::NonFiniteUpdate>>
NcclAllReduce::FirstNonFiniteDeviceUpdate() {
  TrainingSlot& slot = *slots_.front();
  std::vector<float*> parameters;
  for (Tensor& p : slot.parameters) parameters.push_back(p.data<float>());
  return slot.optimizer->FindNonFiniteUpdate(parameters,
                                             layout_->Gradients(slot.gradient_arena->data()));
}

std::vector<Optimizer*> NcclAllReduce::optimizers() {
  std::vector<Optimizer*> optimizers;
  for (TrainingSlot* slot : slots_) optimizers.push_back(slot->optimizer.get());
  return optimizers;
}

}  // namespace replicad
