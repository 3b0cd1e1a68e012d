// Execution plans: no device allocation after warm-up (counted through the device); the liveness
// arena is smaller than the sum of the intermediate values; a host slot's plans of two sizes, run
// in turns on their shared arena, give what each gave alone and allocate nothing once the larger
// has run; concatenations at batch 1 written in place (a chain whose first concatenation is a
// prefix of the second: both dropped, outputs as computed by hand), and those that must still run
// (a graph input, a repeated input, a graph output); a Reshape of an intermediate value as a view
// (of a graph input: still a copy); two residual blocks whose convolutions write over their dead
// addends (along the chain too, the second block's addend lying in the first's buffer), and over
// neither where the first addend is read later, the outputs checked against a double-precision
// computation over two runs.

#include "core/model/execution_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/model/default_model.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Replica> CpuReplica(std::shared_ptr<const Model> model) {
  return testing::MakeCpuReplica(std::move(model));
}

// After the plan for a shape exists, running it again allocates nothing on
// the device: the per-request path is allocation-free.
TEST(ExecutionPlanTest, NoDeviceAllocationAfterWarmUp) {
  std::unique_ptr<Replica> replica = CpuReplica(*LoadDefaultModel());
  Device& device = replica->device();
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{4, 1, 28, 28}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor input = testing::RandomTensor({4, 1, 28, 28}, 3);
  Tensor logits = Tensor::Host(DType::kFloat32, {4, 10});
  Tensor probabilities = Tensor::Host(DType::kFloat32, {4, 10});
  const void* inputs[] = {input.raw_data()};
  void* outputs[] = {logits.raw_data(), probabilities.raw_data()};
  ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());  // Warm-up.
  const uint64_t allocations = device.allocation_count();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
    ASSERT_EQ(*replica->PlanFor({{4, 1, 28, 28}}), *plan);
  }
  EXPECT_EQ(device.allocation_count(), allocations);
  // Probabilities are a softmax of the logits: rows sum to 1.
  for (int row = 0; row < 4; ++row) {
    float sum = 0;
    for (int c = 0; c < 10; ++c) sum += probabilities.data<float>()[row * 10 + c];
    EXPECT_NEAR(sum, 1.0f, 1e-5);
  }
}

// Run with a Proceed asks it once before every kernel. Where it answers no,
// the run stops before that kernel, returning its status and the kernel
// reached; the plan then runs as if it had never been stopped.
TEST(ExecutionPlanTest, ProceedIsAskedBeforeEveryKernelAndStopsTheRunWhereItSaysNo) {
  std::unique_ptr<Replica> replica = CpuReplica(*LoadDefaultModel());
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{4, 1, 28, 28}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const size_t kernels = (*plan)->step_count();
  ASSERT_GE(kernels, 3u);
  Tensor input = testing::RandomTensor({4, 1, 28, 28}, 5);
  Tensor logits = Tensor::Host(DType::kFloat32, {4, 10});
  Tensor probabilities = Tensor::Host(DType::kFloat32, {4, 10});
  const void* inputs[] = {input.raw_data()};
  void* outputs[] = {logits.raw_data(), probabilities.raw_data()};
  size_t asked = 0;
  ASSERT_TRUE((*plan)
                  ->Run(inputs, outputs,
                        [&] {
                          ++asked;
                          return absl::OkStatus();
                        })
                  .ok());
  EXPECT_EQ(asked, kernels);
  Tensor expected = Tensor::Host(DType::kFloat32, {4, 10});
  std::memcpy(expected.raw_data(), logits.raw_data(), logits.byte_size());

  for (size_t stop_before : {size_t{1}, kernels / 2, kernels}) {
    SCOPED_TRACE(stop_before);
    asked = 0;
    std::fill_n(logits.data<float>(), logits.num_elements(), 0.0f);
    absl::Status status = (*plan)->Run(inputs, outputs, [&] {
      return ++asked < stop_before ? absl::OkStatus() : absl::DeadlineExceededError("too late");
    });
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("too late; stopped before kernel ",
                                                         stop_before, " of ", kernels, " (node")));
    EXPECT_EQ(asked, stop_before);
    ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
    EXPECT_EQ(std::memcmp(logits.raw_data(), expected.raw_data(), logits.byte_size()), 0);
  }
}

