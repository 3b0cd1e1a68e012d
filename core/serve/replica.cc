#include "core/serve/replica.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/device/device_copy.h"

namespace replicad {
namespace {

using Lane = Device::Lane;

// Bytes of one row of a tensor of `type` whose dim 0 is the rows.
size_t RowBytes(const TensorType& type) {
  const int64_t rows = type.shape.empty() ? 0 : type.shape[0];
  return rows == 0 ? 0 : ByteSize(type) / static_cast<size_t>(rows);
}

// One slice's chunks through a device slot: the upload of chunk k+1 and the
// download of chunk k-1 are issued on their lanes while chunk k computes.
// Buffer reuse is ordered by marks: a set's inputs are refilled only after
// the compute that read them, its outputs rewritten only after the download
// that read them.
class ChunkPipeline {
 public:
  struct Chunk {
    ExecutionPlan* plan;
    void* const* device_inputs;   // The plan's inputs and outputs in the
    void* const* device_outputs;  // slot's memory.
    int set;                      // Which of the (at most three) sets: the marks' index.
    int64_t first_row;
    int64_t rows;
    RecordedPlanRun* recorded;  // The plan's run on these buffers, recorded.
  };

  ChunkPipeline(Device& device, std::vector<Chunk> chunks, int64_t slice_rows,
                const void* const* host_inputs, void* const* outputs,
                MemoryLocation outputs_location, const ExecutionPlan::Proceed* proceed,
                const RunContext* step)
      : device_(device),
        chunks_(std::move(chunks)),
        slice_rows_(slice_rows),
        host_inputs_(host_inputs),
        outputs_(outputs),
        outputs_location_(outputs_location),
        proceed_(proceed),
        step_(step) {
    if (chunks_.size() > 1) {
      scalars_.assign(chunks_.size(),
                      std::vector<float>(chunks_[0].plan->output_types().size(), 0.0f));
    }
  }

  absl::Status Run() {
    const int n = static_cast<int>(chunks_.size());
    REPLICAD_RETURN_IF_ERROR(Upload(0));
    REPLICAD_RETURN_IF_ERROR(Compute(0));
    for (int k = 1; k < n; ++k) {
      REPLICAD_RETURN_IF_ERROR(Upload(k));
      REPLICAD_RETURN_IF_ERROR(Compute(k));
      // Blocks until chunk k-1 is out (for host outputs), while chunk k
      // is already queued behind it: the GPU never waits for the host.
      REPLICAD_RETURN_IF_ERROR(Download(k - 1));
    }
    REPLICAD_RETURN_IF_ERROR(Download(n - 1));
    if (n > 1) MergeScalars();
    return absl::OkStatus();
  }

 private:
  absl::Status Upload(int k) {
    const Chunk& c = chunks_[k];
    REPLICAD_RETURN_IF_ERROR(device_.WaitForMark(Lane::kUpload, computed_[c.set].get()));
    const std::vector<TensorType>& types = c.plan->input_types();
    for (size_t i = 0; i < types.size(); ++i) {
      const char* rows = static_cast<const char*>(host_inputs_[i]) +
                         RowBytes(types[i]) * static_cast<size_t>(c.first_row);
      REPLICAD_RETURN_IF_ERROR(device_.CopyOnLane(Lane::kUpload, rows, MemoryLocation{},
                                                  c.device_inputs[i], device_.memory_location(),
                                                  ByteSize(types[i])));
    }
    REPLICAD_ASSIGN_OR_RETURN(uploaded_, device_.MarkLane(Lane::kUpload));
    return absl::OkStatus();
  }

