// RoiAlign (roi_align_kernel.cc) beyond the ONNX backend cases
// (test_roialign_aligned_false/_true, average mode): max mode, which takes
// the largest weighted corner of each bilinear sample as ONNX Runtime does,
// against values computed here by hand; a batch index outside X's images
// refused per request naming its position; malformed inputs refused at
// plan time naming the input.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RoiAlignKernelTest : public CpuKernelTestBase {};

// X [1, 1, 2, 2] = 1 2 / 3 4, one roi over all of it, one bin of 2 x 2
// samples at (0.5, 0.5), (0.5, 1.5), (1.5, 0.5), (1.5, 1.5) (no half-pixel
// shift). Their interpolations are 2.5, 3, 3.5 and 4; their largest
// weighted corners 1, 2, 2 and 4.
TEST_F(RoiAlignKernelTest, AverageAndMaxOfTheBilinearSamples) {
  const Tensor x = Of<float>(DType::kFloat32, {1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor rois = Of<float>(DType::kFloat32, {1, 4}, {0, 0, 2, 2});
  const Tensor batch = Of<int64_t>(DType::kInt64, {1}, {0});
  Attributes attributes;
  attributes.Set("sampling_ratio", int64_t{2});
  attributes.Set("coordinate_transformation_mode", std::string("output_half_pixel"));
  absl::StatusOr<std::vector<Tensor>> y = Run("RoiAlign", {x, rois, batch}, attributes, 16);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(3.25f));
  attributes.Set("mode", std::string("max"));
  y = Run("RoiAlign", {x, rois, batch}, attributes, 16);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(4.0f));
}

TEST_F(RoiAlignKernelTest, BatchIndicesOutsideXAndMalformedInputsAreRefused) {
  const Tensor x = Of<float>(DType::kFloat32, {1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor rois = Of<float>(DType::kFloat32, {2, 4}, {0, 0, 2, 2, 0, 0, 1, 1});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("RoiAlign", {x, rois, Of<int64_t>(DType::kInt64, {2}, {0, 1})}, Attributes(), 16);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("'batch_indices' holds 1 at position 1"));
  y = Run("RoiAlign",
          {x, Of<float>(DType::kFloat32, {2, 3}, {0, 0, 1, 0, 0, 1}),
           Of<int64_t>(DType::kInt64, {2}, {0, 0})},
          Attributes(), 16);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("input 1 'rois' must be float32 [num_rois, 4]"));
}

// A hostile request's work is bounded: a roi whose adaptive grid
// (sampling_ratio 0) passes 65536 samples per bin is refused naming its row
// (one bin of it would have taken 1e12 samples), as is a sampling_ratio
// past 256 and an X without rows to sample; a roi that is merely large
// still runs.
TEST_F(RoiAlignKernelTest, WorkPerBinIsBoundedAndAnEmptyPlaneRefused) {
  const Tensor x = Of<float>(DType::kFloat32, {1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor batch = Of<int64_t>(DType::kInt64, {2}, {0, 0});
  const Tensor huge = Of<float>(DType::kFloat32, {2, 4}, {0, 0, 2, 2, 0, 0, 1e12f, 1e12f});
  absl::StatusOr<std::vector<Tensor>> y = Run("RoiAlign", {x, huge, batch}, Attributes(), 16);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("input 1 'rois' row 1"));
  EXPECT_THAT(y.status().message(), HasSubstr("at most 65536"));
  const Tensor large = Of<float>(DType::kFloat32, {2, 4}, {0, 0, 2, 2, 0, 0, 200, 200});
  y = Run("RoiAlign", {x, large, batch}, Attributes(), 16);
  EXPECT_TRUE(y.ok()) << y.status();  // 200 x 200 samples in its one bin.

  Attributes ratio;
  ratio.Set("sampling_ratio", int64_t{257});
  y = Run("RoiAlign", {x, large, batch}, ratio, 16);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("'sampling_ratio' must be at most 256"));

  y = Run("RoiAlign", {Tensor::Host(DType::kFloat32, {1, 1, 0, 2}), large, batch}, Attributes(),
          16);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("input 0 'X' must have rows and columns"));
}

}  // namespace
}  // namespace replicad
