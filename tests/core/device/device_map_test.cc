#include "core/device/device_map.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

std::vector<DeviceInfo> TwoCpus() {
  return {DeviceInfo{{DeviceKind::kCpu, 0}, "cpu", 1, "", "", ""},
          DeviceInfo{{DeviceKind::kCpu, 1}, "cpu", 1, "", "", ""}};
}

TEST(DeviceIdTest, ParsesBothSpellings) {
  EXPECT_EQ(*ParseDeviceId("cpu:1"), (DeviceId{DeviceKind::kCpu, 1}));
  EXPECT_EQ(*ParseDeviceId("cuda3"), (DeviceId{DeviceKind::kCuda, 3}));
  EXPECT_EQ(*ParseDeviceId("cpu"), (DeviceId{DeviceKind::kCpu, 0}));
  EXPECT_EQ(ParseDeviceId("gpu:0").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceId("cuda:x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceId("cuda").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceIdToString({DeviceKind::kCuda, 2}), "cuda:2");
}

TEST(DeviceListTest, RepeatedDeviceCarriesSeveralSlots) {
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      ParseDeviceList("cpu:0,cpu:1,cpu:1", TwoCpus(), {});
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 3u);
  EXPECT_EQ((*slots)[2].name, "r2");
  EXPECT_EQ((*slots)[2].device, (DeviceId{DeviceKind::kCpu, 1}));
  EXPECT_EQ((*slots)[2].weight, 1.0);
}

TEST(DeviceListTest, AllExpandsToTheGivenSlots) {
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      ParseDeviceList("all", TwoCpus(), {{DeviceKind::kCpu, 0}, {DeviceKind::kCpu, 1}});
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(slots->size(), 2u);
}

TEST(DeviceListTest, UnknownDeviceListsTheAvailableOnes) {
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      ParseDeviceList("cpu:0,cuda:0", TwoCpus(), {});
  EXPECT_EQ(slots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(slots.status().message(), HasSubstr("'cuda:0' does not exist"));
  EXPECT_THAT(slots.status().message(), HasSubstr("available: cpu:0, cpu:1"));
  EXPECT_EQ(ParseDeviceList("cpu:0,,cpu:1", TwoCpus(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceMapTest, TheanoContextMap) {
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      ParseDeviceMap("dev0->cpu0;dev1->cpu0; dev2 -> cpu1", TwoCpus());
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 3u);
  EXPECT_EQ((*slots)[0].name, "dev0");
  EXPECT_EQ((*slots)[1].device, (DeviceId{DeviceKind::kCpu, 0}));
  EXPECT_EQ((*slots)[2].name, "dev2");
  EXPECT_EQ((*slots)[2].device, (DeviceId{DeviceKind::kCpu, 1}));
}

// A context with several devices: one slot per device, copy k named
// "CONTEXT.k", each knowing its context and copy.
TEST(DeviceMapTest, AContextMayListOneDevicePerPipeline) {
  absl::StatusOr<std::vector<SlotAssignment>> slots =
      ParseDeviceMap("dev0->cpu0,cpu1; dev1->cpu1, cpu0", TwoCpus());
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 4u);
  EXPECT_EQ((*slots)[1].name, "dev0.1");
  EXPECT_EQ((*slots)[1].copy, 1);
  EXPECT_EQ((*slots)[1].device, (DeviceId{DeviceKind::kCpu, 1}));
  EXPECT_EQ(ContextName((*slots)[1]), "dev0");
  EXPECT_EQ(ContextName((*slots)[2]), "dev1");
  EXPECT_EQ((*slots)[3].device, (DeviceId{DeviceKind::kCpu, 0}));
  EXPECT_THAT(ParseDeviceMap("a.1->cpu0;a->cpu0,cpu1", TwoCpus()).status().message(),
              HasSubstr("names context 'a.1' twice"));
  EXPECT_THAT(ParseDeviceMap("a->cpu0,", TwoCpus()).status().message(),
              HasSubstr("--device-map entry 'a->cpu0,': device ''"));
}

TEST(DeviceMapTest, RejectsMalformedMaps) {
  EXPECT_THAT(ParseDeviceMap("dev0=cpu0", TwoCpus()).status().message(),
              HasSubstr("must be NAME->DEVICE"));
  EXPECT_THAT(ParseDeviceMap("a->cpu0;a->cpu1", TwoCpus()).status().message(),
              HasSubstr("names context 'a' twice"));
  EXPECT_THAT(ParseDeviceMap("->cpu0", TwoCpus()).status().message(),
              HasSubstr("empty context name"));
  EXPECT_THAT(ParseDeviceMap("a->cpu7", TwoCpus()).status().message(),
              HasSubstr("available: cpu:0, cpu:1"));
  EXPECT_EQ(ParseDeviceMap("", TwoCpus()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SlotWeightsTest, SetsOneWeightPerSlot) {
  std::vector<SlotAssignment> slots = *ParseDeviceList("cpu:0,cpu:1", TwoCpus(), {});
  ASSERT_TRUE(ApplySlotWeights("3, 1.5", &slots).ok());
  EXPECT_EQ(slots[0].weight, 3.0);
  EXPECT_EQ(slots[1].weight, 1.5);
  EXPECT_THAT(ApplySlotWeights("1", &slots).message(), HasSubstr("has 1 weights; expected 2"));
  EXPECT_THAT(ApplySlotWeights("1,-2", &slots).message(), HasSubstr("expected a positive number"));
  EXPECT_THAT(ApplySlotWeights("1,x", &slots).message(), HasSubstr("entry 1 is 'x'"));
}

}  // namespace
}  // namespace replicad
