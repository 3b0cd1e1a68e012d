// The CPU kernels against plain-loop references, for the forms the ONNX
// conformance data does not cover (grouped and dilated Conv, Gemm's C
// broadcasts, MatMul with 1-D and broadcast operands, both-sided broadcasting,
// Softmax before opset 13, ...), plus MakeCpuKernel's errors.
//
// Also: Winograd and direct convolution, both within 1e-5 relative L2 of a double-precision loop
// and not bitwise equal (which shows Winograd ran); kernels that keep working after a later kernel
// grew and moved the slot's shared scratchpad; a Gemm of one row against constant weights (the
// matrix-vector product) in every form of C, with and without Relu; a MatMul with a fused bias and
// GELU whose batch folds into rows.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <list>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/base/status_macros.h"
#include "core/ops/fused_activation.h"
#include "core/ops/op_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class CpuKernelsTest : public CpuKernelTestBase {};

struct ConvParams {
  int64_t group = 1;
  std::array<int64_t, 2> strides{1, 1}, dilations{1, 1}, pads_begin{0, 0}, pads_end{0, 0};
};

Tensor ReferenceConv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvParams& p) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int64_t n = xs[0], c = xs[1], m = ws[0], cg = c / p.group, mg = m / p.group;
  std::array<int64_t, 2> out{};
  for (int i = 0; i < 2; ++i) {
    const int64_t dilated = (ws[2 + i] - 1) * p.dilations[i] + 1;
    out[i] = (xs[2 + i] + p.pads_begin[i] + p.pads_end[i] - dilated) / p.strides[i] + 1;
  }
  Tensor y = Tensor::Host(DType::kFloat32, {n, m, out[0], out[1]});
  for (int64_t in = 0; in < n; ++in)
    for (int64_t om = 0; om < m; ++om)
      for (int64_t oh = 0; oh < out[0]; ++oh)
        for (int64_t ow = 0; ow < out[1]; ++ow) {
          double sum = b ? b->data<float>()[om] : 0.0;
          const int64_t g = om / mg;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t kh = 0; kh < ws[2]; ++kh)
              for (int64_t kw = 0; kw < ws[3]; ++kw) {
                const int64_t ih = oh * p.strides[0] - p.pads_begin[0] + kh * p.dilations[0];
                const int64_t iw = ow * p.strides[1] - p.pads_begin[1] + kw * p.dilations[1];
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                sum += x.data<float>()[Offset(xs, {in, g * cg + ic, ih, iw})] *
                       w.data<float>()[Offset(ws, {om, ic, kh, kw})];
              }
          y.data<float>()[Offset(y.shape(), {in, om, oh, ow})] = static_cast<float>(sum);
        }
  return y;
}

TEST_F(CpuKernelsTest, ConvGroupedDilatedStridedWithBias) {
  const Tensor x = Random({2, 6, 9, 8}, 1);
  const Tensor w = Random({4, 3, 3, 2}, 2);
  const Tensor b = Random({4}, 3);
  Attributes attributes;
  attributes.Set("group", int64_t{2});
  attributes.Set("strides", std::vector<int64_t>{2, 1});
  attributes.Set("dilations", std::vector<int64_t>{2, 3});
  attributes.Set("pads", std::vector<int64_t>{1, 0, 2, 1});
  absl::StatusOr<std::vector<Tensor>> y = Run("Conv", {x, w, b}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ConvParams p;
  p.group = 2;
  p.strides = {2, 1};
  p.dilations = {2, 3};
  p.pads_begin = {1, 0};
  p.pads_end = {2, 1};
  ExpectNear((*y)[0], ReferenceConv(x, w, &b, p));
}

TEST_F(CpuKernelsTest, ConvDepthwiseSameLower) {
  const Tensor x = Random({1, 4, 7, 6}, 4);
  const Tensor w = Random({4, 1, 4, 3}, 5);
  Attributes attributes;
  attributes.Set("group", int64_t{4});
  attributes.Set("auto_pad", std::string("SAME_LOWER"));
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("Conv", {x, w}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // out = ceil(7/2) = 4, ceil(6/2) = 3; total pads 4-1+... = (4-1)*2+4-7 = 3 -> 2 before, 1 after;
  // (3-1)*2+3-6 = 1 -> 1 before (SAME_LOWER puts the odd one first), 0 after.
  ConvParams p;
  p.group = 4;
  p.strides = {2, 2};
  p.pads_begin = {2, 1};
  p.pads_end = {1, 0};
  ExpectNear((*y)[0], ReferenceConv(x, w, nullptr, p));
}

TEST_F(CpuKernelsTest, KernelRebindsBuffersOnEveryRun) {
  const Tensor x1 = Random({1, 2, 5, 5}, 6);
  const Tensor x2 = Random({1, 2, 5, 5}, 7);
  const Tensor w = Random({3, 2, 3, 3}, 8);
  Attributes attributes;
  KernelSpec spec;
  spec.op_type = "Conv";
  spec.attributes = &attributes;
  spec.inputs = {x1.type(), w.type()};
  spec.constant_inputs = {nullptr, nullptr};
  ASSERT_TRUE(FindOp("Conv")->infer(&spec).ok());
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  for (const Tensor* x : {&x1, &x2}) {
    Tensor y = Tensor::Host(DType::kFloat32, spec.outputs[0].shape);
    const void* inputs[] = {x->raw_data(), w.raw_data()};
    void* outputs[] = {y.raw_data()};
    ASSERT_TRUE((*kernel)->Run(RunContext{}, inputs, outputs).ok());
    ExpectNear(y, ReferenceConv(*x, w, nullptr, ConvParams{}));
  }
}

// A Conv with constant weights (the blocked path) and 1-pixel padding, built
// on this fixture's context, with its workspace.
struct BuiltConv {
  std::unique_ptr<Kernel> kernel;
  std::shared_ptr<Buffer> workspace;
  Shape output;

  Tensor Run(const Tensor& x, const Tensor& w) {
    Tensor y = Tensor::Host(DType::kFloat32, output);
    const void* inputs[] = {x.raw_data(), w.raw_data()};
    void* outputs[] = {y.raw_data()};
    EXPECT_TRUE(kernel->Run(RunContext{}, inputs, outputs).ok());
    return y;
  }
};

absl::StatusOr<BuiltConv> BuildPaddedConv(CpuKernelContext& context, const Shape& x,
                                          const Tensor& w, const Attributes& attributes) {
  KernelSpec spec;
  spec.op_type = "Conv";
  spec.attributes = &attributes;
  spec.inputs = {TensorType{DType::kFloat32, x}, w.type()};
  spec.constant_inputs = {nullptr, &w};
  REPLICAD_RETURN_IF_ERROR(FindOp("Conv")->infer(&spec));
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, MakeCpuKernel(spec, context));
  const size_t workspace_bytes = kernel->workspace_bytes();
  BuiltConv built{std::move(kernel), Buffer::AllocateHost(workspace_bytes + 1),
                  spec.outputs[0].shape};
  built.kernel->SetWorkspace(built.workspace->data());
  return built;
}

Attributes PadOne() {
  Attributes attributes;
  attributes.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  return attributes;
}

ConvParams PadOneParams() {
  ConvParams p;
  p.pads_begin = {1, 1};
  p.pads_end = {1, 1};
  return p;
}

// ||actual - expected|| / ||expected||, L2 over all elements.
double RelativeL2(const Tensor& actual, const Tensor& expected) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double e = expected.data<float>()[i];
    diff += (actual.data<float>()[i] - e) * (actual.data<float>()[i] - e);
    norm += e * e;
  }
  return std::sqrt(diff / norm);
}

