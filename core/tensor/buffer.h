#ifndef REPLICAD_CORE_TENSOR_BUFFER_H_
#define REPLICAD_CORE_TENSOR_BUFFER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace replicad {

// Where bytes live: host memory, or the memory of one CUDA device.
enum class MemoryKind { kHost, kCuda };

struct MemoryLocation {
  MemoryKind kind = MemoryKind::kHost;
  int device_id = 0;  // The CUDA ordinal for kCuda; 0 for host memory.

  bool operator==(const MemoryLocation& o) const {
    return kind == o.kind && device_id == o.device_id;
  }
};

// "host" or "cuda:1".
std::string MemoryLocationToString(const MemoryLocation& location);

// A contiguous block of memory that knows where it lives. A Buffer either owns
// its block (and calls `release` once when destroyed) or borrows one that
// `keep_alive` keeps valid (e.g. the bytes of a gRPC request). Immutable after
// construction; safe to share between threads.
class Buffer {
 public:
  using Release = std::function<void(void*)>;

  Buffer(void* data, size_t bytes, MemoryLocation location, Release release);
  Buffer(void* data, size_t bytes, MemoryLocation location, std::shared_ptr<const void> keep_alive);
  ~Buffer();

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Host memory from the heap, 64-byte aligned, zero-filled.
  static std::shared_ptr<Buffer> AllocateHost(size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const MemoryLocation& location() const { return location_; }

 private:
  void* data_;
  size_t bytes_;
  MemoryLocation location_;
  Release release_;
  std::shared_ptr<const void> keep_alive_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TENSOR_BUFFER_H_
