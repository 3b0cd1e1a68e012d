#include "core/device/caching_allocator.h"

#include "absl/strings/str_cat.h"

namespace replicad {

CachingAllocator::CachingAllocator(std::string device, RawAllocator* raw)
    : device_(std::move(device)), raw_(raw) {}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  EmptyCacheLocked();
}

size_t CachingAllocator::RoundUp(size_t bytes) {
  constexpr size_t kSmallGranule = 512;
  constexpr size_t kLarge = size_t{1} << 20;
  if (bytes == 0) return kSmallGranule;
  if (bytes <= kLarge) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  // Eight classes per power of two: the largest power of two <= bytes, over 8.
  size_t power = kLarge;
  while (power <= bytes / 2) power *= 2;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundUp(bytes);
  absl::MutexLock lock(&mu_);
  auto cached = cached_.find(size);
  void* block = nullptr;
  if (cached != cached_.end()) {
    block = cached->second;
    cached_.erase(cached);
    bytes_cached_ -= size;
  } else {
    ++raw_allocations_;
    absl::StatusOr<void*> fresh = raw_->Allocate(size);
    if (!fresh.ok() && bytes_cached_ > 0) {
      // Out of memory with blocks of other sizes idle: give them back, retry once.
      EmptyCacheLocked();
      ++raw_allocations_;
      fresh = raw_->Allocate(size);
    }
    if (!fresh.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(device_, ": out of memory allocating ", size, " bytes (", bytes_in_use_,
                       " bytes in use by replicad on it): ", fresh.status().message()));
    }
    block = *fresh;
  }
  in_use_.emplace(block, size);
  bytes_in_use_ += size;
  return block;
}

void CachingAllocator::Release(void* pointer) {
  absl::MutexLock lock(&mu_);
  auto it = in_use_.find(pointer);
  if (it == in_use_.end()) return;  // Not ours, or released twice: nothing to do.
  cached_.emplace(it->second, pointer);
  bytes_cached_ += it->second;
  bytes_in_use_ -= it->second;
  in_use_.erase(it);
}

void CachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  EmptyCacheLocked();
}

void CachingAllocator::EmptyCacheLocked() {
  for (const auto& [size, block] : cached_) raw_->Free(block);
  cached_.clear();
  bytes_cached_ = 0;
}

size_t CachingAllocator::bytes_in_use() const {
  absl::MutexLock lock(&mu_);
  return bytes_in_use_;
}

size_t CachingAllocator::bytes_cached() const {
  absl::MutexLock lock(&mu_);
  return bytes_cached_;
}

uint64_t CachingAllocator::raw_allocations() const {
  absl::MutexLock lock(&mu_);
  return raw_allocations_;
}

}  // namespace replicad
