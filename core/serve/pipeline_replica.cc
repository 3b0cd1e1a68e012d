#include "core/serve/pipeline_replica.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/base/clock.h"
#include "core/base/status_macros.h"

namespace replicad {

struct PipelineReplica::Part {
  std::string context;
  std::vector<int> after;
  std::unique_ptr<Replica> replica;
  mutable absl::Mutex mu;
  PartStats stats ABSL_GUARDED_BY(mu);
};

namespace {

// `status` with the part's context in front, so that a failure says where.
absl::Status InContext(const std::string& context, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("part on context '", context, "': ", status.message()));
}

int64_t RowsOf(const Tensor& tensor) { return tensor.shape().empty() ? -1 : tensor.shape()[0]; }

}  // namespace

PipelineReplica::PipelineReplica(std::shared_ptr<const Model> model, PlacedGraph placed,
                                 Options options)
    : model_(std::move(model)), placed_(std::move(placed)), options_(std::move(options)) {}

int64_t PipelineReplica::BatchRows(const std::vector<Tensor>& inputs) const {
  const std::vector<int>& graph_inputs = model_->graph().inputs;
  for (size_t i = 0; i < inputs.size() && i < graph_inputs.size(); ++i) {
    if (!Whole(graph_inputs[i])) return RowsOf(inputs[i]);
  }
  return -1;
}

bool PipelineReplica::Whole(int value) const {
  const std::vector<int>& inputs = model_->graph().inputs;
  for (size_t i = 0; i < inputs.size() && i < options_.whole_inputs.size(); ++i) {
    if (inputs[i] == value) return options_.whole_inputs[i];
  }
  return false;
}

PipelineReplica::~PipelineReplica() {
  for (auto& part : parts_) (void)part->replica->device().Synchronize();
}

const std::string& PipelineReplica::part_context(size_t part) const {
  return parts_[part]->context;
}

absl::StatusOr<std::unique_ptr<PipelineReplica>> PipelineReplica::Create(
    std::shared_ptr<const Model> model, PlacedGraph placed,
    const std::vector<SlotAssignment>& contexts, const DeviceMaker& make_device, Options options) {
  const size_t slot_memory_limit = options.slot_memory_limit;
  std::unique_ptr<PipelineReplica> pipeline(
      new PipelineReplica(std::move(model), std::move(placed), std::move(options)));
  const Graph& whole = pipeline->model_->graph();
  // Weights per context, before any device holds them.
  for (const GraphPart& part : pipeline->placed_.parts) {
    size_t& bytes = pipeline->weight_bytes_[part.context];
    for (const auto& [v, weight] : part.graph.initializers) bytes += weight.byte_size();
  }
  if (slot_memory_limit > 0) {
    for (const auto& [context, bytes] : pipeline->weight_bytes_) {
      if (bytes > slot_memory_limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "context '", context, "' would hold ", bytes, " bytes of weights, over its ",
            slot_memory_limit, " bytes (--slot-memory-limit); place fewer nodes there"));
      }
    }
  }
  // The element type and rank of every value handed over, and its shape at
  // one row, from the plans at one row of the parts before (a model need
  // not declare intermediate types). Which of a handed value's dims are
  // rows is not known (a transposed input has them in dim 1): it is
  // declared with every dim open, and each plan gets the actual shapes.
  std::vector<std::optional<TensorType>> known(whole.values.size());
  std::vector<Shape> one_row_shape(whole.values.size());
  for (int v : whole.inputs) {
    known[v] = whole.values[v].type;
    Shape& shape = one_row_shape[v] = known[v]->shape;
    for (int64_t& d : shape) d = d < 0 ? 1 : d;
    if (!shape.empty() && !pipeline->Whole(v)) shape[0] = 1;
  }
  for (GraphPart& placed : pipeline->placed_.parts) {
    auto found = std::find_if(contexts.begin(), contexts.end(),
                              [&](const SlotAssignment& s) { return s.name == placed.context; });
    if (found == contexts.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement names context '", placed.context, "', which no slot has"));
    }
    std::vector<Shape> one_row;
    for (int v : placed.graph.inputs) {
      if (!known[v].has_value()) {
        return absl::InternalError(absl::StrCat("placement: no part computes '",
                                                whole.values[v].name, "' before it is read"));
      }
      placed.graph.values[v].type = *known[v];
      one_row.push_back(one_row_shape[v]);
    }
    auto part = std::make_unique<Part>();
    part->context = placed.context;
    part->after = placed.after;
    {
      absl::MutexLock lock(&part->mu);
      part->stats.context = placed.context;
    }
    auto part_model =
        std::make_shared<const Model>(absl::StrCat(pipeline->model_->name(), "@", placed.context),
                                      pipeline->model_->source(), placed.graph);
    REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, make_device(*found));
    absl::StatusOr<std::unique_ptr<Replica>> replica =
        Replica::Create(std::move(part_model), *found, std::move(device));
    if (!replica.ok()) return InContext(placed.context, replica.status());
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = (*replica)->PlanFor(one_row);
    if (!plan.ok()) return InContext(placed.context, plan.status());
    for (int v : placed.graph.outputs) {
      const std::optional<TensorType>& type = (*plan)->value_types()[v];
      if (!type.has_value()) continue;
      known[v] = *type;
      one_row_shape[v] = type->shape;
      for (int64_t& d : known[v]->shape) d = kAnyDim;
    }
    part->replica = *std::move(replica);
    pipeline->parts_.push_back(std::move(part));
  }
  return pipeline;
}

