// The training graph's gradients against central finite differences of its
// own loss, on small models covering every op that has a gradient rule.
//
// Also: labels and one-hot probabilities give the same gradient; untrainable models are refused
// naming their ops.

#include "core/train/training_graph.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/model/compute_precision.h"
#include "core/model/execution_plan.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/torch_reference.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// x [N,3] -> Gemm(transA on a transposed copy? no: A=x) with alpha/beta, then
// broadcasting Add/Sub/Mul with parameters, Reshape -> y [N,2,2]; a value
// (h) read twice, so gradients accumulate.
std::string ElementwiseNetOnnx(uint64_t seed) {
  OnnxModelBuilder b("elementwise", 13);
  b.AddInitializer("w", testing::RandomTensor({3, 4}, seed));
  b.AddInitializer("c", testing::RandomTensor({4}, seed + 1));
  b.AddInitializer("scale", testing::RandomTensor({1, 4}, seed + 2));
  b.AddInitializer("shift", testing::RandomTensor({4}, seed + 3));
  b.AddInitializer("w2", testing::RandomTensor({4, 4}, seed + 4));
  Tensor shape = Tensor::Host(DType::kInt64, {3});
  shape.data<int64_t>()[0] = -1;
  shape.data<int64_t>()[1] = 2;
  shape.data<int64_t>()[2] = 2;
  b.AddInitializer("shape", shape);
  onnx::NodeProto* gemm = b.AddNode("Gemm", {"x", "w", "c"}, {"h"});
  OnnxModelBuilder::SetFloat(gemm, "alpha", 0.5f);
  OnnxModelBuilder::SetFloat(gemm, "beta", 2.0f);
  b.AddNode("Mul", {"h", "scale"}, {"m"});
  b.AddNode("Sub", {"m", "shift"}, {"s"});
  b.AddNode("Add", {"s", "h"}, {"a"});
  onnx::NodeProto* g2 = b.AddNode("Gemm", {"w2", "a"}, {"t"});  // [4,4] x [N,4]^T
  OnnxModelBuilder::SetInt(g2, "transB", 1);
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"t", "w2"}, {"u"}), "transA", 1);  // [N,4]
  b.AddNode("Reshape", {"u", "shape"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2, 2});
  return b.Serialize();
}

// Runs a training graph on one CPU slot; loss and gradients for given params.
class TrainingRun {
 public:
  TrainingRun(const TrainingGraph& training, const Model& model, std::vector<Tensor> inputs,
              Tensor targets)
      : training_(training),
        device_(CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{1})),
        inputs_(std::move(inputs)),
        targets_(std::move(targets)) {
    for (int v : training.parameters) params_.push_back(Copy(model.graph().initializers.at(v)));
    // Running statistics stay at the model's values: every Run is a first step.
    for (int v : training.buffers) {
      buffers_.push_back(Copy(model.graph().initializers.at(v)));
      buffer_updates_.push_back(Copy(buffers_.back()));
    }
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs_) shapes.push_back(t.shape());
    shapes.push_back(targets_.shape());
    for (const Tensor& p : params_) shapes.push_back(p.shape());
    for (const Tensor& b : buffers_) shapes.push_back(b.shape());
    absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan =
        ExecutionPlan::Create(training.graph, training.graph.initializers, *device_, shapes);
    EXPECT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
    for (const Tensor& p : params_) gradients_.push_back(Tensor::Host(DType::kFloat32, p.shape()));
  }

  static Tensor Copy(const Tensor& t) {
    Tensor copy = Tensor::Host(t.dtype(), t.shape());
    std::memcpy(copy.raw_data(), t.raw_data(), t.byte_size());
    return copy;
  }

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& gradients() const { return gradients_; }

  // loss_sum (and fills gradients()).
  double Run() {
    std::vector<const void*> in;
    for (const Tensor& t : inputs_) in.push_back(t.raw_data());
    in.push_back(targets_.raw_data());
    for (const Tensor& p : params_) in.push_back(p.raw_data());
    for (const Tensor& b : buffers_) in.push_back(b.raw_data());
    float loss = 0, correct = 0;
    std::vector<void*> out{&loss};
    if (training_.classification) out.push_back(&correct);
    for (Tensor& g : gradients_) out.push_back(g.raw_data());
    for (Tensor& u : buffer_updates_) out.push_back(u.raw_data());
    absl::Status status;
    device_->Enqueue([&] { status = plan_->Run(in.data(), out.data()); });
    EXPECT_TRUE(device_->Synchronize().ok());
    EXPECT_TRUE(status.ok()) << status;
    return loss;
  }

 private:
  const TrainingGraph& training_;
  std::unique_ptr<Device> device_;
  std::vector<Tensor> inputs_;
  Tensor targets_;
  std::vector<Tensor> params_;
  std::vector<Tensor> gradients_;
  std::vector<Tensor> buffers_, buffer_updates_;
  std::unique_ptr<ExecutionPlan> plan_;
};

