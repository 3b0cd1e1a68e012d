// The CPU kernels of the data-movement operators (Transpose, Concat, Gather,
// Slice, Pad, Expand, Squeeze, Unsqueeze, Shape, ConstantOfShape, Cast) and of
// ConvTranspose and AveragePool against hand-computed or plain-loop
// references, for the forms the ONNX conformance data misses: int64 data,
// high ranks, negative steps, reflect and edge padding, cropping pads,
// grouped and dilated transposed convolution, ceil_mode with
// count_include_pad, and index errors found at run time.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/backends/cpu/cpu_kernel_test_base.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

Tensor Floats(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

// 0, 1, 2, ... as int64 of `shape`.
Tensor Iota(Shape shape) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int64_t>()[i] = i;
  return t;
}

// The multi-index of row-major element `flat` of `shape`.
std::vector<int64_t> Unflatten(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

class DataMovementKernelsTest : public CpuKernelTestBase {
 protected:
  // x cast to `to`; the cast must succeed and give that dtype.
  Tensor CastTo(const Tensor& x, DType to) {
    Attributes attributes;
    attributes.Set("to", static_cast<int64_t>(to));
    absl::StatusOr<std::vector<Tensor>> y = Run("Cast", {x}, attributes);
    EXPECT_TRUE(y.ok()) << y.status();
    if (!y.ok()) return Tensor::Host(to, x.shape());
    EXPECT_EQ((*y)[0].dtype(), to);
    return (*y)[0];
  }
};

// out[i_0, ..., i_{r-1}] = in[j] with j[perm[d]] = i_d.
template <typename T>
void ExpectTransposed(const Tensor& in, const Tensor& out, const std::vector<int64_t>& perm) {
  ASSERT_EQ(out.rank(), in.rank());
  for (size_t d = 0; d < perm.size(); ++d) ASSERT_EQ(out.shape()[d], in.shape()[perm[d]]);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = Unflatten(out.shape(), i);
    std::vector<int64_t> source(index.size());
    for (size_t d = 0; d < perm.size(); ++d) source[perm[d]] = index[d];
    ASSERT_EQ(out.data<T>()[i], in.data<T>()[Offset(in.shape(), source)]) << "element " << i;
  }
}

TEST_F(DataMovementKernelsTest, TransposeRank5Float32) {
  const Tensor x = Random({2, 3, 1, 4, 5}, 1);
  Attributes attributes;
  const std::vector<int64_t> perm{4, 0, 3, 1, 2};
  attributes.Set("perm", perm);
  absl::StatusOr<std::vector<Tensor>> y = Run("Transpose", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(5, 2, 4, 3, 1));
  ExpectTransposed<float>(x, (*y)[0], perm);
}

