#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_

#include "absl/status/status.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: appends the node's fused activation (see
// core/ops/fused_activation.h), if any, to `ops` as an eltwise post-op, so
// Conv and Gemm apply it while their output is still in cache.
// InvalidArgument for an activation oneDNN cannot apply.
absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_FUSED_POST_OPS_H_
