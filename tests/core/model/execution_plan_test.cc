#include "core/model/execution_plan.h"

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
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  return *Replica::Create(std::move(model), SlotAssignment{"r0", cpu.id, 1},
                          CreateCpuDevice(cpu, CpuSlotOptions{1}));
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
