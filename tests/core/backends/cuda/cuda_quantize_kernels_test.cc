// The int8 operators on CUDA (cuda_quantize_kernels.cc,
// cuda_integer_product_kernels.cc) against the CPU kernels, byte for byte:
// QuantizeLinear and DequantizeLinear per tensor and per axis (NaN, the
// infinities, exact halves that round to even, saturation),
// DynamicQuantizeLinear over ranges of every sign (many blocks' partial
// ranges among them), and MatMulInteger, QLinearMatMul, ConvInteger and
// QLinearConv with uint8 and int8 mixes, per-column or per-channel
// parameters, batch broadcasting, K over several tiles, odd sizes, groups,
// strides, pads, dilations and a bias. Weights arrive as request data, so
// the CPU runs its exact int32 kernel (a QLinearConv whose weights are
// initializers takes oneDNN's, which may differ by 1 on a rounding tie).
// The same products with the weights known when planned run on int8 tensor
// cores (cuda_integer_tensor_core_kernel.cc: the only integer product with
// scratch, which is how the test tells it ran), against the CPU's exact
// kernel: every type mix, zero points per channel, padding, a bias, a 1-D
// B, and enough rows for several chunks; grouped convolutions, weights that
// are data, B with batch dims and K of 2^17 keep the exact kernel. Skips without a GPU (CTest label
// gpu).

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/device/kernel.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::Floats;
using testing::KernelCall;
using Ints = std::vector<int64_t>;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T>
Tensor Values(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t = Tensor::Host(dtype, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<T>()[i] = values.at(i);
  return t;
}

Tensor Scale(float value) { return Floats({}, {value}); }

// An 8-bit or int32 tensor of values in [low, high].
Tensor RandomInts(DType dtype, Shape shape, int64_t low, int64_t high, uint32_t seed) {
  Tensor t = Tensor::Host(dtype, std::move(shape));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int64_t> pick(low, high);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int64_t v = pick(random);
    switch (dtype) {
      case DType::kInt8:
        t.data<int8_t>()[i] = static_cast<int8_t>(v);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      default:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
    }
  }
  return t;
}

// Any value of an 8-bit type.
Tensor RandomEightBit(DType dtype, Shape shape, uint32_t seed) {
  return dtype == DType::kInt8 ? RandomInts(dtype, std::move(shape), -128, 127, seed)
                               : RandomInts(dtype, std::move(shape), 0, 255, seed);
}

// One value of an 8-bit type (per tensor), or `count` of them.
Tensor ZeroPoints(DType dtype, int64_t count, uint32_t seed) {
  const Shape shape = count == 0 ? Shape{} : Shape{count};
  return dtype == DType::kInt8 ? RandomInts(dtype, shape, -20, 20, seed)
                               : RandomInts(dtype, shape, 100, 150, seed);
}

// Positive scales around `base`: one (per tensor), or `count` of them.
Tensor Scales(float base, int64_t count) {
  if (count == 0) return Scale(base);
  std::vector<float> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(base * (0.6f + 0.1f * (i % 9)));
  return Floats({count}, values);
}

// x for the quantizers: the hard cases first (NaN, infinities, halves that
// round to even at scale 1, values past both ends of both types), then
// random values in [-300, 300).
Tensor QuantizerInput(Shape shape, uint64_t seed) {
  const std::vector<float> hard = {kNan,    kInf,   -kInf,  2.5f,   3.5f,    -2.5f,  -3.5f,
                                   0.5f,    1.5f,   -0.5f,  -0.0f,  0.0f,    127.5f, 128.5f,
                                   -128.5f, 254.5f, 255.5f, 300.0f, -300.0f, 1e30f,  -1e30f};
  Tensor x = testing::RandomTensor(std::move(shape), seed);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    float& v = x.data<float>()[i];
    v = i < static_cast<int64_t>(hard.size()) ? hard[i] : v * 300.0f;
  }
  return x;
}

