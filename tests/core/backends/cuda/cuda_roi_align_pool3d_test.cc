// RoiAlign (cuda_roi_align_kernel.cc, roi_align.cu), 3-D MaxPool and
// AveragePool and an int8 model's 2-D MaxPool (cuda_pool3d_kernel.cc,
// pool3d.cu) and 3-D ConvTranspose
// (cuDNN's Nd descriptors, cudnn_conv_kernel.cc) on CUDA against the CPU
// kernels. RoiAlign and the pools compute with the CPU kernels' own
// functions (core/ops/roi_align_samples.h, core/ops/pool3d_window.h), every
// step rounded alike, so their outputs must be the CPU's bytes (NaN as
// quiet_NaN's bits, the sign of zero included); no input here is denormal,
// which CPU slots flush. ConvTranspose sums in cuDNN's order and is compared
// within 1e-4 * (1 + |cpu|) per element, as cuda_kernels_test's
// convolutions. A batch index out of range fails both backends with
// InvalidArgument and the same message. Skips without a GPU (CTest label
// gpu).

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/testing/cpu_and_gpu_test.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::Floats;
using testing::Int64s;
using testing::KernelCall;
using testing::RunKernel;

constexpr double kConvTolerance = 1e-4;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor Random(Shape shape, uint64_t seed) { return testing::RandomTensor(std::move(shape), seed); }

// `x` with `value` written at each of the flat positions `at`.
Tensor With(Tensor x, const std::vector<int64_t>& at, float value) {
  for (int64_t i : at) x.data<float>()[i] = value;
  return x;
}

// X [3, 4, 10, 12] (H 10, W 12) for RoiAlign.
const Shape kImages = {3, 4, 10, 12};

// Rois in X's coordinates times 2 (spatial_scale 0.5): inside, over each
// edge, tiny, inverted (x2 < x1), wholly outside, the whole image.
Tensor EdgeRois() {
  return Floats({7, 4}, {1,   2,   9,    7,     //
                         -4,  -3,  6,    5,     //
                         8,   6,   30,   26,    //
                         5,   5,   5.5f, 5.2f,  //
                         10,  12,  3,    4,     //
                         -20, -20, -12,  -15,   //
                         0,   0,   24,   20});
}
Tensor EdgeBatch() { return Int64s({7}, {0, 2, 1, 1, 0, 2, 1}); }

// `count` rois with corners anywhere in [-8, 32) (so partly outside the
// 24 x 20 image), either way round, from a fixed sequence.
Tensor RandomRois(int64_t count, uint64_t seed) {
  Tensor rois = Random({count, 4}, seed);  // In [-1, 1).
  for (int64_t i = 0; i < count * 4; ++i) rois.data<float>()[i] = 12 + 20 * rois.data<float>()[i];
  return rois;
}

// Images 0, 1, 2, 0, 1, ... for `count` rois.
Tensor EveryImage(int64_t count) {
  std::vector<int64_t> batch(count);
  for (int64_t i = 0; i < count; ++i) batch[i] = i % 3;
  return Int64s({count}, batch);
}

KernelCall RoiAlignCall(Tensor x, Tensor rois, Tensor batch, const std::string& mode,
                        const std::string& transformation, int64_t sampling_ratio, int opset = 16) {
  KernelCall call;
  call.op_type = "RoiAlign";
  call.opset = opset;
  call.attributes.Set("mode", mode);
  if (!transformation.empty()) {
    call.attributes.Set("coordinate_transformation_mode", transformation);
  }
  call.attributes.Set("sampling_ratio", sampling_ratio);
  call.attributes.Set("spatial_scale", 0.5f);
  call.attributes.Set("output_height", int64_t{3});
  call.attributes.Set("output_width", int64_t{4});
  call.inputs = {std::move(x), std::move(rois), std::move(batch)};
  return call;
}

