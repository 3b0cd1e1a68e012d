// The CUDA kernels of the convolution, softmax and pooling gradients
// (replicad.ConvGradData, ConvGradFilter, SoftmaxGrad, LogSoftmaxGrad,
// MaxPoolGrad, AveragePoolGrad, GlobalAveragePoolGrad) against the CPU
// backend on the same inputs, one op at a time through the kernel runner
// (no ONNX model can name these ops). TF32 is off, so both sides compute in
// float32 and differ only in summation order: |cuda - cpu| <= 1e-4 * (1 +
// |cpu|) per element (kTolerance). Skips without a GPU (CTest label gpu).

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/backends.h"
#include "core/device/device.h"
#include "core/device/kernel.h"
#include "core/ops/op_registry.h"
#include "core/tensor/attributes.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

constexpr double kTolerance = 1e-4;
const DeviceId kCpu{DeviceKind::kCpu, 0};
const DeviceId kGpu{DeviceKind::kCuda, 0};

using testing::KernelCall;
using testing::RandomTensor;
using testing::RunKernel;
using Ints = std::vector<int64_t>;

// Random in [-1, 1) rounded to quarters: max pooling windows then hold ties,
// which must go to the first maximum on both backends.
Tensor Quantized(Shape shape, uint64_t seed) {
  Tensor t = RandomTensor(std::move(shape), seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.data<float>()[i] = std::round(t.data<float>()[i] * 4.0f) / 4.0f;
  }
  return t;
}

// Softmax (or LogSoftmax) of `logits` viewed as [outer, n, inner] along n:
// a realistic Y for the softmax gradients.
Tensor SoftmaxOf(const Tensor& logits, int64_t outer, int64_t n, int64_t inner, bool log) {
  Tensor y = Tensor::Host(DType::kFloat32, logits.shape());
  const float* in = logits.data<float>();
  float* out = y.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      double max = in[base];
      for (int64_t k = 1; k < n; ++k) max = std::fmax(max, in[base + k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(in[base + k * inner] - max);
      for (int64_t k = 0; k < n; ++k) {
        const double shifted = in[base + k * inner] - max;
        out[base + k * inner] =
            static_cast<float>(log ? shifted - std::log(sum) : std::exp(shifted) / sum);
      }
    }
  }
  return y;
}

class CudaPoolConvGradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    const DeviceInfo* gpu = FindDevice(*devices, kGpu);
    if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
    const DeviceInfo* cpu = FindDevice(*devices, kCpu);
    ASSERT_NE(cpu, nullptr);
    absl::StatusOr<std::unique_ptr<Device>> made = CreateDevice(*cpu, SlotOptions{});
    ASSERT_TRUE(made.ok()) << made.status();
    cpu_ = *std::move(made);
    made = CreateDevice(*gpu, SlotOptions{});  // tf32 off.
    ASSERT_TRUE(made.ok()) << made.status();
    gpu_ = *std::move(made);
  }

  // Runs `call` on both devices and compares every output.
  void ExpectSame(const KernelCall& call, const std::string& what) {
    SCOPED_TRACE(what);
    absl::StatusOr<std::vector<Tensor>> cpu = RunKernel(*cpu_, call);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->size(), cpu->size());
    for (size_t o = 0; o < cpu->size(); ++o) {
      const Tensor& c = (*cpu)[o];
      const Tensor& g = (*gpu)[o];
      ASSERT_EQ(TensorTypeToString(g.type()), TensorTypeToString(c.type())) << "output " << o;
      int reported = 0;
      for (int64_t i = 0; i < c.num_elements() && reported < 5; ++i) {
        const double a = g.data<float>()[i];
        const double e = c.data<float>()[i];
        if (!(std::fabs(a - e) <= kTolerance * (1 + std::fabs(e)))) {
          ADD_FAILURE() << "output " << o << " element " << i << ": " << a << " vs cpu " << e;
          ++reported;
        }
      }
    }
  }

  // Unimplemented on the GPU (a form cuDNN or the kernel does not take).
  void ExpectUnimplementedOnGpu(const KernelCall& call) {
    absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented) << gpu.status();
  }

  std::unique_ptr<Device> cpu_;
  std::unique_ptr<Device> gpu_;
};

// The output shape of the forward node `op` on `inputs`, by its shape rule.
Shape ForwardShape(const std::string& op, const Attributes& attributes,
                   const std::vector<Tensor>& inputs) {
  KernelSpec spec;
  spec.op_type = op;
  spec.node_name = "forward";
  spec.attributes = &attributes;
  for (const Tensor& input : inputs) {
    spec.inputs.push_back(input.type());
    spec.constant_inputs.push_back(nullptr);
  }
  const OpDefinition* definition = FindOp(op);
  const absl::Status status =
      definition == nullptr ? absl::NotFoundError(op) : definition->infer(&spec);
  EXPECT_TRUE(status.ok()) << status;
  return status.ok() ? spec.outputs[0].shape : Shape{1};
}