  absl::Status Compute(int k) {
    const Chunk& c = chunks_[k];
    REPLICAD_RETURN_IF_ERROR(device_.WaitForMark(Lane::kCompute, uploaded_.get()));
    REPLICAD_RETURN_IF_ERROR(device_.WaitForMark(Lane::kCompute, downloaded_[c.set].get()));
    if (step_ != nullptr) {
      RunContext chunk = *step_;
      chunk.first_row += c.first_row;
      REPLICAD_RETURN_IF_ERROR(c.plan->Run(chunk, c.device_inputs, c.device_outputs, proceed_));
    } else if (Replayed(c)) {
      REPLICAD_RETURN_IF_ERROR(replay_status_);
    } else {
      REPLICAD_RETURN_IF_ERROR(proceed_ != nullptr
                                   ? c.plan->Run(c.device_inputs, c.device_outputs, *proceed_)
                                   : c.plan->Run(c.device_inputs, c.device_outputs));
    }
    REPLICAD_ASSIGN_OR_RETURN(computed_[c.set], device_.MarkLane(Lane::kCompute));
    return absl::OkStatus();
  }

  // Runs chunk `c` as its set's recorded run where the device records work
  // (recording it on the set's second run); false where it must be run as
  // ever (nothing recorded, or recording failed: `c.recorded` remembers).
  // `proceed_` is asked once before a replay, which cannot stop between
  // its kernels.
  bool Replayed(const Chunk& c) {
    RecordedPlanRun& run = *c.recorded;
    if (!device_.records_work() || run.unrecordable || !c.plan->replayable()) return false;
    if (run.work == nullptr) {
      if (++run.runs < 2) return false;
      absl::StatusOr<std::unique_ptr<Device::RecordedWork>> recorded =
          device_.Record([plan = c.plan, in = c.device_inputs, out = c.device_outputs] {
            return plan->Run(in, out);
          });
      if (!recorded.ok()) {
        run.unrecordable = true;
        LogInfo(absl::StrCat("a plan runs without a CUDA graph: ", recorded.status().message()));
        return false;
      }
      run.work = *std::move(recorded);
    }
    replay_status_ = proceed_ != nullptr ? (*proceed_)() : absl::OkStatus();
    if (replay_status_.ok()) replay_status_ = run.work->Replay();
    return true;
  }

  absl::Status Download(int k) {
    const Chunk& c = chunks_[k];
    REPLICAD_RETURN_IF_ERROR(device_.WaitForMark(Lane::kDownload, computed_[c.set].get()));
    const std::vector<TensorType>& types = c.plan->output_types();
    for (size_t j = 0; j < types.size(); ++j) {
      const bool scalar = types[j].shape.empty();
      void* dst = nullptr;
      if (scalar) {
        dst = scalars_.empty() ? outputs_[j] : &scalars_[k][j];
      } else {
        dst =
            static_cast<char*>(outputs_[j]) + RowBytes(types[j]) * static_cast<size_t>(c.first_row);
      }
      REPLICAD_RETURN_IF_ERROR(
          device_.CopyOnLane(Lane::kDownload, c.device_outputs[j], device_.memory_location(), dst,
                             scalar ? MemoryLocation{} : outputs_location_, ByteSize(types[j])));
    }
    REPLICAD_ASSIGN_OR_RETURN(downloaded_[c.set], device_.MarkLane(Lane::kDownload));
    return absl::OkStatus();
  }

  // Rank-0 outputs of several chunks: the row-weighted mean, as the merge
  // of several slices does, so a per-sample mean does not depend on the cut.
  void MergeScalars() {
    const std::vector<TensorType>& types = chunks_[0].plan->output_types();
    for (size_t j = 0; j < types.size(); ++j) {
      if (!types[j].shape.empty()) continue;
      double sum = 0;
      for (size_t k = 0; k < chunks_.size(); ++k) {
        sum += static_cast<double>(scalars_[k][j]) * static_cast<double>(chunks_[k].rows);
      }
      *static_cast<float*>(outputs_[j]) =
          static_cast<float>(sum / static_cast<double>(slice_rows_));
    }
  }

