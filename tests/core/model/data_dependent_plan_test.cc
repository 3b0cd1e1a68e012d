// Plans with a data-dependent part (execution_plan.h, data_dependent_part.h): a NonZero whose
// count the request decides, read by a GatherND, beside an output the kernels compute; an If
// whose condition the request decides, with branches of different shapes, taken both ways; an If
// whose condition is a constant (no data-dependent part: the branch is chosen at plan time), and
// one nested in a branch not taken, skipped with it; requests whose values ask for outputs of
// gigabytes (ConstantOfShape, Range), refused while the next request is served; and a model served
// over two slots, each request whole on one. Every output is checked against values written here.

#include <memory>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/base/status_macros.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::shared_ptr<const Model> Load(const OnnxModelBuilder& b) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(b.Serialize(), "m", "model.onnx");
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

Tensor Scalar(float v) {
  Tensor t = Tensor::Host(DType::kFloat32, {});
  *t.data<float>() = v;
  return t;
}

// x [N, 3] -> picked = x[x > 0.5] (row-major), doubled = 2 * x.
std::shared_ptr<const Model> NonZeroModel() {
  OnnxModelBuilder b("nonzero", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  b.AddInitializer("half", Scalar(0.5f));
  b.AddInitializer("two", Scalar(2.0f));
  b.AddNode("Greater", {"x", "half"}, {"mask"});
  b.AddNode("NonZero", {"mask"}, {"where"});
  OnnxModelBuilder::SetInts(b.AddNode("Transpose", {"where"}, {"indices"}), "perm", {1, 0});
  b.AddNode("GatherND", {"x", "indices"}, {"picked"});
  b.AddNode("Mul", {"x", "two"}, {"doubled"});
  b.AddOutput("picked", DType::kFloat32, {kAnyDim});
  b.AddOutput("doubled", DType::kFloat32, {kAnyDim, 3});
  return Load(b);
}

std::unique_ptr<Replica> CpuReplica(std::shared_ptr<const Model> model) {
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  return *Replica::Create(std::move(model), SlotAssignment{"r0", cpu.id, 1},
                          CreateCpuDevice(cpu, CpuSlotOptions{1}));
}

absl::StatusOr<std::vector<Tensor>> RunWhole(Replica& replica, const Tensor& x) {
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica.PlanFor({x.shape()});
  if (!plan.ok()) return plan.status();
  Replica::SlicePlan whole;
  whole.chunk = whole.last = *plan;
  const void* inputs[] = {x.raw_data()};
  std::vector<Tensor> outputs;
  absl::Status status;
  replica.device().Enqueue([&] { status = replica.RunSliceToHost(whole, inputs, &outputs); });
  if (absl::Status s = replica.device().Synchronize(); !s.ok()) return s;
  if (!status.ok()) return status;
  return outputs;
}

// Runs a plan that is not data-dependent on `x`, into a new output of `y_shape`.
absl::StatusOr<Tensor> RunFixed(Replica& replica, ExecutionPlan& plan, const Shape& x_shape,
                                const std::vector<float>& x_values, const Shape& y_shape) {
  Tensor x = Tensor::Host(DType::kFloat32, x_shape);
  std::copy(x_values.begin(), x_values.end(), x.data<float>());
  Tensor y = Tensor::Host(DType::kFloat32, y_shape);
  const void* inputs[] = {x.raw_data()};
  void* outputs[] = {y.raw_data()};
  absl::Status status;
  replica.device().Enqueue([&] { status = replica.RunOnHost(plan, inputs, outputs); });
  REPLICAD_RETURN_IF_ERROR(replica.device().Synchronize());
  REPLICAD_RETURN_IF_ERROR(status);
  return y;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

TEST(DataDependentPlanTest, NonZeroCountFollowsEachRequestWithoutANewPlan) {
  std::unique_ptr<Replica> replica = CpuReplica(NonZeroModel());
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{2, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE((*plan)->data_dependent());
  EXPECT_EQ((*plan)->data_dependent_nodes(), 3u);  // NonZero, Transpose, GatherND.
  // Run, which writes fixed-size outputs in place, refuses it.
  Tensor out0 = Tensor::Host(DType::kFloat32, {6});
  const void* none[] = {nullptr};
  void* outs[] = {out0.raw_data(), out0.raw_data()};
  EXPECT_EQ((*plan)->Run(none, outs).code(), absl::StatusCode::kFailedPrecondition);

  const std::vector<std::vector<float>> requests = {
      {0.1f, 0.9f, 0.7f, 0.6f, 0.2f, 0.0f},  // 3 picked
      {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},  // none
      {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f},  // all
  };
  const uint64_t built = replica->plans_built();
  for (const std::vector<float>& values : requests) {
    Tensor x = Tensor::Host(DType::kFloat32, {2, 3});
    std::copy(values.begin(), values.end(), x.data<float>());
    absl::StatusOr<std::vector<Tensor>> out = RunWhole(*replica, x);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> picked, doubled;
    for (float v : values) {
      if (v > 0.5f) picked.push_back(v);
      doubled.push_back(2 * v);
    }
    EXPECT_EQ((*out)[0].shape(), Shape({static_cast<int64_t>(picked.size())}));
    EXPECT_THAT(Values((*out)[0]), ElementsAreArray(picked));
    EXPECT_THAT(Values((*out)[1]), ElementsAreArray(doubled));
  }
  EXPECT_EQ(replica->plans_built(), built);  // One plan served every count.
}

// Sets `node`'s then_branch and else_branch.
void SetBranches(onnx::NodeProto* node, const OnnxModelBuilder& then_branch,
                 const OnnxModelBuilder& else_branch) {
  for (auto [name, branch] :
       {std::pair{"then_branch", &then_branch}, std::pair{"else_branch", &else_branch}}) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch->model().graph();
  }
}

// y = If(cond) then x + x [N, 3] else ReduceMax(x, keepdims) [1, 1]: branches of other shapes.
// cond is ReduceSum(x) > 0, or with `constant_false` an initializer holding false.
std::shared_ptr<const Model> IfModel(bool constant_false) {
  OnnxModelBuilder b("if", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  if (constant_false) {
    Tensor no = Tensor::Host(DType::kBool, {});
    *no.data<uint8_t>() = 0;
    b.AddInitializer("cond", no);
  } else {
    b.AddInitializer("zero", Scalar(0.0f));
    OnnxModelBuilder::SetInt(b.AddNode("ReduceSum", {"x"}, {"sum"}), "keepdims", 0);
    b.AddNode("Greater", {"sum", "zero"}, {"cond"});
  }
  onnx::NodeProto* node = b.AddNode("If", {"cond"}, {"y"});
  OnnxModelBuilder then_branch("then", 13), else_branch("else", 13);
  then_branch.AddNode("Add", {"x", "x"}, {"twice"});
  then_branch.AddOutput("twice", DType::kFloat32, {kAnyDim, 3});
  else_branch.AddNode("ReduceMax", {"x"}, {"largest"});
  else_branch.AddOutput("largest", DType::kFloat32, {1, 1});
  SetBranches(node, then_branch, else_branch);
  b.AddOutput("y", DType::kFloat32, {});
  // Its shape is the taken branch's: two dims the model leaves open.
  onnx::TensorShapeProto* shape = const_cast<onnx::ModelProto&>(b.model())
                                      .mutable_graph()
                                      ->mutable_output(0)
                                      ->mutable_type()
                                      ->mutable_tensor_type()
                                      ->mutable_shape();
  shape->add_dim()->set_dim_param("rows");
  shape->add_dim()->set_dim_param("columns");
  return Load(b);
}

TEST(DataDependentPlanTest, IfTakesTheBranchEachRequestChooses) {
  std::unique_ptr<Replica> replica = CpuReplica(IfModel(/*constant_false=*/false));
  Tensor x = Tensor::Host(DType::kFloat32, {2, 3});
  const std::vector<float> positive = {1, -2, 3, 4, 5, -6};  // Sum 5: then.
  std::copy(positive.begin(), positive.end(), x.data<float>());
  absl::StatusOr<std::vector<Tensor>> out = RunWhole(*replica, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 3}));
  EXPECT_THAT(Values((*out)[0]), ElementsAre(2, -4, 6, 8, 10, -12));

  const std::vector<float> negative = {-1, -2, 3, -4, 0.5f, -6};  // Sum -9.5: else.
  std::copy(negative.begin(), negative.end(), x.data<float>());
  out = RunWhole(*replica, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({1, 1}));
  EXPECT_THAT(Values((*out)[0]), ElementsAre(3));
}

TEST(DataDependentPlanTest, IfOfAConstantConditionIsChosenWhenThePlanIsMade) {
  std::unique_ptr<Replica> replica = CpuReplica(IfModel(/*constant_false=*/true));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{2, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE((*plan)->data_dependent());
  EXPECT_EQ((*plan)->output_types()[0].shape, Shape({1, 1}));
  absl::StatusOr<Tensor> y = RunFixed(*replica, **plan, {2, 3}, {1, 7, 3, 4, 5, 6}, {1, 1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*y->data<float>(), 7);
}

// An If of a constant true condition whose else-branch holds an If of a
// condition computed from the request (as torchvision's detectors nest
// them): the else-branch, its condition's computation included, is skipped
// when the plan is made, and so are the inner If's branches, whose guards
// name that condition. (They went to the data-dependent part, which then
// read a value no node had computed: Faster R-CNN failed to load.)
TEST(DataDependentPlanTest, BranchesNestedInABranchNotTakenAreSkippedWithIt) {
  OnnxModelBuilder b("nested", 13);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3});
  Tensor yes = Tensor::Host(DType::kBool, {});
  *yes.data<uint8_t>() = 1;
  b.AddInitializer("outer", yes);
  b.AddInitializer("zero", Scalar(0.0f));
  OnnxModelBuilder then_branch("then", 13), else_branch("else", 13);
  then_branch.AddNode("Add", {"x", "x"}, {"twice"});
  then_branch.AddOutput("twice", DType::kFloat32, {kAnyDim, 3});
  OnnxModelBuilder::SetInt(else_branch.AddNode("ReduceSum", {"x"}, {"sum"}), "keepdims", 0);
  else_branch.AddNode("Greater", {"sum", "zero"}, {"inner"});
  OnnxModelBuilder inner_then("inner_then", 13), inner_else("inner_else", 13);
  inner_then.AddNode("Neg", {"x"}, {"negated"});
  inner_then.AddOutput("negated", DType::kFloat32, {kAnyDim, 3});
  inner_else.AddNode("Abs", {"x"}, {"absolute"});
  inner_else.AddOutput("absolute", DType::kFloat32, {kAnyDim, 3});
  SetBranches(else_branch.AddNode("If", {"inner"}, {"chosen"}), inner_then, inner_else);
  else_branch.AddOutput("chosen", DType::kFloat32, {kAnyDim, 3});
  SetBranches(b.AddNode("If", {"outer"}, {"y"}), then_branch, else_branch);
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 3});
  std::unique_ptr<Replica> replica = CpuReplica(Load(b));
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE((*plan)->data_dependent());
  absl::StatusOr<Tensor> y = RunFixed(*replica, **plan, {1, 3}, {1, -2, 3}, {1, 3});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values(*y), ElementsAre(2, -4, 6));
}