TEST_F(DataMovementKernelsTest, TransposeInt64DefaultPermReverses) {
  Tensor x = Iota({2, 3, 4});
  x.data<int64_t>()[5] = std::numeric_limits<int64_t>::min() + 7;  // Both halves matter.
  absl::StatusOr<std::vector<Tensor>> y = Run("Transpose", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectTransposed<int64_t>(x, (*y)[0], {2, 1, 0});
}

// oneDNN reorders take at most 12 dims; int64 uses one for its halves, so an
// int64 rank-12 transpose takes the index-map path.
TEST_F(DataMovementKernelsTest, TransposeRank12Int64BeyondOneDnnDims) {
  const Tensor x = Iota({2, 1, 2, 1, 3, 1, 2, 1, 1, 2, 1, 2});
  const std::vector<int64_t> perm{11, 4, 0, 9, 2, 6, 1, 3, 5, 7, 8, 10};
  Attributes attributes;
  attributes.Set("perm", perm);
  absl::StatusOr<std::vector<Tensor>> y = Run("Transpose", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectTransposed<int64_t>(x, (*y)[0], perm);
}

TEST_F(DataMovementKernelsTest, SliceNegativeStepsOnInt64) {
  // data[3:-100:-2, 10:0:-3] of a 4x5 iota: rows 3 and 1, columns 4 and 1.
  const Tensor x = Iota({4, 5});
  const Tensor starts = Int64s({2}, {-1, 10});
  const Tensor ends = Int64s({2}, {-100, 0});
  const Tensor axes = Int64s({2}, {0, -1});
  const Tensor steps = Int64s({2}, {-2, -3});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Slice", {x, starts, ends, axes, steps}, Attributes(), 13, {1, 2, 3, 4});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(19, 16, 9, 6));
}

TEST_F(DataMovementKernelsTest, SliceClampsHugeEndAndDefaultsAxes) {
  const Tensor x = Iota({10});
  const Tensor starts = Int64s({1}, {1});
  const Tensor ends = Int64s({1}, {std::numeric_limits<int64_t>::max()});
  const Tensor steps = Int64s({1}, {3});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Slice", {x, starts, ends, std::nullopt, steps}, Attributes(), 13, {1, 2, 4});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(1, 4, 7));
}

// Where the innermost dims read one contiguous run of the input, the kernel
// copies whole runs: a channel slice of N images (one run per image), of one
// image (one run, split across the slot's threads when large), and padding
// of a leading dim (whole runs of the fill value).
TEST_F(DataMovementKernelsTest, SliceAndPadCopyWholeContiguousRuns) {
  for (const Shape& shape : {Shape{2, 6, 3, 4}, Shape{1, 176, 28, 28}}) {
    const Tensor x = Random(shape, 5);
    const int64_t channels = shape[1] / 2;
    absl::StatusOr<std::vector<Tensor>> y =
        Run("Slice", {x, Int64s({1}, {channels}), Int64s({1}, {shape[1]}), Int64s({1}, {1})},
            Attributes(), 13, {1, 2, 3});
    ASSERT_TRUE(y.ok()) << y.status();
    const Tensor& out = (*y)[0];
    ASSERT_THAT(out.shape(), ElementsAre(shape[0], channels, shape[2], shape[3]));
    const int64_t plane = shape[2] * shape[3];
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      const int64_t n = i / (channels * plane);
      const int64_t rest = i % (channels * plane);
      ASSERT_EQ(out.data<float>()[i], x.data<float>()[(n * shape[1] + channels) * plane + rest])
          << "element " << i << " of " << ShapeToString(shape);
    }
  }
  const Tensor x = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  Attributes constant;
  constant.Set("mode", std::string("constant"));
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Pad", {x, Int64s({4}, {1, 0, 2, 0}), Floats({}, {7})}, constant, 13, {1, 2});
  ASSERT_TRUE(y.ok()) << y.status();
  // numpy.pad(x, ((1, 2), (0, 0)), constant_values=7).
  EXPECT_THAT(Values<float>((*y)[0]),
              ElementsAreArray({7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, 7}));
}

TEST_F(DataMovementKernelsTest, PadReflect2d) {
  const Tensor x = Floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor pads = Int64s({4}, {1, 2, 1, 2});
  Attributes attributes;
  attributes.Set("mode", std::string("reflect"));
  absl::StatusOr<std::vector<Tensor>> y = Run("Pad", {x, pads}, attributes, 13, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  // numpy.pad(x, ((1, 1), (2, 2)), 'reflect').
  EXPECT_THAT((*y)[0].shape(), ElementsAre(4, 7));
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAreArray({6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1,
                                                        6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1}));
}

TEST_F(DataMovementKernelsTest, PadReflectLongerThanTheDimRepeats) {
  const Tensor x = Int64s({3}, {1, 2, 3});
  const Tensor pads = Int64s({2}, {5, 4});
  Attributes attributes;
  attributes.Set("mode", std::string("reflect"));
  absl::StatusOr<std::vector<Tensor>> y = Run("Pad", {x, pads}, attributes, 13, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  // numpy.pad([1, 2, 3], (5, 4), 'reflect').
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3));
}

TEST_F(DataMovementKernelsTest, PadEdgeInt64) {
  const Tensor x = Int64s({2, 2}, {1, 2, 3, 4});
  const Tensor pads = Int64s({4}, {0, 1, 2, 0});
  Attributes attributes;
  attributes.Set("mode", std::string("edge"));
  absl::StatusOr<std::vector<Tensor>> y = Run("Pad", {x, pads}, attributes, 13, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(4, 3));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(1, 1, 2, 3, 3, 4, 3, 3, 4, 3, 3, 4));
}