// A host slot's plans keep their intermediate values in one shared arena:
// plans of two sizes run in turns give what each gave alone (the smaller
// one's rows those of the larger), and once both have run, turns allocate
// nothing, the larger one's first run having grown the arena.
TEST(ExecutionPlanTest, PlansOfAHostSlotShareOneArena) {
  std::unique_ptr<Replica> replica = CpuReplica(*LoadDefaultModel());
  Device& device = replica->device();
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> small = replica->PlanFor({{4, 1, 28, 28}});
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> large = replica->PlanFor({{16, 1, 28, 28}});
  ASSERT_TRUE(small.ok() && large.ok());
  ASSERT_LT((*small)->arena_bytes(), (*large)->arena_bytes());
  const Tensor input = testing::RandomTensor({16, 1, 28, 28}, 5);
  struct Outputs {
    Tensor logits, probabilities;
  };
  auto run = [&](ExecutionPlan& plan, int64_t rows) {
    Outputs out{Tensor::Host(DType::kFloat32, {rows, 10}),
                Tensor::Host(DType::kFloat32, {rows, 10})};
    const void* inputs[] = {input.raw_data()};
    void* outputs[] = {out.logits.raw_data(), out.probabilities.raw_data()};
    EXPECT_TRUE(plan.Run(inputs, outputs).ok());
    return out;
  };
  const Outputs small_alone = run(**small, 4);
  const Outputs large_alone = run(**large, 16);  // Grows the arena.
  const uint64_t allocations = device.allocation_count();
  for (int turn = 0; turn < 3; ++turn) {
    const Outputs s = run(**small, 4);
    const Outputs l = run(**large, 16);
    for (int i = 0; i < 40; ++i) {
      ASSERT_EQ(s.logits.data<float>()[i], small_alone.logits.data<float>()[i]) << i;
      EXPECT_NEAR(s.logits.data<float>()[i], l.logits.data<float>()[i], 1e-4) << i;
    }
    for (int i = 0; i < 160; ++i) {
      ASSERT_EQ(l.logits.data<float>()[i], large_alone.logits.data<float>()[i]) << i;
      ASSERT_EQ(l.probabilities.data<float>()[i], large_alone.probabilities.data<float>()[i]) << i;
    }
  }
  EXPECT_EQ(device.allocation_count(), allocations);
}

// With a shared arena a plan owns no buffer: its kernels' workspace (the
// default model's convolutions convert to oneDNN's blocked layouts there)
// follows its intermediate values in the arena, so a slot's plans hold one
// workspace between them, and the first run reserves both.
TEST(ExecutionPlanTest, WithASharedArenaThePlanAllocatesNoWorkspaceOfItsOwn) {
  std::shared_ptr<const Model> model = *LoadDefaultModel();
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> device = CreateCpuDevice(cpu, CpuSlotOptions{1});
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      Replica::Create(model, SlotAssignment{"r0", cpu.id, 1}, CreateCpuDevice(cpu, {1}));
  ASSERT_TRUE(replica.ok()) << replica.status();
  auto arena = std::make_shared<SharedPlanArena>(*device);
  const uint64_t before = device->allocation_count();
  std::vector<std::unique_ptr<ExecutionPlan>> plans;
  for (int64_t rows : {8, 32, 16}) {
    absl::StatusOr<std::unique_ptr<ExecutionPlan>> plan = ExecutionPlan::Create(
        model->graph(), (*replica)->weights(), *device, {{rows, 1, 28, 28}}, arena);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_GT((*plan)->workspace_bytes(), 0u);
    plans.push_back(*std::move(plan));
  }
  EXPECT_EQ(device->allocation_count(), before);
  EXPECT_EQ(arena->capacity(), 0u);

  const Tensor input = testing::RandomTensor({32, 1, 28, 28}, 9);
  Tensor logits = Tensor::Host(DType::kFloat32, {32, 10});
  Tensor probabilities = Tensor::Host(DType::kFloat32, {32, 10});
  const void* inputs[] = {input.raw_data()};
  void* outputs[] = {logits.raw_data(), probabilities.raw_data()};
  for (const auto& plan : plans) ASSERT_TRUE(plan->Run(inputs, outputs).ok());
  const ExecutionPlan& largest = *plans[1];
  EXPECT_GE(arena->capacity(), largest.arena_bytes() + largest.workspace_bytes());
  EXPECT_LT(arena->capacity(), largest.arena_bytes() + largest.workspace_bytes() + 64);
}

