#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/device/kernel.h"
#include "core/ops/op_util.h"
#include "core/tensor/buffer.h"

namespace replicad {

// Internal to the CUDA kernels: an input whose values decide what a kernel
// reads (a gather's or scatter's int64 indices, RoiAlign's batch_indices
// and float rois), as Run finds it checked by the CPU kernel's own check, so
// a bad value fails the request with the CPU backend's message and nothing
// is launched. Values known when the plan is made are checked once, when the
// kernel is built, and kept in device memory. Values that are data (token
// ids, positions, detections' boxes) are read back and checked on every Run
// before anything is enqueued; that read waits for the stream, as Gather's
// does, and a kernel holding such values is not replayable
// (Kernel::replayable: a replay would skip the check).
// Used on the slot's host thread only, as the kernel holding it.
template <typename T>
class CheckedInput {
 public:
  // OK, or the CPU kernel's error for the first bad value of `values`.
  using Check = std::function<absl::Status(const T* values)>;

  // Input `input` of spec, `count` values. Fails with `check`'s error when
  // the values are known and bad, or when their upload fails.
  static absl::StatusOr<CheckedInput> Make(const KernelSpec& spec, CudaKernelContext& context,
                                           int input, int64_t count, Check check) {
    const Tensor* constant = ConstantInput(spec, input);
    if (constant == nullptr) return CheckedInput(std::move(check), nullptr, count);
    REPLICAD_RETURN_IF_ERROR(check(constant->data<T>()));
    REPLICAD_ASSIGN_OR_RETURN(
        std::shared_ptr<Buffer> buffer,
        UploadToDevice(context, constant->data<T>(), static_cast<size_t>(count) * sizeof(T)));
    return CheckedInput(std::move(check), std::move(buffer), 0);
  }

  // The device values of this Run, `data` being the input's device pointer;
  // `check`'s error, or the failing copy's, when they are data.
  absl::StatusOr<const T*> Get(const CudaKernelContext& context, const void* data) {
    REPLICAD_RETURN_IF_ERROR(Fetch(context, data));
    if (!host_.empty()) {
      REPLICAD_CUDA_RETURN_IF_ERROR(context.device, cudaStreamSynchronize(context.stream));
    }
    return Checked(data);
  }

  // Get in two halves, for a kernel with several checked inputs that waits
  // for the stream once: Fetch enqueues the copy of data values to the host;
  // after the stream has been synchronized, Checked checks them.
  absl::Status Fetch(const CudaKernelContext& context, const void* data) {
    if (constant_ != nullptr || host_.empty()) return absl::OkStatus();
    REPLICAD_CUDA_RETURN_IF_ERROR(context.device,
                                  cudaMemcpyAsync(host_.data(), data, host_.size() * sizeof(T),
                                                  cudaMemcpyDeviceToHost, context.stream));
    return absl::OkStatus();
  }
  absl::StatusOr<const T*> Checked(const void* data) {
    if (constant_ != nullptr) return static_cast<const T*>(constant_->data());
    if (!host_.empty()) REPLICAD_RETURN_IF_ERROR(check_(host_.data()));
    return static_cast<const T*>(data);
  }

  bool known_when_planned() const { return constant_ != nullptr; }

 private:
  CheckedInput(Check check, std::shared_ptr<Buffer> constant, int64_t data_count)
      : check_(std::move(check)),
        constant_(std::move(constant)),
        host_(static_cast<size_t>(data_count)) {}

  Check check_;
  std::shared_ptr<Buffer> constant_;
  std::vector<T> host_;  // Sized when built, so that Run does not allocate.
};

using CheckedIndices = CheckedInput<int64_t>;

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_CHECKED_INDICES_H_