// Every parameter element's analytic gradient against (L(p+h) - L(p-h)) / 2h
// in float32 with h = 1e-2: agreement within 2e-2 relative to the gradient's
// largest magnitude (float32 rounding of the loss, and ReLU/max-pool kinks
// crossed by a step, bound how close a finite difference can get).
void ExpectGradientsMatchFiniteDifferences(TrainingRun& run) {
  run.Run();
  const std::vector<Tensor> analytic = [&] {
    std::vector<Tensor> copies;
    for (const Tensor& g : run.gradients()) copies.push_back(TrainingRun::Copy(g));
    return copies;
  }();
  constexpr float kStep = 1e-2f;
  for (size_t p = 0; p < analytic.size(); ++p) {
    float* values = run.params()[p].data<float>();
    double scale = 1e-3;
    for (int64_t i = 0; i < analytic[p].num_elements(); ++i) {
      scale = std::max(scale, std::fabs(double(analytic[p].data<float>()[i])));
    }
    int mismatches = 0;
    for (int64_t i = 0; i < analytic[p].num_elements(); ++i) {
      const float saved = values[i];
      values[i] = saved + kStep;
      const double up = run.Run();
      values[i] = saved - kStep;
      const double down = run.Run();
      values[i] = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double exact = analytic[p].data<float>()[i];
      if (std::fabs(numeric - exact) > 2e-2 * scale) {
        ++mismatches;
        ADD_FAILURE() << "parameter " << p << " element " << i << ": analytic " << exact
                      << ", finite difference " << numeric;
      }
      if (mismatches > 5) return;
    }
  }
}

TEST(TrainingGraphTest, ConvNetGradientsMatchFiniteDifferences) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::ConvNetOnnx(1));
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), LossSpec{LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->parameters.size(), 4u);
  EXPECT_TRUE(training->classification);
  Tensor labels = Tensor::Host(DType::kInt64, {5});
  for (int i = 0; i < 5; ++i) labels.data<int64_t>()[i] = (i * 3) % 4;
  TrainingRun run(*training, *model, {testing::RandomTensor({5, 2, 6, 6}, 9)}, labels);
  ExpectGradientsMatchFiniteDifferences(run);
}

// bf16: the forward pass's weight products and, in the backward pass, the
// MatMul and Gemm nodes their gradient rules emit are marked bf16 (as
// autocast's backward reads bfloat16); the convolution's gradients are not
// (the CPU's ConvGradData and ConvGradFilter compute float32).
TEST(TrainingGraphTest, BFloat16MarksTheWeightProductsAndTheirMatrixGradients) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::ConvNetOnnx(1));
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), LossSpec{LossSpec::Kind::kSoftmaxCrossEntropy, "logits"},
                         ComputePrecision::kBFloat16);
  ASSERT_TRUE(training.ok()) << training.status();
  std::vector<std::string> forward, backward;
  for (size_t n = 0; n < training->graph.nodes.size(); ++n) {
    const Node& node = training->graph.nodes[n];
    if (!node.attributes.Has(kPrecisionAttribute)) continue;
    (static_cast<int>(n) < training->first_backward_node ? forward : backward)
        .push_back(node.op_type);
  }
  EXPECT_THAT(forward, ::testing::UnorderedElementsAre("Conv", "Gemm"));
  ASSERT_FALSE(backward.empty());
  for (const std::string& op : backward) {
    EXPECT_TRUE(op == "MatMul" || op == "Gemm") << op;
  }
}

