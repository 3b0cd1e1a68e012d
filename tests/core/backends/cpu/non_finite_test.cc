// NaN and infinities through the CPU kernels, against references that keep
// them as IEEE arithmetic and ONNX Runtime do: a NaN input stays NaN through
// Relu, Clip and the activations fused into a Conv, Gemm or MatMul; a window
// of MaxPool that holds a NaN gives NaN (as PyTorch's does); a Softmax row
// with a NaN or +inf gives NaN throughout (as ONNX Runtime 1.31's does). A
// serving system must not turn bad input into a plausible answer.
//
// Cases: NaN, +inf and -inf through Relu, zero-slope LeakyRelu, Clip, HardSigmoid, convolutions
// (blocked and plain) with fused Relu, ReLU6 and LeakyRelu, Gemm and MatMul with a fused Relu, the
// matrix-vector product, MaxPool (a NaN at each place of a padded, dilated, ceil_mode window),
// Softmax and LogSoftmax rows, GlobalAveragePool and ReduceMean; one convolution kernel fed finite,
// NaN and infinite inputs in turn; Winograd against the direct sum's non-finite positions (both
// runs direct without AVX-512); the scan over bfloat16 values.
#include "core/backends/cpu/kernels/non_finite.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/model/onnx_builder.h"
#include "core/ops/fused_activation.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::Floats;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

class NonFiniteTest : public CpuKernelTestBase {};

// Random values with NaN, +inf and -inf written at `nan`, `inf` and
// `minus_inf` (row-major offsets; -1 for none).
Tensor WithNonFinite(Shape shape, uint32_t seed, int64_t nan, int64_t inf, int64_t minus_inf) {
  Tensor t = Random(std::move(shape), seed);
  if (nan >= 0) t.data<float>()[nan] = kNaN;
  if (inf >= 0) t.data<float>()[inf] = kInf;
  if (minus_inf >= 0) t.data<float>()[minus_inf] = -kInf;
  return t;
}

// NaN exactly where `expected` is NaN, the same infinities, and finite
// values within 1e-5 + 1e-4 * |expected|. `expected` must hold a NaN unless
// `nan_optional`.
void ExpectSameNonFinite(const Tensor& actual, const Tensor& expected, bool nan_optional = false) {
  ASSERT_EQ(actual.type(), expected.type());
  int64_t nan = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float e = expected.data<float>()[i];
    const float a = actual.data<float>()[i];
    if (std::isnan(e)) {
      ++nan;
      ASSERT_TRUE(std::isnan(a)) << "element " << i << " is " << a << ", expected NaN";
    } else if (std::isinf(e)) {
      ASSERT_EQ(a, e) << "element " << i;
    } else {
      ASSERT_NEAR(a, e, 1e-5 + 1e-4 * std::fabs(e)) << "element " << i;
    }
  }
  if (!nan_optional) {
    EXPECT_GT(nan, 0) << "the reference has no NaN: the case tests nothing";
  }
}

// ONNX's Clip as IEEE comparisons give it: NaN fails both and stays.
float ClipKeepingNaN(float x, float low, float high) {
  if (x < low) x = low;
  if (x > high) x = high;
  return x;
}

Tensor Map(const Tensor& x, float (*f)(float, float, float), float low, float high) {
  Tensor y = Tensor::Host(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    y.data<float>()[i] = f(x.data<float>()[i], low, high);
  }
  return y;
}

// In double, so that NaN and infinities combine as IEEE says.
Tensor ReferenceConvPadOne(const Tensor& x, const Tensor& w) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  Tensor y = Tensor::Host(DType::kFloat32, {xs[0], ws[0], xs[2], xs[3]});
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t m = 0; m < ws[0]; ++m)
      for (int64_t oh = 0; oh < xs[2]; ++oh)
        for (int64_t ow = 0; ow < xs[3]; ++ow) {
          double sum = 0;
          for (int64_t c = 0; c < xs[1]; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
              for (int64_t kw = 0; kw < 3; ++kw) {
                const int64_t ih = oh - 1 + kh, iw = ow - 1 + kw;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                sum += static_cast<double>(x.data<float>()[Offset(xs, {n, c, ih, iw})]) *
                       w.data<float>()[Offset(ws, {m, c, kh, kw})];
              }
          y.data<float>()[Offset(y.shape(), {n, m, oh, ow})] = static_cast<float>(sum);
        }
  return y;
}