bool CpuHasWinograd() { return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core; }

// 3x3 stride-1 convolutions run as Winograd (where oneDNN has it) unless the
// slot turns it off. Both algorithms match the double-precision loop within
// 1e-5 relative L2; Winograd's transforms round differently from direct sums,
// so elementwise the two differ in the last bits.
TEST_F(CpuKernelsTest, ConvWinogradAndDirectBothMatchTheReference) {
  const Tensor x = Random({2, 32, 10, 10}, 11);
  const Tensor w = Random({32, 32, 3, 3}, 12);
  const Attributes attributes = PadOne();
  const Tensor expected = ReferenceConv(x, w, nullptr, PadOneParams());
  std::vector<Tensor> results;
  for (bool winograd : {true, false}) {
    context_.winograd = winograd;
    absl::StatusOr<BuiltConv> conv = BuildPaddedConv(context_, x.shape(), w, attributes);
    ASSERT_TRUE(conv.ok()) << conv.status();
    results.push_back(conv->Run(x, w));
    EXPECT_LT(RelativeL2(results.back(), expected), 1e-5) << "winograd=" << winograd;
  }
  if (!CpuHasWinograd()) GTEST_SKIP() << "no AVX-512: oneDNN 2.x has no f32 Winograd here";
  EXPECT_GT(RelativeL2(results[0], results[1]), 0.0) << "Winograd did not run";
}

// Every primitive of a slot shares one scratchpad that grows as bigger
// kernels are made; a kernel made earlier must follow it when it moves.
// (Relative L2 within 1e-5, as above: these may run as Winograd.)
TEST_F(CpuKernelsTest, KernelsFollowTheSharedScratchpadWhenItGrows) {
  const Tensor w = Random({32, 32, 3, 3}, 13);
  const Attributes attributes = PadOne();
  const Tensor small = Random({1, 32, 8, 8}, 14);
  const Tensor large = Random({4, 32, 24, 24}, 15);
  absl::StatusOr<BuiltConv> first = BuildPaddedConv(context_, small.shape(), w, attributes);
  ASSERT_TRUE(first.ok()) << first.status();
  const size_t first_size = context_.scratchpad.size();
  const void* first_buffer = context_.scratchpad.data();
  EXPECT_LT(RelativeL2(first->Run(small, w), ReferenceConv(small, w, nullptr, PadOneParams())),
            1e-5);

  absl::StatusOr<BuiltConv> second = BuildPaddedConv(context_, large.shape(), w, attributes);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_LT(RelativeL2(second->Run(large, w), ReferenceConv(large, w, nullptr, PadOneParams())),
            1e-5);
  EXPECT_LT(RelativeL2(first->Run(small, w), ReferenceConv(small, w, nullptr, PadOneParams())),
            1e-5);
  if (first_size == 0) GTEST_SKIP() << "oneDNN's convolution here needs no scratchpad";
  EXPECT_GT(context_.scratchpad.size(), first_size);
  EXPECT_NE(context_.scratchpad.data(), first_buffer);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(context_.scratchpad.data()) % 64, 0u);
}

TEST_F(CpuKernelsTest, MaxPoolCeilModeDilatedPadded) {
  const Tensor x = Random({2, 3, 8, 7}, 9);
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{3, 2});
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  attributes.Set("dilations", std::vector<int64_t>{1, 2});
  attributes.Set("pads", std::vector<int64_t>{1, 0, 0, 1});
  attributes.Set("ceil_mode", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // H: (8 + 1 - 3) / 2 + 1 = 4 exactly; W: dilated kernel 3, (7 + 1 - 3) / 2 = 2.5 -> 3 + 1 = 4.
  const Shape expected_shape{2, 3, 4, 4};
  ASSERT_EQ((*y)[0].shape(), expected_shape);
  Tensor expected = Tensor::Host(DType::kFloat32, expected_shape);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 4; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw) {
              const int64_t ih = oh * 2 - 1 + kh;
              const int64_t iw = ow * 2 + kw * 2;
              if (ih < 0 || ih >= 8 || iw < 0 || iw >= 7) continue;
              best = std::max(best, x.data<float>()[Offset(x.shape(), {n, c, ih, iw})]);
            }
          expected.data<float>()[Offset(expected_shape, {n, c, oh, ow})] = best;
        }
  ExpectNear((*y)[0], expected);
}

TEST_F(CpuKernelsTest, GlobalAveragePoolRank5) {
  const Tensor x = Random({2, 3, 2, 3, 4}, 10);
  absl::StatusOr<std::vector<Tensor>> y = Run("GlobalAveragePool", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor expected = Tensor::Host(DType::kFloat32, {2, 3, 1, 1, 1});
  for (int64_t i = 0; i < 6; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 24; ++j) sum += x.data<float>()[i * 24 + j];
    expected.data<float>()[i] = static_cast<float>(sum / 24);
  }
  ExpectNear((*y)[0], expected);
}

TEST_F(CpuKernelsTest, GlobalAveragePoolOfUnitSpatialDimsIsTheInput) {
  const Tensor x = Random({2, 3, 1, 1}, 34);
  absl::StatusOr<std::vector<Tensor>> y = Run("GlobalAveragePool", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], x);
}