absl::StatusOr<std::vector<std::shared_ptr<ExecutionPlan>>> PipelineReplica::PlansFor(
    const std::vector<Tensor>& inputs, int64_t rows) const {
  const Graph& whole = model_->graph();
  std::vector<std::optional<Shape>> shapes(whole.values.size());
  for (size_t i = 0; i < whole.inputs.size(); ++i) {
    Shape shape = inputs[i].shape();
    if (!Whole(whole.inputs[i])) shape[0] = rows;
    shapes[whole.inputs[i]] = std::move(shape);
  }
  std::vector<std::shared_ptr<ExecutionPlan>> plans;
  for (size_t p = 0; p < parts_.size(); ++p) {
    const Graph& graph = placed_.parts[p].graph;
    std::vector<Shape> input_shapes;
    for (int v : graph.inputs) input_shapes.push_back(*shapes[v]);
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = parts_[p]->replica->PlanFor(input_shapes);
    if (!plan.ok()) return InContext(parts_[p]->context, plan.status());
    if ((*plan)->data_dependent()) {
      return absl::UnimplementedError(absl::StrCat(
          "part on context '", parts_[p]->context,
          "' has a data-dependent plan (shapes computed from values), which a pipeline does "
          "not run yet"));
    }
    for (int v : graph.outputs) shapes[v] = (*plan)->value_types()[v]->shape;
    plans.push_back(*std::move(plan));
  }
  return plans;
}

// One micro-batch in flight: its rows, the values the parts hand over, and
// per part whether it is done and how it went.
struct PipelineReplica::MicroBatch {
  int64_t begin = 0;
  std::optional<RunContext> step;  // A training step's, first_row this micro-batch's.
  const std::vector<std::shared_ptr<ExecutionPlan>>* plans = nullptr;
  std::map<int, Tensor> handed;
  std::vector<absl::Status> status;
  std::vector<absl::Notification> done;
  // Per part: it ran (not stopped, not cancelled). Not vector<bool>: parts
  // set their own element from their own threads, and its bits share words.
  std::vector<char> ran;
  std::vector<double> seconds;     // Per part, once done.
  std::vector<uint64_t> bytes_in;  // Per part, once done.
  explicit MicroBatch(size_t parts)
      : status(parts), done(parts), ran(parts, 0), seconds(parts, 0), bytes_in(parts, 0) {}
};

absl::Status PipelineReplica::CheckInputs(const std::vector<Tensor>& inputs,
                                          int micro_batches) const {
  const Graph& whole = model_->graph();
  if (inputs.size() != whole.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", whole.inputs.size(), " inputs, received ", inputs.size()));
  }
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro_batches: expected at least 1, received ", micro_batches));
  }
  const int64_t rows = BatchRows(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = model_->inputs()[i];
    const bool cut = !Whole(whole.inputs[i]);
    if (inputs[i].dtype() != spec.type.dtype || (cut && (RowsOf(inputs[i]) != rows || rows < 1))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " '", spec.name, "': expected ", DTypeName(spec.type.dtype), " with ",
          rows < 1 ? "at least one row" : absl::StrCat(rows, " rows in dim 0"), ", received ",
          TensorTypeToString(inputs[i].type())));
    }
  }
  return absl::OkStatus();
}

