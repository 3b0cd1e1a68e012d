// Split, run and merge over CPU slots: the result over 1, 2 and 3 slots equals the 1-slot result
// within 1e-6 relative (L2) for batches 1, 2, 7 and 64, on a two-input two-output model; weighted
// slots; concurrent calls; one plan per slice size.

#include "core/serve/replica_set.h"

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::PredictAndWait;
using testing::PredictOutcome;
using testing::RandomTensor;
using testing::RelativeL2;

class ReplicaSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadOrDie(testing::TwoInputTwoOutputOnnx(), "two_in_two_out");
  }
  std::vector<Tensor> Inputs(int64_t batch, uint64_t seed) {
    return {RandomTensor({batch, 3, 6, 6}, seed), RandomTensor({batch, 5}, seed + 1000)};
  }
  std::shared_ptr<const Model> model_;
};

// The result over N slots equals the 1-slot result within 1e-6 relative
// (L2) for every split, uneven ones included.
TEST_F(ReplicaSetTest, SplitResultsEqualOneSlotResults) {
  std::unique_ptr<ReplicaSet> one = testing::MakeCpuReplicaSet(model_, {1});
  for (int slots : {1, 2, 3}) {
    std::unique_ptr<ReplicaSet> many =
        testing::MakeCpuReplicaSet(model_, std::vector<double>(slots, 1.0));
    for (int64_t batch : {1, 2, 7, 64}) {
      PredictOutcome reference = PredictAndWait(*one, Inputs(batch, batch));
      PredictOutcome split = PredictAndWait(*many, Inputs(batch, batch));
      ASSERT_TRUE(reference.status.ok()) << reference.status;
      ASSERT_TRUE(split.status.ok()) << split.status;
      EXPECT_EQ(split.slices.size(), static_cast<size_t>(std::min<int64_t>(slots, batch)));
      ASSERT_EQ(split.outputs.size(), 2u);
      for (size_t j = 0; j < 2; ++j) {
        EXPECT_EQ(split.outputs[j].shape(), reference.outputs[j].shape());
        EXPECT_EQ(split.outputs[j].shape()[0], batch);
        EXPECT_LE(RelativeL2(split.outputs[j], reference.outputs[j]), 1e-6)
            << "output " << j << " batch " << batch << " slots " << slots;
      }
    }
  }
}

TEST_F(ReplicaSetTest, WeightedSlotsGetProportionalSlices) {
  std::unique_ptr<ReplicaSet> one = testing::MakeCpuReplicaSet(model_, {1});
  std::unique_ptr<ReplicaSet> weighted = testing::MakeCpuReplicaSet(model_, {3, 1});
  PredictOutcome reference = PredictAndWait(*one, Inputs(8, 42));
  PredictOutcome split = PredictAndWait(*weighted, Inputs(8, 42));
  ASSERT_TRUE(split.status.ok()) << split.status;
  EXPECT_EQ(split.slices, (std::vector<BatchSlice>{{0, 0, 6}, {1, 6, 8}}));
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_LE(RelativeL2(split.outputs[j], reference.outputs[j]), 1e-6);
  }
}

// The outputs of a slice are not a copy of another slice: each row of the
// merged output matches the same row computed alone.
TEST_F(ReplicaSetTest, EachMergedRowMatchesThatRowAlone) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1, 1});
  std::vector<Tensor> batch = Inputs(5, 7);
  PredictOutcome merged = PredictAndWait(*set, batch);
  ASSERT_TRUE(merged.status.ok());
  for (int64_t row = 0; row < 5; ++row) {
    PredictOutcome alone = PredictAndWait(
        *set, {*batch[0].SliceRows(row, row + 1), *batch[1].SliceRows(row, row + 1)});
    ASSERT_TRUE(alone.status.ok());
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_LE(RelativeL2(*merged.outputs[j].SliceRows(row, row + 1), alone.outputs[j]), 1e-6);
    }
  }
}

