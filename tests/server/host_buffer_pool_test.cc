// The pooled buffers the raw gRPC doors gather tensors into: alignment, reuse by the next request
// of a similar size, the idle cap (oldest first), no more idle buffers than were held at once, a
// cap of zero, buffers that outlive their pool, concurrent gets and releases.

#include "server/host_buffer_pool.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::shared_ptr<HostBuffer> Get(HostBufferPool& pool, size_t bytes) {
  absl::StatusOr<std::shared_ptr<HostBuffer>> buffer = pool.Get(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return buffer.ok() ? *std::move(buffer) : nullptr;
}

TEST(HostBufferPoolTest, BuffersAreAlignedWritableAndOfTheSizeAsked) {
  HostBufferPool pool(16 * kMiB);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4095},
                       size_t{300000}, kMiB + 3}) {
    SCOPED_TRACE(bytes);
    std::shared_ptr<HostBuffer> buffer = Get(pool, bytes);
    ASSERT_NE(buffer, nullptr);
    ASSERT_NE(buffer->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % HostBufferPool::kAlignment, 0u);
    EXPECT_EQ(buffer->size(), bytes);
    EXPECT_EQ(buffer->view().size(), bytes);
    std::memset(buffer->data(), 0x5a, bytes);
  }
  EXPECT_EQ(BytesOf(nullptr).size(), 0u);
  EXPECT_NE(BytesOf(nullptr).data(), nullptr);
}

TEST(HostBufferPoolTest, AReleasedBufferServesTheNextRequestOfASimilarSize) {
  HostBufferPool pool(16 * kMiB);
  char* first = nullptr;
  {
    std::shared_ptr<HostBuffer> buffer = Get(pool, 2 * kMiB);
    first = buffer->data();
  }
  EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);
  {
    // Not for a tensor of a few bytes: that would hold 2 MiB for nothing.
    std::shared_ptr<HostBuffer> small = Get(pool, 100);
    EXPECT_NE(small->data(), first);
    EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);
  }
  {
    std::shared_ptr<HostBuffer> again = Get(pool, 1536 * 1024);  // Within twice its size.
    EXPECT_EQ(again->data(), first);
    EXPECT_EQ(again->size(), size_t{1536} * 1024);
    EXPECT_EQ(pool.idle_bytes(), 128u);                       // Only the small one.
    std::shared_ptr<HostBuffer> other = Get(pool, 2 * kMiB);  // The one is taken: a new one.
    EXPECT_NE(other->data(), first);
  }
}

TEST(HostBufferPoolTest, IdleBytesStayUnderTheCapOldestFirst) {
  HostBufferPool pool(3 * kMiB);
  std::vector<std::shared_ptr<HostBuffer>> held;
  for (int i = 0; i < 4; ++i) held.push_back(Get(pool, kMiB));
  const char* oldest = held[0]->data();
  const char* newest = held[3]->data();
  for (auto& b : held) b.reset();  // In order: the first goes when the fourth comes back.
  EXPECT_EQ(pool.idle_bytes(), 3 * kMiB);
  std::vector<std::shared_ptr<HostBuffer>> again;
  for (int i = 0; i < 3; ++i) again.push_back(Get(pool, kMiB));
  bool saw_newest = false;
  for (const auto& b : again) {
    EXPECT_NE(b->data(), oldest);
    saw_newest |= b->data() == newest;
  }
  EXPECT_TRUE(saw_newest);
  EXPECT_EQ(pool.idle_bytes(), 0u);
  again.clear();
  // Larger than the cap: freed at once, the idle ones kept.
  Get(pool, 5 * kMiB);
  EXPECT_EQ(pool.idle_bytes(), 3 * kMiB);
}

// A client sweeping batch sizes one request at a time: each request larger
// than any idle buffer. The pool keeps a few (kMinIdleBuffers), not the byte
// cap's worth of sizes gone by; after eight were held at once, it keeps eight.
TEST(HostBufferPoolTest, IdleBuffersNumberNoMoreThanWereHeldAtOnce) {
  HostBufferPool pool(256 * kMiB);
  for (size_t step = 1; step <= 40; ++step) Get(pool, step * 300 * 1024);
  size_t kept = HostBufferPool::kMinIdleBuffers;
  size_t expected_bytes = 0;
  for (size_t step = 41 - kept; step <= 40; ++step) expected_bytes += step * 300 * 1024;
  EXPECT_EQ(pool.idle_bytes(), expected_bytes);

  std::vector<std::shared_ptr<HostBuffer>> held;
  for (int i = 0; i < 8; ++i) held.push_back(Get(pool, 2 * kMiB + i * 64 * 1024));
  held.clear();
  expected_bytes = 0;
  for (int i = 0; i < 8; ++i) expected_bytes += 2 * kMiB + i * 64 * 1024;
  EXPECT_EQ(pool.idle_bytes(), expected_bytes);
}

TEST(HostBufferPoolTest, ACapOfZeroKeepsNothing) {
  HostBufferPool pool(0);
  Get(pool, kMiB);
  Get(pool, 10);
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

TEST(HostBufferPoolTest, BuffersMayOutliveTheirPool) {
  std::shared_ptr<HostBuffer> large, small;
  {
    HostBufferPool pool(16 * kMiB);
    Get(pool, kMiB);  // Idle when the pool goes.
    large = Get(pool, 3 * kMiB);
    small = Get(pool, 100);
  }
  std::memset(large->data(), 1, large->size());
  std::memset(small->data(), 2, small->size());
  large.reset();  // Freed, not returned: there is no pool to return to.
  small.reset();
}

TEST(HostBufferPoolTest, ConcurrentGetsAndReleases) {
  HostBufferPool pool(4 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      std::mt19937 rng(t);
      std::vector<std::shared_ptr<HostBuffer>> held;
      for (int i = 0; i < 300; ++i) {
        const size_t bytes = rng() % 2 ? rng() % 1000 : rng() % (2 * kMiB);
        absl::StatusOr<std::shared_ptr<HostBuffer>> b = pool.Get(bytes);
        ASSERT_TRUE(b.ok());
        std::memset((*b)->data(), t, bytes);
        held.push_back(*std::move(b));
        if (held.size() > 3) held.erase(held.begin() + rng() % held.size());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(pool.idle_bytes(), 4 * kMiB);
}

}  // namespace
}  // namespace replicad
