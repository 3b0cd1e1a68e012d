#ifndef REPLICAD_CORE_MODEL_ONNX_BUILDER_H_
#define REPLICAD_CORE_MODEL_ONNX_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// Writes small ONNX models in code: the embedded default model and test
// models. Not thread-safe; one builder per model.
class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(std::string graph_name, int opset = 13);

  // A graph input or output; a dim of kAnyDim becomes the symbolic "batch".
  void AddInput(const std::string& name, DType dtype, const std::vector<int64_t>& dims);
  void AddOutput(const std::string& name, DType dtype, const std::vector<int64_t>& dims);
  void AddInitializer(const std::string& name, const Tensor& value);

  // A node named after its first output; set attributes on the result.
  onnx::NodeProto* AddNode(const std::string& op_type, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& outputs);
  static void SetInt(onnx::NodeProto* node, const std::string& name, int64_t value);
  static void SetInts(onnx::NodeProto* node, const std::string& name,
                      const std::vector<int64_t>& values);
  static void SetFloat(onnx::NodeProto* node, const std::string& name, float value);

  const onnx::ModelProto& model() const { return model_; }
  std::string Serialize() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_ONNX_BUILDER_H_