TEST(ExecutionPlanTest, ArenaSharesMemoryBetweenDeadValues) {
  std::unique_ptr<Replica> replica = CpuReplica(*LoadDefaultModel());
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{16, 1, 28, 28}});
  ASSERT_TRUE(plan.ok());
  EXPECT_GT((*plan)->arena_bytes(), 0u);
  EXPECT_LT((*plan)->arena_bytes(), (*plan)->unshared_bytes());
  EXPECT_EQ((*plan)->output_types()[0], (TensorType{DType::kFloat32, {16, 10}}));
}

TEST(ExecutionPlanTest, GraphOutputThatIsAnInputOrRepeatedIsCopied) {
  OnnxModelBuilder b("passthrough");
  b.AddNode("Relu", {"x"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("x", DType::kFloat32, {kAnyDim, 2});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "p"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  float x[2] = {-1, 2}, y[2] = {9, 9}, x_out[2] = {9, 9};
  const void* inputs[] = {x};
  void* outputs[] = {y, x_out};
  ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(x_out[0], -1.0f);
  EXPECT_EQ(x_out[1], 2.0f);
}

TEST(ExecutionPlanTest, ShapeErrorsNameTheNode) {
  OnnxModelBuilder b("bad_gemm");
  b.AddInitializer("w", Tensor::Host(DType::kFloat32, {3, 4}));
  b.AddNode("MatMul", {"x", "w"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, kAnyDim});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "m"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{2, 5}});
  EXPECT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("node 'y' (MatMul)"));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// Add(c1, c2) has only known inputs: it runs once when the plan is made, and
// the per-request plan is the single Mul.
TEST(ExecutionPlanTest, NodesWithKnownInputsAreFoldedAtPlanTime) {
  OnnxModelBuilder b("fold");
  Tensor one = Tensor::Host(DType::kFloat32, {2});
  one.data<float>()[0] = 1.5f;
  one.data<float>()[1] = -2.0f;
  b.AddInitializer("c1", one);
  b.AddInitializer("c2", one);
  b.AddNode("Add", {"c1", "c2"}, {"c"});
  b.AddNode("Mul", {"x", "c"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "fold"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->step_count(), 1u);
  float x[2] = {2, 3}, y[2] = {0, 0};
  const void* inputs[] = {x};
  void* outputs[] = {y};
  replica->device().Enqueue([&] { ASSERT_TRUE((*plan)->Run(inputs, outputs).ok()); });
  ASSERT_TRUE(replica->device().Synchronize().ok());
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[1], -12.0f);
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// f0 = Relu(x), f1 = Sigmoid(f0), c1 = Concat(f0, f1), g = Sigmoid(c1),
// f2 = f1 * f1, c2 = Concat(f0, f1, f2), y = Sigmoid(c2): a densenet block in
// miniature, whose first concatenation is a prefix of the second.
std::shared_ptr<const Model> ChainOfConcatenations() {
  OnnxModelBuilder b("chain");
  b.AddNode("Relu", {"x"}, {"f0"});
  b.AddNode("Sigmoid", {"f0"}, {"f1"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"f0", "f1"}, {"c1"}), "axis", 1);
  b.AddNode("Sigmoid", {"c1"}, {"g"});
  b.AddNode("Mul", {"f1", "f1"}, {"f2"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"f0", "f1", "f2"}, {"c2"}), "axis", 1);
  b.AddNode("Sigmoid", {"c2"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2, 3});
  b.AddOutput("g", DType::kFloat32, {kAnyDim, 4, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 6, 3});
  return testing::LoadOrDie(b.Serialize(), "chain");
}

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// At batch 1 both concatenations are their inputs back to back: the
// producers write into one buffer and neither runs; at batch 2 they run.
// Either way every output is what the graph says.
TEST(ExecutionPlanTest, ConcatenationsOfOneRowAreWrittenInPlace) {
  std::unique_ptr<Replica> replica = CpuReplica(ChainOfConcatenations());
  for (int64_t batch : {1, 2}) {
    SCOPED_TRACE(batch);
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{batch, 2, 3}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->step_count(), batch == 1 ? 5u : 7u);
    const Tensor x = testing::RandomTensor({batch, 2, 3}, 11);
    Tensor g = Tensor::Host(DType::kFloat32, {batch, 4, 3});
    Tensor y = Tensor::Host(DType::kFloat32, {batch, 6, 3});
    const void* inputs[] = {x.raw_data()};
    void* outputs[] = {g.raw_data(), y.raw_data()};
    absl::Status status;
    replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
    ASSERT_TRUE(replica->device().Synchronize().ok());
    ASSERT_TRUE(status.ok()) << status;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t i = 0; i < 6; ++i) {
        const float f0 = std::max(x.data<float>()[n * 6 + i], 0.0f);
        const float f1 = Sigmoid(f0);
        const float features[] = {f0, f1, f1 * f1};
        for (int k = 0; k < 3; ++k) {
          EXPECT_FLOAT_EQ(y.data<float>()[n * 18 + k * 6 + i], Sigmoid(features[k]));
          if (k < 2) {
            EXPECT_FLOAT_EQ(g.data<float>()[n * 12 + k * 6 + i], Sigmoid(features[k]));
          }
        }
      }
    }
  }
}

