#include "core/serve/pipeline_servable.h"

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

PipelineServable::PipelineServable(std::unique_ptr<PipelineReplica> pipeline, int micro_batches,
                                   std::vector<SlotAssignment> contexts, PipelineObserver* observer)
    : pipeline_(std::move(pipeline)),
      micro_batches_(micro_batches),
      devices_(PartDevices(*pipeline_, contexts)),
      observer_(observer),
      runs_(std::make_unique<WorkerPool>(2)) {
  if (observer_ != nullptr) {
    std::vector<PipelineReplica::PartStats> none;
    for (size_t p = 0; p < pipeline_->part_count(); ++p) {
      none.push_back({pipeline_->part_context(p), 0, 0, 0});
    }
    observer_->OnPipelineRun(pipeline_->model().name(), none, 0);
  }
}

PipelineServable::~PipelineServable() { runs_.reset(); }

std::vector<SlotStatus> PipelineServable::Slots() const {
  return {SlotStatus{"pipeline", devices_, 1.0, absl::OkStatus()}};
}

void PipelineServable::Run(std::vector<Tensor> inputs, std::vector<BatchSlice> slices,
                           OutputSink* sink, StillWanted still_wanted, Done done) {
  const int64_t rows = inputs.empty() || inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  if (slices.size() != 1 || slices[0].slot != 0 || slices[0].begin != 0 || slices[0].end != rows) {
    std::move(done)(
        absl::InvalidArgumentError(absl::StrCat(
            "a pipeline runs a batch whole, as one slice of slot 0 over its ", rows, " rows")),
        std::move(slices));
    return;
  }
  runs_->Submit([this, inputs = std::move(inputs), slices = std::move(slices), sink,
                 still_wanted = std::move(still_wanted), done = std::move(done)]() mutable {
    if (still_wanted) {
      if (absl::Status wanted = still_wanted(); !wanted.ok()) {
        return std::move(done)(wanted, std::move(slices));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<PipelineReplica::PartStats> parts;
    const std::function<absl::Status()>* wanted = still_wanted ? &still_wanted : nullptr;
    absl::StatusOr<std::vector<Tensor>> outputs =
        pipeline_->Run(inputs, micro_batches_, &parts, wanted);
    slices[0].seconds = SecondsSince(start);
    if (observer_ != nullptr && !parts.empty()) {
      observer_->OnPipelineRun(pipeline_->model().name(), parts, slices[0].seconds);
    }
    if (!outputs.ok()) return std::move(done)(outputs.status(), std::move(slices));
    for (size_t o = 0; o < outputs->size(); ++o) {
      const Tensor& output = (*outputs)[o];
      absl::StatusOr<void*> place = sink->Allocate(static_cast<int>(o), output.type());
      if (!place.ok()) return std::move(done)(place.status(), std::move(slices));
      std::memcpy(*place, output.raw_data(), output.byte_size());
    }
    std::move(done)(absl::OkStatus(), std::move(slices));
  });
}

}  // namespace replicad
