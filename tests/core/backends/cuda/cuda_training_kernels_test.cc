// replicad.ReluGrad, ClipGrad, DropoutTrain, SumToShape, ConcatGrad, PadGrad,
// SoftmaxCrossEntropy and MeanSquaredError on CUDA against the CPU kernels.
// Selections, copies and the dropout masks are exact on both (kExact);
// sums differ only in order, so float outputs agree to
// |cuda - cpu| <= 1e-4 * (1 + |cpu|) per element (kTolerance). Errors
// (labels out of range) must match in code and text. Skips without a GPU
// (CTest label gpu).

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/device/run_context.h"
#include "core/ops/training_ops.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::KernelCall;
using testing::RunKernel;

constexpr double kTolerance = 1e-4;
constexpr double kExact = 0;

Tensor Random(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

Tensor Scalar(float value) {
  Tensor t = Tensor::Host(DType::kFloat32, {});
  *t.data<float>() = value;
  return t;
}

Tensor Int64s(const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

void ExpectNear(const Tensor& actual, const Tensor& expected, double tolerance,
                const std::string& what) {
  ASSERT_EQ(TensorTypeToString(actual.type()), TensorTypeToString(expected.type())) << what;
  int reported = 0;
  for (int64_t i = 0; i < expected.num_elements() && reported < 5; ++i) {
    const double a = actual.data<float>()[i];
    const double e = expected.data<float>()[i];
    if (std::isnan(a) && std::isnan(e)) continue;
    const bool same =
        tolerance == kExact ? a == e : std::fabs(a - e) <= tolerance * (1 + std::fabs(e));
    if (!same) {
      ADD_FAILURE() << what << ", element " << i << ": " << a << " vs cpu " << e;
      ++reported;
    }
  }
}

class CudaTrainingKernelsTest : public testing::CpuAndGpuTest {
 protected:
  // Runs `call` on both devices, expects every output to agree within
  // `tolerance` (kExact: bit for bit) and returns the CPU's outputs.
  std::vector<Tensor> ExpectSameOnGpu(const KernelCall& call, double tolerance,
                                      const std::string& what) {
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, call);
    EXPECT_TRUE(cpu.ok()) << what << ": " << cpu.status();
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    EXPECT_TRUE(gpu.ok()) << what << ": " << gpu.status();
    if (!cpu.ok() || !gpu.ok()) return {};
    EXPECT_EQ(gpu->size(), cpu->size()) << what;
    if (gpu->size() != cpu->size()) return {};
    for (size_t o = 0; o < cpu->size(); ++o) {
      ExpectNear((*gpu)[o], (*cpu)[o], tolerance, absl::StrCat(what, ", output ", o));
    }
    return *std::move(cpu);
  }
};

// replicad.AllFinite: 1 for finite values (the largest floats and the
// smallest denormals among them), 0 with a NaN or an infinity anywhere,
// the CPU's answer on the GPU.
TEST_F(CudaTrainingKernelsTest, AllFinite) {
  for (const float odd : {3.4e38f, -1e-45f, NAN, INFINITY, -INFINITY}) {
    for (const int64_t at : {int64_t{0}, int64_t{123456}, int64_t{299999}}) {
      Tensor x = testing::RandomTensor({300000}, 5);
      x.data<float>()[at] = odd;
      testing::KernelCall call;
      call.op_type = std::string(kAllFinite);
      call.inputs = {x};
      ExpectKernelMatchesCpu(call, absl::StrCat("AllFinite with ", odd, " at ", at), 0.0);
      absl::StatusOr<std::vector<Tensor>> gpu = testing::RunKernel(*gpu_, call);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ((*gpu)[0].data<float>()[0], std::isfinite(odd) ? 1.0f : 0.0f);
    }
  }
}

TEST_F(CudaTrainingKernelsTest, ReluGrad) {
  for (float alpha : {0.0f, 0.01f, 0.2f}) {
    for (const Shape& shape : {Shape{4, 37, 19}, Shape{1}, Shape{3, 1000}}) {
      Tensor y = Random(shape, 1);
      // Exact zeros: Y == 0 takes the alpha branch on both.
      for (int64_t i = 0; i < y.num_elements(); i += 7) y.data<float>()[i] = 0.0f;
      KernelCall call;
      call.op_type = std::string(kReluGrad);
      call.attributes.Set("alpha", alpha);
      call.inputs = {y, Random(shape, 2)};
      ExpectSameOnGpu(call, kExact,
                      absl::StrCat("ReluGrad alpha ", alpha, " ", ShapeToString(shape)));
    }
  }
}

TEST_F(CudaTrainingKernelsTest, ClipGrad) {
  const Shape shape{6, 50, 11};
  Tensor x = Random(shape, 3);
  // Exactly on the bounds: inside, as torch.clamp's backward counts them.
  x.data<float>()[0] = -0.25f;
  x.data<float>()[1] = 0.5f;
  const Tensor dy = Random(shape, 4);
  struct Bounds {
    std::optional<float> min, max;
  };
  for (const Bounds& bounds : {Bounds{-0.25f, 0.5f}, Bounds{-0.25f, std::nullopt},
                               Bounds{std::nullopt, 0.5f}, Bounds{std::nullopt, std::nullopt}}) {
    KernelCall call;
    call.op_type = std::string(kClipGrad);
    call.inputs = {x, dy};
    if (bounds.min || bounds.max) {
      call.inputs.push_back(bounds.min ? std::optional<Tensor>(Scalar(*bounds.min)) : std::nullopt);
      call.inputs.push_back(bounds.max ? std::optional<Tensor>(Scalar(*bounds.max)) : std::nullopt);
      if (bounds.min) call.constant_inputs.push_back(2);
      if (bounds.max) call.constant_inputs.push_back(3);
    }
    ExpectSameOnGpu(call, kExact,
                    absl::StrCat("ClipGrad min ", bounds.min.value_or(-INFINITY), " max ",
                                 bounds.max.value_or(INFINITY)));
  }
}

KernelCall DropoutCall(const Tensor& x, float ratio, int64_t node_seed, const RunContext& context) {
  KernelCall call;
  call.op_type = std::string(kDropoutTrain);
  call.attributes.Set("replicad.node_seed", node_seed);
  call.inputs = {x, Scalar(ratio)};
  call.constant_inputs = {1};
  call.context = context;
  return call;
}

TEST_F(CudaTrainingKernelsTest, DropoutMasksAreBitIdentical) {
  RunContext step;
  step.step = 7;
  step.seed = 99;
  step.first_row = 13;
  step.global_rows = 40;
  for (float ratio : {0.0f, 0.1f, 0.5f, 0.9f}) {
    for (const Shape& shape : {Shape{6, 5, 7}, Shape{27}, Shape{3, 4096}}) {
      const KernelCall call = DropoutCall(Random(shape, 5), ratio, 1234, step);
      const std::vector<Tensor> cpu = ExpectSameOnGpu(
          call, kExact, absl::StrCat("DropoutTrain ratio ", ratio, " ", ShapeToString(shape)));
      if (cpu.size() != 2) continue;
      const float keep = 1.0f / (1.0f - ratio);
      for (int64_t i = 0; i < cpu[1].num_elements(); ++i) {
        const float m = cpu[1].data<float>()[i];
        ASSERT_TRUE(m == 0.0f || m == keep) << "mask element " << i << " is " << m;
      }
    }
  }
  // The default context (outside training): step 0, seed 0, first row 0 on both.
  ExpectSameOnGpu(DropoutCall(Random({9, 33}, 6), 0.3f, 5, RunContext{}), kExact,
                  "DropoutTrain outside a step");
  // Opset 11 reads the ratio from an attribute.
  KernelCall attribute = DropoutCall(Random({9, 33}, 7), 0.3f, 5, step);
  attribute.opset = 11;
  attribute.attributes.Set("ratio", 0.3f);
  attribute.inputs.resize(1);
  attribute.constant_inputs.clear();
  ExpectSameOnGpu(attribute, kExact, "DropoutTrain opset 11");
}

// A slot running rows [13, 19) of the batch draws the masks the whole batch
// draws for those rows: the key is the global row.
TEST_F(CudaTrainingKernelsTest, DropoutMaskFollowsTheGlobalRow) {
  const Tensor whole = Random({19, 3, 8}, 8);
  RunContext all;
  all.step = 3;
  all.seed = 11;
  all.global_rows = 19;
  RunContext tail = all;
  tail.first_row = 13;
  absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, DropoutCall(whole, 0.5f, 77, all));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<Tensor>> gpu =
      RunKernel(*gpu_, DropoutCall(*whole.SliceRows(13, 19), 0.5f, 77, tail));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (int o = 0; o < 2; ++o) {
    ExpectNear((*gpu)[o], *(*cpu)[o].SliceRows(13, 19), kExact, absl::StrCat("output ", o));
  }
}