TEST_F(DataMovementKernelsTest, PadNegativePadsCropBeforePadding) {
  // Crop row 0 and the last two columns, add one column of 9 in front.
  const Tensor x = Iota({3, 4});
  const Tensor pads = Int64s({4}, {-1, 1, 0, -2});
  const Tensor value = Int64s({}, {9});
  absl::StatusOr<std::vector<Tensor>> y = Run("Pad", {x, pads, value}, Attributes(), 13, {1, 2});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 3));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(9, 4, 5, 9, 8, 9));

  // Reflect mirrors the cropped data: [1, 2, 3, 4] of iota(5), then 3, 2.
  Attributes reflect;
  reflect.Set("mode", std::string("reflect"));
  y = Run("Pad", {Iota({5}), Int64s({2}, {-1, 2})}, reflect, 13, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(1, 2, 3, 4, 3, 2));
}

TEST_F(DataMovementKernelsTest, PadAxesInputFromOpset18) {
  const Tensor x = Floats({2, 2}, {1, 2, 3, 4});
  const Tensor pads = Int64s({2}, {1, 0});
  const Tensor value = Floats({}, {-1});
  const Tensor axes = Int64s({1}, {-1});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Pad", {x, pads, value, axes}, Attributes(), 18, {1, 2, 3});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(-1, 1, 2, -1, 3, 4));
}

TEST_F(DataMovementKernelsTest, ExpandBroadcastsBothWays) {
  // [3, 1] against [2, 1, 4] gives [2, 3, 4]: the input's 1 grows to 4 and
  // the shape's 1 takes the input's 3.
  const Tensor x = Int64s({3, 1}, {7, 8, 9});
  absl::StatusOr<std::vector<Tensor>> y =
      Run("Expand", {x, Int64s({3}, {2, 1, 4})}, Attributes(), 13, {1});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_THAT((*y)[0].shape(), ElementsAre(2, 3, 4));
  for (int64_t i = 0; i < 24; ++i) {
    EXPECT_EQ((*y)[0].data<int64_t>()[i], 7 + (i / 4) % 3) << "element " << i;
  }
}

TEST_F(DataMovementKernelsTest, ConcatThreeInt64InputsOneEmpty) {
  const Tensor a = Iota({2, 1, 2});
  const Tensor b = Int64s({2, 0, 2}, {});
  const Tensor c = Int64s({2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17});
  Attributes attributes;
  attributes.Set("axis", int64_t{-2});
  absl::StatusOr<std::vector<Tensor>> y = Run("Concat", {a, b, c}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 3, 2));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17));
}

// Over 256 KiB the copy is split into one contiguous share of the output
// per thread, shares that start and end inside blocks of unequal sizes.
TEST_F(DataMovementKernelsTest, LargeConcatSplitAcrossThreadsMatchesBlockByBlock) {
  const Tensor a = Iota({3, 5, 997});
  const Tensor b = Iota({3, 0, 997});
  const Tensor c = Iota({3, 17, 997});
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y = Run("Concat", {a, b, c}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_THAT((*y)[0].shape(), ElementsAre(3, 22, 997));
  ASSERT_GE((*y)[0].byte_size(), size_t{256} << 10);
  const int64_t* got = (*y)[0].data<int64_t>();
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t ch = 0; ch < 22; ++ch) {
      for (int64_t i = 0; i < 997; ++i) {
        const int64_t expected = ch < 5 ? (n * 5 + ch) * 997 + i : (n * 17 + ch - 5) * 997 + i;
        ASSERT_EQ(got[(n * 22 + ch) * 997 + i], expected) << n << ", " << ch << ", " << i;
      }
    }
  }
}

