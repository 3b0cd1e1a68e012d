// The caching allocator over a fake device that counts its calls and can run
// out of memory: blocks are reused by size class, out of memory empties the
// cache and retries once, then fails naming the device.
#include "core/device/caching_allocator.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Host memory with a capacity, standing in for a device.
class FakeDevice : public RawAllocator {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks leaked"; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    ++allocations;
    if (used_ + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat("fake device full (", used_, " used)"));
    }
    void* p = std::malloc(bytes);
    live_.emplace(p, bytes);
    used_ += bytes;
    return p;
  }
  void Free(void* pointer) override {
    ++frees;
    auto it = live_.find(pointer);
    ASSERT_NE(it, live_.end()) << "freeing a block the device did not give";
    used_ -= it->second;
    live_.erase(it);
    std::free(pointer);
  }

  int allocations = 0;
  int frees = 0;

 private:
  const size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

TEST(CachingAllocatorTest, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(CachingAllocator::RoundUp(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundUp(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundUp(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundUp(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::RoundUp((1 << 20) + 1), (size_t{1} << 20) + (1 << 17));
  for (size_t bytes : {size_t{3} << 20, size_t{5'000'001}, size_t{123'456'789}}) {
    const size_t size = CachingAllocator::RoundUp(bytes);
    EXPECT_GE(size, bytes);
    EXPECT_LE(size - bytes, bytes / 8) << bytes;
  }
}

// After the first pass (the warm-up), the same pattern of sizes is served
// from the cache: no more device calls.
TEST(CachingAllocatorTest, RequestsAfterWarmUpMakeNoDeviceCalls) {
  FakeDevice device(64 << 20);
  CachingAllocator allocator("cuda:0", &device);
  const std::vector<size_t> pattern = {1000, 4 << 20, 3000, 1000, 9 << 20};
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<void*> blocks;
    for (size_t bytes : pattern) {
      absl::StatusOr<void*> p = allocator.Allocate(bytes);
      ASSERT_TRUE(p.ok()) << p.status();
      blocks.push_back(*p);
    }
    for (void* p : blocks) allocator.Release(p);
  }
  EXPECT_EQ(device.allocations, 5);  // One per block of the first pass.
  EXPECT_EQ(allocator.raw_allocations(), 5u);
  EXPECT_EQ(allocator.bytes_in_use(), 0u);
  EXPECT_GT(allocator.bytes_cached(), (13u << 20));
}

TEST(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheThenNamesTheDevice) {
  FakeDevice device(10 << 20);
  CachingAllocator allocator("cuda:1", &device);
  // Fill the device with idle 4 MiB blocks, then ask for 6 MiB: the cache goes back, the retry
  // fits.
  absl::StatusOr<void*> a = allocator.Allocate(4 << 20);
  absl::StatusOr<void*> b = allocator.Allocate(4 << 20);
  ASSERT_TRUE(a.ok() && b.ok());
  allocator.Release(*a);
  allocator.Release(*b);
  absl::StatusOr<void*> big = allocator.Allocate(6 << 20);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(device.frees, 2);
  EXPECT_EQ(allocator.bytes_cached(), 0u);
  // Nothing idle left to give back: a request that does not fit fails, naming the device.
  absl::StatusOr<void*> too_big = allocator.Allocate(8 << 20);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              AllOf(HasSubstr("cuda:1: out of memory allocating 8388608 bytes"),
                    HasSubstr("6291456 bytes in use"), HasSubstr("fake device full")));
  allocator.Release(*big);
}

}  // namespace
}  // namespace replicad
