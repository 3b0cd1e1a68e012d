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

bool HasBFloat16DotProducts() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// A chain of bf16 convolutions as mobilenet_v2's blocks make it: a = Relu(Conv
// 8 -> 16, 3 x 3), b = Clip(depthwise 3 x 3 of a, 0, 6), c = Conv 1 x 1 of b
// plus a (a residual Add, fused), then a global average pool. a and b are
// read only by bf16 convolutions: they stay bfloat16 between them.
constexpr int64_t kWide = 16;

std::string ChainOnnx(const std::vector<Tensor>& weights) {
  return testing::ConvChainOnnx(weights, kChannels, kWide, kSide);
}

// One convolution in double over [batch, in, side, side] values, pads 1 for
// a 3 x 3 window.
std::vector<double> ConvReference(const std::vector<double>& x, int64_t in, const Tensor& w,
                                  const Tensor& bias, int64_t group, int64_t side = kSide) {
  const int64_t out = w.shape()[0], area = w.shape()[2], pad = area / 2;
  const int64_t in_per_group = in / group, out_per_group = out / group;
  std::vector<double> y(kBatch * out * side * side);
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t f = 0; f < out; ++f) {
      for (int64_t i = 0; i < side; ++i) {
        for (int64_t j = 0; j < side; ++j) {
          double sum = bias.data<float>()[f];
          for (int64_t c = 0; c < in_per_group; ++c) {
            const int64_t channel = f / out_per_group * in_per_group + c;
            for (int64_t u = 0; u < area; ++u) {
              for (int64_t v = 0; v < area; ++v) {
                const int64_t ii = i + u - pad, jj = j + v - pad;
                if (ii < 0 || jj < 0 || ii >= side || jj >= side) continue;
                sum += x[((n * in + channel) * side + ii) * side + jj] *
                       ToBFloat16(w.data<float>()[((f * in_per_group + c) * area + u) * area + v]);
              }
            }
          }
          y[((n * out + f) * side + i) * side + j] = sum;
        }
      }
    }
  }
  return y;
}

// The chain in double: every convolution reads bfloat16-rounded values and
// weights and sums exactly; a convolution that writes bfloat16 rounds its
// output (after its clamp), and where `bfloat16_values` is false a and b are
// float32 (what a chain without bfloat16 values between its convolutions
// computes: the same except for the residual's addend).
std::vector<double> ChainReference(const Tensor& x, const std::vector<Tensor>& w,
                                   bool bfloat16_values) {
  const auto stored = [&](double v) {
    return bfloat16_values ? ToBFloat16(static_cast<float>(v)) : static_cast<float>(v);
  };
  std::vector<double> input(x.num_elements());
  for (size_t i = 0; i < input.size(); ++i) input[i] = ToBFloat16(x.data<float>()[i]);
  std::vector<double> a = ConvReference(input, kChannels, w[0], w[1], 1);
  for (double& v : a) v = stored(std::max(v, 0.0));
  std::vector<double> read_a = a;
  for (double& v : read_a) v = ToBFloat16(static_cast<float>(v));
  std::vector<double> b = ConvReference(read_a, kWide, w[2], w[3], kWide);
  for (double& v : b) v = ToBFloat16(static_cast<float>(std::min(std::max(v, 0.0), 6.0)));
  std::vector<double> c = ConvReference(b, kWide, w[4], w[5], 1);
  std::vector<double> y(kBatch * kWide, 0.0);
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t f = 0; f < kWide; ++f) {
      for (int64_t p = 0; p < kSide * kSide; ++p) {
        const int64_t at = (n * kWide + f) * kSide * kSide + p;
        y[n * kWide + f] += static_cast<float>(c[at] + a[at]);
      }
      y[n * kWide + f] /= kSide * kSide;
    }
  }
  return y;
}

// The nodes of `onnx` loaded in `precision` that write 16 bits
// (kOutputPrecisionAttribute, which names the precision).
std::vector<std::string> WritingSixteenBits(const std::string& onnx, ComputePrecision precision) {
  OnnxImportOptions options;
  options.precision = precision;
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadOnnxBytes(onnx, "m", "m", options);
  EXPECT_TRUE(model.ok()) << model.status();
  std::vector<std::string> writing;
  if (!model.ok()) return writing;
  for (const Node& node : (*model)->graph().nodes) {
    absl::StatusOr<std::string> output = node.attributes.GetString(kOutputPrecisionAttribute, "");
    if (output.ok() && !output->empty()) {
      EXPECT_EQ(*output, ComputePrecisionName(precision)) << node.name;
      writing.push_back(node.name);
    }
  }
  return writing;
}

