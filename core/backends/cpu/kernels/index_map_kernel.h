#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/device/kernel.h"
#include "core/ops/index_map.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CPU kernels: runs an IndexMap (core/ops/index_map.h), the
// form of Transpose, Slice, Pad and Expand. Elements are copied as bit
// patterns of `element_size` bytes (4 or 8), so the kernel serves every dtype
// of that size. Run does not allocate; not thread-safe.
class IndexMapKernel : public Kernel {
 public:
  static constexpr int64_t kFill = IndexMap::kFill;

  IndexMapKernel(size_t element_size, IndexMap map);

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override;

 private:
  template <typename T>
  void Copy(const T* in, T* out);
  void CopyRuns(const char* in, char* out);

  size_t element_size_;
  Shape output_;
  std::vector<std::vector<int64_t>> offsets_;
  uint64_t fill_bits_ = 0;
  // Where the innermost dims read one contiguous run of the input (a Slice
  // along channels: whole H x W planes, back to back), they are merged into
  // runs of `run_` elements from input offset `run_start_` (plus the leading
  // dims' offsets): one memcpy per run. offsets_ then holds the leading dims
  // only, whose sizes are lead_. run_ == 0: no such run.
  Shape lead_;
  int64_t run_ = 0;
  int64_t run_start_ = 0;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_INDEX_MAP_KERNEL_H_
