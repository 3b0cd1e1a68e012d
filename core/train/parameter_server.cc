#include "core/train/parameter_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/device/device_copy.h"
#include "core/device/run_context.h"
#include "core/ops/op_registry.h"
#include "core/train/host_sum.h"
#include "core/train/standalone_kernel.h"

namespace replicad {
namespace {

// The stream that copies between a slot's memory and the parameter server's:
// the slot's, unless only the server is a GPU (a CPU stream cannot reach GPU
// memory). Between two GPUs the slot's stream issues a peer copy.
Device& CopyingDevice(Device& slot, Device& server) {
  return InHostMemory(slot) && !InHostMemory(server) ? server : slot;
}

// `op_type` on float32 inputs of `shapes`, built by `device`, with its
// scratch space (kept in `workspaces`).
absl::StatusOr<std::unique_ptr<Kernel>> MakeReductionKernel(
    Device& device, const char* op_type, const Attributes& attributes,
    const std::vector<Shape>& shapes, std::vector<std::shared_ptr<Buffer>>* workspaces) {
  REPLICAD_ASSIGN_OR_RETURN(
      StandaloneKernel made,
      MakeStandaloneKernel(device, op_type, absl::StrCat("ps gradient ", op_type), attributes,
                           shapes));
  if (made.workspace != nullptr) workspaces->push_back(std::move(made.workspace));
  return std::move(made.kernel);
}

// A GPU slot's arena goes to the server's copy as soon as its backward pass
// is done, while the other slots may still compute.
class SendToServer : public SlotReducer {
 public:
  SendToServer(TrainingSlot* slot, Buffer* copy, size_t bytes)
      : slot_(slot), copy_(copy), bytes_(bytes) {}
  absl::Status SliceDone() override {
    if (copy_ == nullptr) return absl::OkStatus();
    Device& device = *slot_->where.device;
    return device.CopyOnStream(slot_->gradient_arena->data(), device.memory_location(),
                               copy_->data(), copy_->location(), bytes_);
  }

 private:
  TrainingSlot* const slot_;
  Buffer* const copy_;  // Null: nothing to send from this slot.
  const size_t bytes_;
};

}  // namespace

ParameterServer::ParameterServer(std::vector<TrainingSlot*> slots, const GradientLayout* layout,
                                 std::unique_ptr<TrainingSlot> server)
    : slots_(std::move(slots)),
      layout_(layout),
      server_(std::move(server)),
      on_host_(InHostMemory(*server_->where.device)) {
  if (on_host_) sums_ = SizedHostGradients(*layout_);
}

ParameterServer::~ParameterServer() { (void)server_->where.device->Synchronize(); }

absl::StatusOr<std::unique_ptr<GradientReduction>> ParameterServer::Create(
    std::vector<TrainingSlot*> slots, const GradientLayout* layout, const TrainingGraph& training,
    const Graph& source, const OptimizerConfig& config, ParameterServerDevice server_device) {
  auto server = std::make_unique<TrainingSlot>();
  server->where = TrainerSlot{SlotAssignment{"ps", server_device.device_id, 0.0},
                              std::move(server_device.device)};
  Device& device = *server->where.device;
  for (int v : training.parameters) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor parameter, CopyToDevice(device, source.initializers.at(v)));
    server->parameters.push_back(std::move(parameter));
  }
  REPLICAD_RETURN_IF_ERROR(device.Synchronize());
  REPLICAD_ASSIGN_OR_RETURN(server->optimizer, Optimizer::Create(config, layout->sizes, &device));
  std::unique_ptr<ParameterServer> reduction(
      new ParameterServer(std::move(slots), layout, std::move(server)));
  REPLICAD_RETURN_IF_ERROR(reduction->SetUp());
  return std::unique_ptr<GradientReduction>(std::move(reduction));
}

absl::Status ParameterServer::SetUp() {
  Device& server = *server_->where.device;
  const size_t arena_bytes = std::max<size_t>(layout_->arena_bytes, 1);
  for (TrainingSlot* slot : slots_) {
    std::shared_ptr<Buffer> copy;
    if (!(slot->where.device->memory_location() == server.memory_location())) {
      REPLICAD_ASSIGN_OR_RETURN(copy, server.Allocate(arena_bytes));
    }
    copies_.push_back(std::move(copy));
  }
  if (on_host_) return absl::OkStatus();
  for (std::shared_ptr<Buffer>& sum : device_sums_) {
    REPLICAD_ASSIGN_OR_RETURN(sum, server.Allocate(arena_bytes));
  }
  REPLICAD_ASSIGN_OR_RETURN(scale_, server.Allocate(sizeof(float)));
  const int64_t elements = static_cast<int64_t>(layout_->arena_bytes / sizeof(float));
  if (elements > 0) {
    REPLICAD_ASSIGN_OR_RETURN(add_, MakeReductionKernel(server, "Add", no_attributes_,
                                                        {{elements}, {elements}}, &workspaces_));
    REPLICAD_ASSIGN_OR_RETURN(
        mul_, MakeReductionKernel(server, "Mul", no_attributes_, {{elements}, {1}}, &workspaces_));
  }
  return absl::OkStatus();
}