// A pooling gradient's call: X, and a dY of the forward output's shape.
KernelCall PoolGradCall(const std::string& op, const Tensor& x, const Attributes& attributes,
                        uint64_t seed) {
  const std::string forward = op == "replicad.MaxPoolGrad" ? "MaxPool" : "AveragePool";
  KernelCall call;
  call.op_type = op;
  call.attributes = attributes;
  call.inputs = {x, RandomTensor(ForwardShape(forward, attributes, {x}), seed)};
  return call;
}

Attributes Window(Ints kernel, Ints strides, Ints pads) {
  Attributes a;
  a.Set("kernel_shape", std::move(kernel));
  a.Set("strides", std::move(strides));
  a.Set("pads", std::move(pads));
  return a;
}

TEST_F(CudaPoolConvGradTest, MaxPoolGrad) {
  const std::string op = "replicad.MaxPoolGrad";
  ExpectSame(
      PoolGradCall(op, Quantized({2, 3, 17, 19}, 1), Window({3, 3}, {2, 2}, {1, 1, 1, 1}), 2),
      "3x3 stride 2, overlapping windows with ties");
  ExpectSame(
      PoolGradCall(op, RandomTensor({4, 8, 16, 16}, 3), Window({2, 2}, {2, 2}, {0, 0, 0, 0}), 4),
      "2x2 stride 2");
  // ceil_mode: the last windows reach past pads_end (rows 13-14, column 12).
  Attributes ceil = Window({3, 2}, {2, 3}, {0, 1, 1, 0});
  ceil.Set("ceil_mode", int64_t{1});
  ExpectSame(PoolGradCall(op, Quantized({2, 5, 13, 12}, 5), ceil, 6),
             "ceil_mode, asymmetric pads, unequal strides");
  Attributes dilated = Window({2, 3}, {1, 1}, {1, 2, 1, 2});
  dilated.Set("dilations", Ints{2, 2});
  ExpectSame(PoolGradCall(op, Quantized({3, 2, 11, 13}, 7), dilated, 8), "dilations 2");
  Attributes same;
  same.Set("kernel_shape", Ints{3, 3});
  same.Set("strides", Ints{2, 2});
  same.Set("auto_pad", std::string("SAME_UPPER"));
  ExpectSame(PoolGradCall(op, RandomTensor({2, 4, 15, 10}, 9), same, 10), "SAME_UPPER");
}

TEST_F(CudaPoolConvGradTest, AveragePoolGrad) {
  const std::string op = "replicad.AveragePoolGrad";
  for (int64_t include_pad : {0, 1}) {
    Attributes a = Window({3, 3}, {2, 2}, {1, 1, 1, 1});
    a.Set("count_include_pad", include_pad);
    ExpectSame(PoolGradCall(op, RandomTensor({2, 6, 17, 15}, 11), a, 12),
               include_pad ? "3x3 stride 2 pads 1, count_include_pad" : "3x3 stride 2 pads 1");
    // ceil_mode's last window reaches past pads_end, which the divisor
    // leaves out even with count_include_pad.
    Attributes ceil = Window({3, 3}, {2, 2}, {1, 0, 0, 1});
    ceil.Set("ceil_mode", int64_t{1});
    ceil.Set("count_include_pad", include_pad);
    ExpectSame(PoolGradCall(op, RandomTensor({3, 4, 10, 11}, 13), ceil, 14),
               include_pad ? "ceil_mode, asymmetric pads, count_include_pad"
                           : "ceil_mode, asymmetric pads");
  }
  ExpectSame(
      PoolGradCall(op, RandomTensor({2, 3, 9, 9}, 15), Window({4, 2}, {1, 3}, {0, 0, 0, 0}), 16),
      "4x2 stride 1x3, no pads");
  Attributes dilated = Window({2, 2}, {1, 1}, {0, 0, 0, 0});
  dilated.Set("dilations", Ints{2, 2});
  KernelCall call;
  call.op_type = op;
  call.attributes = dilated;
  call.inputs = {RandomTensor({1, 1, 6, 6}, 17), RandomTensor({1, 1, 4, 4}, 18)};
  ExpectUnimplementedOnGpu(call);
}

TEST_F(CudaPoolConvGradTest, GlobalAveragePoolGrad) {
  for (const Shape& x : {Shape{4, 8, 7, 9}, Shape{2, 5, 13}, Shape{2, 3, 4, 5, 6}}) {
    Shape y(x.size(), 1);
    y[0] = x[0];
    y[1] = x[1];
    KernelCall call;
    call.op_type = "replicad.GlobalAveragePoolGrad";
    call.inputs = {RandomTensor(x, 21), RandomTensor(y, 22)};
    ExpectSame(call, ShapeToString(x));
  }
}

