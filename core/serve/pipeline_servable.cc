#include "core/serve/pipeline_servable.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/clock.h"

namespace replicad {
namespace {

// "dev0=cpu:0+dev1=cpu:1": the contexts the parts run on, in part order.
std::string PartDevices(const PipelineReplica& pipeline,
                        const std::vector<SlotAssignment>& contexts) {
  std::vector<std::string> named;
  std::set<std::string> seen;
  for (size_t p = 0; p < pipeline.part_count(); ++p) {
    const std::string& context = pipeline.part_context(p);
    if (!seen.insert(context).second) continue;
    for (const SlotAssignment& slot : contexts) {
      if (slot.name == context) named.push_back(context + "=" + DeviceIdToString(slot.device));
    }
  }
  return absl::StrJoin(named, "+");
}

}  // namespace

// One batch in flight: its slices' outputs until the last one ends.
struct PipelineServable::BatchRun {
  std::vector<Tensor> inputs;
  std::vector<BatchSlice> slices;
  OutputSink* sink = nullptr;
  StillWanted still_wanted;
  Done done;
  std::vector<absl::StatusOr<std::vector<Tensor>>> outputs;  // Per slice.
  std::atomic<size_t> running{0};
};

PipelineServable::PipelineServable(std::vector<std::unique_ptr<PipelineReplica>> pipelines,
                                   int micro_batches,
                                   const std::vector<std::vector<SlotAssignment>>& contexts,
                                   PipelineObserver* observer)
    : pipelines_(std::move(pipelines)),
      micro_batches_(micro_batches),
      observer_(observer),
      runs_(std::make_unique<WorkerPool>(static_cast<int>(2 * pipelines_.size()))) {
  for (size_t k = 0; k < pipelines_.size(); ++k) {
    devices_.push_back(PartDevices(*pipelines_[k], contexts[k]));
    if (observer_ == nullptr) continue;
    std::vector<PipelineReplica::PartStats> none;
    for (size_t p = 0; p < pipelines_[k]->part_count(); ++p) {
      none.push_back({pipelines_[k]->part_context(p), 0, 0, 0});
    }
    observer_->OnPipelineRun(model().name(), static_cast<int>(k), none, 0);
  }
}

PipelineServable::~PipelineServable() { runs_.reset(); }

std::string PipelineServable::SlotName(size_t k) const {
  return pipelines_.size() == 1 ? "pipeline" : absl::StrCat("pipeline", k);
}

std::vector<SlotStatus> PipelineServable::Slots() const {
  std::vector<SlotStatus> slots;
  for (size_t k = 0; k < pipelines_.size(); ++k) {
    slots.push_back(SlotStatus{SlotName(k), devices_[k], 1.0, pipelines_[k]->health()});
  }
  return slots;
}

void PipelineServable::Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices,
                           OutputSink* sink, StillWanted still_wanted, Done done) {
  const int64_t rows = inputs.empty() || inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  if (absl::Status s = CheckSliceCover(slices, rows, pipelines_.size()); !s.ok()) {
    return std::move(done)(s, std::move(slices));
  }
  for (const BatchSlice& slice : slices) {
    if (absl::Status health = pipelines_[slice.slot]->health(); !health.ok()) {
      // The slices go back: the scheduler runs them on the other pipelines.
      return std::move(done)(
          absl::UnavailableError(
              absl::StrCat(SlotName(slice.slot), " cannot run the model: ", health.message())),
          std::move(slices));
    }
  }
  auto run = std::make_shared<BatchRun>();
  run->inputs = std::move(inputs);
  run->slices = std::move(slices);
  run->sink = sink;
  run->still_wanted = std::move(still_wanted);
  run->done = std::move(done);
  // Counted before the first is submitted: the last slice to end moves
  // run->slices into done, maybe while this loop still submits.
  const size_t count = run->slices.size();
  run->outputs.resize(count, absl::UnknownError("not run"));
  run->running = count;
  for (size_t i = 0; i < count; ++i) runs_->Submit([this, run, i] { RunSlice(run, i); });
}

void PipelineServable::RunSlice(const std::shared_ptr<BatchRun>& run, size_t i) {
  BatchSlice& slice = run->slices[i];
  absl::Status wanted = run->still_wanted ? run->still_wanted() : absl::OkStatus();
  if (!wanted.ok()) {
    run->outputs[i] = wanted;
  } else {
    std::vector<Tensor> rows;
    absl::Status cut;
    for (const Tensor& input : run->inputs) {
      absl::StatusOr<Tensor> part = run->slices.size() == 1
                                        ? absl::StatusOr<Tensor>(input)
                                        : input.SliceRows(slice.begin, slice.end);
      if (!part.ok()) cut = part.status();
      if (part.ok()) rows.push_back(*std::move(part));
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<PipelineReplica::PartStats> parts;
    const std::function<absl::Status()>* asked = run->still_wanted ? &run->still_wanted : nullptr;
    run->outputs[i] = cut.ok() ? pipelines_[slice.slot]->Run(rows, micro_batches_, &parts, asked)
                               : absl::StatusOr<std::vector<Tensor>>(cut);
    slice.seconds = SecondsSince(start);
    if (observer_ != nullptr && !parts.empty()) {
      observer_->OnPipelineRun(model().name(), slice.slot, parts, slice.seconds);
    }
  }
  if (run->running.fetch_sub(1) == 1) Finish(*run);
}

void PipelineServable::Finish(BatchRun& run) {
  for (const auto& outputs : run.outputs) {
    if (!outputs.ok()) return std::move(run.done)(outputs.status(), std::move(run.slices));
  }
  const int64_t rows = run.slices.back().end;
  const std::vector<Tensor>& first = *run.outputs[0];
  for (size_t o = 0; o < first.size(); ++o) {
    // Every output keeps its rows in dim 0 (PipelineReplica::Run's contract).
    TensorType type = first[o].type();
    type.shape[0] = rows;
    absl::StatusOr<void*> place = run.sink->Allocate(static_cast<int>(o), type);
    if (!place.ok()) return std::move(run.done)(place.status(), std::move(run.slices));
    char* at = static_cast<char*>(*place);
    for (size_t i = 0; i < run.slices.size(); ++i) {
      const Tensor& part = (*run.outputs[i])[o];
      std::memcpy(at, part.raw_data(), part.byte_size());
      at += part.byte_size();
    }
  }
  std::move(run.done)(absl::OkStatus(), std::move(run.slices));
}

}  // namespace replicad
