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
