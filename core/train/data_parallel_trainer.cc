#include "core/train/data_parallel_trainer.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/device/device_copy.h"
#include "core/device/training_step.h"
#include "core/train/barrier_collective.h"

namespace replicad {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Row `row` of a host tensor whose dim 0 is the batch.
const void* RowPointer(const Tensor& t, int64_t row) {
  const int64_t rows = t.shape().empty() ? 1 : t.shape()[0];
  const size_t row_bytes = rows == 0 ? 0 : t.byte_size() / static_cast<size_t>(rows);
  return static_cast<const char*>(t.raw_data()) + row * row_bytes;
}

}  // namespace

// A slot's copy of the weights and everything its steps write. The CPU
// backend's device memory is host memory, which the reduction and the
// optimizer read and write directly.
struct DataParallelTrainer::Slot {
  TrainerSlot where;
  std::map<int, Tensor> constants;  // Device copies of the training graph's initializers.
  std::vector<Tensor> parameters;
  std::vector<Tensor> gradients;    // Of the sum of the slice's losses.
  std::vector<Tensor> buffers;      // Running statistics.
  std::vector<Tensor> buffer_updates;
  Tensor loss_sum;
  Tensor correct;
  std::unique_ptr<Optimizer> optimizer;
  std::map<std::vector<Shape>, std::unique_ptr<ExecutionPlan>> plans;
};

DataParallelTrainer::DataParallelTrainer(std::shared_ptr<const Model> model,
                                         TrainingGraph training, const TrainerOptions& options)
    : model_(std::move(model)),
      training_(std::move(training)),
      sync_batch_norm_(options.sync_batch_norm),
      seed_(options.seed) {}

DataParallelTrainer::~DataParallelTrainer() {
  absl::MutexLock lock(&mu_);
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
}