// A concatenation whose first input a convolution hands over in its blocked
// layout and whose second is row-major (a Transpose's output; DeepLabV3's
// upsampled pooling branch): the row-major part is reordered, the joined map
// is written blocked, and the 1x1 convolution reading it must be told so.
// (Found with torchvision's deeplabv3_mobilenet_v3_large on 2026-12-02: the
// reordering kernel did not pass its inner kernel's layout on.)
TEST(ExecutionPlanTest, ConcatenationOfABlockedAndARowMajorMapFeedsAConvolution) {
  constexpr int64_t kC = 16, kS = 4;
  const Tensor wa = testing::RandomTensor({kC, kC, 1, 1}, 21);
  const Tensor wp = testing::RandomTensor({3, 2 * kC, 1, 1}, 22);
  OnnxModelBuilder builder("blocked_and_row_major");
  builder.AddInitializer("wa", wa);
  builder.AddInitializer("wp", wp);
  builder.AddNode("Conv", {"x", "wa"}, {"a"});
  OnnxModelBuilder::SetInts(builder.AddNode("Transpose", {"x"}, {"t"}), "perm", {0, 1, 3, 2});
  OnnxModelBuilder::SetInt(builder.AddNode("Concat", {"a", "t"}, {"c"}), "axis", 1);
  builder.AddNode("Conv", {"c", "wp"}, {"y"});
  builder.AddInput("x", DType::kFloat32, {kAnyDim, kC, kS, kS});
  builder.AddOutput("y", DType::kFloat32, {kAnyDim, 3, kS, kS});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(builder.Serialize(), "m"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, kC, kS, kS}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Tensor x = testing::RandomTensor({1, kC, kS, kS}, 23);
  Tensor y = Tensor::Host(DType::kFloat32, {1, 3, kS, kS});
  const void* inputs[] = {x.raw_data()};
  void* outputs[] = {y.raw_data()};
  absl::Status status;
  replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
  ASSERT_TRUE(replica->device().Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  const auto at = [&](int64_t c, int64_t h, int64_t w) {
    return static_cast<double>(x.data<float>()[(c * kS + h) * kS + w]);
  };
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t h = 0; h < kS; ++h) {
      for (int64_t w = 0; w < kS; ++w) {
        double expected = 0;
        for (int64_t k = 0; k < kC; ++k) {
          double a = 0;
          for (int64_t c = 0; c < kC; ++c) a += wa.data<float>()[k * kC + c] * at(c, h, w);
          expected += wp.data<float>()[m * 2 * kC + k] * a;
          expected += wp.data<float>()[m * 2 * kC + kC + k] * at(k, w, h);
        }
        EXPECT_NEAR(y.data<float>()[(m * kS + h) * kS + w], expected,
                    1e-4 * (1 + std::fabs(expected)))
            << "output " << m << "," << h << "," << w;
      }
    }
  }
}

