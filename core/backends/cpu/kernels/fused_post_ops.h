#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_

#include "absl/status/status.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: appends the node's fused activation (see
// core/ops/fused_activation.h), if any, to `ops` as an eltwise post-op, so
// Conv and Gemm apply it while their output is still in cache. Where
// `silu_by_caller` is given and the activation is SiLU (Swish with alpha 1),
// appends nothing and sets it: the caller runs SiluInPlace (silu.h) over its
// output, faster than oneDNN's swish. InvalidArgument for an activation
// oneDNN cannot apply.
absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops,
                                   bool* silu_by_caller = nullptr);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
