// Every CUDA kernel family against the CPU backend on the same single-node
// models and inputs (shapes larger than the ONNX backend cases, which
// onnx_node_conformance_gpu_test runs against ONNX's own outputs). TF32 is
// off, so both sides compute in float32; they differ only in summation order:
// |cuda - cpu| <= 1e-4 * (1 + |cpu|) per element (kTolerance), int64 exact.
// Skips without a GPU (CTest label gpu).

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/backends.h"
#include "core/model/onnx_builder.h"
#include "gtest/gtest.h"
#include "onnx/shape_inference/implementation.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/onnx_node_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kTolerance = 1e-4;
const DeviceId kGpu{DeviceKind::kCuda, 0};

bool HasGpu() {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  return devices.ok() && FindDevice(*devices, kGpu) != nullptr;
}

struct Input {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
};

using Attributes = std::function<void(onnx::NodeProto*)>;

// One node reading `inputs` (graph inputs, then `initializers`) into `out`.
onnx::ModelProto OneNodeModel(const std::string& op, const std::vector<Input>& inputs,
                              const std::vector<std::pair<std::string, Tensor>>& initializers,
                              const Attributes& attributes, int opset = 13) {
  OnnxModelBuilder builder(op, opset);
  std::vector<std::string> names;
  for (const Input& input : inputs) {
    builder.AddInput(input.name, input.dtype, input.shape);
    names.push_back(input.name);
  }
  for (const auto& [name, value] : initializers) {
    builder.AddInitializer(name, value);
    names.push_back(name);
  }
  onnx::NodeProto* node = builder.AddNode(op, names, {"out"});
  if (attributes) attributes(node);
  // The output's type comes from ONNX's shape inference (the checker wants a
  // graph output's shape declared): inferred while "out" is still an
  // intermediate value, then declared as the graph output.
  onnx::ModelProto model = builder.model();
  onnx::shape_inference::InferShapes(model);
  onnx::ValueInfoProto* out = model.mutable_graph()->add_output();
  auto* infos = model.mutable_graph()->mutable_value_info();
  for (int i = 0; i < infos->size(); ++i) {
    if (infos->Get(i).name() == "out") {
      *out = infos->Get(i);
      infos->DeleteSubrange(i, 1);
      break;
    }
  }
  EXPECT_EQ(out->name(), "out") << op << ": ONNX's shape inference gave no type for the output";
  return model;
}

Tensor Random(const Input& input, uint64_t seed) {
  Tensor t = testing::RandomTensor(input.shape, seed);
  if (input.dtype == DType::kFloat32) return t;
  if (input.dtype == DType::kBool) {
    Tensor bools = Tensor::Host(DType::kBool, input.shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      static_cast<uint8_t*>(bools.raw_data())[i] = t.data<float>()[i] > 0 ? 1 : 0;
    }
    return bools;
  }
  Tensor ints = Tensor::Host(DType::kInt64, input.shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    ints.data<int64_t>()[i] = static_cast<int64_t>(std::lround(t.data<float>()[i] * 50));
  }
  return ints;
}

