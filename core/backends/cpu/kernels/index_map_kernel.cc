#include "core/backends/cpu/kernels/index_map_kernel.h"

#include <algorithm>
#include <cstring>

#include "core/backends/cpu/kernels/parallel_copy.h"

namespace replicad {

IndexMapKernel::IndexMapKernel(size_t element_size, IndexMap map)
    : element_size_(element_size),
      output_(std::move(map.output)),
      offsets_(std::move(map.offsets)),
      fill_bits_(map.fill_bits),
      index_(output_.size()) {
  if (offsets_.empty()) return;
  // The last dim reads a contiguous run when its offsets step by 1 with no
  // fills; each dim before it joins the run while its offsets step by the
  // run's length.
  int64_t step = 1;
  int64_t start = 0;
  int64_t run = 1;
  int d = static_cast<int>(offsets_.size()) - 1;
  for (; d >= 0; --d) {
    const std::vector<int64_t>& dim = offsets_[d];
    bool steps = true;
    for (size_t j = 0; j < dim.size() && steps; ++j) {
      steps = dim[j] != kFill && dim[j] == dim[0] + static_cast<int64_t>(j) * step;
    }
    if (!steps || dim.empty()) break;
    start += dim[0];
    run *= output_[d];
    step = run;
  }
  if (d == static_cast<int>(offsets_.size()) - 1) return;  // Not even the last dim.
  run_ = run;
  run_start_ = start;
  lead_.assign(output_.begin(), output_.begin() + (d + 1));
  offsets_.resize(d + 1);
}

void IndexMapKernel::CopyRuns(const char* in, char* out) {
  const size_t run_bytes = static_cast<size_t>(run_) * element_size_;
  const int rank = static_cast<int>(lead_.size());
  if (rank == 0) {
    CopyAcrossThreads(out, in + run_start_ * element_size_, run_bytes);
    return;
  }
  std::fill(index_.begin(), index_.end(), 0);
  const int64_t runs = NumElements(lead_);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t base = run_start_;
    bool filled = false;  // Padding along a leading dim.
    for (int d = 0; d < rank; ++d) {
      const int64_t offset = offsets_[d][index_[d]];
      filled |= offset == kFill;
      base += offset;
    }
    char* dst = out + r * run_bytes;
    if (filled) {
      for (int64_t j = 0; j < run_; ++j) {
        std::memcpy(dst + j * element_size_, &fill_bits_, element_size_);
      }
    } else {
      std::memcpy(dst, in + base * element_size_, run_bytes);
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++index_[d] < lead_[d]) break;
      index_[d] = 0;
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
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = last[j] == kFill ? fill : in[base + last[j]];
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++index_[d] < output_[d]) break;
      index_[d] = 0;
    }
  }
}

absl::Status IndexMapKernel::Run(const RunContext&, const void* const* inputs,
                                 void* const* outputs) {
  if (NumElements(output_) == 0) return absl::OkStatus();
  if (run_ > 0) {
    CopyRuns(static_cast<const char*>(inputs[0]), static_cast<char*>(outputs[0]));
  } else if (element_size_ == 8) {
    Copy(static_cast<const uint64_t*>(inputs[0]), static_cast<uint64_t*>(outputs[0]));
  } else {
    Copy(static_cast<const uint32_t*>(inputs[0]), static_cast<uint32_t*>(outputs[0]));
  }
  return absl::OkStatus();
}

}  // namespace replicad