TEST_F(CudaPoolConvGradTest, SoftmaxGrads) {
  struct Case {
    Shape shape;
    int opset;
    int64_t axis;
    int64_t outer, n, inner;  // The layout the axis and opset give.
  };
  const Case cases[] = {
      {{8, 100}, 13, -1, 8, 100, 1},      // Rows (cuDNN's INSTANCE mode).
      {{4, 10, 6, 5}, 13, 1, 4, 10, 30},  // A middle axis (CHANNEL mode).
      {{4, 10, 6}, 11, 1, 4, 60, 1},      // Coerced to 2-D before opset 13.
  };
  for (bool log : {false, true}) {
    for (const Case& c : cases) {
      KernelCall call;
      call.op_type = log ? "replicad.LogSoftmaxGrad" : "replicad.SoftmaxGrad";
      call.opset = c.opset;
      call.attributes.Set("axis", c.axis);
      call.inputs = {SoftmaxOf(RandomTensor(c.shape, 31), c.outer, c.n, c.inner, log),
                     RandomTensor(c.shape, 32)};
      ExpectSame(call, call.op_type + " " + ShapeToString(c.shape));
    }
  }
}

// ConvGradData and ConvGradFilter on X, W and a dY of the forward output's
// shape.
struct ConvCase {
  std::string what;
  Shape x, w;
  Attributes attributes;
};

std::vector<KernelCall> ConvGradCalls(const ConvCase& c) {
  const Tensor x = RandomTensor(c.x, 41);
  const Tensor w = RandomTensor(c.w, 42);
  const Tensor dy = RandomTensor(ForwardShape("Conv", c.attributes, {x, w}), 43);
  std::vector<KernelCall> calls;
  for (const char* op : {"replicad.ConvGradData", "replicad.ConvGradFilter"}) {
    KernelCall call;
    call.op_type = op;
    call.attributes = c.attributes;
    call.inputs = {x, w, dy};
    calls.push_back(std::move(call));
  }
  return calls;
}

TEST_F(CudaPoolConvGradTest, ConvGrads) {
  std::vector<ConvCase> cases;
  cases.push_back(
      {"3x3 pads 1", {4, 16, 20, 20}, {32, 16, 3, 3}, Window({3, 3}, {1, 1}, {1, 1, 1, 1})});
  {
    Attributes a = Window({3, 3}, {2, 2}, {1, 1, 1, 1});
    a.Set("group", int64_t{16});
    cases.push_back({"depthwise stride 2", {2, 16, 15, 17}, {16, 1, 3, 3}, std::move(a)});
  }
  {
    Attributes a = Window({3, 5}, {2, 1}, {2, 1, 2, 1});
    a.Set("group", int64_t{4});
    a.Set("dilations", Ints{2, 1});
    cases.push_back(
        {"groups 4, dilations, unequal strides", {2, 8, 15, 13}, {12, 2, 3, 5}, std::move(a)});
  }
  cases.push_back({"1x1 stride 2 (last rows unread)",
                   {3, 6, 9, 11},
                   {5, 6, 1, 1},
                   Window({1, 1}, {2, 2}, {0, 0, 0, 0})});
  // pads_end 0 gives the output pads_begin on both sides would: accepted.
  cases.push_back({"asymmetric pads, same windows",
                   {2, 4, 8, 8},
                   {6, 4, 3, 3},
                   Window({3, 3}, {2, 2}, {1, 1, 0, 0})});
  for (const ConvCase& c : cases) {
    for (const KernelCall& call : ConvGradCalls(c)) {
      ExpectSame(call, call.op_type + " " + c.what);
    }
  }
}

TEST_F(CudaPoolConvGradTest, ConvGradsRejectUnevenPads) {
  // pads [0, 0, 1, 1]: one more output row and column than symmetric pads of
  // 0 give, which cuDNN cannot express.
  const ConvCase c{"uneven pads", {1, 2, 5, 5}, {3, 2, 2, 2}, Window({2, 2}, {1, 1}, {0, 0, 1, 1})};
  for (const KernelCall& call : ConvGradCalls(c)) ExpectUnimplementedOnGpu(call);
}

TEST_F(CudaPoolConvGradTest, ConvGradFilterOfAnEmptyBatchIsZero) {
  // A replica's slice may hold no rows; cuDNN rejects zero dims, the kernel
  // writes zeros instead.
  KernelCall call;
  call.op_type = "replicad.ConvGradFilter";
  call.attributes = Window({3, 3}, {1, 1}, {1, 1, 1, 1});
  call.inputs = {RandomTensor({0, 4, 6, 6}, 51), RandomTensor({8, 4, 3, 3}, 52),
                 RandomTensor({0, 8, 6, 6}, 53)};
  absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), 2u);
  for (const Tensor& t : *gpu) {
    for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_EQ(t.data<float>()[i], 0.0f);
  }
}

}  // namespace
}  // namespace replicad
