#include "core/model/onnx_builder.h"

#include "core/model/onnx_tensor.h"

namespace replicad {
namespace {

void AddValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* infos,
                  const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
  onnx::ValueInfoProto* info = infos->Add();
  info->set_name(name);
  auto* tensor_type = info->mutable_type()->mutable_tensor_type();
  tensor_type->set_elem_type(static_cast<int>(dtype));
  auto* shape = tensor_type->mutable_shape();
  for (int64_t d : dims) {
    if (d == kAnyDim) {
      shape->add_dim()->set_dim_param("batch");
    } else {
      shape->add_dim()->set_dim_value(d);
    }
  }
}

onnx::AttributeProto* AddAttribute(onnx::NodeProto* node, const std::string& name,
                                   onnx::AttributeProto::AttributeType type) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}

}  // namespace

OnnxModelBuilder::OnnxModelBuilder(std::string graph_name, int opset) {
  model_.set_ir_version(8);
  model_.set_producer_name("replicad");
  model_.add_opset_import()->set_version(opset);
  model_.mutable_graph()->set_name(std::move(graph_name));
}

void OnnxModelBuilder::AddInput(const std::string& name, DType dtype,
                                const std::vector<int64_t>& dims) {
  AddValueInfo(model_.mutable_graph()->mutable_input(), name, dtype, dims);
}

void OnnxModelBuilder::AddOutput(const std::string& name, DType dtype,
                                 const std::vector<int64_t>& dims) {
  AddValueInfo(model_.mutable_graph()->mutable_output(), name, dtype, dims);
}

void OnnxModelBuilder::AddInitializer(const std::string& name, const Tensor& value) {
  TensorToOnnx(value, name, model_.mutable_graph()->add_initializer());
}

onnx::NodeProto* OnnxModelBuilder::AddNode(const std::string& op_type,
                                           const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = model_.mutable_graph()->add_node();
  node->set_op_type(op_type);
  node->set_name(outputs.empty() ? op_type : outputs[0]);
  for (const std::string& in : inputs) node->add_input(in);
  for (const std::string& out : outputs) node->add_output(out);
  return node;
}

void OnnxModelBuilder::SetInt(onnx::NodeProto* node, const std::string& name, int64_t value) {
  AddAttribute(node, name, onnx::AttributeProto::INT)->set_i(value);
}

void OnnxModelBuilder::SetInts(onnx::NodeProto* node, const std::string& name,
                               const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = AddAttribute(node, name, onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

void OnnxModelBuilder::SetFloat(onnx::NodeProto* node, const std::string& name, float value) {
  AddAttribute(node, name, onnx::AttributeProto::FLOAT)->set_f(value);
}

}  // namespace replicad
