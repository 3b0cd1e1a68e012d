// BuildReplicaSet's wide replica (ReplicaSet::Create): made beside two or more CPU slots of one
// thread with --lend-idle-cores (the default) on a machine of two or more cores, on the first
// slot's device; not with --no-lend-idle-cores, beside slots of two threads, or beside one slot.
// BuildServable with a placement: the default model's convolutions on dev0 and its classifier on
// dev1 serve as one "pipeline" slot naming both contexts, and answer what one slot does (both
// outputs, bit for bit, in one micro-batch); --slot-memory-limit refuses the whole model on one
// slot and admits it placed over two; a rule naming no slot is refused naming the field;
// `auto` cuts the model over both contexts, with the same answer.

#include "server/replica_set_factory.h"

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/backends/backends.h"
#include "core/model/default_model.h"
#include "core/serve/pipeline_servable.h"
#include "core/serve/pipeline_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/train/train_test_models.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

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
  // Two CPU slots named as a device map's contexts, dev0 and dev1.
  ServingOptions Contexts() const {
    ServingOptions options = Slots(2, 1);
    options.slots[0].name = "dev0";
    options.slots[1].name = "dev1";
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

// `x` run whole, as one slice of slot 0.
testing::PredictOutcome RunWhole(Servable& servable, const Tensor& x) {
  return testing::RunAndWait(servable, {x}, {BatchSlice{0, 0, x.shape()[0]}});
}

TEST_F(ReplicaSetFactoryTest, APlacedModelServesAsOnePipelineSlotWithOneSlotsAnswers) {
  ServingOptions options = Contexts();
  options.placement = "conv*->dev0; fc*->dev1";
  options.micro_batches = 1;
  absl::StatusOr<std::unique_ptr<Servable>> placed =
      BuildServable(model_, cpus_, options, /*observer=*/nullptr);
  ASSERT_TRUE(placed.ok()) << placed.status();
  std::vector<SlotStatus> slots = (*placed)->Slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].slot, "pipeline");
  EXPECT_EQ(slots[0].device, "dev0=" + DeviceIdToString(cpus_[0].id) +
                                 "+dev1=" + DeviceIdToString(cpus_[1 % cpus_.size()].id));
  const Tensor x = testing::RandomTensor({6, 1, 28, 28}, 4);
  const testing::PredictOutcome piped = RunWhole(**placed, x);
  ASSERT_TRUE(piped.status.ok()) << piped.status;
  std::unique_ptr<ReplicaSet> one = Build(Slots(1, 1));
  const testing::PredictOutcome whole = RunWhole(*one, x);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(piped.outputs.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(piped.outputs[o].shape(), whole.outputs[o].shape()) << o;
    EXPECT_EQ(std::memcmp(piped.outputs[o].raw_data(), whole.outputs[o].raw_data(),
                          whole.outputs[o].byte_size()),
              0)
        << "output " << o;
  }
  // One pipeline: slot 1 is none.
  EXPECT_EQ(
      testing::RunAndWait(**placed, {x}, {BatchSlice{0, 0, 3}, BatchSlice{1, 3, 6}}).status.code(),
      absl::StatusCode::kInvalidArgument);
}

// A device map listing two devices per context ("dev0->A,B; dev1->C,D")
// serves a placed model as two pipelines, two slots, and trains it through
// both; a context with fewer devices than another is refused naming it.
TEST_F(ReplicaSetFactoryTest, TwoDevicesPerContextMakeTwoPipelines) {
  ServingOptions options = Contexts();
  options.slots.push_back(options.slots[0]);
  options.slots.back().name = "dev0.1";
  options.slots.back().copy = 1;
  options.placement = "conv*->dev0; fc*->dev1";
  absl::StatusOr<std::unique_ptr<Servable>> uneven = BuildServable(model_, cpus_, options, nullptr);
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(uneven.status().message()),
              HasSubstr("context 'dev1' has 1 device(s), another 2"));
  options.slots.push_back(options.slots[1]);
  options.slots.back().name = "dev1.1";
  options.slots.back().copy = 1;
  absl::StatusOr<std::unique_ptr<Servable>> placed = BuildServable(model_, cpus_, options, nullptr);
  ASSERT_TRUE(placed.ok()) << placed.status();
  const std::vector<SlotStatus> slots = (*placed)->Slots();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[1].slot, "pipeline1");
  EXPECT_EQ(slots[1].device, "dev0=" + DeviceIdToString(cpus_[0].id) +
                                 "+dev1=" + DeviceIdToString(cpus_[1 % cpus_.size()].id));
  TrainerOptions training;
  training.loss.output = "logits";
  absl::StatusOr<std::unique_ptr<ModelTrainer>> trainer = PlacedModelTrainer(cpus_, options)(
      testing::LoadForTraining(DefaultModelOnnxBytes()), training);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ(dynamic_cast<PipelineTrainer&>(**trainer).pipeline_count(), 2u);
  EXPECT_EQ(PlacedModelTrainer(cpus_, Contexts()), nullptr);  // Unplaced: data-parallel.
}

TEST_F(ReplicaSetFactoryTest, PlacementAutoCutsTheModelOverEveryContext) {
  ServingOptions options = Contexts();
  options.placement = "auto";
  options.micro_batches = 1;
  absl::StatusOr<std::unique_ptr<Servable>> placed = BuildServable(model_, cpus_, options, nullptr);
  ASSERT_TRUE(placed.ok()) << placed.status();
  const auto* pipeline = dynamic_cast<const PipelineServable*>(placed->get());
  ASSERT_NE(pipeline, nullptr);
  ASSERT_GE(pipeline->pipeline().part_count(), 2u);
  EXPECT_EQ(pipeline->pipeline().part_context(0), "dev0");
  EXPECT_EQ(pipeline->pipeline().part_context(pipeline->pipeline().part_count() - 1), "dev1");
  const Tensor x = testing::RandomTensor({3, 1, 28, 28}, 5);
  const testing::PredictOutcome piped = RunWhole(**placed, x);
  ASSERT_TRUE(piped.status.ok()) << piped.status;
  std::unique_ptr<ReplicaSet> one = Build(Slots(1, 1));
  const testing::PredictOutcome whole = RunWhole(*one, x);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  EXPECT_EQ(std::memcmp(piped.outputs[0].raw_data(), whole.outputs[0].raw_data(),
                        whole.outputs[0].byte_size()),
            0);
}

TEST_F(ReplicaSetFactoryTest, TheSlotMemoryLimitAdmitsTheModelOnlyPlaced) {
  ServingOptions options = Contexts();
  size_t all = 0;
  for (const auto& [v, weight] : model_->graph().initializers) all += weight.byte_size();
  options.slot_memory_limit = all - 1;
  absl::StatusOr<std::unique_ptr<Servable>> whole = BuildServable(model_, cpus_, options, nullptr);
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(whole.status().message()),
              ::testing::HasSubstr("over its " + std::to_string(all - 1) + " bytes"));
  options.placement = "conv*->dev0; fc*->dev1";
  absl::StatusOr<std::unique_ptr<Servable>> placed = BuildServable(model_, cpus_, options, nullptr);
  ASSERT_TRUE(placed.ok()) << placed.status();
  options.placement = "conv*->dev7";
  EXPECT_THAT(std::string(BuildServable(model_, cpus_, options, nullptr).status().message()),
              ::testing::StartsWith("--placement: placement rule 'conv*->dev7' names context"));
}

}  // namespace
}  // namespace replicad