// zeros = ConstantOfShape(int64(x)): a request decides the output's shape.
// One asking for more than 4 GiB is refused before anything is allocated, and
// the slot serves the next request as before; so is a Range whose limit a
// request sets past 2^28 elements.
TEST(DataDependentPlanTest, ARequestAskingForAHugeOutputIsRefusedAndTheNextIsServed) {
  OnnxModelBuilder b("huge", 13);
  b.AddInput("x", DType::kFloat32, {2});
  Tensor zero = Tensor::Host(DType::kInt64, {}), one = Tensor::Host(DType::kInt64, {});
  *zero.data<int64_t>() = 0;
  *one.data<int64_t>() = 1;
  b.AddInitializer("start", zero);
  b.AddInitializer("delta", one);
  OnnxModelBuilder::SetInt(b.AddNode("Cast", {"x"}, {"dims"}), "to", onnx::TensorProto::INT64);
  b.AddNode("ConstantOfShape", {"dims"}, {"zeros"});
  OnnxModelBuilder::SetInt(b.AddNode("ReduceMax", {"dims"}, {"limit"}), "keepdims", 0);
  b.AddNode("Range", {"start", "limit", "delta"}, {"count"});
  b.AddOutput("zeros", DType::kFloat32, {kAnyDim, kAnyDim});
  b.AddOutput("count", DType::kInt64, {kAnyDim});
  std::unique_ptr<Replica> replica = CpuReplica(Load(b));
  Tensor x = Tensor::Host(DType::kFloat32, {2});
  x.data<float>()[0] = 1e6f;  // 1e6 x 2e3 floats: 8 GB.
  x.data<float>()[1] = 2e3f;
  absl::StatusOr<std::vector<Tensor>> out = RunWhole(*replica, x);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_THAT(out.status().message(), HasSubstr("ConstantOfShape"));
  x.data<float>()[0] = 0;  // No zeros; the range of 1e12 elements is refused.
  x.data<float>()[1] = 1e12f;
  out = RunWhole(*replica, x);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("Range"));
  x.data<float>()[0] = 2;
  x.data<float>()[1] = 3;
  out = RunWhole(*replica, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 3}));
  EXPECT_EQ((*out)[1].shape(), Shape({3}));
  EXPECT_EQ((*out)[1].data<int64_t>()[2], 2);
}

// Served: each request runs whole on one slot (the model's outputs depend on
// all its rows), and its outputs come back with the shapes it gave them.
TEST(DataDependentPlanTest, ServedOverTwoSlotsEachRequestWhole) {
  std::shared_ptr<const Model> model = NonZeroModel();
  EXPECT_THAT(model->row_mixing(), HasSubstr("NonZero"));
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model, {1.0, 1.0});
  for (int64_t rows : {1, 4}) {
    Tensor x = Tensor::Host(DType::kFloat32, {rows, 3});
    std::vector<float> picked;
    for (int64_t i = 0; i < rows * 3; ++i) {
      x.data<float>()[i] = static_cast<float>(i % 4) / 3.0f;  // 0, 1/3, 2/3, 1, ...
      if (x.data<float>()[i] > 0.5f) picked.push_back(x.data<float>()[i]);
    }
    testing::PredictOutcome outcome = testing::PredictAndWait(*set, {x});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_EQ(outcome.slices.size(), 1u);
    EXPECT_THAT(Values(outcome.outputs[0]), ElementsAreArray(picked));
    EXPECT_EQ(outcome.outputs[1].shape(), Shape({rows, 3}));
  }
}

}  // namespace
}  // namespace replicad