  Device& device_;
  const std::vector<Chunk> chunks_;
  const int64_t slice_rows_;
  const void* const* host_inputs_;
  void* const* outputs_;
  const MemoryLocation outputs_location_;
  const ExecutionPlan::Proceed* proceed_;    // Optional.
  const RunContext* step_;                   // Optional: a training step's.
  absl::Status replay_status_;               // The last Replayed's.
  std::vector<std::vector<float>> scalars_;  // [chunk][output], with several chunks.
  std::shared_ptr<Device::LaneMark> uploaded_;
  std::shared_ptr<Device::LaneMark> computed_[3];
  std::shared_ptr<Device::LaneMark> downloaded_[3];
};

}  // namespace

int Replica::SlicePlan::chunks() const {
  return chunk_rows <= 0 ? 1 : static_cast<int>((rows + chunk_rows - 1) / chunk_rows);
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(std::shared_ptr<const Model> model,
                                                         SlotAssignment slot,
                                                         std::unique_ptr<Device> device,
                                                         size_t max_plans, size_t max_plan_bytes) {
  if (max_plans < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot.name, ": max_plans must be >= 1, received ", max_plans));
  }
  std::unique_ptr<Replica> replica(
      new Replica(std::move(model), std::move(slot), std::move(device), max_plans, max_plan_bytes));
  Device& d = *replica->device_;
  if (d.memory_location().kind == MemoryKind::kHost) {
    // A host slot reads the template's own weights, which nothing writes:
    // a copy per slot cost each CPU slot the model's size again, and twice
    // that with the kernels' reordered copies, which the weight cache can
    // share between slots only when they read the same bytes.
    replica->weights_ = replica->model_->graph().initializers;
    return replica;
  }
  for (const auto& [v, host] : replica->model_->graph().initializers) {
    REPLICAD_ASSIGN_OR_RETURN(Tensor weight, CopyToDevice(d, host));
    replica->weights_.emplace(v, std::move(weight));
  }
  REPLICAD_RETURN_IF_ERROR(d.Synchronize());
  return replica;
}

void Replica::ReleaseArena() {
  if (plan_arena_ == nullptr) return;
  // On the stream, where plans run: no plan is between its Reserve and its
  // last step then.
  device_->Enqueue([arena = plan_arena_] { arena->Release(); });
}

absl::StatusOr<std::shared_ptr<ExecutionPlan>> Replica::PlanFor(
    const std::vector<Shape>& input_shapes, PlanBuilds* builds, bool cached_only) {
  if (cached_only) {
    // A build holds mu_ for its whole length: a busy lock reads as "not
    // cached" instead of making the caller wait for someone else's build.
    if (!mu_.TryLock()) return nullptr;
    std::shared_ptr<ExecutionPlan> plan = plans_.Find(input_shapes);
    mu_.Unlock();
    return plan;
  }
  // Released after the lock (declared before it): freeing a plan need not
  // hold up other sizes' lookups.
  std::vector<std::shared_ptr<ExecutionPlan>> evicted;
  // Building under the lock keeps two requests of a new size from both
  // building it.
  absl::MutexLock lock(&mu_);
  if (std::shared_ptr<ExecutionPlan> plan = plans_.Find(input_shapes)) return plan;
  // Evicting before building lets the new plan reuse the old one's memory
  // when no slice holds it.
  std::optional<PlanCache::Entry> made_room = plans_.TakeOldestIfFull();
  // A plan that is not cached after all must not cost the cache one that works.
  auto put_back = [&] {
    if (made_room.has_value()) plans_.Restore(*std::move(made_room));
  };
  const absl::Time build_start = absl::Now();
  absl::StatusOr<std::unique_ptr<ExecutionPlan>> built =
      ExecutionPlan::Create(model_->graph(), weights_, *device_, input_shapes, plan_arena_);
  if (!built.ok()) {  // Say, too large for the device's memory.
    put_back();
    return built.status();
  }
  ++plans_built_;
  if (builds != nullptr) {
    ++builds->count;
    builds->seconds += absl::ToDoubleSeconds(absl::Now() - build_start);
  }
  auto record = std::make_shared<PlanRecord>();
  record->plan = *std::move(built);
  std::shared_ptr<ExecutionPlan> plan(record, record->plan.get());
  {
    absl::MutexLock records_lock(&records_mu_);
    for (auto r = records_.begin(); r != records_.end();) {
      r = r->second.expired() ? records_.erase(r) : std::next(r);
    }
    // A freed plan's address may come back: the new plan takes it over.
    records_[plan.get()] = record;
  }
  // Its own buffers, and on a device slot its first input/output set.
  PlanCache::Entry entry{input_shapes, plan, plan->own_bytes(), plan->shared_bytes()};
  if (device_->memory_location().kind != MemoryKind::kHost) {
    REPLICAD_RETURN_IF_ERROR(AddIoSets(*plan, 1));
    for (const TensorType& type : plan->input_types()) entry.own_bytes += ByteSize(type);
    if (!plan->data_dependent()) {
      for (const TensorType& type : plan->output_types()) entry.own_bytes += ByteSize(type);
    }
  }
  if (!plans_.FitsAlone(entry.own_bytes, entry.shared_bytes)) {
    // Alone over the bound: it serves the slices asking for it, uncached.
    put_back();
    return plan;
  }
  if (made_room.has_value()) evicted.push_back(std::move(made_room->plan));
  for (std::shared_ptr<ExecutionPlan>& taken : plans_.Insert(std::move(entry))) {
    evicted.push_back(std::move(taken));
  }
  plan_bytes_.store(plans_.bytes(), std::memory_order_relaxed);
  return plan;
}