TEST_F(NonFiniteTest, ReluKeepsNaNAndInfinityAndZeroesMinusInfinity) {
  // 100 floats: vectors and a tail.
  const Tensor x = WithNonFinite({4, 25}, 1, 3, 40, 77);
  absl::StatusOr<std::vector<Tensor>> y = Run("Relu", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectSameNonFinite((*y)[0], Map(x, ClipKeepingNaN, 0.0f, kInf));
  EXPECT_EQ((*y)[0].data<float>()[77], 0.0f);

  Attributes no_slope;
  no_slope.Set("alpha", 0.0f);
  y = Run("LeakyRelu", {x}, no_slope);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectSameNonFinite((*y)[0], Map(x, ClipKeepingNaN, 0.0f, kInf));
}

TEST_F(NonFiniteTest, ClipWithConstantBoundsKeepsNaN) {
  const Tensor x = WithNonFinite({100}, 2, 50, 51, 52);
  const Tensor low = Floats({}, {0.0f});
  const Tensor high = Floats({}, {1.5f});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Clip", {x, low, high}, Attributes(), 13, /*constants=*/{1, 2});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectSameNonFinite((*y)[0], Map(x, ClipKeepingNaN, 0.0f, 1.5f));
}

TEST_F(NonFiniteTest, HardSigmoidKeepsNaN) {
  const Tensor x = WithNonFinite({37}, 3, 0, 36, 5);
  Attributes attributes;
  attributes.Set("alpha", 0.25f);
  attributes.Set("beta", 0.5f);
  absl::StatusOr<std::vector<Tensor>> y = Run("HardSigmoid", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor expected = Tensor::Host(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    expected.data<float>()[i] = ClipKeepingNaN(0.25f * x.data<float>()[i] + 0.5f, 0.0f, 1.0f);
  }
  ExpectSameNonFinite((*y)[0], expected);
}

struct FusedCase {
  const char* op_type;
  float alpha, beta;  // Clip's bounds.
  float low, high;    // As a clip of the output.
};

// The blocked convolution (constant weights) and the plain one (weights at
// run time), each with Relu, ReLU6 and a zero-slope LeakyRelu fused: a NaN
// pixel makes NaN of every output whose window reads it, +inf and -inf give
// infinities where one window reads one of them, then the activation.
TEST_F(NonFiniteTest, ConvWithFusedClampingActivationsKeepsNaN) {
  const int64_t nan_at = Offset({2, 16, 8, 8}, {0, 3, 2, 2});
  const int64_t inf_at = Offset({2, 16, 8, 8}, {1, 5, 6, 1});
  const int64_t minus_inf_at = Offset({2, 16, 8, 8}, {1, 9, 1, 6});
  const Tensor x = WithNonFinite({2, 16, 8, 8}, 4, nan_at, inf_at, minus_inf_at);
  const Tensor w = Random({32, 16, 3, 3}, 5);
  const Tensor conv = ReferenceConvPadOne(x, w);
  for (const FusedCase& c : {FusedCase{"Relu", 0, 0, 0, kInf}, FusedCase{"Clip", 0, 6, 0, 6},
                             FusedCase{"LeakyRelu", 0, 0, 0, kInf}}) {
    for (const bool constant_weights : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << c.op_type
                   << (constant_weights ? ", constant weights" : ", run-time weights"));
      Attributes attributes;
      attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
      WriteFusedActivation(FusedActivation{c.op_type, c.alpha, c.beta}, &attributes);
      absl::StatusOr<std::vector<Tensor>> y =
          Run("Conv", {x, w}, attributes, 17,
              constant_weights ? std::vector<int>{1} : std::vector<int>{});
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectSameNonFinite((*y)[0], Map(conv, ClipKeepingNaN, c.low, c.high));
    }
  }
}

// One kernel, runs in turn: a convolution with a fused Relu runs oneDNN's
// post-op for finite inputs and its NaN-keeping pass otherwise, choosing
// on every run.
TEST_F(NonFiniteTest, ConvWithFusedReluChoosesOnEveryRun) {
  const Shape shape{1, 16, 8, 8};
  const Tensor w = Random({16, 16, 3, 3}, 15);
  Attributes attributes;
  attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  WriteFusedActivation(FusedActivation{"Relu", 0, 0}, &attributes);
  KernelSpec spec;
  spec.op_type = "Conv";
  spec.attributes = &attributes;
  spec.inputs = {TensorType{DType::kFloat32, shape}, w.type()};
  spec.constant_inputs = {nullptr, &w};
  ASSERT_TRUE(FindOp("Conv")->infer(&spec).ok());
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::vector<char> workspace((*kernel)->workspace_bytes() + 1);
  (*kernel)->SetWorkspace(workspace.data());
  const Tensor finite = Random(shape, 16);
  const Tensor with_nan = WithNonFinite(shape, 16, Offset(shape, {0, 4, 3, 3}), -1, -1);
  const Tensor with_inf =
      WithNonFinite(shape, 16, -1, Offset(shape, {0, 2, 5, 1}), Offset(shape, {0, 9, 1, 6}));
  for (const Tensor* x : {&finite, &with_nan, &finite, &with_inf, &finite}) {
    Tensor y = Tensor::Host(DType::kFloat32, {1, 16, 8, 8});
    const void* inputs[] = {x->raw_data(), w.raw_data()};
    void* outputs[] = {y.raw_data()};
    ASSERT_TRUE((*kernel)->Run(RunContext{}, inputs, outputs).ok());
    ExpectSameNonFinite(y, Map(ReferenceConvPadOne(*x, w), ClipKeepingNaN, 0.0f, kInf),
                        /*nan_optional=*/x != &with_nan);
  }
}

// What a slot's kernels know of finiteness holds only for the output of the
// kernel run just before, as it wrote it.
// Over bfloat16 bits (the values a chain of bf16 convolutions passes): NaN
// and both infinities found at any position, the vector body's and the
// tail's; the largest finite values and -0 are not.
TEST(AnyNonFiniteTest, BFloat16FindsNaNAndInfinitiesAnywhere) {
  for (size_t count : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{100}}) {
    std::vector<uint16_t> x(count, 0x7f7f);  // The largest finite bfloat16.
    x[0] = 0x8000;                           // -0.
    if (count > 1) x[1] = 0xff7f;            // The most negative finite one.
    EXPECT_FALSE(AnyNonFiniteBFloat16(x.data(), count)) << count;
    for (uint16_t bad : {uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0x7fc0}, uint16_t{0xffc1}}) {
      for (size_t at : {size_t{0}, count / 2, count - 1}) {
        std::vector<uint16_t> y = x;
        y[at] = bad;
        EXPECT_TRUE(AnyNonFiniteBFloat16(y.data(), count)) << count << " at " << at;
      }
    }
  }
}

