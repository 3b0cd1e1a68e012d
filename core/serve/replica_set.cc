#include "core/serve/replica_set.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"
#include "core/base/status_macros.h"

namespace replicad {

// The shared state of one Run while its slices run.
struct ReplicaSetRun {
  std::vector<Tensor> inputs;
  std::vector<BatchSlice> slices;
  std::vector<Replica::SlicePlan> plans;  // Per slice.
  std::vector<void*> outputs;             // The sink's output buffers, model order.
  // With a GPU merge device: where slices write their rank >= 1 outputs
  // (null for rank 0), copied to `outputs` once every slice is in.
  Device* merge_stream = nullptr;
  std::vector<std::shared_ptr<Buffer>> merged;
  std::vector<size_t> merged_bytes;  // Their outputs' sizes (a buffer holds at least 1 byte).
  std::vector<bool> scalar;          // Per output: rank 0, merged by mean.
  std::vector<std::vector<float>> partial_scalars;  // [slice][output].
  std::vector<absl::Status> statuses;               // Per slice.
  // Non-null when the plan is data-dependent (ExecutionPlan::RunToHost):
  // the outputs' shapes are known only once the slice ran, which then asks
  // the sink for their memory itself.
  OutputSink* sink_after_run = nullptr;
  bool widened = false;  // Its one slice runs on the set's wide replica.
  std::atomic<int> remaining{0};
  ReplicaSet::Done done;
};

namespace {

// Once every slice is in and the outputs are in the sink.
void Finish(ReplicaSetRun& state) {
  int64_t rows = 0;
  for (const BatchSlice& slice : state.slices) rows += slice.rows();
  for (size_t j = 0; j < state.outputs.size(); ++j) {
    if (!state.scalar[j]) continue;
    // Sample-weighted mean: equals the one-slot value of a per-sample mean
    // (e.g. a loss) for any split.
    double sum = 0;
    for (size_t s = 0; s < state.slices.size(); ++s) {
      sum += static_cast<double>(state.partial_scalars[s][j]) *
             static_cast<double>(state.slices[s].rows());
    }
    *static_cast<float*>(state.outputs[j]) = static_cast<float>(sum / static_cast<double>(rows));
  }
  std::move(state.done)(absl::OkStatus(), state.slices);
}

// Called by the last slice to finish: the first failure, or the merged
// outputs brought from the merge GPU into the sink (on its stream), then Finish.
void SlicesDone(std::shared_ptr<ReplicaSetRun> state) {
  for (const absl::Status& s : state->statuses) {
    if (!s.ok()) {
      std::move(state->done)(s, state->slices);
      return;
    }
  }
  if (state->merge_stream == nullptr) {
    Finish(*state);
    return;
  }
  state->merge_stream->Enqueue([state] {
    Device& merge = *state->merge_stream;
    absl::Status status;
    for (size_t j = 0; j < state->merged.size() && status.ok(); ++j) {
      if (state->merged[j] == nullptr) continue;
      status = merge.CopyOnStream(state->merged[j]->data(), merge.memory_location(),
                                  state->outputs[j], MemoryLocation{}, state->merged_bytes[j]);
    }
    absl::Status done = merge.AwaitStream();
    if (!status.ok() || !done.ok()) {
      std::move(state->done)(status.ok() ? done : status, state->slices);
      return;
    }
    Finish(*state);
  });
}

// The input shapes of `slice` of a batch of `inputs`.
std::vector<Shape> SliceShapes(const std::vector<Tensor>& inputs, const BatchSlice& slice) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) {
    Shape s = t.shape();
    s[0] = slice.rows();
    shapes.push_back(std::move(s));
  }
  return shapes;
}

// The set's cores for one slice, taken on its stream thread: shared by a
// slot's slice, whole by a wide one (ReplicaSet::Create). Takes nothing
// without a wide replica (`cores` null).
class CoresHeld {
 public:
  CoresHeld(absl::Mutex* cores, bool whole) : cores_(cores), whole_(whole) {
    if (cores_ == nullptr) return;
    if (whole_) {
      cores_->WriterLock();
    } else {
      cores_->ReaderLock();
    }
  }
  ~CoresHeld() { Release(); }
  void Release() {
    if (cores_ == nullptr) return;
    if (whole_) {
      cores_->WriterUnlock();
    } else {
      cores_->ReaderUnlock();
    }
    cores_ = nullptr;
  }
  CoresHeld(const CoresHeld&) = delete;
  CoresHeld& operator=(const CoresHeld&) = delete;