std::vector<Tensor> ChainWeights() {
  return {testing::RandomTensor({kWide, kChannels, 3, 3}, 11), testing::RandomTensor({kWide}, 12),
          testing::RandomTensor({kWide, 1, 3, 3}, 13),         testing::RandomTensor({kWide}, 14),
          testing::RandomTensor({kWide, kWide, 1, 1}, 15),     testing::RandomTensor({kWide}, 16)};
}

TEST(ProductPrecisionTest, ChainsOfBFloat16ConvolutionsPassBFloat16Values) {
  const std::vector<Tensor> weights = ChainWeights();
  const std::string onnx = ChainOnnx(weights);
  // The third convolution (cc) and its sum go to the pool, which reads float32.
  EXPECT_EQ(WritingSixteenBits(onnx, ComputePrecision::kBFloat16),
            (std::vector<std::string>{"ca", "cb"}));
  if (!HasBFloat16DotProducts()) GTEST_SKIP() << "this CPU has no bfloat16 dot products";

  const Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 17);
  int marked = 0;
  const Tensor bf16 = RunNetwork(onnx, ComputePrecision::kBFloat16, x, &marked, kWide);
  EXPECT_EQ(marked, 3);
  const double chain = RelativeL2(bf16, ChainReference(x, weights, /*bfloat16_values=*/true));
  const double float_values =
      RelativeL2(bf16, ChainReference(x, weights, /*bfloat16_values=*/false));
  // float32 sums against double, with a bfloat16 rounding that may fall the
  // other way where a sum sits next to a rounding boundary.
  EXPECT_LT(chain, 1e-4);
  // The addend's rounding shows (were a float32, this would be under 1e-4).
  EXPECT_GT(float_values, 5 * chain);
}

// resnet's stem in small (testing::ConvPoolChainOnnx): a MaxPool between
// two bf16 convolutions passes their bfloat16 values on, and its output,
// also the residual's addend, is added as bfloat16.
std::vector<Tensor> PoolChainWeights() {
  return {testing::RandomTensor({kWide, kChannels, 3, 3}, 21), testing::RandomTensor({kWide}, 22),
          testing::RandomTensor({kWide, kWide, 3, 3}, 23),     testing::RandomTensor({kWide}, 24),
          testing::RandomTensor({kWide, kWide, 1, 1}, 25),     testing::RandomTensor({kWide}, 26)};
}

// The stem in double, as ChainReference: where `bfloat16_values` is false,
// a and the pooled p are float32 (the residual's addend shows it).
std::vector<double> PoolChainReference(const Tensor& x, const std::vector<Tensor>& w,
                                       bool bfloat16_values) {
  const int64_t half = kSide / 2;
  std::vector<double> input(x.num_elements());
  for (size_t i = 0; i < input.size(); ++i) input[i] = ToBFloat16(x.data<float>()[i]);
  std::vector<double> a = ConvReference(input, kChannels, w[0], w[1], 1);
  for (double& v : a) {
    v = std::max(v, 0.0);
    if (bfloat16_values) v = ToBFloat16(static_cast<float>(v));
  }
  std::vector<double> p(kBatch * kWide * half * half, -INFINITY);
  for (int64_t nc = 0; nc < kBatch * kWide; ++nc) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        double& out = p[(nc * half + i) * half + j];
        for (int64_t u = 2 * i - 1; u <= 2 * i + 1; ++u) {
          for (int64_t v = 2 * j - 1; v <= 2 * j + 1; ++v) {
            if (u < 0 || v < 0 || u >= kSide || v >= kSide) continue;
            out = std::max(out, a[(nc * kSide + u) * kSide + v]);
          }
        }
      }
    }
  }
  std::vector<double> read_p = p;
  for (double& v : read_p) v = ToBFloat16(static_cast<float>(v));
  std::vector<double> e = ConvReference(read_p, kWide, w[2], w[3], 1, half);
  for (double& v : e) v = ToBFloat16(static_cast<float>(std::max(v, 0.0)));
  std::vector<double> c = ConvReference(e, kWide, w[4], w[5], 1, half);
  std::vector<double> y(kBatch * kWide, 0.0);
  for (int64_t nc = 0; nc < kBatch * kWide; ++nc) {
    for (int64_t q = 0; q < half * half; ++q) {
      const int64_t at = nc * half * half + q;
      y[nc] += static_cast<float>(c[at] + p[at]);
    }
    y[nc] /= half * half;
  }
  return y;
}