KernelCall Call(std::string op_type, std::vector<std::optional<Tensor>> inputs) {
  KernelCall call;
  call.op_type = std::move(op_type);
  call.inputs = std::move(inputs);
  return call;
}

KernelCall WithAxis(KernelCall call, int64_t axis) {
  call.attributes.Set("axis", axis);
  return call;
}

std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

using CudaQuantizeKernelsTest = testing::CpuAndGpuTest;

TEST_F(CudaQuantizeKernelsTest, QuantizeLinearPerTensorMatchesTheCpu) {
  const Tensor x = QuantizerInput({3, 5, 7}, 1);
  ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Scale(1.0f)}),
                            "uint8 without a zero point, scale 1");
  for (DType type : {DType::kUint8, DType::kInt8}) {
    const Tensor none =
        type == DType::kInt8 ? Values<int8_t>(type, {}, {0}) : Values<uint8_t>(type, {}, {0});
    const Tensor shifted =
        type == DType::kInt8 ? Values<int8_t>(type, {}, {-3}) : Values<uint8_t>(type, {}, {10});
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Scale(1.0f), none}),
                              Name(type) + ", zero point 0, scale 1 (halves to even)");
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Scale(1.0f), shifted}),
                              Name(type) + ", shifted zero point, scale 1");
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Scale(0.37f), shifted}),
                              Name(type) + ", scale 0.37");
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Scale(0.5f), none}),
                              Name(type) + ", scale 0.5");
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Floats({1}, {2.0f}), shifted}),
                              Name(type) + ", a 1-D scale of one element");
  }
}

TEST_F(CudaQuantizeKernelsTest, QuantizeLinearPerAxisMatchesTheCpu) {
  const Tensor x = QuantizerInput({2, 3, 4, 5}, 2);
  for (DType type : {DType::kUint8, DType::kInt8}) {
    const Tensor ends = type == DType::kInt8 ? Values<int8_t>(type, {3}, {-128, 0, 127})
                                             : Values<uint8_t>(type, {3}, {0, 128, 255});
    ExpectKernelBytesMatchCpu(Call("QuantizeLinear", {x, Floats({3}, {1.0f, 0.5f, 3.0f}), ends}),
                              Name(type) + ", axis 1 (default), zero points at both ends");
    ExpectKernelBytesMatchCpu(
        WithAxis(Call("QuantizeLinear", {x, Scales(0.8f, 5), ZeroPoints(type, 5, 3)}), -1),
        Name(type) + ", axis -1");
    ExpectKernelBytesMatchCpu(
        WithAxis(Call("QuantizeLinear", {x, Scales(1.0f, 2), ZeroPoints(type, 2, 4)}), 0),
        Name(type) + ", axis 0");
  }
  ExpectKernelBytesMatchCpu(WithAxis(Call("QuantizeLinear", {x, Scales(2.0f, 4)}), 2),
                            "uint8 without zero points, axis 2");
}

TEST_F(CudaQuantizeKernelsTest, DequantizeLinearMatchesTheCpu) {
  const Shape shape = {2, 3, 4, 5};
  for (DType type : {DType::kUint8, DType::kInt8}) {
    const Tensor x = RandomEightBit(type, shape, 5);
    ExpectKernelBytesMatchCpu(Call("DequantizeLinear", {x, Scale(0.1f)}),
                              Name(type) + " without a zero point");
    ExpectKernelBytesMatchCpu(Call("DequantizeLinear", {x, Scale(0.013f), ZeroPoints(type, 0, 6)}),
                              Name(type) + " per tensor");
    ExpectKernelBytesMatchCpu(
        Call("DequantizeLinear", {x, Scales(0.02f, 3), ZeroPoints(type, 3, 7)}),
        Name(type) + " per axis 1");
    ExpectKernelBytesMatchCpu(
        WithAxis(Call("DequantizeLinear", {x, Scales(0.03f, 5), ZeroPoints(type, 5, 8)}), 3),
        Name(type) + " per axis 3");
  }
  // int32 (a bias), large enough that the float conversion rounds.
  const Tensor wide = RandomInts(DType::kInt32, shape, -2000000000, 2000000000, 9);
  ExpectKernelBytesMatchCpu(Call("DequantizeLinear", {wide, Scale(1e-3f)}), "int32 per tensor");
  ExpectKernelBytesMatchCpu(
      Call("DequantizeLinear",
           {wide, Scales(3e-4f, 3), Values<int32_t>(DType::kInt32, {3}, {0, 0, 0})}),
      "int32 per axis, zero points 0");
}