TEST(TrainingGraphTest, ProbabilityTargetsGiveTheSameGradientAsOneHotLabels) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::ConvNetOnnx(2));
  const Tensor image = testing::RandomTensor({3, 2, 6, 6}, 4);
  Tensor labels = Tensor::Host(DType::kInt64, {3});
  Tensor one_hot = Tensor::Host(DType::kFloat32, {3, 4});
  for (int i = 0; i < 3; ++i) {
    labels.data<int64_t>()[i] = i + 1;
    for (int c = 0; c < 4; ++c) one_hot.data<float>()[i * 4 + c] = c == i + 1 ? 1.0f : 0.0f;
  }
  absl::StatusOr<TrainingGraph> with_labels =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  absl::StatusOr<TrainingGraph> with_probabilities = BuildTrainingGraph(
      model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits", DType::kFloat32});
  ASSERT_TRUE(with_labels.ok() && with_probabilities.ok());
  TrainingRun a(*with_labels, *model, {image}, labels);
  TrainingRun b(*with_probabilities, *model, {image}, one_hot);
  EXPECT_NEAR(a.Run(), b.Run(), 1e-5);
  for (size_t p = 0; p < a.gradients().size(); ++p) {
    EXPECT_LE(testing::RelativeL2(a.gradients()[p], b.gradients()[p]), 1e-6) << p;
  }
}

TEST(TrainingGraphTest, ElementwiseNetGradientsMatchFiniteDifferences) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(ElementwiseNetOnnx(3));
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(
      model->graph(), LossSpec{LossSpec::Kind::kMeanSquaredError, "y", DType::kFloat32});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->parameters.size(), 5u);  // Not the int64 shape.
  EXPECT_FALSE(training->classification);
  TrainingRun run(*training, *model, {testing::RandomTensor({4, 3}, 5)},
                  testing::RandomTensor({4, 2, 2}, 6));
  ExpectGradientsMatchFiniteDifferences(run);
}

// x [N,4] -> MatMul(w [4,6]) -> LeakyRelu, Sigmoid, Tanh, Clip (constant
// bounds), Sqrt, Div -> Reshape [N,2,3] -> Transpose -> Softmax and
// LogSoftmax -> y [N,3,2].
std::string ActivationNetOnnx(uint64_t seed) {
  OnnxModelBuilder b("activations", 13);
  b.AddInitializer("w", testing::RandomTensor({4, 6}, seed));
  b.AddInitializer("shift", testing::RandomTensor({6}, seed + 1));
  Tensor low = Tensor::Host(DType::kFloat32, {});
  Tensor high = Tensor::Host(DType::kFloat32, {});
  *low.data<float>() = -0.6f;
  *high.data<float>() = 0.7f;
  b.AddInitializer("low", low);
  b.AddInitializer("high", high);
  Tensor shape = Tensor::Host(DType::kInt64, {3});
  shape.data<int64_t>()[0] = -1;
  shape.data<int64_t>()[1] = 2;
  shape.data<int64_t>()[2] = 3;
  b.AddInitializer("shape", shape);
  b.AddNode("MatMul", {"x", "w"}, {"h"});
  OnnxModelBuilder::SetFloat(b.AddNode("LeakyRelu", {"h"}, {"l"}), "alpha", 0.1f);
  b.AddNode("Sigmoid", {"l"}, {"s"});
  b.AddNode("Tanh", {"h"}, {"t"});
  b.AddNode("Clip", {"t", "low", "high"}, {"c"});
  b.AddNode("Sqrt", {"s"}, {"q"});
  b.AddNode("Add", {"s", "shift"}, {"den"});
  b.AddNode("Div", {"c", "den"}, {"d"});
  b.AddNode("Add", {"d", "q"}, {"e"});
  b.AddNode("Reshape", {"e", "shape"}, {"r"});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"r"}, {"tr"}), "perm", {0, 2, 1});
  OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"tr"}, {"sm"}), "axis", -1);
  OnnxModelBuilder::SetInt(b.AddNode("LogSoftmax", {"tr"}, {"ls"}), "axis", 1);
  b.AddNode("Add", {"sm", "ls"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 2});
  return b.Serialize();
}

