#include "core/backends/cpu/kernels/slot_scratchpad.h"

#include <new>
#include <utility>

namespace replicad {
namespace {

constexpr size_t kAlignment = 64;

size_t Rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

SlotScratchpad::Claim::Claim(Claim&& other) noexcept
    : needs_(std::move(other.needs_)), bytes_(std::exchange(other.bytes_, 0)) {}

SlotScratchpad::Claim& SlotScratchpad::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Claim dropped(std::move(*this));
    needs_ = std::move(other.needs_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

SlotScratchpad::Claim::~Claim() {
  if (needs_ == nullptr) return;
  absl::MutexLock lock(&needs_->mu);
  auto it = needs_->sizes.find(bytes_);
  if (it != needs_->sizes.end() && --it->second == 0) needs_->sizes.erase(it);
  needs_->dropped.store(true, std::memory_order_release);
}

SlotScratchpad::SlotScratchpad() : needs_(std::make_shared<Claim::Needs>()) {}

SlotScratchpad::Claim SlotScratchpad::Reserve(size_t bytes) {
  {
    absl::MutexLock lock(&needs_->mu);
    ++needs_->sizes[bytes];
  }
  if (bytes > size_) Resize(bytes);
  return Claim(needs_, bytes);
}

void SlotScratchpad::Trim() {
  // A load first: no write to the flag's cache line on every primitive's run.
  if (!needs_->dropped.load(std::memory_order_relaxed) ||
      !needs_->dropped.exchange(false, std::memory_order_acquire)) {
    return;
  }
  size_t largest = 0;
  {
    absl::MutexLock lock(&needs_->mu);
    if (!needs_->sizes.empty()) largest = needs_->sizes.rbegin()->first;
  }
  if (Rounded(largest) < size_) Resize(largest);
}

void SlotScratchpad::Resize(size_t bytes) {
  buffer_.reset();  // Freed first: the old and the new never both count.
  size_ = 0;
  if (bytes == 0) return;
  const size_t rounded = Rounded(bytes);
  void* buffer = std::aligned_alloc(kAlignment, rounded);
  if (buffer == nullptr) throw std::bad_alloc();
  buffer_.reset(buffer);
  size_ = rounded;
}

}  // namespace replicad
