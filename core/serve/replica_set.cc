#include "core/serve/replica_set.h"

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace replicad {
namespace {

// The shared state of one Predict while its slices run.
struct PredictState {
  std::vector<Tensor> inputs;
  std::vector<BatchSlice> slices;
  std::vector<ExecutionPlan*> plans;      // Per slice.
  std::vector<void*> outputs;             // Merged output buffers, model order.
  std::vector<bool> scalar;               // Per output: rank 0, merged by mean.
  std::vector<std::vector<float>> partial_scalars;  // [slice][output].
  std::vector<absl::Status> statuses;     // Per slice.
  std::atomic<int> remaining{0};
  ReplicaSet::Done done;
};

void Finish(PredictState& state) {
  for (const absl::Status& s : state.statuses) {
    if (!s.ok()) {
      std::move(state.done)(s, state.slices);
      return;
    }
  }
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

}  // namespace

ReplicaSet::ReplicaSet(std::shared_ptr<const Model> model,
                       std::vector<std::unique_ptr<Replica>> replicas, const Options& options)
    : model_(std::move(model)), replicas_(std::move(replicas)), options_(options) {
  for (const auto& r : replicas_) weights_.push_back(r->slot().weight);
}

absl::StatusOr<std::unique_ptr<ReplicaSet>> ReplicaSet::Create(
    std::shared_ptr<const Model> model, std::vector<std::unique_ptr<Replica>> replicas,
    const Options& options) {
  if (replicas.empty()) return absl::InvalidArgumentError("a replica set needs at least one slot");
  if (options.merge_device.kind != DeviceKind::kCpu) {
    return absl::UnimplementedError(absl::StrCat("merge device ",
                                                 DeviceIdToString(options.merge_device),
                                                 ": only cpu merging is implemented"));
  }
  return std::unique_ptr<ReplicaSet>(new ReplicaSet(std::move(model), std::move(replicas), options));
}

void ReplicaSet::Predict(std::vector<Tensor> inputs, OutputSink* sink, Done done) {
  auto state = std::make_shared<PredictState>();
  state->inputs = std::move(inputs);
  state->done = std::move(done);
  const int64_t batch = state->inputs.empty() ? 0 : state->inputs[0].shape()[0];
  // A slot whose device failed for good leaves the split; the others take
  // its share.
  std::vector<int> healthy;
  std::vector<double> healthy_weights;
  absl::Status fault;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    absl::Status health = replicas_[r]->device().health();
    if (health.ok()) {
      healthy.push_back(static_cast<int>(r));
      healthy_weights.push_back(weights_[r]);
    } else if (fault.ok()) {
      fault = health;
    }
  }
  if (healthy.empty()) {
    std::move(state->done)(
        absl::UnavailableError(absl::StrCat("no slot can run the model: ", fault.message())), {});
    return;
  }
  state->slices = SplitBatch(batch, healthy_weights);
  if (state->slices.empty()) {
    std::move(state->done)(absl::InvalidArgumentError("the batch is empty"), {});
    return;
  }
  for (BatchSlice& slice : state->slices) slice.slot = healthy[slice.slot];

  // Plans first (built once per slice size), so every failure is reported
  // before any slot starts and no output is half written.
  for (const BatchSlice& slice : state->slices) {
    std::vector<Shape> shapes;
    for (const Tensor& t : state->inputs) {
      Shape s = t.shape();
      s[0] = slice.rows();
      shapes.push_back(std::move(s));
    }
    absl::StatusOr<ExecutionPlan*> plan = replicas_[slice.slot]->PlanFor(shapes);
    if (!plan.ok()) {
      std::move(state->done)(plan.status(), state->slices);
      return;
    }
    state->plans.push_back(*plan);
  }

  const std::vector<TensorType>& types = state->plans[0]->output_types();
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
        const int64_t rows = state->plans[s]->output_types()[j].shape[0];
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
  }

  const size_t n = state->slices.size();
  state->statuses.assign(n, absl::OkStatus());
  state->partial_scalars.assign(n, std::vector<float>(types.size(), 0.0f));
  state->remaining.store(static_cast<int>(n));
  for (size_t s = 0; s < n; ++s) {
    Replica& replica = *replicas_[state->slices[s].slot];
    replica.device().Enqueue([this, state, s, &replica] {
      const BatchSlice& slice = state->slices[s];
      ExecutionPlan& plan = *state->plans[s];
      std::vector<const void*> in(state->inputs.size());
      for (size_t i = 0; i < in.size(); ++i) {
        const Tensor& t = state->inputs[i];
        const size_t row_bytes = t.byte_size() / static_cast<size_t>(t.shape()[0]);
        in[i] = static_cast<const char*>(t.raw_data()) + row_bytes * slice.begin;
      }
      std::vector<void*> out(state->outputs.size());
      for (size_t j = 0; j < out.size(); ++j) {
        const TensorType& type = plan.output_types()[j];
        if (state->scalar[j]) {
          out[j] = &state->partial_scalars[s][j];
        } else {
          const size_t slice_bytes = static_cast<size_t>(NumElements(type.shape)) *
                                     DTypeSize(type.dtype);
          const size_t offset =
              type.shape.empty() || slice.rows() == 0
                  ? 0
                  : slice_bytes / static_cast<size_t>(slice.rows()) * slice.begin;
          out[j] = static_cast<char*>(state->outputs[j]) + offset;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      state->statuses[s] = replica.RunOnHost(plan, in.data(), out.data());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.observer != nullptr) options_.observer->OnSliceRun(replica, slice.rows(), seconds);
      if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(*state);
    });
  }
}

}  // namespace replicad
