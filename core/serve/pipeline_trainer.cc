#include "core/serve/pipeline_trainer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/train/training_graph.h"

namespace replicad {
namespace {

// Each node's context: the rules' for the forward pass and the loss; a
// backward node ("FORWARD/Op_k", training_graph.cc) its forward node's.
absl::StatusOr<std::vector<std::string>> TrainingContexts(
    const TrainingGraph& training, const std::vector<PlacementRule>& rules,
    const std::vector<std::string>& contexts) {
  const Graph& graph = training.graph;
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> context_of,
                            NodeContexts(graph, rules, contexts));
  std::map<std::string, std::string> forward;
  for (int n = 0; n < training.first_backward_node; ++n) {
    forward.emplace(graph.nodes[n].name, context_of[n]);
  }
  for (size_t n = training.first_backward_node; n < graph.nodes.size(); ++n) {
    const std::string& name = graph.nodes[n].name;
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos) continue;
    auto it = forward.find(name.substr(0, slash));
    if (it != forward.end()) context_of[n] = it->second;
  }
  return context_of;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineTrainer>> PipelineTrainer::Create(
    std::shared_ptr<const Model> model, const std::vector<PlacementRule>& rules,
    const std::vector<SlotAssignment>& contexts, const PipelineReplica::DeviceMaker& make_device,
    const TrainerOptions& options, int micro_batches) {
  if (options.precision != ComputePrecision::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("training through a pipeline computes fp32 only, not ",
                     ComputePrecisionName(options.precision)));
  }
  REPLICAD_RETURN_IF_ERROR(ValidateOptimizerConfig(options.optimizer));
  REPLICAD_ASSIGN_OR_RETURN(TrainingGraph training,
                            BuildTrainingGraph(model->graph(), options.loss, options.precision));
  if (!training.buffers.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", model->name(), "' keeps running statistics ('",
        model->graph().values[training.buffers[0]].name,
        "', BatchNormalization in training form); training it through a pipeline, whose "
        "micro-batches would each normalise by their own rows, is not implemented"));
  }
  // The targets' rank, which the graph leaves open: the pipeline plans each
  // part once at one row. Class labels [N]; otherwise the loss's output's.
  Value& targets = training.graph.values[training.graph.inputs[training.num_model_inputs]];
  if (targets.type.shape.empty()) {
    const int output = options.loss.output.empty() ? 0 : model->OutputIndex(options.loss.output);
    targets.type.shape = targets.type.dtype == DType::kInt64 || output < 0
                             ? Shape{kAnyDim}
                             : model->outputs()[output].type.shape;
  }
  std::vector<std::string> names;
  for (const SlotAssignment& slot : contexts) names.push_back(slot.name);
  REPLICAD_ASSIGN_OR_RETURN(std::vector<std::string> context_of,
                            TrainingContexts(training, rules, names));
  REPLICAD_ASSIGN_OR_RETURN(PlacedGraph placed, PlaceNodes(training.graph, context_of));

  std::unique_ptr<PipelineTrainer> trainer(new PipelineTrainer());
  trainer->micro_batches_ = micro_batches;
  std::vector<int64_t> sizes;
  for (int v : training.parameters) {
    trainer->names_.push_back(model->graph().values[v].name);
    const Tensor& initial = model->graph().initializers.at(v);
    Tensor copy = Tensor::Host(DType::kFloat32, initial.shape());
    std::memcpy(copy.raw_data(), initial.raw_data(), initial.byte_size());
    trainer->parameters_.push_back(std::move(copy));
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
  REPLICAD_ASSIGN_OR_RETURN(trainer->pipeline_,
                            PipelineReplica::Create(std::move(graph_model), std::move(placed),
                                                    contexts, make_device, pipeline_options));
  return trainer;
}

absl::StatusOr<PipelineTrainer::StepResult> PipelineTrainer::Step(const std::vector<Tensor>& inputs,
                                                                  const Tensor& targets) {
  std::vector<Tensor> all = inputs;
  all.push_back(targets);
  all.insert(all.end(), parameters_.begin(), parameters_.end());
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, pipeline_->Run(all, micro_batches_));
  const int64_t rows = targets.shape().empty() ? 1 : targets.shape()[0];
  const float scale = 1.0f / static_cast<float>(rows);
  std::vector<float*> parameters;
  std::vector<const float*> gradients;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    Tensor& gradient = outputs[gradient_outputs_begin_ + p];
    for (int64_t e = 0; e < gradient.num_elements(); ++e) gradient.data<float>()[e] *= scale;
    parameters.push_back(parameters_[p].data<float>());
    gradients.push_back(gradient.data<float>());
  }
  REPLICAD_RETURN_IF_ERROR(optimizer_->Step(parameters, gradients));
  return StepResult{static_cast<double>(*outputs[0].data<float>()) / static_cast<double>(rows),
                    optimizer_->step()};
}

std::map<std::string, Tensor> PipelineTrainer::Parameters() const {
  std::map<std::string, Tensor> named;
  for (size_t p = 0; p < parameters_.size(); ++p) named.emplace(names_[p], parameters_[p]);
  return named;
}

}  // namespace replicad