TEST(ProductPrecisionTest, BFloat16ValuesCrossAMaxPoolBetweenConvolutions) {
  const std::vector<Tensor> weights = PoolChainWeights();
  const std::string onnx = testing::ConvPoolChainOnnx(weights, kChannels, kWide, kSide);
  // The last convolution and its sum go to the global pool, which reads float32.
  EXPECT_EQ(WritingSixteenBits(onnx, ComputePrecision::kBFloat16),
            (std::vector<std::string>{"ca", "p", "cb"}));
  if (!HasBFloat16DotProducts()) GTEST_SKIP() << "this CPU has no bfloat16 dot products";

  const Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 27);
  int marked = 0;
  const Tensor bf16 = RunNetwork(onnx, ComputePrecision::kBFloat16, x, &marked, kWide);
  EXPECT_EQ(marked, 3);
  const double stem = RelativeL2(bf16, PoolChainReference(x, weights, /*bfloat16_values=*/true));
  const double float_values =
      RelativeL2(bf16, PoolChainReference(x, weights, /*bfloat16_values=*/false));
  EXPECT_LT(stem, 1e-4);
  EXPECT_GT(float_values, 5 * stem);  // The pooled addend was bfloat16.

  // A NaN reaches the outputs float32's reaches, through the bfloat16 pool.
  Tensor with_nan = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 27);
  with_nan.data<float>()[2 * kSide + 5] = std::nanf("");
  const Tensor fp32 = RunNetwork(onnx, ComputePrecision::kFloat32, with_nan, &marked, kWide);
  const Tensor bf16_nan = RunNetwork(onnx, ComputePrecision::kBFloat16, with_nan, &marked, kWide);
  int nan_outputs = 0;
  for (int64_t i = 0; i < kBatch * kWide; ++i) {
    EXPECT_EQ(std::isnan(fp32.data<float>()[i]), std::isnan(bf16_nan.data<float>()[i]))
        << "element " << i;
    nan_outputs += std::isnan(bf16_nan.data<float>()[i]);
  }
  EXPECT_GT(nan_outputs, 0);
  EXPECT_LT(nan_outputs, kBatch * kWide);  // The other sample stays finite.
}

// fp16 marks the same chain's convolutions "fp16" (CUDA slots hand their
// values over in float16: cudnn_conv16_kernel.cc); a CPU slot, which computes
// fp16 models in float32, gives the float32 model's bits through it.
TEST(ProductPrecisionTest, Float16MarksTheChainAndCpuSlotsComputeFloat32) {
  const std::string onnx = ChainOnnx(ChainWeights());
  EXPECT_EQ(WritingSixteenBits(onnx, ComputePrecision::kFloat16),
            (std::vector<std::string>{"ca", "cb"}));

  const Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 19);
  int fp32_marked = 0, fp16_marked = 0;
  const Tensor fp32 = RunNetwork(onnx, ComputePrecision::kFloat32, x, &fp32_marked, kWide);
  const Tensor fp16 = RunNetwork(onnx, ComputePrecision::kFloat16, x, &fp16_marked, kWide);
  EXPECT_EQ(fp16_marked, 3);
  for (int64_t i = 0; i < fp32.num_elements(); ++i) {
    EXPECT_EQ(fp32.data<float>()[i], fp16.data<float>()[i]) << "element " << i;
  }
}