 private:
  absl::Mutex* cores_;  // Null once released.
  const bool whole_;
};

// The shapes whose wide plans failed are remembered so that their builds are
// not tried again on every request; a client sending ever new shapes cannot
// grow the record past this (it then starts over).
constexpr size_t kMaxWideRefusals = 256;

// Runs a data-dependent slice (the whole batch) and copies its outputs into
// memory the sink gives for the shapes they came out with.
absl::Status RunToSink(Replica& replica, const Replica::SlicePlan& plan, const void* const* inputs,
                       OutputSink& sink, const ExecutionPlan::Proceed* proceed) {
  std::vector<Tensor> outputs;
  REPLICAD_RETURN_IF_ERROR(replica.RunSliceToHost(plan, inputs, &outputs, proceed));
  for (size_t j = 0; j < outputs.size(); ++j) {
    REPLICAD_ASSIGN_OR_RETURN(void* to, sink.Allocate(static_cast<int>(j), outputs[j].type()));
    if (outputs[j].byte_size() > 0) {
      std::memcpy(to, outputs[j].raw_data(), outputs[j].byte_size());
    }
  }
  return absl::OkStatus();
}

}  // namespace

ReplicaSet::ReplicaSet(std::shared_ptr<const Model> model,
                       std::vector<std::unique_ptr<Replica>> replicas, const Options& options,
                       std::unique_ptr<Device> merge_stream, std::unique_ptr<Replica> wide)
    : model_(std::move(model)),
      replicas_(std::move(replicas)),
      options_(options),
      merge_stream_(std::move(merge_stream)),
      wide_(std::move(wide)) {}

absl::StatusOr<std::unique_ptr<ReplicaSet>> ReplicaSet::Create(
    std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
    const Options& options, std::unique_ptr<Device> merge_stream, std::unique_ptr<Replica> wide) {
  if (replicas.empty()) return absl::InvalidArgumentError("a replica set needs at least one slot");
  if (wide != nullptr) {
    bool in_host_memory = wide->device().memory_location().kind == MemoryKind::kHost;
    for (const auto& r : replicas) {
      in_host_memory = in_host_memory && r->device().memory_location().kind == MemoryKind::kHost;
    }
    if (replicas.size() < 2 || !in_host_memory) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a wide replica lends idle slots' cores: it needs two or more slots, each and itself "
          "in host memory; received ",
          replicas.size(), " slots, on ", DeviceIdToString(replicas[0]->device().info().id),
          " and more, and a wide replica on ", DeviceIdToString(wide->device().info().id)));
    }
  }
  if (options.transfer_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_chunks must be >= 1, received ", options.transfer_chunks));
  }
  const std::string merge = DeviceIdToString(options.merge_device);
  if (options.merge_device.kind == DeviceKind::kCpu) {
    merge_stream.reset();
  } else {
    if (merge_stream == nullptr || !(merge_stream->info().id == options.merge_device)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merge device ", merge, ": needs a stream on ", merge, ", received ",
          merge_stream == nullptr ? "none" : DeviceIdToString(merge_stream->info().id)));
    }
    for (const auto& r : replicas) {
      if (r->device().memory_location().kind == MemoryKind::kHost) {
        return absl::InvalidArgumentError(absl::StrCat(
            "merge device ", merge, ": slot ", r->slot().name, " is on ",
            DeviceIdToString(r->slot().device),
            ", which cannot write GPU memory; merging on a GPU needs every slot on a GPU "
            "(or merge on cpu)"));
      }
    }
  }
  return std::unique_ptr<ReplicaSet>(new ReplicaSet(std::move(model), std::move(replicas), options,
                                                    std::move(merge_stream), std::move(wide)));
}

std::vector<SlotStatus> ReplicaSet::Slots() const {
  std::vector<SlotStatus> slots;
  slots.reserve(replicas_.size());
  for (const auto& r : replicas_) {
    slots.push_back(SlotStatus{r->slot().name, DeviceIdToString(r->device().info().id),
                               r->slot().weight, r->device().health()});
  }
  return slots;
}

std::string ReplicaSet::MergeDevice() const { return DeviceIdToString(options_.merge_device); }

