#include "core/backends/cpu/kernels/index_map_kernel.h"

#include <algorithm>
#include <cstring>

namespace replicad {

IndexMapKernel::IndexMapKernel(size_t element_size, IndexMap map)
    : element_size_(element_size),
      output_(std::move(map.output)),
      offsets_(std::move(map.offsets)),
      fill_bits_(map.fill_bits),
      index_(output_.size()) {
  if (!offsets_.empty()) {
    const std::vector<int64_t>& last = offsets_.back();
    inner_contiguous_ = true;
    for (size_t j = 0; j < last.size(); ++j) {
      inner_contiguous_ &= last[j] != kFill && last[j] == last[0] + static_cast<int64_t>(j);
    }
  }
}

template <typename T>
void IndexMapKernel::Copy(const T* in, T* out) {
  const int rank = static_cast<int>(output_.size());
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  T fill;
  std::memcpy(&fill, &fill_bits_, sizeof(T));
  const int64_t inner = output_.back();
  const int64_t rows = NumElements(output_) / inner;
  const std::vector<int64_t>& last = offsets_.back();
  std::fill(index_.begin(), index_.end(), 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t base = 0;
    bool filled = false;
    for (int d = 0; d + 1 < rank; ++d) {
      const int64_t offset = offsets_[d][index_[d]];
      filled |= offset == kFill;
      base += offset;
    }
    T* dst = out + row * inner;
    if (filled) {
      std::fill(dst, dst + inner, fill);
    } else if (inner_contiguous_) {
      std::memcpy(dst, in + base + last[0], inner * sizeof(T));
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = last[j] == kFill ? fill : in[base + last[j]];
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++index_[d] < output_[d]) break;
      index_[d] = 0;
    }
  }
}

absl::Status IndexMapKernel::Run(const void* const* inputs, void* const* outputs) {
  if (NumElements(output_) == 0) return absl::OkStatus();
  if (element_size_ == 8) {
    Copy(static_cast<const uint64_t*>(inputs[0]), static_cast<uint64_t*>(outputs[0]));
  } else {
    Copy(static_cast<const uint32_t*>(inputs[0]), static_cast<uint32_t*>(outputs[0]));
  }
  return absl::OkStatus();
}

}  // namespace replicad