TEST_F(DataMovementKernelsTest, GatherInt64DataNegativeIndicesAxis1) {
  const Tensor data = Iota({2, 3, 2});
  const Tensor indices = Int64s({2, 2}, {-1, 0, 1, -3});
  Attributes attributes;
  attributes.Set("axis", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y = Run("Gather", {data, indices}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(2, 2, 2, 2));
  // Row n, index k reads data[n, k, :] = {6n + 2k, 6n + 2k + 1}.
  EXPECT_THAT(Values<int64_t>((*y)[0]),
              ElementsAre(4, 5, 0, 1, 2, 3, 0, 1, 10, 11, 6, 7, 8, 9, 6, 7));
}

TEST_F(DataMovementKernelsTest, GatherIndexOutOfRangeFailsAtRunNamingNodeAndIndex) {
  const Tensor data = Random({3, 2}, 2);
  const Tensor indices = Int64s({2}, {1, 3});
  absl::StatusOr<std::vector<Tensor>> y = Run("Gather", {data, indices}, Attributes());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(y.status().message()),
              AllOf(HasSubstr("Gather node 'k1'"), HasSubstr("holds 3 at position 1"),
                    HasSubstr("[-3, 2]")));
}

TEST_F(DataMovementKernelsTest, CastTruncatesTowardsZeroAndBack) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Floats({6}, {2.9f, -2.9f, 0.5f, -0.0f, 1e20f, nan});
  Attributes to_int;
  to_int.Set("to", int64_t{7});
  absl::StatusOr<std::vector<Tensor>> y = Run("Cast", {x}, to_int);
  ASSERT_TRUE(y.ok()) << y.status();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(2, -2, 0, 0, kMin, kMin));

  Attributes to_float;
  to_float.Set("to", int64_t{1});
  y = Run("Cast", {Int64s({3}, {-5, 16777217, 0})}, to_float);
  ASSERT_TRUE(y.ok()) << y.status();
  // 2^24 + 1 rounds to the nearest float, 2^24.
  EXPECT_THAT(Values<float>((*y)[0]), ElementsAre(-5.0f, 16777216.0f, 0.0f));
}