TEST_F(ReplicaSetTest, ConcurrentPredictsGetTheirOwnResults) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1});
  std::vector<PredictOutcome> expected;
  for (int i = 0; i < 8; ++i) expected.push_back(PredictAndWait(*set, Inputs(3 + i, 100 + i)));
  std::vector<std::thread> threads;
  std::vector<PredictOutcome> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int repeat = 0; repeat < 5; ++repeat)
        got[i] = PredictAndWait(*set, Inputs(3 + i, 100 + i));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(got[i].status.ok());
    for (size_t j = 0; j < 2; ++j)
      EXPECT_EQ(RelativeL2(got[i].outputs[j], expected[i].outputs[j]), 0.0);
  }
}

TEST_F(ReplicaSetTest, PlansAreBuiltOncePerSliceSize) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(PredictAndWait(*set, Inputs(6, i)).status.ok());
  EXPECT_EQ(set->replicas()[0]->plan_count(), 1u);
  ASSERT_TRUE(PredictAndWait(*set, Inputs(6, 9)).status.ok());  // 3 and 3 again: no new plan.
  EXPECT_EQ(set->replicas()[0]->plan_count(), 1u);
  ASSERT_TRUE(PredictAndWait(*set, Inputs(7, 9)).status.ok());  // Slices of 4 and 3.
  EXPECT_EQ(set->replicas()[0]->plan_count(), 2u);
  EXPECT_EQ(set->replicas()[1]->plan_count(), 1u);
}

TEST_F(ReplicaSetTest, EmptyBatchIsAnErrorNotACrash) {
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1});
  PredictOutcome outcome = PredictAndWait(
      *set, {Tensor::Host(DType::kFloat32, {0, 3, 6, 6}), Tensor::Host(DType::kFloat32, {0, 5})});
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kInvalidArgument);
}

class CountingObserver : public SliceObserver {
 public:
  void OnSliceRun(const Replica& replica, int64_t rows, double busy_seconds) override {
    absl::MutexLock lock(&mu);
    rows_by_slot[replica.slot().name] += rows;
    EXPECT_GE(busy_seconds, 0.0);
  }
  void OnPlansBuilt(const Replica& replica, int count, double seconds) override {
    absl::MutexLock lock(&mu);
    plans_by_slot[replica.slot().name] += count;
    EXPECT_GT(seconds, 0.0);
    build_threads.insert(std::this_thread::get_id());
  }
  absl::Mutex mu;
  std::map<std::string, int64_t> rows_by_slot;
  std::map<std::string, int64_t> plans_by_slot;
  std::set<std::thread::id> build_threads;
};

TEST_F(ReplicaSetTest, ObserverSeesEverySlice) {
  CountingObserver observer;
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1, 1}, &observer);
  ASSERT_TRUE(PredictAndWait(*set, Inputs(7, 1)).status.ok());
  absl::MutexLock lock(&observer.mu);
  EXPECT_EQ(observer.rows_by_slot,
            (std::map<std::string, int64_t>{{"r0", 3}, {"r1", 2}, {"r2", 2}}));
}

TEST_F(ReplicaSetTest, ObserverSeesThePlansASliceWaitedFor) {
  CountingObserver observer;
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model_, {1, 1}, &observer);
  // 5 rows: slices of 3 and 2, a new size on each slot; then cached.
  ASSERT_TRUE(PredictAndWait(*set, Inputs(5, 1)).status.ok());
  ASSERT_TRUE(PredictAndWait(*set, Inputs(5, 2)).status.ok());
  {
    absl::MutexLock lock(&observer.mu);
    EXPECT_EQ(observer.plans_by_slot, (std::map<std::string, int64_t>{{"r0", 1}, {"r1", 1}}));
  }
  ASSERT_TRUE(PredictAndWait(*set, Inputs(4, 3)).status.ok());  // 2 and 2: new on r0 only.
  absl::MutexLock lock(&observer.mu);
  EXPECT_EQ(observer.plans_by_slot, (std::map<std::string, int64_t>{{"r0", 2}, {"r1", 1}}));
  // Built off the caller's thread: a scheduler calling Run never waits for a build.
  EXPECT_EQ(observer.build_threads.count(std::this_thread::get_id()), 0u);
}

