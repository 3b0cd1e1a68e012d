#include "core/tensor/tensor.h"

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
  absl::StatusOr<DType> half = DTypeFromOnnx(10);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(half.status().message(), HasSubstr("FLOAT16 (10)"));
  EXPECT_EQ(DTypeFromName("float64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
}

}  // namespace
}  // namespace replicad