TEST_F(CudaQuantizeKernelsTest, DynamicQuantizeLinearMatchesTheCpu) {
  auto mapped = [](Shape shape, uint64_t seed, float scale, float shift) {
    Tensor t = testing::RandomTensor(std::move(shape), seed);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      t.data<float>()[i] = t.data<float>()[i] * scale + shift;
    }
    return t;
  };
  auto constant = [](Shape shape, float value) {
    Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = value;
    return t;
  };
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {mapped({7, 13}, 10, 2.0f, 3.0f)}),
                            "all positive");
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {mapped({7, 13}, 11, 2.0f, -3.0f)}),
                            "all negative");
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {mapped({7, 13}, 12, 5.0f, 1.0f)}),
                            "mixed");
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {constant({5, 3}, 0.0f)}),
                            "zeros (scale 1)");
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {constant({5, 3}, 2.75f)}),
                            "constant positive");
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {constant({5, 3}, -1.5f)}),
                            "constant negative");
  Tensor with_nan = mapped({4, 9}, 13, 4.0f, 0.5f);
  with_nan.data<float>()[3] = kNan;
  with_nan.data<float>()[20] = kNan;
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {with_nan}), "NaNs left out");
  // Many blocks' partial ranges, the extremes far apart in x.
  Tensor large = mapped({1000, 301}, 14, 10.0f, 2.0f);
  large.data<float>()[7] = -40.0f;
  large.data<float>()[large.num_elements() - 3] = 55.0f;
  ExpectKernelBytesMatchCpu(Call("DynamicQuantizeLinear", {large}), "301000 elements");
}

// MatMulInteger of A [a_shape] by B [b_shape] with zero points (B's one per
// column where `per_column`).
KernelCall MatMulIntegerCall(DType a_type, DType b_type, Shape a_shape, Shape b_shape,
                             bool per_column, uint32_t seed) {
  const int64_t n = b_shape.back();
  return Call("MatMulInteger",
              {RandomEightBit(a_type, a_shape, seed), RandomEightBit(b_type, b_shape, seed + 1),
               ZeroPoints(a_type, 0, seed + 2), ZeroPoints(b_type, per_column ? n : 0, seed + 3)});
}

// QLinearMatMul with scales that keep most outputs inside y's range for K
// in the hundreds; B's scale and zero point per column where `per_column`.
KernelCall QLinearMatMulCall(DType a_type, DType b_type, DType y_type, Shape a_shape, Shape b_shape,
                             bool per_column, uint32_t seed) {
  const int64_t n = b_shape.back();
  return Call("QLinearMatMul",
              {RandomEightBit(a_type, a_shape, seed), Scale(0.02f), ZeroPoints(a_type, 0, seed + 1),
               RandomEightBit(b_type, b_shape, seed + 2), Scales(0.005f, per_column ? n : 0),
               ZeroPoints(b_type, per_column ? n : 0, seed + 3), Scale(0.1f),
               ZeroPoints(y_type, 0, seed + 4)});
}

const DType kEightBitTypes[] = {DType::kUint8, DType::kInt8};

