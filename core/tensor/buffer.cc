#include "core/tensor/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace replicad {

std::string MemoryLocationToString(const MemoryLocation& location) {
  return location.kind == MemoryKind::kHost ? std::string("host")
                                            : absl::StrCat("cuda:", location.device_id);
}

Buffer::Buffer(void* data, size_t bytes, MemoryLocation location, Release release)
    : data_(data), bytes_(bytes), location_(location), release_(std::move(release)) {}

Buffer::Buffer(void* data, size_t bytes, MemoryLocation location,
               std::shared_ptr<const void> keep_alive)
    : data_(data), bytes_(bytes), location_(location), keep_alive_(std::move(keep_alive)) {}

Buffer::~Buffer() {
  if (release_) release_(data_);
}

std::shared_ptr<Buffer> Buffer::AllocateHost(size_t bytes) {
  constexpr size_t kAlignment = 64;
  // aligned_alloc needs a size that is a multiple of the alignment, and a
  // zero-byte tensor still needs a distinct non-null pointer.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) throw std::bad_alloc();
  std::memset(data, 0, rounded);
  return std::make_shared<Buffer>(data, bytes, MemoryLocation{}, [](void* p) { std::free(p); });
}

}  // namespace replicad