absl::StatusOr<std::shared_ptr<Replica::PlanRecord>> Replica::RecordOf(
    const ExecutionPlan& plan) const {
  absl::MutexLock lock(&records_mu_);
  auto it = records_.find(&plan);
  std::shared_ptr<PlanRecord> record = it == records_.end() ? nullptr : it->second.lock();
  if (record == nullptr) return absl::InternalError("the plan is not this replica's");
  return record;
}

absl::Status Replica::AddIoSets(const ExecutionPlan& plan, size_t count) {
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<PlanRecord> record, RecordOf(plan));
  size_t missing = 0;
  {
    absl::MutexLock io_lock(&record->io_mu);
    missing = count > record->io.size() ? count - record->io.size() : 0;
  }
  // Allocated without io_mu, which the stream thread takes; two callers
  // racing here both allocate, and the loser's sets are dropped below.
  std::vector<IoSet> made(missing);
  for (IoSet& io : made) {
    for (const TensorType& type : plan.input_types()) {
      REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, device_->Allocate(ByteSize(type)));
      io.input_ptrs.push_back(buffer->data());
      io.inputs.push_back(std::move(buffer));
    }
    // A data-dependent plan's outputs come back in host tensors (RunToHost).
    for (const TensorType& type :
         plan.data_dependent() ? std::vector<TensorType>{} : plan.output_types()) {
      REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, device_->Allocate(ByteSize(type)));
      io.output_ptrs.push_back(buffer->data());
      io.outputs.push_back(std::move(buffer));
    }
  }
  absl::MutexLock io_lock(&record->io_mu);
  for (IoSet& io : made) {
    if (record->io.size() >= count) break;
    record->io.push_back(std::move(io));
  }
  return absl::OkStatus();
}

absl::StatusOr<const Replica::IoSet*> Replica::IoSetOf(const ExecutionPlan& plan,
                                                       size_t index) const {
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<PlanRecord> record, RecordOf(plan));
  absl::MutexLock io_lock(&record->io_mu);
  if (record->io.size() <= index) {
    return absl::InternalError("the plan has no such buffers");
  }
  // The caller holds the plan, which keeps the record (and the set) alive.
  return &record->io[index];
}

