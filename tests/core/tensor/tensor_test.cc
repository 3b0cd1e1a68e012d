#include "core/tensor/tensor.h"

#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

TEST(TensorTest, HostTensorIsZeroedAndSized) {
  Tensor t = Tensor::Host(DType::kFloat32, {2, 3});
  EXPECT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.byte_size(), 24u);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.location().kind, MemoryKind::kHost);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(TensorTest, SliceRowsIsAViewNotACopy) {
  Tensor t = Tensor::Host(DType::kInt64, {4, 2});
  for (int i = 0; i < 8; ++i) t.data<int64_t>()[i] = i;
  absl::StatusOr<Tensor> slice = t.SliceRows(1, 3);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->shape(), (Shape{2, 2}));
  EXPECT_EQ(slice->buffer(), t.buffer());
  EXPECT_EQ(slice->data<int64_t>(), t.data<int64_t>() + 2);
  slice->data<int64_t>()[0] = 100;
  EXPECT_EQ(t.data<int64_t>()[2], 100);
}

TEST(TensorTest, SliceOfSliceKeepsOffsets) {
  Tensor t = Tensor::Host(DType::kFloat32, {10, 3});
  absl::StatusOr<Tensor> a = t.SliceRows(2, 9);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<Tensor> b = a->SliceRows(3, 5);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data<float>(), t.data<float>() + 5 * 3);
  EXPECT_EQ(b->shape(), (Shape{2, 3}));
}

TEST(TensorTest, SliceRowsRejectsBadRanges) {
  Tensor t = Tensor::Host(DType::kFloat32, {4, 2});
  EXPECT_EQ(t.SliceRows(3, 5).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(t.SliceRows(2, 1).status().code(), absl::StatusCode::kOutOfRange);
  Tensor scalar = Tensor::Host(DType::kFloat32, {});
  EXPECT_EQ(scalar.SliceRows(0, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TensorTest, CreateChecksBufferSize) {
  auto buffer = Buffer::AllocateHost(16);
  EXPECT_TRUE(Tensor::Create(DType::kFloat32, {2, 2}, buffer).ok());
  absl::StatusOr<Tensor> too_big = Tensor::Create(DType::kFloat32, {2, 3}, buffer);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status().message(), HasSubstr("needs 24 bytes"));
  EXPECT_EQ(Tensor::Create(DType::kFloat32, {-1}, buffer).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, BorrowedBufferKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(4, 1.5f);
  std::weak_ptr<std::vector<float>> watch = owner;
  {
    auto buffer = std::make_shared<Buffer>(owner->data(), 16, MemoryLocation{}, owner);
    owner.reset();
    EXPECT_FALSE(watch.expired());
    absl::StatusOr<Tensor> t = Tensor::Create(DType::kFloat32, {4}, buffer);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->data<float>()[3], 1.5f);
  }
  EXPECT_TRUE(watch.expired());
}

TEST(DTypeTest, OnnxTypesOutsideTheEngineAreNamedInTheError) {
  EXPECT_EQ(*DTypeFromOnnx(1), DType::kFloat32);
  EXPECT_EQ(*DTypeFromOnnx(7), DType::kInt64);
  EXPECT_EQ(*DTypeFromOnnx(10), DType::kFloat16);
  EXPECT_EQ(*DTypeFromOnnx(16), DType::kBFloat16);
  absl::StatusOr<DType> wide = DTypeFromOnnx(11);
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wide.status().message(), HasSubstr("DOUBLE (11)"));
  EXPECT_EQ(DTypeFromName("float64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(DTypeFromName("float64").status().message(),
              HasSubstr("expected one of float32, uint8, int8, int32, int64, bool"));
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
}

// Every dtype: its ONNX number, name and size agree, both ways.
TEST(DTypeTest, EveryDTypeRoundTripsThroughOnnxAndItsName) {
  const std::pair<DType, size_t> sizes[] = {{DType::kFloat32, 4}, {DType::kUint8, 1},
                                            {DType::kInt8, 1},    {DType::kInt32, 4},
                                            {DType::kInt64, 8},   {DType::kBool, 1}};
  for (const auto& [dtype, size] : sizes) {
    EXPECT_EQ(*DTypeFromOnnx(static_cast<int>(dtype)), dtype);
    EXPECT_EQ(*DTypeFromName(DTypeName(dtype)), dtype);
    EXPECT_EQ(DTypeSize(dtype), size) << DTypeName(dtype);
  }
  EXPECT_TRUE(IsIntegerDType(DType::kUint8));
  EXPECT_FALSE(IsIntegerDType(DType::kBool));
  EXPECT_FALSE(IsIntegerDType(DType::kFloat32));
}

TEST(TensorTest, AllZeroReadsEveryElementOfItsDType) {
  Tensor flags = Tensor::Host(DType::kBool, {3});
  EXPECT_TRUE(AllZero(flags));
  flags.data<uint8_t>()[2] = 1;
  EXPECT_FALSE(AllZero(flags));
  Tensor values = Tensor::Host(DType::kFloat32, {2});
  values.data<float>()[1] = -0.0f;
  EXPECT_TRUE(AllZero(values)) << "-0 is zero";
  EXPECT_TRUE(AllZero(Tensor::Host(DType::kInt64, {0})));
}

}  // namespace
}  // namespace replicad
