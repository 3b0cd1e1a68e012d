#include "core/backends/cpu/kernels/fused_post_ops.h"

#include "core/ops/fused_activation.h"

namespace replicad {

absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops,
                                   ActivationPass* by_caller) {
  if (by_caller != nullptr) *by_caller = ActivationPass::kNone;
  absl::StatusOr<std::optional<FusedActivation>> fused = ReadFusedActivation(*spec.attributes);
  if (!fused.ok()) return fused.status();
  if (!fused->has_value()) return absl::OkStatus();
  const FusedActivation& a = **fused;
  using dnnl::algorithm;
  if (a.op_type == "Relu") {
    ops->append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
  } else if (a.op_type == "LeakyRelu") {
    ops->append_eltwise(1.0f, algorithm::eltwise_relu, a.alpha, 0.0f);
  } else if (a.op_type == "Clip") {
    // clip_v2 is min(max(x, alpha), beta), ONNX's Clip; clip (v1) excludes alpha.
    ops->append_eltwise(1.0f, algorithm::eltwise_clip_v2, a.alpha, a.beta);
  } else if (a.op_type == "Sigmoid") {
    ops->append_eltwise(1.0f, algorithm::eltwise_logistic, 0.0f, 0.0f);
  } else if (a.op_type == "Tanh") {
    ops->append_eltwise(1.0f, algorithm::eltwise_tanh, 0.0f, 0.0f);
  } else if (a.op_type == "HardSwish") {
    ops->append_eltwise(1.0f, algorithm::eltwise_hardswish, 0.0f, 0.0f);
  } else if (a.op_type == "HardSigmoid") {
    // min(max(alpha * x + beta, 0), 1): oneDNN 2.6 has no hardsigmoid.
    ops->append_eltwise(1.0f, algorithm::eltwise_linear, a.alpha, a.beta);
    ops->append_eltwise(1.0f, algorithm::eltwise_clip_v2, 0.0f, 1.0f);
  } else if (a.op_type == "Swish" && a.alpha == 1.0f && by_caller != nullptr) {
    *by_caller = ActivationPass::kSilu;
  } else if (a.op_type == "Swish") {
    ops->append_eltwise(1.0f, algorithm::eltwise_swish, a.alpha, 0.0f);
  } else if (a.op_type == "Gelu") {
    ops->append_eltwise(1.0f, algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
  } else {
    return absl::InvalidArgumentError("fused activation " + a.op_type + " has no oneDNN post-op");
  }
  return absl::OkStatus();
}

}  // namespace replicad