// A 3-D pooling of `x` over `kernel`; the other attributes as given (pads
// in ONNX's order, d/h/w begin then end).
KernelCall PoolCall(const std::string& op, Tensor x, std::vector<int64_t> kernel,
                    std::vector<int64_t> strides, std::vector<int64_t> pads,
                    std::vector<int64_t> dilations, int64_t ceil_mode,
                    int64_t count_include_pad = 0) {
  KernelCall call;
  call.op_type = op;
  call.opset = 19;  // AveragePool's dilations.
  call.attributes.Set("kernel_shape", std::move(kernel));
  call.attributes.Set("strides", std::move(strides));
  call.attributes.Set("pads", std::move(pads));
  call.attributes.Set("dilations", std::move(dilations));
  call.attributes.Set("ceil_mode", ceil_mode);
  if (op == "AveragePool") call.attributes.Set("count_include_pad", count_include_pad);
  call.inputs = {std::move(x)};
  return call;
}

KernelCall ConvTransposeCall(Tensor x, Tensor w, std::optional<Tensor> b,
                             std::vector<int64_t> strides, std::vector<int64_t> pads,
                             std::vector<int64_t> dilations, std::vector<int64_t> output_padding,
                             int64_t group) {
  KernelCall call;
  call.op_type = "ConvTranspose";
  call.attributes.Set("strides", std::move(strides));
  call.attributes.Set("pads", std::move(pads));
  call.attributes.Set("dilations", std::move(dilations));
  call.attributes.Set("output_padding", std::move(output_padding));
  call.attributes.Set("group", group);
  call.inputs = {std::move(x), std::move(w), std::move(b)};
  return call;
}

using CudaRoiAlignPool3dTest = testing::CpuAndGpuTest;

TEST_F(CudaRoiAlignPool3dTest, RoiAlignGivesTheCpuBytes) {
  for (const std::string mode : {"avg", "max"}) {
    for (const std::string transformation : {"half_pixel", "output_half_pixel"}) {
      for (const int64_t sampling_ratio : {0, 2}) {
        const std::string what =
            mode + ", " + transformation + ", sampling_ratio " + std::to_string(sampling_ratio);
        ExpectKernelBytesMatchCpu(RoiAlignCall(Random(kImages, 1), EdgeRois(), EdgeBatch(), mode,
                                               transformation, sampling_ratio),
                                  what + ", edge rois");
        ExpectKernelBytesMatchCpu(
            RoiAlignCall(Random(kImages, 2), RandomRois(40, 3), EveryImage(40), mode,
                         transformation, sampling_ratio),
            what + ", random rois");
      }
    }
  }
  // Opset 10: output_half_pixel without the attribute.
  ExpectKernelBytesMatchCpu(
      RoiAlignCall(Random(kImages, 4), EdgeRois(), EdgeBatch(), "avg", "", 0, /*opset=*/10),
      "opset 10");
  // batch_indices known when the plan is made.
  KernelCall known = RoiAlignCall(Random(kImages, 5), EdgeRois(), EdgeBatch(), "max", "", 2);
  known.constant_inputs = {2};
  ExpectKernelBytesMatchCpu(known, "batch_indices known");
}

TEST_F(CudaRoiAlignPool3dTest, RoiAlignKeepsNaNAndInfinityAsTheCpu) {
  // A NaN at each image's first element (which samples outside the image
  // read, times 0), an infinity inside image 2 and a -0 in image 1.
  const int64_t image = 4 * 10 * 12;
  Tensor x = With(Random(kImages, 6), {0, image, 2 * image}, kNaN);
  x = With(std::move(x), {2 * image + 3 * 12 + 4}, kInf);
  x = With(std::move(x), {image + 5 * 12 + 5}, -0.0f);
  for (const std::string mode : {"avg", "max"}) {
    ExpectKernelBytesMatchCpu(RoiAlignCall(x, EdgeRois(), EdgeBatch(), mode, "half_pixel", 0),
                              mode + ", NaN and infinity");
  }
}

