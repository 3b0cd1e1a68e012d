#ifndef REPLICAD_CORE_DEVICE_CACHING_ALLOCATOR_H_
#define REPLICAD_CORE_DEVICE_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace replicad {

// Where a CachingAllocator gets memory: a device's own allocation calls
// (cudaMalloc/cudaFree for a CUDA slot). Failing Allocate means out of memory.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* pointer) = 0;
};

// Device memory reused instead of returned: a freed block goes to a cache
// keyed by its size class and serves the next request of that class, so the
// per-request path makes no device allocation call once the sizes it needs
// have been seen (device allocation calls synchronise the device and cost
// milliseconds). Sizes round up to 512 bytes below 1 MiB and to 1/8 of a
// power of two above (at most 12.5% waste). When the device is out of memory
// the allocator frees every cached block and tries once more; then it fails
// with ResourceExhausted naming the device and the sizes. Thread-safe.
class CachingAllocator {
 public:
  // `device` names the device in messages; `raw` must outlive the allocator.
  CachingAllocator(std::string device, RawAllocator* raw);
  ~CachingAllocator();  // Frees every block (none may be in use).

  absl::StatusOr<void*> Allocate(size_t bytes);
  // `pointer` must come from Allocate and not be released yet.
  void Release(void* pointer);
  // Gives every cached (free) block back to the device.
  void EmptyCache();

  // The size class Allocate(bytes) takes.
  static size_t RoundUp(size_t bytes);

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  uint64_t raw_allocations() const;  // Calls to the RawAllocator, for tests and metrics.

 private:
  void EmptyCacheLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string device_;
  RawAllocator* const raw_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, void*> cached_ ABSL_GUARDED_BY(mu_);  // Size class -> free block.
  std::map<void*, size_t> in_use_ ABSL_GUARDED_BY(mu_);       // Block -> size class.
  size_t bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_cached_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t raw_allocations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_CACHING_ALLOCATOR_H_