std::unique_ptr<SlotReducer> ParameterServer::ForSlot(int slot, float scale) {
  // A CPU slot's arena is read in place (host server) or uploaded by the
  // server's stream (SumOnDevices): only GPU slots send.
  TrainingSlot* training_slot = slots_[slot];
  Buffer* copy = InHostMemory(*training_slot->where.device) ? nullptr : copies_[slot].get();
  return std::make_unique<SendToServer>(training_slot, copy, layout_->arena_bytes);
}

void ParameterServer::Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) {
  // Where the server reads each participant's gradients: its own arena, or
  // the server's copy of it.
  sources_.clear();
  sum_ = nullptr;
  for (const BatchSlice& slice : slices) {
    const Buffer* copy = copies_[slice.slot].get();
    sources_.push_back(copy != nullptr ? copy->data() : slots_[slice.slot]->gradient_arena->data());
    *reduced_bytes +=
        static_cast<int64_t>(copy != nullptr ? layout_->arena_bytes : layout_->gradient_bytes);
  }
  if (on_host_) SumOnHost(sources_, *layout_, &sums_);
}

HostGradients* ParameterServer::host_sums() { return on_host_ ? &sums_ : nullptr; }

TrainingSlot* ParameterServer::host_applier() { return on_host_ ? server_.get() : nullptr; }

absl::Status ParameterServer::SumWithKernels(Device& server, float scale) {
  sum_ = device_sums_[0]->data();
  if (add_ == nullptr) return absl::OkStatus();
  scale_host_ = scale;
  REPLICAD_RETURN_IF_ERROR(server.CopyOnStream(&scale_host_, MemoryLocation{}, scale_->data(),
                                               scale_->location(), sizeof(float)));
  // Plain arithmetic: the kernels read nothing of the step.
  int next = 0;
  const void* acc = sources_[0];
  for (size_t i = 1; i < sources_.size(); ++i) {
    const void* in[] = {acc, sources_[i]};
    void* out[] = {device_sums_[next]->data()};
    REPLICAD_RETURN_IF_ERROR(add_->Run(RunContext{}, in, out));
    acc = out[0];
    next = 1 - next;
  }
  const void* in[] = {acc, scale_->data()};
  void* out[] = {device_sums_[next]->data()};
  REPLICAD_RETURN_IF_ERROR(mul_->Run(RunContext{}, in, out));
  sum_ = out[0];
  return absl::OkStatus();
}

absl::Status ParameterServer::SumOnDevices(const std::vector<BatchSlice>& slices, float scale) {
  if (on_host_) return absl::OkStatus();
  Device& server = *server_->where.device;
  std::vector<std::pair<const void*, Buffer*>> uploads;
  for (const BatchSlice& slice : slices) {
    TrainingSlot& slot = *slots_[slice.slot];
    if (InHostMemory(*slot.where.device)) {
      uploads.emplace_back(slot.gradient_arena->data(), copies_[slice.slot].get());
    }
  }
  absl::Status status;
  server.Enqueue([&] {
    for (const auto& [src, dst] : uploads) {
      status = server.CopyOnStream(src, MemoryLocation{}, dst->data(), dst->location(),
                                   layout_->arena_bytes);
      if (!status.ok()) return;
    }
    status = SumWithKernels(server, scale);
    if (status.ok()) status = server.AwaitStream();
  });
  absl::Status synced = server.Synchronize();
  if (!status.ok()) return status;
  return synced;
}

absl::Status ParameterServer::ApplyUpdate() {
  Device& server_device = *server_->where.device;
  std::vector<const float*> gradients;
  if (on_host_) {
    for (const std::vector<float>& sum : sums_) gradients.push_back(sum.data());
  } else {
    gradients = layout_->Gradients(sum_);
  }
  std::vector<absl::Status> updates(slots_.size() + 1);
  EnqueueOptimizerStep(server_.get(), std::move(gradients), &updates.back());
  absl::Status synced = server_device.Synchronize();
  if (updates.back().ok()) updates.back() = synced;
  // A failed update is not broadcast: the slots keep agreeing.
  if (updates.back().ok()) {
    for (TrainingSlot* slot : slots_) {
      Device& copying = CopyingDevice(*slot->where.device, server_device);
      for (size_t p = 0; p < slot->parameters.size(); ++p) {
        const Tensor& from = server_->parameters[p];
        Tensor& to = slot->parameters[p];
        copying.EnqueueCopy(from.raw_data(), from.location(), to.raw_data(), to.location(),
                            to.byte_size());
      }
    }
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    absl::Status slot_synced = slots_[s]->where.device->Synchronize();
    if (updates[s].ok()) updates[s] = slot_synced;
  }
  // The copies it made for CPU slots.
  synced = server_device.Synchronize();
  if (updates.back().ok()) updates.back() = synced;
  for (const absl::Status& s : updates) {
    if (!s.ok()) return UpdateFailed(s);
  }
  return absl::OkStatus();
}

}  // namespace replicad