// Casts between every pair of the engine's dtypes, as numpy and ONNX Runtime
// give them: to bool, anything non-zero (NaN too) is true; from bool, 0 or
// 1 (a byte of 2 from a client counts as true); integers narrow by wrapping;
// a float out of int32's range becomes INT32_MIN, and int8 takes its low byte.
TEST_F(DataMovementKernelsTest, CastBetweenBoolAndTheIntegerTypes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor floats = Floats({6}, {0.0f, -0.0f, 2.5f, nan, -300.7f, 3e9f});
  EXPECT_THAT(Values<uint8_t>(CastTo(floats, DType::kBool)), ElementsAre(0, 0, 1, 1, 1, 1));
  const int32_t kInt32Min = std::numeric_limits<int32_t>::min();
  EXPECT_THAT(Values<int32_t>(CastTo(floats, DType::kInt32)),
              ElementsAre(0, 0, 2, kInt32Min, -300, kInt32Min));
  // -300 is 0xFED4 in two's complement: its low byte 0xD4 is -44 as int8, 212 as uint8.
  EXPECT_THAT(Values<int8_t>(CastTo(floats, DType::kInt8)), ElementsAre(0, 0, 2, 0, -44, 0));
  EXPECT_THAT(Values<uint8_t>(CastTo(floats, DType::kUint8)), ElementsAre(0, 0, 2, 0, 212, 0));

  Tensor bools = Tensor::Host(DType::kBool, {4});
  const uint8_t bytes[] = {0, 1, 2, 255};
  std::memcpy(bools.raw_data(), bytes, sizeof(bytes));
  EXPECT_THAT(Values<float>(CastTo(bools, DType::kFloat32)), ElementsAre(0.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_THAT(Values<int64_t>(CastTo(bools, DType::kInt64)), ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(Values<uint8_t>(CastTo(bools, DType::kBool)), ElementsAre(0, 1, 1, 1));

  const Tensor int64s = Int64s({4}, {-1, 256, 128, int64_t{1} << 40});
  EXPECT_THAT(Values<uint8_t>(CastTo(int64s, DType::kUint8)), ElementsAre(255, 0, 128, 0));
  EXPECT_THAT(Values<int8_t>(CastTo(int64s, DType::kInt8)), ElementsAre(-1, 0, -128, 0));
  EXPECT_THAT(Values<int32_t>(CastTo(int64s, DType::kInt32)), ElementsAre(-1, 256, 128, 0));
  EXPECT_THAT(Values<uint8_t>(CastTo(int64s, DType::kBool)), ElementsAre(1, 1, 1, 1));
  const Tensor int8s = CastTo(int64s, DType::kInt8);
  EXPECT_THAT(Values<float>(CastTo(int8s, DType::kFloat32)),
              ElementsAre(-1.0f, 0.0f, -128.0f, 0.0f));
}

// Casts to and from float16 and bfloat16 go through float32: rounded to
// nearest even into them (ties, overflow to infinity, NaN kept, -0 kept,
// below float16's smallest subnormal to zero), exact out of them, and on to
// the integers and bool as float32 goes (truncation, non-zero is true).
TEST_F(DataMovementKernelsTest, CastToAndFromFloat16AndBFloat16) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tie = 1.0f + 1.0f / 2048;      // Halfway between float16's 1 and 1 + 2^-10.
  const float odd_tie = 1.0f + 3.0f / 2048;  // Halfway between 1 + 2^-10 and 1 + 2^-9.
  const Tensor x = Floats({8}, {tie, odd_tie, 65520.0f, -0.0f, nan, 1e-8f, -2.75f, 3.0e38f});
  const Tensor half = CastTo(x, DType::kFloat16);
  EXPECT_THAT(Values<uint16_t>(half),
              ElementsAre(0x3c00, 0x3c02, 0x7c00, 0x8000, 0x7e00, 0x0000, 0xc180, 0x7c00));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> back = Values<float>(CastTo(half, DType::kFloat32));
  EXPECT_THAT(std::vector<float>(back.begin(), back.begin() + 4),
              ElementsAre(1.0f, 1.0f + 2.0f / 1024, inf, -0.0f));
  EXPECT_TRUE(std::isnan(back[4]));
  EXPECT_THAT(std::vector<float>(back.begin() + 5, back.end()), ElementsAre(0.0f, -2.75f, inf));
  EXPECT_THAT(Values<int32_t>(CastTo(half, DType::kInt32))[6], -2);
  EXPECT_THAT(Values<uint8_t>(CastTo(half, DType::kBool)), ElementsAre(1, 1, 1, 0, 1, 0, 1, 1));

  const Tensor brain = CastTo(x, DType::kBFloat16);
  // 1 + 2^-11 and 1 + 3 * 2^-11 are within bfloat16's 8 bits of 1; 3e38 keeps its top bits.
  EXPECT_THAT(Values<uint16_t>(brain),
              ElementsAre(0x3f80, 0x3f80, 0x4780, 0x8000, 0x7fc0, 0x322c, 0xc030, 0x7f62));
  EXPECT_THAT(Values<float>(CastTo(brain, DType::kFloat32))[6], -2.75f);
  // float16 to bfloat16 and back: through float32.
  EXPECT_THAT(Values<uint16_t>(CastTo(CastTo(half, DType::kBFloat16), DType::kFloat16))[6], 0xc180);
  Tensor bools = Tensor::Host(DType::kBool, {2});
  bools.data<uint8_t>()[0] = 0;
  bools.data<uint8_t>()[1] = 7;
  EXPECT_THAT(Values<uint16_t>(CastTo(bools, DType::kFloat16)), ElementsAre(0x0000, 0x3c00));
}

// Transpose moves 1-byte elements (bool, int8, uint8) as they are.
TEST_F(DataMovementKernelsTest, TransposeOfBytes) {
  Tensor x = Tensor::Host(DType::kUint8, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
  Attributes attributes;
  attributes.Set("perm", std::vector<int64_t>{1, 0});
  absl::StatusOr<std::vector<Tensor>> y = Run("Transpose", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(3, 2));
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(250, 253, 251, 254, 252, 255));
}

// A causal mask as GPT-style exports build it: ConstantOfShape of a bool.
TEST_F(DataMovementKernelsTest, ConstantOfShapeBoolValue) {
  Tensor one = Tensor::Host(DType::kBool, {1});
  one.data<uint8_t>()[0] = 1;
  Attributes attributes;
  attributes.Set("value", one);
  absl::StatusOr<std::vector<Tensor>> y =
      Run("ConstantOfShape", {Int64s({2}, {2, 3})}, attributes, 13, {0});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].dtype(), DType::kBool);
  EXPECT_THAT(Values<uint8_t>((*y)[0]), ElementsAre(1, 1, 1, 1, 1, 1));
}