// dY in [0.5, 2.5): the CPU adds in float, one element after another, so a
// sum that cancels to near zero would carry its rounding error unscaled;
// positive terms keep both sides' errors relative to the sum.
KernelCall SumToShapeCall(const Shape& dy, const Shape& like, uint64_t seed) {
  Tensor gradient = Random(dy, seed);
  for (int64_t i = 0; i < gradient.num_elements(); ++i) gradient.data<float>()[i] += 1.5f;
  KernelCall call;
  call.op_type = std::string(kSumToShape);
  call.inputs = {gradient, Random(like, seed + 1)};
  return call;
}

TEST_F(CudaTrainingKernelsTest, SumToShapeBroadcastPatterns) {
  const Shape dy{8, 16, 5, 7};
  const std::vector<Shape> likes = {{16, 1, 1},    {1, 16, 1, 1}, {7},           {},
                                    {1},           {8, 1, 5, 1},  {8, 16, 5, 7}, {1, 1, 1, 1},
                                    {8, 16, 1, 7}, {5, 1},        {1, 16, 5, 7}, {8, 1, 1, 1}};
  uint64_t seed = 10;
  for (const Shape& like : likes) {
    ExpectSameOnGpu(SumToShapeCall(dy, like, seed += 2), kTolerance,
                    absl::StrCat("SumToShape ", ShapeToString(dy), " to ", ShapeToString(like)));
  }
}