TEST(TrainingGraphTest, ActivationNetGradientsMatchFiniteDifferences) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(ActivationNetOnnx(21));
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(
      model->graph(), LossSpec{LossSpec::Kind::kMeanSquaredError, "y", DType::kFloat32});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->parameters.size(), 2u);  // w and shift; Clip's bounds stay constants.
  TrainingRun run(*training, *model, {testing::RandomTensor({5, 4}, 22)},
                  testing::RandomTensor({5, 3, 2}, 23));
  ExpectGradientsMatchFiniteDifferences(run);
}

// Batched MatMul both ways: x [N,3,4] against a 2-D weight, and two
// computed 3-D tensors (attention's scores and mix), broadcast over N.
TEST(TrainingGraphTest, BatchedMatMulGradientsMatchFiniteDifferences) {
  OnnxModelBuilder b("attention", 13);
  b.AddInitializer("wq", testing::RandomTensor({4, 5}, 51));
  b.AddInitializer("wk", testing::RandomTensor({4, 5}, 52));
  b.AddInitializer("wv", testing::RandomTensor({4, 2}, 53));
  b.AddInitializer("bias", testing::RandomTensor({1, 3, 3}, 54));
  b.AddNode("MatMul", {"x", "wq"}, {"q"});
  b.AddNode("MatMul", {"x", "wk"}, {"k"});
  b.AddNode("MatMul", {"x", "wv"}, {"v"});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
  b.AddNode("MatMul", {"q", "kt"}, {"scores"});
  b.AddNode("Add", {"scores", "bias"}, {"biased"});
  OnnxModelBuilder::SetInt(b.AddNode("Softmax", {"biased"}, {"weights"}), "axis", -1);
  b.AddNode("MatMul", {"weights", "v"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 3, 2});
  std::shared_ptr<const Model> model = testing::LoadForTraining(b.Serialize());
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(
      model->graph(), LossSpec{LossSpec::Kind::kMeanSquaredError, "y", DType::kFloat32});
  ASSERT_TRUE(training.ok()) << training.status();
  TrainingRun run(*training, *model, {testing::RandomTensor({2, 3, 4}, 55)},
                  testing::RandomTensor({2, 3, 2}, 56));
  ExpectGradientsMatchFiniteDifferences(run);
}