absl::StatusOr<Replica::SlicePlan> Replica::PlanSlice(const std::vector<Shape>& input_shapes,
                                                      const ChunkOptions& options,
                                                      bool cached_only) {
  const int64_t rows = input_shapes.empty() || input_shapes[0].empty() ? 0 : input_shapes[0][0];
  // Only slots that copy their slices run chunks (RunSlice); every input
  // must carry the rows in dim 0.
  bool cuttable = device_->memory_location().kind != MemoryKind::kHost && rows > 1 &&
                  input_shapes.size() == model_->inputs().size() && model_->row_mixing().empty();
  size_t bytes = 0;
  for (size_t i = 0; cuttable && i < input_shapes.size(); ++i) {
    cuttable = !input_shapes[i].empty() && input_shapes[i][0] == rows;
    if (cuttable) bytes += ByteSize(TensorType{model_->inputs()[i].type.dtype, input_shapes[i]});
  }
  int64_t chunks = 1;
  if (cuttable) {
    chunks = std::max<int64_t>(
        1, std::min<int64_t>(
               {options.max_chunks, rows,
                static_cast<int64_t>(bytes / std::max<size_t>(options.min_chunk_bytes, 1))}));
  }
  for (;;) {
    bool cut = false;
    absl::StatusOr<SlicePlan> plan =
        PlanChunks(input_shapes, static_cast<int>(chunks), cached_only, &cut);
    if (plan.ok() || !options.shrink_on_oom || !absl::IsResourceExhausted(plan.status()) ||
        !cuttable || chunks >= rows || (chunks > 1 && !cut)) {
      return plan;
    }
    chunks = std::min(rows, chunks * 2);
  }
}

absl::StatusOr<Replica::SlicePlan> Replica::PlanChunks(const std::vector<Shape>& input_shapes,
                                                       int chunks, bool cached_only, bool* cut) {
  SlicePlan slice;
  slice.rows = input_shapes.empty() || input_shapes[0].empty() ? 0 : input_shapes[0][0];
  slice.chunk_rows = slice.rows;
  *cut = chunks > 1;
  if (*cut) {
    slice.chunk_rows = (slice.rows + chunks - 1) / chunks;
    std::vector<Shape> shapes = input_shapes;
    for (Shape& s : shapes) s[0] = slice.chunk_rows;
    REPLICAD_ASSIGN_OR_RETURN(slice.chunk, PlanFor(shapes, &slice.builds, cached_only));
    if (slice.chunk == nullptr) return slice;  // Not cached.
    const int64_t last_rows = slice.rows - (slice.chunks() - 1) * slice.chunk_rows;
    slice.last = slice.chunk;
    if (last_rows != slice.chunk_rows) {
      for (Shape& s : shapes) s[0] = last_rows;
      REPLICAD_ASSIGN_OR_RETURN(slice.last, PlanFor(shapes, &slice.builds, cached_only));
      if (slice.last == nullptr) return SlicePlan{};  // Not cached.
    }
    for (const ExecutionPlan* plan : {slice.chunk.get(), slice.last.get()}) {
      for (const TensorType& type : plan->output_types()) {
        const int64_t rows = plan == slice.chunk.get() ? slice.chunk_rows : last_rows;
        if (type.shape.empty() ? type.dtype != DType::kFloat32 : type.shape[0] != rows) {
          *cut = false;
        }
      }
    }
  }
  if (!*cut) {
    slice.chunk_rows = slice.rows;
    REPLICAD_ASSIGN_OR_RETURN(slice.chunk, PlanFor(input_shapes, &slice.builds, cached_only));
    if (slice.chunk == nullptr) return slice;  // Not cached.
    slice.last = slice.chunk;
    slice.output_types = slice.chunk->output_types();
    return slice;
  }
  // Consecutive chunks of one plan alternate between two buffer sets.
  const int uses_of_chunk_plan = slice.last == slice.chunk ? slice.chunks() : slice.chunks() - 1;
  if (uses_of_chunk_plan > 1) REPLICAD_RETURN_IF_ERROR(AddIoSets(*slice.chunk, 2));
  slice.output_types = slice.chunk->output_types();
  for (TensorType& type : slice.output_types) {
    if (!type.shape.empty()) type.shape[0] = slice.rows;
  }
  return slice;
}