TEST(FiniteOutputsTest, HoldsOnlyTheLastKernelsRecordedOutput) {
  FiniteOutputs finite;
  float a[4], b[4];
  ++finite.kernels_run;  // Kernel 1 writes a, known finite.
  finite.Record(a, sizeof(a));
  ++finite.kernels_run;  // Kernel 2 reads it.
  EXPECT_TRUE(finite.Holds(a, sizeof(a)));
  EXPECT_FALSE(finite.Holds(b, sizeof(b)));
  EXPECT_FALSE(finite.Holds(a, sizeof(a) / 2)) << "a part, or a larger buffer it is part of";
  ++finite.kernels_run;  // Kernel 3 may have written a since.
  EXPECT_FALSE(finite.Holds(a, sizeof(a)));
}

// Where oneDNN has Winograd (AVX-512), a 3x3 stride-1 convolution may run as
// it; its transforms add and subtract neighbouring pixels, so that +inf
// minus +inf may make NaN where the direct sum has an infinity, and a NaN
// may reach every output of its tile. The positions of NaN and infinities
// must be the direct sum's either way: a request with a NaN or an infinity
// runs the direct convolution (conv_kernel.cc). First run on an AVX-512 EPYC
// on 2026-12-01, where it failed before that.
TEST_F(NonFiniteTest, WinogradConvolutionKeepsTheDirectSumsNonFinitePositions) {
  const Shape shape{1, 32, 12, 12};
  const Tensor x = WithNonFinite(shape, 6, Offset(shape, {0, 1, 5, 5}), Offset(shape, {0, 2, 9, 3}),
                                 Offset(shape, {0, 7, 2, 9}));
  const Tensor w = Random({32, 32, 3, 3}, 7);
  Attributes attributes;
  attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  for (const bool winograd : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "winograd " << winograd);
    context_.winograd = winograd;
    absl::StatusOr<std::vector<Tensor>> y = Run("Conv", {x, w}, attributes, 17, {1});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectSameNonFinite((*y)[0], ReferenceConvPadOne(x, w));
  }
  if (dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core) {
    GTEST_SKIP() << "no AVX-512: oneDNN 2.x has no f32 Winograd here (both runs were direct)";
  }
}

