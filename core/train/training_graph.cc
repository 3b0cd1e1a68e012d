#include "core/train/training_graph.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/base/status_macros.h"
#include "core/model/compute_precision.h"
#include "core/model/data_dependent_part.h"
#include "core/model/execution_plan.h"
#include "core/model/exporter_forms.h"
#include "core/ops/training_ops.h"
#include "core/train/float16_products.h"
#include "core/train/gradient_rules.h"

namespace replicad {
namespace {

// The GradientBuilder over the graph being built; also keeps each value's
// accumulated gradient.
class Backward : public GradientBuilder {
 public:
  Backward(Graph* graph, const std::vector<bool>* needs_gradient, const ValueTypes* inferred)
      : graph_(graph), needs_gradient_(needs_gradient), inferred_(inferred) {}

  void SetNode(const Node* node) { node_ = node; }
  const Node& node() const override { return *node_; }

  int gradient_of(int value) const {
    auto it = gradients_.find(value);
    return it == gradients_.end() ? -1 : it->second;
  }
  int output_gradient(int i) const override { return gradient_of(node_->outputs[i]); }
  bool wants_gradient(int i) const override {
    const int v = i < static_cast<int>(node_->inputs.size()) ? node_->inputs[i] : -1;
    return v >= 0 && (*needs_gradient_)[v];
  }

  std::vector<int> Emit(std::string_view op_type, std::vector<int> inputs, int num_outputs,
                        Attributes attributes = {}) override {
    Node node;
    node.name = absl::StrCat(node_ != nullptr ? node_->name : "loss", "/", std::string(op_type),
                             "_", graph_->nodes.size());
    node.op_type = std::string(op_type);
    node.inputs = std::move(inputs);
    node.attributes = std::move(attributes);
    for (int o = 0; o < num_outputs; ++o) {
      node.outputs.push_back(NewValue(absl::StrCat(node.name, ":", o)));
    }
    graph_->nodes.push_back(std::move(node));
    return graph_->nodes.back().outputs;
  }

  int Scalar(float value) override {
    Tensor t = Tensor::Host(DType::kFloat32, {});
    *t.data<float>() = value;
    return Constant(std::move(t));
  }

  int Constant(Tensor value) override {
    const int v = NewValue(absl::StrCat("constant_", graph_->values.size()));
    graph_->values[v].type = value.type();
    graph_->initializers.emplace(v, std::move(value));
    return v;
  }

  int opset() const override { return graph_->opset; }

  // The declared type, or where the model declares no shape the one the
  // forward pass computes (`inferred`, when given).
  const TensorType& type(int value) const override {
    const TensorType& declared = graph_->values[value].type;
    if (!declared.shape.empty() || inferred_ == nullptr ||
        value >= static_cast<int>(inferred_->size()) || !(*inferred_)[value].has_value()) {
      return declared;
    }
    return *(*inferred_)[value];
  }

  void AddInputGradient(int i, int gradient) override { AddGradient(node_->inputs[i], gradient); }

  void AddGradient(int value, int gradient) {
    auto [it, inserted] = gradients_.emplace(value, gradient);
    // A value read by several nodes: its gradient is the sum of theirs.
    if (!inserted) it->second = Emit1("Add", {it->second, gradient});
  }

 private:
  int NewValue(std::string name) {
    graph_->values.push_back(Value{std::move(name), TensorType{DType::kFloat32, {}}});
    return static_cast<int>(graph_->values.size()) - 1;
  }