TEST_F(CudaRoiAlignPool3dTest, RoiAlignBatchIndexOutOfRangeIsRefusedAsOnTheCpu) {
  const Tensor rois = Floats({3, 4}, {0, 0, 8, 8, 2, 2, 10, 10, 4, 4, 6, 6});
  KernelCall bad = RoiAlignCall(Random(kImages, 7), rois, Int64s({3}, {0, 3, 1}), "avg", "", 0);
  KernelCall good = bad;
  good.inputs[2] = Int64s({3}, {0, 2, 1});
  ExpectRefusedAlike(bad, good, "holds 3 at position 1; expected an image of X's 3");
  KernelCall negative = bad;
  negative.inputs[2] = Int64s({3}, {0, 1, -1});
  ExpectRefusedAlike(negative, good, "holds -1 at position 2; expected an image of X's 3");
  // Known when planned: the GPU refuses when the kernel is built, the CPU
  // when it runs; the same message.
  bad.constant_inputs = {2};
  good.constant_inputs = {2};
  ExpectRefusedAlike(bad, good, "holds 3 at position 1; expected an image of X's 3");
}

// A roi whose adaptive grid passes 65536 samples per bin is refused before
// anything is launched (one thread a bin would run for hours), with the
// CPU's message; a fixed sampling_ratio reads no roi back.
TEST_F(CudaRoiAlignPool3dTest, RoiAlignOfAHugeRoiIsRefusedAsOnTheCpu) {
  const Tensor huge = Floats({2, 4}, {0, 0, 8, 8, 0, 0, 1e12f, 1e12f});
  KernelCall bad = RoiAlignCall(Random(kImages, 7), huge, Int64s({2}, {0, 1}), "avg", "", 0);
  KernelCall good = bad;
  good.inputs[1] = Floats({2, 4}, {0, 0, 8, 8, 1, 1, 300, 300});
  ExpectRefusedAlike(bad, good, "input 1 'rois' row 1");
  ExpectKernelBytesMatchCpu(
      RoiAlignCall(Random(kImages, 7), huge, Int64s({2}, {0, 1}), "avg", "", 2),
      "the huge roi at a fixed sampling_ratio");
}

TEST_F(CudaRoiAlignPool3dTest, MaxPool3dGivesTheCpuBytes) {
  const Shape clip = {2, 3, 7, 9, 8};
  ExpectKernelBytesMatchCpu(
      PoolCall("MaxPool", Random(clip, 8), {3, 3, 3}, {2, 2, 2}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 0),
      "padded, strided");
  ExpectKernelBytesMatchCpu(
      PoolCall("MaxPool", Random(clip, 9), {2, 3, 3}, {2, 2, 3}, {0, 1, 1, 1, 1, 0}, {2, 1, 2}, 1),
      "dilated, uneven pads, ceil_mode");
  ExpectKernelBytesMatchCpu(
      PoolCall("MaxPool", Random(clip, 10), {1, 3, 3}, {1, 2, 2}, {0, 0, 0, 0, 0, 0}, {1, 1, 1}, 1),
      "a stem's pooling, ceil_mode");
  // NaN anywhere in a window gives NaN; -0 and infinities stay themselves.
  Tensor x = With(Random(clip, 11), {0, 100, 431, 1000}, kNaN);
  x = With(std::move(x), {7, 333}, -kInf);
  x = With(std::move(x), {55, 800}, kInf);
  x = With(std::move(x), {12, 13, 14}, -0.0f);
  ExpectKernelBytesMatchCpu(
      PoolCall("MaxPool", x, {3, 3, 3}, {2, 2, 2}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 1),
      "NaN, infinities and -0");
}

