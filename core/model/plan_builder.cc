#include "core/model/plan_builder.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"
#include "core/model/data_dependent_part.h"
#include "core/model/node_spec.h"
#include "core/ops/constant_value.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"
#include "core/ops/value_shaped.h"

namespace replicad {

absl::Status ExecutionPlan::Builder::NodeError(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("node '", node.name, "' (", node.op_type,
                                                  "): ", status.message()));
}

absl::Status ExecutionPlan::Builder::Build(const std::vector<Shape>& input_shapes) {
  REPLICAD_RETURN_IF_ERROR(BindInitializersAndInputs(input_shapes));
  for (const Node& node : graph_.nodes) {
    if (absl::Status s = AddNode(node); !s.ok()) return NodeError(node, s);
  }
  if (plan_.part_ != nullptr) {
    // Every output comes from the host after the part: the part reads those
    // it does not compute.
    for (int v : graph_.outputs) {
      if (in_part_[v]) continue;
      if (host_values_[v] != nullptr) {
        plan_.part_->AddKnown(v, host_values_[v]);
      } else {
        part_reads_[v] = true;
      }
    }
    // Create builds again, knowing which values the part reads.
    if (!second_build_) return absl::OkStatus();
    KeepPartInputsAlive();
  }
  std::vector<bool> dropped = ViewsInsteadOfCopies();
  OutputsOverDeadInputs(dropped);
  DropSteps(dropped);
  REPLICAD_RETURN_IF_ERROR(PlaceOutputs());
  REPLICAD_RETURN_IF_ERROR(PlaceIntermediates());
  REPLICAD_RETURN_IF_ERROR(PlaceWorkspace());
  plan_.value_types_ = types_;
  // Constant uploads done before the first Run, and their failures (which
  // EnqueueCopy can only keep for Synchronize) this plan's, not a later one's.
  return device_.Synchronize();
}

absl::Status ExecutionPlan::Builder::BindInitializersAndInputs(
    const std::vector<Shape>& input_shapes) {
  if (input_shapes.size() != graph_.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan needs ", graph_.inputs.size(), " input shapes; received ", input_shapes.size()));
  }
  for (const auto& [v, tensor] : graph_.initializers) {
    auto it = weights_.find(v);
    if (it == weights_.end()) {
      return absl::InternalError(
          absl::StrCat("no device copy of initializer '", graph_.values[v].name, "'"));
    }
    types_[v] = tensor.type();
    host_values_[v] = &tensor;
    plan_.value_ptrs_[v] = it->second.raw_data();
  }
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const int v = graph_.inputs[i];
    types_[v] = TensorType{graph_.values[v].type.dtype, input_shapes[i]};
    plan_.input_types_.push_back(*types_[v]);
    plan_.input_values_.push_back(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelSpec> ExecutionPlan::Builder::SpecFor(const Node& node) {
  KernelSpec spec = NodeSpec(node, graph_.opset);
  for (int v : node.inputs) {
    if (v == Node::kAbsentInput) {
      spec.inputs.push_back(std::nullopt);
      spec.constant_inputs.push_back(nullptr);
      continue;
    }
    if (!types_[v]) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", graph_.values[v].name, "' is produced by no node"));
    }
    spec.inputs.push_back(types_[v]);
    spec.constant_inputs.push_back(host_values_[v]);
  }
  return spec;
}

bool ExecutionPlan::Builder::NeedsRequestValues(const Node& node) const {
  const auto unknown = [&](int v) { return v >= 0 && host_values_[v] == nullptr; };
  for (int v : node.inputs) {
    if (v >= 0 && in_part_[v]) return true;
  }
  if (node.op_type == "If") return !node.inputs.empty() && unknown(node.inputs[0]);
  const OpDefinition* op = FindOp(node.op_type);
  if (op == nullptr) return false;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (op->NeedsValue(i) && unknown(node.inputs[i])) return true;
  }
  return false;
}

absl::StatusOr<ExecutionPlan::Builder::Guarded> ExecutionPlan::Builder::GuardsOf(
    const Node& node) const {
  bool request = false;
  for (const Guard& guard : node.guards) {
    const int v = guard.condition;
    if (host_values_[v] != nullptr) {
      REPLICAD_ASSIGN_OR_RETURN(bool holds, IfCondition(node.name, *host_values_[v]));
      if (holds != guard.branch) return Guarded::kSkipped;
    } else if (!in_part_[v] && !types_[v]) {
      return Guarded::kSkipped;  // Its own branch was not taken.
    } else {
      request = true;
    }
  }
  return request ? Guarded::kByRequest : Guarded::kRuns;
}