  Graph* graph_;
  const std::vector<bool>* needs_gradient_;
  const ValueTypes* inferred_;
  const Node* node_ = nullptr;
  std::map<int, int> gradients_;
};

}  // namespace

namespace {

// The model output the loss reads.
absl::StatusOr<int> LossInput(const Graph& model, const LossSpec& loss) {
  int loss_input = -1;
  std::vector<std::string> outputs;
  for (int v : model.outputs) {
    if (model.values[v].name == loss.output) loss_input = v;
    outputs.push_back(model.values[v].name);
  }
  if (loss_input < 0) {
    return absl::FailedPreconditionError(absl::StrCat("training.output must name a model output (",
                                                      absl::StrJoin(outputs, ", "), "), received '",
                                                      loss.output, "'"));
  }
  return loss_input;
}

// The values and nodes the loss depends on.
struct LossPath {
  std::vector<bool> values;
  std::vector<bool> nodes;
};

// Found backwards from the loss's input.
LossPath FindLossPath(const Graph& model, int loss_input) {
  LossPath path{std::vector<bool>(model.values.size(), false),
                std::vector<bool>(model.nodes.size(), false)};
  path.values[loss_input] = true;
  for (size_t n = model.nodes.size(); n-- > 0;) {
    const Node& node = model.nodes[n];
    for (int o : node.outputs) path.nodes[n] = path.nodes[n] || path.values[o];
    if (!path.nodes[n]) continue;
    for (int i : node.inputs) {
      if (i >= 0) path.values[i] = true;
    }
  }
  return path;
}

// Parameters: float32 initializers on the path, except `frozen`.
std::vector<int> FindParameters(const Graph& model, const LossPath& path,
                                const std::set<int>& frozen) {
  std::vector<int> parameters;
  for (const auto& [v, tensor] : model.initializers) {
    if (path.values[v] && tensor.dtype() == DType::kFloat32 && frozen.count(v) == 0) {
      parameters.push_back(v);
    }
  }
  return parameters;
}

// The parameters and the values that depend on them, found forwards: those
// need gradients.
std::vector<bool> NeedingGradients(const Graph& model, const LossPath& path,
                                   const std::vector<int>& parameters) {
  std::vector<bool> needs_gradient(model.values.size(), false);
  for (int v : parameters) needs_gradient[v] = true;
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    if (!path.nodes[n]) continue;
    bool any = false;
    for (int i : model.nodes[n].inputs) any = any || (i >= 0 && needs_gradient[i]);
    // Only float values carry gradients: Shape of a value that depends on a
    // parameter (PyTorch's view(x.size(0), -1)) does not.
    for (int o : model.nodes[n].outputs) {
      needs_gradient[o] = any && model.values[o].type.dtype == DType::kFloat32;
    }
  }
  return needs_gradient;
}

// Every node on the path with an output that needs a gradient has a rule.
absl::Status CheckGradientRules(const Graph& model, const LossPath& path,
                                const std::vector<bool>& needs_gradient) {
  std::vector<std::string> missing;
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    const Node& node = model.nodes[n];
    bool wanted = false;
    for (int o : node.outputs) wanted = wanted || needs_gradient[o];
    if (path.nodes[n] && wanted && FindGradientRule(node.op_type) == nullptr) {
      missing.push_back(absl::StrCat(node.op_type, " (node '", node.name, "')"));
    }
  }
  if (missing.empty()) return absl::OkStatus();
  const std::vector<std::string_view> differentiable = DifferentiableOps();
  return absl::UnimplementedError(absl::StrCat(
      "this model cannot be trained: no gradient in replicad yet for ",
      absl::StrJoin(missing, ", "), " (differentiable ops: ",
      absl::StrJoin(std::vector<std::string>(differentiable.begin(), differentiable.end()), ", "),
      ")"));
}

// Forward: the model's graph, pruned to the loss's path, with the
// parameters turned into inputs, after the targets. Returns the targets.
int BuildForward(const Graph& model, const LossPath& path, const LossSpec& loss,
                 TrainingGraph* result) {
  Graph& graph = result->graph;
  graph.values = model.values;
  graph.opset = model.opset;
  graph.inputs = model.inputs;
  result->num_model_inputs = static_cast<int>(model.inputs.size());
  for (size_t n = 0; n < model.nodes.size(); ++n) {
    if (path.nodes[n]) graph.nodes.push_back(model.nodes[n]);
  }
  const std::set<int> parameters(result->parameters.begin(), result->parameters.end());
  for (const auto& [v, tensor] : model.initializers) {
    if (parameters.count(v) == 0) graph.initializers.emplace(v, tensor);
  }
  graph.values.push_back(Value{"targets", TensorType{loss.target_dtype, {}}});
  const int targets = static_cast<int>(graph.values.size()) - 1;
  graph.inputs.push_back(targets);
  for (int v : result->parameters) graph.inputs.push_back(v);
  return targets;
}

// The loss, whose node also seeds the gradient of its input.
void EmitLoss(const LossSpec& loss, int loss_input, int targets, Backward* backward,
              TrainingGraph* result) {
  Graph& graph = result->graph;
  result->loss_input = loss_input;
  int loss_sum = -1;
  if (loss.kind == LossSpec::Kind::kSoftmaxCrossEntropy) {
    const std::vector<int> out = backward->Emit(kSoftmaxCrossEntropy, {loss_input, targets}, 3);
    loss_sum = out[0];
    graph.outputs = {out[0], out[1]};
    result->classification = true;
    result->loss_gradient = out[2];
    backward->AddGradient(loss_input, out[2]);
  } else {
    const std::vector<int> out = backward->Emit(kMeanSquaredError, {loss_input, targets}, 2);
    loss_sum = out[0];
    graph.outputs = {out[0]};
    result->loss_gradient = out[1];
    backward->AddGradient(loss_input, out[1]);
  }
  graph.values[loss_sum].name = "loss_sum";
}

