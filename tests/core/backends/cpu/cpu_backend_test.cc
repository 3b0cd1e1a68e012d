#include "core/backends/cpu/cpu_backend.h"

#include <memory>
#include <vector>

#include "core/backends/cpu/kernels/weight_cache.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using testing::LoadOrDie;
using testing::MakeCpuReplicaSet;
using testing::PredictAndWait;
using testing::PredictOutcome;
using testing::RandomTensor;

// The slots of one model read the same host weights, so they share the
// reordered copies (a Winograd layer's are 4x its weights): two slots hold
// what one holds, and the copies go with the last slot that holds them.
TEST(CpuBackendTest, TheSlotsOfAModelShareItsReorderedWeights) {
  const std::shared_ptr<WeightCache> cache = HostWeightCache();
  const size_t before = cache->size();
  const std::shared_ptr<const Model> model = LoadOrDie(testing::TwoInputTwoOutputOnnx(), "m");

  size_t one_slot = 0;
  {
    std::unique_ptr<ReplicaSet> set = MakeCpuReplicaSet(model, {1.0});
    const PredictOutcome one_row =
        PredictAndWait(*set, {RandomTensor({1, 3, 6, 6}, 1), RandomTensor({1, 5}, 2)});
    ASSERT_TRUE(one_row.status.ok()) << one_row.status;
    one_slot = cache->size() - before;
    EXPECT_GE(one_slot, 1u);  // At least the convolution's weights.
  }
  EXPECT_EQ(cache->size(), before);

  std::unique_ptr<ReplicaSet> set = MakeCpuReplicaSet(model, {1.0, 1.0});
  const PredictOutcome a_row_each =
      PredictAndWait(*set, {RandomTensor({2, 3, 6, 6}, 1), RandomTensor({2, 5}, 2)});
  ASSERT_TRUE(a_row_each.status.ok()) << a_row_each.status;
  ASSERT_EQ(a_row_each.slices.size(), 2u);
  EXPECT_EQ(a_row_each.slices[0].end - a_row_each.slices[0].begin, 1);
  EXPECT_EQ(cache->size() - before, one_slot);
}

}  // namespace
}  // namespace replicad
