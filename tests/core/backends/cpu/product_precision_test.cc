// Products computed in bfloat16 (core/model/compute_precision.h) on CPU
// slots: a float32 network of a convolution (bias, Relu) and a matrix product
// against weights, loaded with precision bf16, marks both and answers what a
// double-precision computation gives when each product's input and weights
// are first rounded to bfloat16: within 1e-5 relative L2 (float32 sums),
// where the float32 model differs from it by more than 1e-4 (so the bf16
// kernels ran). Without bf16 dot products (AVX512_BF16 or AMX) the slot
// computes float32: the answer is the float32 model's, bit for bit. The
// convolution (8 -> 8 channels, 3 x 3) has the 64 products an output and an
// input that a bf16 convolution needs on CPU slots; a 3-channel one computes
// float32 (ProductsPerConvolutionDecideIt).

#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/model/compute_precision.h"
#include "core/model/onnx_builder.h"
#include "core/model/onnx_import.h"
#include "core/serve/replica.h"
#include "core/tensor/half_float.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr int64_t kBatch = 2, kChannels = 8, kSide = 8, kFilters = 8, kClasses = 5;
constexpr int64_t kFeatures = kFilters * kSide * kSide;

float ToBFloat16(float v) { return BFloat16ToFloat(FloatToBFloat16(v)); }

std::string NetworkOnnx(const Tensor& w1, const Tensor& b1, const Tensor& w2) {
  OnnxModelBuilder b("conv_matmul", 17);
  b.AddInput("x", DType::kFloat32, {kAnyDim, kChannels, kSide, kSide});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kClasses});
  b.AddInitializer("w1", w1);
  b.AddInitializer("b1", b1);
  b.AddInitializer("w2", w2);
  Tensor shape = Tensor::Host(DType::kInt64, {2});
  shape.data<int64_t>()[0] = -1;
  shape.data<int64_t>()[1] = kFeatures;
  b.AddInitializer("shape", shape);
  onnx::NodeProto* conv = b.AddNode("Conv", {"x", "w1", "b1"}, {"c"});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
  b.AddNode("Relu", {"c"}, {"r"});
  b.AddNode("Reshape", {"r", "shape"}, {"f"});
  b.AddNode("MatMul", {"f", "w2"}, {"y"});
  return b.Serialize();
}

Tensor RunNetwork(const std::string& onnx, ComputePrecision precision, const Tensor& x,
                  int* marked_nodes, int64_t outputs_per_row = kClasses) {
  OnnxImportOptions options;
  options.precision = precision;
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(onnx, "m", "m", options);
  EXPECT_TRUE(model.ok()) << model.status();
  *marked_nodes = 0;
  for (const Node& node : (*model)->graph().nodes) {
    *marked_nodes += node.attributes.Has(kPrecisionAttribute);
  }
  std::unique_ptr<Replica> replica = testing::MakeCpuReplica(*model);
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = replica->PlanFor({x.shape()});
  EXPECT_TRUE(plan.ok()) << plan.status();
  Tensor y = Tensor::Host(DType::kFloat32, {x.shape()[0], outputs_per_row});
  const void* inputs[] = {x.raw_data()};
  void* outputs[] = {y.raw_data()};
  EXPECT_TRUE((*plan)->Run(inputs, outputs).ok());
  return y;
}

// The network in double, each product's operands rounded first by `round`.
template <typename Round>
std::vector<double> Reference(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                              Round round) {
  std::vector<double> features(kBatch * kFeatures);
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t f = 0; f < kFilters; ++f) {
      for (int64_t i = 0; i < kSide; ++i) {
        for (int64_t j = 0; j < kSide; ++j) {
          double sum = b1.data<float>()[f];
          for (int64_t c = 0; c < kChannels; ++c) {
            for (int64_t u = 0; u < 3; ++u) {
              for (int64_t v = 0; v < 3; ++v) {
                const int64_t ii = i + u - 1, jj = j + v - 1;
                if (ii < 0 || jj < 0 || ii >= kSide || jj >= kSide) continue;
                const float xv = x.data<float>()[((n * kChannels + c) * kSide + ii) * kSide + jj];
                const float wv = w1.data<float>()[((f * kChannels + c) * 3 + u) * 3 + v];
                sum += static_cast<double>(round(xv)) * round(wv);
              }
            }
          }
          // The next product reads the float32 output, rounded.
          features[n * kFeatures + (f * kSide + i) * kSide + j] =
              std::max(static_cast<double>(static_cast<float>(sum)), 0.0);
        }
      }
    }
  }
  std::vector<double> y(kBatch * kClasses);
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t k = 0; k < kClasses; ++k) {
      double sum = 0;
      for (int64_t f = 0; f < kFeatures; ++f) {
        sum += static_cast<double>(round(static_cast<float>(features[n * kFeatures + f]))) *
               round(w2.data<float>()[f * kClasses + k]);
      }
      y[n * kClasses + k] = sum;
    }
  }
  return y;
}