absl::Status ExecutionPlan::Builder::AddToPart(const Node& node) {
  if (plan_.part_ == nullptr) {
    Device* host = device_.host_folding_device();
    if (host == nullptr) {
      return absl::UnimplementedError(
          "computes what depends on the request's values, which plans on this device run "
          "on a host device; it has none");
    }
    plan_.part_ = std::make_unique<DataDependentPart>(graph_, *host);
  }
  std::vector<int> reads = node.inputs;
  for (const Guard& guard : node.guards) reads.push_back(guard.condition);
  for (int v : reads) {
    // Computed by the part, or never (an If's branch not taken when the
    // plan was made): nothing to hand over.
    if (v < 0 || in_part_[v] || !types_[v]) continue;
    if (host_values_[v] != nullptr) {
      plan_.part_->AddKnown(v, host_values_[v]);
    } else {
      part_reads_[v] = true;
    }
  }
  for (int v : node.outputs) in_part_[v] = true;
  plan_.part_->AddNode(node);
  return absl::OkStatus();
}

absl::Status ExecutionPlan::Builder::AddKnownIf(const Node& node) {
  const size_t n = node.outputs.size();
  if (node.inputs.size() != 2 * n + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected the condition and 2 x ", n, " branch outputs, received ", node.inputs.size()));
  }
  REPLICAD_ASSIGN_OR_RETURN(bool then_taken, IfCondition(node.name, *host_values_[node.inputs[0]]));
  for (size_t o = 0; o < n; ++o) {
    const int taken = node.inputs[1 + o + (then_taken ? 0 : n)];
    if (taken < 0 || !types_[taken]) {
      return absl::InvalidArgumentError(absl::StrCat("branch output ", o, " is not computed"));
    }
    if (host_values_[taken] != nullptr) {
      REPLICAD_RETURN_IF_ERROR(AddKnownValue(node.outputs[o], *host_values_[taken]));
      continue;
    }
    plan_.passed_on_.push_back(Node{
        absl::StrCat(node.name, "/output_", o), "Identity", {taken}, {node.outputs[o]}, {}, {}});
    REPLICAD_RETURN_IF_ERROR(AddNode(plan_.passed_on_.back()));
  }
  return absl::OkStatus();
}

void ExecutionPlan::Builder::KeepPartInputsAlive() {
  const int end = static_cast<int>(plan_.steps_.size());
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    if (!part_reads_[v]) continue;
    plan_.part_inputs_.push_back(static_cast<int>(v));
    if (first_step_[v] >= 0) last_step_[v] = end;
  }
}

