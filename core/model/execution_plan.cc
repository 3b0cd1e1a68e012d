#include "core/model/execution_plan.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/model/arena_planner.h"
#include "core/ops/constant_value.h"
#include "core/ops/op_registry.h"

namespace replicad {
namespace {

absl::Status NodeError(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("node '", node.name, "' (", node.op_type,
                                                  "): ", status.message()));
}

size_t ByteSize(const TensorType& type) {
  return static_cast<size_t>(NumElements(type.shape)) * DTypeSize(type.dtype);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExecutionPlan>> ExecutionPlan::Create(
    const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
    const std::vector<Shape>& input_shapes) {
  if (input_shapes.size() != graph.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("plan needs ", graph.inputs.size(),
                                                   " input shapes; received ",
                                                   input_shapes.size()));
  }
  std::unique_ptr<ExecutionPlan> plan(new ExecutionPlan());
  const size_t num_values = graph.values.size();
  std::vector<std::optional<TensorType>> types(num_values);
  // Host values known now (initializers, Constant outputs), for shape rules.
  std::vector<const Tensor*> host_values(num_values, nullptr);
  plan->value_ptrs_.assign(num_values, nullptr);

  for (const auto& [v, tensor] : graph.initializers) {
    types[v] = tensor.type();
    host_values[v] = &tensor;
    auto it = weights.find(v);
    if (it == weights.end()) {
      return absl::InternalError(absl::StrCat("no device copy of initializer '",
                                              graph.values[v].name, "'"));
    }
    plan->value_ptrs_[v] = it->second.raw_data();
  }
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const int v = graph.inputs[i];
    TensorType type{graph.values[v].type.dtype, input_shapes[i]};
    types[v] = type;
    plan->input_types_.push_back(type);
    plan->input_values_.push_back(v);
  }

  // Shape inference and kernels, node by node; first/last step per value for the arena.
  std::vector<int> first_step(num_values, -1), last_step(num_values, -1);
  std::vector<bool> is_output(num_values, false);
  for (int v : graph.outputs) is_output[v] = true;
  for (const Node& node : graph.nodes) {
    if (node.op_type == "Constant") {
      KernelSpec constant_spec;
      constant_spec.op_type = node.op_type;
      constant_spec.node_name = node.name;
      constant_spec.opset = graph.opset;
      constant_spec.attributes = &node.attributes;
      absl::StatusOr<Tensor> value = ConstantValue(constant_spec);
      if (!value.ok()) return NodeError(node, value.status());
      const int v = node.outputs[0];
      types[v] = value->type();
      plan->host_constants_.push_back(*std::move(value));
      host_values[v] = &plan->host_constants_.back();
      absl::StatusOr<std::shared_ptr<Buffer>> copy = device.Allocate(host_values[v]->byte_size());
      if (!copy.ok()) return copy.status();
      device.EnqueueCopy(host_values[v]->raw_data(), MemoryLocation{}, (*copy)->data(),
                         device.memory_location(), host_values[v]->byte_size());
      plan->value_ptrs_[v] = (*copy)->data();
      plan->constants_.push_back(*std::move(copy));
      continue;
    }
    KernelSpec spec;
    spec.op_type = node.op_type;
    spec.node_name = node.name;
    spec.opset = graph.opset;
    spec.attributes = &node.attributes;
    for (int v : node.inputs) {
      if (v == Node::kAbsentInput) {
        spec.inputs.push_back(std::nullopt);
        spec.constant_inputs.push_back(nullptr);
        continue;
      }
      if (!types[v]) {
        return NodeError(node, absl::InvalidArgumentError(absl::StrCat(
                                   "input '", graph.values[v].name, "' is produced by no node")));
      }
      spec.inputs.push_back(types[v]);
      spec.constant_inputs.push_back(host_values[v]);
    }
    const OpDefinition* op = FindOp(node.op_type);
    if (op == nullptr) {
      return NodeError(node, absl::UnimplementedError("unsupported operator"));
    }
    if (absl::Status s = op->infer(&spec); !s.ok()) return NodeError(node, s);
    if (spec.outputs.size() < node.outputs.size()) {
      return NodeError(node, absl::UnimplementedError(absl::StrCat(
                                 "the engine computes ", spec.outputs.size(),
                                 " outputs; the model asks for ", node.outputs.size())));
    }
    spec.outputs.resize(node.outputs.size());
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = device.MakeKernel(spec);
    if (!kernel.ok()) return NodeError(node, kernel.status());

    const int step = static_cast<int>(plan->steps_.size());
    Step s;
    s.kernel = *std::move(kernel);
    s.node = &node;
    s.args_begin = plan->arg_values_.size();
    s.num_inputs = node.inputs.size();
    s.num_outputs = node.outputs.size();
    for (int v : node.inputs) {
      plan->arg_values_.push_back(v);
      if (v >= 0 && first_step[v] >= 0) last_step[v] = step;
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      types[v] = spec.outputs[o];
      plan->arg_values_.push_back(v);
      if (!is_output[v]) first_step[v] = last_step[v] = step;
    }
    plan->steps_.push_back(std::move(s));
  }