// r = Relu(x), v = Reshape(r), c = Concat(v, Sigmoid(v)) along the last
// axis at batch 1, y = Relu(c): the Reshape's output is a view of r, and r
// and the Sigmoid's output are written into c, so only the Relus and the
// Sigmoid run; a Reshape of the graph input itself is still a copy.
TEST(ExecutionPlanTest, ReshapesAreViews) {
  OnnxModelBuilder b("views");
  Tensor shape = Tensor::Host(DType::kInt64, {2});
  shape.data<int64_t>()[0] = 1;
  shape.data<int64_t>()[1] = 6;
  b.AddInitializer("shape", shape);
  b.AddNode("Relu", {"x"}, {"r"});
  b.AddNode("Reshape", {"r", "shape"}, {"v"});
  b.AddNode("Sigmoid", {"v"}, {"s"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"v", "s"}, {"c"}), "axis", 1);
  b.AddNode("Relu", {"c"}, {"y"});
  b.AddNode("Reshape", {"x", "shape"}, {"xv"});
  b.AddNode("Relu", {"xv"}, {"z"});
  b.AddInput("x", DType::kFloat32, {1, 2, 3});
  b.AddOutput("y", DType::kFloat32, {1, 12});
  b.AddOutput("z", DType::kFloat32, {1, 6});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "views"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 2, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->step_count(), 5u);
  const float x[6] = {-1, 2, -3, 4, 0.5f, -0.25f};
  float y[12], z[6];
  const void* inputs[] = {x};
  void* outputs[] = {y, z};
  absl::Status status;
  replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
  ASSERT_TRUE(replica->device().Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  for (int i = 0; i < 6; ++i) {
    const float r = std::max(x[i], 0.0f);
    EXPECT_EQ(y[i], r);
    EXPECT_FLOAT_EQ(y[6 + i], Sigmoid(r));
    EXPECT_EQ(z[i], r);
  }
}

// Two residual blocks of 1x1 convolutions over 16 channels, at batch 1:
//   s = W0 x;  y1 = Relu(W1 x + s);  t = W2 y1;  y2 = Relu(W3 t + y1);
//   out = GlobalAveragePool(y2), and with `s_read_later`, GlobalAveragePool(s)
//   as well, after the first block.
// Each block's Add fuses into its convolution, which accumulates onto the
// addend: where the addend is read by no later step the convolution writes
// over it (no copy), along the chain too (y1 lies in s's buffer); where it
// is, it gets a copy.
std::shared_ptr<const Model> ResidualBlocks(const std::vector<Tensor>& w, bool s_read_later) {
  OnnxModelBuilder b("residual_blocks");
  for (int k = 0; k < 4; ++k) b.AddInitializer(absl::StrCat("w", k), w[k]);
  b.AddNode("Conv", {"x", "w0"}, {"s"});
  b.AddNode("Conv", {"x", "w1"}, {"c1"});
  b.AddNode("Add", {"c1", "s"}, {"a1"});
  b.AddNode("Relu", {"a1"}, {"y1"});
  if (s_read_later) b.AddNode("GlobalAveragePool", {"s"}, {"gs"});
  b.AddNode("Conv", {"y1", "w2"}, {"t"});
  b.AddNode("Conv", {"t", "w3"}, {"c2"});
  b.AddNode("Add", {"y1", "c2"}, {"a2"});
  b.AddNode("Relu", {"a2"}, {"y2"});
  b.AddNode("GlobalAveragePool", {"y2"}, {"out"});
  b.AddInput("x", DType::kFloat32, {1, 16, 4, 4});
  b.AddOutput("out", DType::kFloat32, {1, 16, 1, 1});
  if (s_read_later) b.AddOutput("gs", DType::kFloat32, {1, 16, 1, 1});
  return testing::LoadOrDie(b.Serialize(), "residual_blocks");
}

