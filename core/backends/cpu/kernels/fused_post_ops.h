#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "core/backends/cpu/kernels/activation_pass.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: appends the node's fused activation (see
// core/ops/fused_activation.h), if any, to `ops` as an eltwise post-op, so
// Conv and Gemm apply it while their output is still in cache, and sets
// `*by_caller` to the part the caller must run over its output itself with
// RunActivationPass (kNone when there is none):
// - a clamp (Relu, LeakyRelu of slope 0, Clip, HardSigmoid's clip after its
//   linear post-op), where `clamp_by_caller`: oneDNN's post-op turns NaN
//   into a number (see activation_pass.h), so it is exact only for finite
//   inputs (see UnlessNonFinite in non_finite.h);
// - SiLU (Swish with alpha 1), where `silu_by_caller`: faster than oneDNN's
//   post-op.
// InvalidArgument for an activation oneDNN cannot apply.
absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops,
                                   ActivationStep* by_caller, bool silu_by_caller = false,
                                   bool clamp_by_caller = true);

// `inner`, then `step` over output 0's first `floats` floats in place (a
// kernel that leaves its output row-major, or in a native layout whose
// padding the step keeps at zero). `inner` if the step is kNone.
std::unique_ptr<Kernel> WithActivationPass(std::unique_ptr<Kernel> inner,
                                           const ActivationStep& step, size_t floats);

// A kernel that writes `step` of input 0's first `floats` floats to output
// 0 (both row-major): the standalone Relu, Clip and their kin.
std::unique_ptr<Kernel> MakeActivationStepKernel(const ActivationStep& step, size_t floats);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
