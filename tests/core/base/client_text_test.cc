// Client strings quoted in error messages are bounded.
#include "core/base/client_text.h"

#include <string>

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(ClientTextTest, ShortTextIsWholeLongTextIsCutAndCounted) {
  EXPECT_EQ(ClientText("resnet"), "resnet");
  EXPECT_EQ(ClientText(std::string(256, 'a')), std::string(256, 'a'));
  const std::string cut = ClientText(std::string(1 << 20, 'a'));
  EXPECT_EQ(cut,
            std::string(256, 'a') + "... (" + std::to_string((1 << 20) - 256) + " more bytes)");
}

TEST(ClientTextTest, CutsAtACharactersStart) {
  // "é" is two bytes: 3 + 2k bytes, cut at 4 would split one.
  std::string text = "abc";
  for (int i = 0; i < 10; ++i) text += "\xC3\xA9";
  EXPECT_EQ(ClientText(text, 4), "abc... (20 more bytes)");
  EXPECT_EQ(ClientText(text, 5), "abc\xC3\xA9... (18 more bytes)");
}

}  // namespace
}  // namespace replicad
