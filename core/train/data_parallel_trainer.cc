#include "core/train/data_parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/status_macros.h"
#include "core/device/device_copy.h"
#include "core/device/run_context.h"
#include "core/ops/op_registry.h"
#include "core/train/barrier_collective.h"
#include "core/train/finite_values.h"

namespace replicad {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes of a row of a host tensor whose dim 0 is the batch.
size_t RowBytes(const Tensor& t) {
  const int64_t rows = t.shape().empty() ? 1 : t.shape()[0];
  return rows == 0 ? 0 : t.byte_size() / static_cast<size_t>(rows);
}

// Row `row` of a host tensor whose dim 0 is the batch.
const void* RowPointer(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.raw_data()) + row * RowBytes(t);
}

bool InHostMemory(const Device& device) {
  return device.memory_location().kind == MemoryKind::kHost;
}

// What NCCL moves well in one call, and what PyTorch's DDP buckets by
// default: big enough that per-call latency is noise, small enough that the
// first bucket's reduction starts early in the backward pass.
constexpr size_t kBucketBytes = size_t{25} << 20;
// Each gradient starts on a boundary the GPU's vector loads like.
constexpr size_t kGradientAlignment = 256;

// NCCL does not order the collectives of different communicators on one
// GPU, and two trainers' steps interleaving there can deadlock, so the GPU
// steps of all trainers (models) that use NCCL run one at a time.
absl::Mutex& GpuStepMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

// Host copies of `tensors`, which live in `device`'s memory. Not on the
// device's stream thread.
// A failed copy fails the whole: half-copied weights must never reach a
// checkpoint or a predict set.
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
  KernelSpec spec;
  spec.op_type = op_type;
  spec.node_name = absl::StrCat("ps gradient ", op_type);
  spec.attributes = &attributes;
  for (const Shape& shape : shapes) {
    spec.inputs.push_back(TensorType{DType::kFloat32, shape});
    spec.constant_inputs.push_back(nullptr);
  }
  REPLICAD_RETURN_IF_ERROR(FindOp(op_type)->infer(&spec));
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, device.MakeKernel(spec));
  if (const size_t bytes = kernel->workspace_bytes(); bytes != 0) {
    REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> workspace, device.Allocate(bytes));
    kernel->SetWorkspace(workspace->data());
    workspaces->push_back(std::move(workspace));
  }
  return kernel;
}

}  // namespace

// The parameter server's side of the `ps` reduction, made once by Create.
struct DataParallelTrainer::ServerReduction {
  // Per slot, the server's copy of its gradient arena, written every step;
  // null where the server shares the slot's memory and reads the arena there.
  std::vector<std::shared_ptr<Buffer>> copies;
  // A GPU server's (host servers sum into reduced_): the running sum goes
  // back and forth between these arenas, since a kernel never writes its
  // input, and the scaled sum lands in the one not holding the sum.
  std::shared_ptr<Buffer> sums[2];
  std::shared_ptr<Buffer> scale;  // 1 / batch, one float32 written every step.
  float scale_host = 0;           // Its source, alive while the copy runs.
  Attributes no_attributes;       // Add and Mul have none.
  // [E] + [E] and [E] * [1] over the E floats of an arena; null when E is 0.
  std::unique_ptr<Kernel> add, mul;
  std::vector<std::shared_ptr<Buffer>> workspaces;

  // On a GPU server's stream, once `sources` (one arena per participant in
  // slot order, in the server's memory) are written: sum = g0 + g1 + ...,
  // then sum * scale, as the host loop computes them; `*sum` is where.
  absl::Status Sum(Device& server, const std::vector<const void*>& sources, float scale_value,
                   const void** sum) {
    *sum = sums[0]->data();
    if (add == nullptr) return absl::OkStatus();
    scale_host = scale_value;
    REPLICAD_RETURN_IF_ERROR(server.CopyOnStream(&scale_host, MemoryLocation{}, scale->data(),
                                                 scale->location(), sizeof(float)));
    // Plain arithmetic: the kernels read nothing of the step.
    int next = 0;
    const void* acc = sources[0];
    for (size_t i = 1; i < sources.size(); ++i) {
      const void* in[] = {acc, sources[i]};
      void* out[] = {sums[next]->data()};
      REPLICAD_RETURN_IF_ERROR(add->Run(RunContext{}, in, out));
      acc = out[0];
      next = 1 - next;
    }
    const void* in[] = {acc, scale->data()};
    void* out[] = {sums[next]->data()};
    REPLICAD_RETURN_IF_ERROR(mul->Run(RunContext{}, in, out));
    *sum = out[0];
    return absl::OkStatus();
  }
};

// One plan of a slot and, on a device whose memory the host does not read,
// that memory's copies of the slice's inputs and targets.
struct DataParallelTrainer::SlotPlan {
  std::unique_ptr<ExecutionPlan> plan;
  std::vector<std::shared_ptr<Buffer>> inputs;
};

// A slot's copy of the weights and everything its steps write, all in the
// slot's memory (host memory for CPU slots, which the host reduction and
// optimizer then read directly).
struct DataParallelTrainer::Slot {
  TrainerSlot where;
  std::map<int, Tensor> constants;  // Device copies of the training graph's initializers.
  std::vector<Tensor> parameters;
  // Of the sum of the slice's losses, in parameter order: views into one
  // arena laid out in bucket order.
  std::shared_ptr<Buffer> gradient_arena;
  std::vector<Tensor> gradients;
  std::vector<Tensor> buffers;  // Running statistics.
  std::vector<Tensor> buffer_updates;
  Tensor loss_sum;
  Tensor correct;
  float loss_sum_host = 0;  // Their host copies, once the slot's step ran.
  float correct_host = 0;
  std::unique_ptr<Optimizer> optimizer;
  std::map<std::vector<Shape>, SlotPlan> plans;
};

DataParallelTrainer::DataParallelTrainer(std::shared_ptr<const Model> model, TrainingGraph training,
                                         const TrainerOptions& options)
    : model_(std::move(model)),
      training_(std::move(training)),
      sync_batch_norm_(options.sync_batch_norm),
      seed_(options.seed),
      non_finite_steps_(options.non_finite_steps) {}

DataParallelTrainer::~DataParallelTrainer() {
  absl::MutexLock lock(&mu_);
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
  if (server_ != nullptr) (void)server_->where.device->Synchronize();
}