// Sizes that take each path of the CUDA kernel: one thread per output with
// the reduction cut into chunks, one block per output with and without
// chunks, a whole-tensor sum, and dims of size 1 among broadcast ones.
TEST_F(CudaTrainingKernelsTest, SumToShapeLargeReductions) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{300, 1000}, {1000}},
      {{64, 3, 32, 32}, {3, 1, 1}},
      {{100000}, {}},
      {{2, 100000}, {2, 1}},
      {{4096, 40}, {1, 40}},
      {{70000, 3}, {3}},
      {{32, 1, 64, 1, 9}, {64, 1, 1}},
      {{2, 3, 4, 5, 6, 7, 8, 9, 2}, {3, 1, 5, 1, 7, 1, 9, 1}},
  };
  uint64_t seed = 40;
  for (const auto& [dy, like] : cases) {
    ExpectSameOnGpu(SumToShapeCall(dy, like, seed += 2), kTolerance,
                    absl::StrCat("SumToShape ", ShapeToString(dy), " to ", ShapeToString(like)));
  }
}

// Broadcast from an empty dim: the sum of nothing, zeros.
TEST_F(CudaTrainingKernelsTest, SumToShapeOfEmpty) {
  ExpectSameOnGpu(SumToShapeCall({0, 5}, {5}, 3), kExact, "SumToShape [0, 5] to [5]");
}

TEST_F(CudaTrainingKernelsTest, ConcatGrad) {
  struct Case {
    int64_t axis;
    std::vector<Shape> inputs;
  };
  const std::vector<Case> cases = {
      {1, {{4, 3, 6}, {4, 5, 6}, {4, 2, 6}}},
      {-1, {{4, 3, 6}, {4, 3, 1}, {4, 3, 17}}},
      {0, {{2, 9}, {7, 9}}},
      {2, {{3, 2, 64, 5}, {3, 2, 31, 5}}},
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    Shape dy = c.inputs[0];
    const size_t axis = c.axis < 0 ? dy.size() + c.axis : c.axis;
    dy[axis] = 0;
    for (const Shape& input : c.inputs) dy[axis] += input[axis];
    KernelCall call;
    call.op_type = std::string(kConcatGrad);
    call.attributes.Set("axis", c.axis);
    call.inputs = {Random(dy, seed++)};
    for (const Shape& input : c.inputs) call.inputs.push_back(Random(input, seed++));
    ExpectSameOnGpu(call, kExact,
                    absl::StrCat("ConcatGrad axis ", c.axis, " of ", ShapeToString(dy)));
  }
}