// The direct convolution a Winograd one keeps for non-finite requests is
// built by the first such request, not with the plan: until then only
// Winograd's weights are held (issue #36: 36-38 MiB of resnet18's daemon).
// The spec it is built from has gone by then, as a plan's has.
TEST_F(NonFiniteTest, WinogradConvolutionBuildsItsDirectFormOnTheFirstNonFiniteRequest) {
  if (dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core) {
    GTEST_SKIP() << "no AVX-512: oneDNN 2.x has no f32 Winograd here";
  }
  context_.weights = std::make_shared<WeightCache>(engine_);
  const Shape shape{1, 32, 12, 12};
  const Tensor w = Random({32, 32, 3, 3}, 7);
  std::unique_ptr<Kernel> kernel;
  {
    Attributes attributes;
    attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
    KernelSpec spec;
    spec.op_type = "Conv";
    spec.attributes = &attributes;
    spec.inputs = {TensorType{DType::kFloat32, shape}, w.type()};
    spec.constant_inputs = {nullptr, &w};
    ASSERT_TRUE(FindOp("Conv")->infer(&spec).ok());
    absl::StatusOr<std::unique_ptr<Kernel>> made = MakeCpuKernel(spec, context_);
    ASSERT_TRUE(made.ok()) << made.status();
    kernel = *std::move(made);
  }
  EXPECT_EQ(context_.weights->size(), 1u) << "Winograd's weights only";
  std::vector<char> workspace(kernel->workspace_bytes() + 1);
  kernel->SetWorkspace(workspace.data());
  const Tensor finite = Random(shape, 6);
  const Tensor with_nan = WithNonFinite(shape, 6, Offset(shape, {0, 1, 5, 5}),
                                        Offset(shape, {0, 2, 9, 3}), Offset(shape, {0, 7, 2, 9}));
  bool nan_seen = false;
  for (const Tensor* x : {&finite, &with_nan, &finite, &with_nan}) {
    Tensor y = Tensor::Host(DType::kFloat32, {1, 32, 12, 12});
    const void* inputs[] = {x->raw_data(), w.raw_data()};
    void* outputs[] = {y.raw_data()};
    ASSERT_TRUE(kernel->Run(RunContext{}, inputs, outputs).ok());
    ExpectSameNonFinite(y, ReferenceConvPadOne(*x, w), /*nan_optional=*/x == &finite);
    nan_seen |= x == &with_nan;
    EXPECT_EQ(context_.weights->size(), nan_seen ? 2u : 1u)
        << "the direct form's weights come with the first non-finite request";
  }
}

