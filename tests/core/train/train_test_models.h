#ifndef REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_
#define REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/train/data_parallel_trainer.h"
#include "core/train/optimizer.h"
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

// x [N,3] -> MatMul(w [3,2]) -> Softplus -> y: Softplus has no gradient rule
// yet, so training refuses it, naming Softplus 'y'.
inline std::string UntrainableOnnx() {
  OnnxModelBuilder b("softplus", 13);
  b.AddInitializer("w", RandomTensor({3, 2}, 1));
  b.AddNode("MatMul", {"x", "w"}, {"h"});
  b.AddNode("Softplus", {"h"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  return b.Serialize();
}

// Dropout(`ratio`) of `input` into `output` in training form, as
// torch.onnx.export writes it in training mode: its ratio an initializer
// named "<output>.ratio", training_mode a Constant true.
inline void AddTrainingDropout(OnnxModelBuilder& b, const std::string& input,
                               const std::string& output, float ratio) {
  Tensor value = Tensor::Host(DType::kFloat32, {});
  *value.data<float>() = ratio;
  b.AddInitializer(output + ".ratio", value);
  onnx::NodeProto* flag = b.AddNode("Constant", {}, {output + ".training"});
  onnx::AttributeProto* attribute = flag->add_attribute();
  attribute->set_name("value");
  attribute->set_type(onnx::AttributeProto::TENSOR);
  attribute->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
  attribute->mutable_t()->add_int32_data(1);
  b.AddNode("Dropout", {input, output + ".ratio", output + ".training"}, {output});
}

// int64 class labels [batch] in [0, classes), deterministic in `seed`.
inline Tensor ClassLabels(int64_t batch, int classes, uint64_t seed) {
  Tensor labels = Tensor::Host(DType::kInt64, {batch});
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = (i * 7 + seed) % classes;
  return labels;
}

// On a ConvNetOnnx trainer: a step with a label out of range (9 of 4
// classes) fails naming it and changes neither the step count nor slot
// `slot`'s weights, bit for bit; the next good step then trains.
inline void ExpectBadLabelsChangeNothing(DataParallelTrainer& trainer, int slot) {
  const std::vector<Tensor> before = trainer.SlotParameters(slot).value();
  const Tensor images = RandomTensor({4, 2, 6, 6}, 1);
  Tensor labels = ClassLabels(4, 4, 0);
  labels.data<int64_t>()[3] = 9;
  absl::StatusOr<DataParallelTrainer::StepResult> result = trainer.Step({images}, labels);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("must be a class in [0, 4), received 9"),
            std::string::npos)
      << result.status();
  EXPECT_EQ(trainer.step(), 0);
  const std::vector<Tensor> after = trainer.SlotParameters(slot).value();
  ASSERT_EQ(after.size(), before.size());
  for (size_t p = 0; p < before.size(); ++p) {
    EXPECT_EQ(std::memcmp(before[p].raw_data(), after[p].raw_data(), before[p].byte_size()), 0)
        << "tensor " << p;
  }
  result = trainer.Step({images}, ClassLabels(4, 4, 0));
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(trainer.step(), 1);
}

// SGD with Nesterov momentum and weight decay, Adam, and RMSprop with
// momentum: every optimizer path, at rates a few steps of the test models take.
inline std::vector<OptimizerConfig> TrainingOptimizers() {
  OptimizerConfig sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-3f;
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::kAdam;
  adam.learning_rate = 0.01f;
  OptimizerConfig rmsprop;
  rmsprop.kind = OptimizerConfig::Kind::kRmsprop;
  rmsprop.learning_rate = 0.01f;
  rmsprop.momentum = 0.5f;
  return {sgd, adam, rmsprop};
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_CORE_TRAIN_TRAIN_TEST_MODELS_H_