TEST_F(CudaQuantizeKernelsTest, MatMulIntegerMatchesTheCpu) {
  uint32_t seed = 20;
  for (DType a : kEightBitTypes) {
    for (DType b : kEightBitTypes) {
      const std::string types = Name(a) + " x " + Name(b);
      ExpectKernelBytesMatchCpu(MatMulIntegerCall(a, b, {7, 300}, {300, 13}, false, seed += 4),
                                types + ", M 7, K 300, N 13");
      ExpectKernelBytesMatchCpu(
          MatMulIntegerCall(a, b, {2, 1, 7, 300}, {3, 300, 13}, true, seed += 4),
          types + ", batch broadcast, per-column zero points");
    }
  }
  ExpectKernelBytesMatchCpu(Call("MatMulInteger", {RandomEightBit(DType::kUint8, {5, 70, 33}, 50),
                                                   RandomEightBit(DType::kInt8, {33, 130}, 51)}),
                            "no zero points, several row and column tiles, B broadcast");
  ExpectKernelBytesMatchCpu(Call("MatMulInteger", {RandomEightBit(DType::kInt8, {19}, 52),
                                                   RandomEightBit(DType::kUint8, {4, 19, 6}, 53),
                                                   ZeroPoints(DType::kInt8, 0, 54), std::nullopt}),
                            "1-D A, no B zero point");
  // int8 weights known when planned: the CPU's oneDNN int8 product (exact).
  KernelCall known = Call("MatMulInteger", {RandomEightBit(DType::kUint8, {9, 64}, 57),
                                            RandomEightBit(DType::kInt8, {64, 17}, 58),
                                            ZeroPoints(DType::kUint8, 0, 59)});
  known.constant_inputs = {1};
  ExpectKernelBytesMatchCpu(known, "int8 B known when planned");
}

TEST_F(CudaQuantizeKernelsTest, QLinearMatMulMatchesTheCpu) {
  uint32_t seed = 100;
  for (DType a : kEightBitTypes) {
    for (DType b : kEightBitTypes) {
      for (DType y : kEightBitTypes) {
        const std::string types = Name(a) + " x " + Name(b) + " -> " + Name(y);
        ExpectKernelBytesMatchCpu(QLinearMatMulCall(a, b, y, {7, 300}, {300, 13}, false, seed += 5),
                                  types + ", M 7, K 300, N 13");
        ExpectKernelBytesMatchCpu(
            QLinearMatMulCall(a, b, y, {3, 1, 7, 300}, {2, 300, 13}, true, seed += 5),
            types + ", batch broadcast, per-column scales and zero points");
      }
    }
  }
  // Scales that send most sums past y's range: saturation at both ends.
  KernelCall saturating =
      QLinearMatMulCall(DType::kUint8, DType::kInt8, DType::kInt8, {9, 40}, {40, 11}, true, 200);
  saturating.inputs[6] = Scale(0.0005f);
  ExpectKernelBytesMatchCpu(saturating, "saturating");
}

// ConvInteger or QLinearConv of x [2, channels, 9, 11] by w [filters,
// channels / group, kernel, kernel] under `attributes`; w's parameters per
// output channel where `per_channel`.
KernelCall IntegerConvCall(bool requantized, DType x_type, DType w_type, DType y_type,
                           int64_t channels, int64_t filters, int64_t kernel, int64_t group,
                           const Attributes& attributes, bool per_channel, bool bias,
                           uint32_t seed) {
  const Tensor x = RandomEightBit(x_type, {2, channels, 9, 11}, seed);
  const Tensor w = RandomEightBit(w_type, {filters, channels / group, kernel, kernel}, seed + 1);
  const int64_t count = per_channel ? filters : 0;
  KernelCall call;
  if (requantized) {
    call = Call("QLinearConv", {x, Scale(0.05f), ZeroPoints(x_type, 0, seed + 2), w,
                                Scales(0.004f, count), ZeroPoints(w_type, count, seed + 3),
                                Scale(0.4f), ZeroPoints(y_type, 0, seed + 4)});
    if (bias) {
      call.inputs.push_back(RandomInts(DType::kInt32, {filters}, -20000, 20000, seed + 5));
    }
  } else {
    call = Call("ConvInteger",
                {x, w, ZeroPoints(x_type, 0, seed + 2), ZeroPoints(w_type, count, seed + 3)});
  }
  call.attributes = attributes;
  call.attributes.Set("group", group);
  return call;
}