void PipelineReplica::RunPart(size_t p, MicroBatch* run, const std::vector<Tensor>& inputs,
                              const std::function<absl::Status()>* still_wanted) {
  Part& part = *parts_[p];
  for (int a : part.after) {
    run->done[a].WaitForNotification();
    if (!run->status[a].ok() && run->status[p].ok()) {
      run->status[p] = absl::CancelledError(
          absl::StrCat("not run: the part on context '", parts_[a]->context, "' failed"));
    }
  }
  if (run->status[p].ok() && still_wanted != nullptr) run->status[p] = (*still_wanted)();
  if (run->status[p].ok()) {
    const Graph& whole = model_->graph();
    const Graph& graph = placed_.parts[p].graph;
    std::vector<const void*> in;
    uint64_t bytes_in = 0;
    for (int v : graph.inputs) {
      auto at = std::find(whole.inputs.begin(), whole.inputs.end(), v);
      if (at != whole.inputs.end()) {
        const Tensor& input = inputs[at - whole.inputs.begin()];
        if (Whole(v)) {
          in.push_back(input.raw_data());
          continue;
        }
        const size_t row_bytes = input.byte_size() / RowsOf(input);
        in.push_back(static_cast<const char*>(input.raw_data()) + run->begin * row_bytes);
      } else {
        const Tensor& value = run->handed.at(v);
        in.push_back(value.raw_data());
        bytes_in += value.byte_size();
      }
    }
    std::vector<void*> out;
    for (int v : graph.outputs) out.push_back(run->handed.at(v).raw_data());
    const auto start = std::chrono::steady_clock::now();
    run->status[p] = part.replica->RunOnHost(*(*run->plans)[p], in.data(), out.data(),
                                             run->step.has_value() ? &*run->step : nullptr);
    const double seconds = SecondsSince(start);
    run->ran[p] = 1;
    run->seconds[p] = seconds;
    run->bytes_in[p] = bytes_in;
    if (!run->status[p].ok()) run->status[p] = InContext(part.context, run->status[p]);
    absl::MutexLock lock(&part.mu);
    ++part.stats.runs;
    part.stats.busy_seconds += seconds;
    part.stats.bytes_in += bytes_in;
  }
  run->done[p].Notify();
}

