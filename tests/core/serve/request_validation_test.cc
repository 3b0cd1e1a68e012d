#include "core/serve/request_validation.h"

#include <cstdint>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class BindInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadOrDie(testing::TwoInputTwoOutputOnnx(), "m");
    image_.assign(2 * 3 * 6 * 6 * 4, 0);
    features_.assign(2 * 5 * 4, 0);
  }
  RequestInput Image(Shape shape = {2, 3, 6, 6}) {
    return {"image", DType::kFloat32, shape, image_.data(), image_.size()};
  }
  RequestInput Features(Shape shape = {2, 5}) {
    return {"features", DType::kFloat32, shape, features_.data(), features_.size()};
  }
  absl::Status Bind(std::vector<RequestInput> inputs, int64_t max_batch = 0) {
    return BindInputs(*model_, inputs, max_batch, nullptr).status();
  }
  std::shared_ptr<const Model> model_;
  std::vector<char> image_, features_;
};

TEST_F(BindInputsTest, BindsInModelOrderWithoutCopying) {
  absl::StatusOr<std::vector<Tensor>> bound =
      BindInputs(*model_, {Features(), Image()}, 0, nullptr);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->size(), 2u);
  EXPECT_EQ((*bound)[0].raw_data(), image_.data());
  EXPECT_EQ((*bound)[1].raw_data(), features_.data());
}

// A binary HTTP body puts a tensor wherever its JSON header ends; kernels
// read floats through float pointers (UBSan in the fuzzers found one at an
// odd address), so such an input is copied to aligned memory.
TEST_F(BindInputsTest, AnInputAtAnAddressNotAlignedForItsTypeIsCopiedAligned) {
  std::vector<char> body(features_.size() + 1);
  for (size_t i = 0; i < features_.size(); ++i) body[i + 1] = static_cast<char>(i);
  RequestInput odd = Features();
  odd.data = body.data() + 1;  // vector<char> data is at least 8-aligned: +1 is not.
  absl::StatusOr<std::vector<Tensor>> bound = BindInputs(*model_, {odd, Image()}, 0, nullptr);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const Tensor& features = (*bound)[1];
  EXPECT_NE(features.raw_data(), odd.data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(features.raw_data()) % alignof(float), 0u);
  EXPECT_EQ(std::memcmp(features.raw_data(), odd.data, odd.bytes), 0);
  EXPECT_EQ((*bound)[0].raw_data(), image_.data());  // Aligned: still a view.
}

TEST_F(BindInputsTest, UnknownInput) {
  RequestInput extra = Image();
  extra.name = "imagee";
  absl::Status s = Bind({extra, Features()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("inputs[0].name"), HasSubstr("no input 'imagee'"),
                                 HasSubstr("image float32[?,3,6,6]")));
}

TEST_F(BindInputsTest, MissingInput) {
  absl::Status s = Bind({Image()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("input 'features' is missing"));
}

TEST_F(BindInputsTest, DuplicatedInput) {
  absl::Status s = Bind({Image(), Features(), Image()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("inputs[2].name: input 'image' is already given as inputs[0]"));
}

TEST_F(BindInputsTest, WrongDtype) {
  RequestInput wrong = Features();
  wrong.dtype = DType::kInt64;
  absl::Status s = Bind({Image(), wrong});
  EXPECT_THAT(s.message(),
              HasSubstr("inputs[1] 'features': dtype expected float32, received int64"));
}

TEST_F(BindInputsTest, WrongRank) {
  absl::Status s = Bind({Image({2, 3, 36}), Features()});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("inputs[0] 'image'"), HasSubstr("expected rank 4"),
                                 HasSubstr("received rank 3")));
}

TEST_F(BindInputsTest, WrongNonBatchDimension) {
  absl::Status s = Bind({Image({2, 3, 6, 7}), Features()});
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("dim 3 expected 6, received 7"), HasSubstr("[?,3,6,6]")));
}

TEST_F(BindInputsTest, ByteCountNotMatchingShape) {
  RequestInput short_input = Features();
  short_input.bytes -= 4;
  absl::Status s = Bind({Image(), short_input});
  EXPECT_THAT(s.message(),
              HasSubstr("inputs[1] 'features': raw holds 36 bytes; float32[2,5] needs 40"));
}

TEST_F(BindInputsTest, DifferentBatchSizes) {
  RequestInput one_row = Features({1, 5});
  one_row.bytes = 5 * 4;
  absl::Status s = Bind({Image(), one_row});
  EXPECT_THAT(s.message(), HasSubstr("batch size (dim 0) expected 2 like inputs[0], received 1"));
}

TEST_F(BindInputsTest, EmptyBatch) {
  absl::Status s = Bind({{"image", DType::kFloat32, {0, 3, 6, 6}, image_.data(), 0},
                         {"features", DType::kFloat32, {0, 5}, features_.data(), 0}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the batch is empty"));
}

TEST_F(BindInputsTest, NegativeDimension) {
  absl::Status s = Bind({Image({2, 3, -6, 6}), Features()});
  EXPECT_THAT(s.message(), HasSubstr("dim 2 is negative"));
}

TEST_F(BindInputsTest, BatchOverTheMaximum) {
  absl::Status s = Bind({Image(), Features()}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("batch size 2 exceeds the maximum of 1"));
  EXPECT_TRUE(Bind({Image(), Features()}, 2).ok());
}

}  // namespace
}  // namespace replicad
