#ifndef REPLICAD_SERVER_HOST_BUFFER_POOL_H_
#define REPLICAD_SERVER_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace replicad {

// Host memory for the tensor bytes a request brings and its answer sends:
// the gRPC doors gather each request tensor into one buffer and answer with
// slices that borrow the output buffers. A fresh allocation of tens of MB is
// mapped anew and faults once per 4 KiB page on first touch (~10 ms for
// 19 MB); a released buffer goes back to its pool, already faulted in, for
// the next request of a similar size.

// One buffer: `size()` bytes at `data()`, 64-byte aligned, not initialised.
// Returned to its pool when the last owner drops it (from any thread, even
// after the pool is gone: then it is freed). Not copyable.
class HostBuffer {
 public:
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  char* data() const { return data_; }  // Never null, also for size 0.
  size_t size() const { return size_; }
  absl::string_view view() const { return absl::string_view(data_, size_); }

 private:
  friend class HostBufferPool;
  struct Shelf;
  HostBuffer(char* data, size_t capacity, bool mapped, size_t size, std::weak_ptr<Shelf> home)
      : data_(data), capacity_(capacity), mapped_(mapped), size_(size), home_(std::move(home)) {}

  char* const data_;
  const size_t capacity_;
  const bool mapped_;  // mmap'd (large), else aligned_alloc'd.
  const size_t size_;
  const std::weak_ptr<Shelf> home_;
};

// Idle buffers, kept up to `max_idle_bytes` in all (the least recently
// released go first); a released buffer larger than that is freed at once.
// Nor are more buffers kept idle than were held at once in the last 10 to
// 20 seconds (at least kMinIdleBuffers): a run of requests each larger than
// the last keeps a few, not `max_idle_bytes` of sizes gone by.
// Thread-safe.
class HostBufferPool {
 public:
  static constexpr size_t kAlignment = 64;
  // About six resnet18 batches of 32 images (19 MB each).
  static constexpr size_t kDefaultIdleBytes = size_t{128} << 20;
  // The inputs and outputs of one request of a typical model.
  static constexpr size_t kMinIdleBuffers = 4;

  explicit HostBufferPool(size_t max_idle_bytes);
  // Frees the idle buffers; those still held are freed when released.
  ~HostBufferPool();
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  // A buffer of `bytes`: an idle one of at least that capacity and at most
  // about twice it, else a new one (from 256 KiB on, mapped on its own with
  // its pages faulted in here; smaller ones from the heap).
  // ResourceExhausted when the system has no memory for it.
  absl::StatusOr<std::shared_ptr<HostBuffer>> Get(size_t bytes);

  size_t idle_bytes() const;  // Capacity of the idle buffers.
  size_t max_idle_bytes() const { return max_idle_bytes_; }

 private:
  const size_t max_idle_bytes_;
  const std::shared_ptr<HostBuffer::Shelf> shelf_;
};

// The bytes of a buffer that may be null (a field the wire left empty).
inline absl::string_view BytesOf(const std::shared_ptr<HostBuffer>& buffer) {
  return buffer != nullptr ? buffer->view() : absl::string_view("", 0);
}

}  // namespace replicad

#endif  // REPLICAD_SERVER_HOST_BUFFER_POOL_H_