// alpha * A' B' + beta * C with C broadcast from c_shape.
Tensor ReferenceGemm(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb,
                     float alpha, float beta) {
  const int64_t m = ta ? a.shape()[1] : a.shape()[0];
  const int64_t k = ta ? a.shape()[0] : a.shape()[1];
  const int64_t n = tb ? b.shape()[0] : b.shape()[1];
  Tensor y = Tensor::Host(DType::kFloat32, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) {
        sum += a.data<float>()[ta ? l * m + i : i * k + l] *
               b.data<float>()[tb ? j * k + l : l * n + j];
      }
      double value = alpha * sum;
      if (c != nullptr) {
        Shape cs = c->shape();
        while (cs.size() < 2) cs.insert(cs.begin(), 1);
        value += beta * c->data<float>()[(cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j)];
      }
      y.data<float>()[i * n + j] = static_cast<float>(value);
    }
  return y;
}

TEST_F(CpuKernelsTest, GemmTransposedScaledWithBroadcastC) {
  const Tensor a = Random({5, 3}, 11);  // transA: M = 3, K = 5.
  const Tensor b = Random({4, 5}, 12);  // transB: N = 4.
  for (const Shape& c_shape : {Shape{}, Shape{4}, Shape{3, 1}, Shape{1, 4}, Shape{3, 4}}) {
    const Tensor c = Random(c_shape, 13);
    Attributes attributes;
    attributes.Set("transA", int64_t{1});
    attributes.Set("transB", int64_t{1});
    attributes.Set("alpha", 0.5f);
    attributes.Set("beta", -2.0f);
    absl::StatusOr<std::vector<Tensor>> y = Run("Gemm", {a, b, c}, attributes);
    ASSERT_TRUE(y.ok()) << y.status();
    SCOPED_TRACE(ShapeToString(c_shape));
    ExpectNear((*y)[0], ReferenceGemm(a, b, &c, true, true, 0.5f, -2.0f));
  }
}

TEST_F(CpuKernelsTest, GemmIgnoresCWhenBetaIsZero) {
  const Tensor a = Random({2, 3}, 14);
  const Tensor b = Random({3, 4}, 15);
  Tensor c = Tensor::Host(DType::kFloat32, {2, 4});
  for (int64_t i = 0; i < 8; ++i) c.data<float>()[i] = std::nanf("");
  Attributes attributes;
  attributes.Set("beta", 0.0f);
  absl::StatusOr<std::vector<Tensor>> y = Run("Gemm", {a, b, c}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], ReferenceGemm(a, b, nullptr, false, false, 1.0f, 0.0f));
}

// Batched numpy matmul of operands already shaped [batch..., M, K] and
// [batch..., K, N] with equal ranks; batch dims of 1 broadcast.
Tensor ReferenceBatchedMatMul(const Tensor& a, const Shape& as, const Tensor& b, const Shape& bs,
                              const Shape& out_shape) {
  const size_t r = as.size();
  const int64_t m = as[r - 2], k = as[r - 1], n = bs[r - 1];
  Shape batch(out_shape.begin(), out_shape.end());
  batch.resize(r - 2);
  Tensor y = Tensor::Host(DType::kFloat32, out_shape);
  const int64_t batches = NumElements(batch);
  for (int64_t bi = 0; bi < batches; ++bi) {
    std::vector<int64_t> index(r - 2);
    int64_t rest = bi;
    for (int d = static_cast<int>(r) - 3; d >= 0; --d) {
      index[d] = rest % batch[d];
      rest /= batch[d];
    }
    int64_t a_off = 0, b_off = 0;
    for (size_t d = 0; d + 2 < r; ++d) {
      a_off = a_off * as[d] + (as[d] == 1 ? 0 : index[d]);
      b_off = b_off * bs[d] + (bs[d] == 1 ? 0 : index[d]);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l) {
          sum += a.data<float>()[a_off * m * k + i * k + l] *
                 b.data<float>()[b_off * k * n + l * n + j];
        }
        y.data<float>()[bi * m * n + i * n + j] = static_cast<float>(sum);
      }
  }
  return y;
}

// A constant B (a classifier's weights) is reordered once into the layout the
// matmul picks (blocked for these sizes); B read transposed or not, with C.
TEST_F(CpuKernelsTest, GemmWithAConstantBInEveryTransposition) {
  const int64_t m = 3, k = 70, n = 130;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, 21);
      const Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, 22);
      const Tensor c = Random({n}, 23);
      Attributes attributes;
      attributes.Set("transA", int64_t{ta});
      attributes.Set("transB", int64_t{tb});
      attributes.Set("alpha", 0.5f);
      attributes.Set("beta", 1.5f);
      absl::StatusOr<std::vector<Tensor>> y =
          Run("Gemm", {a, b, c}, attributes, 17, /*constants=*/{1});
      ASSERT_TRUE(y.ok()) << y.status();
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      ExpectNear((*y)[0], ReferenceGemm(a, b, &c, ta, tb, 0.5f, 1.5f));
    }
  }
}

// One row against constant [N, K] weights (a classifier at batch 1) runs as
// GemvRows: K with and without a 16-float tail, N not a multiple of 4, A
// transposed or not, every form of C, and a fused Relu.
TEST_F(CpuKernelsTest, GemmOfOneRowAgainstConstantWeights) {
  for (const int64_t k : {64, 70}) {
    const int64_t n = 13;
    const Tensor b = Random({n, k}, 26);
    for (const bool ta : {false, true}) {
      const Tensor a = Random(ta ? Shape{k, 1} : Shape{1, k}, 27);
      for (const Shape& c_shape : {Shape{}, Shape{n}, Shape{1, n}}) {
        for (const bool relu : {false, true}) {
          const Tensor c = Random(c_shape, 28);
          Attributes attributes;
          attributes.Set("transA", int64_t{ta});
          attributes.Set("transB", int64_t{1});
          attributes.Set("alpha", 0.5f);
          attributes.Set("beta", -1.5f);
          if (relu) WriteFusedActivation(FusedActivation{"Relu", 0, 0}, &attributes);
          absl::StatusOr<std::vector<Tensor>> y =
              Run("Gemm", {a, b, c}, attributes, 17, /*constants=*/{1});
          ASSERT_TRUE(y.ok()) << y.status();
          SCOPED_TRACE(::testing::Message() << "K " << k << " transA " << ta << " C "
                                            << ShapeToString(c_shape) << " relu " << relu);
          Tensor expected = ReferenceGemm(a, b, &c, ta, true, 0.5f, -1.5f);
          for (int64_t j = 0; relu && j < n; ++j) {
            expected.data<float>()[j] = std::max(expected.data<float>()[j], 0.0f);
          }
          ExpectNear((*y)[0], expected);
        }
      }
    }
  }
}

