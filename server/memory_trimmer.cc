#include "server/memory_trimmer.h"

#include <malloc.h>

namespace replicad {

void MemoryTrimmer::MapAllocationsFrom(size_t bytes) {
  // A fixed threshold also turns off glibc's raising of it (man mallopt).
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes));
}

size_t MemoryTrimmer::FreeHeldBytes() { return mallinfo2().fordblks; }

bool MemoryTrimmer::TrimIfAbove(size_t threshold_bytes) {
  if (FreeHeldBytes() <= threshold_bytes) return false;
  malloc_trim(0);
  return true;
}

MemoryTrimmer::MemoryTrimmer(absl::Duration period, size_t threshold_bytes)
    : thread_([this, period, threshold_bytes] {
        while (!stop_.WaitForNotificationWithTimeout(period)) TrimIfAbove(threshold_bytes);
      }) {}

MemoryTrimmer::~MemoryTrimmer() {
  stop_.Notify();
  thread_.join();
}

}  // namespace replicad
