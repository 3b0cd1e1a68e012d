// 3-D MaxPool and AveragePool (pool3d_kernel.cc) beyond what the ONNX backend
// cases (test_maxpool_3d_default, test_averagepool_3d_default) and the parity
// test's blocks_3d (padding, strides, ceil_mode, count_include_pad,
// against PyTorch) cover: a NaN anywhere in a window makes that output NaN
// and no other, as PyTorch's max_pool3d does; dilations, against values
// written here; malformed attributes refused naming the attribute.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/pool3d_window.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Pool3dKernelTest : public CpuKernelTestBase {};

// X [1, 1, 2, 2, 4]: 0..15, one NaN at (1, 0, 1).
Tensor Ramp(bool with_nan) {
  std::vector<float> values(16);
  for (int i = 0; i < 16; ++i) values[i] = static_cast<float>(i);
  if (with_nan) values[9] = std::numeric_limits<float>::quiet_NaN();
  return Of<float>(DType::kFloat32, {1, 1, 2, 2, 4}, values);
}

TEST_F(Pool3dKernelTest, MaxPoolingKeepsANaNInTheWindowsThatReadIt) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 2, 2});
  attributes.Set("strides", std::vector<int64_t>{1, 1, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 1, 1, 1, 2));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(13, 15));
  y = Run("MaxPool", {Ramp(true)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> out = Values<float>((*y)[0]);
  EXPECT_TRUE(std::isnan(out[0]));  // Its window holds element 9.
  EXPECT_EQ(out[1], 15);
}

TEST_F(Pool3dKernelTest, DilationsAndCountedPadsMatchValuesWrittenHere) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{1, 1, 2});
  attributes.Set("dilations", std::vector<int64_t>{1, 1, 3});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // Along W (4): windows {0, 3}; one output per (d, h) row.
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(3, 7, 11, 15));
  attributes.Set("dilations", std::vector<int64_t>{1, 1, 1});
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 1, 4});
  attributes.Set("pads", std::vector<int64_t>{0, 0, 1, 0, 0, 1});
  attributes.Set("count_include_pad", int64_t{1});
  y = Run("AveragePool", {Ramp(false)}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // W padded to 6, windows of 4 at 0, 1, 2: sums over 8 elements (2 in D)
  // counting the pads: (0+1+2 + 8+9+10) / 8, (0+1+2+3 + 8+...+11) / 8, ...
  EXPECT_THAT(Values<float>((*y)[0]),
              ElementsAre(30.0f / 8, 44.0f / 8, 36.0f / 8, 54.0f / 8, 76.0f / 8, 60.0f / 8));
}

// An int8 model's 2-D MaxPool on a CPU slot (oneDNN's int8 pooling) gives
// what Pool3dIntegerMax computes over Pool3dWindowOf2d's window: the
// function the CUDA kernel runs, so a GPU slot gives the CPU's bytes.
TEST_F(Pool3dKernelTest, Int8MaxPoolEqualsTheSharedWindowFunction) {
  struct Case {
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil_mode;
  };
  const Case cases[] = {{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0},
                        {{2, 3}, {2, 2}, {0, 1, 1, 0}, {1, 1}, 1},
                        {{3, 2}, {1, 2}, {0, 0, 0, 0}, {2, 3}, 0}};
  for (DType type : {DType::kInt8, DType::kUint8}) {
    Tensor x = Tensor::Host(type, {2, 3, 11, 12});
    std::mt19937 rng(21);
    std::uniform_int_distribution<int> pick(0, 255);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      static_cast<uint8_t*>(x.raw_data())[i] = static_cast<uint8_t>(pick(rng));
    }
    for (const Case& c : cases) {
      Attributes attributes;
      attributes.Set("kernel_shape", c.kernel);
      attributes.Set("strides", c.strides);
      attributes.Set("pads", c.pads);
      attributes.Set("dilations", c.dilations);
      attributes.Set("ceil_mode", c.ceil_mode);
      absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {x}, attributes, /*opset=*/19);
      ASSERT_TRUE(y.ok()) << y.status();
      Window2d window;
      const Shape& out = (*y)[0].shape();
      for (int d = 0; d < 2; ++d) {
        window.kernel[d] = c.kernel[d];
        window.strides[d] = c.strides[d];
        window.dilations[d] = c.dilations[d];
        window.pads_begin[d] = c.pads[d];
        window.pads_end[d] = c.pads[2 + d];
        window.output[d] = out[2 + d];
      }
      const Pool3dWindow w = Pool3dWindowOf2d(window, x.shape());
      const int64_t in_plane = 11 * 12, out_plane = out[2] * out[3];
      for (int64_t plane = 0; plane < 6; ++plane) {
        for (int64_t oh = 0; oh < out[2]; ++oh) {
          for (int64_t ow = 0; ow < out[3]; ++ow) {
            const int64_t at = plane * out_plane + oh * out[3] + ow;
            if (type == DType::kInt8) {
              const int8_t want =
                  Pool3dIntegerMax(w, x.data<int8_t>() + plane * in_plane, 0, oh, ow, int8_t{-128});
              ASSERT_EQ((*y)[0].data<int8_t>()[at], want) << "int8, element " << at;
            } else {
              const uint8_t want =
                  Pool3dIntegerMax(w, x.data<uint8_t>() + plane * in_plane, 0, oh, ow, uint8_t{0});
              ASSERT_EQ((*y)[0].data<uint8_t>()[at], want) << "uint8, element " << at;
            }
          }
        }
      }
    }
  }
}

TEST_F(Pool3dKernelTest, MalformedAttributesAreRefusedNamingThem) {
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("MaxPool", {Ramp(false)}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("'kernel_shape' must hold 3 positive values"));
  attributes.Set("kernel_shape", std::vector<int64_t>{1, 1, 1});
  attributes.Set("count_include_pad", int64_t{2});
  y = Run("AveragePool", {Ramp(false)}, attributes);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(y.status().message(), HasSubstr("'count_include_pad' must be 0 or 1, received 2"));
}

}  // namespace
}  // namespace replicad