absl::Status ExecutionPlan::Builder::AddNode(const Node& node) {
  REPLICAD_ASSIGN_OR_RETURN(Guarded guarded, GuardsOf(node));
  // A branch not taken: its If reads the other.
  if (guarded == Guarded::kSkipped) return absl::OkStatus();
  if (guarded == Guarded::kByRequest || NeedsRequestValues(node)) return AddToPart(node);
  if (node.op_type == "If") return AddKnownIf(node);
  absl::StatusOr<KernelSpec> spec = SpecFor(node);
  if (!spec.ok()) return spec.status();
  if (node.op_type == "Constant") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(*spec));
    return AddKnownValue(node.outputs[0], std::move(value));
  }
  const OpDefinition* op = FindOp(node.op_type);
  if (op == nullptr) return absl::UnimplementedError("unsupported operator");
  if (op->evaluate != nullptr) {  // Every input is known (NeedsRequestValues).
    REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> values, op->evaluate(*spec));
    for (size_t o = 0; o < node.outputs.size() && o < values.size(); ++o) {
      REPLICAD_RETURN_IF_ERROR(AddKnownValue(node.outputs[o], std::move(values[o])));
    }
    return absl::OkStatus();
  }
  REPLICAD_RETURN_IF_ERROR(op->infer(&*spec));
  // A model file can ask for outputs no machine holds (Tile by 2^62):
  // refused before anything is allocated, naming the node.
  REPLICAD_RETURN_IF_ERROR(CheckOutputBytes(*spec, int64_t{1} << 40));
  if (spec->outputs.size() < node.outputs.size()) {
    return absl::UnimplementedError(absl::StrCat("the engine computes ", spec->outputs.size(),
                                                 " outputs; the model asks for ",
                                                 node.outputs.size()));
  }
  spec->outputs.resize(node.outputs.size());
  // Shape's value follows from its input's type, which the plan knows, so
  // Shape -> Gather -> Concat -> Reshape chains fold away at plan time.
  if (node.op_type == "Shape") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(*spec));
    return AddKnownValue(node.outputs[0], std::move(value));
  }
  const bool known = std::all_of(node.inputs.begin(), node.inputs.end(),
                                 [&](int v) { return v < 0 || host_values_[v] != nullptr; });
  spec->native_output = !known && KeepsNativeLayout(node);
  if (std::any_of(node.inputs.begin(), node.inputs.end(),
                  [&](int v) { return v >= 0 && !layouts_[v].empty(); })) {
    for (int v : node.inputs) spec->input_layouts.push_back(v >= 0 ? layouts_[v] : "");
  }
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = device_.MakeKernel(*spec);
  if (!kernel.ok()) {
    Device* host = device_.host_folding_device();
    if (known && host != nullptr && absl::IsUnimplemented(kernel.status())) {
      return FoldOnHost(node, *spec, *host);
    }
    return kernel.status();
  }
  if (known) return Fold(node, *spec, **kernel);
  if (spec->native_output) {
    layouts_[node.outputs[0]] = (*kernel)->native_output_layout();
    native_bytes_[node.outputs[0]] = (*kernel)->native_output_bytes();
  }
  AddStep(node, *spec, *std::move(kernel));
  return absl::OkStatus();
}

bool ExecutionPlan::Builder::KeepsNativeLayout(const Node& node) const {
  static constexpr const char* kProducers[] = {"Conv",    "Add",         "Mul",        "Concat",
                                               "MaxPool", "AveragePool", "QLinearConv"};
  if (std::find_if(std::begin(kProducers), std::end(kProducers),
                   [&](const char* op) { return node.op_type == op; }) == std::end(kProducers) ||
      node.outputs.size() != 1) {
    return false;
  }
  const int v = node.outputs[0];
  if (is_output_[v] || part_reads_[v] || readers_[v].empty()) return false;
  return std::all_of(readers_[v].begin(), readers_[v].end(),
                     [&](const Node* reader) { return TakesNativeLayout(*reader, v); });
}

bool ExecutionPlan::Builder::TakesNativeLayout(const Node& reader, int v) {
  const auto uses = std::count(reader.inputs.begin(), reader.inputs.end(), v);
  // A Conv reads its X, and the addend of a fused residual Add (input 3),
  // in any layout; its weights and bias stay row-major.
  if (reader.op_type == "Conv") {
    return uses == 1 &&
           (reader.inputs[0] == v || (reader.inputs.size() > 3 && reader.inputs[3] == v));
  }
  if (reader.op_type == "Add" || reader.op_type == "Mul") return uses == 1;
  // An int8 convolution reads its x in any layout (int8 ones, from another
  // QLinearConv: a chain of them, as a QDQ model fused becomes, passes
  // channels-last values with no reorder between).
  if (reader.op_type == "QLinearConv") return uses == 1 && reader.inputs[0] == v;
  // A ReduceMean over the spatial dims reads the layout in place (the CPU
  // backend's global average pooling); others reorder it first.
  if (reader.op_type == "ReduceMean") return reader.inputs[0] == v && uses == 1;
  // A 3-D pooling (kernel_shape of 3) loops over row-major values.
  if (reader.op_type == "MaxPool" || reader.op_type == "AveragePool") {
    const std::vector<int64_t> kernel =
        reader.attributes.GetInts("kernel_shape", {}).value_or(std::vector<int64_t>{});
    return kernel.size() != 3;
  }
  return reader.op_type == "Concat" || reader.op_type == "GlobalAveragePool";
}

absl::Status ExecutionPlan::Builder::AddKnownValue(int v, Tensor host) {
  types_[v] = host.type();
  plan_.host_constants_.push_back(std::move(host));
  const Tensor& value = plan_.host_constants_.back();
  host_values_[v] = &value;
  absl::StatusOr<std::shared_ptr<Buffer>> copy = device_.Allocate(value.byte_size());
  if (!copy.ok()) return copy.status();
  device_.EnqueueCopy(value.raw_data(), value.location(), (*copy)->data(),
                      device_.memory_location(), value.byte_size());
  plan_.value_ptrs_[v] = (*copy)->data();
  plan_.constants_.push_back(*std::move(copy));
  return absl::OkStatus();
}