TEST_F(CpuKernelsTest, MatMulWithAConstantB) {
  const Tensor a = Random({2, 3, 70}, 24);
  const Tensor shared = Random({70, 130}, 25);
  absl::StatusOr<std::vector<Tensor>> y = Run("MatMul", {a, shared}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], ReferenceBatchedMatMul(a, {2, 3, 70}, shared, {1, 70, 130}, {2, 3, 130}));

  const Tensor per_batch = Random({2, 70, 33}, 26);
  y = Run("MatMul", {a, per_batch}, Attributes(), 17, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], ReferenceBatchedMatMul(a, {2, 3, 70}, per_batch, {2, 70, 33}, {2, 3, 33}));
}

// A linear layer as the optimizer leaves it (convnext's): a MatMul of a
// batched A against constant [K, N] weights with a fused bias and GELU; the
// batch folds into rows.
TEST_F(CpuKernelsTest, MatMulWithFusedBiasAndGelu) {
  const Tensor a = Random({1, 3, 5, 70}, 29);
  const Tensor w = Random({70, 40}, 30);
  const Tensor bias = Random({40}, 31);
  Attributes attributes;
  attributes.Set(kFusedBias, int64_t{1});
  WriteFusedActivation(FusedActivation{"Gelu", 0, 0}, &attributes);
  absl::StatusOr<std::vector<Tensor>> y = Run("MatMul", {a, w, bias}, attributes, 17, {1, 2});
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor expected = ReferenceBatchedMatMul(a, {1, 3, 5, 70}, w, {1, 1, 70, 40}, {1, 3, 5, 40});
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double v = expected.data<float>()[i] + bias.data<float>()[i % 40];
    expected.data<float>()[i] = static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
  }
  ExpectNear((*y)[0], expected);
}

TEST_F(CpuKernelsTest, MatMulBroadcastBatches) {
  const Tensor a = Random({2, 1, 3, 4}, 16);
  const Tensor b = Random({3, 4, 5}, 17);
  absl::StatusOr<std::vector<Tensor>> y = Run("MatMul", {a, b}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], ReferenceBatchedMatMul(a, {2, 1, 3, 4}, b, {1, 3, 4, 5}, {2, 3, 3, 5}));
}

TEST_F(CpuKernelsTest, MatMulOneDimensionalOperands) {
  const Tensor v = Random({4}, 18);
  const Tensor b = Random({2, 4, 3}, 19);
  absl::StatusOr<std::vector<Tensor>> left = Run("MatMul", {v, b}, Attributes());
  ASSERT_TRUE(left.ok()) << left.status();
  Tensor expected = ReferenceBatchedMatMul(v, {1, 1, 4}, b, {2, 4, 3}, {2, 1, 3});
  ExpectNear((*left)[0], *Tensor::Create(DType::kFloat32, {2, 3}, expected.buffer()));

  const Tensor a = Random({2, 3, 4}, 20);
  absl::StatusOr<std::vector<Tensor>> right = Run("MatMul", {a, v}, Attributes());
  ASSERT_TRUE(right.ok()) << right.status();
  expected = ReferenceBatchedMatMul(a, {2, 3, 4}, v, {1, 4, 1}, {2, 3, 1});
  ExpectNear((*right)[0], *Tensor::Create(DType::kFloat32, {2, 3}, expected.buffer()));

  absl::StatusOr<std::vector<Tensor>> dot = Run("MatMul", {v, v}, Attributes());
  ASSERT_TRUE(dot.ok()) << dot.status();
  expected = ReferenceBatchedMatMul(v, {1, 4}, v, {4, 1}, {1, 1});
  ExpectNear((*dot)[0], *Tensor::Create(DType::kFloat32, {}, expected.buffer()));
}

// a op b with numpy broadcasting, for any op and ranks.
template <typename T, typename Op>
Tensor ReferenceBroadcast(const Tensor& a, const Tensor& b, Op op) {
  const size_t r = std::max(a.rank(), b.rank());
  Shape as = a.shape(), bs = b.shape();
  while (as.size() < r) as.insert(as.begin(), 1);
  while (bs.size() < r) bs.insert(bs.begin(), 1);
  Shape out(r);
  for (size_t d = 0; d < r; ++d) out[d] = std::max(as[d], bs[d]);
  Tensor y = Tensor::Host(a.dtype(), out);
  std::vector<int64_t> ai(r), bi(r);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    int64_t rest = i;
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      const int64_t index = rest % out[d];
      rest /= out[d];
      ai[d] = as[d] == 1 ? 0 : index;
      bi[d] = bs[d] == 1 ? 0 : index;
    }
    y.data<T>()[i] = op(a.data<T>()[Offset(as, ai)], b.data<T>()[Offset(bs, bi)]);
  }
  return y;
}

// A + B or A * B with numpy broadcasting.
template <typename T>
Tensor ReferenceBinary(const Tensor& a, const Tensor& b, bool add) {
  return add ? ReferenceBroadcast<T>(a, b, std::plus<T>())
             : ReferenceBroadcast<T>(a, b, std::multiplies<T>());
}

TEST_F(CpuKernelsTest, AddAndMulBroadcastEitherOrBothOperands) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {4}}, {{3, 1}, {2, 3, 5}}, {{3, 1, 5}, {4, 1}}, {{}, {2, 2}}, {{2, 2}, {2, 2}}};
  uint32_t seed = 21;
  for (const auto& [a_shape, b_shape] : cases) {
    const Tensor a = Random(a_shape, seed++);
    const Tensor b = Random(b_shape, seed++);
    for (const char* op : {"Add", "Mul"}) {
      SCOPED_TRACE(std::string(op) + " " + ShapeToString(a_shape) + " " + ShapeToString(b_shape));
      absl::StatusOr<std::vector<Tensor>> y = Run(op, {a, b}, Attributes());
      ASSERT_TRUE(y.ok()) << y.status();
      ExpectNear((*y)[0], ReferenceBinary<float>(a, b, std::string(op) == "Add"));
    }
  }
}