// Backward, in reverse order of the forward nodes (all but the loss's).
// `origins` receives, for each node emitted, the forward node whose rule
// emitted it.
absl::Status EmitBackward(const std::vector<bool>& needs_gradient, Backward* backward,
                          TrainingGraph* result, std::vector<int>* origins) {
  Graph& graph = result->graph;
  const size_t forward_nodes = graph.nodes.size() - 1;
  result->first_backward_node = static_cast<int>(graph.nodes.size());
  for (size_t n = forward_nodes; n-- > 0;) {
    // Copy: emitting appends to graph.nodes, which may move the node.
    const Node node = graph.nodes[n];
    bool has_gradient = false;
    for (int o : node.outputs) has_gradient = has_gradient || backward->gradient_of(o) >= 0;
    if (!has_gradient) continue;
    bool wants = false;
    for (int i : node.inputs) wants = wants || (i >= 0 && needs_gradient[i]);
    if (!wants) continue;
    backward->SetNode(&node);
    REPLICAD_RETURN_IF_ERROR(FindGradientRule(node.op_type)(*backward));
    backward->SetNode(nullptr);
    origins->resize(graph.nodes.size() - result->first_backward_node, static_cast<int>(n));
  }
  return absl::OkStatus();
}

// Builds the training graph with every float32 initializer on the loss's
// path as a parameter, except `frozen`; `ungraded` receives the parameters
// that no gradient reached (Clip's bounds, say), which the caller freezes.
absl::StatusOr<TrainingGraph> Build(const Graph& model, const LossSpec& loss,
                                    ComputePrecision precision, const ValueTypes* inferred,
                                    const std::set<int>& frozen, std::vector<int>* ungraded) {
  int loss_input = -1;
  REPLICAD_ASSIGN_OR_RETURN(loss_input, LossInput(model, loss));
  const LossPath path = FindLossPath(model, loss_input);
  TrainingGraph result;
  result.parameters = FindParameters(model, path, frozen);
  const std::vector<bool> needs_gradient = NeedingGradients(model, path, result.parameters);
  if (result.parameters.empty() || !needs_gradient[loss_input]) {
    return absl::FailedPreconditionError(
        absl::StrCat("nothing to train: no float32 initializer feeds output '", loss.output, "'"));
  }
  REPLICAD_RETURN_IF_ERROR(CheckGradientRules(model, path, needs_gradient));
  const int targets = BuildForward(model, path, loss, &result);
  Backward backward(&result.graph, &needs_gradient, inferred);
  EmitLoss(loss, loss_input, targets, &backward, &result);
  std::vector<int> origins;
  REPLICAD_RETURN_IF_ERROR(EmitBackward(needs_gradient, &backward, &result, &origins));
  for (int v : result.parameters) {
    int gradient = backward.gradient_of(v);
    if (gradient < 0) ungraded->push_back(v);
    result.graph.outputs.push_back(gradient);
  }
  if (precision == ComputePrecision::kFloat16) {
    RoundProductsToFloat16(&result, Float16Products(result, origins));
  }
  if (precision == ComputePrecision::kBFloat16) {
    // The backward pass's weight products as autocast's: the MatMul and
    // Gemm nodes the gradient rules of the forward pass's products emitted
    // read bfloat16 operands and sum float32 (the CPU kernels read the mark;
    // ConvGradData and ConvGradFilter compute float32).
    for (int n : Float16Products(result, origins)) {
      Node& node = result.graph.nodes[n];
      if (n >= result.first_backward_node && (node.op_type == "MatMul" || node.op_type == "Gemm")) {
        node.attributes.Set(kPrecisionAttribute, AttributeValue(std::string("bf16")));
      }
    }
  }
  return result;
}

// A buffer: an initializer a training step updates (a running statistic),
// and the value holding its update.
struct BufferUpdate {
  int initializer;
  int update;
};

