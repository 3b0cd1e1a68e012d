// UpcomingBatches: the batch a trainer's caller posts as its next, which a
// step on that very batch, or a withdrawal of it, forgets (and nothing
// else does: a step on other tensors, even with the same values, leaves it
// for the slots to upload).
#include "core/train/upcoming_batch.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

std::shared_ptr<UpcomingBatch> Batch(uint64_t seed) {
  auto batch = std::make_shared<UpcomingBatch>();
  batch->inputs = {testing::RandomTensor({4, 2, 6, 6}, seed)};
  batch->targets = testing::ClassLabels(4, 4, seed);
  return batch;
}

TEST(UpcomingBatchTest, IsTheSameTensorsOnly) {
  const std::shared_ptr<UpcomingBatch> a = Batch(1), same_values = Batch(1);
  EXPECT_TRUE(a->Is(a->inputs, a->targets));
  EXPECT_FALSE(a->Is(same_values->inputs, same_values->targets));
  EXPECT_FALSE(a->Is(a->inputs, same_values->targets));
  EXPECT_FALSE(a->Is({}, a->targets));
  // A view of the same bytes with another shape is another tensor.
  absl::StatusOr<Tensor> reshaped = Tensor::Create(DType::kFloat32, {4, 72}, a->inputs[0].buffer());
  ASSERT_TRUE(reshaped.ok()) << reshaped.status();
  EXPECT_FALSE(a->Is({*reshaped}, a->targets));
  EXPECT_FALSE(a->Is(a->inputs, Tensor()));  // An empty tensor is none of them.
}

TEST(UpcomingBatchTest, ForgetDropsOnlyThePostedBatch) {
  UpcomingBatches upcoming;
  EXPECT_EQ(upcoming.Next(), nullptr);
  const std::shared_ptr<UpcomingBatch> a = Batch(1), b = Batch(2);
  upcoming.Expect(a);
  EXPECT_EQ(upcoming.Next(), a);
  upcoming.Forget(b->inputs, b->targets);  // Another batch: a stays.
  EXPECT_EQ(upcoming.Next(), a);
  upcoming.Expect(b);  // Posting replaces.
  EXPECT_EQ(upcoming.Next(), b);
  upcoming.Forget(a->inputs, a->targets);  // A withdrawal that came late: b stays.
  EXPECT_EQ(upcoming.Next(), b);
  upcoming.Forget(b->inputs, b->targets);
  EXPECT_EQ(upcoming.Next(), nullptr);
}

}  // namespace
}  // namespace replicad