TEST_F(CpuKernelsTest, Int64AddAndMul) {
  const Tensor a = Int64s({2, 1, 3}, {1, -2, 3, 4, 5, -6});
  const Tensor b = Int64s({2, 1}, {10000000000, 7});
  for (const char* op : {"Add", "Mul"}) {
    absl::StatusOr<std::vector<Tensor>> y = Run(op, {a, b}, Attributes());
    ASSERT_TRUE(y.ok()) << y.status();
    const Tensor expected = ReferenceBinary<int64_t>(a, b, std::string(op) == "Add");
    ASSERT_EQ((*y)[0].type(), expected.type());
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      EXPECT_EQ((*y)[0].data<int64_t>()[i], expected.data<int64_t>()[i]) << op << " " << i;
    }
  }
}

TEST_F(CpuKernelsTest, EmptyOutputRuns) {
  const Tensor a = Random({2, 0}, 30);
  const Tensor b = Random({1}, 31);
  absl::StatusOr<std::vector<Tensor>> y = Run("Add", {a, b}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].shape(), (Shape{2, 0}));
}

// Softmax over `size` consecutive groups of `stride`-spaced elements.
Tensor ReferenceSoftmax(const Tensor& x, int64_t outer, int64_t size, int64_t inner) {
  Tensor y = Tensor::Host(DType::kFloat32, x.shape());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* in = x.data<float>() + o * size * inner + i;
      float* out = y.data<float>() + o * size * inner + i;
      double max = in[0], sum = 0;
      for (int64_t s = 0; s < size; ++s) max = std::max<double>(max, in[s * inner]);
      for (int64_t s = 0; s < size; ++s) sum += std::exp(in[s * inner] - max);
      for (int64_t s = 0; s < size; ++s) out[s * inner] = std::exp(in[s * inner] - max) / sum;
    }
  return y;
}

TEST_F(CpuKernelsTest, SoftmaxCoercesTo2dBeforeOpset13) {
  const Tensor x = Random({2, 3, 4}, 32);
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> old = Run("Softmax", {x}, attributes, /*opset=*/11);
  ASSERT_TRUE(old.ok()) << old.status();
  ExpectNear((*old)[0], ReferenceSoftmax(x, 2, 12, 1));
  absl::StatusOr<std::vector<Tensor>> current = Run("Softmax", {x}, attributes, /*opset=*/13);
  ASSERT_TRUE(current.ok()) << current.status();
  ExpectNear((*current)[0], ReferenceSoftmax(x, 2, 3, 4));
}

TEST_F(CpuKernelsTest, ReluAndCopies) {
  const Tensor x = Random({3, 4}, 33);
  absl::StatusOr<std::vector<Tensor>> relu = Run("Relu", {x}, Attributes());
  ASSERT_TRUE(relu.ok()) << relu.status();
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ((*relu)[0].data<float>()[i], std::max(0.0f, x.data<float>()[i]));
  }
  const Tensor ints = Int64s({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor shape = Int64s({3}, {3, 1, -1});
  absl::StatusOr<std::vector<Tensor>> reshaped =
      Run("Reshape", {ints, shape}, Attributes(), 17, /*constants=*/{1});
  ASSERT_TRUE(reshaped.ok()) << reshaped.status();
  EXPECT_EQ((*reshaped)[0].shape(), (Shape{3, 1, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ((*reshaped)[0].data<int64_t>()[i], i + 1);
}

TEST_F(CpuKernelsTest, ConstantWritesItsValue) {
  Attributes attributes;
  attributes.Set("value_ints", std::vector<int64_t>{7, -1, 3});
  absl::StatusOr<std::vector<Tensor>> y = Run("Constant", {}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ((*y)[0].type(), (TensorType{DType::kInt64, {3}}));
  EXPECT_EQ((*y)[0].data<int64_t>()[0], 7);
  EXPECT_EQ((*y)[0].data<int64_t>()[1], -1);
  EXPECT_EQ((*y)[0].data<int64_t>()[2], 3);
}

TEST_F(CpuKernelsTest, UnknownOpIsUnimplementedNamingOpAndNode) {
  Attributes attributes;
  KernelSpec spec;
  spec.op_type = "NoSuchOp";
  spec.node_name = "t7";
  spec.attributes = &attributes;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(kernel.status().message()),
              AllOf(HasSubstr("NoSuchOp node 't7'"), HasSubstr("no kernel for op 'NoSuchOp'")));
}

TEST_F(CpuKernelsTest, StaleOutputsAndMalformedSpecsAreRejected) {
  Attributes attributes;
  KernelSpec spec;
  spec.op_type = "Relu";
  spec.node_name = "r1";
  spec.attributes = &attributes;
  spec.inputs = {TensorType{DType::kFloat32, {2, 3}}};
  spec.constant_inputs = {nullptr};
  spec.outputs = {TensorType{DType::kFloat32, {3, 2}}};
  absl::StatusOr<std::unique_ptr<Kernel>> stale = MakeCpuKernel(spec, context_);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stale.status().message()),
              AllOf(HasSubstr("Relu node 'r1'"), HasSubstr("float32[2,3]"),
                    HasSubstr("received [float32[3,2]]")));

  spec.op_type = "Conv";
  spec.inputs = {TensorType{DType::kFloat32, {1, 3, 5, 5}},
                 TensorType{DType::kFloat32, {2, 2, 3, 3}}};
  spec.constant_inputs = {nullptr, nullptr};
  absl::StatusOr<std::unique_ptr<Kernel>> malformed = MakeCpuKernel(spec, context_);
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(malformed.status().message()), HasSubstr("must have 3 input channels"));
}

// Element-wise math, normalization and reductions.

Tensor Floats(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

// Element by element within ExpectNear's tolerance; NaN matches only NaN and
// an infinity only itself.
void ExpectNearOrBothNaN(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.type(), expected.type());
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float a = actual.data<float>()[i];
    const float e = expected.data<float>()[i];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << "element " << i << " is " << a << ", expected NaN";
      continue;
    }
    if (std::isinf(e)) {
      EXPECT_EQ(a, e) << "element " << i;
      continue;
    }
    EXPECT_NEAR(a, e, 1e-5 + 1e-4 * std::fabs(e)) << "element " << i;
  }
}