absl::StatusOr<std::unique_ptr<DataParallelTrainer>> DataParallelTrainer::Create(
    std::shared_ptr<const Model> model, std::vector<TrainerSlot> slots,
    const TrainerOptions& options, std::optional<ParameterServer> parameter_server) {
  if (slots.empty()) return absl::InvalidArgumentError("training needs at least one slot");
  if (parameter_server && parameter_server->device_id.kind != DeviceKind::kCpu) {
    return absl::UnimplementedError(absl::StrCat(
        "ps_device ", DeviceIdToString(parameter_server->device_id),
        ": the parameter server runs on a CPU device only in this version"));
  }
  for (const TrainerSlot& slot : slots) {
    if (slot.slot.device.kind != DeviceKind::kCpu) {
      return absl::UnimplementedError(absl::StrCat(
          "slot ", slot.slot.name, " on ", DeviceIdToString(slot.slot.device),
          ": training runs on CPU slots only in this version (CUDA training is not built yet)"));
    }
  }
  if (absl::Status s = ValidateOptimizerConfig(options.optimizer); !s.ok()) return s;
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(model->graph(), options.loss);
  if (!training.ok()) return training.status();
  std::unique_ptr<DataParallelTrainer> trainer(
      new DataParallelTrainer(std::move(model), *std::move(training), options));
  const Graph& graph = trainer->training_.graph;
  const Graph& source = trainer->model_->graph();
  std::vector<int64_t> sizes;
  for (int v : trainer->training_.parameters) sizes.push_back(source.initializers.at(v).num_elements());

  absl::MutexLock lock(&trainer->mu_);
  for (TrainerSlot& where : slots) {
    auto slot = std::make_unique<Slot>();
    slot->where = std::move(where);
    Device& device = *slot->where.device;
    for (const auto& [v, host] : graph.initializers) {
      absl::StatusOr<Tensor> copy = CopyToDevice(device, host);
      if (!copy.ok()) return copy.status();
      slot->constants.emplace(v, *std::move(copy));
    }
    // Every slot starts from the template's weights (the initial sync).
    for (int v : trainer->training_.parameters) {
      const Tensor& host = source.initializers.at(v);
      absl::StatusOr<Tensor> parameter = CopyToDevice(device, host);
      if (!parameter.ok()) return parameter.status();
      slot->parameters.push_back(*std::move(parameter));
      slot->gradients.push_back(Tensor::Host(DType::kFloat32, host.shape()));
    }
    for (int v : trainer->training_.buffers) {
      const Tensor& host = source.initializers.at(v);
      absl::StatusOr<Tensor> buffer = CopyToDevice(device, host);
      if (!buffer.ok()) return buffer.status();
      slot->buffers.push_back(*std::move(buffer));
      slot->buffer_updates.push_back(Tensor::Host(DType::kFloat32, host.shape()));
    }
    // The copies above are enqueued; wait for them before the host values can go.
    if (absl::Status s = device.Synchronize(); !s.ok()) return s;
    slot->loss_sum = Tensor::Host(DType::kFloat32, {});
    slot->correct = Tensor::Host(DType::kFloat32, {});
    if (!parameter_server) {
      absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
          Optimizer::Create(options.optimizer, sizes);
      if (!optimizer.ok()) return optimizer.status();
      slot->optimizer = *std::move(optimizer);
    }
    trainer->weights_.push_back(slot->where.slot.weight);
    trainer->slots_.push_back(std::move(slot));
  }
  if (parameter_server) {
    auto server = std::make_unique<Slot>();
    server->where = TrainerSlot{SlotAssignment{"ps", parameter_server->device_id, 0.0},
                                std::move(parameter_server->device)};
    for (int v : trainer->training_.parameters) {
      absl::StatusOr<Tensor> parameter = CopyToDevice(*server->where.device, source.initializers.at(v));
      if (!parameter.ok()) return parameter.status();
      server->parameters.push_back(*std::move(parameter));
    }
    if (absl::Status s = server->where.device->Synchronize(); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
        Optimizer::Create(options.optimizer, sizes);
    if (!optimizer.ok()) return optimizer.status();
    server->optimizer = *std::move(optimizer);
    trainer->server_ = std::move(server);
  }
  for (int64_t size : sizes) trainer->reduced_.emplace_back(static_cast<size_t>(size));
  return trainer;
}

absl::StatusOr<ExecutionPlan*> DataParallelTrainer::PlanFor(Slot& slot,
                                                            const std::vector<Shape>& shapes) {
  auto it = slot.plans.find(shapes);
  if (it != slot.plans.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan =
      ExecutionPlan::Create(training_.graph, slot.constants, *slot.where.device, shapes);
  if (!plan.ok()) return plan.status();
  ExecutionPlan* raw = plan->get();
  slot.plans.emplace(shapes, *std::move(plan));
  return raw;
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::Step(
    const std::vector<Tensor>& inputs, const Tensor& targets) {
  absl::MutexLock lock(&mu_);
  if (inputs.size() != static_cast<size_t>(training_.num_model_inputs) || inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", training_.num_model_inputs,
                                                   " inputs, received ", inputs.size()));
  }
  const int64_t batch = inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  if (batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("inputs: the batch must have at least one row, received ",
                                                   ShapeToString(inputs[0].shape())));
  }
  if (training_.classification &&
      !(targets.dtype() == DType::kInt64 ? targets.shape().size() == 1
                                         : targets.shape().size() == 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "targets: softmax cross-entropy takes int64 [N] class labels or float32 [N, C] "
        "probabilities, received ",
        TensorTypeToString(targets.type())));
  }
  const DType target_dtype = training_.graph.values[training_.graph.inputs[inputs.size()]].type.dtype;
  if (targets.dtype() != target_dtype) {
    return absl::InvalidArgumentError(absl::StrCat("targets: dtype must be ",
                                                   DTypeName(target_dtype), ", received ",
                                                   DTypeName(targets.dtype())));
  }
  if (targets.shape().empty() || targets.shape()[0] != batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets: dim 0 must be the batch size ", batch, " of the inputs, received ",
                     ShapeToString(targets.shape())));
  }
  const std::vector<BatchSlice> slices = SplitBatch(batch, weights_);

  // Plans first, on this thread: a bad shape fails before anything runs.
  std::vector<ExecutionPlan*> plans;
  for (const BatchSlice& slice : slices) {
    Slot& slot = *slots_[slice.slot];
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) {
      Shape s = t.shape();
      s[0] = slice.rows();
      shapes.push_back(std::move(s));
    }
    Shape target_shape = targets.shape();
    target_shape[0] = slice.rows();
    shapes.push_back(std::move(target_shape));
    for (const Tensor& p : slot.parameters) shapes.push_back(p.shape());
    for (const Tensor& b : slot.buffers) shapes.push_back(b.shape());
    absl::StatusOr<ExecutionPlan*> plan = PlanFor(slot, shapes);
    if (!plan.ok()) return plan.status();
    plans.push_back(*plan);
  }

  // Forward and backward of every slice, concurrently on the slots; with
  // SyncBatchNorm they meet in the collective.
  BarrierCollective collective(static_cast<int>(slices.size()));
  std::vector<TrainingStepContext> contexts(slices.size());
  std::vector<absl::Status> statuses(slices.size());
  std::vector<double> seconds(slices.size()), forward_seconds(slices.size());
  const Node* backward = training_.graph.nodes.data() + training_.first_backward_node;
  for (size_t i = 0; i < slices.size(); ++i) {
    contexts[i] = TrainingStepContext{step_ + 1,      seed_, slices[i].begin, batch,
                                      static_cast<int>(i),
                                      sync_batch_norm_ ? &collective : nullptr};
    Slot& slot = *slots_[slices[i].slot];
    slot.where.device->Enqueue([&, i, plan = plans[i]] {
      const auto start = std::chrono::steady_clock::now();
      const BatchSlice& slice = slices[i];
      std::vector<const void*> in;
      for (const Tensor& t : inputs) in.push_back(RowPointer(t, slice.begin));
      in.push_back(RowPointer(targets, slice.begin));
      for (const Tensor& p : slot.parameters) in.push_back(p.raw_data());
      for (const Tensor& b : slot.buffers) in.push_back(b.raw_data());
      std::vector<void*> out{slot.loss_sum.raw_data()};
      if (training_.classification) out.push_back(slot.correct.raw_data());
      for (Tensor& g : slot.gradients) out.push_back(g.raw_data());
      for (Tensor& u : slot.buffer_updates) out.push_back(u.raw_data());
      {
        ScopedTrainingStep in_step(&contexts[i]);
        statuses[i] = plan->RunSplit(in.data(), out.data(), backward, &forward_seconds[i]);
      }
      // The other slots may be waiting for this one in the collective.
      if (!statuses[i].ok()) collective.Abort();
      seconds[i] = SecondsSince(start);
    });
  }
  for (const BatchSlice& slice : slices) (void)slots_[slice.slot]->where.device->Synchronize();
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }

  // Reduce: the sum over slots in slot order, over the global batch.
  StepResult result;
  const auto reduce_start = std::chrono::steady_clock::now();
  const float scale = 1.0f / static_cast<float>(batch);
  double loss = 0, correct = 0;
  for (size_t p = 0; p < reduced_.size(); ++p) {
    std::vector<float>& sum = reduced_[p];
    std::memcpy(sum.data(), slots_[slices[0].slot]->gradients[p].data<float>(),
                sum.size() * sizeof(float));
    for (size_t i = 1; i < slices.size(); ++i) {
      const float* g = slots_[slices[i].slot]->gradients[p].data<float>();
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
    }
    for (float& v : sum) v *= scale;
  }
  for (const BatchSlice& slice : slices) {
    loss += *slots_[slice.slot]->loss_sum.data<float>();
    correct += *slots_[slice.slot]->correct.data<float>();
  }
  result.reduce_seconds = SecondsSince(reduce_start);
  for (const std::vector<float>& sum : reduced_) {
    result.reduced_bytes += static_cast<int64_t>(sum.size() * sizeof(float) * slices.size());
  }

  // allreduce: every slot applies the same update to its copy, concurrently.
  // ps: the server updates its copy, then every slot takes it.
  const auto optimizer_start = std::chrono::steady_clock::now();
  std::vector<const float*> reduced;
  for (const std::vector<float>& r : reduced_) reduced.push_back(r.data());
  auto update = [&reduced](Slot* s) {
    s->where.device->Enqueue([&reduced, s] {
      std::vector<float*> parameters;
      for (Tensor& p : s->parameters) parameters.push_back(p.data<float>());
      s->optimizer->Step(parameters, reduced);
    });
  };
  if (server_ != nullptr) {
    update(server_.get());
    (void)server_->where.device->Synchronize();
    for (auto& slot : slots_) {
      slot->where.device->Enqueue([s = slot.get(), server = server_.get()] {
        for (size_t p = 0; p < s->parameters.size(); ++p) {
          std::memcpy(s->parameters[p].raw_data(), server->parameters[p].raw_data(),
                      s->parameters[p].byte_size());
        }
      });
    }
  } else {
    for (auto& slot : slots_) update(slot.get());
  }
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
  result.optimizer_seconds = SecondsSince(optimizer_start);
  // Running statistics: the first participant's (with SyncBatchNorm every
  // participant computed the same), on every slot.
  const Slot& first = *slots_[slices[0].slot];
  for (auto& slot : slots_) {
    for (size_t b = 0; b < slot->buffers.size(); ++b) {
      std::memcpy(slot->buffers[b].raw_data(), first.buffer_updates[b].raw_data(),
                  slot->buffers[b].byte_size());
    }
  }

  ++step_;
  result.step = step_;
  result.samples = batch;
  result.loss = loss / static_cast<double>(batch);
  if (training_.classification) result.accuracy = correct / static_cast<double>(batch);
  for (size_t i = 0; i < slices.size(); ++i) {
    result.slices.push_back({slices[i], seconds[i], forward_seconds[i]});
  }
  return result;
}

