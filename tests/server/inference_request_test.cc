// DecodeInferRequest and InferOutputs against real POSIX shared memory: an
// aligned input is read in place (the request's pointer is the region's
// mapping, so the client's bytes are what the model sees), an aligned output
// is written in place, and a misaligned range or an input that an output
// overlaps is copied, with the same bytes as a result. A region the client
// shrinks during the run fails the request at FinishRegions.
#include "server/inference_request.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/region_outputs.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;

// A client's shared memory object and its own mapping of it.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t bytes)
      : key_("/replicad_infer_test_" + std::to_string(getpid()) + "_" + tag), bytes_(bytes) {
    shm_unlink(key_.c_str());
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    at_ = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~ShmObject() {
    munmap(at_, bytes_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* bytes() const { return at_; }
  void Truncate(size_t bytes) const {
    const int fd = shm_open(key_.c_str(), O_RDWR, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }

 private:
  std::string key_;
  size_t bytes_;
  char* at_;
};

const TensorSpec kY{"y", {DType::kFloat32, {4}}};

absl::StatusOr<DecodedInfer> Decode(const inference::ModelInferRequest& request,
                                    const SharedMemoryRegistry& registry) {
  RequestContext context;
  std::vector<WireBytes> none(request.inputs_size());
  return DecodeInferRequest(request, none, &registry, &context);
}

TEST(InferenceRequestTest, AnAlignedInputIsReadAndAnAlignedOutputWrittenInPlace) {
  ShmObject in("in", 4096), out("out", 4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("in", in.key(), 0, 4096).ok());
  ASSERT_TRUE(registry.Register("out", out.key(), 0, 4096).ok());
  const float x[4] = {1, 2, 3, 4};
  std::memcpy(in.bytes() + 64, x, sizeof(x));
  absl::StatusOr<DecodedInfer> decoded =
      Decode(testing::RegionRequest("in", 64, "out", 32), registry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.in_place.size(), 1u);
  EXPECT_TRUE(decoded->inputs.copies.empty());
  const RequestInput& input = decoded->request.inputs[0];
  ASSERT_EQ(input.bytes, 16u);
  // No copy: what the client writes now is what the model reads.
  in.bytes()[64 + 4] = 0x7f;
  EXPECT_EQ(static_cast<const char*>(input.data)[4], 0x7f);

  testing::RegionOutputs outputs(std::move(decoded->output_regions));
  outputs.HoldInputs(std::move(decoded->inputs));
  absl::StatusOr<void*> y = outputs.AddOutput(kY, kY.type);
  ASSERT_TRUE(y.ok()) << y.status();
  const float answer[4] = {5, 6, 7, 8};
  std::memcpy(*y, answer, sizeof(answer));
  EXPECT_EQ(std::memcmp(out.bytes() + 32, answer, sizeof(answer)), 0);  // Before FinishRegions.
  EXPECT_TRUE(outputs.FinishRegions().ok());
}

TEST(InferenceRequestTest, MisalignedRangesAreCopiedWithTheSameBytes) {
  ShmObject object("misaligned", 4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 2, 4000).ok());  // Every view is off by 2.
  const float x[4] = {1.5f, -2, 3, 4};
  std::memcpy(object.bytes() + 2 + 8, x, sizeof(x));
  absl::StatusOr<DecodedInfer> decoded = Decode(testing::RegionRequest("r", 8, "r", 100), registry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->inputs.in_place.empty());
  ASSERT_EQ(decoded->inputs.copies.size(), 1u);
  EXPECT_EQ(std::memcmp(decoded->request.inputs[0].data, x, sizeof(x)), 0);

  testing::RegionOutputs outputs(std::move(decoded->output_regions));
  absl::StatusOr<void*> y = outputs.AddOutput(kY, kY.type);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NE(*y, object.bytes() + 102);
  std::memcpy(*y, x, sizeof(x));
  ASSERT_TRUE(outputs.FinishRegions().ok());
  EXPECT_EQ(std::memcmp(object.bytes() + 2 + 100, x, sizeof(x)), 0);
}

TEST(InferenceRequestTest, AnInputThatAnOutputOverlapsIsCopiedFirst) {
  ShmObject object("overlap", 4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("in", object.key(), 0, 4096).ok());
  ASSERT_TRUE(registry.Register("out", object.key(), 0, 4096).ok());  // The same object.
  const float x[4] = {1, 2, 3, 4};
  std::memcpy(object.bytes() + 64, x, sizeof(x));
  // y = [72, 88) overlaps x = [64, 80) through another region's name.
  absl::StatusOr<DecodedInfer> decoded =
      Decode(testing::RegionRequest("in", 64, "out", 72), registry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->inputs.in_place.empty());
  ASSERT_EQ(decoded->inputs.copies.size(), 1u);
  const void* input = decoded->request.inputs[0].data;
  testing::RegionOutputs outputs(std::move(decoded->output_regions));
  outputs.HoldInputs(std::move(decoded->inputs));
  absl::StatusOr<void*> y = outputs.AddOutput(kY, kY.type);
  ASSERT_TRUE(y.ok()) << y.status();
  const float answer[4] = {9, 9, 9, 9};
  std::memcpy(*y, answer, sizeof(answer));
  EXPECT_EQ(std::memcmp(input, x, sizeof(x)), 0);  // The output did not clobber the input.
  ASSERT_TRUE(outputs.FinishRegions().ok());
  EXPECT_EQ(std::memcmp(object.bytes() + 72, answer, sizeof(answer)), 0);

  // Ranges that do not overlap stay in place.
  absl::StatusOr<DecodedInfer> apart =
      Decode(testing::RegionRequest("in", 64, "out", 80), registry);
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(apart->inputs.in_place.size(), 1u);
}

TEST(InferenceRequestTest, ARegionShrunkDuringTheRunFailsTheRequestNotTheDaemon) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object("shrunk", 2 * page);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 2 * page).ok());
  absl::StatusOr<DecodedInfer> decoded =
      Decode(testing::RegionRequest("r", page, "r", page + 64), registry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->inputs.in_place.size(), 1u);
  const volatile char* input = static_cast<const char*>(decoded->request.inputs[0].data);
  testing::RegionOutputs outputs(std::move(decoded->output_regions));
  outputs.HoldInputs(std::move(decoded->inputs));
  absl::StatusOr<void*> y = outputs.AddOutput(kY, kY.type);
  ASSERT_TRUE(y.ok()) << y.status();

  object.Truncate(10);     // The client, while the model runs.
  EXPECT_EQ(input[0], 0);  // Trapped: zeros, not a SIGBUS.
  std::memset(*y, 1, 16);  // The output's writes land on zeros too.
  absl::Status finished = outputs.FinishRegions();
  EXPECT_EQ(finished.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(finished.message()),
      ::testing::AllOf(HasSubstr("shared memory region 'r'"), HasSubstr("now holds 10 bytes")));
}

}  // namespace
}  // namespace replicad
