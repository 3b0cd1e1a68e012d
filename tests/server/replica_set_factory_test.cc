// BuildReplicaSet's wide replica (ReplicaSet::Create): made beside two or more CPU slots of one
// thread with --lend-idle-cores (the default) on a machine of two or more cores, on the first
// slot's device; not with --no-lend-idle-cores, beside slots of two threads, or beside one slot.

#include "server/replica_set_factory.h"

#include <memory>
#include <vector>

#include "core/backends/backends.h"
#include "core/model/default_model.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

class ReplicaSetFactoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    for (const DeviceInfo& d : *devices) {
      if (d.id.kind == DeviceKind::kCpu) cpus_.push_back(d);
    }
    ASSERT_FALSE(cpus_.empty());
    absl::StatusOr<std::shared_ptr<const Model>> model = LoadDefaultModel();
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
  }
  // `count` slots on the machine's CPUs, in turn.
  ServingOptions Slots(int count, int threads) const {
    ServingOptions options;
    options.slot_options.threads_per_slot = threads;
    for (int i = 0; i < count; ++i) {
      options.slots.push_back(
          SlotAssignment{"r" + std::to_string(i), cpus_[i % cpus_.size()].id, 1});
    }
    return options;
  }
  std::unique_ptr<ReplicaSet> Build(const ServingOptions& options) const {
    absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
        BuildReplicaSet(model_, cpus_, options, /*observer=*/nullptr);
    EXPECT_TRUE(set.ok()) << set.status();
    return set.ok() ? *std::move(set) : nullptr;
  }
  std::vector<DeviceInfo> cpus_;
  std::shared_ptr<const Model> model_;
};

TEST_F(ReplicaSetFactoryTest, SlotsOfOneThreadGetAWideReplicaOfTheirCores) {
  if (cpus_.size() < 2) GTEST_SKIP() << "one core: nothing to lend";
  for (int slots : {2, 3}) {
    std::unique_ptr<ReplicaSet> set = Build(Slots(slots, 1));
    ASSERT_NE(set, nullptr);
    ASSERT_NE(set->wide(), nullptr) << slots << " slots";
    EXPECT_TRUE(set->LendsIdleCores());
    EXPECT_EQ(set->wide()->device().info().id, cpus_[0].id);
    EXPECT_EQ(set->wide()->slot().name, "wide");
    EXPECT_EQ(set->replicas().size(), static_cast<size_t>(slots));
  }
}

TEST_F(ReplicaSetFactoryTest, NoWideReplicaWhenNotLentOrNothingToLend) {
  ServingOptions not_lent = Slots(2, 1);
  not_lent.slot_options.lend_idle_cores = false;
  for (const ServingOptions& options : {not_lent, Slots(2, 2), Slots(1, 1)}) {
    std::unique_ptr<ReplicaSet> set = Build(options);
    ASSERT_NE(set, nullptr);
    EXPECT_EQ(set->wide(), nullptr);
    EXPECT_FALSE(set->LendsIdleCores());
  }
}

}  // namespace
}  // namespace replicad
