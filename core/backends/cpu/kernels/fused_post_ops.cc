#include "core/backends/cpu/kernels/fused_post_ops.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "core/ops/fused_activation.h"

namespace replicad {
namespace {

// Forwards everything to the kernel it wraps; Run then applies the step.
class ActivationPassKernel : public Kernel {
 public:
  ActivationPassKernel(std::unique_ptr<Kernel> inner, const ActivationStep& step, size_t floats)
      : inner_(std::move(inner)), step_(step), floats_(floats) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    absl::Status status = inner_->Run(run, inputs, outputs);
    if (status.ok()) RunActivationPass(step_, static_cast<float*>(outputs[0]), floats_);
    return status;
  }
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  void SetWorkspace(void* workspace) override { inner_->SetWorkspace(workspace); }
  std::string native_output_layout() const override { return inner_->native_output_layout(); }
  size_t native_output_bytes() const override { return inner_->native_output_bytes(); }
  int overwritable_input() const override { return inner_->overwritable_input(); }

 private:
  std::unique_ptr<Kernel> inner_;
  ActivationStep step_;
  size_t floats_;
};

class ActivationStepKernel : public Kernel {
 public:
  ActivationStepKernel(const ActivationStep& step, size_t floats) : step_(step), floats_(floats) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    RunActivationPass(step_, static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]),
                      floats_);
    return absl::OkStatus();
  }

 private:
  ActivationStep step_;
  size_t floats_;
};

ActivationStep Clamp(float low, float high) { return {ActivationPass::kClip, low, high}; }

}  // namespace

absl::Status AppendFusedActivation(const KernelSpec& spec, dnnl::post_ops* ops,
                                   ActivationStep* by_caller, bool silu_by_caller,
                                   bool clamp_by_caller) {
  *by_caller = ActivationStep{};
  absl::StatusOr<std::optional<FusedActivation>> fused = ReadFusedActivation(*spec.attributes);
  if (!fused.ok()) return fused.status();
  if (!fused->has_value()) return absl::OkStatus();
  const FusedActivation& a = **fused;
  using dnnl::algorithm;
  if ((a.op_type == "Relu" || (a.op_type == "LeakyRelu" && a.alpha == 0.0f)) && clamp_by_caller) {
    *by_caller = Clamp(0.0f, std::numeric_limits<float>::infinity());
  } else if (a.op_type == "Relu") {
    ops->append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
  } else if (a.op_type == "LeakyRelu") {
    // With a slope, oneDNN's relu compares and blends: NaN stays.
    ops->append_eltwise(1.0f, algorithm::eltwise_relu, a.alpha, 0.0f);
  } else if (a.op_type == "Clip" && clamp_by_caller) {
    *by_caller = Clamp(a.alpha, a.beta);
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
    if (clamp_by_caller) {
      *by_caller = Clamp(0.0f, 1.0f);
    } else {
      ops->append_eltwise(1.0f, algorithm::eltwise_clip_v2, 0.0f, 1.0f);
    }
  } else if (a.op_type == "Swish" && a.alpha == 1.0f && silu_by_caller) {
    *by_caller = ActivationStep{ActivationPass::kSilu};
  } else if (a.op_type == "Swish") {
    ops->append_eltwise(1.0f, algorithm::eltwise_swish, a.alpha, 0.0f);
  } else if (a.op_type == "Gelu") {
    ops->append_eltwise(1.0f, algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
  } else {
    return absl::InvalidArgumentError("fused activation " + a.op_type + " has no oneDNN post-op");
  }
  return absl::OkStatus();
}

std::unique_ptr<Kernel> WithActivationPass(std::unique_ptr<Kernel> inner,
                                           const ActivationStep& step, size_t floats) {
  if (step.pass == ActivationPass::kNone) return inner;
  return std::make_unique<ActivationPassKernel>(std::move(inner), step, floats);
}

std::unique_ptr<Kernel> MakeActivationStepKernel(const ActivationStep& step, size_t floats) {
  return std::make_unique<ActivationStepKernel>(step, floats);
}

}  // namespace replicad