int64_t DataParallelTrainer::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

namespace {

std::vector<Tensor> HostCopies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& t : tensors) {
    Tensor copy = Tensor::Host(t.dtype(), t.shape());
    std::memcpy(copy.raw_data(), t.raw_data(), t.byte_size());
    copies.push_back(std::move(copy));
  }
  return copies;
}

}  // namespace

std::vector<Tensor> DataParallelTrainer::SlotParameters(int slot) const {
  absl::MutexLock lock(&mu_);
  return HostCopies(slots_[slot]->parameters);
}

std::vector<Tensor> DataParallelTrainer::SlotBuffers(int slot) const {
  absl::MutexLock lock(&mu_);
  return HostCopies(slots_[slot]->buffers);
}

std::vector<std::pair<std::string, Tensor>> DataParallelTrainer::OptimizerState() const {
  absl::MutexLock lock(&mu_);
  return (server_ != nullptr ? server_ : slots_[0])->optimizer->State();
}

absl::Status DataParallelTrainer::Resume(int64_t step,
                                         const std::vector<std::pair<std::string, Tensor>>& state) {
  absl::MutexLock lock(&mu_);
  if (!state.empty()) {
    // Restore validates before it changes anything, so a bad state fails on
    // the first optimizer and leaves every one as it was.
    if (server_ != nullptr) {
      if (absl::Status s = server_->optimizer->Restore(step, state); !s.ok()) return s;
    }
    for (auto& slot : slots_) {
      if (slot->optimizer == nullptr) continue;
      if (absl::Status s = slot->optimizer->Restore(step, state); !s.ok()) return s;
    }
  }
  step_ = step;
  return absl::OkStatus();
}

std::shared_ptr<const Model> DataParallelTrainer::CurrentModel() const {
  std::vector<Tensor> parameters, buffers;
  {
    absl::MutexLock lock(&mu_);  // One step's weights and statistics, together.
    parameters = HostCopies(slots_[0]->parameters);
    buffers = HostCopies(slots_[0]->buffers);
  }
  Graph graph = model_->graph();
  for (size_t p = 0; p < parameters.size(); ++p) {
    graph.initializers.insert_or_assign(training_.parameters[p], std::move(parameters[p]));
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    graph.initializers.insert_or_assign(training_.buffers[b], std::move(buffers[b]));
  }
  return std::make_shared<const Model>(model_->name(), model_->source(), std::move(graph));
}

}  // namespace replicad