// BatchNormalization and Dropout in training form (as a training-mode
// export writes them), Pad, AveragePool both ways, GlobalAveragePool and
// Concat. The dropout mask is fixed (step 0, seed 0), so the loss is a
// function of the weights that finite differences can probe.
TEST(TrainingGraphTest, TrainingFormsAndPoolingGradientsMatchFiniteDifferences) {
  OnnxModelBuilder b("forms", 13);
  b.AddInitializer("conv.w", testing::RandomTensor({3, 2, 3, 3}, 61));
  b.AddInitializer("bn.scale", testing::RandomTensor({3}, 62));
  b.AddInitializer("bn.bias", testing::RandomTensor({3}, 63));
  Tensor mean = Tensor::Host(DType::kFloat32, {3});
  Tensor var = Tensor::Host(DType::kFloat32, {3});
  for (int c = 0; c < 3; ++c) {
    mean.data<float>()[c] = 0.0f;
    var.data<float>()[c] = 1.0f;
  }
  b.AddInitializer("bn.mean", mean);
  b.AddInitializer("bn.var", var);
  Tensor pads = Tensor::Host(DType::kInt64, {8});
  const int64_t pad_values[] = {0, 0, 1, 0, 0, 0, 1, 2};
  std::copy(std::begin(pad_values), std::end(pad_values), pads.data<int64_t>());
  b.AddInitializer("pads", pads);
  b.AddInitializer("fc.w", testing::RandomTensor({3, 6}, 64));
  b.AddNode("Conv", {"image", "conv.w"}, {"c"});
  b.AddNode("BatchNormalization", {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"},
            {"n", "n.mean", "n.var", "n.saved_mean", "n.saved_var"});  // Training form.
  b.AddNode("Pad", {"n", "pads"}, {"p"});
  onnx::NodeProto* a = b.AddNode("AveragePool", {"p"}, {"a"});
  OnnxModelBuilder::SetInts(a, "kernel_shape", {3, 3});
  OnnxModelBuilder::SetInts(a, "strides", {2, 2});
  OnnxModelBuilder::SetInts(a, "pads", {1, 1, 1, 1});
  OnnxModelBuilder::SetInt(a, "count_include_pad", 1);
  OnnxModelBuilder::SetInt(a, "ceil_mode", 1);
  onnx::NodeProto* e = b.AddNode("AveragePool", {"n"}, {"e"});
  OnnxModelBuilder::SetInts(e, "kernel_shape", {2, 2});
  OnnxModelBuilder::SetInts(e, "strides", {2, 2});
  OnnxModelBuilder::SetInt(e, "ceil_mode", 1);
  b.AddNode("GlobalAveragePool", {"a"}, {"ga"});
  b.AddNode("GlobalAveragePool", {"e"}, {"ge"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"ga", "ge"}, {"cat"}), "axis", 1);
  b.AddNode("Flatten", {"cat"}, {"f"});
  testing::AddTrainingDropout(b, "f", "d", 0.3f);
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"d", "fc.w"}, {"logits"}), "transB", 1);
  b.AddInput("image", DType::kFloat32, {kAnyDim, 2, 6, 6});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  std::shared_ptr<const Model> model = testing::LoadForTraining(b.Serialize());
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->parameters.size(), 4u);  // conv.w, bn.scale, bn.bias, fc.w.
  EXPECT_EQ(training->buffers.size(), 2u);
  Tensor labels = Tensor::Host(DType::kInt64, {4});
  for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = i % 3;
  TrainingRun run(*training, *model, {testing::RandomTensor({4, 2, 6, 6}, 65)}, labels);
  ExpectGradientsMatchFiniteDifferences(run);
}

// Grouped, strided, dilated convolution: oneDNN's backward primitives on
// grouped weights.
TEST(TrainingGraphTest, GroupedConvGradientsMatchFiniteDifferences) {
  OnnxModelBuilder b("grouped", 13);
  b.AddInitializer("conv.w", testing::RandomTensor({6, 2, 3, 3}, 41));
  b.AddInitializer("conv.b", testing::RandomTensor({6}, 42));
  b.AddInitializer("fc.w", testing::RandomTensor({3, 6}, 43));
  onnx::NodeProto* conv = b.AddNode("Conv", {"image", "conv.w", "conv.b"}, {"c"});
  OnnxModelBuilder::SetInt(conv, "group", 2);
  OnnxModelBuilder::SetInts(conv, "strides", {2, 1});
  OnnxModelBuilder::SetInts(conv, "dilations", {1, 2});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 2, 0, 1});
  b.AddNode("GlobalAveragePool", {"c"}, {"g"});
  b.AddNode("Flatten", {"g"}, {"f"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"f", "fc.w"}, {"logits"}), "transB", 1);
  b.AddInput("image", DType::kFloat32, {kAnyDim, 4, 7, 6});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  std::shared_ptr<const Model> model = testing::LoadForTraining(b.Serialize());
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  ASSERT_TRUE(training.ok()) << training.status();
  Tensor labels = Tensor::Host(DType::kInt64, {2});
  labels.data<int64_t>()[0] = 2;
  labels.data<int64_t>()[1] = 0;
  TrainingRun run(*training, *model, {testing::RandomTensor({2, 4, 7, 6}, 44)}, labels);
  ExpectGradientsMatchFiniteDifferences(run);
}