void ExpectSameOnGpu(const onnx::ModelProto& model, const std::vector<Tensor>& values) {
  absl::StatusOr<std::vector<Tensor>> cpu = RunOnnxModel(model, values);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<Tensor>> gpu = RunOnnxModel(model, values, kGpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  for (size_t o = 0; o < cpu->size(); ++o) {
    const Tensor& c = (*cpu)[o];
    const Tensor& g = (*gpu)[o];
    ASSERT_EQ(TensorTypeToString(g.type()), TensorTypeToString(c.type()));
    int reported = 0;
    for (int64_t i = 0; i < c.num_elements() && reported < 5; ++i) {
      if (c.dtype() == DType::kBool) {
        const uint8_t got = static_cast<const uint8_t*>(g.raw_data())[i];
        const uint8_t want = static_cast<const uint8_t*>(c.raw_data())[i];
        if (got != want) {
          ADD_FAILURE() << "element " << i << ": " << int{got} << " vs cpu " << int{want};
          ++reported;
        }
        continue;
      }
      if (c.dtype() == DType::kInt64) {
        if (g.data<int64_t>()[i] != c.data<int64_t>()[i]) {
          ADD_FAILURE() << "element " << i << ": " << g.data<int64_t>()[i] << " vs cpu "
                        << c.data<int64_t>()[i];
          ++reported;
        }
        continue;
      }
      const double a = g.data<float>()[i];
      const double e = c.data<float>()[i];
      if (a == e || (std::isnan(a) && std::isnan(e))) continue;  // Equal infinities too.
      if (!(std::fabs(a - e) <= kTolerance * (1 + std::fabs(e)))) {
        ADD_FAILURE() << "element " << i << ": " << a << " vs cpu " << e;
        ++reported;
      }
    }
  }
}

void ExpectSameOnGpu(const onnx::ModelProto& model, const std::vector<Input>& inputs) {
  std::vector<Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) values.push_back(Random(inputs[i], 100 + i));
  ExpectSameOnGpu(model, values);
}

Tensor Weights(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

Tensor Int64s(const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaKernelsTest, Convolutions) {
  const Input x{"x", {4, 16, 28, 28}};
  ExpectSameOnGpu(
      OneNodeModel("Conv", {x}, {{"w", Weights({32, 16, 3, 3}, 1)}, {"b", Weights({32}, 2)}},
                   [](onnx::NodeProto* n) {
                     OnnxModelBuilder::SetInts(n, "pads", {1, 1, 1, 1});
                   }),
      {x});
  // Depthwise, strided.
  ExpectSameOnGpu(OneNodeModel("Conv", {x}, {{"w", Weights({16, 1, 3, 3}, 3)}},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInt(n, "group", 16);
                                 OnnxModelBuilder::SetInts(n, "strides", {2, 2});
                                 OnnxModelBuilder::SetInts(n, "pads", {1, 1, 1, 1});
                               }),
                  {x});
  // Dilated 1x1 and 5x5.
  ExpectSameOnGpu(OneNodeModel("Conv", {x}, {{"w", Weights({8, 16, 5, 5}, 4)}},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "dilations", {2, 2});
                               }),
                  {x});
  ExpectSameOnGpu(
      OneNodeModel("ConvTranspose", {x}, {{"w", Weights({16, 8, 3, 3}, 5)}, {"b", Weights({8}, 6)}},
                   [](onnx::NodeProto* n) {
                     OnnxModelBuilder::SetInts(n, "strides", {2, 2});
                     OnnxModelBuilder::SetInts(n, "pads", {1, 1, 1, 1});
                     OnnxModelBuilder::SetInts(n, "output_padding", {1, 1});
                   }),
      {x});
}

TEST_F(CudaKernelsTest, MatrixProducts) {
  const Input a{"a", {64, 96}};
  ExpectSameOnGpu(OneNodeModel("Gemm", {a}, {{"w", Weights({48, 96}, 7)}, {"c", Weights({48}, 8)}},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInt(n, "transB", 1);
                                 OnnxModelBuilder::SetFloat(n, "alpha", 0.5f);
                               }),
                  {a});
  const Input batched{"a", {2, 3, 64, 32}};
  ExpectSameOnGpu(OneNodeModel("MatMul", {batched}, {{"w", Weights({32, 16}, 9)}}, nullptr),
                  {batched});
  const Input left{"a", {2, 1, 8, 5}};
  const Input right{"b", {3, 5, 4}};
  ExpectSameOnGpu(OneNodeModel("MatMul", {left, right}, {}, nullptr), {left, right});
}