void ReplicaSet::Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices, OutputSink* sink,
                     StillWanted still_wanted, Done done) {
  auto state = std::make_shared<ReplicaSetRun>();
  state->inputs = std::move(inputs);
  state->slices = std::move(slices);
  state->done = std::move(done);
  const int64_t batch =
      state->inputs.empty() || state->inputs[0].shape().empty() ? 0 : state->inputs[0].shape()[0];
  if (absl::Status s = CheckSliceCover(state->slices, batch, replicas_.size()); !s.ok()) {
    std::move(state->done)(s, {});
    return;
  }
  // A slot whose device failed for good gets no slices (the scheduler
  // leaves it out; a Run naming it is refused before anything runs).
  for (const BatchSlice& slice : state->slices) {
    absl::Status health = replicas_[slice.slot]->device().health();
    if (!health.ok()) {
      // The slices go back: the scheduler runs them on the other slots.
      std::move(state->done)(
          absl::UnavailableError(absl::StrCat("slot ", replicas_[slice.slot]->slot().name,
                                              " cannot run the model: ", health.message())),
          state->slices);
      return;
    }
  }

  std::optional<std::vector<Shape>> wide_to_build;
  state->widened = Widens(*state, &wide_to_build);
  for (BatchSlice& slice : state->slices) slice.widened = state->widened;

  // Plans first (built once per slice size), so every failure is reported
  // before any slot starts and no output is half written. Cached plans start
  // the slices from here; building one takes long (oneDNN's kernels, weight
  // layouts), so it happens on the planner's thread and the caller (the
  // scheduler, free to route other batches meanwhile) returns at once.
  const Planned cached = PlanSlices(*state, /*cached_only=*/true);
  if (cached == Planned::kAll) {
    Start(std::move(state), sink, std::move(still_wanted));
  } else if (cached == Planned::kNotCached) {
    planner_.Submit(
        [this, state = std::move(state), sink, still_wanted = std::move(still_wanted)]() mutable {
          // A build takes seconds on a CPU: none for a batch nobody wants by
          // the time its turn comes (e.g. every Run queued here once the
          // server stopped).
          if (still_wanted != nullptr) {
            if (absl::Status wanted = still_wanted(); !wanted.ok()) {
              std::move(state->done)(
                  absl::Status(wanted.code(),
                               absl::StrCat(wanted.message(), "; its plans were not built")),
                  state->slices);
              return;
            }
          }
          if (PlanSlices(*state, /*cached_only=*/false) == Planned::kAll) {
            Start(std::move(state), sink, std::move(still_wanted));
          }
        });
  }
  // Queued after the plans this Run asked of the planner (its slot's), so
  // that no request waits for a wide plan; it builds on the wide replica's
  // thread while the other slots' cores are idle.
  if (cached != Planned::kFailed && wide_to_build.has_value()) {
    BuildWidePlan(*std::move(wide_to_build));
  }
}

ReplicaSet::Planned ReplicaSet::PlanSlices(ReplicaSetRun& run, bool cached_only) {
  run.plans.clear();
  for (size_t s = 0; s < run.slices.size(); ++s) {
    BatchSlice& slice = run.slices[s];
    absl::StatusOr<Replica::SlicePlan> plan = RunsOn(run, s).PlanSlice(
        SliceShapes(run.inputs, slice),
        Replica::ChunkOptions{options_.transfer_chunks, options_.min_chunk_bytes,
                              options_.shrink_on_oom},
        cached_only);
    if (!plan.ok()) {
      slice.out_of_memory = absl::IsResourceExhausted(plan.status());
      std::move(run.done)(plan.status(), run.slices);
      return Planned::kFailed;
    }
    if (plan->chunk == nullptr) return Planned::kNotCached;
    if (plan->builds.count > 0 && options_.observer != nullptr) {
      options_.observer->OnPlansBuilt(*replicas_[slice.slot], plan->builds.count,
                                      plan->builds.seconds);
    }
    run.plans.push_back(*std::move(plan));
  }
  return Planned::kAll;
}

Replica& ReplicaSet::RunsOn(const ReplicaSetRun& run, size_t s) const {
  return run.widened ? *wide_ : *replicas_[run.slices[s].slot];
}

