#include "core/serve/pipeline_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/clock.h"
#include "core/base/status_macros.h"
#include "core/train/finite_values.h"
#include "core/train/training_batch.h"

namespace replicad {
namespace {

// A host float32 tensor of `t`'s bytes, sharing nothing with it.
Tensor OwnCopy(const Tensor& t) {
  Tensor copy = Tensor::Host(DType::kFloat32, t.shape());
  std::memcpy(copy.raw_data(), t.raw_data(), t.byte_size());
  return copy;
}

// Each training node's context: a forward node the model's node of its name's;
// a backward node ("FORWARD/Op_k", training_graph.cc) its forward node's;
// the loss, and anything else, its first computed input's.
std::vector<std::string> TrainingContexts(const TrainingGraph& training, const Graph& model,
                                          const std::vector<std::string>& model_context_of,
                                          const std::string& fallback) {
  std::map<std::string, std::string> by_name;
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    by_name.emplace(model.nodes[n].name, model_context_of[n]);
  }
  const Graph& graph = training.graph;
  std::vector<std::string> context_of(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    std::string name = graph.nodes[n].name;
    if (static_cast<int>(n) >= training.first_backward_node) {
      const size_t slash = name.rfind('/');
      if (slash == std::string::npos) continue;
      name.resize(slash);
    }
    auto it = by_name.find(name);
    if (it != by_name.end()) context_of[n] = it->second;
  }
  FollowInputs(graph, fallback, &context_of);
  return context_of;
}

// What a pipeline cannot train yet, named.
absl::Status TrainableThroughPipeline(const Model& model, const TrainingGraph& training,
                                      const TrainerOptions& options) {
  if (options.precision == ComputePrecision::kFloat16) {
    // fp16 scales the loss (a graph input each step) and skips the steps
    // that overflow, which the pipeline does not carry yet.
    return absl::UnimplementedError(
        "precision: training through a pipeline computes fp32, tf32 or bf16, not fp16 (its "
        "loss scaling is not carried through a pipeline)");
  }
  if (!training.buffers.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", model.name(), "' keeps running statistics ('",
        model.graph().values[training.buffers[0]].name,
        "', BatchNormalization in training form); training it through a pipeline, whose "
        "micro-batches would each normalise by their own rows, is not implemented"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineTrainer>> PipelineTrainer::Create(
    std::shared_ptr<const Model> model, const std::vector<std::string>& context_of,
    const std::vector<std::vector<SlotAssignment>>& copies,
    const PipelineReplica::DeviceMaker& make_device, const TrainerOptions& options,
    int micro_batches) {
  if (context_of.size() != model->graph().nodes.size() || copies.empty() || copies[0].empty()) {
    return absl::InternalError(absl::StrCat("pipeline trainer: ", context_of.size(),
                                            " node contexts for ", model->graph().nodes.size(),
                                            " nodes, over ", copies.size(), " copies"));
  }
  REPLICAD_RETURN_IF_ERROR(ValidateOptimizerConfig(options.optimizer));
  REPLICAD_ASSIGN_OR_RETURN(TrainingGraph training,
                            BuildTrainingGraph(model->graph(), options.loss, options.precision));
  REPLICAD_RETURN_IF_ERROR(TrainableThroughPipeline(*model, training, options));
  // The targets' rank, which the graph leaves open: the pipeline plans each
  // part once at one row. Class labels [N]; otherwise the loss's output's.
  Value& targets = training.graph.values[training.graph.inputs[training.num_model_inputs]];
  if (targets.type.shape.empty()) {
    const int output = options.loss.output.empty() ? 0 : model->OutputIndex(options.loss.output);
    targets.type.shape = targets.type.dtype == DType::kInt64 || output < 0
                             ? Shape{kAnyDim}
                             : model->outputs()[output].type.shape;
  }
  REPLICAD_ASSIGN_OR_RETURN(
      PlacedGraph placed,
      PlaceNodes(training.graph,
                 TrainingContexts(training, model->graph(), context_of, copies[0][0].name)));

  std::unique_ptr<PipelineTrainer> trainer(new PipelineTrainer());
  trainer->micro_batches_ =
      micro_batches > 0 ? micro_batches : static_cast<int>(4 * placed.parts.size());
  trainer->non_finite_steps_ = options.non_finite_steps;
  trainer->seed_ = options.seed;
  std::vector<int64_t> sizes;
  for (int v : training.parameters) {
    const Tensor& initial = model->graph().initializers.at(v);
    trainer->parameters_.push_back(OwnCopy(initial));
    sizes.push_back(initial.num_elements());
  }
  trainer->gradient_outputs_begin_ = training.classification ? 2 : 1;
  REPLICAD_ASSIGN_OR_RETURN(trainer->optimizer_, Optimizer::Create(options.optimizer, sizes));
  // Inputs: the model's, the targets, then the parameters (whole).
  PipelineReplica::Options pipeline_options;
  pipeline_options.whole_inputs.assign(training.graph.inputs.size(), false);
  for (size_t i = training.num_model_inputs + 1; i < training.graph.inputs.size(); ++i) {
    pipeline_options.whole_inputs[i] = true;
  }
  pipeline_options.sum_outputs = true;
  auto graph_model = std::make_shared<const Model>(absl::StrCat(model->name(), ".training"),
                                                   model->source(), training.graph);
  for (const std::vector<SlotAssignment>& contexts : copies) {
    REPLICAD_ASSIGN_OR_RETURN(
        std::unique_ptr<PipelineReplica> pipeline,
        PipelineReplica::Create(graph_model, placed, contexts, make_device, pipeline_options));
    trainer->pipelines_.push_back(std::move(pipeline));
  }
  trainer->model_ = std::move(model);
  trainer->training_ = std::move(training);
  return trainer;
}

absl::StatusOr<std::vector<Tensor>> PipelineTrainer::SumOverPipelines(
    const std::vector<Tensor>& inputs, const Tensor& targets, int64_t rows) {
  const std::vector<BatchSlice> slices =
      SplitBatch(rows, std::vector<double>(pipelines_.size(), 1.0));
  std::vector<absl::StatusOr<std::vector<Tensor>>> sums(slices.size(),
                                                        absl::UnknownError("not run"));
  const auto run = [&](size_t i) {
    const BatchSlice& slice = slices[i];
    std::vector<Tensor> all;
    for (const Tensor& t : inputs) {
      absl::StatusOr<Tensor> own = t.SliceRows(slice.begin, slice.end);
      if (!own.ok()) return void(sums[i] = own.status());
      all.push_back(*std::move(own));
    }
    absl::StatusOr<Tensor> own_targets = targets.SliceRows(slice.begin, slice.end);
    if (!own_targets.ok()) return void(sums[i] = own_targets.status());
    all.push_back(*std::move(own_targets));
    all.insert(all.end(), parameters_.begin(), parameters_.end());
    // The step's context: Dropout's masks by the batch's row, as one slot's.
    const RunContext step{step_ + 1, seed_, slice.begin, rows, 0, nullptr};
    sums[i] = pipelines_[slice.slot]->Run(all, micro_batches_, nullptr, nullptr, &step);
  };
  std::vector<std::thread> others;
  for (size_t i = 1; i < slices.size(); ++i) others.emplace_back(run, i);
  run(0);
  for (std::thread& t : others) t.join();
  for (auto& sum : sums) REPLICAD_RETURN_IF_ERROR(sum.status());
  std::vector<Tensor> total = *std::move(sums[0]);
  for (size_t i = 1; i < sums.size(); ++i) {
    for (size_t o = 0; o < total.size(); ++o) {
      float* into = total[o].data<float>();
      const float* add = (*sums[i])[o].data<float>();
      for (int64_t e = 0; e < total[o].num_elements(); ++e) into[e] += add[e];
    }
  }
  return total;
}

absl::Status PipelineTrainer::Validate(const std::vector<Tensor>& inputs,
                                       const Tensor& targets) const {
  int64_t rows = 0;
  return ValidateTrainingBatch(training_, inputs, targets, &rows);
}

std::string PipelineTrainer::NonFiniteReason(const std::vector<float*>& parameters,
                                             const std::vector<const float*>& gradients) const {
  for (size_t p = 0; p < gradients.size(); ++p) {
    if (!AllFinite(gradients[p], parameters_[p].num_elements())) {
      return NonFiniteGradientReason(training_, p);
    }
  }
  const std::optional<Optimizer::NonFiniteUpdate> bad =
      optimizer_->FirstNonFiniteUpdate(parameters, gradients);
  return bad ? NonFiniteUpdateReason(training_, *optimizer_, *bad) : "";
}

absl::StatusOr<TrainerStepResult> PipelineTrainer::Step(const std::vector<Tensor>& inputs,
                                                        const Tensor& targets) {
  int64_t rows = 0;
  REPLICAD_RETURN_IF_ERROR(ValidateTrainingBatch(training_, inputs, targets, &rows));
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, SumOverPipelines(inputs, targets, rows));
  TrainerStepResult result;
  result.samples = rows;
  result.loss = static_cast<double>(*outputs[0].data<float>()) / static_cast<double>(rows);
  if (training_.classification) {
    result.accuracy = static_cast<double>(*outputs[1].data<float>()) / static_cast<double>(rows);
  }
  // The mean over the batch, as DataParallelTrainer takes it.
  const float scale = 1.0f / static_cast<float>(rows);
  std::vector<float*> parameters;
  std::vector<const float*> gradients;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    Tensor& gradient = outputs[gradient_outputs_begin_ + p];
    for (int64_t e = 0; e < gradient.num_elements(); ++e) gradient.data<float>()[e] *= scale;
    parameters.push_back(parameters_[p].data<float>());
    gradients.push_back(gradient.data<float>());
  }
  std::string why = std::isfinite(result.loss) ? NonFiniteReason(parameters, gradients)
                                               : NonFiniteLossReason(result.loss);
  if (!why.empty()) {
    if (non_finite_steps_ == TrainerOptions::NonFiniteSteps::kRefuse) return StepNotApplied(why);
    result.step = step_;
    result.skipped = std::move(why);
    return result;
  }
  const auto optimizer_start = std::chrono::steady_clock::now();
  REPLICAD_RETURN_IF_ERROR(optimizer_->Step(parameters, gradients));
  result.optimizer_seconds = SecondsSince(optimizer_start);
  result.step = ++step_;
  return result;
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> PipelineTrainer::OptimizerState()
    const {
  return optimizer_->State();
}

absl::Status PipelineTrainer::Resume(int64_t step,
                                     const std::vector<std::pair<std::string, Tensor>>& state) {
  if (!state.empty()) REPLICAD_RETURN_IF_ERROR(optimizer_->Restore(step, state));
  step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> PipelineTrainer::CurrentModel() const {
  Graph graph = model_->graph();
  for (size_t p = 0; p < parameters_.size(); ++p) {
    // A copy: the next step updates the master weights in place.
    graph.initializers.insert_or_assign(training_.parameters[p], OwnCopy(parameters_[p]));
  }
  return std::make_shared<const Model>(model_->name(), model_->source(), std::move(graph));
}

std::map<std::string, Tensor> PipelineTrainer::Parameters() const {
  std::map<std::string, Tensor> named;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    named.emplace(training_.graph.values[training_.parameters[p]].name, parameters_[p]);
  }
  return named;
}

}  // namespace replicad