uint64_t NameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a.
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Nodes the model marks as computed differently in training
// (kTrainingAttribute) become their training operators.
std::vector<BufferUpdate> RewriteTrainingForms(Graph* graph) {
  std::vector<BufferUpdate> buffers;
  auto new_value = [&](const std::string& name) {
    graph->values.push_back(Value{name, TensorType{DType::kFloat32, {}}});
    return static_cast<int>(graph->values.size()) - 1;
  };
  for (Node& node : graph->nodes) {
    if (node.attributes.GetInt(kTrainingAttribute, 0).value_or(0) == 0) continue;
    Attributes attributes;
    if (node.op_type == "BatchNormalization" && node.inputs.size() == 5) {
      for (const char* name : {"epsilon", "momentum"}) {
        if (node.attributes.Has(name)) attributes.Set(name, *node.attributes.GetFloat(name, 0));
      }
      node.op_type = std::string(kBatchNormTrain);
      node.outputs.resize(1);
      for (const char* what : {"saved_mean", "saved_invstd", "running_mean", "running_var"}) {
        node.outputs.push_back(new_value(absl::StrCat(node.name, ":", what)));
      }
      buffers.push_back({node.inputs[3], node.outputs[3]});
      buffers.push_back({node.inputs[4], node.outputs[4]});
    } else if (node.op_type == "Dropout") {
      if (node.attributes.Has("ratio"))
        attributes.Set("ratio", *node.attributes.GetFloat("ratio", 0));
      attributes.Set("replicad.node_seed", static_cast<int64_t>(NameHash(node.name) >> 1));
      node.op_type = std::string(kDropoutTrain);
      node.outputs.resize(1);
      node.outputs.push_back(new_value(node.name + ":mask"));
    } else {
      continue;
    }
    node.attributes = std::move(attributes);
  }
  return buffers;
}

}  // namespace

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const Graph& model, const LossSpec& loss,
                                                 ComputePrecision precision) {
  std::optional<ValueTypes> undeclared;
  {
    // Its plan's kernels run on the host folding device, which serving
    // plans' data-dependent parts use too: one user at a time.
    absl::MutexLock lock(&HostFoldingMutex());
    undeclared = UndeclaredTypes(model, HostFoldingDevice());
  }
  const ValueTypes* inferred = undeclared ? &*undeclared : nullptr;
  Graph forward = model;
  const std::vector<BufferUpdate> buffers = RewriteTrainingForms(&forward);
  std::set<int> frozen;
  for (const BufferUpdate& buffer : buffers) {
    if (forward.initializers.count(buffer.initializer) == 0) {
      return absl::UnimplementedError(
          absl::StrCat("a running statistic that is not an initializer ('",
                       forward.values[buffer.initializer].name, "') cannot be trained"));
    }
    frozen.insert(buffer.initializer);
  }
  std::vector<int> ungraded;
  absl::StatusOr<TrainingGraph> training =
      Build(forward, loss, precision, inferred, frozen, &ungraded);
  if (training.ok() && !ungraded.empty()) {
    // Initializers the loss reads but does not differentiate (bounds, shapes
    // stored as float) stay constants.
    frozen.insert(ungraded.begin(), ungraded.end());
    ungraded.clear();
    training = Build(forward, loss, precision, inferred, frozen, &ungraded);
    if (training.ok() && !ungraded.empty()) {
      return absl::InternalError(
          absl::StrCat("no gradient reached parameter '", model.values[ungraded[0]].name, "'"));
    }
  }
  if (!training.ok()) return training;
  // Buffers: inputs after the parameters, their updates outputs after the
  // gradients; only those of nodes the loss depends on (the others were pruned).
  Graph& graph = training->graph;
  std::set<int> produced;
  for (const Node& node : graph.nodes) produced.insert(node.outputs.begin(), node.outputs.end());
  for (const BufferUpdate& buffer : buffers) {
    if (produced.count(buffer.update) == 0) continue;
    graph.initializers.erase(buffer.initializer);
    graph.inputs.push_back(buffer.initializer);
    graph.outputs.push_back(buffer.update);
    training->buffers.push_back(buffer.initializer);
  }
  if (precision == ComputePrecision::kBFloat16) {
    MarkProducts(&graph, precision,
                 std::set<int>(training->parameters.begin(), training->parameters.end()),
                 training->first_backward_node);
  }
  if (precision == ComputePrecision::kTensorFloat32) MarkTensorFloat32Products(&graph);
  // After the buffers: the scale is the graph's last input.
  if (precision == ComputePrecision::kFloat16) ScaleLossGradient(&*training);
  return training;
}

absl::StatusOr<ValueTypes> InferForwardTypes(const Graph& model, Device& host) {
  std::vector<Shape> shapes;
  for (int v : model.inputs) {
    Shape shape = model.values[v].type.shape;
    for (int64_t& d : shape) d = d == kAnyDim ? 1 : d;
    shapes.push_back(std::move(shape));
  }
  // A host device reads the graph's own initializers: they are its "device copies".
  std::map<int, Tensor> weights(model.initializers.begin(), model.initializers.end());
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<ExecutionPlan> plan,
                            ExecutionPlan::Create(model, weights, host, shapes));
  return plan->value_types();
}

std::optional<ValueTypes> UndeclaredTypes(const Graph& model, Device* host) {
  const bool undeclared = std::any_of(model.nodes.begin(), model.nodes.end(), [&](const Node& n) {
    return std::any_of(n.outputs.begin(), n.outputs.end(),
                       [&](int v) { return v >= 0 && model.values[v].type.shape.empty(); });
  });
  if (!undeclared || host == nullptr) return std::nullopt;
  absl::StatusOr<ValueTypes> types = InferForwardTypes(model, *host);
  if (!types.ok()) return std::nullopt;
  return *std::move(types);
}

}  // namespace replicad