bool ReplicaSet::Widens(const ReplicaSetRun& run, std::optional<std::vector<Shape>>* to_build) {
  if (wide_ == nullptr || run.slices.size() != 1 || !run.slices[0].widened) return false;
  std::vector<Shape> shapes = SliceShapes(run.inputs, run.slices[0]);
  absl::StatusOr<Replica::SlicePlan> cached =
      wide_->PlanSlice(shapes, Replica::ChunkOptions{}, /*cached_only=*/true);
  if (cached.ok() && cached->chunk != nullptr) return true;
  absl::MutexLock lock(&wide_mu_);
  if (wide_refused_.count(shapes) == 0) *to_build = std::move(shapes);
  return false;
}

void ReplicaSet::BuildWidePlan(std::vector<Shape> shapes) {
  // One queued at a time: requests of one new shape ask for it many times.
  if (!wide_build_queued_.exchange(true, std::memory_order_acq_rel)) {
    planner_.Submit([this, shapes = std::move(shapes)] {
      absl::StatusOr<Replica::SlicePlan> built = wide_->PlanSlice(shapes, Replica::ChunkOptions{});
      if (!built.ok()) {
        absl::MutexLock lock(&wide_mu_);
        if (wide_refused_.size() >= kMaxWideRefusals) wide_refused_.clear();
        wide_refused_.insert(shapes);
      }
      wide_build_queued_.store(false, std::memory_order_release);
    });
  }
}

void ReplicaSet::Start(std::shared_ptr<ReplicaSetRun> state, OutputSink* sink,
                       StillWanted still_wanted) {
  const int64_t batch = state->inputs[0].shape()[0];  // Run checked it.
  const std::vector<TensorType>& types = state->plans[0].output_types;
  if (state->plans[0].chunk->data_dependent()) {
    if (state->slices.size() != 1) {
      std::move(state->done)(
          absl::FailedPreconditionError(absl::StrCat(
              "model '", model_->name(),
              "' computes outputs whose shapes depend on the request's values, so a batch "
              "runs whole on one slot; received ",
              state->slices.size(), " slices")),
          state->slices);
      return;
    }
    state->sink_after_run = sink;
    state->statuses.assign(1, absl::OkStatus());
    state->remaining.store(1);
    RunsOn(*state, 0).device().Enqueue(
        [this, state, still_wanted] { RunSlice(state, 0, still_wanted); });
    return;
  }
  const bool split = state->slices.size() > 1;
  for (size_t j = 0; j < types.size(); ++j) {
    TensorType merged = types[j];
    const bool scalar = merged.shape.empty();
    if (scalar && split && merged.dtype != DType::kFloat32) {
      std::move(state->done)(
          absl::UnimplementedError(absl::StrCat("output '", model_->outputs()[j].name,
                                                "' is a rank-0 ", DTypeName(merged.dtype),
                                                "; only float32 scalars are merged (by mean)")),
          state->slices);
      return;
    }
    if (!scalar) {
      for (size_t s = 0; s < state->slices.size(); ++s) {
        const int64_t rows = state->plans[s].output_types[j].shape[0];
        if (split && rows != state->slices[s].rows()) {
          std::move(state->done)(
              absl::FailedPreconditionError(absl::StrCat(
                  "output '", model_->outputs()[j].name, "' has ", rows, " rows for a slice of ",
                  state->slices[s].rows(),
                  ": the model does not keep the batch in dim 0, so it cannot be split")),
              state->slices);
          return;
        }
      }
      if (split) merged.shape[0] = batch;
    }
    absl::StatusOr<void*> out = sink->Allocate(static_cast<int>(j), merged);
    if (!out.ok()) {
      std::move(state->done)(out.status(), state->slices);
      return;
    }
    state->outputs.push_back(*out);
    state->scalar.push_back(scalar && split);
    std::shared_ptr<Buffer> on_merge_device;
    if (merge_stream_ != nullptr && !scalar) {
      absl::StatusOr<std::shared_ptr<Buffer>> buffer =
          merge_stream_->Allocate(std::max<size_t>(ByteSize(merged), 1));
      if (!buffer.ok()) {
        std::move(state->done)(buffer.status(), state->slices);
        return;
      }
      on_merge_device = *std::move(buffer);
    }
    state->merged.push_back(std::move(on_merge_device));
    state->merged_bytes.push_back(ByteSize(merged));
  }
  state->merge_stream = merge_stream_.get();

  const size_t n = state->slices.size();
  state->statuses.assign(n, absl::OkStatus());
  state->partial_scalars.assign(n, std::vector<float>(types.size(), 0.0f));
  state->remaining.store(static_cast<int>(n));
  for (size_t s = 0; s < n; ++s) {
    RunsOn(*state, s).device().Enqueue(
        [this, state, s, still_wanted] { RunSlice(state, s, still_wanted); });
  }
}

