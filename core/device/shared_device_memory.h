#ifndef REPLICAD_CORE_DEVICE_SHARED_DEVICE_MEMORY_H_
#define REPLICAD_CORE_DEVICE_SHARED_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace replicad {

// The bytes of a CUDA IPC handle (cudaIpcMemHandle_t), as clients send it.
inline constexpr size_t kIpcHandleBytes = 64;

// A GPU allocation that another process exported (cudaIpcGetMemHandle) and
// this one opened: what a client's CUDA shared-memory region holds. It stays
// open while this object lives. Copies are synchronous and thread-safe; each
// range must lie within bytes(), which the caller checks (an out-of-range
// copy is Internal, never a read of someone else's memory).
class SharedDeviceMemory {
 public:
  virtual ~SharedDeviceMemory() = default;

  // The allocation's size as the driver reports it, from the opened address
  // on; 0 where the driver cannot tell (then no copy is made: a region is
  // refused rather than bounded by the client's word).
  virtual uint64_t bytes() const = 0;
  // Which GPU holds it (CUDA's device ordinal).
  virtual int device() const = 0;
  // The opened address, to tell two regions over one allocation apart.
  virtual uintptr_t address() const = 0;

  // [offset, offset + n) of the allocation into host memory `out`.
  virtual absl::Status CopyToHost(uint64_t offset, size_t n, void* out) const = 0;
  // Host memory `data` of n bytes into [offset, offset + n).
  virtual absl::Status CopyFromHost(uint64_t offset, const void* data, size_t n) const = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_SHARED_DEVICE_MEMORY_H_