// 3-D convolutions (video models: r3d_18's stem and blocks) through cuDNN's
// Nd descriptors: padded, strided in H and W, dilated, grouped, with and
// without a bias, and a 5-D GlobalAveragePool after them.
TEST_F(CudaKernelsTest, ThreeDimensionalConvolutions) {
  const Input clip{"x", {2, 3, 8, 20, 20}};
  ExpectSameOnGpu(
      OneNodeModel("Conv", {clip}, {{"w", Weights({16, 3, 3, 7, 7}, 1)}, {"b", Weights({16}, 2)}},
                   [](onnx::NodeProto* n) {
                     OnnxModelBuilder::SetInts(n, "pads", {1, 3, 3, 1, 3, 3});
                     OnnxModelBuilder::SetInts(n, "strides", {1, 2, 2});
                   }),
      {clip});
  const Input features{"x", {2, 8, 6, 9, 9}};
  ExpectSameOnGpu(OneNodeModel("Conv", {features}, {{"w", Weights({8, 4, 3, 3, 3}, 3)}},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "pads", {2, 2, 2, 2, 2, 2});
                                 OnnxModelBuilder::SetInts(n, "dilations", {2, 2, 2});
                                 OnnxModelBuilder::SetInt(n, "group", 2);
                               }),
                  {features});
  ExpectSameOnGpu(OneNodeModel("GlobalAveragePool", {features}, {}, nullptr), {features});
}

TEST_F(CudaKernelsTest, PoolingAndNormalization) {
  const Input x{"x", {4, 8, 17, 17}};
  ExpectSameOnGpu(OneNodeModel("MaxPool", {x}, {},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "kernel_shape", {3, 3});
                                 OnnxModelBuilder::SetInts(n, "strides", {2, 2});
                                 OnnxModelBuilder::SetInts(n, "pads", {1, 1, 1, 1});
                               }),
                  {x});
  ExpectSameOnGpu(OneNodeModel("AveragePool", {x}, {},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "kernel_shape", {3, 3});
                                 OnnxModelBuilder::SetInts(n, "pads", {1, 1, 1, 1});
                                 OnnxModelBuilder::SetInt(n, "count_include_pad", 1);
                               }),
                  {x});
  ExpectSameOnGpu(OneNodeModel("GlobalAveragePool", {x}, {}, nullptr), {x});
  Tensor variance = Weights({8}, 13);
  for (int64_t i = 0; i < 8; ++i) variance.data<float>()[i] = std::fabs(variance.data<float>()[i]);
  ExpectSameOnGpu(OneNodeModel("BatchNormalization", {x},
                               {{"scale", Weights({8}, 10)},
                                {"bias", Weights({8}, 11)},
                                {"mean", Weights({8}, 12)},
                                {"var", variance}},
                               nullptr),
                  {x});
  ExpectSameOnGpu(OneNodeModel("InstanceNormalization", {x},
                               {{"scale", Weights({8}, 14)}, {"bias", Weights({8}, 15)}}, nullptr),
                  {x});
  const Input logits{"x", {8, 1000}};
  ExpectSameOnGpu(OneNodeModel("Softmax", {logits}, {}, nullptr), {logits});
  ExpectSameOnGpu(OneNodeModel("LogSoftmax", {logits}, {}, nullptr), {logits});
}

