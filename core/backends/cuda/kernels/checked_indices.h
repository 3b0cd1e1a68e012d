#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/tensor/buffer.h"

namespace replicad {

// Internal to the CUDA kernels: an int64 index input of a kernel (a gather's
// or scatter's indices, RoiAlign's batch_indices), as Run finds it checked by
// the CPU kernel's own check, so a bad index fails the request with the CPU
// backend's message and nothing is launched. Indices known when the plan is
// made are checked once, when the kernel is built, and kept in device memory.
// Indices that are data (token ids, positions, detections' images) are read
// back and checked on every Run before anything is enqueued; that read waits
// for the stream, as Gather's does, and a kernel holding such indices is not
// replayable (Kernel::replayable: a replay would skip the check).
// Used on the slot's host thread only, as the kernel holding it.
class CheckedIndices {
 public:
  // OK, or the CPU kernel's error for the first bad index of `indices`.
  using Check = std::function<absl::Status(const int64_t* indices)>;

  // Input `input` of spec, `count` indices. Fails with `check`'s error when
  // the indices are known and bad, or when their upload fails.
  static absl::StatusOr<CheckedIndices> Make(const KernelSpec& spec, CudaKernelContext& context,
                                             int input, int64_t count, Check check);

  // The device indices of this Run, `data` being the input's device pointer;
  // `check`'s error, or the failing copy's, when they are data.
  absl::StatusOr<const int64_t*> Get(const CudaKernelContext& context, const void* data);

  bool known_when_planned() const { return constant_ != nullptr; }

 private:
  CheckedIndices(Check check, std::shared_ptr<Buffer> constant, int64_t data_count)
      : check_(std::move(check)),
        constant_(std::move(constant)),
        host_(static_cast<size_t>(data_count)) {}

  Check check_;
  std::shared_ptr<Buffer> constant_;
  std::vector<int64_t> host_;  // Sized when built, so that Run does not allocate.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_