struct PadCase {
  std::string mode;
  Shape x;
  std::vector<int64_t> pads;  // Begin for each padded axis, then end.
  std::vector<int64_t> axes;  // Empty: every axis (opset 17); else opset 18's axes input.
};

TEST_F(CudaTrainingKernelsTest, PadGrad) {
  const std::vector<PadCase> cases = {
      {"constant", {3, 5, 6}, {0, 1, 2, 1, 0, 3}, {}},
      // Negative pads crop: those elements of X get no gradient.
      {"constant", {3, 5, 6}, {0, -1, 2, 0, 2, -2}, {}},
      {"edge", {3, 5, 6}, {1, 2, 3, 0, 4, 1}, {}},
      {"edge", {2, 1, 7}, {0, 3, 2, 0, 2, 5}, {}},
      {"reflect", {3, 5, 6}, {0, 2, 3, 0, 4, 1}, {}},
      // Reflect pads longer than the dim repeat the mirror.
      {"reflect", {2, 3, 4}, {0, 5, 7, 0, 6, 9}, {}},
      {"reflect", {2, 4, 8, 8}, {1, 1, 1, 1}, {2, 3}},
      {"edge", {2, 4, 8, 8}, {-1, 3, 2, 4}, {-2, -1}},
  };
  uint64_t seed = 80;
  for (const PadCase& c : cases) {
    const size_t rank = c.x.size();
    std::vector<int64_t> axes = c.axes;
    if (axes.empty()) {
      for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    Shape y = c.x;
    for (size_t i = 0; i < axes.size(); ++i) {
      const size_t d = axes[i] < 0 ? rank + axes[i] : axes[i];
      y[d] += c.pads[i] + c.pads[i + axes.size()];
    }
    KernelCall call;
    call.op_type = std::string(kPadGrad);
    call.attributes.Set("mode", c.mode);
    call.inputs = {Random(y, seed++), Random(c.x, seed++), Int64s(c.pads)};
    call.constant_inputs = {2};
    if (!c.axes.empty()) {
      call.opset = 18;
      call.inputs.push_back(std::nullopt);  // constant_value
      call.inputs.push_back(Int64s(c.axes));
      call.constant_inputs.push_back(4);
    }
    ExpectSameOnGpu(
        call, kTolerance,
        absl::StrCat("PadGrad ", c.mode, " X ", ShapeToString(c.x), " to ", ShapeToString(y)));
  }
}

// Logits with a tied row (first argmax) and a row of large values (the
// log-sum-exp shift).
Tensor Logits(int64_t rows, int64_t classes, uint64_t seed) {
  Tensor logits = Random({rows, classes}, seed);
  for (int64_t i = 0; i < logits.num_elements(); ++i) logits.data<float>()[i] *= 4;
  if (rows > 1) {
    for (int64_t c = 0; c < classes; ++c) logits.data<float>()[classes + c] = 0.5f;
  }
  if (rows > 2) {
    for (int64_t c = 0; c < classes; ++c) logits.data<float>()[2 * classes + c] += 300.0f;
  }
  return logits;
}

Tensor Labels(int64_t rows, int64_t classes, uint64_t seed) {
  const Tensor u = Random({rows}, seed);
  Tensor labels = Tensor::Host(DType::kInt64, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = static_cast<int64_t>((u.data<float>()[r] + 1) / 2 * classes);
    labels.data<int64_t>()[r] = label < classes ? label : classes - 1;
  }
  return labels;
}

// Nonnegative rows summing to about 1, one of them tied.
Tensor Probabilities(int64_t rows, int64_t classes, uint64_t seed) {
  Tensor t = Random({rows, classes}, seed);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = t.data<float>() + r * classes;
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += row[c] = std::fabs(row[c]) + 0.01f;
    for (int64_t c = 0; c < classes; ++c) row[c] = static_cast<float>(row[c] / sum);
  }
  if (rows > 0) {
    for (int64_t c = 0; c < classes; ++c) t.data<float>()[c] = 1.0f / static_cast<float>(classes);
  }
  return t;
}

