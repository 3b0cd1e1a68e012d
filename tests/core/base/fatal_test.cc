// The one programmer-error abort (core/base/fatal.h) names its component and message on
// stderr before it aborts.
#include "core/base/fatal.h"

#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(FatalTest, NamesTheComponentAndTheMessageThenAborts) {
  EXPECT_DEATH(FatalProgrammerError("optimizer", "Step got 3 parameters and 2 gradients"),
               "replicad: optimizer: Step got 3 parameters and 2 gradients");
}

}  // namespace
}  // namespace replicad
