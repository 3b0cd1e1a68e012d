// Freed memory the allocator keeps is handed back once it passes the threshold.
#include "server/memory_trimmer.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace replicad {
namespace {

// ASan and TSan replace glibc's malloc: the blocks below never reach glibc's arenas, so
// there is nothing held there to measure or trim.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || \
    defined(REPLICAD_THREAD_SANITIZER)
#define REPLICAD_MALLOC_REPLACED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REPLICAD_MALLOC_REPLACED 1
#endif
#endif

// malloc and free the compiler cannot leave out (it may drop a block never read).
void* Allocate(size_t bytes) {
  void* p = std::malloc(bytes);
  std::memset(p, 1, bytes);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}
void Release(void* p) {
  asm volatile("" : : "r"(p) : "memory");
  std::free(p);
}

// glibc would raise its mmap threshold to 20 MiB on freeing the first block,
// and take the next 2 MiB from an arena; with the threshold fixed at 1 MiB
// that one is mapped on its own too (mallinfo2's hblks counts such blocks).
// First in this file: glibc maps a block only when its arena has no free
// chunk that fits, and the next test leaves one of 32 MiB; the threshold
// stays fixed for the process.
TEST(MemoryTrimmerTest, BlocksFromTheThresholdOnAreMappedOnTheirOwn) {
#ifdef REPLICAD_MALLOC_REPLACED
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc in this build";
#endif
  MemoryTrimmer::MapAllocationsFrom(size_t{1} << 20);
  Release(Allocate(size_t{20} << 20));
  const size_t mapped = mallinfo2().hblks;
  void* block = Allocate(size_t{2} << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped + 1);
  Release(block);
  EXPECT_EQ(mallinfo2().hblks, mapped);
  void* small = Allocate(size_t{512} << 10);  // Below it: from an arena.
  EXPECT_EQ(mallinfo2().hblks, mapped);
  Release(small);
}

TEST(MemoryTrimmerTest, TrimsFreedBlocksHeldInTheArenas) {
#ifdef REPLICAD_MALLOC_REPLACED
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc in this build";
#endif
  // Many mid-sized blocks (below glibc's mmap threshold, so they come from
  // the heap), then all but the last freed: the heap cannot shrink past the
  // last one, so the freed bytes stay held until trimmed.
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 512; ++i) {
    blocks.emplace_back(new char[64 * 1024]);
    std::memset(blocks.back().get(), 1, 64 * 1024);
  }
  for (size_t i = 0; i + 1 < blocks.size(); ++i) blocks[i].reset();
  const size_t held = MemoryTrimmer::FreeHeldBytes();
  EXPECT_GE(held, size_t{16} << 20);
  EXPECT_FALSE(MemoryTrimmer::TrimIfAbove(held + (size_t{1} << 30)));
  EXPECT_TRUE(MemoryTrimmer::TrimIfAbove(size_t{1} << 20));
}

TEST(MemoryTrimmerTest, StopsPromptly) {
  const absl::Time start = absl::Now();
  { MemoryTrimmer trimmer(absl::Seconds(30), size_t{256} << 20); }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace replicad