// image [N,2,5,5] -> Conv(4, 3x3) -> GlobalAveragePool -> Flatten -> Gemm -> logits [N,3].
TEST(TrainingGraphTest, GlobalAveragePoolNetGradientsMatchFiniteDifferences) {
  OnnxModelBuilder b("gap", 13);
  b.AddInitializer("conv.w", testing::RandomTensor({4, 2, 3, 3}, 31));
  b.AddInitializer("fc.w", testing::RandomTensor({3, 4}, 32));
  b.AddNode("Conv", {"image", "conv.w"}, {"c"});
  b.AddNode("GlobalAveragePool", {"c"}, {"g"});
  b.AddNode("Flatten", {"g"}, {"f"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"f", "fc.w"}, {"logits"}), "transB", 1);
  b.AddInput("image", DType::kFloat32, {kAnyDim, 2, 5, 5});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  std::shared_ptr<const Model> model = testing::LoadForTraining(b.Serialize());
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  ASSERT_TRUE(training.ok()) << training.status();
  Tensor labels = Tensor::Host(DType::kInt64, {3});
  for (int i = 0; i < 3; ++i) labels.data<int64_t>()[i] = i;
  TrainingRun run(*training, *model, {testing::RandomTensor({3, 2, 5, 5}, 33)}, labels);
  ExpectGradientsMatchFiniteDifferences(run);
}