TEST_F(CudaKernelsTest, ElementwiseWithBroadcasting) {
  const Input x{"x", {4, 16, 8, 8}};
  const Input per_channel{"y", {16, 1, 1}};
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    ExpectSameOnGpu(OneNodeModel(op, {x, per_channel}, {}, nullptr), {x, per_channel});
  }
  const Input ints{"x", {3, 5}, DType::kInt64};
  const Input int_row{"y", {5}, DType::kInt64};
  ExpectSameOnGpu(OneNodeModel("Mul", {ints, int_row}, {}, nullptr), {ints, int_row});
  // PRelu's per-channel slope; the variadic ops over one, two and three
  // broadcast inputs (int64 Max too).
  ExpectSameOnGpu(OneNodeModel("PRelu", {x, per_channel}, {}, nullptr), {x, per_channel});
  const Input row{"z", {8}};
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    SCOPED_TRACE(op);
    ExpectSameOnGpu(OneNodeModel(op, {x}, {}, nullptr), {x});
    ExpectSameOnGpu(OneNodeModel(op, {x, per_channel}, {}, nullptr), {x, per_channel});
    ExpectSameOnGpu(OneNodeModel(op, {per_channel, x, row}, {}, nullptr), {per_channel, x, row});
  }
  ExpectSameOnGpu(OneNodeModel("Max", {ints, int_row}, {}, nullptr), {ints, int_row});
  // Mod: integers Python's way and C's (fmod), floats C's fmod.
  ExpectSameOnGpu(OneNodeModel("Mod", {ints, int_row}, {}, nullptr), {ints, int_row});
  ExpectSameOnGpu(OneNodeModel("Mod", {ints, int_row}, {},
                               [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "fmod", 1); }),
                  {ints, int_row});
  ExpectSameOnGpu(OneNodeModel("Mod", {x, per_channel}, {},
                               [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "fmod", 1); }),
                  {x, per_channel});
  for (const char* op :
       {"Relu", "Sigmoid", "Tanh", "HardSwish", "Erf", "LeakyRelu", "Abs", "Neg", "Exp", "Log",
        "Reciprocal", "Floor", "Ceil", "Round", "Softplus", "Elu", "Selu"}) {
    SCOPED_TRACE(op);
    // HardSwish arrived in opset 14. (Log of the negative elements is NaN
    // on both.)
    const int opset = std::string(op) == "HardSwish" ? 14 : 13;
    ExpectSameOnGpu(OneNodeModel(op, {x}, {}, nullptr, opset), {x});
  }
}

// The masks of transformers: comparisons (float32, int64, bool Equal) to
// bool, the logic of bools, Where of float32 and int64 under a broadcast
// bool condition, and casts to and from bool.
TEST_F(CudaKernelsTest, ComparisonsLogicAndWhere) {
  const Input x{"x", {4, 16, 8, 8}};
  const Input per_channel{"y", {16, 1, 1}};
  const Input ints{"x", {3, 5}, DType::kInt64};
  const Input int_row{"y", {5}, DType::kInt64};
  for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
    SCOPED_TRACE(op);
    ExpectSameOnGpu(OneNodeModel(op, {x, per_channel}, {}, nullptr, 16), {x, per_channel});
    ExpectSameOnGpu(OneNodeModel(op, {ints, int_row}, {}, nullptr, 16), {ints, int_row});
  }
  const Input mask{"m", {4, 1, 8, 8}, DType::kBool};
  const Input row_mask{"n", {8}, DType::kBool};
  ExpectSameOnGpu(OneNodeModel("Equal", {mask, row_mask}, {}, nullptr, 16), {mask, row_mask});
  for (const char* op : {"And", "Or", "Xor"}) {
    SCOPED_TRACE(op);
    ExpectSameOnGpu(OneNodeModel(op, {mask, row_mask}, {}, nullptr), {mask, row_mask});
  }
  ExpectSameOnGpu(OneNodeModel("Not", {mask}, {}, nullptr), {mask});
  const Input z{"z", {8}};
  ExpectSameOnGpu(OneNodeModel("Where", {mask, x, z}, {}, nullptr, 16), {mask, x, z});
  const Input int_mask{"m", {3, 1}, DType::kBool};
  ExpectSameOnGpu(OneNodeModel("Where", {int_mask, ints, int_row}, {}, nullptr, 16),
                  {int_mask, ints, int_row});
  for (const auto& [input, to] :
       {std::pair{x, onnx::TensorProto::BOOL}, std::pair{ints, onnx::TensorProto::BOOL},
        std::pair{mask, onnx::TensorProto::FLOAT}, std::pair{mask, onnx::TensorProto::INT64}}) {
    ExpectSameOnGpu(
        OneNodeModel("Cast", {input}, {},
                     [to = to](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "to", to); }),
        {input});
  }
}