KernelCall CrossEntropyCall(const Tensor& logits, const Tensor& targets) {
  KernelCall call;
  call.op_type = std::string(kSoftmaxCrossEntropy);
  call.inputs = {logits, targets};
  return call;
}

TEST_F(CudaTrainingKernelsTest, SoftmaxCrossEntropyWithLabels) {
  RunContext step;
  step.first_row = 20;
  uint64_t seed = 100;
  // Narrow rows take a warp per row, wide ones a block.
  for (const auto& [rows, classes] : std::vector<std::pair<int64_t, int64_t>>{
           {37, 10}, {1, 1}, {256, 64}, {5, 1000}, {300, 65}, {2, 3}}) {
    KernelCall call =
        CrossEntropyCall(Logits(rows, classes, seed), Labels(rows, classes, seed + 1));
    call.context = step;
    seed += 2;
    const std::vector<Tensor> cpu = ExpectSameOnGpu(
        call, kTolerance, absl::StrCat("SoftmaxCrossEntropy labels [", rows, ", ", classes, "]"));
    // `correct` counts rows: a whole number, exact on both.
    if (cpu.size() == 3) {
      EXPECT_EQ(std::floor(*cpu[1].data<float>()), *cpu[1].data<float>());
    }
  }
}

TEST_F(CudaTrainingKernelsTest, SoftmaxCrossEntropyWithProbabilities) {
  uint64_t seed = 200;
  for (const auto& [rows, classes] :
       std::vector<std::pair<int64_t, int64_t>>{{37, 10}, {1, 1}, {64, 200}, {7, 1000}}) {
    ExpectSameOnGpu(
        CrossEntropyCall(Logits(rows, classes, seed), Probabilities(rows, classes, seed + 1)),
        kTolerance, absl::StrCat("SoftmaxCrossEntropy probabilities [", rows, ", ", classes, "]"));
    seed += 2;
  }
}

// The first bad row (of the whole batch) and its label, in the same words.
TEST_F(CudaTrainingKernelsTest, SoftmaxCrossEntropyLabelOutOfRange) {
  RunContext step;
  step.first_row = 20;
  for (const int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Tensor labels = Labels(8, 10, 300);
    labels.data<int64_t>()[3] = bad;
    labels.data<int64_t>()[5] = 11;
    KernelCall call = CrossEntropyCall(Logits(8, 10, 301), labels);
    call.context = step;
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, call);
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    ASSERT_FALSE(cpu.ok());
    ASSERT_FALSE(gpu.ok());
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gpu.status(), cpu.status());
    EXPECT_EQ(cpu.status().message(),
              absl::StrCat("targets[23] must be a class in [0, 10), received ", bad));
  }
  // The slot stays usable: the next run with good labels succeeds.
  KernelCall good = CrossEntropyCall(Logits(8, 10, 302), Labels(8, 10, 303));
  ExpectSameOnGpu(good, kTolerance, "SoftmaxCrossEntropy after an error");
}

TEST_F(CudaTrainingKernelsTest, MeanSquaredError) {
  uint64_t seed = 400;
  for (const Shape& shape :
       {Shape{16, 3, 5}, Shape{1000, 100}, Shape{1}, Shape{7, 1}, Shape{3, 300000}}) {
    KernelCall call;
    call.op_type = std::string(kMeanSquaredError);
    call.inputs = {Random(shape, seed), Random(shape, seed + 1)};
    seed += 2;
    ExpectSameOnGpu(call, kTolerance, absl::StrCat("MeanSquaredError ", ShapeToString(shape)));
  }
}

}  // namespace
}  // namespace replicad
