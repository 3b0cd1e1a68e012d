// The wide replica of a set of one-thread CPU slots (ReplicaSet::Create): a batch of one slice
// that its caller marked widened runs on it once its plan is built in the background (until then
// on its slot, coming back unmarked), and its outputs equal the slot's within 1e-5 relative L2
// (oneDNN may split a kernel's sums differently over 2 threads than over 1); an unmarked slice
// runs on its slot; a slot's slice waits while a wide one runs (their threads never share the
// cores), whoever asked for them; a wide replica beside one slot is refused.

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/serve/replica_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::PredictOutcome;
using testing::RandomTensor;
using testing::RelativeL2;
using testing::RunAndWait;

constexpr double kTolerance = 1e-5;

// Rows [begin, end) on `slot`, marked to run with the idle slots' cores.
BatchSlice Widened(int slot, int64_t begin, int64_t end) {
  BatchSlice slice{slot, begin, end};
  slice.widened = true;
  return slice;
}

// A Run started and not waited for.
struct Started {
  testing::TensorSink sink;
  absl::Notification done;
  absl::Status status;
  std::vector<BatchSlice> slices;
};

void Start(ReplicaSet& set, std::vector<Tensor> inputs, BatchSlice slice,
           Servable::StillWanted still_wanted, Started* run) {
  set.Run(std::move(inputs), {slice}, &run->sink, std::move(still_wanted),
          [run](absl::Status status, std::vector<BatchSlice> slices) {
            run->status = std::move(status);
            run->slices = std::move(slices);
            run->done.Notify();
          });
}

// Answers yes, and blocks at its `at`-th question (1: before the slice; 2:
// before its first kernel, with the cores held) until `release`.
class HoldAt {
 public:
  explicit HoldAt(int at) : at_(at) {}
  Servable::StillWanted Ask() {
    return [this] {
      if (++asked_ == at_) {
        holding.Notify();
        release.WaitForNotification();
      }
      return absl::OkStatus();
    };
  }
  absl::Notification holding;
  absl::Notification release;

 private:
  const int at_;
  std::atomic<int> asked_{0};
};

class ReplicaSetWideTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadOrDie(testing::MatMulChainOnnx(16, 64), "chain");
    set_ = testing::MakeCpuReplicaSet(model_, {1, 1}, nullptr, /*wide_threads=*/2);
    inputs_ = {RandomTensor({1, 64}, 7)};
  }
  // Runs the row on slot 0 until it runs wide (its plan built in the
  // background); the outcome of the first run, on the slot.
  PredictOutcome RunUntilWide() {
    PredictOutcome first = RunAndWait(*set_, inputs_, {Widened(0, 0, 1)}, nullptr);
    PredictOutcome last = first;
    for (int i = 0; i < 600 && last.status.ok() && !last.slices[0].widened; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      last = RunAndWait(*set_, inputs_, {Widened(0, 0, 1)}, nullptr);
    }
    EXPECT_TRUE(last.status.ok()) << last.status;
    EXPECT_TRUE(last.slices[0].widened) << "no wide run after 30 s";
    return first;
  }
  std::shared_ptr<const Model> model_;
  std::unique_ptr<ReplicaSet> set_;
  std::vector<Tensor> inputs_;
};

TEST_F(ReplicaSetWideTest, AOneSliceBatchRunsWideOnceItsPlanIsBuiltAndAnswersAsItsSlot) {
  ASSERT_NE(set_->wide(), nullptr);
  EXPECT_TRUE(set_->LendsIdleCores());
  PredictOutcome on_slot = RunUntilWide();
  ASSERT_TRUE(on_slot.status.ok()) << on_slot.status;
  EXPECT_FALSE(on_slot.slices[0].widened) << "the first run cannot have a wide plan yet";
  EXPECT_EQ(set_->wide()->plan_count(), 1u);

  PredictOutcome wide = RunAndWait(*set_, inputs_, {Widened(0, 0, 1)}, nullptr);
  ASSERT_TRUE(wide.status.ok()) << wide.status;
  ASSERT_EQ(wide.slices.size(), 1u);
  EXPECT_TRUE(wide.slices[0].widened);
  EXPECT_EQ(wide.slices[0].slot, 0);  // The scheduler's choice stands.
  EXPECT_GT(wide.slices[0].seconds, 0);
  EXPECT_LE(RelativeL2(wide.outputs[0], on_slot.outputs[0]), kTolerance);
}

TEST_F(ReplicaSetWideTest, AnUnmarkedSliceRunsOnItsSlot) {
  RunUntilWide();
  PredictOutcome alone = RunAndWait(*set_, inputs_, {BatchSlice{0, 0, 1}}, nullptr);
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  EXPECT_FALSE(alone.slices[0].widened);
  // Marks on a batch of two slices are taken off: it runs on its slots.
  PredictOutcome split =
      RunAndWait(*set_, {RandomTensor({2, 64}, 11)}, {Widened(0, 0, 1), Widened(1, 1, 2)}, nullptr);
  ASSERT_TRUE(split.status.ok()) << split.status;
  EXPECT_FALSE(split.slices[0].widened);
  EXPECT_FALSE(split.slices[1].widened);
}

TEST_F(ReplicaSetWideTest, ASlotsSliceWaitsWhileAWideOneRuns) {
  RunUntilWide();
  HoldAt before_first_kernel(2);
  Started wide;
  Start(*set_, inputs_, Widened(0, 0, 1), before_first_kernel.Ask(), &wide);
  before_first_kernel.holding.WaitForNotification();  // It holds every core.

  Started narrow;
  Start(*set_, {RandomTensor({1, 64}, 10)}, BatchSlice{1, 0, 1}, nullptr, &narrow);
  // Its slot is idle, yet it may not start while the wide slice holds the
  // cores. (If it could, it would end within a few milliseconds.)
  EXPECT_FALSE(narrow.done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));

  before_first_kernel.release.Notify();
  wide.done.WaitForNotification();
  narrow.done.WaitForNotification();
  ASSERT_TRUE(wide.status.ok()) << wide.status;
  ASSERT_TRUE(narrow.status.ok()) << narrow.status;
  EXPECT_TRUE(wide.slices[0].widened);
  EXPECT_FALSE(narrow.slices[0].widened);
}

TEST(ReplicaSetWideCreateTest, AWideReplicaBesideOneSlotIsRefused) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(2, 8), "m");
  const DeviceInfo cpu = EnumerateCpuDevices()[0];
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(*Replica::Create(model, SlotAssignment{"r0", cpu.id, 1},
                                      CreateCpuDevice(cpu, CpuSlotOptions{1})));
  absl::StatusOr<std::unique_ptr<Replica>> wide = Replica::Create(
      model, SlotAssignment{"wide", cpu.id, 1}, CreateCpuDevice(cpu, CpuSlotOptions{2}));
  ASSERT_TRUE(wide.ok()) << wide.status();
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set = ReplicaSet::Create(
      model, std::move(replicas), ReplicaSet::Options{cpu.id, nullptr}, nullptr, *std::move(wide));
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), ::testing::HasSubstr("two or more slots"));
  EXPECT_THAT(set.status().message(), ::testing::HasSubstr("received 1 slots"));
}

}  // namespace
}  // namespace replicad