TEST(ExecutionPlanTest, ConvolutionsWriteOverResidualAddendsNoLaterStepReads) {
  std::vector<Tensor> w;
  for (int k = 0; k < 4; ++k) w.push_back(testing::RandomTensor({16, 16, 1, 1}, 40 + k));
  const Tensor x = testing::RandomTensor({1, 16, 4, 4}, 45);
  // 1x1 convolution of 16 x 16 pixels, in double.
  const auto conv = [&](const Tensor& weights, const std::vector<double>& in) {
    std::vector<double> y(16 * 16, 0.0);
    for (int o = 0; o < 16; ++o) {
      for (int i = 0; i < 16; ++i) {
        for (int p = 0; p < 16; ++p)
          y[o * 16 + p] += weights.data<float>()[o * 16 + i] * in[i * 16 + p];
      }
    }
    return y;
  };
  const auto pool = [](const std::vector<double>& v) {
    std::vector<double> mean(16, 0.0);
    for (int c = 0; c < 16; ++c) {
      for (int p = 0; p < 16; ++p) mean[c] += v[c * 16 + p] / 16;
    }
    return mean;
  };
  const std::vector<double> xd(x.data<float>(), x.data<float>() + 256);
  const std::vector<double> s = conv(w[0], xd);
  std::vector<double> y1 = conv(w[1], xd);
  for (int k = 0; k < 256; ++k) y1[k] = std::max(0.0, y1[k] + s[k]);
  std::vector<double> y2 = conv(w[3], conv(w[2], y1));
  for (int k = 0; k < 256; ++k) y2[k] = std::max(0.0, y2[k] + y1[k]);
  const std::vector<double> expected_out = pool(y2), expected_gs = pool(s);

  for (bool s_read_later : {false, true}) {
    SCOPED_TRACE(s_read_later ? "s read later" : "s dies at the first block");
    std::unique_ptr<Replica> replica = CpuReplica(ResidualBlocks(w, s_read_later));
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 16, 4, 4}});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->overwriting_steps(), s_read_later ? 1u : 2u);
    float out[16], gs[16];
    const void* inputs[] = {x.raw_data()};
    void* outputs[] = {out, gs};
    for (int run = 0; run < 2; ++run) {  // The second run starts from the first's bytes.
      absl::Status status;
      replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
      ASSERT_TRUE(replica->device().Synchronize().ok());
      ASSERT_TRUE(status.ok()) << status;
      for (int c = 0; c < 16; ++c) {
        EXPECT_NEAR(out[c], expected_out[c], 1e-4) << "channel " << c << ", run " << run;
        if (s_read_later) {
          EXPECT_NEAR(gs[c], expected_gs[c], 1e-4) << "channel " << c;
        }
      }
    }
  }
}

// A graph input, a value listed twice and a graph output cannot be written
// into their place: those concatenations still run.
TEST(ExecutionPlanTest, ConcatenationsOfInputsRepeatsAndOutputsStillRun) {
  OnnxModelBuilder b("kept");
  b.AddNode("Relu", {"x"}, {"r"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"x", "r"}, {"a"}), "axis", 1);
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"r", "r"}, {"b"}), "axis", 1);
  b.AddNode("Relu", {"a"}, {"ya"});
  b.AddNode("Relu", {"b"}, {"yb"});
  b.AddNode("Sigmoid", {"x"}, {"s"});
  b.AddNode("Sigmoid", {"s"}, {"s2"});
  OnnxModelBuilder::SetInt(b.AddNode("Concat", {"s", "s2"}, {"yc"}), "axis", 1);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("ya", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("yb", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("yc", DType::kFloat32, {kAnyDim, 4});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "kept"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->step_count(), 8u);
  float x[2] = {-1, 2}, ya[4], yb[4], yc[4];
  const void* inputs[] = {x};
  void* outputs[] = {ya, yb, yc};
  absl::Status status;
  replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
  ASSERT_TRUE(replica->device().Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::vector<float>(ya, ya + 4), (std::vector<float>{0, 2, 0, 2}));
  EXPECT_EQ(std::vector<float>(yb, yb + 4), (std::vector<float>{0, 2, 0, 2}));
  EXPECT_FLOAT_EQ(yc[0], Sigmoid(-1));
  EXPECT_FLOAT_EQ(yc[3], Sigmoid(Sigmoid(2)));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// A device like a GPU slot that lacks some kernels: it forwards everything
// to a CPU slot but refuses every op in `refused`, and offers `host` as its
// host folding device (or none).
class PartialDevice : public Device {
 public:
  PartialDevice(std::unique_ptr<Device> inner, std::vector<std::string> refused, Device* host)
      : inner_(std::move(inner)), refused_(std::move(refused)), host_(host) {}

  const DeviceInfo& info() const override { return inner_->info(); }
  MemoryLocation memory_location() const override { return inner_->memory_location(); }
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes) override {
    return inner_->Allocate(bytes);
  }
  uint64_t allocation_count() const override { return inner_->allocation_count(); }
  void Enqueue(absl::AnyInvocable<void() &&> work) override { inner_->Enqueue(std::move(work)); }
  void EnqueueCopy(const void* src, MemoryLocation src_location, void* dst,
                   MemoryLocation dst_location, size_t bytes) override {
    inner_->EnqueueCopy(src, src_location, dst, dst_location, bytes);
  }
  std::shared_ptr<Event> RecordEvent() override { return inner_->RecordEvent(); }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::Status CopyOnStream(const void* src, MemoryLocation src_location, void* dst,
                            MemoryLocation dst_location, size_t bytes) override {
    return inner_->CopyOnStream(src, src_location, dst, dst_location, bytes);
  }
  absl::Status AwaitStream() override { return inner_->AwaitStream(); }
  absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(const KernelSpec& spec) override {
    if (std::find(refused_.begin(), refused_.end(), spec.op_type) != refused_.end()) {
      return absl::UnimplementedError(absl::StrCat("no kernel for ", spec.op_type));
    }
    return inner_->MakeKernel(spec);
  }
  Device* host_folding_device() override { return host_; }

 private:
  std::unique_ptr<Device> inner_;
  std::vector<std::string> refused_;
  Device* host_;
};