// A Run's still_wanted is asked before its slice and again before every
// kernel: once it answers Cancelled the slice stops there, well before its
// last kernel, reporting where and no seconds (its time says nothing of the
// slot's speed); the slot then runs the next Run in full, as if nothing had
// happened.
TEST(ReplicaSetStopTest, ASliceStopsAtTheKernelWhereItIsNoLongerWanted) {
  std::shared_ptr<const Model> model =
      testing::LoadOrDie(testing::MatMulChainOnnx(16, 64), "chain");
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(model, {1});
  const std::vector<Tensor> inputs = {RandomTensor({8, 64}, 1)};
  PredictOutcome reference = PredictAndWait(*set, inputs);  // Builds the plan, too.
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  absl::StatusOr<std::shared_ptr<ExecutionPlan>> plan = set->replicas()[0]->PlanFor({{8, 64}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const size_t kernels = (*plan)->step_count();

  // Asked before the slice, then before kernels 1, 2, 3 and 4: kernels 1 to
  // 3 run, and the slice stops before kernel 4.
  constexpr int kAnswersOk = 4;
  ASSERT_GT(kernels, static_cast<size_t>(kAnswersOk));
  std::atomic<int> asked{0};
  PredictOutcome stopped = testing::RunAndWait(*set, inputs, {BatchSlice{0, 0, 8}}, [&asked] {
    return ++asked <= kAnswersOk ? absl::OkStatus() : absl::CancelledError("given up");
  });
  EXPECT_EQ(stopped.status.code(), absl::StatusCode::kCancelled) << stopped.status;
  EXPECT_THAT(stopped.status.message(),
              ::testing::HasSubstr(absl::StrCat("given up; stopped before kernel 4 of ", kernels)));
  EXPECT_EQ(asked.load(), kAnswersOk + 1);
  ASSERT_EQ(stopped.slices.size(), 1u);
  EXPECT_EQ(stopped.slices[0].seconds, 0);

  PredictOutcome again = PredictAndWait(*set, inputs);
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_LE(RelativeL2(again.outputs[0], reference.outputs[0]), 1e-6);
  // A slice whose first question is answered no does not start at all.
  PredictOutcome refused = testing::RunAndWait(
      *set, inputs, {BatchSlice{0, 0, 8}}, [] { return absl::DeadlineExceededError("too late"); });
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(refused.status.message(), ::testing::HasSubstr("did not start"));
}

}  // namespace
}  // namespace replicad

namespace replicad {
namespace {

using testing::PredictAndWait;
using testing::PredictOutcome;
using testing::RandomTensor;
using testing::RelativeL2;

// A rank-0 output (here the mean of every element, as a loss would be) is
// merged as the row-weighted mean of the slices' values, which equals the
// one-slot value for any split, uneven ones included.
TEST(ReplicaSetScalarTest, RankZeroOutputsAreTheSampleWeightedMean) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::ScalarMeanOnnx(), "m");
  std::unique_ptr<ReplicaSet> one = testing::MakeCpuReplicaSet(model, {1});
  std::unique_ptr<ReplicaSet> three = testing::MakeCpuReplicaSet(model, {1, 1, 1});
  for (int64_t batch : {1, 2, 7, 64}) {
    PredictOutcome reference = PredictAndWait(*one, {RandomTensor({batch, 4}, batch)});
    PredictOutcome split = PredictAndWait(*three, {RandomTensor({batch, 4}, batch)});
    ASSERT_TRUE(reference.status.ok()) << reference.status;
    ASSERT_TRUE(split.status.ok()) << split.status;
    EXPECT_EQ(split.outputs[0].rank(), 0);
    EXPECT_NEAR(*split.outputs[0].data<float>(), *reference.outputs[0].data<float>(), 1e-6)
        << "batch " << batch;
    EXPECT_LE(RelativeL2(split.outputs[1], reference.outputs[1]), 1e-6);
  }
}

}  // namespace
}  // namespace replicad
