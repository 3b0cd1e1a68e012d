#ifndef REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_KERNEL_H_
#define REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_KERNEL_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <utility>

#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/device/kernel.h"

namespace replicad {

// Internal to the CUDA backend: a kernel whose Run is one launch of our own
// .cu code on the slot's stream (what it reads and writes fixed when it is
// built), its status the launch's, named `name`.
class LaunchKernel final : public Kernel {
 public:
  using Launch =
      std::function<void(const void* const* inputs, void* const* outputs, cudaStream_t stream)>;
  LaunchKernel(const CudaKernelContext& context, std::string name, Launch launch)
      : context_(context), name_(std::move(name)), launch_(std::move(launch)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    launch_(inputs, outputs, context_.stream);
    return LastLaunchStatus(context_.device, name_);
  }

 private:
  const CudaKernelContext& context_;
  std::string name_;
  Launch launch_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_KERNELS_LAUNCH_KERNEL_H_