void ExpectInt64s(const Tensor& actual, const Shape& shape, const std::vector<int64_t>& expected) {
  ASSERT_EQ(actual.type(), (TensorType{DType::kInt64, shape}));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual.data<int64_t>()[i], expected[i]) << "element " << i;
  }
}

TEST_F(CpuKernelsTest, SubAndDivBroadcastEitherOperandInOrder) {
  // A broadcast against a full B cannot swap into oneDNN's src0 for ops that
  // do not commute; these shapes take both the loop and the primitive.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {2, 3, 4}}, {{2, 3, 4}, {3, 1}}, {{3, 1}, {2, 1, 4}}, {{}, {2, 2}}, {{2, 2}, {2, 2}}};
  uint32_t seed = 100;
  for (const auto& [a_shape, b_shape] : cases) {
    const Tensor a = Random(a_shape, seed++);
    Tensor b = Random(b_shape, seed++);
    for (int64_t i = 0; i < b.num_elements(); ++i) b.data<float>()[i] += 3.0f;  // Away from 0.
    SCOPED_TRACE(ShapeToString(a_shape) + " " + ShapeToString(b_shape));
    absl::StatusOr<std::vector<Tensor>> sub = Run("Sub", {a, b}, Attributes());
    ASSERT_TRUE(sub.ok()) << sub.status();
    ExpectNear((*sub)[0], ReferenceBroadcast<float>(a, b, std::minus<float>()));
    absl::StatusOr<std::vector<Tensor>> div = Run("Div", {a, b}, Attributes());
    ASSERT_TRUE(div.ok()) << div.status();
    ExpectNear((*div)[0], ReferenceBroadcast<float>(a, b, std::divides<float>()));
  }
}

TEST_F(CpuKernelsTest, Int64DivTruncatesAndNeverTraps) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const Tensor a = Int64s({6}, {7, -7, 7, -7, 5, kMin});
  const Tensor b = Int64s({6}, {2, 2, -2, -2, 0, -1});
  absl::StatusOr<std::vector<Tensor>> div = Run("Div", {a, b}, Attributes());
  ASSERT_TRUE(div.ok()) << div.status();
  ExpectInt64s((*div)[0], {6}, {3, -3, -3, 3, 0, kMin});
  absl::StatusOr<std::vector<Tensor>> sub = Run("Sub", {Int64s({2, 1}, {10, 20}), b}, Attributes());
  ASSERT_TRUE(sub.ok()) << sub.status();
  ExpectInt64s((*sub)[0], {2, 6}, {8, 8, 12, 12, 10, 11, 18, 18, 22, 22, 20, 21});
}

TEST_F(CpuKernelsTest, PowWithConstantScalarExponentMatchesTheLoop) {
  const Tensor x = Floats({5}, {-2.0f, -0.5f, 0.0f, 1.5f, 3.0f});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, std::vector<float>>> cases = {
      {2.0f, {4.0f, 0.25f, 0.0f, 2.25f, 9.0f}},
      {3.0f, {-8.0f, -0.125f, 0.0f, 3.375f, 27.0f}},
      {0.5f, {nan, nan, 0.0f, std::sqrt(1.5f), std::sqrt(3.0f)}},
      {-1.0f, {-0.5f, -2.0f, std::numeric_limits<float>::infinity(), 1.0f / 1.5f, 1.0f / 3.0f}}};
  for (const auto& [exponent, expected] : cases) {
    SCOPED_TRACE(exponent);
    const Tensor y = Floats({}, {exponent});
    for (std::vector<int> constants : {std::vector<int>{}, std::vector<int>{1}}) {
      absl::StatusOr<std::vector<Tensor>> z =
          Run("Pow", {x, y}, Attributes(), 17, std::move(constants));
      ASSERT_TRUE(z.ok()) << z.status();
      ExpectNearOrBothNaN((*z)[0], Floats({5}, expected));
    }
  }
  // An int64 exponent, constant or not, is the same power.
  const Tensor two = Int64s({1}, {2});
  for (std::vector<int> constants : {std::vector<int>{}, std::vector<int>{1}}) {
    absl::StatusOr<std::vector<Tensor>> z =
        Run("Pow", {x, two}, Attributes(), 17, std::move(constants));
    ASSERT_TRUE(z.ok()) << z.status();
    ExpectNear((*z)[0], Floats({5}, {4.0f, 0.25f, 0.0f, 2.25f, 9.0f}));
  }
}

TEST_F(CpuKernelsTest, Int64PowIsExactAndTruncates) {
  const Tensor x = Int64s({6}, {2, -3, 5, 1, -1, 0});
  const Tensor y = Int64s({6}, {10, 3, -1, -3, -3, -1});
  absl::StatusOr<std::vector<Tensor>> z = Run("Pow", {x, y}, Attributes());
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectInt64s((*z)[0], {6}, {1024, -27, 0, 1, -1, 0});
  // 3^39 needs more than a double's 53-bit mantissa but fits int64.
  z = Run("Pow", {Int64s({}, {3}), Int64s({}, {39})}, Attributes());
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectInt64s((*z)[0], {}, {4052555153018976267});
  // A float exponent truncates; NaN (a negative base to a fraction) gives 0.
  z = Run("Pow", {Int64s({3}, {2, 9, -8}), Floats({3}, {0.5f, 0.5f, 1.0f / 3})}, Attributes());
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectInt64s((*z)[0], {3}, {1, 3, 0});
}

