#ifndef REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_
#define REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_

#include <memory>
#include <string>

#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad::testing {

// Models for the training tests, imported as training imports them
// (without inference optimisations).
inline std::shared_ptr<const Model> LoadForTraining(const std::string& bytes) {
  OnnxImportOptions options;
  options.optimize = false;
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(bytes, "m", "<test>", options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// image [N,2,6,6] -> Conv(3, 3x3, pad 1) -> Relu -> MaxPool 2x2 -> Flatten ->
// Gemm(transB) [N,4] -> logits. Weights from `seed`.
inline std::string ConvNetOnnx(uint64_t seed) {
  OnnxModelBuilder b("convnet", 13);
  b.AddInitializer("conv.w", RandomTensor({3, 2, 3, 3}, seed));
  b.AddInitializer("conv.b", RandomTensor({3}, seed + 1));
  b.AddInitializer("fc.w", RandomTensor({4, 27}, seed + 2));
  b.AddInitializer("fc.b", RandomTensor({4}, seed + 3));
  onnx::NodeProto* conv = b.AddNode("Conv", {"image", "conv.w", "conv.b"}, {"c"});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"c"}, {"r"});
  onnx::NodeProto* pool = b.AddNode("MaxPool", {"r"}, {"p"});
  OnnxModelBuilder::SetInts(pool, "kernel_shape", {2, 2});
  OnnxModelBuilder::SetInts(pool, "strides", {2, 2});
  b.AddNode("Flatten", {"p"}, {"f"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"f", "fc.w", "fc.b"}, {"logits"}), "transB", 1);
  b.AddNode("Softmax", {"logits"}, {"probabilities"});
  b.AddInput("image", DType::kFloat32, {kAnyDim, 2, 6, 6});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("probabilities", DType::kFloat32, {kAnyDim, 4});
  return b.Serialize();
}

// x [N,3] -> MatMul(w [3,2]) -> Erf -> y: Erf has no gradient rule yet, so
// training refuses it, naming Erf 'y'.
inline std::string UntrainableOnnx() {
  OnnxModelBuilder b("erf", 13);
  b.AddInitializer("w", RandomTensor({3, 2}, 1));
  b.AddNode("MatMul", {"x", "w"}, {"h"});
  b.AddNode("Erf", {"h"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  return b.Serialize();
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_
