#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/fused_post_ops.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/activation_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::algorithm;
using dnnl::memory;

// Element-wise ops see any shape as one flat vector.
memory::desc FlatDesc(const KernelSpec& spec) {
  return memory::desc({NumElements(spec.outputs[0].shape)}, memory::data_type::f32,
                      memory::format_tag::x);
}

// An eltwise primitive from input 0 to output 0.
BoundPrimitive MakeEltwise(CpuKernelContext& context, const memory::desc& data, algorithm kind,
                           float alpha, float beta) {
  const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, kind, data, alpha,
                                         beta);
  const dnnl::eltwise_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::eltwise_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, data, 0);
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return primitive;
}

// Clip whose bounds are inputs 1 and 2 read on every run (they may be
// computed by the graph), or int64 data, which oneDNN does not compute. An
// absent bound is the type's limit, as ONNX defines it. NaN stays NaN and a
// min above max yields max, as numpy.clip does.
template <typename T>
class ClipLoopKernel : public Kernel {
 public:
  ClipLoopKernel(int64_t size, bool has_min, bool has_max)
      : size_(size), has_min_(has_min), has_max_(has_max) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T low = has_min_ ? *static_cast<const T*>(inputs[1]) : std::numeric_limits<T>::lowest();
    const T high = has_max_ ? *static_cast<const T*>(inputs[2]) : std::numeric_limits<T>::max();
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < size_; ++i) {
      T value = x[i];
      if (value < low) value = low;
      if (value > high) value = high;
      y[i] = value;
    }
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  bool has_min_;
  bool has_max_;
};

// A function of the C library over every element, where oneDNN has none
// (erf: eltwise_gelu_erf is GELU, and recovering erf from it divides by x)
// or is not exact enough (its log, a polynomial, gives -1.4e-6 for log(1)).
class LibmKernel : public Kernel {
 public:
  LibmKernel(int64_t size, float (*function)(float)) : size_(size), function_(function) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    // The C library's functions do not vectorize; threads pay off once a
    // chunk is worth more than waking the slot's OpenMP team.
    constexpr int64_t kParallelMin = 1 << 14;
#pragma omp parallel for schedule(static) if (size_ >= kParallelMin)
    for (int64_t i = 0; i < size_; ++i) y[i] = function_(x[i]);
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  float (*function_)(float);
};

// Abs and Neg of integers (oneDNN's eltwise is float); the minimum's
// negation wraps to itself, as numpy's does.
template <typename T, bool kNegate>
class IntegerSignKernel : public Kernel {
 public:
  explicit IntegerSignKernel(int64_t size) : size_(size) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    using U = std::make_unsigned_t<T>;
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < size_; ++i) {
      const bool flip = kNegate || (std::is_signed_v<T> && x[i] < 0);
      y[i] = flip ? static_cast<T>(U(0) - static_cast<U>(x[i])) : x[i];
    }
    return absl::OkStatus();
  }

 private:
  int64_t size_;
};

// Selu: gamma * (x > 0 ? x : alpha * (exp(x) - 1)); oneDNN 2.6 has none.
class SeluKernel : public Kernel {
 public:
  SeluKernel(int64_t size, float alpha, float gamma) : size_(size), alpha_(alpha), gamma_(gamma) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < size_; ++i) {
      y[i] = gamma_ * (x[i] > 0.0f ? x[i] : x[i] <= 0.0f ? alpha_ * std::expm1(x[i]) : x[i]);
    }
    return absl::OkStatus();
  }

 private:
  int64_t size_;
  float alpha_, gamma_;
};

}  // namespace

