#include "client/train_progress.h"

#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

EpochProgress At(int64_t epoch, int64_t done, int64_t total, double seconds) {
  EpochProgress p;
  p.epoch = epoch;
  p.epochs = 2;
  p.done = done;
  p.total = total;
  p.seconds = seconds;
  p.mean_loss = 0.5;
  p.accuracy = 0.75;
  return p;
}

TEST(ProgressLineTest, LogFormIsAboutTenLinesPerEpochWhateverTheSteps) {
  std::ostringstream out;
  ProgressLine progress(out, /*interactive=*/false);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    for (int64_t done = 7; done <= 1000; done += 7) progress.Update(At(epoch, done, 1000, 1));
    progress.Update(At(epoch, 1000, 1000, 2));
    progress.Clear();
  }
  const std::string text = out.str();
  EXPECT_THAT(text, Not(HasSubstr("\r")));
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 20u) << text;
  EXPECT_EQ(lines[0],
            "epoch 1/2: 105/1000 samples (10%), 105 samples/s, loss 0.5000, accuracy 0.7500");
  EXPECT_EQ(lines[9],
            "epoch 1/2: 1000/1000 samples (100%), 500 samples/s, loss 0.5000, accuracy 0.7500");
  EXPECT_THAT(lines[10], HasSubstr("epoch 2/2: 105/1000"));
}

TEST(ProgressLineTest, LogFormWithFewSteps) {
  std::ostringstream out;
  ProgressLine progress(out, /*interactive=*/false);
  progress.Update(At(1, 600, 1000, 1));
  EpochProgress last = At(1, 1000, 1000, 2);
  last.accuracy.reset();
  progress.Update(last);
  EXPECT_EQ(out.str(),
            "epoch 1/2: 600/1000 samples (60%), 600 samples/s, loss 0.5000, accuracy 0.7500\n"
            "epoch 1/2: 1000/1000 samples (100%), 500 samples/s, loss 0.5000\n");
}

TEST(ProgressLineTest, TerminalFormRedrawsOneLineAtMostTenTimesASecond) {
  std::ostringstream out;
  ProgressLine progress(out, /*interactive=*/true);
  progress.Update(At(1, 100, 1000, 0.01));   // Drawn: the first.
  progress.Update(At(1, 200, 1000, 0.05));   // Too soon.
  progress.Update(At(1, 300, 1000, 0.12));   // Drawn.
  progress.Update(At(1, 1000, 1000, 0.13));  // Drawn: the last always is.
  const std::string text = out.str();
  EXPECT_THAT(text, Not(HasSubstr("\n")));
  std::vector<std::string> draws = absl::StrSplit(text, '\r', absl::SkipEmpty());
  ASSERT_EQ(draws.size(), 3u) << text;
  EXPECT_EQ(draws[0],
            "epoch 1/2 [##..................] 100/1000  10000 samples/s  loss 0.5000  "
            "accuracy 0.7500");
  EXPECT_THAT(draws[1], HasSubstr("[######..............] 300/1000"));
  EXPECT_THAT(draws[2], HasSubstr("[####################] 1000/1000"));

  out.str("");
  progress.Clear();
  EXPECT_EQ(out.str(), "\r" + std::string(draws[2].size(), ' ') + "\r");
  out.str("");
  progress.Clear();  // Nothing left to erase.
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressLineTest, TerminalFormCoversALongerPreviousLine) {
  std::ostringstream out;
  ProgressLine progress(out, /*interactive=*/true);
  progress.Update(At(1, 100, 1000, 0.001));  // 100000 samples/s: a wide line.
  EpochProgress narrower = At(1, 200, 1000, 1);
  narrower.accuracy.reset();
  progress.Update(narrower);
  std::vector<std::string> draws = absl::StrSplit(out.str(), '\r', absl::SkipEmpty());
  ASSERT_EQ(draws.size(), 2u);
  EXPECT_EQ(draws[1].size(), draws[0].size());
  EXPECT_EQ(draws[1].back(), ' ');
}

}  // namespace
}  // namespace replicad::client
