#include "core/train/training_slot.h"

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/device/device_copy.h"

namespace replicad {
namespace {

// What NCCL moves well in one call, and what PyTorch's DDP buckets by
// default: big enough that per-call latency is noise, small enough that the
// first bucket's reduction starts early in the backward pass.
constexpr size_t kBucketBytes = size_t{25} << 20;
// Each gradient starts on a boundary the GPU's vector loads like.
constexpr size_t kGradientAlignment = 256;

}  // namespace

bool InHostMemory(const Device& device) {
  return device.memory_location().kind == MemoryKind::kHost;
}

absl::StatusOr<std::vector<Tensor>> HostCopies(Device& device, const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors) {
    Tensor copy = Tensor::Host(t.dtype(), t.shape());
    device.EnqueueCopy(t.raw_data(), t.location(), copy.raw_data(), copy.location(), t.byte_size());
    copies.push_back(std::move(copy));
  }
  if (absl::Status s = device.Synchronize(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("copying the weights of ", device.info().name,
                                               " to the host: ", s.message()));
  }
  return copies;
}

GradientLayout GradientLayout::For(const TrainingGraph& training, const Graph& source) {
  GradientLayout layout;
  for (int v : training.parameters)
    layout.sizes.push_back(source.initializers.at(v).num_elements());
  // The backward pass writes the gradients in the order of their producing
  // nodes; the arena follows it, so buckets fill one after another.
  const Graph& graph = training.graph;
  const int first_gradient = 1 + (training.classification ? 1 : 0);
  std::vector<int> producer(graph.values.size(), INT_MAX);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int v : graph.nodes[n].outputs) {
      if (v >= 0) producer[v] = std::min(producer[v], static_cast<int>(n));
    }
  }
  const size_t count = layout.sizes.size();
  std::vector<int> order(count);
  for (size_t p = 0; p < count; ++p) order[p] = static_cast<int>(p);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return producer[graph.outputs[first_gradient + a]] <
           producer[graph.outputs[first_gradient + b]];
  });
  layout.offsets.assign(count, 0);
  layout.bucket_of.assign(count, 0);
  std::vector<Bucket>& buckets = layout.buckets;
  size_t offset = 0;
  for (int p : order) {
    const size_t bytes = static_cast<size_t>(layout.sizes[p]) * sizeof(float);
    layout.gradient_bytes += bytes;
    if (buckets.empty() ||
        (buckets.back().bytes > 0 && buckets.back().bytes + bytes > kBucketBytes)) {
      buckets.push_back(Bucket{offset, 0, 0});
    }
    Bucket& bucket = buckets.back();
    layout.offsets[p] = offset;
    layout.bucket_of[p] = static_cast<int>(buckets.size() - 1);
    ++bucket.parameters;
    const size_t padded =
        (bytes + kGradientAlignment - 1) / kGradientAlignment * kGradientAlignment;
    offset += padded;
    // Padding between gradients is reduced too (it is never read): one
    // contiguous range per bucket, one NCCL call.
    bucket.bytes = offset - bucket.offset;
  }
  layout.arena_bytes = offset;
  return layout;
}

std::vector<const float*> GradientLayout::Gradients(const void* arena) const {
  std::vector<const float*> gradients;
  for (size_t offset : offsets) {
    gradients.push_back(reinterpret_cast<const float*>(static_cast<const char*>(arena) + offset));
  }
  return gradients;
}

