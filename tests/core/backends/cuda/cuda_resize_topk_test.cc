// Resize, Upsample (cuda_resize_kernel.cc, resize.cu) and TopK (topk.cu) on
// CUDA against the CPU's kernels, on the forms torchvision exports: nearest
// with its coordinate modes, bilinear upsampling of a segmentation head,
// linear over 3 dims of a 5-D tensor, downscaling, opset 9's Upsample; TopK
// both ways along strided and long lines (a detection head's 100000 anchors),
// with ties, NaNs, signed zeros and int64 data. Nearest and TopK copy input
// elements, so their outputs must be the CPU's bytes exactly (NaN payloads
// and -0 included). Linear mode rounds every step as the CPU does and is
// expected to match it exactly too, but is compared within 1e-6 * (1 +
// |cpu|) per element, since a CPU build allowed to fuse multiply-adds
// rounds differently. Skips without a GPU (CTest label gpu).

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::Floats;
using testing::Int64s;

using ::testing::HasSubstr;
using testing::KernelCall;
using testing::RunKernel;

constexpr double kLinearTolerance = 1e-6;

Tensor Random(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

// Integers in [-range, range) from a fixed sequence, so that lines hold ties.
Tensor RandomInt64s(Shape shape, uint64_t seed, int64_t range) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  uint64_t state = seed;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    t.data<int64_t>()[i] = static_cast<int64_t>((state >> 33) % (2 * range)) - range;
  }
  return t;
}

float FloatOfBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// Resize (opset 13) of x by `scales` or to `sizes` (the other empty), with
// the given modes; roi is absent.
KernelCall ResizeCall(Tensor x, const std::string& mode, const std::string& transform,
                      const std::string& nearest_mode, const std::vector<float>& scales,
                      const std::vector<int64_t>& sizes = {}) {
  KernelCall call;
  call.op_type = "Resize";
  call.opset = 13;
  call.attributes.Set("mode", mode);
  call.attributes.Set("coordinate_transformation_mode", transform);
  if (!nearest_mode.empty()) call.attributes.Set("nearest_mode", nearest_mode);
  call.inputs.push_back(std::move(x));
  call.inputs.push_back(std::nullopt);  // roi
  if (sizes.empty()) {
    call.inputs.push_back(Floats({static_cast<int64_t>(scales.size())}, scales));
    call.constant_inputs = {2};
  } else {
    call.inputs.push_back(std::nullopt);
    call.inputs.push_back(Int64s({static_cast<int64_t>(sizes.size())}, sizes));
    call.constant_inputs = {3};
  }
  return call;
}

// TopK (opset 11) of x along `axis` with K = k.
KernelCall TopKCall(Tensor x, int64_t k, int64_t axis, bool largest) {
  KernelCall call;
  call.op_type = "TopK";
  call.opset = 11;
  call.attributes.Set("axis", axis);
  call.attributes.Set("largest", int64_t{largest ? 1 : 0});
  call.inputs.push_back(std::move(x));
  call.inputs.push_back(Int64s({1}, {k}));
  call.constant_inputs = {1};
  return call;
}

class CudaResizeTopKTest : public testing::CpuAndGpuTest {
 protected:
  // Both orders of TopK along `axis`, k among `ks`.
  void ExpectTopKMatchesCpu(const Tensor& x, int64_t axis, const std::vector<int64_t>& ks,
                            const std::string& what) {
    for (int64_t k : ks) {
      for (bool largest : {true, false}) {
        ExpectKernelBytesMatchCpu(
            TopKCall(x, k, axis, largest),
            what + ", k " + std::to_string(k) + (largest ? ", largest" : ", smallest"));
      }
    }
  }
};

TEST_F(CudaResizeTopKTest, NearestResizeMatchesTheCpuInEveryCoordinateMode) {
  const Tensor x = Random({2, 3, 5, 7}, 1);
  ExpectKernelBytesMatchCpu(ResizeCall(x, "nearest", "asymmetric", "floor", {1, 1, 2, 3}),
                            "asymmetric, floor (F.interpolate nearest)");
  ExpectKernelBytesMatchCpu(
      ResizeCall(x, "nearest", "half_pixel", "round_prefer_floor", {1, 1, 1.5f, 2.5f}),
      "half_pixel, round_prefer_floor");
  ExpectKernelBytesMatchCpu(
      ResizeCall(x, "nearest", "pytorch_half_pixel", "round_prefer_ceil", {1, 1, 2.6f, 1.7f}),
      "pytorch_half_pixel, round_prefer_ceil");
  ExpectKernelBytesMatchCpu(ResizeCall(x, "nearest", "align_corners", "", {}, {2, 3, 9, 13}),
                            "align_corners, sizes");
  ExpectKernelBytesMatchCpu(ResizeCall(x, "nearest", "asymmetric", "ceil", {1, 1, 0.6f, 0.5f}),
                            "downscale, ceil");
  ExpectKernelBytesMatchCpu(
      ResizeCall(RandomInt64s({2, 3, 4}, 2, 1000), "nearest", "asymmetric", "floor", {1, 2, 1.5f}),
      "int64");
}