void ReplicaSet::ReleaseIdleMemory() {
  for (const auto& replica : replicas_) replica->ReleaseArena();
  if (wide_ != nullptr) wide_->ReleaseArena();
  // The slots have made their copies (blocked layouts, device memory).
  model_->ReleaseResidentWeights();
}

void ReplicaSet::SliceEnded(const std::shared_ptr<ReplicaSetRun>& run) {
  if (run->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) SlicesDone(run);
}

void ReplicaSet::RunSlice(const std::shared_ptr<ReplicaSetRun>& state, size_t s,
                          const StillWanted& still_wanted) {
  BatchSlice& slice = state->slices[s];
  Replica& replica = RunsOn(*state, s);
  // The slot the scheduler chose: metrics and messages name it.
  const Replica& slot = *replicas_[slice.slot];
  if (still_wanted != nullptr) {
    if (absl::Status wanted = still_wanted(); !wanted.ok()) {
      state->statuses[s] =
          absl::Status(wanted.code(), absl::StrCat(wanted.message(), "; its slice on slot ",
                                                   slot.slot().name, " did not start"));
      SliceEnded(state);
      return;
    }
  }
  const Replica::SlicePlan& plan = state->plans[s];
  std::vector<const void*> in(state->inputs.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = state->inputs[i];
    const size_t row_bytes = t.byte_size() / static_cast<size_t>(t.shape()[0]);
    in[i] = static_cast<const char*>(t.raw_data()) + row_bytes * slice.begin;
  }
  std::vector<void*> out(state->outputs.size());
  for (size_t j = 0; j < out.size(); ++j) {
    const TensorType& type = plan.output_types[j];
    if (state->scalar[j]) {
      out[j] = &state->partial_scalars[s][j];
    } else if (type.shape.empty()) {
      out[j] = state->outputs[j];  // Rank 0 of one slice: host memory.
    } else {
      const size_t slice_bytes =
          static_cast<size_t>(NumElements(type.shape)) * DTypeSize(type.dtype);
      const size_t offset = type.shape.empty() || slice.rows() == 0
                                ? 0
                                : slice_bytes / static_cast<size_t>(slice.rows()) * slice.begin;
      void* merged = state->merged[j] != nullptr ? state->merged[j]->data() : state->outputs[j];
      out[j] = static_cast<char*>(merged) + offset;
    }
  }
  // Taken before the clock starts: waiting for the other kind of slice to
  // end is no part of this one's time.
  CoresHeld cores(wide_ != nullptr ? &cores_ : nullptr, state->widened);
  const auto start = std::chrono::steady_clock::now();
  const MemoryLocation merged_in =
      merge_stream_ != nullptr ? merge_stream_->memory_location() : MemoryLocation{};
  // Asked again before every kernel, so that a batch nobody wants any
  // more (cancelled, past its deadline, the server stopping) ends at the
  // next kernel instead of running to its end.
  bool stopped = false;
  const auto proceed = [&still_wanted, &stopped] {
    absl::Status wanted = still_wanted();
    stopped = !wanted.ok();
    return wanted;
  };
  const ExecutionPlan::Proceed asked = proceed;
  state->statuses[s] = state->sink_after_run != nullptr
                           ? RunToSink(replica, plan, in.data(), *state->sink_after_run,
                                       still_wanted != nullptr ? &asked : nullptr)
                           : replica.RunSlice(plan, in.data(), out.data(), merged_in,
                                              still_wanted != nullptr ? &asked : nullptr);
  const double seconds = SecondsSince(start);
  cores.Release();
  // A stopped slice's time says nothing of the slot's speed (the
  // scheduler skips slices of no seconds), and its rows were not served.
  slice.seconds = stopped ? 0 : seconds;
  if (options_.observer != nullptr) {
    options_.observer->OnSliceRun(slot, stopped ? 0 : slice.rows(), seconds);
  }
  SliceEnded(state);
}

}  // namespace replicad