TEST_F(NonFiniteTest, GemmAndMatMulWithFusedReluKeepNaN) {
  // [3, 40] x [40, 24]: row 0 reads a NaN, row 1 +inf, row 2 -inf.
  const Tensor a = WithNonFinite({3, 40}, 8, 7, 40 + 11, 80 + 29);
  const Tensor b = Random({40, 24}, 9);
  Tensor product = Tensor::Host(DType::kFloat32, {3, 24});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 24; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < 40; ++k) {
        sum += static_cast<double>(a.data<float>()[i * 40 + k]) * b.data<float>()[k * 24 + j];
      }
      product.data<float>()[i * 24 + j] = static_cast<float>(sum);
    }
  const Tensor expected = Map(product, ClipKeepingNaN, 0.0f, kInf);
  for (const char* op : {"Gemm", "MatMul"}) {
    for (const bool constant_b : {true, false}) {
      SCOPED_TRACE(::testing::Message() << op << (constant_b ? ", constant B" : ", run-time B"));
      Attributes attributes;
      WriteFusedActivation(FusedActivation{"Relu", 0, 0}, &attributes);
      absl::StatusOr<std::vector<Tensor>> y =
          Run(op, {a, b}, attributes, 17, constant_b ? std::vector<int>{1} : std::vector<int>{});
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectSameNonFinite((*y)[0], expected);
    }
  }
}

// A classifier at batch 1 (GemvRows): one NaN or infinity in the features
// reaches every logit.
TEST_F(NonFiniteTest, MatrixVectorProductKeepsNaN) {
  for (const float bad : {kNaN, kInf}) {
    const Tensor a = WithNonFinite({1, 100}, 10, -1, -1, -1);
    Tensor x = a;
    x.data<float>()[37] = bad;
    const Tensor w = Random({13, 100}, 11);
    Attributes attributes;
    attributes.Set("transB", int64_t{1});
    WriteFusedActivation(FusedActivation{"Relu", 0, 0}, &attributes);
    absl::StatusOr<std::vector<Tensor>> y = Run("Gemm", {x, w}, attributes, 17, {1});
    ASSERT_TRUE(y.ok()) << y.status();
    for (int64_t j = 0; j < 13; ++j) {
      const float v = (*y)[0].data<float>()[j];
      const float weight = w.data<float>()[j * 100 + 37];
      if (std::isnan(bad)) {
        EXPECT_TRUE(std::isnan(v)) << "logit " << j << " is " << v;
      } else {
        EXPECT_EQ(v, weight > 0 ? kInf : 0.0f) << "logit " << j;
      }
    }
  }
}

// A NaN at each place of a padded, dilated, strided window with ceil_mode
// (the geometry of CpuKernelsTest.MaxPoolCeilModeDilatedPadded): NaN exactly
// at the outputs whose windows read it.
TEST_F(NonFiniteTest, MaxPoolNaNReachesExactlyTheWindowsThatReadIt) {
  const Shape shape{1, 2, 8, 7};
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{3, 2});
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  attributes.Set("dilations", std::vector<int64_t>{1, 2});
  attributes.Set("pads", std::vector<int64_t>{1, 0, 0, 1});
  attributes.Set("ceil_mode", int64_t{1});
  for (int64_t at = 0; at < 8 * 7; ++at) {
    Tensor x = Random(shape, 14);
    x.data<float>()[8 * 7 + at] = kNaN;  // Channel 1.
    absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {x}, attributes);
    ASSERT_TRUE(y.ok()) << y.status();
    const Shape out{1, 2, 4, 4};
    ASSERT_EQ((*y)[0].shape(), out);
    Tensor expected = Tensor::Host(DType::kFloat32, out);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 4; ++ow) {
          float best = -kInf;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw) {
              const int64_t ih = oh * 2 - 1 + kh, iw = ow * 2 + kw * 2;
              if (ih < 0 || ih >= 8 || iw < 0 || iw >= 7) continue;
              const float v = x.data<float>()[Offset(shape, {0, c, ih, iw})];
              best = std::isnan(v) || std::isnan(best) ? kNaN : std::max(best, v);
            }
          expected.data<float>()[Offset(out, {0, c, oh, ow})] = best;
        }
    SCOPED_TRACE(::testing::Message() << "NaN at (" << at / 7 << ", " << at % 7 << ")");
    // Odd columns are read by no window (dilation 2, stride 2).
    ExpectSameNonFinite((*y)[0], expected, /*nan_optional=*/true);
  }
}