absl::Status Replica::RunSlice(const SlicePlan& plan, const void* const* host_inputs,
                               void* const* outputs, MemoryLocation outputs_location,
                               const ExecutionPlan::Proceed* proceed, const RunContext* step) {
  if (device_->memory_location().kind == MemoryKind::kHost) {
    if (outputs_location.kind != MemoryKind::kHost) {
      return absl::FailedPreconditionError(
          absl::StrCat("slot ", slot_.name, " on ", DeviceIdToString(slot_.device),
                       " writes host memory only; merge on the CPU (--merge-device cpu)"));
    }
    if (step != nullptr) return plan.chunk->Run(*step, host_inputs, outputs, proceed);
    return proceed != nullptr ? plan.chunk->Run(host_inputs, outputs, *proceed)
                              : plan.chunk->Run(host_inputs, outputs);
  }
  std::vector<ChunkPipeline::Chunk> chunks;
  const int n = plan.chunks();
  for (int k = 0; k < n; ++k) {
    const bool last = k == n - 1;
    ExecutionPlan* chunk_plan = last ? plan.last.get() : plan.chunk.get();
    // The last chunk has sets of its own unless it shares the chunk plan.
    const int set = last && plan.last != plan.chunk ? 2 : (n > 1 ? k % 2 : 0);
    REPLICAD_ASSIGN_OR_RETURN(const IoSet* io, IoSetOf(*chunk_plan, set == 2 ? 0 : set));
    const int64_t first = k * plan.chunk_rows;
    chunks.push_back({chunk_plan, io->input_ptrs.data(), io->output_ptrs.data(), set, first,
                      last ? plan.rows - first : plan.chunk_rows, &io->recorded});
  }
  ChunkPipeline pipeline(*device_, std::move(chunks), plan.rows, host_inputs, outputs,
                         outputs_location, proceed, step);
  absl::Status status = pipeline.Run();
  // Whatever failed, nothing may still be reading or writing the buffers.
  absl::Status done = device_->AwaitStream();
  return status.ok() ? done : status;
}

absl::Status Replica::RunSliceToHost(const SlicePlan& plan, const void* const* host_inputs,
                                     std::vector<Tensor>* outputs,
                                     const ExecutionPlan::Proceed* proceed) {
  ExecutionPlan& whole = *plan.chunk;
  if (device_->memory_location().kind == MemoryKind::kHost) {
    return whole.RunToHost(host_inputs, outputs, proceed);
  }
  REPLICAD_ASSIGN_OR_RETURN(const IoSet* io, IoSetOf(whole, 0));
  const MemoryLocation here = device_->memory_location();
  absl::Status status;
  for (size_t i = 0; i < whole.input_types().size() && status.ok(); ++i) {
    status = device_->CopyOnStream(host_inputs[i], MemoryLocation{}, io->input_ptrs[i], here,
                                   ByteSize(whole.input_types()[i]));
  }
  if (status.ok()) status = whole.RunToHost(io->input_ptrs.data(), outputs, proceed);
  // Whatever failed, nothing may still be reading the buffers.
  absl::Status done = device_->AwaitStream();
  return status.ok() ? done : status;
}

absl::Status Replica::RunOnHost(ExecutionPlan& plan, const void* const* host_inputs,
                                void* const* host_outputs, const RunContext* step) {
  SlicePlan whole;
  // Not owning: the caller holds the plan for the call.
  whole.chunk = whole.last = std::shared_ptr<ExecutionPlan>(std::shared_ptr<void>(), &plan);
  return RunSlice(whole, host_inputs, host_outputs, MemoryLocation{}, nullptr, step);
}

size_t Replica::max_plans() const {
  absl::MutexLock lock(&mu_);
  return plans_.max_plans();
}

size_t Replica::plan_count() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

uint64_t Replica::plans_built() const {
  absl::MutexLock lock(&mu_);
  return plans_built_;
}

}  // namespace replicad