namespace {

// The arena's bytes outside every gradient (alignment, the end): never
// written by a step, but summed by an all-reduce and read whole by
// replicad.AllFinite, so zeros from the start.
absl::Status ZeroPadding(Device& device, Buffer& arena, const GradientLayout& layout) {
  std::vector<std::pair<size_t, size_t>> gradients;  // Byte ranges, by offset.
  for (size_t p = 0; p < layout.sizes.size(); ++p) {
    gradients.push_back({layout.offsets[p], layout.offsets[p] + layout.sizes[p] * sizeof(float)});
  }
  std::sort(gradients.begin(), gradients.end());
  std::vector<std::pair<size_t, size_t>> gaps;
  size_t at = 0;
  for (const auto& [begin, end] : gradients) {
    if (begin > at) gaps.push_back({at, begin});
    at = std::max(at, end);
  }
  if (layout.arena_bytes > at) gaps.push_back({at, layout.arena_bytes});
  size_t widest = 0;
  for (const auto& [begin, end] : gaps) widest = std::max(widest, end - begin);
  const std::vector<char> zeros(widest, 0);
  char* base = static_cast<char*>(arena.data());
  for (const auto& [begin, end] : gaps) {
    device.EnqueueCopy(zeros.data(), MemoryLocation{}, base + begin, device.memory_location(),
                       end - begin);
  }
  return device.Synchronize();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingSlot>> CreateTrainingSlot(TrainerSlot where,
                                                                 const TrainingGraph& training,
                                                                 const Graph& source,
                                                                 const GradientLayout& layout) {
  auto slot = std::make_unique<TrainingSlot>();
  slot->where = std::move(where);
  Device& device = *slot->where.device;
  for (const auto& [v, host] : training.graph.initializers) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor copy, CopyToDevice(device, host));
    slot->constants.emplace(v, std::move(copy));
  }
  // Every slot starts from the template's weights (the initial sync).
  for (int v : training.parameters) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor parameter, CopyToDevice(device, source.initializers.at(v)));
    slot->parameters.push_back(std::move(parameter));
  }
  REPLICAD_ASSIGN_OR_RETURN(slot->gradient_arena,
                            device.Allocate(std::max<size_t>(layout.arena_bytes, 1)));
  REPLICAD_RETURN_IF_ERROR(ZeroPadding(device, *slot->gradient_arena, layout));
  for (size_t p = 0; p < layout.sizes.size(); ++p) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor gradient,
                              Tensor::Create(DType::kFloat32, slot->parameters[p].shape(),
                                             slot->gradient_arena, layout.offsets[p]));
    slot->gradients.push_back(std::move(gradient));
  }
  for (int v : training.buffers) {
    const Tensor& host = source.initializers.at(v);
    REPLICAD_ASSIGN_OR_RETURN(Tensor buffer, CopyToDevice(device, host));
    slot->buffers.push_back(std::move(buffer));
    REPLICAD_ASSIGN_OR_RETURN(Tensor update, CopyToDevice(device, host));
    slot->buffer_updates.push_back(std::move(update));
  }
  Tensor scalar = Tensor::Host(DType::kFloat32, {});
  REPLICAD_ASSIGN_OR_RETURN(slot->loss_sum, CopyToDevice(device, scalar));
  REPLICAD_ASSIGN_OR_RETURN(slot->correct, CopyToDevice(device, scalar));
  // The copies above are enqueued; wait for them before the host values can go.
  REPLICAD_RETURN_IF_ERROR(device.Synchronize());
  return slot;
}

absl::Status CreateSlotOptimizers(const std::vector<TrainingSlot*>& slots,
                                  const GradientLayout& layout, const OptimizerConfig& config) {
  for (TrainingSlot* slot : slots) {
    // On the slot's device: host loops for CPU slots, kernels for GPU ones.
    REPLICAD_ASSIGN_OR_RETURN(slot->optimizer,
                              Optimizer::Create(config, layout.sizes, slot->where.device.get()));
  }
  return absl::OkStatus();
}

void EnqueueOptimizerStep(TrainingSlot* slot, std::vector<const float*> gradients,
                          absl::Status* status) {
  slot->where.device->Enqueue([slot, gradients = std::move(gradients), status] {
    std::vector<float*> parameters;
    for (Tensor& p : slot->parameters) parameters.push_back(p.data<float>());
    *status = slot->optimizer->Step(parameters, gradients);
  });
}

absl::Status StepEveryOptimizer(
    const std::vector<TrainingSlot*>& slots,
    const std::function<std::vector<const float*>(TrainingSlot&)>& gradients) {
  std::vector<absl::Status> updates(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    EnqueueOptimizerStep(slots[s], gradients(*slots[s]), &updates[s]);
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    absl::Status synced = slots[s]->where.device->Synchronize();
    if (updates[s].ok()) updates[s] = synced;
  }
  for (const absl::Status& s : updates) {
    if (!s.ok()) return UpdateFailed(s);
  }
  return absl::OkStatus();
}

absl::Status UpdateFailed(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("the optimizer update failed, so the replicas "
                                                  "may no longer agree: ",
                                                  status.message()));
}

}  // namespace replicad