// A NaN anywhere in a window makes that output NaN, whatever its place in
// the window; infinities are ordinary maxima.
TEST_F(NonFiniteTest, MaxPoolWindowWithNaNIsNaN) {
  const Shape shape{2, 16, 8, 8};
  Tensor x = Random(shape, 12);
  x.data<float>()[Offset(shape, {0, 0, 0, 0})] = kNaN;  // First of window (0, 0).
  x.data<float>()[Offset(shape, {0, 3, 3, 5})] = kNaN;  // Last of window (1, 2).
  x.data<float>()[Offset(shape, {1, 15, 6, 7})] = kNaN;
  x.data<float>()[Offset(shape, {1, 15, 7, 6})] = kInf;
  x.data<float>()[Offset(shape, {1, 2, 4, 4})] = -kInf;
  for (int c = 0; c < 16; ++c) x.data<float>()[Offset(shape, {1, 7, c / 4, c % 4})] = kNaN;
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 2});
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  const Shape out{2, 16, 4, 4};
  Tensor expected = Tensor::Host(DType::kFloat32, out);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 16; ++c)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 4; ++ow) {
          float best = -kInf;
          for (int64_t k = 0; k < 4; ++k) {
            const float v = x.data<float>()[Offset(shape, {n, c, oh * 2 + k / 2, ow * 2 + k % 2})];
            best = std::isnan(v) || std::isnan(best) ? kNaN : std::max(best, v);
          }
          expected.data<float>()[Offset(out, {n, c, oh, ow})] = best;
        }
  ExpectSameNonFinite((*y)[0], expected);
}

// MaxPool reading a convolution's output in the plan: X comes in oneDNN's
// channel blocks, not row-major, and each NaN still reaches exactly the
// windows that read it. A 1x1 convolution with an identity matrix of 16
// channels passes X through, except that a NaN anywhere in a pixel makes the
// whole pixel NaN (0 x NaN is NaN).
TEST_F(NonFiniteTest, MaxPoolAfterAConvolutionKeepsNaNInBlockedLayouts) {
  constexpr int64_t kChannels = 16;
  OnnxModelBuilder b("conv_pool");
  Tensor w = Tensor::Host(DType::kFloat32, {kChannels, kChannels, 1, 1});
  for (int64_t c = 0; c < kChannels; ++c) w.data<float>()[c * kChannels + c] = 1.0f;
  b.AddInitializer("w", w);
  b.AddNode("Conv", {"x", "w"}, {"c"});
  OnnxModelBuilder::SetInts(b.AddNode("MaxPool", {"c"}, {"y"}), "kernel_shape", {3, 3});
  b.AddInput("x", DType::kFloat32, {kAnyDim, kChannels, 9, 9});
  b.AddOutput("y", DType::kFloat32, {kAnyDim, kChannels, 7, 7});
  std::unique_ptr<ReplicaSet> set =
      testing::MakeCpuReplicaSet(testing::LoadOrDie(b.Serialize(), "conv_pool"), {1});
  const Shape shape{2, kChannels, 9, 9};
  Tensor x = Random(shape, 21);
  for (const std::vector<int64_t>& at :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0}, {0, 5, 4, 4}, {1, 15, 8, 8}, {1, 9, 2, 7}}) {
    x.data<float>()[Offset(shape, at)] = kNaN;
  }
  testing::PredictOutcome y = testing::PredictAndWait(*set, {x});
  ASSERT_TRUE(y.status.ok()) << y.status;
  const Shape out{2, kChannels, 7, 7};
  Tensor expected = Tensor::Host(DType::kFloat32, out);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < kChannels; ++c)
      for (int64_t oh = 0; oh < 7; ++oh)
        for (int64_t ow = 0; ow < 7; ++ow) {
          float best = -kInf;
          for (int64_t k = 0; k < 9; ++k) {
            const int64_t ih = oh + k / 3, iw = ow + k % 3;
            bool pixel_nan = false;
            for (int64_t any = 0; any < kChannels; ++any) {
              pixel_nan |= std::isnan(x.data<float>()[Offset(shape, {n, any, ih, iw})]);
            }
            const float v = pixel_nan ? kNaN : x.data<float>()[Offset(shape, {n, c, ih, iw})];
            best = std::isnan(v) || std::isnan(best) ? kNaN : std::max(best, v);
          }
          expected.data<float>()[Offset(out, {n, c, oh, ow})] = best;
        }
  ExpectSameNonFinite(y.outputs[0], expected);
}

