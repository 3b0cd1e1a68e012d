#include "tests/testing/onnx_node_runner.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// (op type, input index) pairs whose value a shape rule needs when the plan
// is made.
bool NeedsConstant(const std::string& op_type, int input_index) {
  return op_type == "Reshape" && input_index == 1;
}

int DefaultDomainOpset(const onnx::ModelProto& model) {
  for (const onnx::OperatorSetIdProto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      return static_cast<int>(opset.version());
    }
  }
  return 17;
}

struct Value {
  Tensor tensor;
  bool constant = false;
};

}  // namespace

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto) {
  absl::StatusOr<DType> dtype = DTypeFromOnnx(proto.data_type());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ",
                                                   OnnxDataTypeName(proto.data_type()),
                                                   " in tensor '", proto.name(), "'"));
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", proto.name(), "' keeps its data externally"));
  }
  Shape shape(proto.dims().begin(), proto.dims().end());
  Tensor tensor = Tensor::Host(*dtype, shape);
  const size_t count = static_cast<size_t>(tensor.num_elements());
  size_t received = 0;
  if (proto.has_raw_data()) {
    received = proto.raw_data().size() / DTypeSize(*dtype);
    if (received == count) std::memcpy(tensor.raw_data(), proto.raw_data().data(),
                                       tensor.byte_size());
  } else if (*dtype == DType::kFloat32) {
    received = static_cast<size_t>(proto.float_data_size());
    if (received == count) std::copy(proto.float_data().begin(), proto.float_data().end(),
                                     tensor.data<float>());
  } else {
    received = static_cast<size_t>(proto.int64_data_size());
    if (received == count) std::copy(proto.int64_data().begin(), proto.int64_data().end(),
                                     tensor.data<int64_t>());
  }
  if (received != count) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' of shape ",
                                                   ShapeToString(shape), " holds ", received,
                                                   " elements, expected ", count));
  }
  return tensor;
}

absl::StatusOr<Attributes> AttributesFromProto(const onnx::NodeProto& node) {
  Attributes attributes;
  for (const onnx::AttributeProto& attribute : node.attribute()) {
    switch (attribute.type()) {
      case onnx::AttributeProto::INT:
        attributes.Set(attribute.name(), static_cast<int64_t>(attribute.i()));
        break;
      case onnx::AttributeProto::FLOAT:
        attributes.Set(attribute.name(), attribute.f());
        break;
      case onnx::AttributeProto::STRING:
        attributes.Set(attribute.name(), attribute.s());
        break;
      case onnx::AttributeProto::INTS:
        attributes.Set(attribute.name(),
                       std::vector<int64_t>(attribute.ints().begin(), attribute.ints().end()));
        break;
      case onnx::AttributeProto::FLOATS:
        attributes.Set(attribute.name(),
                       std::vector<float>(attribute.floats().begin(), attribute.floats().end()));
        break;
      case onnx::AttributeProto::TENSOR: {
        absl::StatusOr<Tensor> tensor = TensorFromProto(attribute.t());
        if (!tensor.ok()) return tensor.status();
        attributes.Set(attribute.name(), *std::move(tensor));
        break;
      }
      default:
        return absl::UnimplementedError(absl::StrCat(
            node.op_type(), " node '", node.name(), "': attribute '", attribute.name(),
            "' has kind ", onnx::AttributeProto::AttributeType_Name(attribute.type()),
            "; replicad reads INT, FLOAT, STRING, INTS, FLOATS and TENSOR"));
    }
  }
  return attributes;
}

absl::StatusOr<std::vector<Tensor>> RunOnnxNodes(const onnx::ModelProto& model,
                                                 const std::vector<Tensor>& inputs,
                                                 CpuKernelContext& context) {
  const onnx::GraphProto& graph = model.graph();
  const int opset = DefaultDomainOpset(model);
  std::map<std::string, Value> values;
  std::set<std::string> initializer_names;
  for (const onnx::TensorProto& initializer : graph.initializer()) {
    absl::StatusOr<Tensor> tensor = TensorFromProto(initializer);
    if (!tensor.ok()) return tensor.status();
    values[initializer.name()] = Value{*std::move(tensor), /*constant=*/true};
    initializer_names.insert(initializer.name());
  }
  size_t next_input = 0;
  for (const onnx::ValueInfoProto& input : graph.input()) {
    if (initializer_names.count(input.name()) != 0) continue;
    if (next_input >= inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("graph input '", input.name(),
                                                     "' has no value; received ", inputs.size(),
                                                     " inputs"));
    }
    values[input.name()] = Value{inputs[next_input++], /*constant=*/false};
  }

  for (const onnx::NodeProto& node : graph.node()) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return absl::UnimplementedError(absl::StrCat("op ", node.domain(), ".", node.op_type(),
                                                   " is outside the default ONNX domain"));
    }
    const OpDefinition* op = FindOp(node.op_type());
    if (op == nullptr) {
      return absl::UnimplementedError(absl::StrCat("unsupported op ", node.op_type()));
    }
    absl::StatusOr<Attributes> attributes = AttributesFromProto(node);
    if (!attributes.ok()) return attributes.status();
    KernelSpec spec;
    spec.op_type = node.op_type();
    spec.node_name = node.name();
    spec.opset = opset;
    spec.attributes = &*attributes;
    std::vector<const void*> input_data;
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i).empty()) {
        spec.inputs.push_back(std::nullopt);
        spec.constant_inputs.push_back(nullptr);
        input_data.push_back(nullptr);
        continue;
      }
      auto it = values.find(node.input(i));
      if (it == values.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            NodeLabel(spec), ": input '", node.input(i), "' is not produced before it"));
      }
      const Value& value = it->second;
      spec.inputs.push_back(value.tensor.type());
      const bool constant = value.constant || NeedsConstant(node.op_type(), i);
      spec.constant_inputs.push_back(constant ? &value.tensor : nullptr);
      input_data.push_back(value.tensor.raw_data());
    }
    absl::Status inferred = op->infer(&spec);
    if (!inferred.ok()) return inferred;
    int declared_outputs = node.output_size();
    while (declared_outputs > 0 && node.output(declared_outputs - 1).empty()) --declared_outputs;
    if (declared_outputs > static_cast<int>(spec.outputs.size())) {
      return absl::UnimplementedError(absl::StrCat(NodeLabel(spec), ": declares ",
                                                   declared_outputs, " outputs; replicad computes "
                                                   "the first ",
                                                   spec.outputs.size()));
    }
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context);
    if (!kernel.ok()) return kernel.status();
    std::vector<Tensor> outputs;
    std::vector<void*> output_data;
    for (const TensorType& type : spec.outputs) {
      outputs.push_back(Tensor::Host(type.dtype, type.shape));
      output_data.push_back(outputs.back().raw_data());
    }
    absl::Status ran = (*kernel)->Run(input_data.data(), output_data.data());
    if (!ran.ok()) return ran;
    for (int i = 0; i < declared_outputs; ++i) {
      if (node.output(i).empty()) continue;
      values[node.output(i)] = Value{outputs[i], /*constant=*/node.op_type() == "Constant"};
    }
  }

  std::vector<Tensor> results;
  for (const onnx::ValueInfoProto& output : graph.output()) {
    auto it = values.find(output.name());
    if (it == values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", output.name(), "' is not produced by any node"));
    }
    results.push_back(it->second.tensor);
  }
  return results;
}

}  // namespace replicad
