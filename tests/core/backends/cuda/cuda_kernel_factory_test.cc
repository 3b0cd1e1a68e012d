// Per-model product precision on CUDA slots (core/model/compute_precision.h;
// ProductMathOf, no GPU needed): a node marked "tf32", "fp16" or "bf16"
// computes so whatever the slot's --tf32, an unmarked node in float32 or in
// the slot's TF32. On a GPU, a 256 x 256 x 256 MatMul (cuBLAS) and a
// 16-channel 3x3 convolution (cuDNN) marked tf32 or fp16 answer within
// their 10-bit mantissas' error of the CPU's float32 (|gpu - cpu| <= 1e-2 *
// (1 + |cpu|)), bf16 within its 7-bit mantissa's (1e-1: cuDNN computes a bf16
// convolution in TF32, within 1e-2), and each differs from float32 by more
// than 1e-4 somewhere (so tensor cores ran: float32 math differs by about
// 1e-6), while the unmarked product stays within 1e-4 (float32 summation
// order). Skips the GPU part without a GPU (CTest label gpu).

#include "core/backends/cuda/kernels/cuda_kernel_factory.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/backends/backends.h"
#include "core/model/compute_precision.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

const DeviceId kCpu{DeviceKind::kCpu, 0};
const DeviceId kGpu{DeviceKind::kCuda, 0};

TEST(CudaKernelFactoryTest, TheNodesMarkOrTheSlotsFlagPicksTheMath) {
  const auto marked = [](const std::string& precision) {
    Attributes attributes;
    attributes.Set(kPrecisionAttribute, AttributeValue(precision));
    return attributes;
  };
  const Attributes tf32 = marked("tf32"), fp16 = marked("fp16"), bf16 = marked("bf16"), none;
  KernelSpec spec;
  CudaKernelContext context;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kFloat32);  // No attributes at all.
  spec.attributes = &none;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kFloat32);
  spec.attributes = &bf16;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kBFloat16);
  spec.attributes = &fp16;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kFloat16);
  spec.attributes = &tf32;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kTensorFloat32);
  context.tf32 = true;
  spec.attributes = &none;
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kTensorFloat32);
  spec.attributes = &fp16;  // The model's precision wins over the slot's.
  EXPECT_EQ(ProductMathOf(spec, context), ComputePrecision::kFloat16);
}

// The largest |gpu - cpu| / (1 + |cpu|) over the elements.
double WorstDifference(const Tensor& gpu, const Tensor& cpu) {
  double worst = 0;
  for (int64_t i = 0; i < cpu.num_elements(); ++i) {
    const double e = cpu.data<float>()[i];
    worst = std::fmax(worst, std::fabs(gpu.data<float>()[i] - e) / (1 + std::fabs(e)));
  }
  return worst;
}

TEST(CudaKernelFactoryTest, MarkedProductsUseTensorCoresOnASlotWithoutTf32) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  const DeviceInfo* gpu_info = FindDevice(*devices, kGpu);
  if (gpu_info == nullptr) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Device>> cpu = CreateDevice(*FindDevice(*devices, kCpu), {});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(*gpu_info, SlotOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  testing::KernelCall matmul;
  matmul.op_type = "MatMul";
  matmul.inputs = {testing::RandomTensor({256, 256}, 1), testing::RandomTensor({256, 256}, 2)};
  testing::KernelCall conv;
  conv.op_type = "Conv";
  conv.inputs = {testing::RandomTensor({4, 16, 12, 12}, 3),
                 testing::RandomTensor({32, 16, 3, 3}, 4)};
  for (const testing::KernelCall& plain : {matmul, conv}) {
    SCOPED_TRACE(plain.op_type);
    absl::StatusOr<std::vector<Tensor>> reference = testing::RunKernel(**cpu, plain);
    ASSERT_TRUE(reference.ok()) << reference.status();
    absl::StatusOr<std::vector<Tensor>> float32 = testing::RunKernel(**gpu, plain);
    ASSERT_TRUE(float32.ok()) << float32.status();
    EXPECT_LE(WorstDifference((*float32)[0], (*reference)[0]), 1e-4);
    for (const std::string precision : {"tf32", "fp16", "bf16"}) {
      SCOPED_TRACE(precision);
      testing::KernelCall call = plain;
      call.attributes.Set(kPrecisionAttribute, AttributeValue(precision));
      absl::StatusOr<std::vector<Tensor>> reduced = testing::RunKernel(**gpu, call);
      ASSERT_TRUE(reduced.ok()) << reduced.status();
      const double worst = WorstDifference((*reduced)[0], (*reference)[0]);
      EXPECT_LE(worst, precision == "bf16" ? 1e-1 : 1e-2);
      EXPECT_GT(worst, 1e-4) << "the marked " << plain.op_type << " computed float32";
    }
  }
}

}  // namespace
}  // namespace replicad