  // Graph outputs: the first listing of a value a node computes is written in
  // place; inputs, constants and repeats are copied after the steps.
  std::vector<bool> served(num_values, false);
  for (size_t j = 0; j < graph.outputs.size(); ++j) {
    const int v = graph.outputs[j];
    if (!types[v]) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", graph.values[v].name, "' is produced by no node"));
    }
    plan->output_types_.push_back(*types[v]);
    const bool computed = host_values[v] == nullptr &&
                          std::find(plan->input_values_.begin(), plan->input_values_.end(), v) ==
                              plan->input_values_.end();
    if (computed && !served[v]) {
      served[v] = true;
      plan->output_values_.push_back(v);
    } else {
      plan->output_values_.push_back(-1);
      plan->output_copies_.push_back({v, static_cast<int>(j), ByteSize(*types[v])});
    }
  }

  std::vector<ArenaRequest> requests;
  std::vector<int> request_values;
  for (size_t v = 0; v < num_values; ++v) {
    if (first_step[v] < 0) continue;
    requests.push_back({ByteSize(*types[v]), first_step[v], last_step[v]});
    request_values.push_back(static_cast<int>(v));
    plan->unshared_bytes_ += ByteSize(*types[v]);
  }
  ArenaLayout layout = PlanArena(requests);
  plan->arena_bytes_ = layout.total_bytes;
  absl::StatusOr<std::shared_ptr<Buffer>> arena = device.Allocate(layout.total_bytes);
  if (!arena.ok()) return arena.status();
  plan->arena_ = *std::move(arena);
  for (size_t r = 0; r < requests.size(); ++r) {
    plan->value_ptrs_[request_values[r]] =
        static_cast<char*>(plan->arena_->data()) + layout.offsets[r];
  }
  plan->arg_ptrs_.assign(plan->arg_values_.size(), nullptr);
  device.RecordEvent()->Wait();  // Constant uploads done before the first Run.
  return plan;
}

absl::Status ExecutionPlan::Run(const void* const* inputs, void* const* outputs) {
  for (size_t i = 0; i < input_values_.size(); ++i) {
    value_ptrs_[input_values_[i]] = const_cast<void*>(inputs[i]);
  }
  for (size_t j = 0; j < output_values_.size(); ++j) {
    if (output_values_[j] >= 0) value_ptrs_[output_values_[j]] = outputs[j];
  }
  for (Step& step : steps_) {
    void** args = arg_ptrs_.data() + step.args_begin;
    const int* values = arg_values_.data() + step.args_begin;
    for (size_t a = 0; a < step.num_inputs + step.num_outputs; ++a) {
      args[a] = values[a] >= 0 ? value_ptrs_[values[a]] : nullptr;
    }
    absl::Status status = step.kernel->Run(args, args + step.num_inputs);
    if (!status.ok()) return NodeError(*step.node, status);
  }
  for (const OutputCopy& copy : output_copies_) {
    // Host-visible copy: CPU plans only until the CUDA backend adds device copies.
    std::memcpy(outputs[copy.output], value_ptrs_[copy.value], copy.bytes);
  }
  return absl::OkStatus();
}

}  // namespace replicad
