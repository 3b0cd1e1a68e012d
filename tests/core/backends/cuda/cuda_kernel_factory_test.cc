// Per-model TF32 (precision tf32, core/model/compute_precision.h) on CUDA
// slots: a node marked "tf32" uses TF32 tensor cores on a slot whose --tf32
// is off, an unmarked node does not (UsesTensorFloat32, no GPU needed). On a
// GPU, a 256 x 256 x 256 MatMul marked tf32 answers within TF32's error of
// the CPU's float32 (|gpu - cpu| <= 1e-2 * (1 + |cpu|): 10-bit mantissas,
// float32 sums over 256 products) and differs from it by more than 1e-4
// somewhere (so tensor cores ran: float32 math differs by about 1e-6), while
// the unmarked MatMul stays within 1e-4 (float32 summation order). Skips the
// GPU part without a GPU (CTest label gpu).

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

TEST(CudaKernelFactoryTest, TheSlotsFlagOrTheNodesMarkTurnsItOn) {
  Attributes marked;
  marked.Set(kPrecisionAttribute, AttributeValue(std::string("tf32")));
  Attributes bf16;
  bf16.Set(kPrecisionAttribute, AttributeValue(std::string("bf16")));
  const Attributes none;
  KernelSpec spec;
  CudaKernelContext context;
  EXPECT_FALSE(UsesTensorFloat32(spec, context));  // No attributes at all.
  spec.attributes = &none;
  EXPECT_FALSE(UsesTensorFloat32(spec, context));
  spec.attributes = &bf16;
  EXPECT_FALSE(UsesTensorFloat32(spec, context));
  spec.attributes = &marked;
  EXPECT_TRUE(UsesTensorFloat32(spec, context));
  context.tf32 = true;
  spec.attributes = &none;
  EXPECT_TRUE(UsesTensorFloat32(spec, context));
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

TEST(CudaKernelFactoryTest, AMarkedMatMulUsesTensorCoresOnASlotWithoutTf32) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  const DeviceInfo* gpu_info = FindDevice(*devices, kGpu);
  if (gpu_info == nullptr) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<Device>> cpu = CreateDevice(*FindDevice(*devices, kCpu), {});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(*gpu_info, SlotOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  testing::KernelCall call;
  call.op_type = "MatMul";
  call.inputs = {testing::RandomTensor({256, 256}, 1), testing::RandomTensor({256, 256}, 2)};
  absl::StatusOr<std::vector<Tensor>> reference = testing::RunKernel(**cpu, call);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::vector<Tensor>> float32 = testing::RunKernel(**gpu, call);
  ASSERT_TRUE(float32.ok()) << float32.status();
  EXPECT_LE(WorstDifference((*float32)[0], (*reference)[0]), 1e-4);

  call.attributes.Set(kPrecisionAttribute, AttributeValue(std::string("tf32")));
  absl::StatusOr<std::vector<Tensor>> tf32 = testing::RunKernel(**gpu, call);
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  const double worst = WorstDifference((*tf32)[0], (*reference)[0]);
  EXPECT_LE(worst, 1e-2);
  EXPECT_GT(worst, 1e-4) << "the marked MatMul computed float32";
}

}  // namespace
}  // namespace replicad