// A NaN in a request reaches the same outputs as in float32 through the
// chain's bfloat16 values (its check and its clamps read bfloat16); the
// other sample stays finite.
TEST(ProductPrecisionTest, NaNCrossesBFloat16Chains) {
  if (!HasBFloat16DotProducts()) GTEST_SKIP() << "this CPU has no bfloat16 dot products";
  const std::string onnx = ChainOnnx(ChainWeights());
  Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 18);
  x.data<float>()[3 * kSide + 4] = std::nanf("");
  int marked = 0;
  const Tensor fp32 = RunNetwork(onnx, ComputePrecision::kFloat32, x, &marked, kWide);
  const Tensor bf16 = RunNetwork(onnx, ComputePrecision::kBFloat16, x, &marked, kWide);
  for (int64_t i = 0; i < kBatch * kWide; ++i) {
    EXPECT_EQ(std::isnan(fp32.data<float>()[i]), std::isnan(bf16.data<float>()[i]))
        << "element " << i;
    EXPECT_EQ(std::isnan(bf16.data<float>()[i]), i < kWide) << "element " << i;
  }
}

TEST(ProductPrecisionTest, NamesAreParsedAndOthersRefused) {
  EXPECT_EQ(*ParseComputePrecision("bf16", "--precision"), ComputePrecision::kBFloat16);
  EXPECT_EQ(*ParseComputePrecision("float32", "--precision"), ComputePrecision::kFloat32);
  EXPECT_EQ(*ParseComputePrecision("tf32", "--precision"), ComputePrecision::kTensorFloat32);
  EXPECT_EQ(*ParseComputePrecision("fp16", "precision"), ComputePrecision::kFloat16);
  EXPECT_EQ(*ParseComputePrecision("float16", "precision"), ComputePrecision::kFloat16);
  absl::StatusOr<ComputePrecision> bad = ParseComputePrecision("int4", "parameters.precision");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "parameters.precision: expected fp32, bf16, fp16 or tf32, received 'int4'");
}

// The network computed in `precision` on a CPU slot gives the float32
// network's bits, with `marked` nodes marked.
void ExpectFloat32Bits(ComputePrecision precision, int marked) {
  const Tensor w1 = testing::RandomTensor({kFilters, kChannels, 3, 3}, 1);
  const Tensor b1 = testing::RandomTensor({kFilters}, 2);
  const Tensor w2 = testing::RandomTensor({kFeatures, kClasses}, 3);
  const Tensor x = testing::RandomTensor({kBatch, kChannels, kSide, kSide}, 4);
  const std::string onnx = NetworkOnnx(w1, b1, w2);
  int fp32_marked = 0, reduced_marked = 0;
  const Tensor fp32 = RunNetwork(onnx, ComputePrecision::kFloat32, x, &fp32_marked);
  EXPECT_EQ(fp32_marked, 0);
  const Tensor reduced = RunNetwork(onnx, precision, x, &reduced_marked);
  EXPECT_EQ(reduced_marked, marked);
  for (int64_t i = 0; i < fp32.num_elements(); ++i) {
    EXPECT_EQ(fp32.data<float>()[i], reduced.data<float>()[i]) << "element " << i;
  }
}

// fp16 serving marks the products bf16 marks (the Conv and the MatMul of a
// weight), for CUDA slots' float16 tensor cores; CPU slots, without float16
// products, compute float32: the same bits as the float32 model.
TEST(ProductPrecisionTest, Float16MarksTheWeightProductsAndCpuSlotsComputeFloat32) {
  ExpectFloat32Bits(ComputePrecision::kFloat16, 2);
}

// tf32 marks every product, whatever its operands (a MatMul of two inputs
// too), and CPU slots, which have no TF32, compute float32: the same bits as
// the float32 model.
TEST(ProductPrecisionTest, TensorFloat32MarksEveryProductAndCpuSlotsComputeFloat32) {
  ExpectFloat32Bits(ComputePrecision::kTensorFloat32, 2);  // The Conv and the MatMul.

  Graph graph;
  graph.values.resize(4);
  Node matmul;
  matmul.op_type = "MatMul";
  matmul.inputs = {0, 1};
  matmul.outputs = {2};
  graph.nodes.push_back(matmul);
  Node relu;
  relu.op_type = "Relu";
  relu.inputs = {2};
  relu.outputs = {3};
  graph.nodes.push_back(relu);
  MarkComputePrecision(&graph, ComputePrecision::kTensorFloat32);
  EXPECT_EQ(*graph.nodes[0].attributes.GetString(kPrecisionAttribute, ""), "tf32");
  EXPECT_FALSE(graph.nodes[1].attributes.Has(kPrecisionAttribute));
  EXPECT_EQ(MarkedComputePrecision(graph), ComputePrecision::kTensorFloat32);
}

}  // namespace
}  // namespace replicad
