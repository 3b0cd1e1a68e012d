#include "core/train/data_parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <tuple>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/device/run_context.h"
#include "core/train/barrier_collective.h"
#include "core/train/data_parallel_trainer_impl.h"
#include "core/train/finite_values.h"
#include "core/train/gradient_reduction.h"
#include "core/train/loss_scaler.h"
#include "core/train/rank_coordinator.h"
#include "core/train/slice_inputs.h"
#include "core/train/step_state.h"
#include "core/train/training_batch.h"
#include "core/train/training_slot.h"

namespace replicad {

DataParallelTrainer::Impl::Impl(std::shared_ptr<const Model> model, TrainingGraph training,
                                const TrainerOptions& options)
    : model_(std::move(model)),
      training_(std::move(training)),
      sync_batch_norm_(options.sync_batch_norm),
      seed_(options.seed),
      non_finite_steps_(options.non_finite_steps),
      layout_(GradientLayout::For(training_, model_->graph())) {}

DataParallelTrainer::Impl::~Impl() {
  absl::MutexLock lock(&mu_);
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
}

absl::StatusOr<std::unique_ptr<DataParallelTrainer::Impl>> DataParallelTrainer::Impl::Create(
    std::shared_ptr<const Model> model, std::vector<TrainerSlot> slots,
    const TrainerOptions& options, TrainerReduction reduction) {
  if (slots.empty()) return absl::InvalidArgumentError("training needs at least one slot");
  REPLICAD_RETURN_IF_ERROR(CheckGradientReduction(slots, reduction, reduction.ranks != nullptr));
  if (options.precision == ComputePrecision::kFloat16)
    REPLICAD_RETURN_IF_ERROR(CheckFloat16Reduction(reduction));
  REPLICAD_RETURN_IF_ERROR(ValidateOptimizerConfig(options.optimizer));
  REPLICAD_ASSIGN_OR_RETURN(TrainingGraph training,
                            BuildTrainingGraph(model->graph(), options.loss, options.precision));
  std::unique_ptr<Impl> impl(new Impl(std::move(model), std::move(training), options));
  const Graph& source = impl->model_->graph();
  if (reduction.ranks != nullptr) {
    REPLICAD_ASSIGN_OR_RETURN(
        impl->ranks_,
        RankCoordinator::Create(std::move(reduction.ranks), slots.size(), impl->training_, source));
  }
  absl::MutexLock lock(&impl->mu_);
  std::vector<TrainingSlot*> made;
  for (TrainerSlot& where : slots) {
    impl->weights_.push_back(where.slot.weight);
    REPLICAD_ASSIGN_OR_RETURN(
        std::unique_ptr<TrainingSlot> slot,
        CreateTrainingSlot(std::move(where), impl->training_, source, impl->layout_));
    made.push_back(slot.get());
    impl->slots_.push_back(std::move(slot));
  }
  for (int v : impl->training_.buffers) {
    impl->buffer_staging_.push_back(
        Tensor::Host(DType::kFloat32, source.initializers.at(v).shape()));
  }
  if (options.precision == ComputePrecision::kFloat16) {
    impl->loss_scaler_.emplace(options.loss_scaling);
  }
  std::optional<SlotAllReducePeers> peers;
  if (impl->ranks_ != nullptr) peers = impl->ranks_->Peers();
  REPLICAD_ASSIGN_OR_RETURN(
      impl->reduction_,
      CreateGradientReduction(std::move(made), &impl->layout_, impl->training_, source,
                              options.optimizer, reduction, peers ? &*peers : nullptr));
  return impl;
}

absl::StatusOr<SlotPlan*> DataParallelTrainer::Impl::PlanFor(TrainingSlot& slot,
                                                             const std::vector<Shape>& shapes) {
  auto it = slot.plans.find(shapes);
  if (it != slot.plans.end()) return &it->second;
  Device& device = *slot.where.device;
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ExecutionPlan> plan,
                            ExecutionPlan::Create(training_.graph, slot.constants, device, shapes));
  SlotPlan entry;
  if (!InHostMemory(device)) {
    // The slice's inputs and targets come in through these.
    for (int i = 0; i <= training_.num_model_inputs; ++i) {
      REPLICAD_ASSIGN_OR_RETURN(
          std::shared_ptr<Buffer> buffer,
          device.Allocate(std::max<size_t>(ByteSize(plan->input_types()[i]), 1)));
      entry.inputs.push_back(std::move(buffer));
    }
    if (training_.loss_scale_input >= 0) {
      REPLICAD_ASSIGN_OR_RETURN(entry.loss_scale, device.Allocate(sizeof(float)));
    }
  }
  entry.plan = std::move(plan);
  return &slot.plans.emplace(shapes, std::move(entry)).first->second;
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::Impl::StepGiven(
    const std::vector<Tensor>& inputs, const Tensor& targets, const StepMode& mode) {
  absl::MutexLock lock(&mu_);
  if (ranks_ == nullptr && !std::holds_alternative<WholeBatch>(mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        std::holds_alternative<Shard>(mode) ? "a shard of a step" : "a rank's rows of a step",
        " needs a job of several ranks (mpirun, srun); this process trains alone: "
        "send the whole batch"));
  }
  StepProgress progress;
  absl::StatusOr<StepResult> result = StepLocked(inputs, targets, mode, &progress);
  if (ranks_ != nullptr && progress.ready && !progress.summed) {
    absl::Status failed = ranks_->SumFailedStep(step_ + 1, result.status());
    if (result.ok()) return failed;
  }
  return result;
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::Impl::StepLocked(
    const std::vector<Tensor>& inputs, const Tensor& targets, const StepMode& mode,
    StepProgress* progress) {
  StepState step(inputs, targets, mode);
  // A trainer alone uploads its caller's next batch while this one computes.
  if (ranks_ == nullptr && std::holds_alternative<WholeBatch>(mode)) step.upcoming = upcoming_;
  absl::Status ready =
      ValidateTrainingBatch(training_, inputs, targets, &step.rows,
                            /*rows_may_be_none=*/std::holds_alternative<RankPart>(mode));
  if (const Shard* shard = std::get_if<Shard>(&mode)) {
    // The job's batch is every rank's shard: a failure here (this rank's
    // or another's) ends the step on every rank alike.
    REPLICAD_ASSIGN_OR_RETURN(RankCoordinator::ShardPlace place,
                              ranks_->ExchangeShards(*shard, step.rows, ready));
    step.batch = place.batch;
    step.first_row = place.first_row;
    step.ranks_with_rows = std::move(place.ranks_with_rows);
  }
  std::optional<absl::MutexLock> one_device_step;
  if (absl::Mutex* mu = reduction_->step_mutex(); mu != nullptr) one_device_step.emplace(mu);
  if (ready.ok()) ready = PlanSlices(step);
  // Once here rather than in every slot's loss kernel, which on a GPU would
  // wait for its stream between the forward and the backward pass.
  if (ready.ok() && !step.plans.empty()) {
    ready = CheckClassLabelsOnHost(training_, step.plans[0]->plan->value_types(), step.targets,
                                   step.first_row, &step.targets_checked);
  }
  if (ranks_ != nullptr) {
    // Every rank ready and alike, or the step ends here on every rank:
    // past this point the ranks wait for each other (statistics, NCCL, sums).
    REPLICAD_RETURN_IF_ERROR(ranks_->AwaitReady(ready, reduction_->kind(), step_));
    progress->ready = true;
  }
  REPLICAD_RETURN_IF_ERROR(ready);
  if (loss_scaler_.has_value()) step.loss_scale = loss_scaler_->scale();
  // The loss scale is undone with the mean's 1 / batch.
  step.scale = 1.0f / (static_cast<float>(step.batch) * step.loss_scale);
  REPLICAD_RETURN_IF_ERROR(RunSlices(step));
  const auto reduce_start = std::chrono::steady_clock::now();
  REPLICAD_RETURN_IF_ERROR(GatherGradients(step, &progress->summed));
  // Finite inputs can still overflow float32 inside the model (inputs of
  // 1e30), and float16 far sooner. Nothing is applied yet: the weights, the
  // optimizer's state, the running statistics and the step count stay as
  // they were.
  std::string why = ScaleAndCheckFinite(step);
  if (why.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(const std::optional<size_t> bad,
                              reduction_->FirstNonFiniteDeviceSum());
    if (bad.has_value()) why = NonFiniteGradientReason(training_, *bad);
  }
  const bool overflowed = !why.empty() && loss_scaler_.has_value();
  if (loss_scaler_.has_value()) {
    loss_scaler_->Update(why.empty());
    if (overflowed) {
      absl::StrAppend(&why, " at loss scale ", step.loss_scale, " (float16 overflowed); the next ",
                      "step's scale is ", loss_scaler_->scale());
    }
  }
  if (why.empty()) why = CheckUpdateStaysFinite();
  if (why.empty()) {
    REPLICAD_ASSIGN_OR_RETURN(const std::optional<Optimizer::NonFiniteUpdate> bad,
                              reduction_->FirstNonFiniteDeviceUpdate());
    if (bad.has_value()) why = NonFiniteUpdateReason(training_, *reduction_->optimizers()[0], *bad);
  }
  if (!why.empty()) {
    // Skipped or refused, a step that is not applied answers the same
    // reason; an fp16 overflow is skipped, as GradScaler skips it.
    if (non_finite_steps_ == TrainerOptions::NonFiniteSteps::kRefuse && !overflowed) {
      return StepNotApplied(why);
    }
    StepResult skipped = ResultOf(step);
    skipped.step = step_;
    skipped.skipped = std::move(why);
    return skipped;
  }
  REPLICAD_RETURN_IF_ERROR(reduction_->SumOnDevices(step.slices, step.scale));
  const double reduce_seconds = SecondsSince(reduce_start);
  const auto optimizer_start = std::chrono::steady_clock::now();
  REPLICAD_RETURN_IF_ERROR(reduction_->ApplyUpdate());
  const double optimizer_seconds = SecondsSince(optimizer_start);
  REPLICAD_RETURN_IF_ERROR(ShareRunningStatistics(step));
  ++step_;
  StepResult result = ResultOf(step);
  result.reduce_seconds = reduce_seconds;
  result.optimizer_seconds = optimizer_seconds;
  if (ranks_ != nullptr && !std::holds_alternative<Shard>(step.mode)) {
    ShareSliceReports(step, &result);
  }
  return result;
}

void DataParallelTrainer::Impl::ShareSliceReports(const StepState& step, StepResult* result) {
  std::vector<RankSlice> mine;
  for (const SliceResult& slice : result->slices) {
    const SlotAssignment& slot = slots_[slice.slice.slot]->where.slot;
    mine.push_back(RankSlice{result->rank, slot.name, DeviceIdToString(slot.device),
                             step.first_row + slice.slice.begin, step.first_row + slice.slice.end,
                             slice.compute_seconds});
  }
  absl::StatusOr<std::vector<RankSlice>> every = GatherSlices(ranks_->ranks(), mine);
  // The step stands on every rank whatever happens here: only the report is lost.
  if (!every.ok())
    return LogWarning(
        absl::StrCat("step ", result->step, ": no slices reported: ", every.status().message()));
  for (RankSlice& slice : *every) {
    if (slice.rank != result->rank) result->other_ranks.push_back(std::move(slice));
  }
}

DataParallelTrainer::StepResult DataParallelTrainer::Impl::ResultOf(const StepState& step) const {
  StepResult result;
  result.step = step_;
  result.samples = step.batch;
  result.loss = step.loss / static_cast<double>(step.batch);
  if (training_.classification) result.accuracy = step.correct / static_cast<double>(step.batch);
  result.reduced_bytes = step.reduced_bytes;
  result.rank = ranks_ != nullptr ? ranks_->ranks().rank() : 0;
  if (loss_scaler_.has_value()) result.loss_scale = step.loss_scale;
  for (size_t i = 0; i < step.slices.size(); ++i) {
    result.slices.push_back(
        {step.slices[i], step.seconds[i], step.forward_seconds[i], step.prefetched[i] != 0});
  }
  return result;
}

absl::Status DataParallelTrainer::Impl::SplitRows(StepState& step) {
  std::vector<BatchSlice>& slices = step.slices;
  if (const Shard* shard = std::get_if<Shard>(&step.mode)) {
    // The job's batch and this shard's place in it came from ExchangeShards.
    if (shard->step != step_ + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ranks sent their shards of step ", shard->step,
                       ", but the job's next step is ", step_ + 1));
    }
    slices = SplitBatch(step.rows, weights_);
    return absl::OkStatus();
  }
  // The job's split (over every rank's slots, rank by rank), and this
  // rank's part of it, on its own slot indices. A part of rank 0's batch
  // holds this rank's rows only, from its first row.
  const RankPart* part = std::get_if<RankPart>(&step.mode);
  step.batch = part != nullptr ? part->batch : step.rows;
  const int64_t offset = part != nullptr ? part->first_row : 0;
  step.first_row = offset;
  const int first_slot = ranks_ != nullptr ? ranks_->first_slot() : 0;
  const std::vector<BatchSlice> job_slices =
      SplitBatch(step.batch, ranks_ != nullptr ? ranks_->ranks().slot_weights() : weights_);
  int64_t local_rows = 0;
  for (const BatchSlice& slice : job_slices) {
    const int local = slice.slot - first_slot;
    if (local >= 0 && local < static_cast<int>(slots_.size())) {
      slices.push_back(slice);
      slices.back().slot = local;
      slices.back().begin -= offset;
      slices.back().end -= offset;
      local_rows += slice.end - slice.begin;
    }
    const int rank = ranks_ != nullptr ? ranks_->ranks().slot_ranks()[slice.slot] : 0;
    if (step.ranks_with_rows.empty() || step.ranks_with_rows.back() != rank) {
      step.ranks_with_rows.push_back(rank);
    }
  }
  if (part != nullptr && (local_rows != step.rows ||
                          (!slices.empty() && slices[0].begin + offset != part->first_row))) {
    return absl::InvalidArgumentError(
        absl::StrCat("this rank's part of a batch of ", step.batch, " rows is ", local_rows,
                     " rows from row ", slices.empty() ? 0 : slices[0].begin + offset,
                     ", received ", step.rows, " rows from row ", part->first_row));
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::Impl::PlanSlices(StepState& step) {
  REPLICAD_RETURN_IF_ERROR(SplitRows(step));
  const std::vector<BatchSlice>& slices = step.slices;
  // Its first row's running statistics are the ones every slot keeps.
  step.runs_first_row = !slices.empty() && step.first_row + slices[0].begin == 0;
  // Plans first, on this thread: a bad shape fails before anything runs.
  for (const BatchSlice& slice : slices) {
    TrainingSlot& slot = *slots_[slice.slot];
    std::vector<Shape> shapes;
    for (const Tensor& t : step.inputs) {
      Shape s = t.shape();
      s[0] = slice.rows();
      shapes.push_back(std::move(s));
    }
    Shape target_shape = step.targets.shape();
    target_shape[0] = slice.rows();
    shapes.push_back(std::move(target_shape));
    for (const Tensor& p : slot.parameters) shapes.push_back(p.shape());
    for (const Tensor& b : slot.buffers) shapes.push_back(b.shape());
    if (training_.loss_scale_input >= 0) shapes.push_back(Shape{});
    REPLICAD_ASSIGN_OR_RETURN(SlotPlan * plan, PlanFor(slot, shapes));
    step.plans.push_back(plan);
  }
  return absl::OkStatus();
}

absl::Status DataParallelTrainer::Impl::RunSlices(StepState& step) {
  const std::vector<BatchSlice>& slices = step.slices;
  // Forward and backward of every slice, concurrently on the slots; with
  // SyncBatchNorm they meet in the collective.
  BarrierCollective::Across across;
  if (ranks_ != nullptr) {
    across = [&](double* data, size_t count) {
      return ranks_->ranks().SumStatistics(step.ranks_with_rows, data, count);
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
  std::vector<std::unique_ptr<SlotReducer>> reducers(slots_.size());
  step.seconds.assign(slices.size(), 0.0);
  step.forward_seconds.assign(slices.size(), 0.0);
  step.prefetched.assign(slices.size(), 0);
  std::vector<int> slice_of_slot(slots_.size(), -1);
  for (size_t i = 0; i < slices.size(); ++i) slice_of_slot[slices[i].slot] = static_cast<int>(i);
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int i = slice_of_slot[s];
    TrainingSlot& slot = *slots_[s];
    // A device reduction needs every slot, with or without rows; a slot
    // without either uploads the next rows meanwhile.
    if (i < 0 && !reduction_->every_slot_runs()) {
      if (step.upcoming != nullptr) {
        slot.where.device->Enqueue([&, s] { UploadUpcoming(step, static_cast<int>(s), slot); });
      }
      continue;
    }
    if (i >= 0) {
      RunContext& context = contexts[i];
      context.step = step_ + 1;
      context.seed = seed_;
      context.first_row = step.first_row + slices[i].begin;
      context.global_rows = step.batch;
      context.participant = i;
      context.collective = meeting;
      context.targets_checked = step.targets_checked;
    }
    reducers[s] = reduction_->ForSlot(static_cast<int>(s), step.scale);
    slot.where.device->Enqueue([&, s, i] {
      const auto start = std::chrono::steady_clock::now();
      absl::Status status;
      if (i >= 0) status = RunSlice(step, i, slot, contexts[i], collective, *reducers[s]);
      // Whatever happened, the other slots' reductions need this one's.
      absl::Status finished = reducers[s]->Finish();
      if (status.ok()) status = finished;
      // Without rows, its reduction issued: the next rows meanwhile.
      if (i < 0) UploadUpcoming(step, static_cast<int>(s), slot);
      absl::Status done = slot.where.device->AwaitStream();
      statuses[s] = status.ok() ? done : status;
      if (i >= 0) step.seconds[i] = SecondsSince(start);
    });
  }
  for (auto& slot : slots_) (void)slot->where.device->Synchronize();
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return collective.status();
}

absl::Status DataParallelTrainer::Impl::RunSlice(StepState& step, int i, TrainingSlot& slot,
                                                 const RunContext& context,
                                                 BarrierCollective& collective,
                                                 SlotReducer& reducer) {
  Device& device = *slot.where.device;
  std::vector<const void*> in;
  bool prefetched = false;
  absl::Status status = SliceInputs(training_, step, i, slot, &in, &prefetched);
  step.prefetched[i] = prefetched ? 1 : 0;
  std::vector<void*> out{slot.loss_sum.raw_data()};
  if (training_.classification) out.push_back(slot.correct.raw_data());
  for (Tensor& g : slot.gradients) out.push_back(g.raw_data());
  for (Tensor& u : slot.buffer_updates) out.push_back(u.raw_data());
  const Node* backward = training_.graph.nodes.data() + training_.first_backward_node;
  const int first_gradient = 1 + (training_.classification ? 1 : 0);
  if (status.ok()) {
    status = step.plans[i]->plan->RunSplit(
        context, in.data(), out.data(), backward, &step.forward_seconds[i],
        [&](int output) { return reducer.GradientWritten(output - first_gradient); });
  }
  // Issued, not finished: the next batch's copies run beside it.
  if (status.ok()) UploadUpcoming(step, step.slices[i].slot, slot);
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
  if (status.ok()) status = reducer.SliceDone();
  return status;
}

namespace {

// Rows of an upcoming batch whose tensors agree on them (Step checks the
// rest once it is stepped); 0 when they do not.
int64_t RowsOfUpcoming(const UpcomingBatch& batch) {
  if (batch.inputs.empty() || batch.targets.shape().empty()) return 0;
  const int64_t rows = batch.targets.shape()[0];
  for (const Tensor& t : batch.inputs) {
    if (t.shape().empty() || t.shape()[0] != rows || t.location().kind != MemoryKind::kHost) {
      return 0;
    }
  }
  return batch.targets.location().kind == MemoryKind::kHost ? rows : 0;
}

}  // namespace

void DataParallelTrainer::Impl::UploadUpcoming(const StepState& step, int slot_index,
                                               TrainingSlot& slot) {
  if (step.upcoming == nullptr || InHostMemory(*slot.where.device)) return;
  std::shared_ptr<const UpcomingBatch> next = step.upcoming->Next();
  if (next == nullptr || next->Is(step.inputs, step.targets)) return;
  const int64_t rows = RowsOfUpcoming(*next);
  if (rows <= 0 || next->inputs.size() != static_cast<size_t>(training_.num_model_inputs)) return;
  for (const BatchSlice& slice : SplitBatch(rows, weights_)) {
    if (slice.slot != slot_index || slice.rows() == 0) continue;
    // A copy that cannot be issued leaves the next step to copy as ever,
    // and to meet the device's error itself.
    (void)slot.prefetch.Upload(*slot.where.device, std::move(next), slice);
    return;
  }
}

absl::Status DataParallelTrainer::Impl::GatherGradients(StepState& step, bool* summed) {
  const std::vector<BatchSlice>& slices = step.slices;
  for (const BatchSlice& slice : slices) {
    step.loss += slots_[slice.slot]->loss_sum_host;
    step.correct += slots_[slice.slot]->correct_host;
  }
  reduction_->Gather(slices, &step.reduced_bytes);
  // Running statistics every slot takes: the first row's slot's.
  std::vector<Tensor>& running = step.running;
  if (step.runs_first_row) running = slots_[slices[0].slot]->buffer_updates;
  if (ranks_ == nullptr) return absl::OkStatus();
  if (step.runs_first_row && !running.empty() &&
      !InHostMemory(*slots_[slices[0].slot]->where.device)) {
    // They cross the ranks from host memory.
    REPLICAD_ASSIGN_OR_RETURN(running, HostCopies(*slots_[slices[0].slot]->where.device, running));
  }
  *summed = true;
  return ranks_->SumStep(step_ + 1, &step.loss, &step.correct, reduction_->host_sums(), &running,
                         layout_.sizes);
}

// The contract's side: each call is the Impl's.

DataParallelTrainer::DataParallelTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DataParallelTrainer::~DataParallelTrainer() = default;

absl::StatusOr<std::unique_ptr<DataParallelTrainer>> DataParallelTrainer::Create(
    std::shared_ptr<const Model> model, std::vector<TrainerSlot> slots,
    const TrainerOptions& options, TrainerReduction reduction) {
  REPLICAD_ASSIGN_OR_RETURN(
      std::unique_ptr<Impl> impl,
      Impl::Create(std::move(model), std::move(slots), options, std::move(reduction)));
  return std::unique_ptr<DataParallelTrainer>(new DataParallelTrainer(std::move(impl)));
}

void DataParallelTrainer::ExpectBatchesFrom(std::shared_ptr<const UpcomingBatches> upcoming) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->upcoming_ = std::move(upcoming);
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::Step(
    const std::vector<Tensor>& inputs, const Tensor& targets) {
  return impl_->StepGiven(inputs, targets, WholeBatch{});
}

absl::Status DataParallelTrainer::Validate(const std::vector<Tensor>& inputs,
                                           const Tensor& targets) const {
  int64_t rows = 0;
  return ValidateTrainingBatch(impl_->training_, inputs, targets, &rows);
}

DataParallelTrainer::RowRange DataParallelTrainer::RowsOfRank(int64_t batch, int rank) const {
  RowRange rows;
  if (impl_->ranks_ == nullptr) return rows;
  std::tie(rows.first, rows.end) = impl_->ranks_->RowsOfRank(batch, rank);
  return rows;
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepRows(
    int64_t first_row, int64_t batch, const std::vector<Tensor>& inputs, const Tensor& targets) {
  return impl_->StepGiven(inputs, targets, RankPart{std::max<int64_t>(first_row, 0), batch});
}

absl::StatusOr<DataParallelTrainer::StepResult> DataParallelTrainer::StepShard(
    int64_t step, uint64_t configuration, const std::vector<Tensor>& inputs,
    const Tensor& targets) {
  return impl_->StepGiven(inputs, targets, Shard{std::max<int64_t>(step, 1), configuration});
}

int64_t DataParallelTrainer::step() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->step_;
}

const TrainingGraph& DataParallelTrainer::training_graph() const { return impl_->training_; }

const Model& DataParallelTrainer::model() const { return *impl_->model_; }

absl::StatusOr<std::vector<Tensor>> DataParallelTrainer::SlotParameters(int slot) const {
  absl::MutexLock lock(&impl_->mu_);
  const TrainingSlot& copy = *impl_->slots_[slot];
  return HostCopies(*copy.where.device, copy.parameters);
}

absl::StatusOr<std::vector<Tensor>> DataParallelTrainer::SlotBuffers(int slot) const {
  absl::MutexLock lock(&impl_->mu_);
  const TrainingSlot& copy = *impl_->slots_[slot];
  return HostCopies(*copy.where.device, copy.buffers);
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> DataParallelTrainer::OptimizerState()
    const {
  absl::MutexLock lock(&impl_->mu_);
  using State = std::vector<std::pair<std::string, Tensor>>;
  REPLICAD_ASSIGN_OR_RETURN(State state, impl_->reduction_->optimizers().front()->State());
  if (impl_->loss_scaler_.has_value()) impl_->loss_scaler_->AppendState(&state);
  return state;
}

absl::Status DataParallelTrainer::Resume(int64_t step,
                                         const std::vector<std::pair<std::string, Tensor>>& state) {
  absl::MutexLock lock(&impl_->mu_);
  // fp16's loss scale rides along with the optimizer's own entries.
  std::optional<LossScaler> restored = impl_->loss_scaler_;
  if (restored.has_value()) REPLICAD_RETURN_IF_ERROR(restored->Restore(state));
  const std::vector<std::pair<std::string, Tensor>> optimizer_state = WithoutLossScale(state);
  if (!optimizer_state.empty()) {
    // Restore validates before it changes anything, so a bad state fails on
    // the first optimizer and leaves every one as it was.
    for (Optimizer* optimizer : impl_->reduction_->optimizers()) {
      REPLICAD_RETURN_IF_ERROR(optimizer->Restore(step, optimizer_state));
    }
  }
  impl_->loss_scaler_ = restored;
  impl_->step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> DataParallelTrainer::CurrentModel() const {
  std::vector<Tensor> parameters, buffers;
  {
    absl::MutexLock lock(&impl_->mu_);  // One step's weights and statistics, together.
    const TrainingSlot& first = *impl_->slots_[0];
    REPLICAD_ASSIGN_OR_RETURN(parameters, HostCopies(*first.where.device, first.parameters));
    REPLICAD_ASSIGN_OR_RETURN(buffers, HostCopies(*first.where.device, first.buffers));
  }
  const TrainingGraph& training = impl_->training_;
  Graph graph = impl_->model_->graph();
  for (size_t p = 0; p < parameters.size(); ++p) {
    graph.initializers.insert_or_assign(training.parameters[p], std::move(parameters[p]));
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    graph.initializers.insert_or_assign(training.buffers[b], std::move(buffers[b]));
  }
  const Model& model = *impl_->model_;
  return std::make_shared<const Model>(model.name(), model.source(), std::move(graph));
}

}  // namespace replicad