absl::StatusOr<std::vector<Tensor>> PipelineReplica::Run(
    const std::vector<Tensor>& inputs, int micro_batches, std::vector<PartStats>* this_run,
    const std::function<absl::Status()>* still_wanted, const RunContext* step) {
  REPLICAD_RETURN_IF_ERROR(CheckInputs(inputs, micro_batches));
  const Graph& whole = model_->graph();
  const int64_t rows = BatchRows(inputs);
  const int64_t most = std::min<int64_t>(micro_batches, rows);
  const int64_t chunk = (rows + most - 1) / most;
  const int64_t count = (rows + chunk - 1) / chunk;
  const int64_t last_rows = rows - (count - 1) * chunk;
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<ExecutionPlan>> plans,
                            PlansFor(inputs, chunk));
  std::vector<std::shared_ptr<ExecutionPlan>> last_plans = plans;
  if (last_rows != chunk) {
    REPLICAD_ASSIGN_OR_RETURN(last_plans, PlansFor(inputs, last_rows));
  }
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, WholeOutputs(plans, chunk, rows));

  std::vector<std::unique_ptr<MicroBatch>> runs;
  for (int64_t i = 0; i < count; ++i) {
    auto run = std::make_unique<MicroBatch>(parts_.size());
    run->begin = i * chunk;
    run->plans = i + 1 == count ? &last_plans : &plans;
    if (step != nullptr) {
      run->step = *step;
      run->step->first_row += run->begin;
    }
    for (size_t p = 0; p < parts_.size(); ++p) {
      for (int v : placed_.parts[p].graph.outputs) {
        const TensorType& type = *(*run->plans)[p]->value_types()[v];
        run->handed.emplace(v, Tensor::Host(type.dtype, type.shape));
      }
    }
    runs.push_back(std::move(run));
  }
  // Part after part, micro-batch after micro-batch: each slot runs its
  // part's micro-batches in order, and a part waits only on parts before it,
  // so no slot waits on work queued behind its own.
  for (size_t p = 0; p < parts_.size(); ++p) {
    for (auto& run : runs) {
      parts_[p]->replica->device().Enqueue([this, p, run = run.get(), &inputs, still_wanted] {
        RunPart(p, run, inputs, still_wanted);
      });
    }
  }
  absl::Status failed;
  for (auto& run : runs) {
    for (size_t p = 0; p < parts_.size(); ++p) {
      run->done[p].WaitForNotification();
      if (failed.ok() && !run->status[p].ok() && !absl::IsCancelled(run->status[p])) {
        failed = run->status[p];
      }
    }
  }
  if (this_run != nullptr) {
    this_run->assign(parts_.size(), PartStats());
    for (size_t p = 0; p < parts_.size(); ++p) {
      PartStats& part = (*this_run)[p];
      part.context = parts_[p]->context;
      for (auto& run : runs) {
        part.runs += run->ran[p] != 0 ? 1 : 0;
        part.busy_seconds += run->seconds[p];
        part.bytes_in += run->bytes_in[p];
      }
    }
  }
  if (!failed.ok()) return failed;
  for (size_t o = 0; o < whole.outputs.size() && options_.sum_outputs; ++o) {
    float* sum = outputs[o].data<float>();
    std::fill(sum, sum + outputs[o].num_elements(), 0.0f);
    for (auto& run : runs) {  // In micro-batch order: the same sums on every run.
      const float* part = run->handed.at(whole.outputs[o]).data<float>();
      for (int64_t e = 0; e < outputs[o].num_elements(); ++e) sum[e] += part[e];
    }
  }
  for (size_t o = 0; o < whole.outputs.size() && !options_.sum_outputs; ++o) {
    const size_t row_bytes = outputs[o].byte_size() / rows;
    for (auto& run : runs) {
      const Tensor& value = run->handed.at(whole.outputs[o]);
      std::memcpy(static_cast<char*>(outputs[o].raw_data()) + run->begin * row_bytes,
                  value.raw_data(), value.byte_size());
    }
  }
  return outputs;
}

absl::StatusOr<std::vector<Tensor>> PipelineReplica::WholeOutputs(
    const std::vector<std::shared_ptr<ExecutionPlan>>& plans, int64_t chunk, int64_t rows) const {
  const Graph& whole = model_->graph();
  std::vector<Tensor> outputs;
  for (int v : whole.outputs) {
    std::optional<TensorType> type;
    for (size_t p = 0; p < parts_.size() && !type.has_value(); ++p) {
      const std::vector<int>& outs = placed_.parts[p].graph.outputs;
      if (std::find(outs.begin(), outs.end(), v) != outs.end()) type = plans[p]->value_types()[v];
    }
    if (options_.sum_outputs) {
      if (!type.has_value() || type->dtype != DType::kFloat32) {
        return absl::UnimplementedError(
            absl::StrCat("output '", whole.values[v].name,
                         "' is not float32, which summing micro-batches needs"));
      }
      outputs.push_back(Tensor::Host(type->dtype, type->shape));
      continue;
    }
    if (!type.has_value() || type->shape.empty() || type->shape[0] != chunk) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", whole.values[v].name,
          "' does not keep the batch's rows in dim 0, which a pipeline's micro-batches need"));
    }
    Shape shape = type->shape;
    shape[0] = rows;
    outputs.push_back(Tensor::Host(type->dtype, shape));
  }
  return outputs;
}

absl::Status PipelineReplica::health() const {
  for (const auto& part : parts_) {
    if (absl::Status health = part->replica->device().health(); !health.ok()) {
      return InContext(part->context, health);
    }
  }
  return absl::OkStatus();
}

std::vector<PipelineReplica::PartStats> PipelineReplica::Stats() const {
  std::vector<PartStats> stats;
  for (const auto& part : parts_) {
    absl::MutexLock lock(&part->mu);
    stats.push_back(part->stats);
  }
  return stats;
}

}  // namespace replicad