Attributes Geometry(Ints strides, Ints pads, Ints dilations) {
  Attributes a;
  a.Set("strides", std::move(strides));
  a.Set("pads", std::move(pads));
  a.Set("dilations", std::move(dilations));
  return a;
}

TEST_F(CudaQuantizeKernelsTest, ConvIntegerMatchesTheCpu) {
  const Attributes plain = Geometry({1, 1}, {0, 0, 0, 0}, {1, 1});
  const Attributes odd = Geometry({2, 1}, {1, 0, 2, 1}, {1, 2});
  uint32_t seed = 300;
  for (DType x : kEightBitTypes) {
    for (DType w : kEightBitTypes) {
      const std::string types = Name(x) + " * " + Name(w);
      ExpectKernelBytesMatchCpu(
          IntegerConvCall(false, x, w, DType::kInt32, 4, 6, 3, 1, plain, false, false, seed += 6),
          types + ", 3x3");
      ExpectKernelBytesMatchCpu(
          IntegerConvCall(false, x, w, DType::kInt32, 4, 6, 3, 2, odd, true, false, seed += 6),
          types + ", group 2, strides, asymmetric pads, dilations, per-channel zero points");
    }
  }
  ExpectKernelBytesMatchCpu(IntegerConvCall(false, DType::kUint8, DType::kInt8, DType::kInt32, 6, 6,
                                            3, 6, odd, true, false, 400),
                            "depthwise");
  ExpectKernelBytesMatchCpu(
      IntegerConvCall(false, DType::kUint8, DType::kUint8, DType::kInt32, 70, 5, 3, 1,
                      Geometry({1, 1}, {1, 1, 1, 1}, {1, 1}), false, false, 410),
      "K 630 (several tiles), same padding");
}

TEST_F(CudaQuantizeKernelsTest, QLinearConvMatchesTheCpu) {
  const Attributes odd = Geometry({2, 1}, {1, 0, 2, 1}, {1, 2});
  const Attributes same = Geometry({1, 1}, {1, 1, 1, 1}, {1, 1});
  uint32_t seed = 500;
  for (DType x : kEightBitTypes) {
    for (DType w : kEightBitTypes) {
      for (DType y : kEightBitTypes) {
        const std::string types = Name(x) + " * " + Name(w) + " -> " + Name(y);
        ExpectKernelBytesMatchCpu(
            IntegerConvCall(true, x, w, y, 4, 6, 3, 1, same, false, false, seed += 6),
            types + ", 3x3 same, per tensor, no bias");
        ExpectKernelBytesMatchCpu(
            IntegerConvCall(true, x, w, y, 4, 6, 3, 2, odd, true, true, seed += 6),
            types + ", group 2, strides, pads, dilations, per-channel w, bias");
      }
    }
  }
  ExpectKernelBytesMatchCpu(IntegerConvCall(true, DType::kUint8, DType::kInt8, DType::kUint8, 8, 8,
                                            3, 8, odd, true, true, 600),
                            "depthwise with bias");
  ExpectKernelBytesMatchCpu(IntegerConvCall(true, DType::kInt8, DType::kInt8, DType::kInt8, 70, 9,
                                            3, 1, same, true, true, 610),
                            "K 630 (several tiles), bias");
  ExpectKernelBytesMatchCpu(
      IntegerConvCall(true, DType::kUint8, DType::kInt8, DType::kUint8, 3, 4, 1, 1,
                      Geometry({1, 1}, {0, 0, 0, 0}, {1, 1}), true, true, 620),
      "1x1");
}