// mask = Where(Equal(Range(0, 4, 1), 2), -1, 1): shape arithmetic on int64
// and bool, as exported transformers compute their masks, all known at plan
// time; y = x * Cast(mask). A device without Equal and Where folds them on
// its host folding device; without one, the plan names the node.
TEST(ExecutionPlanTest, NodesTheDeviceLacksFoldOnTheHostWhenTheirInputsAreKnown) {
  OnnxModelBuilder b("mask", 17);
  auto scalar = [](int64_t v) {
    Tensor t = Tensor::Host(DType::kInt64, {});
    t.data<int64_t>()[0] = v;
    return t;
  };
  b.AddInitializer("zero", scalar(0));
  b.AddInitializer("four", scalar(4));
  b.AddInitializer("one", scalar(1));
  b.AddInitializer("two", scalar(2));
  b.AddInitializer("minus", scalar(-1));
  b.AddNode("Range", {"zero", "four", "one"}, {"r"});
  b.AddNode("Equal", {"r", "two"}, {"is_two"});
  b.AddNode("Where", {"is_two", "minus", "one"}, {"sign"});
  OnnxModelBuilder::SetInt(b.AddNode("Cast", {"sign"}, {"signf"}), "to", 1);
  b.AddNode("Mul", {"x", "signf"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 4});
  std::shared_ptr<const Model> model = testing::LoadOrDie(b.Serialize(), "mask");
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::unique_ptr<Device> host = CreateCpuDevice(cpu, CpuSlotOptions{1});
  const std::vector<std::string> refused = {"Equal", "Where"};

  absl::StatusOr<std::unique_ptr<Replica>> lacking =
      Replica::Create(model, SlotAssignment{"r0", cpu.id, 1},
                      std::make_unique<PartialDevice>(CreateCpuDevice(cpu, {1}), refused, nullptr));
  ASSERT_TRUE(lacking.ok()) << lacking.status();
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> refused_plan = (*lacking)->PlanFor({{1, 4}});
  ASSERT_FALSE(refused_plan.ok());
  EXPECT_EQ(refused_plan.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused_plan.status().message(), HasSubstr("Equal"));

  absl::StatusOr<std::unique_ptr<Replica>> replica = Replica::Create(
      model, SlotAssignment{"r0", cpu.id, 1},
      std::make_unique<PartialDevice>(CreateCpuDevice(cpu, {1}), refused, host.get()));
  ASSERT_TRUE(replica.ok()) << replica.status();
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = (*replica)->PlanFor({{1, 4}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->step_count(), 1u);  // The Mul; everything else was folded.
  float x[4] = {1, 2, 3, 4}, y[4] = {0, 0, 0, 0};
  const void* inputs[] = {x};
  void* outputs[] = {y};
  absl::Status status;
  (*replica)->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
  ASSERT_TRUE((*replica)->device().Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(y, ::testing::ElementsAre(1, 2, -3, 4));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// A model file that asks for an output no machine holds (Tile by 2^62, as a
// hostile model author wrote it) gets RESOURCE_EXHAUSTED naming the node
// when its plan is made, not an abort of the daemon.
TEST(ExecutionPlanTest, AnOutputBeyondAnyMemoryIsRefusedNamingTheNode) {
  OnnxModelBuilder b("tile", 13);
  Tensor repeats = Tensor::Host(DType::kInt64, {2});
  repeats.data<int64_t>()[0] = 1;
  repeats.data<int64_t>()[1] = int64_t{1} << 62;
  b.AddInitializer("r", repeats);
  b.AddNode("Tile", {"x", "r"}, {"y"});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kAnyDim});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "tile"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{2, 3}});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("Tile node 'y'"));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// Upsample of opset 9 (converted to Resize-11 on load) keeps its own