absl::Status ExecutionPlan::Builder::Fold(const Node& node, const KernelSpec& spec,
                                          Kernel& kernel) {
  std::vector<void*> args;
  for (int v : node.inputs) args.push_back(v < 0 ? nullptr : plan_.value_ptrs_[v]);
  std::vector<std::shared_ptr<Buffer>> outputs;
  for (const TensorType& type : spec.outputs) {
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_.Allocate(ByteSize(type));
    if (!buffer.ok()) return buffer.status();
    args.push_back((*buffer)->data());
    outputs.push_back(*std::move(buffer));
  }
  std::shared_ptr<Buffer> workspace;
  if (kernel.workspace_bytes() > 0) {
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = device_.Allocate(kernel.workspace_bytes());
    if (!buffer.ok()) return buffer.status();
    workspace = *std::move(buffer);
    kernel.SetWorkspace(workspace->data());
  }
  // Folded at Create, outside any training step.
  absl::Status status;
  device_.Enqueue(
      [&] { status = kernel.Run(RunContext{}, args.data(), args.data() + node.inputs.size()); });
  REPLICAD_RETURN_IF_ERROR(device_.Synchronize());
  if (!status.ok()) return status;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const int v = node.outputs[o];
    Tensor host = Tensor::Host(spec.outputs[o].dtype, spec.outputs[o].shape);
    device_.EnqueueCopy(outputs[o]->data(), device_.memory_location(), host.raw_data(),
                        MemoryLocation{}, host.byte_size());
    types_[v] = host.type();
    plan_.host_constants_.push_back(std::move(host));
    host_values_[v] = &plan_.host_constants_.back();
    plan_.value_ptrs_[v] = outputs[o]->data();
    plan_.constants_.push_back(std::move(outputs[o]));
  }
  return device_.Synchronize();
}

absl::Status ExecutionPlan::Builder::FoldOnHost(const Node& node, KernelSpec spec, Device& host) {
  spec.native_output = false;
  spec.input_layouts.clear();
  // Slots of one process share the host device: one fold at a time.
  absl::MutexLock lock(&HostFoldingMutex());
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, host.MakeKernel(spec));
  std::vector<void*> args;
  for (int v : node.inputs) {
    args.push_back(v < 0 ? nullptr : const_cast<void*>(host_values_[v]->raw_data()));
  }
  std::vector<Tensor> outputs;
  for (const TensorType& type : spec.outputs) {
    outputs.push_back(Tensor::Host(type.dtype, type.shape));
    args.push_back(outputs.back().raw_data());
  }
  std::vector<char> workspace(kernel->workspace_bytes());
  kernel->SetWorkspace(workspace.data());
  absl::Status status;
  host.Enqueue(
      [&] { status = kernel->Run(RunContext{}, args.data(), args.data() + node.inputs.size()); });
  REPLICAD_RETURN_IF_ERROR(host.Synchronize());
  REPLICAD_RETURN_IF_ERROR(status);
  for (size_t o = 0; o < outputs.size(); ++o) {
    REPLICAD_RETURN_IF_ERROR(AddKnownValue(node.outputs[o], std::move(outputs[o])));
  }
  return absl::OkStatus();
}

void ExecutionPlan::Builder::AddStep(const Node& node, const KernelSpec& spec,
                                     std::unique_ptr<Kernel> kernel) {
  const int step = static_cast<int>(plan_.steps_.size());
  Step s;
  s.kernel = std::move(kernel);
  s.node = &node;
  s.args_begin = plan_.arg_values_.size();
  s.num_inputs = node.inputs.size();
  s.num_outputs = node.outputs.size();
  for (int v : node.inputs) {
    plan_.arg_values_.push_back(v);
    if (v >= 0 && first_step_[v] >= 0) last_step_[v] = step;
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const int v = node.outputs[o];
    types_[v] = spec.outputs[o];
    plan_.arg_values_.push_back(v);
    if (!is_output_[v]) first_step_[v] = last_step_[v] = step;
  }
  plan_.steps_.push_back(std::move(s));
}

}  // namespace replicad
