#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/device/kernel.h"

namespace replicad {

// Internal to the CPU kernels: one builder per operator family, called by
// MakeCpuKernel after it has re-checked spec against the op's shape rule, so
// a builder may assume spec is valid and its outputs are the inferred ones.
// Builders may throw dnnl::error; MakeCpuKernel turns it into a Status.
using KernelOrStatus = absl::StatusOr<std::unique_ptr<Kernel>>;

KernelOrStatus MakeConvKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGemmKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMatMulKernel(const KernelSpec& spec, CpuKernelContext& context);
// Add and Mul, float32 and int64.
KernelOrStatus MakeBinaryKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeReluKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeSoftmaxKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeMaxPoolKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeGlobalAveragePoolKernel(const KernelSpec& spec, CpuKernelContext& context);
// Identity, Flatten and Reshape: the bytes are unchanged, only the type is.
KernelOrStatus MakeCopyKernel(const KernelSpec& spec, CpuKernelContext& context);
KernelOrStatus MakeConstantKernel(const KernelSpec& spec, CpuKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_KERNEL_BUILDERS_H_