TEST_F(CudaKernelsTest, ReductionsAndDataMovement) {
  const Input x{"x", {4, 6, 10, 12}};
  ExpectSameOnGpu(OneNodeModel("ReduceMean", {x}, {},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "axes", {2, 3});
                               }),
                  {x});
  ExpectSameOnGpu(OneNodeModel("ReduceSum", {x}, {{"axes", Int64s({0, 2})}}, nullptr), {x});
  // The other kinds, axes as an attribute (opset 13), over 6 and over 720
  // elements per output (the block's tree). ReduceLogSum of the negative
  // sums is NaN on both.
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    SCOPED_TRACE(op);
    for (const std::vector<int64_t>& axes :
         {std::vector<int64_t>{1}, std::vector<int64_t>{1, 2, 3}}) {
      if (std::string(op) == "ReduceProd" && axes.size() > 1) continue;  // Underflows to 0.
      ExpectSameOnGpu(
          OneNodeModel(op, {x}, {},
                       [axes](onnx::NodeProto* n) { OnnxModelBuilder::SetInts(n, "axes", axes); }),
          {x});
    }
  }
  ExpectSameOnGpu(OneNodeModel("Transpose", {x}, {},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInts(n, "perm", {0, 2, 3, 1});
                               }),
                  {x});
  // The ops along an axis, and Trilu.
  for (const char* op : {"ArgMax", "ArgMin"}) {
    SCOPED_TRACE(op);
    ExpectSameOnGpu(
        OneNodeModel(op, {x}, {},
                     [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "axis", 1); }),
        {x});
    ExpectSameOnGpu(OneNodeModel(op, {x}, {},
                                 [](onnx::NodeProto* n) {
                                   OnnxModelBuilder::SetInt(n, "axis", 3);
                                   OnnxModelBuilder::SetInt(n, "keepdims", 0);
                                   OnnxModelBuilder::SetInt(n, "select_last_index", 1);
                                 }),
                    {x});
  }
  ExpectSameOnGpu(OneNodeModel("Hardmax", {x}, {}, nullptr), {x});
  Tensor axis = Tensor::Host(DType::kInt64, {});
  axis.data<int64_t>()[0] = 2;
  ExpectSameOnGpu(OneNodeModel("CumSum", {x}, {{"axis", axis}}, nullptr), {x});
  ExpectSameOnGpu(OneNodeModel("CumSum", {x}, {{"axis", axis}},
                               [](onnx::NodeProto* n) {
                                 OnnxModelBuilder::SetInt(n, "exclusive", 1);
                                 OnnxModelBuilder::SetInt(n, "reverse", 1);
                               }),
                  {x});
  Tensor k = Tensor::Host(DType::kInt64, {});
  k.data<int64_t>()[0] = -2;
  ExpectSameOnGpu(OneNodeModel("Trilu", {x}, {{"k", k}}, nullptr, 14), {x});
  ExpectSameOnGpu(OneNodeModel(
                      "Trilu", {x}, {{"k", k}},
                      [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "upper", 0); }, 14),
                  {x});
  // Tile, DepthToSpace (both modes) and SpaceToDepth from their index tables.
  ExpectSameOnGpu(OneNodeModel("Tile", {x}, {{"repeats", Int64s({1, 2, 1, 3})}}, nullptr), {x});
  const Input deep{"x", {2, 8, 5, 6}};  // Channels divisible by blocksize^2.
  for (const char* mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    ExpectSameOnGpu(OneNodeModel("DepthToSpace", {deep}, {},
                                 [mode](onnx::NodeProto* n) {
                                   OnnxModelBuilder::SetInt(n, "blocksize", 2);
                                   onnx::AttributeProto* attribute = n->add_attribute();
                                   attribute->set_name("mode");
                                   attribute->set_type(onnx::AttributeProto::STRING);
                                   attribute->set_s(mode);
                                 }),
                    {deep});
  }
  ExpectSameOnGpu(
      OneNodeModel("SpaceToDepth", {x}, {},
                   [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "blocksize", 2); }),
      {x});
  ExpectSameOnGpu(OneNodeModel("GlobalMaxPool", {x}, {}, nullptr), {x});
  // Split into uneven parts along dim 1 (one strided copy per output).
  OnnxModelBuilder split("Split", 13);
  split.AddInput("x", DType::kFloat32, x.shape);
  split.AddInitializer("split", Int64s({1, 2, 3}));
  OnnxModelBuilder::SetInt(split.AddNode("Split", {"x", "split"}, {"a", "b", "c"}), "axis", 1);
  split.AddOutput("a", DType::kFloat32, {4, 1, 10, 12});
  split.AddOutput("b", DType::kFloat32, {4, 2, 10, 12});
  split.AddOutput("c", DType::kFloat32, {4, 3, 10, 12});
  ExpectSameOnGpu(split.model(), {x});
  ExpectSameOnGpu(OneNodeModel("Slice", {x},
                               {{"starts", Int64s({1, -8})},
                                {"ends", Int64s({5, 100})},
                                {"axes", Int64s({1, 3})},
                                {"steps", Int64s({2, 3})}},
                               nullptr),
                  {x});
  ExpectSameOnGpu(OneNodeModel("Pad", {x}, {{"pads", Int64s({0, 0, 2, 1, 0, 0, 1, 3})}},
                               [](onnx::NodeProto* n) {
                                 n->add_attribute()->set_name("mode");
                                 n->mutable_attribute(0)->set_type(onnx::AttributeProto::STRING);
                                 n->mutable_attribute(0)->set_s("reflect");
                               }),
                  {x});
  const Input y{"y", {4, 3, 10, 12}};
  ExpectSameOnGpu(OneNodeModel("Concat", {x, y}, {},
                               [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "axis", 1); }),
                  {x, y});
  ExpectSameOnGpu(OneNodeModel("Gather", {x}, {{"indices", Int64s({5, 0, -1})}},
                               [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "axis", 1); }),
                  {x});
  const Input row{"x", {1, 6, 1, 12}};
  ExpectSameOnGpu(OneNodeModel("Expand", {row}, {{"shape", Int64s({4, 6, 10, 12})}}, nullptr),
                  {row});
}