absl::StatusOr<std::unique_ptr<DataParallelTrainer>> DataParallelTrainer::Create(
    std::shared_ptr<const Model> model, std::vector<TrainerSlot> slots,
    const TrainerOptions& options, TrainerReduction reduction) {
  std::optional<ParameterServer>& parameter_server = reduction.parameter_server;
  std::shared_ptr<TrainingRanks>& ranks = reduction.ranks;
  if (slots.empty()) return absl::InvalidArgumentError("training needs at least one slot");
  const TrainerSlot* cpu_slot = nullptr;
  const TrainerSlot* gpu_slot = nullptr;
  for (const TrainerSlot& slot : slots) {
    const TrainerSlot*& first = InHostMemory(*slot.device) ? cpu_slot : gpu_slot;
    if (first == nullptr) first = &slot;
  }
  // allreduce sums where the slots are (the host, or NCCL among the GPUs);
  // a parameter server takes every slot's gradients into its own memory.
  if (cpu_slot != nullptr && gpu_slot != nullptr && !parameter_server) {
    return absl::UnimplementedError(absl::StrCat(
        "reduction: allreduce trains all CPU or all GPU slots in this version, and slot ",
        gpu_slot->slot.name, " is on ", DeviceIdToString(gpu_slot->slot.device), " while slot ",
        cpu_slot->slot.name, " is on ", DeviceIdToString(cpu_slot->slot.device),
        "; a mix of CPU and GPU slots trains with reduction 'ps' (a parameter server, e.g. "
        "ps_device cpu:0)"));
  }
  const bool on_host = gpu_slot == nullptr;
  int first_slot = 0;
  if (ranks != nullptr) {
    if (parameter_server) {
      return absl::UnimplementedError(
          "reduction 'ps' (a parameter server) trains within one process; across ranks use "
          "'allreduce'");
    }
    const std::vector<int>& slot_ranks = ranks->slot_ranks();
    const auto mine = std::find(slot_ranks.begin(), slot_ranks.end(), ranks->rank());
    const int64_t count = std::count(slot_ranks.begin(), slot_ranks.end(), ranks->rank());
    if (ranks->slot_weights().size() != slot_ranks.size() ||
        count != static_cast<int64_t>(slots.size())) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", ranks->rank(), " trains ",
                                                     slots.size(), " slots, but the job lists ",
                                                     count, " for it among ", slot_ranks.size()));
    }
    first_slot = static_cast<int>(mine - slot_ranks.begin());
  }
  if (absl::Status s = ValidateOptimizerConfig(options.optimizer); !s.ok()) return s;
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(model->graph(), options.loss);
  if (!training.ok()) return training.status();
  std::unique_ptr<DataParallelTrainer> trainer(
      new DataParallelTrainer(std::move(model), *std::move(training), options));
  trainer->ranks_ = std::move(ranks);
  trainer->first_slot_ = first_slot;
  if (trainer->ranks_ != nullptr) {
    // The ranks compare it at every step (CheckRanksAlike).
    uint64_t hash = 14695981039346656037ull;  // FNV-1a, a 64-bit word at a time.
    auto add = [&hash](const Tensor& t) {
      const unsigned char* bytes = static_cast<const unsigned char*>(t.raw_data());
      const size_t size = t.byte_size();
      for (size_t i = 0; i < size; i += 8) {
        uint64_t word = 0;
        std::memcpy(&word, bytes + i, std::min<size_t>(8, size - i));
        hash = (hash ^ word) * 1099511628211ull;
      }
    };
    for (int v : trainer->training_.parameters) add(trainer->model_->graph().initializers.at(v));
    for (int v : trainer->training_.buffers) add(trainer->model_->graph().initializers.at(v));
    trainer->starting_weights_ = absl::StrCat(absl::Hex(hash, absl::kZeroPad16));
  }
  const Graph& graph = trainer->training_.graph;
  const Graph& source = trainer->model_->graph();
  std::vector<int64_t> sizes;
  for (int v : trainer->training_.parameters)
    sizes.push_back(source.initializers.at(v).num_elements());
  trainer->LayOutGradients(sizes);

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
      absl::StatusOr<Tensor> parameter = CopyToDevice(device, source.initializers.at(v));
      if (!parameter.ok()) return parameter.status();
      slot->parameters.push_back(*std::move(parameter));
    }
    absl::StatusOr<std::shared_ptr<Buffer>> arena =
        device.Allocate(std::max<size_t>(trainer->gradient_arena_bytes_, 1));
    if (!arena.ok()) return arena.status();
    slot->gradient_arena = *std::move(arena);
    for (size_t p = 0; p < sizes.size(); ++p) {
      absl::StatusOr<Tensor> gradient =
          Tensor::Create(DType::kFloat32, slot->parameters[p].shape(), slot->gradient_arena,
                         trainer->gradient_offsets_[p]);
      if (!gradient.ok()) return gradient.status();
      slot->gradients.push_back(*std::move(gradient));
    }
    for (int v : trainer->training_.buffers) {
      const Tensor& host = source.initializers.at(v);
      absl::StatusOr<Tensor> buffer = CopyToDevice(device, host);
      if (!buffer.ok()) return buffer.status();
      slot->buffers.push_back(*std::move(buffer));
      absl::StatusOr<Tensor> update = CopyToDevice(device, host);
      if (!update.ok()) return update.status();
      slot->buffer_updates.push_back(*std::move(update));
    }
    Tensor scalar = Tensor::Host(DType::kFloat32, {});
    absl::StatusOr<Tensor> loss_sum = CopyToDevice(device, scalar);
    if (!loss_sum.ok()) return loss_sum.status();
    absl::StatusOr<Tensor> correct = CopyToDevice(device, scalar);
    if (!correct.ok()) return correct.status();
    slot->loss_sum = *std::move(loss_sum);
    slot->correct = *std::move(correct);
    // The copies above are enqueued; wait for them before the host values can go.
    if (absl::Status s = device.Synchronize(); !s.ok()) return s;
    if (!parameter_server) {
      // On the slot's device: host loops for CPU slots, kernels for GPU ones.
      absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
          Optimizer::Create(options.optimizer, sizes, &device);
      if (!optimizer.ok()) return optimizer.status();
      slot->optimizer = *std::move(optimizer);
    }
    trainer->weights_.push_back(slot->where.slot.weight);
    trainer->slots_.push_back(std::move(slot));
  }
  for (int v : trainer->training_.buffers) {
    trainer->buffer_staging_.push_back(
        Tensor::Host(DType::kFloat32, source.initializers.at(v).shape()));
  }
  if (!on_host && !parameter_server) {
    std::vector<Device*> devices;
    for (auto& slot : trainer->slots_) devices.push_back(slot->where.device.get());
    if (!reduction.slot_all_reduce) {
      return absl::FailedPreconditionError(
          "GPU slots under allreduce need the backends' all-reduce (TrainerReduction)");
    }
    // Across ranks the other ranks' GPUs take part: the reduction agrees
    // with them on how to reach each other through the ranks' own channel.
    std::optional<SlotAllReducePeers> peers;
    if (TrainingRanks* job = trainer->ranks_.get(); job != nullptr) {
      peers.emplace();
      peers->rank = job->rank();
      peers->size = job->size();
      peers->timeout = job->timeout();
      peers->all_gather = [job](const std::string& mine) { return job->AllGather(mine); };
      peers->break_group = [job](const absl::Status& why) { job->Abandon(why); };
    }
    absl::StatusOr<std::unique_ptr<SlotAllReduce>> all_reduce =
        reduction.slot_all_reduce(devices, peers ? &*peers : nullptr);
    if (!all_reduce.ok()) return all_reduce.status();
    trainer->all_reduce_ = *std::move(all_reduce);
  }
  if (parameter_server) {
    auto server = std::make_unique<Slot>();
    server->where = TrainerSlot{SlotAssignment{"ps", parameter_server->device_id, 0.0},
                                std::move(parameter_server->device)};
    for (int v : trainer->training_.parameters) {
      absl::StatusOr<Tensor> parameter =
          CopyToDevice(*server->where.device, source.initializers.at(v));
      if (!parameter.ok()) return parameter.status();
      server->parameters.push_back(*std::move(parameter));
    }
    if (absl::Status s = server->where.device->Synchronize(); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
        Optimizer::Create(options.optimizer, sizes, server->where.device.get());
    if (!optimizer.ok()) return optimizer.status();
    server->optimizer = *std::move(optimizer);
    trainer->server_ = std::move(server);
    if (absl::Status s = trainer->SetUpServerReduction(); !s.ok()) return s;
  }
  // The host sums for CPU slots under allreduce, and for a server on the host.
  if (trainer->server_ != nullptr ? InHostMemory(*trainer->server_->where.device) : on_host) {
    for (int64_t size : sizes) trainer->reduced_.emplace_back(static_cast<size_t>(size));
  }
  return trainer;
}