// A row with a NaN or +inf has no meaningful distribution: every entry is
// NaN, as ONNX Runtime gives. -inf is an ordinary zero probability.
TEST_F(NonFiniteTest, SoftmaxRowWithNaNOrInfinityIsNaN) {
  const Tensor x = Floats({5, 4}, {1,    kNaN,  2, 3,  //
                                   1,    2,     3, 4,  //
                                   1,    kInf,  2, 3,  //
                                   1,    -kInf, 2, 3,  //
                                   kInf, kInf,  1, 1});
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<std::vector<Tensor>> y = Run(op, {x}, attributes, 13);
    ASSERT_TRUE(y.ok()) << y.status();
    const float* v = (*y)[0].data<float>();
    for (int64_t row : {0, 2, 4}) {
      for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(v[row * 4 + j])) << row << "," << j;
    }
    for (int64_t row : {1, 3}) {
      for (int64_t j = 0; j < 4; ++j) EXPECT_FALSE(std::isnan(v[row * 4 + j])) << row << "," << j;
    }
    const bool log = std::string(op) == "LogSoftmax";
    EXPECT_EQ(v[3 * 4 + 1], log ? -kInf : 0.0f);
  }
}

// Sums and means carry NaN and infinities as arithmetic does.
TEST_F(NonFiniteTest, AveragePoolingAndReductionsKeepNaN) {
  const Shape shape{2, 16, 4, 4};
  Tensor x = Random(shape, 13);
  x.data<float>()[Offset(shape, {0, 1, 2, 2})] = kNaN;
  x.data<float>()[Offset(shape, {0, 2, 0, 0})] = kInf;
  x.data<float>()[Offset(shape, {1, 3, 3, 3})] = -kInf;
  x.data<float>()[Offset(shape, {1, 4, 0, 0})] = kInf;
  x.data<float>()[Offset(shape, {1, 4, 0, 1})] = -kInf;
  Tensor expected = Tensor::Host(DType::kFloat32, {2, 16, 1, 1});
  for (int64_t i = 0; i < 32; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 16; ++j) sum += x.data<float>()[i * 16 + j];
    expected.data<float>()[i] = static_cast<float>(sum / 16);
  }
  absl::StatusOr<std::vector<Tensor>> y = Run("GlobalAveragePool", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectSameNonFinite((*y)[0], expected);
  Attributes axes;
  axes.Set("axes", std::vector<int64_t>{2, 3});
  y = Run("ReduceMean", {x}, axes, 13);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectSameNonFinite((*y)[0], expected);
}

}  // namespace
}  // namespace replicad
