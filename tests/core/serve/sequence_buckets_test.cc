// Padding to sequence buckets (sequence_buckets.h) on a model whose answers
// ignore what follows a sequence's end, as a masked encoder's and a causal
// decoder's do: a running sum along the sequence (each position sees only
// those before it) and a sum pooled by an attention mask. The padded run,
// cut back, equals the unpadded one: the running sum exactly (the same
// additions in the same order), the pooled sum within 1e-6 relative (a
// reduction over 8 values, 3 of them zeros, groups its additions otherwise
// than one over 5); lengths of one bucket pad to one shape.
#include "core/serve/sequence_buckets.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

std::shared_ptr<const Model> SequenceModel() {
  return testing::LoadOrDie(testing::SequenceSumOnnx(), "sequence");
}

std::vector<Tensor> Request(int64_t rows, int64_t length, uint64_t seed) {
  Tensor mask = Tensor::Host(DType::kFloat32, {rows, length});
  for (int64_t i = 0; i < rows * length; ++i) mask.data<float>()[i] = 1.0f;
  return {testing::RandomTensor({rows, length}, seed), mask};
}

TEST(SequenceBucketsTest, APaddedRequestCutBackAnswersAsTheUnpaddedOne) {
  std::shared_ptr<const Model> model = SequenceModel();
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model, {1});
  const std::vector<Tensor> request = Request(3, 5, 1);
  const testing::PredictOutcome expected = testing::PredictAndWait(*set, request);
  ASSERT_TRUE(expected.status.ok()) << expected.status;

  testing::TensorSink answer;
  std::unique_ptr<SequenceBucketPadding> padding =
      SequenceBucketPadding::For(*model, request, {4, 8, 16}, &answer);
  ASSERT_NE(padding, nullptr);
  EXPECT_EQ(padding->length(), 5);
  EXPECT_EQ(padding->bucket(), 8);
  EXPECT_EQ(padding->inputs()[0].shape(), (Shape{3, 8}));
  EXPECT_EQ(padding->inputs()[1].data<float>()[5], 0.0f);  // The mask's padding.
  absl::Notification done;
  absl::Status status;
  set->Predict(padding->inputs(), padding.get(), [&](absl::Status s, std::vector<BatchSlice>) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status;
  padding->CutOutputs();
  ASSERT_EQ(answer.outputs.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(answer.outputs[o].shape(), expected.outputs[o].shape()) << "output " << o;
    for (int64_t i = 0; i < expected.outputs[o].num_elements(); ++i) {
      const float e = expected.outputs[o].data<float>()[i];
      EXPECT_NEAR(answer.outputs[o].data<float>()[i], e, o == 0 ? 0.0f : 1e-6f * std::fabs(e))
          << "output " << o << ", element " << i;
    }
  }
}

TEST(SequenceBucketsTest, LengthsOfOneBucketPadToOneShapeAndOthersStayAsTheyAre) {
  std::shared_ptr<const Model> model = SequenceModel();
  testing::TensorSink answer;
  for (int64_t length : {9, 12, 16}) {
    std::unique_ptr<SequenceBucketPadding> padding =
        SequenceBucketPadding::For(*model, Request(2, length, 2), {8, 16}, &answer);
    if (length == 16) {
      EXPECT_EQ(padding, nullptr) << "a length that is a bucket needs no padding";
      continue;
    }
    ASSERT_NE(padding, nullptr) << length;
    EXPECT_EQ(padding->inputs()[0].shape(), (Shape{2, 16}));
  }
  // Longer than every bucket, lengths that differ between inputs, no buckets.
  EXPECT_EQ(SequenceBucketPadding::For(*model, Request(2, 17, 3), {8, 16}, &answer), nullptr);
  std::vector<Tensor> mixed = Request(2, 5, 4);
  mixed[1] = Request(2, 6, 5)[1];
  EXPECT_EQ(SequenceBucketPadding::For(*model, mixed, {8, 16}, &answer), nullptr);
  EXPECT_EQ(SequenceBucketPadding::For(*model, Request(2, 5, 6), {}, &answer), nullptr);
}

}  // namespace
}  // namespace replicad
