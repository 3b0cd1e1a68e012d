// float16 and bfloat16 models (core/model/half_float_widening.h): a small
// network written in float16 (and in bfloat16) loads with its interface as
// written, computes in float32 inside, and answers the float32 computation of
// the same weights rounded once to the output's type: exactly, since both
// sides round the same float32 values (the reference is computed here in
// double and the only tolerance is that of float32 against double, 1e-5
// relative, well inside one float16 step). Also: the Cast to float16 inside
// a graph, a float16 output that is an initializer, malformed float16 data.

#include <cmath>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica.h"
#include "core/tensor/half_float.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Replica> CpuReplica(std::shared_ptr<const Model> model) {
  return testing::MakeCpuReplica(std::move(model));
}

// `value` rounded to `dtype`, as float.
double Rounded(DType dtype, float value) {
  return HalfFloatBitsToFloat(dtype, FloatToHalfFloatBits(dtype, value));
}

Tensor HalfTensor(DType dtype, const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::Host(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i)
    t.data<uint16_t>()[i] = FloatToHalfFloatBits(dtype, values[i]);
  return t;
}

class HalfFloatModelTest : public ::testing::TestWithParam<DType> {};

// y = Relu(x W + b) * 0.5 in the parameter's type, x [N, 3], W [3, 2].
TEST_P(HalfFloatModelTest, ComputesInFloat32AndAnswersInTheModelsType) {
  const DType dtype = GetParam();
  const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.75f, -0.125f, 1.5f};
  const std::vector<float> bias = {0.1f, -0.3f};
  OnnxModelBuilder b("half", 17);
  b.AddInput("x", dtype, {kAnyDim, 3});
  b.AddOutput("y", dtype, {kAnyDim, 2});
  b.AddInitializer("W", HalfTensor(dtype, {3, 2}, w));
  b.AddInitializer("b", HalfTensor(dtype, {2}, bias));
  b.AddInitializer("half", HalfTensor(dtype, {}, {0.5f}));
  b.AddNode("MatMul", {"x", "W"}, {"xw"});
  b.AddNode("Add", {"xw", "b"}, {"z"});
  b.AddNode("Relu", {"z"}, {"r"});
  b.AddNode("Mul", {"r", "half"}, {"y"});
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->inputs().size(), 1u);
  EXPECT_EQ((*model)->inputs()[0].type.dtype, dtype);
  EXPECT_EQ((*model)->outputs()[0].type.dtype, dtype);
  EXPECT_EQ((*model)->outputs()[0].name, "y");
  // The weights are held widened, under their own names.
  for (const auto& [v, tensor] : (*model)->graph().initializers) {
    EXPECT_EQ(tensor.dtype(), DType::kFloat32) << (*model)->graph().values[v].name;
  }

  std::unique_ptr<Replica> replica = CpuReplica(*model);
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{4, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<float> x = {1.0f,  2.0f, -3.0f, 0.25f,  0.5f, 4.0f,
                                -2.0f, 1.5f, 0.75f, 1000.f, 3.0f, -0.0625f};
  Tensor input = HalfTensor(dtype, {4, 3}, x);
  Tensor output = Tensor::Host(dtype, {4, 2});
  const void* inputs[] = {input.raw_data()};
  void* outputs[] = {output.raw_data()};
  ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 2; ++j) {
      double z = Rounded(dtype, bias[j]);
      for (int k = 0; k < 3; ++k) {
        z += Rounded(dtype, x[n * 3 + k]) * Rounded(dtype, w[k * 2 + j]);
      }
      const double expected = std::max(z, 0.0) * 0.5;
      const float got = HalfFloatBitsToFloat(dtype, output.data<uint16_t>()[n * 2 + j]);
      // Within float16's (bfloat16's) rounding of the exact value: half a step,
      // plus float32's error in the sum.
      const double step = dtype == DType::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
      EXPECT_NEAR(got, expected, std::abs(expected) * (step / 2 + 1e-5) + 1e-7)
          << "row " << n << " column " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfFloatModelTest,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A float32 model that casts to float16 inside and back: the Cast computes in
// float32 (no rounding in between), and a float16 output that is an
// initializer comes out as written.
TEST(HalfFloatModelTest, CastsInsideAndAnInitializerOutput) {
  OnnxModelBuilder b("casts", 17);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 2});
  b.AddOutput("table", DType::kFloat16, {2});
  b.AddInitializer("table", HalfTensor(DType::kFloat16, {2}, {1.5f, -65504.0f}));
  onnx::NodeProto* to_half = b.AddNode("Cast", {"x"}, {"h"});
  OnnxModelBuilder::SetInt(to_half, "to", onnx::TensorProto::FLOAT16);
  onnx::NodeProto* back = b.AddNode("Cast", {"h"}, {"y"});
  OnnxModelBuilder::SetInt(back, "to", onnx::TensorProto::FLOAT);
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(b.Serialize(), "m", "m");
  ASSERT_TRUE(model.ok()) << model.status();
  std::unique_ptr<Replica> replica = CpuReplica(*model);
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({{1, 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const float x[] = {1.0001f, 70000.0f};
  float y[2] = {0, 0};
  Tensor table = Tensor::Host(DType::kFloat16, {2});
  const void* inputs[] = {x};
  void* outputs[] = {y, table.raw_data()};
  ASSERT_TRUE((*plan)->Run(inputs, outputs).ok());
  EXPECT_EQ(y[0], 1.0001f);
  EXPECT_EQ(y[1], 70000.0f);
  EXPECT_EQ(HalfToFloat(table.data<uint16_t>()[0]), 1.5f);
  EXPECT_EQ(HalfToFloat(table.data<uint16_t>()[1]), -65504.0f);
}

TEST(HalfFloatModelTest, Float16DataOfTheWrongLengthIsRefusedNamingTheTensor) {
  OnnxModelBuilder b("short", 17);
  b.AddInput("x", DType::kFloat16, {kAnyDim, 2});
  b.AddOutput("y", DType::kFloat16, {kAnyDim, 2});
  onnx::ModelProto proto = b.model();
  onnx::TensorProto* w = proto.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT16);
  w->add_dims(2);
  w->add_int32_data(FloatToHalf(1.0f));  // One value for two elements.
  onnx::NodeProto* add = proto.mutable_graph()->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("w");
  add->add_output("y");
  absl::StatusOr<std::shared_ptr<const Model>> model =
      LoadOnnxBytes(proto.SerializeAsString(), "m", "short.onnx");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("'w'"));
}

}  // namespace
}  // namespace replicad