KernelOrStatus MakeEltwiseKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ActivationAttributes attributes, ParseActivationAttributes(spec));
  const memory::desc data = FlatDesc(spec);
  const std::string& op = spec.op_type;
  const size_t size = NumElements(spec.outputs[0].shape);
  if (op == "HardSigmoid") {
    // oneDNN 2.6 has no hard sigmoid, and its clip makes NaN 0: its linear,
    // then our clamp in place (activation_pass.h).
    return WithActivationPass(
        std::make_unique<PrimitiveKernel>(context, NodeLabel(spec),
                                          MakeEltwise(context, data, algorithm::eltwise_linear,
                                                      attributes.alpha, attributes.beta)),
        ActivationStep{ActivationPass::kClip, 0.0f, 1.0f}, size);
  }
  if (op == "LeakyRelu" && attributes.alpha == 0.0f) {
    // oneDNN's relu of slope 0 makes NaN 0 (with a slope it keeps NaN).
    return MakeActivationStepKernel(
        ActivationStep{ActivationPass::kClip, 0.0f, std::numeric_limits<float>::infinity()}, size);
  }
  const DType dtype = spec.outputs[0].dtype;
  if ((op == "Abs" || op == "Neg") && dtype != DType::kFloat32) {
    return VisitDType(dtype, [&](auto traits) -> KernelOrStatus {
      using T = typename decltype(traits)::Type;
      if constexpr (std::is_integral_v<T>) {
        if (op == "Neg") return std::make_unique<IntegerSignKernel<T, true>>(size);
        return std::make_unique<IntegerSignKernel<T, false>>(size);
      } else {
        return NodeUnimplemented(spec, "float32 takes oneDNN's eltwise");
      }
    });
  }
  if (op == "Selu") return std::make_unique<SeluKernel>(size, attributes.alpha, attributes.beta);
  if (op == "Log") return std::make_unique<LibmKernel>(size, [](float x) { return std::log(x); });
  if (op == "Floor")
    return std::make_unique<LibmKernel>(size, [](float x) { return std::floor(x); });
  if (op == "Ceil") return std::make_unique<LibmKernel>(size, [](float x) { return std::ceil(x); });
  // ONNX rounds halves to even: the C library's default rounding mode.
  if (op == "Round") {
    return std::make_unique<LibmKernel>(size, [](float x) { return std::nearbyint(x); });
  }
  algorithm kind;
  float alpha = 0.0f;
  float beta = 0.0f;
  if (op == "Sigmoid") {
    kind = algorithm::eltwise_logistic;
  } else if (op == "Tanh") {
    kind = algorithm::eltwise_tanh;
  } else if (op == "LeakyRelu") {
    kind = algorithm::eltwise_relu;  // oneDNN's relu takes the negative slope as alpha.
    alpha = attributes.alpha;
  } else if (op == "HardSwish") {
    kind = algorithm::eltwise_hardswish;  // x * max(0, min(1, x / 6 + 1 / 2)), as ONNX's.
  } else if (op == "Sqrt") {
    kind = algorithm::eltwise_sqrt;
  } else if (op == "Exp") {
    kind = algorithm::eltwise_exp;
  } else if (op == "Abs") {
    kind = algorithm::eltwise_abs;
  } else if (op == "Neg") {
    kind = algorithm::eltwise_linear;  // alpha * x + beta
    alpha = -1.0f;
  } else if (op == "Reciprocal") {
    kind = algorithm::eltwise_pow;  // alpha * x ^ beta
    alpha = 1.0f;
    beta = -1.0f;
  } else if (op == "Softplus") {
    kind = algorithm::eltwise_soft_relu;
  } else if (op == "Elu") {
    kind = algorithm::eltwise_elu;
    alpha = attributes.alpha;
  } else if (op == "Mish") {
    kind = algorithm::eltwise_mish;
  } else if (op == "Gelu") {
    REPLICAD_ASSIGN_OR_RETURN(std::string approximate,
                              StringAttribute(spec, "approximate", "none"));
    kind = approximate == "tanh" ? algorithm::eltwise_gelu_tanh : algorithm::eltwise_gelu_erf;
  } else {
    return NodeUnimplemented(spec, "MakeEltwiseKernel does not compute this op");
  }
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec),
                                           MakeEltwise(context, data, kind, alpha, beta));
}

KernelOrStatus MakeClipKernel(const KernelSpec& spec, CpuKernelContext&) {
  const int64_t size = NumElements(spec.outputs[0].shape);
  const bool has_min = HasInput(spec, 1);
  const bool has_max = HasInput(spec, 2);
  if (spec.outputs[0].dtype == DType::kInt64) {
    return std::make_unique<ClipLoopKernel<int64_t>>(size, has_min, has_max);
  }
  const Tensor* min = has_min ? ConstantInput(spec, 1) : nullptr;
  const Tensor* max = has_max ? ConstantInput(spec, 2) : nullptr;
  if ((has_min && min == nullptr) || (has_max && max == nullptr)) {
    return std::make_unique<ClipLoopKernel<float>>(size, has_min, has_max);
  }
  // Bounds known at plan time (ReLU6 and most exported models): our
  // vectorized, threaded clamp, which keeps NaN as the loop does (oneDNN's
  // clip maps it to min; see activation_pass.h). low > high gives high.
  const float low = min != nullptr ? min->data<float>()[0] : std::numeric_limits<float>::lowest();
  const float high = max != nullptr ? max->data<float>()[0] : std::numeric_limits<float>::max();
  return MakeActivationStepKernel(ActivationStep{ActivationPass::kClip, low, high},
                                  static_cast<size_t>(size));
}

KernelOrStatus MakeErfKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return std::make_unique<LibmKernel>(NumElements(spec.outputs[0].shape),
                                      [](float x) { return std::erf(x); });
}

}  // namespace replicad