// An int8 model's 2-D MaxPool (the QOperator form's, int8 or uint8) gives
// the CPU's bytes: a stem's pooling, padded with ceil_mode, and dilated.
TEST_F(CudaRoiAlignPool3dTest, Int8MaxPoolGivesTheCpuBytes) {
  for (DType type : {DType::kInt8, DType::kUint8}) {
    Tensor x = Tensor::Host(type, {2, 3, 11, 12});
    std::mt19937 rng(21);
    std::uniform_int_distribution<int> pick(0, 255);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      static_cast<uint8_t*>(x.raw_data())[i] = static_cast<uint8_t>(pick(rng));
    }
    const std::string what = type == DType::kInt8 ? "int8" : "uint8";
    KernelCall stem = PoolCall("MaxPool", x, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0);
    ExpectKernelBytesMatchCpu(stem, what + ", a stem's pooling");
    ExpectKernelBytesMatchCpu(PoolCall("MaxPool", x, {2, 3}, {2, 2}, {0, 1, 1, 0}, {1, 1}, 1),
                              what + ", uneven pads, ceil_mode");
    ExpectKernelBytesMatchCpu(PoolCall("MaxPool", x, {3, 2}, {1, 2}, {0, 0, 0, 0}, {2, 3}, 0),
                              what + ", dilated");
  }
}

TEST_F(CudaRoiAlignPool3dTest, AveragePool3dGivesTheCpuBytes) {
  const Shape clip = {2, 3, 7, 9, 8};
  for (const int64_t include_pad : {0, 1}) {
    const std::string what = "count_include_pad " + std::to_string(include_pad);
    ExpectKernelBytesMatchCpu(PoolCall("AveragePool", Random(clip, 12), {3, 3, 3}, {2, 2, 2},
                                       {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 0, include_pad),
                              what + ", padded, strided");
    // The last windows reach past pads_end (ceil_mode), which ONNX's divisor
    // leaves out with count_include_pad, unlike cuDNN's.
    ExpectKernelBytesMatchCpu(PoolCall("AveragePool", Random(clip, 13), {3, 2, 3}, {2, 2, 2},
                                       {1, 0, 1, 0, 1, 0}, {1, 1, 1}, 1, include_pad),
                              what + ", uneven pads, ceil_mode");
    ExpectKernelBytesMatchCpu(PoolCall("AveragePool", Random(clip, 14), {2, 2, 3}, {1, 3, 2},
                                       {1, 1, 2, 1, 1, 2}, {2, 3, 1}, 1, include_pad),
                              what + ", dilated, ceil_mode");
  }
}

TEST_F(CudaRoiAlignPool3dTest, ConvTranspose3dMatchesTheCpu) {
  const Tensor x = Random({2, 4, 3, 5, 6}, 15);
  ExpectKernelMatchesCpu(ConvTransposeCall(x, Random({4, 3, 3, 3, 3}, 16), Random({3}, 17),
                                           {2, 2, 2}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1),
                         "strided, padded, output_padding, bias", kConvTolerance);
  ExpectKernelMatchesCpu(ConvTransposeCall(x, Random({4, 2, 3, 3, 3}, 18), std::nullopt, {1, 2, 1},
                                           {2, 1, 1, 2, 1, 1}, {2, 1, 1}, {0, 1, 0}, 2),
                         "grouped, dilated, no bias", kConvTolerance);
  ExpectKernelMatchesCpu(ConvTransposeCall(x, Random({4, 4, 2, 3, 2}, 19), Random({4}, 20),
                                           {1, 1, 1}, {0, 0, 0, 0, 0, 0}, {2, 2, 3}, {0, 0, 0}, 1),
                         "dilated, unpadded, bias", kConvTolerance);
}

TEST_F(CudaRoiAlignPool3dTest, ConvTranspose3dWithUnevenPadsIsUnimplemented) {
  // pads_end differs from pads_begin by more than output_padding allows.
  const KernelCall call =
      ConvTransposeCall(Random({1, 2, 3, 4, 4}, 21), Random({2, 2, 3, 3, 3}, 22), std::nullopt,
                        {1, 1, 1}, {0, 0, 0, 1, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1);
  ASSERT_TRUE(RunKernel(*cpu_, call).ok());
  absl::StatusOr<std::vector<Tensor>> gpu = RunKernel(*gpu_, call);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented) << gpu.status();
  EXPECT_NE(gpu.status().message().find("pads [0,0,0,1,1,1]"), std::string::npos) << gpu.status();
}

}  // namespace
}  // namespace replicad