// The inputs a tensor-core product needs known when planned: the weights,
// their zero points and the bias (A's zero point and the scales stay
// request data, as dynamic quantization computes them).
KernelCall WithKnownWeights(KernelCall call) {
  std::vector<int> known;
  if (call.op_type == "QLinearMatMul" || call.op_type == "QLinearConv") {
    known = {3, 5, 8};
  } else {
    known = {1, 3};
  }
  for (int i : known) {
    if (i < static_cast<int>(call.inputs.size()) && call.inputs[i].has_value()) {
      call.constant_inputs.push_back(i);
    }
  }
  return call;
}

class CudaIntegerTensorCoresTest : public CudaQuantizeKernelsTest {
 protected:
  // The scratch the GPU's kernel for `call` asks for: some for the
  // tensor-core form, none for the exact kernel.
  size_t GpuScratch(const KernelCall& call) {
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = testing::BuildKernel(*gpu_, call);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    return kernel.ok() ? (*kernel)->workspace_bytes() : 0;
  }

  // `call` with its weights known runs on tensor cores and gives the bytes
  // of the CPU's exact kernel (the CPU reads the weights as data).
  void ExpectTensorCoresMatchCpu(const KernelCall& call, const std::string& what) {
    const KernelCall known = WithKnownWeights(call);
    EXPECT_GT(GpuScratch(known), 0u) << what << ": not on tensor cores";
    ExpectKernelBytesMatchCpu(known, call, what);
  }
};

TEST_F(CudaIntegerTensorCoresTest, MatMulsMatchTheCpu) {
  uint32_t seed = 700;
  for (DType a : kEightBitTypes) {
    for (DType b : kEightBitTypes) {
      const std::string types = Name(a) + " x " + Name(b);
      ExpectTensorCoresMatchCpu(MatMulIntegerCall(a, b, {7, 300}, {300, 13}, true, seed += 4),
                                types + ", M 7, K 300, N 13, per-column zero points");
      ExpectTensorCoresMatchCpu(MatMulIntegerCall(a, b, {2, 3, 5, 40}, {40, 70}, false, seed += 4),
                                types + ", A's batch dims, per-tensor zero points");
      for (DType y : kEightBitTypes) {
        ExpectTensorCoresMatchCpu(QLinearMatMulCall(a, b, y, {9, 130}, {130, 33}, true, seed += 5),
                                  types + " -> " + Name(y) + ", per-column scales and zero points");
      }
    }
  }
  ExpectTensorCoresMatchCpu(Call("MatMulInteger", {RandomEightBit(DType::kUint8, {5, 33}, 750),
                                                   RandomEightBit(DType::kUint8, {33, 20}, 751)}),
                            "uint8 weights without a zero point (every row needs its sum)");
  ExpectTensorCoresMatchCpu(
      Call("MatMulInteger",
           {RandomEightBit(DType::kInt8, {5, 33}, 752), RandomEightBit(DType::kUint8, {33}, 753),
            ZeroPoints(DType::kInt8, 0, 754), ZeroPoints(DType::kUint8, 0, 755)}),
      "1-D B: one column");
  KernelCall saturating =
      QLinearMatMulCall(DType::kUint8, DType::kInt8, DType::kInt8, {9, 40}, {40, 11}, true, 760);
  saturating.inputs[6] = Scale(0.0005f);
  ExpectTensorCoresMatchCpu(saturating, "saturating");
  // 64 MiB of scratch holds about 800,000 rows of K 16 and N 16: three chunks.
  ExpectTensorCoresMatchCpu(QLinearMatMulCall(DType::kUint8, DType::kInt8, DType::kUint8,
                                              {1700003, 16}, {16, 16}, true, 770),
                            "1,700,003 rows, three chunks");
}