absl::Status DataParallelTrainer::SetUpServerReduction() {
  auto reduction = std::make_unique<ServerReduction>();
  Device& server = *server_->where.device;
  const size_t arena_bytes = std::max<size_t>(gradient_arena_bytes_, 1);
  for (const auto& slot : slots_) {
    std::shared_ptr<Buffer> copy;
    if (!(slot->where.device->memory_location() == server.memory_location())) {
      REPLICAD_ASSIGN_OR_RETURN(copy, server.Allocate(arena_bytes));
    }
    reduction->copies.push_back(std::move(copy));
  }
  if (!InHostMemory(server)) {
    for (std::shared_ptr<Buffer>& sum : reduction->sums) {
      REPLICAD_ASSIGN_OR_RETURN(sum, server.Allocate(arena_bytes));
    }
    REPLICAD_ASSIGN_OR_RETURN(reduction->scale, server.Allocate(sizeof(float)));
    const int64_t elements = static_cast<int64_t>(gradient_arena_bytes_ / sizeof(float));
    if (elements > 0) {
      REPLICAD_ASSIGN_OR_RETURN(
          reduction->add, MakeReductionKernel(server, "Add", reduction->no_attributes,
                                              {{elements}, {elements}}, &reduction->workspaces));
      REPLICAD_ASSIGN_OR_RETURN(reduction->mul,
                                MakeReductionKernel(server, "Mul", reduction->no_attributes,
                                                    {{elements}, {1}}, &reduction->workspaces));
    }
  }
  server_reduction_ = std::move(reduction);
  return absl::OkStatus();
}

std::vector<const float*> DataParallelTrainer::ArenaGradients(const void* arena) const {
  std::vector<const float*> gradients;
  for (size_t offset : gradient_offsets_) {
    gradients.push_back(reinterpret_cast<const float*>(static_cast<const char*>(arena) + offset));
  }
  return gradients;
}

void DataParallelTrainer::LayOutGradients(const std::vector<int64_t>& sizes) {
  // The backward pass writes the gradients in the order of their producing
  // nodes; the arena follows it, so buckets fill one after another.
  const Graph& graph = training_.graph;
  const int first_gradient = 1 + (training_.classification ? 1 : 0);
  std::vector<int> producer(graph.values.size(), INT_MAX);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int v : graph.nodes[n].outputs) {
      if (v >= 0) producer[v] = std::min(producer[v], static_cast<int>(n));
    }
  }
  std::vector<int> order(sizes.size());
  for (size_t p = 0; p < order.size(); ++p) order[p] = static_cast<int>(p);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return producer[graph.outputs[first_gradient + a]] <
           producer[graph.outputs[first_gradient + b]];
  });
  gradient_offsets_.assign(sizes.size(), 0);
  bucket_of_.assign(sizes.size(), 0);
  size_t offset = 0;
  for (int p : order) {
    const size_t bytes = static_cast<size_t>(sizes[p]) * sizeof(float);
    gradient_bytes_ += bytes;
    if (buckets_.empty() ||
        (buckets_.back().bytes > 0 && buckets_.back().bytes + bytes > kBucketBytes)) {
      buckets_.push_back(Bucket{offset, 0, 0});
    }
    Bucket& bucket = buckets_.back();
    gradient_offsets_[p] = offset;
    bucket_of_[p] = static_cast<int>(buckets_.size() - 1);
    ++bucket.parameters;
    const size_t padded =
        (bytes + kGradientAlignment - 1) / kGradientAlignment * kGradientAlignment;
    offset += padded;
    // Padding between gradients is reduced too (it is never read): one
    // contiguous range per bucket, one NCCL call.
    bucket.bytes = offset - bucket.offset;
  }
  gradient_arena_bytes_ = offset;
}