TEST_F(DataMovementKernelsTest, CastToOtherTypesIsUnimplementedNamingTheType) {
  Attributes attributes;
  attributes.Set("to", int64_t{11});
  absl::StatusOr<std::vector<Tensor>> y = Run("Cast", {Random({2}, 3)}, attributes);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(y.status().message()),
              AllOf(HasSubstr("Cast node 'k1'"), HasSubstr("DOUBLE (11)")));
}

TEST_F(DataMovementKernelsTest, ShapeWritesDimsAndHonoursStartEndFromOpset15) {
  const Tensor x = Random({2, 3, 4}, 4);
  Attributes range;
  range.Set("start", int64_t{-2});
  absl::StatusOr<std::vector<Tensor>> y = Run("Shape", {x}, range, 15);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(3, 4));
  // Before opset 15 there are no start/end: all dims.
  y = Run("Shape", {x}, range, 13);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(2, 3, 4));
}

TEST_F(DataMovementKernelsTest, ConstantOfShapeInt64ValueAndScalarShape) {
  Attributes attributes;
  attributes.Set("value", Int64s({1}, {-3}));
  absl::StatusOr<std::vector<Tensor>> y =
      Run("ConstantOfShape", {Int64s({2}, {2, 3})}, attributes, 13, {0});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].type(), (TensorType{DType::kInt64, {2, 3}}));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(-3, -3, -3, -3, -3, -3));
  // An empty shape gives a scalar; no value gives float32 0.
  y = Run("ConstantOfShape", {Int64s({0}, {})}, Attributes(), 13, {0});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].type(), (TensorType{DType::kFloat32, {}}));
  EXPECT_EQ((*y)[0].data<float>()[0], 0.0f);
}

TEST_F(DataMovementKernelsTest, SqueezeWithoutAxesAndUnsqueezeAttributeBeforeOpset13) {
  const Tensor x = Iota({1, 3, 1, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("Squeeze", {x}, Attributes());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(3, 2));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(0, 1, 2, 3, 4, 5));
  Attributes axes;
  axes.Set("axes", std::vector<int64_t>{0, -1});
  y = Run("Unsqueeze", {Iota({3})}, axes, 11);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].shape(), ElementsAre(1, 3, 1));
  EXPECT_THAT(Values<int64_t>((*y)[0]), ElementsAre(0, 1, 2));
}

struct DeconvParams {
  int64_t group = 1;
  std::array<int64_t, 2> strides{1, 1}, dilations{1, 1}, pads_begin{0, 0}, output{0, 0};
};

// ConvTranspose by scattering each input element: output position
// x * stride - pad_begin + k * dilation receives x * w. Positions outside
// [0, output) are dropped, so output_padding is just a larger `output`.
Tensor ReferenceDeconv(const Tensor& x, const Tensor& w, const Tensor* b, const DeconvParams& p) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int64_t n = xs[0], c = xs[1], cg = c / p.group, mg = ws[1], m = mg * p.group;
  Tensor y = Tensor::Host(DType::kFloat32, {n, m, p.output[0], p.output[1]});
  std::vector<double> sum(y.num_elements(), 0.0);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t ih = 0; ih < xs[2]; ++ih)
        for (int64_t iw = 0; iw < xs[3]; ++iw)
          for (int64_t om = 0; om < mg; ++om)
            for (int64_t kh = 0; kh < ws[2]; ++kh)
              for (int64_t kw = 0; kw < ws[3]; ++kw) {
                const int64_t oh = ih * p.strides[0] - p.pads_begin[0] + kh * p.dilations[0];
                const int64_t ow = iw * p.strides[1] - p.pads_begin[1] + kw * p.dilations[1];
                if (oh < 0 || oh >= p.output[0] || ow < 0 || ow >= p.output[1]) continue;
                const int64_t g = ic / cg;
                sum[Offset(y.shape(), {in, g * mg + om, oh, ow})] +=
                    x.data<float>()[Offset(xs, {in, ic, ih, iw})] *
                    w.data<float>()[Offset(ws, {ic, om, kh, kw})];
              }
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const int64_t channel = Unflatten(y.shape(), i)[1];
    y.data<float>()[i] = static_cast<float>(sum[i] + (b ? b->data<float>()[channel] : 0.0));
  }
  return y;
}