// coordinates: x_in = x_out / scale, nearest rounding down; values from the
// ONNX spec's Upsample reference.
TEST(ExecutionPlanTest, UpsampleOfOpsetNineKeepsItsCoordinatesThroughTheConversion) {
  auto run = [](const char* mode, float scale, std::vector<float> x) {
    OnnxModelBuilder b("up", 9);
    Tensor scales = Tensor::Host(DType::kFloat32, {4});
    const float values[] = {1, 1, 1, scale};
    std::copy(values, values + 4, scales.data<float>());
    b.AddInitializer("s", scales);
    onnx::NodeProto* node = b.AddNode("Upsample", {"x", "s"}, {"y"});
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    const int64_t n = static_cast<int64_t>(x.size());
    b.AddInput("x", DType::kFloat32, {kAnyDim, 1, 1, n});
    b.AddOutput("y", DType::kFloat32, {kAnyDim, 1, 1, kAnyDim});
    std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "up"));
    absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 1, 1, n}});
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return std::vector<float>{};
    std::vector<float> y(NumElements((*plan)->output_types()[0].shape));
    const void* inputs[] = {x.data()};
    void* outputs[] = {y.data()};
    absl::Status status;
    replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
    EXPECT_TRUE(replica->device().Synchronize().ok());
    EXPECT_TRUE(status.ok()) << status;
    return y;
  };
  EXPECT_THAT(run("linear", 2.0f, {0, 1, 2}), ::testing::ElementsAre(0, 0.5f, 1, 1.5f, 2, 2));
  EXPECT_THAT(run("nearest", 1.25f, {0, 1, 2, 3}), ::testing::ElementsAre(0, 0, 1, 2, 3));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

// A 1-D ConvTranspose with output_padding (lifted to 2-D of height 1, the
// padding widened with a leading 0): X [1, 1, 3], W [1, 1, 2], stride 2,
// output_padding 1 gives 3 x 2 + 1 = 7 values: x[i] * w[k] at 2i + k, and
// the padded end 0.
TEST(ExecutionPlanTest, OneDimensionalConvTransposeWithOutputPadding) {
  OnnxModelBuilder b("deconv1d", 13);
  Tensor w = Tensor::Host(DType::kFloat32, {1, 1, 2});
  w.data<float>()[0] = 1.0f;
  w.data<float>()[1] = 10.0f;
  b.AddInitializer("w", w);
  onnx::NodeProto* node = b.AddNode("ConvTranspose", {"x", "w"}, {"y"});
  OnnxModelBuilder::SetInts(node, "strides", {2});
  OnnxModelBuilder::SetInts(node, "output_padding", {1});
  b.AddInput("x", DType::kFloat32, {kAnyDim, 1, 3});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 1, kAnyDim});
  std::unique_ptr<Replica> replica = CpuReplica(testing::LoadOrDie(b.Serialize(), "deconv1d"));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 1, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->output_types()[0].shape, (Shape{1, 1, 7}));
  float x[3] = {1, 2, 3}, y[7] = {};
  const void* inputs[] = {x};
  void* outputs[] = {y};
  absl::Status status;
  replica->device().Enqueue([&] { status = (*plan)->Run(inputs, outputs); });
  ASSERT_TRUE(replica->device().Synchronize().ok());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(y, ::testing::ElementsAre(1, 10, 2, 20, 3, 30, 0));
}

}  // namespace
}  // namespace replicad
