#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
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

// An eltwise primitive from input 0 to output 0, or from output 0 to itself
// when `in_place` (the later steps of a chain).
BoundPrimitive MakeEltwise(CpuKernelContext& context, const memory::desc& data, algorithm kind,
                           float alpha, float beta, bool in_place) {
  const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, kind, data, alpha,
                                         beta);
  const dnnl::eltwise_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::eltwise_forward(pd));
  if (in_place) {
    primitive.BindOutput(DNNL_ARG_SRC, data, 0);
  } else {
    primitive.BindInput(DNNL_ARG_SRC, data, 0);
  }
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return primitive;
}

// Primitives submitted in order with one wait at the end. oneDNN 2.6 has no
// hard sigmoid, and an eltwise with an eltwise post-op falls back to its
// reference implementation, which leaves the output zero; so HardSigmoid runs
// as linear, then clip in place.
class PrimitiveChainKernel : public Kernel {
 public:
  PrimitiveChainKernel(CpuKernelContext& context, std::string node,
                       std::vector<BoundPrimitive> primitives)
      : context_(context), node_(std::move(node)), primitives_(std::move(primitives)) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    for (BoundPrimitive& primitive : primitives_) {
      REPLICAD_RETURN_IF_ERROR(primitive.Execute(inputs, outputs, node_));
    }
    return WaitStream(context_, node_);
  }

 private:
  CpuKernelContext& context_;
  std::string node_;
  std::vector<BoundPrimitive> primitives_;
};

// Clip whose bounds are inputs 1 and 2 read on every run (they may be
// computed by the graph), or int64 data, which oneDNN does not compute. An
// absent bound is the type's limit, as ONNX defines it. NaN stays NaN and a
// min above max yields max, as numpy.clip does.
template <typename T>
class ClipLoopKernel : public Kernel {
 public:
  ClipLoopKernel(int64_t size, bool has_min, bool has_max)
      : size_(size), has_min_(has_min), has_max_(has_max) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
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

// oneDNN has no erf (eltwise_gelu_erf is GELU, and recovering erf from it
// divides by x).
class ErfKernel : public Kernel {
 public:
  explicit ErfKernel(int64_t size) : size_(size) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    // std::erf does not vectorize; threads pay off once a chunk is worth
    // more than waking the slot's OpenMP team.
    constexpr int64_t kParallelMin = 1 << 14;
#pragma omp parallel for schedule(static) if (size_ >= kParallelMin)
    for (int64_t i = 0; i < size_; ++i) y[i] = std::erf(x[i]);
    return absl::OkStatus();
  }

 private:
  int64_t size_;
};

}  // namespace

KernelOrStatus MakeEltwiseKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ActivationAttributes attributes, ParseActivationAttributes(spec));
  const memory::desc data = FlatDesc(spec);
  const std::string& op = spec.op_type;
  if (op == "HardSigmoid") {
    std::vector<BoundPrimitive> chain;
    chain.push_back(MakeEltwise(context, data, algorithm::eltwise_linear, attributes.alpha,
                                attributes.beta, /*in_place=*/false));
    chain.push_back(
        MakeEltwise(context, data, algorithm::eltwise_clip, 0.0f, 1.0f, /*in_place=*/true));
    return std::make_unique<PrimitiveChainKernel>(context, NodeLabel(spec), std::move(chain));
  }
  algorithm kind;
  float alpha = 0.0f;
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
  } else {
    return NodeUnimplemented(spec, "MakeEltwiseKernel does not compute this op");
  }
  return std::make_unique<PrimitiveKernel>(
      context, NodeLabel(spec), MakeEltwise(context, data, kind, alpha, 0.0f, /*in_place=*/false));
}

KernelOrStatus MakeClipKernel(const KernelSpec& spec, CpuKernelContext& context) {
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
  // Bounds known at plan time (ReLU6 and most exported models): oneDNN's
  // vectorized, threaded clip. Unlike the loop it maps NaN to min, as a Clip
  // fused into a Conv does.
  const float low = min != nullptr ? min->data<float>()[0] : std::numeric_limits<float>::lowest();
  const float high = max != nullptr ? max->data<float>()[0] : std::numeric_limits<float>::max();
  // oneDNN rejects low > high; every element is then `high`, as with clip(high, high).
  return std::make_unique<PrimitiveKernel>(
      context, NodeLabel(spec),
      MakeEltwise(context, FlatDesc(spec), algorithm::eltwise_clip, std::min(low, high), high,
                  /*in_place=*/false));
}

KernelOrStatus MakeErfKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return std::make_unique<ErfKernel>(NumElements(spec.outputs[0].shape));
}

}  // namespace replicad