double RelativeL2(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += std::pow(got.data<float>()[i] - want[i], 2);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(ProductPrecisionTest, BFloat16ProductsRoundTheirOperandsAndSumInFloat32) {
  const Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 1);
  const Tensor w1 = testing::RandomTensor({kFilters, kChannels, 3, 3}, 2);
  const Tensor b1 = testing::RandomTensor({kFilters}, 3);
  const Tensor w2 = testing::RandomTensor({kFeatures, kClasses}, 4);
  const std::string onnx = NetworkOnnx(w1, b1, w2);
  int marked = 0;
  const Tensor fp32 = RunNetwork(onnx, ComputePrecision::kFloat32, x, &marked);
  EXPECT_EQ(marked, 0);
  const Tensor bf16 = RunNetwork(onnx, ComputePrecision::kBFloat16, x, &marked);
  EXPECT_EQ(marked, 2);  // The Conv (with its Relu fused) and the MatMul.

  const std::vector<double> exact = Reference(x, w1, b1, w2, [](float v) { return v; });
  const std::vector<double> rounded = Reference(x, w1, b1, w2, ToBFloat16);
  EXPECT_LT(RelativeL2(fp32, exact), 1e-5);
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (isa != dnnl::cpu_isa::avx512_core_bf16 && isa != dnnl::cpu_isa::avx512_core_amx) {
    for (int64_t i = 0; i < fp32.num_elements(); ++i) {
      EXPECT_EQ(bf16.data<float>()[i], fp32.data<float>()[i]) << "element " << i;
    }
    GTEST_SKIP() << "this CPU has no bfloat16 dot products: the slot computed float32";
  }
  EXPECT_LT(RelativeL2(bf16, rounded), 1e-5);
  EXPECT_GT(RelativeL2(bf16, exact), 1e-4);
  EXPECT_LT(RelativeL2(bf16, exact), 2e-2);
}

// The first layer of an image network (3 input channels: 27 products an
// output) converts more than it saves: it stays float32, marked or not,
// while the MatMul after it computes in bf16.
TEST(ProductPrecisionTest, ProductsPerConvolutionDecideIt) {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (isa != dnnl::cpu_isa::avx512_core_bf16 && isa != dnnl::cpu_isa::avx512_core_amx) {
    GTEST_SKIP() << "this CPU has no bfloat16 dot products";
  }
  OnnxModelBuilder b("first_layer", 17);
  b.AddInput("x", DType::kFloat32, {kAnyDim, 3, 4, 4});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, 16, 4, 4});
  const Tensor w = testing::RandomTensor({16, 3, 3, 3}, 5);
  b.AddInitializer("w", w);
  onnx::NodeProto* conv = b.AddNode("Conv", {"x", "w"}, {"y"});
  OnnxModelBuilder::SetInts(conv, "pads", {1, 1, 1, 1});
  const Tensor x = testing::RandomTensor({1, 3, 4, 4}, 6);
  int marked = 0;
  const Tensor fp32 = RunNetwork(b.Serialize(), ComputePrecision::kFloat32, x, &marked, 16 * 16);
  const Tensor bf16 = RunNetwork(b.Serialize(), ComputePrecision::kBFloat16, x, &marked, 16 * 16);
  EXPECT_EQ(marked, 1);
  for (int64_t i = 0; i < fp32.num_elements(); ++i) {
    EXPECT_EQ(bf16.data<float>()[i], fp32.data<float>()[i]) << "element " << i;
  }
}

TEST(ProductPrecisionTest, NamesAreParsedAndOthersRefused) {
  EXPECT_EQ(*ParseComputePrecision("bf16", "--precision"), ComputePrecision::kBFloat16);
  EXPECT_EQ(*ParseComputePrecision("float32", "--precision"), ComputePrecision::kFloat32);
  absl::StatusOr<ComputePrecision> half = ParseComputePrecision("fp16", "--precision");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kUnimplemented);
  absl::StatusOr<ComputePrecision> bad = ParseComputePrecision("int4", "parameters.precision");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "parameters.precision: expected fp32 or bf16, received 'int4'");
}

}  // namespace
}  // namespace replicad