TEST_F(CudaIntegerTensorCoresTest, ConvolutionsMatchTheCpu) {
  const Attributes odd = Geometry({2, 1}, {1, 0, 2, 1}, {1, 2});
  const Attributes same = Geometry({1, 1}, {1, 1, 1, 1}, {1, 1});
  uint32_t seed = 800;
  for (DType x : kEightBitTypes) {
    for (DType w : kEightBitTypes) {
      const std::string types = Name(x) + " * " + Name(w);
      ExpectTensorCoresMatchCpu(
          IntegerConvCall(false, x, w, DType::kInt32, 4, 6, 3, 1, odd, true, false, seed += 6),
          types + ", strides, asymmetric pads, dilations, per-channel zero points");
      for (DType y : kEightBitTypes) {
        ExpectTensorCoresMatchCpu(
            IntegerConvCall(true, x, w, y, 5, 7, 3, 1, same, true, true, seed += 6),
            types + " -> " + Name(y) + ", same padding, per-channel w, bias");
      }
    }
  }
  ExpectTensorCoresMatchCpu(IntegerConvCall(true, DType::kInt8, DType::kInt8, DType::kInt8, 70, 9,
                                            3, 1, same, true, true, 900),
                            "K 630, bias");
  ExpectTensorCoresMatchCpu(
      IntegerConvCall(true, DType::kUint8, DType::kInt8, DType::kUint8, 3, 4, 1, 1,
                      Geometry({1, 1}, {0, 0, 0, 0}, {1, 1}), true, true, 910),
      "1x1");
  // 4,096 channels of 256 positions: 15 images a chunk, 40 images.
  KernelCall wide = Call(
      "QLinearConv",
      {RandomEightBit(DType::kUint8, {40, 1, 16, 16}, 920), Scale(0.05f),
       ZeroPoints(DType::kUint8, 0, 921), RandomEightBit(DType::kInt8, {4096, 1, 1, 1}, 922),
       Scales(0.004f, 4096), ZeroPoints(DType::kInt8, 4096, 923), Scale(0.4f),
       ZeroPoints(DType::kUint8, 0, 924), RandomInts(DType::kInt32, {4096}, -2000, 2000, 925)});
  wide.attributes = Geometry({1, 1}, {0, 0, 0, 0}, {1, 1});
  ExpectTensorCoresMatchCpu(wide, "4,096 channels, three chunks of images");
}

TEST_F(CudaIntegerTensorCoresTest, OtherFormsKeepTheExactKernel) {
  const Attributes odd = Geometry({2, 1}, {1, 0, 2, 1}, {1, 2});
  const KernelCall grouped_data = IntegerConvCall(true, DType::kUint8, DType::kInt8, DType::kUint8,
                                                  4, 6, 3, 2, odd, true, true, 1000);
  const KernelCall grouped = WithKnownWeights(grouped_data);
  EXPECT_EQ(GpuScratch(grouped), 0u) << "group 2";
  const KernelCall data_weights =
      MatMulIntegerCall(DType::kUint8, DType::kInt8, {7, 30}, {30, 13}, false, 1010);
  EXPECT_EQ(GpuScratch(data_weights), 0u) << "weights that are request data";
  const KernelCall batched_weights = WithKnownWeights(
      MatMulIntegerCall(DType::kUint8, DType::kInt8, {2, 7, 30}, {2, 30, 13}, false, 1020));
  EXPECT_EQ(GpuScratch(batched_weights), 0u) << "B with batch dims";
  // K of 2^17: its raw sums could pass int32's range, where cuBLAS may
  // saturate and the exact kernel wraps.
  const KernelCall deep = WithKnownWeights(
      MatMulIntegerCall(DType::kInt8, DType::kInt8, {1, 131072}, {131072, 4}, false, 1030));
  EXPECT_EQ(GpuScratch(deep), 0u) << "K 2^17";
  ExpectKernelBytesMatchCpu(grouped, grouped_data, "group 2 with known weights");
}

}  // namespace
}  // namespace replicad