TEST_F(CudaResizeTopKTest, LinearResizeMatchesTheCpu) {
  // deeplabv3's and fcn's head: 21 class maps upsampled by 8.
  const Tensor head = Random({1, 21, 8, 8}, 3);
  ExpectKernelMatchesCpu(ResizeCall(head, "linear", "half_pixel", "", {1, 1, 8, 8}),
                         "NCHW by 8, half_pixel", kLinearTolerance);
  ExpectKernelMatchesCpu(ResizeCall(head, "linear", "pytorch_half_pixel", "", {}, {1, 21, 64, 64}),
                         "NCHW to sizes, pytorch_half_pixel", kLinearTolerance);
  ExpectKernelMatchesCpu(ResizeCall(head, "linear", "align_corners", "", {1, 1, 8, 8}),
                         "NCHW by 8, align_corners", kLinearTolerance);
  ExpectKernelMatchesCpu(
      ResizeCall(Random({2, 3, 4, 5, 6}, 4), "linear", "half_pixel", "", {}, {2, 3, 7, 9, 11}),
      "5-D, 3 interpolated dims", kLinearTolerance);
  ExpectKernelMatchesCpu(
      ResizeCall(Random({1, 2, 17, 13}, 5), "linear", "half_pixel", "", {1, 1, 0.5f, 0.4f}),
      "downscale", kLinearTolerance);
  // The innermost dim keeps its size (weights all 0), so only H blends.
  ExpectKernelMatchesCpu(
      ResizeCall(Random({2, 6, 5, 4}, 6), "linear", "half_pixel", "", {}, {2, 6, 10, 4}),
      "outer dim only", kLinearTolerance);
}

TEST_F(CudaResizeTopKTest, Opset9UpsampleMatchesTheCpu) {
  for (const std::string mode : {"nearest", "linear"}) {
    KernelCall call;
    call.op_type = "Upsample";
    call.opset = 9;
    call.attributes.Set("mode", mode);
    call.inputs = {Random({1, 2, 3, 4}, 7), Floats({4}, {1, 1, 2, 3})};
    call.constant_inputs = {1};
    if (mode == "nearest") {
      ExpectKernelBytesMatchCpu(call, "Upsample nearest");
    } else {
      ExpectKernelMatchesCpu(call, "Upsample linear", kLinearTolerance);
    }
  }
}

TEST_F(CudaResizeTopKTest, ResizeOfMoreDimsThanTheKernelsTakeIsUnimplemented) {
  std::vector<float> scales(9, 1.0f);
  scales.back() = 2;
  absl::StatusOr<std::vector<Tensor>> y = RunKernel(
      *gpu_,
      ResizeCall(Random({1, 1, 1, 1, 1, 1, 1, 2, 3}, 8), "nearest", "asymmetric", "floor", scales));
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(y.status().message(), HasSubstr("under_test"));
}

TEST_F(CudaResizeTopKTest, TopKMatchesTheCpuAlongContiguousAndStridedLines) {
  ExpectTopKMatchesCpu(Random({4, 37}, 9), -1, {1, 5, 37}, "[4, 37]");
  ExpectTopKMatchesCpu(Random({2, 50, 3}, 10), 1, {1, 7, 50}, "axis 1 of [2, 50, 3]");
  ExpectTopKMatchesCpu(Random({1, 9}, 11), -1, {9}, "one line");
}

// A detection head's candidates: one line of 100000 (sorted over the whole
// GPU) and two (one sort block each).
TEST_F(CudaResizeTopKTest, TopKOfLongLinesMatchesTheCpu) {
  ExpectTopKMatchesCpu(Random({1, 100000}, 12), -1, {1000}, "[1, 100000]");
  ExpectTopKMatchesCpu(Random({2, 100000}, 13), -1, {1000}, "[2, 100000]");
}

// Ties in index order; NaNs (payloads and a negative one among them) above
// every number; -0 equal to +0; infinities.
TEST_F(CudaResizeTopKTest, TopKOrdersTiesNansAndZerosAsTheCpu) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float negative_nan = FloatOfBits(0xFFC00000u);
  const float payload_nan = FloatOfBits(0x7FC00123u);
  const std::vector<float> line = {3, nan,   -0.0f, 0.0f, 3,  -inf,        inf,  negative_nan,
                                   1, -0.0f, 0.0f,  3,    -1, payload_nan, -inf, 1};
  const int64_t n = static_cast<int64_t>(line.size());
  std::vector<float> rows = line;
  rows.insert(rows.end(), line.rbegin(), line.rend());
  const Tensor two_rows = Floats({2, n}, rows);
  ExpectTopKMatchesCpu(two_rows, -1, {1, 3, 6, n}, "rows");
  // The same lines down the columns of [n, 2].
  std::vector<float> columns(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) columns[(i % n) * 2 + i / n] = rows[i];
  ExpectTopKMatchesCpu(Floats({n, 2}, columns), 0, {2, n}, "columns");
  ExpectTopKMatchesCpu(Floats({1, n}, line), -1, {4, n}, "one line");
}

TEST_F(CudaResizeTopKTest, TopKOfInt64MatchesTheCpu) {
  ExpectTopKMatchesCpu(RandomInt64s({3, 40}, 14, 10), -1, {1, 10, 40}, "ties");
  ExpectTopKMatchesCpu(RandomInt64s({2, 30, 3}, 15, 1000), 1, {5, 30}, "axis 1 of [2, 30, 3]");
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  const int64_t highest = std::numeric_limits<int64_t>::max();
  ExpectTopKMatchesCpu(Int64s({1, 8}, {0, highest, -1, lowest, 1, highest, lowest, 0}), -1, {3, 8},
                       "extremes");
}

}  // namespace
}  // namespace replicad