TEST_F(CpuKernelsTest, ClipWithOneBoundAtRunTimeOrConstant) {
  const Tensor x = Floats({2, 3}, {-3.0f, -0.5f, 0.0f, 0.5f, 2.0f, 7.0f});
  const Tensor max = Floats({}, {0.25f});
  const Tensor min = Floats({1}, {-1.0f});
  for (bool constant : {false, true}) {
    SCOPED_TRACE(constant ? "constant" : "run time");
    const std::vector<int> both = constant ? std::vector<int>{1, 2} : std::vector<int>{};
    absl::StatusOr<std::vector<Tensor>> only_max = Run("Clip", {x, std::nullopt, max}, Attributes(),
                                                       13, constant ? std::vector<int>{2} : both);
    ASSERT_TRUE(only_max.ok()) << only_max.status();
    ExpectNear((*only_max)[0], Floats({2, 3}, {-3.0f, -0.5f, 0.0f, 0.25f, 0.25f, 0.25f}));
    absl::StatusOr<std::vector<Tensor>> only_min =
        Run("Clip", {x, min}, Attributes(), 13, constant ? std::vector<int>{1} : both);
    ASSERT_TRUE(only_min.ok()) << only_min.status();
    ExpectNear((*only_min)[0], Floats({2, 3}, {-1.0f, -0.5f, 0.0f, 0.5f, 2.0f, 7.0f}));
    // ReLU6.
    absl::StatusOr<std::vector<Tensor>> relu6 =
        Run("Clip", {x, Floats({}, {0.0f}), Floats({}, {6.0f})}, Attributes(), 13, both);
    ASSERT_TRUE(relu6.ok()) << relu6.status();
    ExpectNear((*relu6)[0], Floats({2, 3}, {0.0f, 0.0f, 0.0f, 0.5f, 2.0f, 6.0f}));
    // min above max: numpy.clip gives max everywhere.
    absl::StatusOr<std::vector<Tensor>> crossed =
        Run("Clip", {x, Floats({}, {1.0f}), Floats({}, {0.0f})}, Attributes(), 13, both);
    ASSERT_TRUE(crossed.ok()) << crossed.status();
    ExpectNear((*crossed)[0], Floats({2, 3}, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
  }
  absl::StatusOr<std::vector<Tensor>> ints =
      Run("Clip", {Int64s({4}, {-5, 0, 5, 9}), Int64s({}, {-2}), Int64s({}, {6})}, Attributes(), 13,
          {1});
  ASSERT_TRUE(ints.ok()) << ints.status();
  ExpectInt64s((*ints)[0], {4}, {-2, 0, 5, 6});
}

TEST_F(CpuKernelsTest, ClipReadsRunTimeBoundsOnEveryRunAndKeepsNaN) {
  Attributes attributes;
  KernelSpec spec;
  spec.op_type = "Clip";
  spec.opset = 13;
  spec.attributes = &attributes;
  spec.inputs = {TensorType{DType::kFloat32, {3}}, TensorType{DType::kFloat32, {}},
                 TensorType{DType::kFloat32, {}}};
  spec.constant_inputs = {nullptr, nullptr, nullptr};
  ASSERT_TRUE(FindOp("Clip")->infer(&spec).ok());
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const Tensor x = Floats({3}, {-2.0f, std::nanf(""), 2.0f});
  for (float bound : {1.0f, 0.5f}) {
    const Tensor low = Floats({}, {-bound});
    const Tensor high = Floats({}, {bound});
    Tensor y = Tensor::Host(DType::kFloat32, {3});
    const void* inputs[] = {x.raw_data(), low.raw_data(), high.raw_data()};
    void* outputs[] = {y.raw_data()};
    ASSERT_TRUE((*kernel)->Run(RunContext{}, inputs, outputs).ok());
    EXPECT_EQ(y.data<float>()[0], -bound);
    EXPECT_TRUE(std::isnan(y.data<float>()[1]));
    EXPECT_EQ(y.data<float>()[2], bound);
  }
}

TEST_F(CpuKernelsTest, ActivationAttributesAndErfOverManyElements) {
  const Tensor x = Floats({5}, {-4.0f, -1.0f, 0.0f, 1.0f, 3.0f});
  Attributes hard_sigmoid;
  hard_sigmoid.Set("alpha", 0.25f);
  hard_sigmoid.Set("beta", 0.4f);
  absl::StatusOr<std::vector<Tensor>> y = Run("HardSigmoid", {x}, hard_sigmoid);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Floats({5}, {0.0f, 0.15f, 0.4f, 0.65f, 1.0f}));
  Attributes leaky;
  leaky.Set("alpha", 0.5f);
  y = Run("LeakyRelu", {x}, leaky);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Floats({5}, {-2.0f, -0.5f, 0.0f, 1.0f, 3.0f}));
  y = Run("HardSwish", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], Floats({5}, {0.0f, -1.0f / 3, 0.0f, 2.0f / 3, 3.0f}));

  // Past the size at which the loop goes parallel.
  const Tensor big = Random({2, 100, 100}, 40);
  y = Run("Erf", {big}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor expected = Tensor::Host(DType::kFloat32, big.shape());
  for (int64_t i = 0; i < big.num_elements(); ++i) {
    expected.data<float>()[i] = std::erf(big.data<float>()[i]);
  }
  ExpectNear((*y)[0], expected);
}

TEST_F(CpuKernelsTest, LogSoftmaxCoercesTo2dBeforeOpset13) {
  const Tensor x = Random({2, 3, 4}, 41);
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  for (const auto& [opset, size, inner] : {std::tuple{11, 12, 1}, std::tuple{13, 3, 4}}) {
    absl::StatusOr<std::vector<Tensor>> y = Run("LogSoftmax", {x}, attributes, opset);
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expected = ReferenceSoftmax(x, 2, size, inner);
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      expected.data<float>()[i] = std::log(expected.data<float>()[i]);
    }
    ExpectNear((*y)[0], expected);
  }
}

TEST_F(CpuKernelsTest, DropoutInInferenceIsTheIdentity) {
  const Tensor x = Random({3, 4}, 42);
  Attributes ratio;
  ratio.Set("ratio", 0.3f);
  absl::StatusOr<std::vector<Tensor>> old = Run("Dropout", {x}, ratio, /*opset=*/11);
  ASSERT_TRUE(old.ok()) << old.status();
  ExpectNear((*old)[0], x);
  absl::StatusOr<std::vector<Tensor>> current =
      Run("Dropout", {x, Floats({}, {0.9f})}, Attributes(), /*opset=*/13);
  ASSERT_TRUE(current.ok()) << current.status();
  ExpectNear((*current)[0], x);
}

// Inference batch normalization of x viewed as [N, C, spatial].
Tensor ReferenceBatchNorm(const Tensor& x, int64_t channels, const Tensor& scale,
                          const Tensor& bias, const Tensor& mean, const Tensor& var,
                          float epsilon) {
  Tensor y = Tensor::Host(DType::kFloat32, x.shape());
  const int64_t batch = x.rank() == 0 ? 1 : x.shape()[0];
  const int64_t spatial = x.num_elements() / batch / channels;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t s = 0; s < spatial; ++s) {
        const int64_t i = (n * channels + c) * spatial + s;
        const double normalized = (x.data<float>()[i] - mean.data<float>()[c]) /
                                  std::sqrt(static_cast<double>(var.data<float>()[c]) + epsilon);
        y.data<float>()[i] =
            static_cast<float>(normalized * scale.data<float>()[c] + bias.data<float>()[c]);
      }
  return y;
}

