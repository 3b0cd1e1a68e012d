#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_

#include "absl/status/status.h"
#include "core/backends/cpu/kernels/activation_pass.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: appends the node's fused activation (see
// core/ops/fused_activation.h), if any, to `ops` as an eltwise post-op, so
// Conv and Gemm apply it while their output is still in cache. Where
// `by_caller` is given and the activation is SiLU (Swish with alpha 1),
// appends nothing and sets it to kSilu: the caller runs RunActivationPass
// over its output, faster than oneDNN's post-op (see activation_pass.h);
// else sets it to kNone. InvalidArgument for an activation oneDNN cannot
// apply.
absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops,
                                   ActivationPass* by_caller = nullptr);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
