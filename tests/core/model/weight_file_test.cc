// A model's large weights moved into a WeightFile: the same values, the same
// answers, out of resident memory once released and back on the next read.
#include "core/model/weight_file.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_models.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMinBytes = size_t{64} << 10;

// This process's resident bytes (/proc/self/statm, second field).
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Reads every byte of `tensor`; their sum, so that the reads happen.
uint64_t ReadAll(const Tensor& tensor) {
  const volatile unsigned char* bytes = static_cast<const unsigned char*>(tensor.raw_data());
  uint64_t sum = 0;
  for (size_t i = 0; i < tensor.byte_size(); ++i) sum += bytes[i];
  return sum;
}

// Three layers of 384 x 384 float32 weights (576 KiB each) move; nothing
// else in the graph is that large. Values, and what the model computes, do
// not change.
TEST(WeightFileTest, LargeInitializersMoveAndTheModelComputesTheSame) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(3, 384), "m");
  absl::StatusOr<std::shared_ptr<const Model>> moved =
      WithWeightsInFile(model, ::testing::TempDir(), kMinBytes);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_NE(*moved, model);
  int in_file = 0;
  for (const auto& [v, tensor] : model->graph().initializers) {
    const Tensor& now = (*moved)->graph().initializers.at(v);
    ASSERT_EQ(now.type(), tensor.type());
    ASSERT_EQ(std::memcmp(now.raw_data(), tensor.raw_data(), tensor.byte_size()), 0) << v;
    const bool large = tensor.byte_size() >= kMinBytes;
    EXPECT_EQ(now.raw_data() != tensor.raw_data(), large) << v;
    in_file += large ? 1 : 0;
  }
  EXPECT_EQ(in_file, 3);
  EXPECT_EQ((*moved)->name(), "m");
  EXPECT_EQ((*moved)->inputs().size(), model->inputs().size());

  // Both sets split the batch alike, so the same kernels run: bit for bit.
  const std::vector<Tensor> inputs = {testing::RandomTensor({5, 384}, 3)};
  testing::PredictOutcome expected =
      testing::PredictAndWait(*testing::MakeCpuReplicaSet(model, {1, 1}), inputs);
  std::unique_ptr<ReplicaSet> set = testing::MakeCpuReplicaSet(*moved, {1, 1});
  testing::PredictOutcome actual = testing::PredictAndWait(*set, inputs);
  ASSERT_TRUE(expected.status.ok() && actual.status.ok()) << actual.status;
  set->ReleaseIdleMemory();  // Releases the weights' pages too.
  testing::PredictOutcome again = testing::PredictAndWait(*set, inputs);
  ASSERT_TRUE(again.status.ok()) << again.status;
  for (const testing::PredictOutcome* outcome : {&actual, &again}) {
    ASSERT_EQ(outcome->outputs.size(), 1u);
    EXPECT_EQ(std::memcmp(outcome->outputs[0].raw_data(), expected.outputs[0].raw_data(),
                          expected.outputs[0].byte_size()),
              0);
  }
}

// Released pages leave the resident set (here 3 x 8 MiB) and their bytes
// come back on the next read.
TEST(WeightFileTest, ReleasedWeightsLeaveResidentMemoryAndComeBackOnRead) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(3, 1448), "big");
  absl::StatusOr<std::shared_ptr<const Model>> moved =
      WithWeightsInFile(model, ::testing::TempDir(), kMinBytes);
  ASSERT_TRUE(moved.ok()) << moved.status();
  std::vector<uint64_t> sums;
  for (const auto& [v, tensor] : model->graph().initializers) sums.push_back(ReadAll(tensor));
  model.reset();  // The anonymous copy goes.
  const size_t weights = size_t{3} * 1448 * 1448 * sizeof(float);
  size_t i = 0;
  for (const auto& [v, tensor] : (*moved)->graph().initializers)
    ASSERT_EQ(ReadAll(tensor), sums[i++]);
  const size_t resident = ResidentBytes();
  (*moved)->ReleaseResidentWeights();
  EXPECT_LE(ResidentBytes() + weights * 9 / 10, resident);
  i = 0;
  for (const auto& [v, tensor] : (*moved)->graph().initializers)
    EXPECT_EQ(ReadAll(tensor), sums[i++]);
  EXPECT_GE(ResidentBytes() + weights / 10, resident);
}

TEST(WeightFileTest, ModelWithoutLargeWeightsStaysAsItIs) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(2, 16), "small");
  absl::StatusOr<std::shared_ptr<const Model>> moved =
      WithWeightsInFile(model, ::testing::TempDir(), kMinBytes);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, model);
  model->ReleaseResidentWeights();  // No file: nothing to do.
}

TEST(WeightFileTest, MissingDirectoryIsNotFoundNamingIt) {
  std::shared_ptr<const Model> model = testing::LoadOrDie(testing::MatMulChainOnnx(1, 256), "m");
  const std::string dir = ::testing::TempDir() + "/no/such/dir";
  absl::StatusOr<std::shared_ptr<const Model>> moved = WithWeightsInFile(model, dir, kMinBytes);
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kNotFound) << moved.status();
  EXPECT_THAT(moved.status().message(),
              HasSubstr("model 'm': weights file of 262144 bytes in " + dir));
}

TEST(WeightFileTest, MemoryBackedDirectoriesAreRecognized) {
  if (std::filesystem::is_directory("/dev/shm")) {
    EXPECT_TRUE(IsMemoryBackedDirectory("/dev/shm"));
  }
  EXPECT_FALSE(IsMemoryBackedDirectory("/no/such/dir"));
}

}  // namespace
}  // namespace replicad
