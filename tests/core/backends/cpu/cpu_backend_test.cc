#include "core/backends/cpu/cpu_backend.h"

#include <omp.h>

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
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

// A slot's thread and its OpenMP team flush denormals to zero (FTZ/DAZ:
// 1e-20 squared is 1e-40, a denormal, computed as 0 there), so a step whose
// values underflow does not run at microcode-assist speed; other threads
// keep IEEE's denormals.
TEST(CpuBackendTest, SlotThreadsFlushDenormalsToZero) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    std::unique_ptr<Device> slot =
        CreateCpuDevice(EnumerateCpuDevices()[0], CpuSlotOptions{threads});
    std::vector<float> products(threads, -1.0f);
    absl::Notification done;
    slot->Enqueue([&] {
      volatile float tiny = 1e-20f;
#pragma omp parallel num_threads(threads)
      products[omp_get_thread_num()] = tiny * tiny;
      done.Notify();
    });
    done.WaitForNotification();
    for (float product : products) EXPECT_EQ(product, 0.0f);
  }
  volatile float tiny = 1e-20f;
  EXPECT_GT(tiny * tiny, 0.0f) << "the test's own thread flushes too";
}

}  // namespace
}  // namespace replicad