TEST_F(DataMovementKernelsTest, ConvTransposeGroupedStridedDilatedWithOutputPadding) {
  const Tensor x = Random({2, 4, 3, 4}, 5);
  const Tensor w = Random({4, 3, 2, 3}, 6);  // 2 groups: C/group = 2, M/group = 3, M = 6.
  const Tensor b = Random({6}, 7);
  Attributes attributes;
  attributes.Set("group", int64_t{2});
  attributes.Set("strides", std::vector<int64_t>{2, 3});
  attributes.Set("dilations", std::vector<int64_t>{2, 1});
  attributes.Set("pads", std::vector<int64_t>{1, 0, 0, 2});
  attributes.Set("output_padding", std::vector<int64_t>{1, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("ConvTranspose", {x, w, b}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // H: 2 * 2 + 1 + (2 - 1) * 2 + 1 - 1 - 0 = 7; W: 3 * 3 + 2 + 3 - 0 - 2 = 12.
  DeconvParams p;
  p.group = 2;
  p.strides = {2, 3};
  p.dilations = {2, 1};
  p.pads_begin = {1, 0};
  p.output = {7, 12};
  ExpectNear((*y)[0], ReferenceDeconv(x, w, &b, p));
}

TEST_F(DataMovementKernelsTest, ConvTransposeOutputShapeWithSameLowerPutsOddPadFirst) {
  const Tensor x = Random({1, 2, 3, 3}, 8);
  const Tensor w = Random({2, 1, 3, 3}, 9);
  Attributes attributes;
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  attributes.Set("auto_pad", std::string("SAME_LOWER"));
  attributes.Set("output_shape", std::vector<int64_t>{6, 4});
  absl::StatusOr<std::vector<Tensor>> y = Run("ConvTranspose", {x, w}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // Unpadded size 2 * 2 + 3 = 7: H pads 1 in total (first, for SAME_LOWER),
  // W pads 3 (2 first, 1 last).
  DeconvParams p;
  p.strides = {2, 2};
  p.pads_begin = {1, 2};
  p.output = {6, 4};
  ExpectNear((*y)[0], ReferenceDeconv(x, w, nullptr, p));
}

TEST_F(DataMovementKernelsTest, ConvTransposeOutputShapeBeyondTheFullOutputHoldsBias) {
  const Tensor x = Random({1, 1, 3, 3}, 12);
  const Tensor w = Random({1, 2, 3, 3}, 13);
  const Tensor b = Random({2}, 14);
  Attributes attributes;
  attributes.Set("output_shape", std::vector<int64_t>{8, 5});
  absl::StatusOr<std::vector<Tensor>> y = Run("ConvTranspose", {x, w, b}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // The full output is 5x5, so H pads -3 in total: -1 first and -2 last
  // (floor(-3 / 2), as the ONNX reference rounds). No input reaches the first
  // row or the last two, which hold the bias only.
  DeconvParams p;
  p.pads_begin = {-1, 0};
  p.output = {8, 5};
  ExpectNear((*y)[0], ReferenceDeconv(x, w, &b, p));
}

TEST_F(DataMovementKernelsTest, ConvTransposeSameUpperWithKernelSmallerThanStride) {
  const Tensor x = Random({2, 2, 3, 3}, 15);
  const Tensor w = Random({2, 3, 1, 1}, 16);
  const Tensor b = Random({3}, 17);
  Attributes attributes;
  attributes.Set("auto_pad", std::string("SAME_UPPER"));
  attributes.Set("strides", std::vector<int64_t>{2, 2});
  absl::StatusOr<std::vector<Tensor>> y = Run("ConvTranspose", {x, w, b}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  // Output 3 * 2 = 6 from a full 5: pads -1 in total, floor(-1 / 2) = -1
  // first, so row 0 and column 0 are reached by no input.
  DeconvParams p;
  p.strides = {2, 2};
  p.pads_begin = {-1, -1};
  p.output = {6, 6};
  ExpectNear((*y)[0], ReferenceDeconv(x, w, &b, p));
}

// ONNX's average pooling: windows clipped to the padded input (the ceil_mode
// overhang never counts); the divisor counts padding only with
// count_include_pad.
Tensor ReferenceAveragePool(const Tensor& x, std::array<int64_t, 2> kernel,
                            std::array<int64_t, 2> strides, std::array<int64_t, 2> pads_begin,
                            std::array<int64_t, 2> pads_end, std::array<int64_t, 2> out,
                            bool count_include_pad) {
  const Shape& xs = x.shape();
  Tensor y = Tensor::Host(DType::kFloat32, {xs[0], xs[1], out[0], out[1]});
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const std::vector<int64_t> o = Unflatten(y.shape(), i);
    double sum = 0;
    int64_t count = 0;
    for (int64_t kh = 0; kh < kernel[0]; ++kh)
      for (int64_t kw = 0; kw < kernel[1]; ++kw) {
        const int64_t ih = o[2] * strides[0] - pads_begin[0] + kh;
        const int64_t iw = o[3] * strides[1] - pads_begin[1] + kw;
        if (ih >= xs[2] + pads_end[0] || iw >= xs[3] + pads_end[1]) continue;  // Overhang.
        const bool inside = ih >= 0 && ih < xs[2] && iw >= 0 && iw < xs[3];
        if (inside) sum += x.data<float>()[Offset(xs, {o[0], o[1], ih, iw})];
        count += inside || count_include_pad ? 1 : 0;
      }
    y.data<float>()[i] = static_cast<float>(sum / count);
  }
  return y;
}

TEST_F(DataMovementKernelsTest, AveragePoolCeilModeCountsPadsButNotOverhang) {
  const Tensor x = Random({2, 3, 6, 7}, 10);
  for (const bool include : {true, false}) {
    SCOPED_TRACE(include ? "count_include_pad" : "exclude padding");
    Attributes attributes;
    attributes.Set("kernel_shape", std::vector<int64_t>{3, 3});
    attributes.Set("strides", std::vector<int64_t>{2, 2});
    attributes.Set("pads", std::vector<int64_t>{1, 0, 1, 1});
    attributes.Set("ceil_mode", int64_t{1});
    attributes.Set("count_include_pad", int64_t{include ? 1 : 0});
    absl::StatusOr<std::vector<Tensor>> y = Run("AveragePool", {x}, attributes);
    ASSERT_TRUE(y.ok()) << y.status();
    // H: (6 + 2 - 3) / 2 = 2.5 -> 3 + 1 = 4, the last window reaching one row
    // past pads_end; W: (7 + 1 - 3) / 2 = 2.5 -> 4 likewise.
    ExpectNear((*y)[0], ReferenceAveragePool(x, {3, 3}, {2, 2}, {1, 0}, {1, 1}, {4, 4}, include));
  }
}

TEST_F(DataMovementKernelsTest, AveragePoolIncludePadAsymmetricWithoutOverhang) {
  const Tensor x = Random({1, 2, 5, 5}, 11);
  Attributes attributes;
  attributes.Set("kernel_shape", std::vector<int64_t>{2, 3});
  attributes.Set("pads", std::vector<int64_t>{0, 2, 1, 0});
  attributes.Set("count_include_pad", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> y = Run("AveragePool", {x}, attributes);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear((*y)[0], ReferenceAveragePool(x, {2, 3}, {1, 1}, {0, 2}, {1, 0}, {5, 5}, true));
}

}  // namespace
}  // namespace replicad
