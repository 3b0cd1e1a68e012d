#include "core/backends/cpu/kernels/slot_scratchpad.h"

#include <new>

namespace replicad {

void SlotScratchpad::Reserve(size_t bytes) {
  if (bytes <= size_) return;
  constexpr size_t kAlignment = 64;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* grown = std::aligned_alloc(kAlignment, rounded);
  if (grown == nullptr) throw std::bad_alloc();
  buffer_.reset(grown);
  size_ = rounded;
}

}  // namespace replicad
