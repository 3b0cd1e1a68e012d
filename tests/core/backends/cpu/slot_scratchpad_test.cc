// The scratch memory a CPU slot's oneDNN primitives share (slot_scratchpad.h): it grows to the
// largest live primitive's need, keeps that while such a primitive lives, and shrinks to the
// largest remaining need once the larger ones are gone (claims dropped on another thread
// included), so that one huge request's plans do not hold their scratch memory after the plan
// cache has let them go.
#include "core/backends/cpu/kernels/slot_scratchpad.h"

#include <cstdint>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(SlotScratchpadTest, GrowsToTheLargestLiveClaimAndShrinksWhenItGoes) {
  SlotScratchpad pad;
  EXPECT_EQ(pad.size(), 0u);
  SlotScratchpad::Claim small = pad.Reserve(1000);
  EXPECT_EQ(pad.size(), 1024u);  // Rounded to 64 bytes.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pad.data()) % 64, 0u);
  {
    SlotScratchpad::Claim large = pad.Reserve(1 << 20);
    EXPECT_EQ(pad.size(), size_t{1} << 20);
    pad.Trim();  // Nothing dropped yet: it stays.
    EXPECT_EQ(pad.size(), size_t{1} << 20);
    SlotScratchpad::Claim again = pad.Reserve(1 << 20);
    EXPECT_EQ(pad.size(), size_t{1} << 20);
  }
  EXPECT_EQ(pad.size(), size_t{1} << 20);  // Until the stream thread trims it.
  pad.Trim();
  EXPECT_EQ(pad.size(), 1024u);
  static_cast<char*>(pad.data())[1023] = 1;  // The small claim's bytes are there.
  SlotScratchpad::Claim moved = std::move(small);
  pad.Trim();
  EXPECT_EQ(pad.size(), 1024u);  // A move is not a drop.
  { SlotScratchpad::Claim gone = std::move(moved); }
  pad.Trim();
  EXPECT_EQ(pad.size(), 0u);
  EXPECT_EQ(pad.data(), nullptr);
}

TEST(SlotScratchpadTest, ClaimsDroppedOnAnotherThreadLetItShrink) {
  SlotScratchpad pad;
  SlotScratchpad::Claim kept = pad.Reserve(4096);
  SlotScratchpad::Claim huge = pad.Reserve(64 << 20);
  EXPECT_EQ(pad.size(), size_t{64} << 20);
  std::thread([claim = std::move(huge)]() mutable {
    SlotScratchpad::Claim dropped(std::move(claim));
  }).join();
  pad.Trim();
  EXPECT_EQ(pad.size(), 4096u);
}

}  // namespace
}  // namespace replicad