// PyTorch's view(x.size(0), -1) (Shape, Gather, Unsqueeze, Concat, Reshape
// on a value computed from the weights) and a training-form
// BatchNormalization on a branch the loss does not read: neither stops
// training (integers carry no gradient; the pruned branch's running
// statistics are left alone).
TEST(TrainingGraphTest, ShapeArithmeticAndUnusedBranchesDoNotBlockTraining) {
  OnnxModelBuilder b("view", 13);
  b.AddInitializer("conv.w", testing::RandomTensor({2, 1, 3, 3}, 71));
  b.AddInitializer("fc.w", testing::RandomTensor({3, 32}, 72));
  b.AddInitializer("bn.scale", testing::RandomTensor({2}, 73));
  b.AddInitializer("bn.bias", testing::RandomTensor({2}, 74));
  b.AddInitializer("bn.mean", testing::RandomTensor({2}, 75));
  Tensor var = Tensor::Host(DType::kFloat32, {2});
  var.data<float>()[0] = var.data<float>()[1] = 1.0f;
  b.AddInitializer("bn.var", var);
  Tensor zero = Tensor::Host(DType::kInt64, {});
  *zero.data<int64_t>() = 0;
  b.AddInitializer("zero", zero);
  Tensor minus_one = Tensor::Host(DType::kInt64, {1});
  *minus_one.data<int64_t>() = -1;
  b.AddInitializer("minus_one", minus_one);
  Tensor axes = Tensor::Host(DType::kInt64, {1});
  *axes.data<int64_t>() = 0;
  b.AddInitializer("axes", axes);
  OnnxModelBuilder::SetInts(b.AddNode("Conv", {"image", "conv.w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.AddNode("Shape", {"c"}, {"shape"});
  b.AddNode("Gather", {"shape", "zero"}, {"rows"});
  b.AddNode("Unsqueeze", {"rows", "axes"}, {"rows1"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"rows1", "minus_one"}, {"flat_shape"}), "axis", 0);
  b.AddNode("Reshape", {"c", "flat_shape"}, {"flat"});
  OnnxModelBuilder::SetInt(b.AddNode("Gemm", {"flat", "fc.w"}, {"logits"}), "transB", 1);
  b.AddNode("BatchNormalization", {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"},
            {"side", "side.mean", "side.var", "side.saved_mean", "side.saved_var"});
  b.AddInput("image", DType::kFloat32, {kAnyDim, 1, 4, 4});
  b.AddOutput("logits", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("side", DType::kFloat32, {kAnyDim, 2, 4, 4});
  std::shared_ptr<const Model> model = testing::LoadForTraining(b.Serialize());
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kSoftmaxCrossEntropy, "logits"});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->parameters.size(), 2u);  // conv.w and fc.w.
  EXPECT_TRUE(training->buffers.empty());
  Tensor labels = Tensor::Host(DType::kInt64, {3});
  for (int i = 0; i < 3; ++i) labels.data<int64_t>()[i] = 2 - i;
  TrainingRun run(*training, *model, {testing::RandomTensor({3, 1, 4, 4}, 76)}, labels);
  ExpectGradientsMatchFiniteDifferences(run);
}

TEST(TrainingGraphTest, RejectsModelsItCannotTrainNamingTheOp) {
  std::shared_ptr<const Model> model = testing::LoadForTraining(testing::UntrainableOnnx());
  absl::StatusOr<TrainingGraph> training =
      BuildTrainingGraph(model->graph(), {LossSpec::Kind::kMeanSquaredError, "y", DType::kFloat32});
  EXPECT_EQ(training.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(
      std::string(training.status().message()),
      HasSubstr("no gradient in replicad yet for Softplus (node 'y') (differentiable ops: "));

  absl::StatusOr<TrainingGraph> wrong_output = BuildTrainingGraph(
      model->graph(), {LossSpec::Kind::kMeanSquaredError, "nope", DType::kFloat32});
  EXPECT_EQ(wrong_output.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_output.status().message()),
              AllOf(HasSubstr("'nope'"), HasSubstr("y")));
}

// Every gradient rule PyTorch can be compared with here: a network exported
// by PyTorch, its mean squared error and autograd's gradients against the
// training graph's (which are of the sum of per-row losses: divided by the
// batch). Loss within 1e-5 relative, each gradient within 1e-4 relative L2.
class TorchGradientsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchGradientsTest, MatchAutograd) {
  const std::string& dir = testing::TorchReferenceOutput(REPLICAD_GRADIENTS_SCRIPT);
  ASSERT_FALSE(dir.empty());
  const std::string name = GetParam();
  std::shared_ptr<const Model> model =
      testing::LoadForTraining(testing::ReadFileBytes(dir + "/" + name + ".onnx"));
  absl::StatusOr<TrainingGraph> training = BuildTrainingGraph(
      model->graph(), LossSpec{LossSpec::Kind::kMeanSquaredError, "y", DType::kFloat32});
  ASSERT_TRUE(training.ok()) << training.status();
  const Tensor x = testing::ReadNpyTensor(dir + "/" + name + "_x.npy");
  const Tensor target = testing::ReadNpyTensor(dir + "/" + name + "_target.npy");
  const double rows = static_cast<double>(x.shape()[0]);
  TrainingRun run(*training, *model, {x}, target);
  const double loss = run.Run() / rows;
  const double expected = testing::ReadNpyTensor(dir + "/" + name + "_loss.npy").data<float>()[0];
  EXPECT_NEAR(loss, expected, 1e-5 * std::fabs(expected));
  for (size_t p = 0; p < training->parameters.size(); ++p) {
    const std::string parameter = model->graph().values[training->parameters[p]].name;
    Tensor mean = TrainingRun::Copy(run.gradients()[p]);
    for (int64_t i = 0; i < mean.num_elements(); ++i) mean.data<float>()[i] /= rows;
    EXPECT_LE(testing::RelativeL2(
                  mean, testing::ReadNpyTensor(dir + "/" + name + "_grad_" + parameter + ".npy")),
              1e-4)
        << parameter;
  }
}

INSTANTIATE_TEST_SUITE_P(Networks, TorchGradientsTest,
                         ::testing::Values("elementwise", "pooling", "transformer",
                                           "written_norm"));

}  // namespace
}  // namespace replicad