TEST_F(CpuKernelsTest, BatchNormalizationWithLargeEpsilonAnyRank) {
  uint32_t seed = 50;
  for (const Shape& shape : {Shape{2, 3, 2, 5}, Shape{4, 3}, Shape{2, 3, 2, 1, 3}, Shape{5}}) {
    SCOPED_TRACE(ShapeToString(shape));
    const int64_t channels = shape.size() >= 2 ? shape[1] : 1;
    const Tensor x = Random(shape, seed++);
    const Tensor scale = Random({channels}, seed++);
    const Tensor bias = Random({channels}, seed++);
    const Tensor mean = Random({channels}, seed++);
    Tensor var = Random({channels}, seed++);
    for (int64_t c = 0; c < channels; ++c) var.data<float>()[c] = std::fabs(var.data<float>()[c]);
    Attributes attributes;
    attributes.Set("epsilon", 0.75f);
    absl::StatusOr<std::vector<Tensor>> y =
        Run("BatchNormalization", {x, scale, bias, mean, var}, attributes, 15, {1, 2, 3, 4});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectNear((*y)[0], ReferenceBatchNorm(x, channels, scale, bias, mean, var, 0.75f));
  }
}

TEST_F(CpuKernelsTest, ReduceMeanWithoutKeepdimsOverSeveralAxes) {
  const Tensor x = Random({2, 3, 4}, 60);
  Attributes attributes;
  attributes.Set("axes", std::vector<int64_t>{0, -1});
  attributes.Set("keepdims", int64_t{0});
  absl::StatusOr<std::vector<Tensor>> y = Run("ReduceMean", {x}, attributes, 13);
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor expected = Tensor::Host(DType::kFloat32, {3});
  for (int64_t j = 0; j < 3; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) sum += x.data<float>()[Offset({2, 3, 4}, {i, j, k})];
    expected.data<float>()[j] = static_cast<float>(sum / 8);
  }
  ExpectNear((*y)[0], expected);
}

TEST_F(CpuKernelsTest, ReduceSumAxesInputAndEmptyAxes) {
  const Tensor x = Random({2, 3, 2}, 61);
  // No axes input: every axis, unless noop_with_empty_axes.
  absl::StatusOr<std::vector<Tensor>> all = Run("ReduceSum", {x}, Attributes(), 13);
  ASSERT_TRUE(all.ok()) << all.status();
  double sum = 0;
  for (int64_t i = 0; i < 12; ++i) sum += x.data<float>()[i];
  ExpectNear((*all)[0], Floats({1, 1, 1}, {static_cast<float>(sum)}));
  Attributes noop;
  noop.Set("noop_with_empty_axes", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> same = Run("ReduceSum", {x, Int64s({0}, {})}, noop, 13, {1});
  ASSERT_TRUE(same.ok()) << same.status();
  ExpectNear((*same)[0], x);
  // Before opset 13 the axes are an attribute.
  Attributes middle;
  middle.Set("axes", std::vector<int64_t>{1});
  middle.Set("keepdims", int64_t{0});
  absl::StatusOr<std::vector<Tensor>> old = Run("ReduceSum", {x}, middle, 11);
  ASSERT_TRUE(old.ok()) << old.status();
  Tensor expected = Tensor::Host(DType::kFloat32, {2, 2});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 2; ++k) {
      double s = 0;
      for (int64_t j = 0; j < 3; ++j) s += x.data<float>()[Offset({2, 3, 2}, {i, j, k})];
      expected.data<float>()[i * 2 + k] = static_cast<float>(s);
    }
  ExpectNear((*old)[0], expected);
}

TEST_F(CpuKernelsTest, ReduceInt64EmptyAndUnitDims) {
  const Tensor ints = Int64s({2, 3}, {1, 2, 4, -1, -2, -4});
  Attributes keep0;
  keep0.Set("keepdims", int64_t{0});
  absl::StatusOr<std::vector<Tensor>> sum =
      Run("ReduceSum", {ints, Int64s({1}, {1})}, keep0, 13, {1});
  ASSERT_TRUE(sum.ok()) << sum.status();
  ExpectInt64s((*sum)[0], {2}, {7, -7});
  Attributes rows;
  rows.Set("axes", std::vector<int64_t>{1});
  absl::StatusOr<std::vector<Tensor>> mean = Run("ReduceMean", {ints}, rows, 13);
  ASSERT_TRUE(mean.ok()) << mean.status();
  ExpectInt64s((*mean)[0], {2, 1}, {2, -2});  // 7 / 3 and -7 / 3 truncate.

  // Reducing a dim of 0: the sum of nothing is 0, its mean NaN (int64: 0).
  const Tensor empty = Tensor::Host(DType::kFloat32, {2, 0});
  absl::StatusOr<std::vector<Tensor>> empty_sum =
      Run("ReduceSum", {empty, Int64s({1}, {1})}, Attributes(), 13, {1});
  ASSERT_TRUE(empty_sum.ok()) << empty_sum.status();
  ExpectNear((*empty_sum)[0], Floats({2, 1}, {0.0f, 0.0f}));
  absl::StatusOr<std::vector<Tensor>> empty_mean = Run("ReduceMean", {empty}, rows, 13);
  ASSERT_TRUE(empty_mean.ok()) << empty_mean.status();
  ExpectNearOrBothNaN((*empty_mean)[0], Floats({2, 1}, {NAN, NAN}));
  absl::StatusOr<std::vector<Tensor>> empty_int_mean =
      Run("ReduceMean", {Tensor::Host(DType::kInt64, {2, 0})}, rows, 13);
  ASSERT_TRUE(empty_int_mean.ok()) << empty_int_mean.status();
  ExpectInt64s((*empty_int_mean)[0], {2, 1}, {0, 0});

  // Only dims of 1 reduced: the input, which oneDNN's reduction rejects.
  const Tensor x = Random({3, 1, 2}, 62);
  Attributes unit;
  unit.Set("axes", std::vector<int64_t>{1});
  absl::StatusOr<std::vector<Tensor>> copy = Run("ReduceMean", {x}, unit, 13);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ExpectNear((*copy)[0], x);
}

}  // namespace
}  // namespace replicad