// Einsum: the batched matrix products cuBLAS reads in place (maxvit_t's two
// attention products, a plain product, one with a transposed operand)
// against the CPU's oneDNN matmul; the equations that are no such product (a
// diagonal, a sum, an outer product, three inputs, a broadcast ellipsis,
// int64) through the loop, written to give the CPU loop's bits. Every case
// within kTolerance (ExpectSameOnGpu), int64 exactly.
TEST_F(CudaKernelsTest, EinsumAsBatchedProductsAndAsLoops) {
  struct Case {
    std::string equation;
    std::vector<Input> inputs;
  };
  const std::vector<Case> cases = {
      {"bghid,bghjd->bghij", {{"a", {2, 3, 4, 49, 32}}, {"b", {2, 3, 4, 49, 32}}}},
      {"bghij,bghjd->bghid", {{"a", {2, 3, 4, 49, 49}}, {"b", {2, 3, 4, 49, 32}}}},
      {"ik,kj->ij", {{"a", {33, 17}}, {"b", {17, 29}}}},
      {"bki,bkj->bij", {{"a", {5, 17, 33}}, {"b", {5, 17, 29}}}},
      {"ii->i", {{"a", {19, 19}}}},
      {"ij->", {{"a", {23, 31}}}},
      {"i,j->ij", {{"a", {13}}, {"b", {7}}}},
      {"ij,jk,kl->il", {{"a", {6, 7}}, {"b", {7, 8}}, {"c", {8, 9}}}},
      {"...ij,...jk->...ik", {{"a", {3, 1, 5, 6}}, {"b", {1, 4, 6, 7}}}},
      {"ij,jk->ik", {{"a", {6, 7}, DType::kInt64}, {"b", {7, 8}, DType::kInt64}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    ExpectSameOnGpu(OneNodeModel("Einsum", c.inputs, {},
                                 [&](onnx::NodeProto* n) {
                                   onnx::AttributeProto* equation = n->add_attribute();
                                   equation->set_name("equation");
                                   equation->set_type(onnx::AttributeProto::STRING);
                                   equation->set_s(c.equation);
                                 }),
                    c.inputs);
  }
}

// Range, whose three scalars are known when the plan is made: the CUDA
// kernel uploads the host's values once (the plan then folds it).
TEST_F(CudaKernelsTest, RangeOfKnownScalars) {
  Tensor start = Tensor::Host(DType::kFloat32, {});
  Tensor limit = Tensor::Host(DType::kFloat32, {});
  Tensor delta = Tensor::Host(DType::kFloat32, {});
  start.data<float>()[0] = -1.5f;
  limit.data<float>()[0] = 7.0f;
  delta.data<float>()[0] = 0.25f;
  ExpectSameOnGpu(
      OneNodeModel("Range", {}, {{"start", start}, {"limit", limit}, {"delta", delta}}, nullptr),
      std::vector<Tensor>{});
}

// Indices that are data (token ids): gathered on the GPU after the host has
// checked them; an index out of range fails the run with the CPU backend's
// message and leaves the next run unaffected.
TEST_F(CudaKernelsTest, GatherWithIndicesThatAreData) {
  const Input x{"x", {4, 6, 10}};
  const Input ids{"ids", {2, 3}, DType::kInt64};
  const onnx::ModelProto model = OneNodeModel(
      "Gather", {x, ids}, {}, [](onnx::NodeProto* n) { OnnxModelBuilder::SetInt(n, "axis", 1); });
  Tensor good = Tensor::Host(DType::kInt64, {2, 3});
  Tensor bad = Tensor::Host(DType::kInt64, {2, 3});
  const int64_t good_values[] = {5, 0, -1, 2, -6, 3};
  const int64_t bad_values[] = {1, 6, 0, 0, 0, 0};
  for (int i = 0; i < 6; ++i) {
    good.data<int64_t>()[i] = good_values[i];
    bad.data<int64_t>()[i] = bad_values[i];
  }
  const Tensor data = Random(x, 7);
  ExpectSameOnGpu(model, {data, good});
  for (DeviceId device : {DeviceId{}, kGpu}) {
    absl::StatusOr<std::vector<Tensor>> result = RunOnnxModel(model, {data, bad}, device);
    ASSERT_FALSE(result.ok()) << DeviceIdToString(device);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(
                  "input 1 'indices' holds 6 at position 1; expected an index in [-6, 5]"),
              std::string::npos)
        << result.status();
  }
  ExpectSameOnGpu(model, {data, good});
}

// Opset-18 ops the ONNX library of the tests' shape inference (1.12) does
// not know, run as kernels on both slots: Mish, and GroupNormalization (4
// groups of 2 channels, its affine per group as through opset 20).
class CudaKernelCallTest : public testing::CpuAndGpuTest {};

TEST_F(CudaKernelCallTest, MishAndGroupNormalizationMatchTheCpu) {
  testing::KernelCall mish;
  mish.op_type = "Mish";
  mish.opset = 18;
  mish.inputs = {testing::RandomTensor({4, 16, 8, 8}, 1)};
  ExpectKernelMatchesCpu(mish, "Mish");
  testing::KernelCall group_norm;
  group_norm.op_type = "GroupNormalization";
  group_norm.opset = 18;
  group_norm.attributes.Set("num_groups", int64_t{4});
  group_norm.inputs = {testing::RandomTensor({4, 8, 17, 17}, 2), testing::RandomTensor({4}, 3),
                       testing::RandomTensor({4}, 4)};
  ExpectKernelMatchesCpu(group_norm, "GroupNormalization");
}

}  // namespace
}  // namespace replicad
