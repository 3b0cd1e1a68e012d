#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CPU kernels: a copy in which each output element reads one
// input element, chosen independently per output dim, or a fill value.
// Transpose, Slice, Pad and Expand are this kernel with different tables.
//
// Output element (o_0, ..., o_{r-1}) of `output` (row-major) is
// input[offsets[0][o_0] + ... + offsets[r-1][o_{r-1}]] (offsets in elements
// of the input), or `fill` when any offsets[d][o_d] is kFill. offsets[d] has
// output[d] entries. A rank-0 output copies input element 0. Elements are
// copied as bit patterns of `element_size` bytes (4 or 8), so the kernel
// serves every dtype of that size. Run does not allocate; not thread-safe.
class IndexMapKernel : public Kernel {
 public:
  static constexpr int64_t kFill = -1;

  // `fill` points to element_size bytes; it is copied.
  IndexMapKernel(size_t element_size, Shape output, std::vector<std::vector<int64_t>> offsets,
                 const void* fill);

  absl::Status Run(const void* const* inputs, void* const* outputs) override;

 private:
  template <typename T>
  void Copy(const T* in, T* out);

  size_t element_size_;
  Shape output_;
  std::vector<std::vector<int64_t>> offsets_;
  uint64_t fill_bits_ = 0;
  bool inner_contiguous_ = false;  // The last dim's offsets step by 1 with no fills.
  std::vector<int64_t> index_;     // Sized here so that Run does not allocate.
};

// Row-major strides of `shape`, in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_
