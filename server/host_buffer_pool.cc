#include "server/host_buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace replicad {
namespace {

// From this size on, buffers are mapped on their own with MAP_POPULATE: the
// kernel faults every page in one call, and freeing returns them at once.
// Smaller ones come from the heap, where glibc keeps them warm anyway.
constexpr size_t kMapBytes = size_t{256} << 10;
constexpr size_t kPageBytes = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Block {
  char* data;
  size_t capacity;
  bool mapped;
};

void Free(const Block& block) {
  if (block.mapped) {
    munmap(block.data, block.capacity);
  } else {
    std::free(block.data);
  }
}

}  // namespace

struct HostBuffer::Shelf {
  explicit Shelf(size_t max_idle_bytes) : max_idle_bytes(max_idle_bytes) {}
  ~Shelf() {
    for (const Block& block : idle) Free(block);
  }

  // A buffer is handed out (under mu).
  void CountOut() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++in_use;
    peak_in_use = std::max(peak_in_use, in_use);
  }

  // Keeps `block` idle if it fits under the caps, dropping the oldest idle
  // ones to make room; frees whatever is not kept (outside the lock: munmap
  // of a large mapping is not free).
  void Return(const Block& block) {
    std::vector<Block> drop;
    {
      absl::MutexLock lock(&mu);
      --in_use;
      const absl::Time now = absl::Now();
      if (now - window_start >= kWindow) {
        last_window_peak = peak_in_use;
        peak_in_use = in_use;
        window_start = now;
      }
      const size_t max_idle_count =
          std::max({peak_in_use, last_window_peak, HostBufferPool::kMinIdleBuffers});
      if (block.capacity > max_idle_bytes) {
        drop.push_back(block);
      } else {
        idle.push_back(block);
        idle_bytes += block.capacity;
        size_t oldest = 0;
        while (idle_bytes > max_idle_bytes || idle.size() - oldest > max_idle_count) {
          idle_bytes -= idle[oldest].capacity;
          drop.push_back(idle[oldest++]);
        }
        idle.erase(idle.begin(), idle.begin() + oldest);
      }
    }
    for (const Block& b : drop) Free(b);
  }

  // The idle count is bounded by the most buffers held at once in this
  // window or the last (and kMinIdleBuffers): more would never all be taken
  // again, since each request holds its own, and a run of ever new sizes
  // (a client sweeping batch sizes) would fill the byte cap with buffers
  // of sizes gone by.
  static constexpr absl::Duration kWindow = absl::Seconds(10);
  const size_t max_idle_bytes;
  absl::Mutex mu;
  std::vector<Block> idle ABSL_GUARDED_BY(mu);  // Oldest release first.
  size_t idle_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t in_use ABSL_GUARDED_BY(mu) = 0;  // Buffers handed out, not yet back.
  size_t peak_in_use ABSL_GUARDED_BY(mu) = 0;
  size_t last_window_peak ABSL_GUARDED_BY(mu) = 0;
  absl::Time window_start ABSL_GUARDED_BY(mu) = absl::Now();
};

HostBuffer::~HostBuffer() {
  const Block block{data_, capacity_, mapped_};
  if (std::shared_ptr<Shelf> shelf = home_.lock()) {
    shelf->Return(block);
  } else {
    Free(block);
  }
}

HostBufferPool::HostBufferPool(size_t max_idle_bytes)
    : max_idle_bytes_(max_idle_bytes),
      shelf_(std::make_shared<HostBuffer::Shelf>(max_idle_bytes)) {}

HostBufferPool::~HostBufferPool() = default;

absl::StatusOr<std::shared_ptr<HostBuffer>> HostBufferPool::Get(size_t bytes) {
  {
    absl::MutexLock lock(&shelf_->mu);
    // The smallest idle buffer that holds `bytes` without wasting more than
    // as much again (a 19 MB buffer is not spent on a 100-byte tensor).
    std::vector<Block>& idle = shelf_->idle;
    auto best = idle.end();
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (it->capacity >= bytes && it->capacity <= 2 * bytes + kPageBytes &&
          (best == idle.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle.end()) {
      const Block block = *best;
      idle.erase(best);
      shelf_->idle_bytes -= block.capacity;
      shelf_->CountOut();
      return std::shared_ptr<HostBuffer>(
          new HostBuffer(block.data, block.capacity, block.mapped, bytes, shelf_));
    }
  }
  Block block{nullptr, 0, bytes >= kMapBytes};
  if (block.mapped) {
    block.capacity = RoundUp(bytes, kPageBytes);
    void* p = mmap(nullptr, block.capacity, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p != MAP_FAILED) block.data = static_cast<char*>(p);
  } else {
    block.capacity = RoundUp(std::max<size_t>(bytes, 1), kAlignment);
    block.data = static_cast<char*>(std::aligned_alloc(kAlignment, block.capacity));
  }
  if (block.data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory for a tensor"));
  }
  {
    absl::MutexLock lock(&shelf_->mu);
    shelf_->CountOut();
  }
  return std::shared_ptr<HostBuffer>(
      new HostBuffer(block.data, block.capacity, block.mapped, bytes, shelf_));
}

size_t HostBufferPool::idle_bytes() const {
  absl::MutexLock lock(&shelf_->mu);
  return shelf_->idle_bytes;
}

}  // namespace replicad
