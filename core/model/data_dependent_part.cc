#include "core/model/data_dependent_part.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/model/node_spec.h"
#include "core/ops/constant_value.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"
#include "core/ops/value_shaped.h"

namespace replicad {
namespace {

constexpr int64_t kMaxOutputBytes = int64_t{4} << 30;

// `status` naming the node, unless its message already does (op rules do).
absl::Status WithNode(const Node& node, const absl::Status& status) {
  const std::string label = absl::StrCat("node '", node.name, "'");
  if (status.ok() || absl::StartsWith(status.message(), label)) return status;
  return absl::Status(status.code(),
                      absl::StrCat(label, " (", node.op_type, "): ", status.message()));
}

}  // namespace

// A node's kernel, and what it was made for: the input types and the bytes
// of the inputs its shape rule reads (a Reshape's shape, a Slice's starts),
// which the kernel may have baked in.
struct DataDependentPart::CachedKernel {
  std::vector<std::optional<TensorType>> inputs;
  std::vector<std::string> shape_values;
  std::vector<TensorType> outputs;
  std::unique_ptr<Kernel> kernel;
  std::shared_ptr<Buffer> workspace;
};

DataDependentPart::DataDependentPart(const Graph& graph, Device& host)
    : graph_(graph), host_(host) {}

DataDependentPart::~DataDependentPart() = default;

void DataDependentPart::AddNode(const Node& node) {
  nodes_.push_back(&node);
  kernels_.emplace_back();
}

void DataDependentPart::AddKnown(int value, const Tensor* host) { known_[value] = host; }

absl::Mutex& HostFoldingMutex() {
  static absl::Mutex* const mutex = new absl::Mutex();
  return *mutex;
}

absl::Status DataDependentPart::Run(std::vector<std::optional<Tensor>>* values,
                                    const Proceed* proceed) {
  absl::MutexLock lock(&HostFoldingMutex());
  for (const auto& [v, tensor] : known_) (*values)[v] = *tensor;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = *nodes_[i];
    if (proceed != nullptr) {
      if (absl::Status wanted = (*proceed)(); !wanted.ok()) {
        return absl::Status(wanted.code(),
                            absl::StrCat(wanted.message(), "; stopped before node '", node.name,
                                         "' (", node.op_type, ") of the data-dependent part"));
      }
    }
    absl::StatusOr<bool> taken = Taken(node, *values);
    if (!taken.ok()) return WithNode(node, taken.status());
    if (!*taken) continue;
    absl::StatusOr<std::vector<Tensor>> outputs = Evaluate(i, *values);
    if (!outputs.ok()) return WithNode(node, outputs.status());
    for (size_t o = 0; o < node.outputs.size() && o < outputs->size(); ++o) {
      (*values)[node.outputs[o]] = std::move((*outputs)[o]);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DataDependentPart::Taken(const Node& node,
                                              const std::vector<std::optional<Tensor>>& values) {
  for (const Guard& guard : node.guards) {
    const std::optional<Tensor>& condition = values[guard.condition];
    if (!condition) return false;  // Its own branch was not taken.
    REPLICAD_ASSIGN_OR_RETURN(bool holds, IfCondition(node.name, *condition));
    if (holds != guard.branch) return false;
  }
  return true;
}

absl::StatusOr<std::vector<Tensor>> DataDependentPart::Evaluate(
    size_t index, const std::vector<std::optional<Tensor>>& values) {
  const Node& node = *nodes_[index];
  const OpDefinition* op = FindOp(node.op_type);
  if (op == nullptr) return absl::UnimplementedError("unsupported operator");
  KernelSpec spec = NodeSpec(node, graph_.opset);
  std::vector<const Tensor*> inputs;
  for (int v : node.inputs) {
    const Tensor* value = v >= 0 && values[v] ? &*values[v] : nullptr;
    if (v >= 0 && value == nullptr && node.op_type != "If") {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", graph_.values[v].name,
                       "' was not computed (it belongs to an If branch not taken)"));
    }
    inputs.push_back(value);
    spec.inputs.push_back(value != nullptr ? std::optional<TensorType>(value->type())
                                           : std::nullopt);
  }
  spec.constant_inputs = inputs;
  if (node.op_type == "Constant") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(spec));
    return std::vector<Tensor>{std::move(value)};
  }
  if (op->evaluate != nullptr) return op->evaluate(spec);
  // The kernel may bake in the values it is given, so it is given only those
  // its shape rule reads, and kept while they stay the same.
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!op->NeedsValue(i)) spec.constant_inputs[i] = nullptr;
  }
  REPLICAD_RETURN_IF_ERROR(op->infer(&spec));
  // A request decides these shapes (a Range's limit, a Reshape's dims): one
  // asking for more than a node could need is refused before any allocation.
  REPLICAD_RETURN_IF_ERROR(CheckOutputBytes(spec, kMaxOutputBytes));
  if (spec.outputs.size() < node.outputs.size()) {
    return absl::UnimplementedError(absl::StrCat("the engine computes ", spec.outputs.size(),
                                                 " outputs; the model asks for ",
                                                 node.outputs.size()));
  }
  spec.outputs.resize(node.outputs.size());
  if (node.op_type == "Shape") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(spec));
    return std::vector<Tensor>{std::move(value)};
  }
  std::vector<Tensor> outputs;
  bool any_elements = false;
  for (const TensorType& type : spec.outputs) {
    outputs.push_back(Tensor::Host(type.dtype, type.shape));
    any_elements |= outputs.back().num_elements() > 0;
  }
  // Outputs without elements (no detections left) need no kernel, and
  // libraries need not take empty tensors.
  if (!any_elements) return outputs;

  // The bytes of input i that the shape rule read (empty for the others).
  const auto shape_value = [&](size_t i) {
    return op->NeedsValue(i) && inputs[i] != nullptr
               ? absl::string_view(static_cast<const char*>(inputs[i]->raw_data()),
                                   inputs[i]->byte_size())
               : absl::string_view();
  };
  std::unique_ptr<CachedKernel>& cached = kernels_[index];
  bool same = cached != nullptr && cached->inputs == spec.inputs && cached->outputs == spec.outputs;
  for (size_t i = 0; same && i < inputs.size(); ++i)
    same = cached->shape_values[i] == shape_value(i);
  if (!same) {
    auto made = std::make_unique<CachedKernel>();
    REPLICAD_ASSIGN_OR_RETURN(made->kernel, host_.MakeKernel(spec));
    if (made->kernel->workspace_bytes() > 0) {
      made->workspace = Buffer::AllocateHost(made->kernel->workspace_bytes());
      made->kernel->SetWorkspace(made->workspace->data());
    }
    made->inputs = spec.inputs;
    made->outputs = spec.outputs;
    for (size_t i = 0; i < inputs.size(); ++i) made->shape_values.emplace_back(shape_value(i));
    cached = std::move(made);
  }
  std::vector<void*> args;
  for (const Tensor* input : inputs) {
    args.push_back(input == nullptr ? nullptr : input->raw_data());
  }
  for (Tensor& output : outputs) args.push_back(output.raw_data());
  // On this thread (see the class comment): a host device's kernel is
  // complete when Run returns.
  REPLICAD_RETURN_IF_ERROR(
      cached->kernel->Run(RunContext{}, args.data(), args.data() + inputs.size()));
  return outputs;
}

}  // namespace replicad
