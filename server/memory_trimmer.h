#ifndef REPLICAD_SERVER_MEMORY_TRIMMER_H_
#define REPLICAD_SERVER_MEMORY_TRIMMER_H_

#include <cstddef>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace replicad {

// Hands memory the allocator holds but nobody uses back to the system.
// glibc keeps freed blocks in its arenas: after execution plans are evicted
// (many distinct slice sizes) or a large batch's tensors are freed, RSS sits
// a gigabyte or more above what is live (benchmarks/soak measured 1.8 GB
// falling to 0.74 GB on one malloc_trim). A thread looks every `period` and,
// when more than `threshold_bytes` are free inside the arenas, trims them.
// Trimming walks the arenas under their locks, so it runs at most once per
// period, off every request's path. Stops (and joins) on destruction.
class MemoryTrimmer {
 public:
  MemoryTrimmer(absl::Duration period, size_t threshold_bytes);
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // Makes glibc map every allocation of `bytes` or more on its own, so that
  // freeing it returns its pages at once. By default glibc maps from 128 KiB
  // but raises that bound to the size of each mapped block freed, up to
  // 32 MiB: once a slot's arena has grown and moved, blocks below that come
  // from the arenas and stay resident until a trim (benchmarks/soak/
  // batch_sweep.py, gRPC buffer pool off: RSS after each sweep of batch
  // sizes 1..300 on two slots 190-411 MB, 107-121 MB with 1 MiB fixed).
  // glibc still serves such a block from a free chunk of an arena when one
  // fits. Call once at start, before other threads allocate.
  static void MapAllocationsFrom(size_t bytes);
  static constexpr size_t kDefaultMapBytes = size_t{1} << 20;

  // Bytes free inside the allocator's arenas now (glibc's mallinfo2 fordblks).
  static size_t FreeHeldBytes();
  // Trims when more than `threshold_bytes` are held free; whether it did.
  static bool TrimIfAbove(size_t threshold_bytes);

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_MEMORY_TRIMMER_H_