absl::StatusOr<DataParallelTrainer::SlotPlan*> DataParallelTrainer::PlanFor(
    Slot& slot, const std::vector<Shape>& shapes) {
  auto it = slot.plans.find(shapes);
  if (it != slot.plans.end()) return &it->second;
  Device& device = *slot.where.device;
  absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan =
      ExecutionPlan::Create(training_.graph, slot.constants, device, shapes);
  if (!plan.ok()) return plan.status();
  SlotPlan entry;
  if (!InHostMemory(device)) {
    // The slice's inputs and targets come in through these.
    for (int i = 0; i <= training_.num_model_inputs; ++i) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer =
          device.Allocate(std::max<size_t>(ByteSize((*plan)->input_types()[i]), 1));
      if (!buffer.ok()) return buffer.status();
      entry.inputs.push_back(*std::move(buffer));
    }
  }
  entry.plan = *std::move(plan);
  return &slot.plans.emplace(shapes, std::move(entry)).first->second;
}

void DataParallelTrainer::SumOnHost(const std::vector<const void*>& sources) {
  for (size_t p = 0; p < reduced_.size(); ++p) {
    std::vector<float>& sum = reduced_[p];
    const size_t first = gradient_offsets_[p] / sizeof(float);
    if (sources.empty()) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      continue;
    }
    std::memcpy(sum.data(), static_cast<const float*>(sources[0]) + first,
                sum.size() * sizeof(float));
    for (size_t i = 1; i < sources.size(); ++i) {
      const float* g = static_cast<const float*>(sources[i]) + first;
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
    }
  }
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::Step(
    const std::vector<Tensor>& inputs, const Tensor& targets) {
  return StepGiven(inputs, targets, {});
}

absl::Status DataParallelTrainer::Validate(const std::vector<Tensor>& inputs,
                                           const Tensor& targets) const {
  int64_t rows = 0;
  return ValidateBatch(inputs, targets, &rows);
}

DataParallelTrainer::RowRange DataParallelTrainer::RowsOfRank(int64_t batch, int rank) const {
  RowRange rows;
  if (ranks_ == nullptr) return rows;
  bool found = false;
  for (const BatchSlice& slice : SplitBatch(batch, ranks_->slot_weights())) {
    if (ranks_->slot_ranks()[slice.slot] != rank) continue;
    if (!found) rows.first = slice.begin;
    found = true;
    rows.end = slice.end;
  }
  return rows;
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepRows(
    int64_t first_row, int64_t batch, const std::vector<Tensor>& inputs, const Tensor& targets) {
  StepRowsGiven given;
  given.part_first_row = std::max<int64_t>(first_row, 0);
  given.part_batch = batch;
  return StepGiven(inputs, targets, given);
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepShard(
    int64_t step, uint64_t configuration, const std::vector<Tensor>& inputs,
    const Tensor& targets) {
  StepRowsGiven given;
  given.shard_step = std::max<int64_t>(step, 1);
  given.configuration = configuration;
  return StepGiven(inputs, targets, given);
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepGiven(
    const std::vector<Tensor>& inputs, const Tensor& targets, const StepRowsGiven& given) {
  absl::MutexLock lock(&mu_);
  if (ranks_ == nullptr && (given.shard_step > 0 || given.part_first_row >= 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat(given.shard_step > 0 ? "a shard of a step" : "a rank's rows of a step",
                     " needs a job of several ranks (mpirun, srun); this process trains alone: "
                     "send the whole batch"));
  }
  StepProgress progress;
  absl::StatusOr<StepResult> result = StepLocked(inputs, targets, given, &progress);
  if (ranks_ != nullptr && progress.ready && !progress.summed) {
    // Once every rank was ready, every rank sums once a step, or the
    // others would wait for this one: its failure fails the step everywhere.
    RankPartial failed;
    failed.status =
        result.ok() ? absl::InternalError("the step ended before its reduction") : result.status();
    (void)ranks_->SumStep(step_ + 1, &failed);
    if (result.ok()) return failed.status;
  }
  return result;
}

// Everything one step works on, handed from stage to stage.
struct DataParallelTrainer::StepState {
  StepState(const std::vector<Tensor>& step_inputs, const Tensor& step_targets)
      : inputs(step_inputs), targets(step_targets) {}
  const std::vector<Tensor>& inputs;
  const Tensor& targets;
  int64_t shard_step = 0;            // > 0: this rank's shard of that step.
  uint64_t configuration = 0;        // Of the shard's training, for the ranks to compare.
  int64_t part_first_row = -1;       // >= 0: this rank's part of rank 0's batch, from that row.
  int64_t part_batch = 0;            // Rank 0's batch, then.
  int64_t rows = 0;                  // Of `inputs`.
  int64_t batch = 0;                 // The job's: `rows`, or every rank's shard.
  int64_t first_row = 0;             // The job's index of inputs' row 0.
  float scale = 0;                   // 1 / batch.
  std::vector<BatchSlice> slices;    // This rank's, on its own slot indices.
  std::vector<int> ranks_with_rows;  // Ascending.
  bool runs_first_row = false;
  std::vector<SlotPlan*> plans;  // Per slice.
  std::vector<double> seconds, forward_seconds;
  double loss = 0, correct = 0;  // Sums: this rank's, then the job's.
  // Where the host or a server reads each slice's gradients.
  std::vector<const void*> sources;
  int64_t reduced_bytes = 0;
  std::vector<Tensor> running;       // The running statistics every slot takes.
  const void* server_sum = nullptr;  // A GPU server's reduced arena.
};

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepLocked(
    const std::vector<Tensor>& inputs, const Tensor& targets, const StepRowsGiven& given,
    StepProgress* progress) {
  StepState step(inputs, targets);
  step.shard_step = given.shard_step;
  step.configuration = given.configuration;
  step.part_first_row = given.part_first_row;
  step.part_batch = given.part_batch;
  absl::Status ready =
      ValidateBatch(inputs, targets, &step.rows, /*rows_may_be_none=*/step.part_first_row >= 0);
  if (step.shard_step > 0) {
    // The job's batch is every rank's shard: a failure here (this rank's
    // or another's) ends the step on every rank alike.
    REPLICAD_RETURN_IF_ERROR(ExchangeShards(step, ready));
  }
  // NCCL does not order different trainers' steps on a GPU (GpuStepMutex).
  std::optional<absl::MutexLock> one_gpu_step;
  if (all_reduce_ != nullptr) one_gpu_step.emplace(&GpuStepMutex());
  if (ready.ok()) ready = PlanSlices(step);
  if (ranks_ != nullptr) {
    // Every rank ready and alike, or the step ends here on every rank:
    // past this point the ranks wait for each other (statistics, NCCL, sums).
    absl::StatusOr<std::vector<std::string>> every =
        GatherReadiness(*ranks_, ready, RanksMustShare());
    if (!every.ok()) return every.status();
    REPLICAD_RETURN_IF_ERROR(CheckRanksAlike(*every));
    progress->ready = true;
  }
  REPLICAD_RETURN_IF_ERROR(ready);
  step.scale = 1.0f / static_cast<float>(step.batch);
  REPLICAD_RETURN_IF_ERROR(RunSlices(step));
  const auto reduce_start = std::chrono::steady_clock::now();
  REPLICAD_RETURN_IF_ERROR(GatherGradients(step, &progress->summed));
  // Finite inputs can still overflow float32 inside the model (inputs of
  // 1e30). Nothing is applied yet: the weights, the optimizer's state, the
  // running statistics and the step count stay as they were.
  std::string why = ScaleAndCheckFinite(step);
  if (why.empty()) why = CheckUpdateStaysFinite(step);
  if (!why.empty()) {
    // Skipped or refused, a step that is not applied answers the same reason.
    if (non_finite_steps_ == TrainerOptions::NonFiniteSteps::kRefuse) {
      return absl::InvalidArgumentError(
          absl::StrCat(why, "; the step was not applied and the weights are unchanged"));
    }
    StepResult skipped = ResultOf(step);
    skipped.step = step_;
    skipped.skipped = std::move(why);
    return skipped;
  }
  REPLICAD_RETURN_IF_ERROR(SumOnServer(step));
  const double reduce_seconds = SecondsSince(reduce_start);
  const auto optimizer_start = std::chrono::steady_clock::now();
  REPLICAD_RETURN_IF_ERROR(ApplyUpdate(step));
  const double optimizer_seconds = SecondsSince(optimizer_start);
  REPLICAD_RETURN_IF_ERROR(ShareRunningStatistics(step));
  ++step_;
  StepResult result = ResultOf(step);
  result.reduce_seconds = reduce_seconds;
  result.optimizer_seconds = optimizer_seconds;
  return result;
}

std::string DataParallelTrainer::RanksMustShare() const {
  const char* kind = all_reduce_ != nullptr ? "GPU slots (NCCL)" : "CPU slots (the host)";
  return absl::StrCat(kind, "\n", starting_weights_, "\n", step_);
}

absl::Status DataParallelTrainer::CheckRanksAlike(const std::vector<std::string>& every) const {
  // A rank on CPU slots sums on the host while one on GPUs waits in NCCL:
  // each would wait for the other until the timeout broke the job. Ranks
  // started from other weights or at other steps (another model or
  // checkpoint) would train on, their copies apart, unnoticed.
  const std::vector<std::string> first = absl::StrSplit(every[0], '\n');
  for (size_t r = 0; r < every.size(); ++r) {
    const std::vector<std::string> theirs = absl::StrSplit(every[r], '\n');
    if (theirs.size() != 3 || first.size() != 3) {
      return absl::InternalError(absl::StrCat("rank ", r, " sent a malformed description"));
    }
    const std::string rank = absl::StrCat("rank ", r, " of ", every.size());
    if (theirs[0] != first[0]) {
      return absl::FailedPreconditionError(absl::StrCat(
          rank, " sums its gradients on ", theirs[0], " and rank 0 on ", first[0],
          ": every rank of a job must train on the same kind of slots (give each rank the same "
          "--devices)"));
    }
    if (theirs[1] != first[1]) {
      return absl::FailedPreconditionError(
          absl::StrCat(rank,
                       " starts from other weights than rank 0 (another model or checkpoint): "
                       "every rank of a job must load the same"));
    }
    if (theirs[2] != first[2]) {
      return absl::FailedPreconditionError(
          absl::StrCat(rank, " is at step ", theirs[2], " and rank 0 at step ", first[2],
                       ": every rank of a job must resume from the same checkpoint"));
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::ExchangeShards(StepState& step, const absl::Status& valid) {
  // Every rank's shard, in rank order, is the job's batch; this rank
  // splits its own over its slots (PlanSlices).
  absl::StatusOr<std::vector<int64_t>> shards = ranks_->ExchangeShardRows(
      step.shard_step, valid.ok() ? step.rows : 0, valid, step.configuration);
  if (!shards.ok()) return shards.status();
  for (int r = 0; r < static_cast<int>(shards->size()); ++r) {
    if (r < ranks_->rank()) step.first_row += (*shards)[r];
    step.batch += (*shards)[r];
    if ((*shards)[r] > 0) step.ranks_with_rows.push_back(r);
  }
  return absl::OkStatus();
}

DataParallelTrainer::StepResult DataParallelTrainer::ResultOf(const StepState& step) const {
  StepResult result;
  result.step = step_;
  result.samples = step.batch;
  result.loss = step.loss / static_cast<double>(step.batch);
  if (training_.classification) result.accuracy = step.correct / static_cast<double>(step.batch);
  result.reduced_bytes = step.reduced_bytes;
  for (size_t i = 0; i < step.slices.size(); ++i) {
    result.slices.push_back({step.slices[i], step.seconds[i], step.forward_seconds[i]});
  }
  return result;
}

absl::Status DataParallelTrainer::ValidateBatch(const std::vector<Tensor>& inputs,
                                                const Tensor& targets, int64_t* batch_rows,
                                                bool rows_may_be_none) const {
  if (inputs.size() != static_cast<size_t>(training_.num_model_inputs) || inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", training_.num_model_inputs, " inputs, received ", inputs.size()));
  }
  const int64_t batch = inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  *batch_rows = batch;
  if (batch < 0 || (batch == 0 && !rows_may_be_none)) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: the batch must have at least one row, received ",
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
  const DType target_dtype =
      training_.graph.values[training_.graph.inputs[inputs.size()]].type.dtype;
  if (targets.dtype() != target_dtype) {
    return absl::InvalidArgumentError(absl::StrCat("targets: dtype must be ",
                                                   DTypeName(target_dtype), ", received ",
                                                   DTypeName(targets.dtype())));
  }
  if (targets.shape().empty() || targets.shape()[0] != batch) {
    return absl::InvalidArgumentError(absl::StrCat("targets: dim 0 must be the batch size ", batch,
                                                   " of the inputs, received ",
                                                   ShapeToString(targets.shape())));
  }
  // Values that would turn the weights to NaN are refused before anything runs.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = training_.graph.values[training_.graph.inputs[i]].name;
    REPLICAD_RETURN_IF_ERROR(CheckFiniteValues(inputs[i], absl::StrCat("input '", name, "'")));
  }
  REPLICAD_RETURN_IF_ERROR(CheckFiniteValues(targets, "targets"));
  if (training_.classification) REPLICAD_RETURN_IF_ERROR(CheckProbabilityRows(targets, "targets"));
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::PlanSlices(StepState& step) {
  const std::vector<Tensor>& inputs = step.inputs;
  const Tensor& targets = step.targets;
  std::vector<BatchSlice>& slices = step.slices;
  std::vector<int>& ranks_with_rows = step.ranks_with_rows;
  if (step.shard_step > 0) {
    // The job's batch and this shard's place in it came from ExchangeShards.
    if (step.shard_step != step_ + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ranks sent their shards of step ", step.shard_step,
                       ", but the job's next step is ", step_ + 1));
    }
    slices = SplitBatch(step.rows, weights_);
  } else {
    // The job's split (over every rank's slots, rank by rank), and this
    // rank's part of it, on its own slot indices.
    // A part of rank 0's batch holds this rank's rows only, from part_first_row.
    const bool part = step.part_first_row >= 0;
    step.batch = part ? step.part_batch : step.rows;
    const int64_t offset = part ? step.part_first_row : 0;
    step.first_row = offset;
    const std::vector<BatchSlice> job_slices =
        SplitBatch(step.batch, ranks_ != nullptr ? ranks_->slot_weights() : weights_);
    int64_t local_rows = 0;
    for (const BatchSlice& slice : job_slices) {
      const int local = slice.slot - first_slot_;
      if (local >= 0 && local < static_cast<int>(slots_.size())) {
        slices.push_back(slice);
        slices.back().slot = local;
        slices.back().begin -= offset;
        slices.back().end -= offset;
        local_rows += slice.end - slice.begin;
      }
      const int rank = ranks_ != nullptr ? ranks_->slot_ranks()[slice.slot] : 0;
      if (ranks_with_rows.empty() || ranks_with_rows.back() != rank) {
        ranks_with_rows.push_back(rank);
      }
    }
    if (part && (local_rows != step.rows ||
                 (!slices.empty() && slices[0].begin + offset != step.part_first_row))) {
      return absl::InvalidArgumentError(
          absl::StrCat("this rank's part of a batch of ", step.batch, " rows is ", local_rows,
                       " rows from row ", slices.empty() ? 0 : slices[0].begin + offset,
                       ", received ", step.rows, " rows from row ", step.part_first_row));
    }
  }
  // Its first row's running statistics are the ones every slot keeps.
  step.runs_first_row = !slices.empty() && step.first_row + slices[0].begin == 0;
  // Plans first, on this thread: a bad shape fails before anything runs.
  std::vector<SlotPlan*>& plans = step.plans;
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
    absl::StatusOr<SlotPlan*> plan = PlanFor(slot, shapes);
    if (!plan.ok()) return plan.status();
    plans.push_back(*plan);
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::RunSlices(StepState& step) {
  const int64_t batch = step.batch;
  const float scale = step.scale;
  const std::vector<Tensor>& inputs = step.inputs;
  const Tensor& targets = step.targets;
  const std::vector<BatchSlice>& slices = step.slices;
  const std::vector<SlotPlan*>& plans = step.plans;
  // Forward and backward of every slice, concurrently on the slots; with
  // SyncBatchNorm they meet in the collective. GPU slots also reduce their
  // gradients, bucket by bucket while the backward pass goes on; every slot
  // takes part in that, with or without rows. With a parameter server a GPU
  // slot sends its gradients there as soon as its backward pass is done,
  // while the others may still compute (a CPU slot's go by the server's
  // stream when that is a GPU's, the only one that reaches its memory).
  std::vector<Buffer*> sends(slots_.size(), nullptr);
  if (server_reduction_ != nullptr) {
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (!InHostMemory(*slots_[s]->where.device)) sends[s] = server_reduction_->copies[s].get();
    }
  }
  BarrierCollective::Across across;
  if (ranks_ != nullptr) {
    across = [&](double* data, size_t count) {
      return ranks_->SumStatistics(step.ranks_with_rows, data, count);
    };
  }
  BarrierCollective collective(static_cast<int>(slices.size()), std::move(across));
  // One slice and no other rank: that slice's batch statistics are the
  // step's, and meeting nobody would cost a GPU slot a wait for its stream
  // at every BatchNormalization (53 a step in resnet50).
  BarrierCollective* const meeting =
      sync_batch_norm_ && (slices.size() > 1 || ranks_ != nullptr) ? &collective : nullptr;
  std::vector<RunContext> contexts(slices.size());
  std::vector<absl::Status> statuses(slots_.size());
  std::vector<double>& seconds = step.seconds;
  std::vector<double>& forward_seconds = step.forward_seconds;
  seconds.assign(slices.size(), 0.0);
  forward_seconds.assign(slices.size(), 0.0);
  std::vector<int> slice_of_slot(slots_.size(), -1);
  for (size_t i = 0; i < slices.size(); ++i) slice_of_slot[slices[i].slot] = static_cast<int>(i);
  const Node* backward = training_.graph.nodes.data() + training_.first_backward_node;
  const int first_gradient = 1 + (training_.classification ? 1 : 0);
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int i = slice_of_slot[s];
    if (i < 0 && all_reduce_ == nullptr) continue;
    if (i >= 0) {
      contexts[i] =
          RunContext{step_ + 1, seed_, step.first_row + slices[i].begin, batch, i, meeting};
    }
    Slot& slot = *slots_[s];
    slot.where.device->Enqueue([&, s, i] {
      const auto start = std::chrono::steady_clock::now();
      Device& device = *slot.where.device;
      // Buckets issued so far, and the gradients each still waits for.
      size_t next_bucket = 0;
      std::vector<int> waiting;
      for (const Bucket& bucket : buckets_) waiting.push_back(bucket.parameters);
      auto issue_ready_buckets = [&](bool contributes) {
        for (; next_bucket < buckets_.size() && (waiting[next_bucket] == 0 || !contributes);
             ++next_bucket) {
          const Bucket& bucket = buckets_[next_bucket];
          float* data = reinterpret_cast<float*>(static_cast<char*>(slot.gradient_arena->data()) +
                                                 bucket.offset);
          REPLICAD_RETURN_IF_ERROR(all_reduce_->AllReduce(
              static_cast<int>(s), data, bucket.bytes / sizeof(float), scale, contributes));
        }
        return absl::OkStatus();
      };
      absl::Status status;
      if (i >= 0) {
        const BatchSlice& slice = slices[i];
        ExecutionPlan* plan = plans[i]->plan.get();
        std::vector<const void*> in;
        if (InHostMemory(device)) {
          for (const Tensor& t : inputs) in.push_back(RowPointer(t, slice.begin));
          in.push_back(RowPointer(targets, slice.begin));
        } else {
          const std::vector<std::shared_ptr<Buffer>>& staged = plans[i]->inputs;
          for (size_t k = 0; k <= inputs.size() && status.ok(); ++k) {
            const Tensor& t = k < inputs.size() ? inputs[k] : targets;
            status = device.CopyOnStream(RowPointer(t, slice.begin), t.location(),
                                         staged[k]->data(), device.memory_location(),
                                         RowBytes(t) * static_cast<size_t>(slice.rows()));
            in.push_back(staged[k]->data());
          }
        }
        for (const Tensor& p : slot.parameters) in.push_back(p.raw_data());
        for (const Tensor& b : slot.buffers) in.push_back(b.raw_data());
        std::vector<void*> out{slot.loss_sum.raw_data()};
        if (training_.classification) out.push_back(slot.correct.raw_data());
        for (Tensor& g : slot.gradients) out.push_back(g.raw_data());
        for (Tensor& u : slot.buffer_updates) out.push_back(u.raw_data());
        if (status.ok()) {
          status = plan->RunSplit(
              contexts[i], in.data(), out.data(), backward, &forward_seconds[i], [&](int output) {
                const int p = output - first_gradient;
                if (all_reduce_ == nullptr || p < 0 || p >= static_cast<int>(bucket_of_.size())) {
                  return absl::OkStatus();
                }
                --waiting[bucket_of_[p]];
                return issue_ready_buckets(true);
              });
        }
        // The other slots may be waiting for this one in the collective.
        if (!status.ok()) collective.Abort();
        const MemoryLocation host{};
        if (status.ok()) {
          status = device.CopyOnStream(slot.loss_sum.raw_data(), device.memory_location(),
                                       &slot.loss_sum_host, host, sizeof(float));
        }
        if (status.ok() && training_.classification) {
          status = device.CopyOnStream(slot.correct.raw_data(), device.memory_location(),
                                       &slot.correct_host, host, sizeof(float));
        }
        if (status.ok() && sends[s] != nullptr) {
          status =
              device.CopyOnStream(slot.gradient_arena->data(), device.memory_location(),
                                  sends[s]->data(), sends[s]->location(), gradient_arena_bytes_);
        }
      }
      if (all_reduce_ != nullptr) {
        // Whatever happened, the other slots' reductions need this one's.
        absl::Status reduced = issue_ready_buckets(false);
        if (reduced.ok()) reduced = all_reduce_->Join(static_cast<int>(s));
        if (status.ok()) status = reduced;
      }
      absl::Status done = device.AwaitStream();
      statuses[s] = status.ok() ? done : status;
      if (i >= 0) seconds[i] = SecondsSince(start);
    });
  }
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  if (absl::Status s = collective.status(); !s.ok()) return s;
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::GatherGradients(StepState& step, bool* summed) {
  const std::vector<BatchSlice>& slices = step.slices;
  for (const BatchSlice& slice : slices) {
    step.loss += slots_[slice.slot]->loss_sum_host;
    step.correct += slots_[slice.slot]->correct_host;
  }
  // Where the reduction reads each participant's gradients: its own arena,
  // or the server's copy of it.
  std::vector<const void*>& sources = step.sources;
  for (const BatchSlice& slice : slices) {
    const Buffer* copy =
        server_reduction_ != nullptr ? server_reduction_->copies[slice.slot].get() : nullptr;
    sources.push_back(copy != nullptr ? copy->data() : slots_[slice.slot]->gradient_arena->data());
    if (all_reduce_ == nullptr) {
      step.reduced_bytes +=
          static_cast<int64_t>(copy != nullptr ? gradient_arena_bytes_ : gradient_bytes_);
    }
  }
  // The sum over slots in slot order: by the host (CPU slots, or a server
  // on the host); scaled below.
  SumOnHost(sources);
  // Running statistics every slot takes: the first row's slot's.
  std::vector<Tensor>& running = step.running;
  if (step.runs_first_row) running = slots_[slices[0].slot]->buffer_updates;
  if (ranks_ != nullptr && step.runs_first_row && !running.empty() &&
      !InHostMemory(*slots_[slices[0].slot]->where.device)) {
    // They cross the ranks from host memory.
    REPLICAD_ASSIGN_OR_RETURN(running, HostCopies(*slots_[slices[0].slot]->where.device, running));
  }
  if (ranks_ != nullptr) {
    // Then over the ranks, in rank order: the job's sums on every rank.
    RankPartial partial;
    partial.loss_sum = step.loss;
    partial.correct = step.correct;
    partial.gradients = std::move(reduced_);
    partial.buffers = std::move(running);
    *summed = true;
    absl::Status across = ranks_->SumStep(step_ + 1, &partial);
    reduced_ = std::move(partial.gradients);
    if (!across.ok()) {
      // Sized again for the next step (a failed sum may leave them empty).
      reduced_.clear();
      for (int v : training_.parameters) {
        reduced_.emplace_back(
            static_cast<size_t>(model_->graph().initializers.at(v).num_elements()));
      }
      return across;
    }
    step.loss = partial.loss_sum;
    step.correct = partial.correct;
    running = std::move(partial.buffers);
  }
  if (all_reduce_ != nullptr) {
    // NCCL reads whole buckets, padding included.
    for (const Bucket& bucket : buckets_) {
      step.reduced_bytes += static_cast<int64_t>(bucket.bytes * slices.size());
    }
  }
  return absl::OkStatus();
}

std::string DataParallelTrainer::ScaleAndCheckFinite(StepState& step) {
  if (!std::isfinite(step.loss)) {
    return absl::StrCat("the step's loss is ", step.loss,
                        " (not finite): its inputs overflow the model's float32 arithmetic");
  }
  // The host's sums over the global batch (GPU slots under allreduce
  // reduced on the devices, overlapped with the backward pass; a GPU
  // server scales with its kernels).
  for (size_t p = 0; p < reduced_.size(); ++p) {
    std::vector<float>& sum = reduced_[p];
    for (float& v : sum) v *= step.scale;
    // Where the host sums the gradients it can also check them (on GPU
    // reductions only the loss is checked).
    if (!std::all_of(sum.begin(), sum.end(), [](float v) { return std::isfinite(v); })) {
      const int value = training_.parameters[p];
      return absl::StrCat("the gradient of parameter '", training_.graph.values[value].name,
                          "' is not finite");
    }
  }
  return "";
}

std::string DataParallelTrainer::CheckUpdateStaysFinite(const StepState& step) {
  if (all_reduce_ != nullptr || (server_ != nullptr && step.server_sum != nullptr)) return "";
  Slot& applying = server_ != nullptr ? *server_ : *slots_.front();
  if (!InHostMemory(*applying.where.device)) return "";
  std::vector<float*> parameters;
  for (Tensor& p : applying.parameters) parameters.push_back(p.data<float>());
  std::vector<const float*> sums;
  for (const std::vector<float>& r : reduced_) sums.push_back(r.data());
  const std::optional<Optimizer::NonFiniteUpdate> bad =
      applying.optimizer->FirstNonFiniteUpdate(parameters, sums);
  if (!bad) return "";
  const OptimizerConfig& config = applying.optimizer->config();
  return absl::StrCat("the update would make element ", bad->element, " of parameter '",
                      training_.graph.values[training_.parameters[bad->parameter]].name, "' ",
                      bad->after, " (from ", bad->before, ", gradient ", bad->gradient,
                      ", learning_rate ", config.learning_rate, ")");
}

absl::Status DataParallelTrainer::SumOnServer(StepState& step) {
  if (server_ != nullptr && !InHostMemory(*server_->where.device)) {
    Device& server = *server_->where.device;
    ServerReduction& reduction = *server_reduction_;
    std::vector<std::pair<const void*, Buffer*>> uploads;
    for (const BatchSlice& slice : step.slices) {
      Slot& slot = *slots_[slice.slot];
      if (InHostMemory(*slot.where.device)) {
        uploads.emplace_back(slot.gradient_arena->data(), reduction.copies[slice.slot].get());
      }
    }
    absl::Status status;
    server.Enqueue([&] {
      for (const auto& [src, dst] : uploads) {
        status = server.CopyOnStream(src, MemoryLocation{}, dst->data(), dst->location(),
                                     gradient_arena_bytes_);
        if (!status.ok()) return;
      }
      status = reduction.Sum(server, step.sources, step.scale, &step.server_sum);
      if (status.ok()) status = server.AwaitStream();
    });
    absl::Status synced = server.Synchronize();
    if (!status.ok()) return status;
    if (!synced.ok()) return synced;
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::ApplyUpdate(StepState& step) {
  // allreduce: every slot applies the same update to its copy, concurrently
  // (from the host's sums, or its own on a GPU). ps: the server updates its
  // copy, then every slot takes it.
  std::vector<const float*> host_sums;
  for (const std::vector<float>& r : reduced_) host_sums.push_back(r.data());
  std::vector<absl::Status> updates(slots_.size() + 1);
  auto update = [&](Slot* s, std::vector<const float*> gradients, absl::Status* status) {
    s->where.device->Enqueue([s, gradients = std::move(gradients), status] {
      std::vector<float*> parameters;
      for (Tensor& p : s->parameters) parameters.push_back(p.data<float>());
      *status = s->optimizer->Step(parameters, gradients);
    });
  };
  if (server_ != nullptr) {
    Slot& server = *server_;
    Device& server_device = *server.where.device;
    update(&server, step.server_sum != nullptr ? ArenaGradients(step.server_sum) : host_sums,
           &updates.back());
    absl::Status synced = server_device.Synchronize();
    if (updates.back().ok()) updates.back() = synced;
    // A failed update is not broadcast: the slots keep agreeing.
    if (updates.back().ok()) {
      for (auto& slot : slots_) {
        Device& copying = CopyingDevice(*slot->where.device, server_device);
        for (size_t p = 0; p < slot->parameters.size(); ++p) {
          const Tensor& from = server.parameters[p];
          Tensor& to = slot->parameters[p];
          copying.EnqueueCopy(from.raw_data(), from.location(), to.raw_data(), to.location(),
                              to.byte_size());
        }
      }
    }
  } else {
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot* slot = slots_[s].get();
      update(slot,
             all_reduce_ != nullptr ? ArenaGradients(slot->gradient_arena->data()) : host_sums,
             &updates[s]);
    }
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    absl::Status synced = slots_[s]->where.device->Synchronize();
    if (updates[s].ok()) updates[s] = synced;
  }
  if (server_ != nullptr) {
    // The copies it made for CPU slots.
    absl::Status synced = server_->where.device->Synchronize();
    if (updates.back().ok()) updates.back() = synced;
  }
  for (const absl::Status& s : updates) {
    // A device failed mid-update: the slots' copies may now differ, which
    // the step count cannot express, so the error says so.
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("the optimizer update failed, so the replicas "
                                                 "may no longer agree: ",
                                                 s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::ShareRunningStatistics(StepState& step) {
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

int64_t DataParallelTrainer::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

absl::StatusOr<std::vector<Tensor>> DataParallelTrainer::SlotParameters(int slot) const {
  absl::MutexLock lock(&mu_);
  return HostCopies(*slots_[slot]->where.device, slots_[slot]->parameters);
}

absl::StatusOr<std::vector<Tensor>> DataParallelTrainer::SlotBuffers(int slot) const {
  absl::MutexLock lock(&mu_);
  return HostCopies(*slots_[slot]->where.device, slots_[slot]->buffers);
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> DataParallelTrainer::OptimizerState()
    const {
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

absl::StatusOr<std::shared_ptr<const Model>> DataParallelTrainer::CurrentModel() const {
  std::vector<Tensor> parameters, buffers;
  {
    absl::MutexLock lock(&mu_);  // One step's weights and statistics, together.
    REPLICAD_ASSIGN_OR_RETURN(parameters,
                              HostCopies(*slots_[0]->where.device, slots_[0]->parameters));
    REPLICAD_ASSIGN_OR_RETURN(buffers, HostCopies(*slots_[0]->where.device, slots_[0]->buffers));
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
