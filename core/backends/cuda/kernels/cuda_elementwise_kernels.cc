#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/elementwise_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/activation_attributes.h"
#include "core/ops/batch_norm_attributes.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// out = a op b, with the broadcast strides worked out once.
template <typename T>
class BinaryKernel : public Kernel {
 public:
  BinaryKernel(const CudaKernelContext& context, CudaBinaryOp op, BroadcastIndex index, int64_t n)
      : context_(context), op_(op), index_(index), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchBinary(static_cast<const T*>(inputs[0]), static_cast<const T*>(inputs[1]),
                 static_cast<T*>(outputs[0]), n_, op_, index_, context_.stream);
    return LastLaunchStatus(context_.device, "BinaryKernel");
  }

 private:
  const CudaKernelContext& context_;
  CudaBinaryOp op_;
  BroadcastIndex index_;
  int64_t n_;
};

// Sum, Mean, Max and Min of any number of inputs, broadcast: the first two
// combined into the output, each further one folded into it in place (an
// element reads and writes only itself); Mean then scales by 1 / inputs.
template <typename T>
class VariadicKernel : public Kernel {
 public:
  VariadicKernel(const CudaKernelContext& context, CudaBinaryOp op,
                 std::vector<BroadcastIndex> indexes, int64_t n, float scale)
      : context_(context), op_(op), indexes_(std::move(indexes)), n_(n), scale_(scale) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    T* out = static_cast<T*>(outputs[0]);
    if (indexes_.empty()) {  // One input, of the output's shape.
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device, cudaMemcpyAsync(out, inputs[0], static_cast<size_t>(n_) * sizeof(T),
                                           cudaMemcpyDeviceToDevice, context_.stream));
    }
    for (size_t i = 0; i < indexes_.size(); ++i) {
      const T* a = i == 0 ? static_cast<const T*>(inputs[0]) : out;
      LaunchBinary(a, static_cast<const T*>(inputs[i + 1]), out, n_, op_, indexes_[i],
                   context_.stream);
      REPLICAD_RETURN_IF_ERROR(LastLaunchStatus(context_.device, "VariadicKernel"));
    }
    if constexpr (std::is_same_v<T, float>) {
      if (scale_ != 1.0f) {
        LaunchUnary(out, out, n_, CudaUnary{CudaUnaryOp::kScale, scale_, 0.0f}, context_.stream);
        return LastLaunchStatus(context_.device, "VariadicKernel scale");
      }
    }
    return absl::OkStatus();
  }

 private:
  const CudaKernelContext& context_;
  CudaBinaryOp op_;
  std::vector<BroadcastIndex> indexes_;  // Per fold: step i combines input i + 1.
  int64_t n_;
  float scale_;
};

class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const CudaKernelContext& context, CudaUnary f, int64_t n)
      : context_(context), f_(f), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchUnary(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]), n_, f_,
                context_.stream);
    return LastLaunchStatus(context_.device, "UnaryKernel");
  }

 private:
  const CudaKernelContext& context_;
  CudaUnary f_;
  int64_t n_;
};

class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(const CudaKernelContext& context, BatchNormLayout layout)
      : context_(context), layout_(layout) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchBatchNormInference(
        static_cast<const float*>(inputs[0]), static_cast<const float*>(inputs[1]),
        static_cast<const float*>(inputs[2]), static_cast<const float*>(inputs[3]),
        static_cast<const float*>(inputs[4]), static_cast<float*>(outputs[0]), layout_.batch,
        layout_.channels, layout_.spatial, layout_.epsilon, context_.stream);
    return LastLaunchStatus(context_.device, "BatchNormInferenceKernel");
  }

 private:
  const CudaKernelContext& context_;
  BatchNormLayout layout_;
};

template <typename From, typename To>
class CastKernel : public Kernel {
 public:
  CastKernel(const CudaKernelContext& context, int64_t n) : context_(context), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchCast(static_cast<const From*>(inputs[0]), static_cast<To*>(outputs[0]), n_,
               context_.stream);
    return LastLaunchStatus(context_.device, "CastKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
};

// Cast between float32 and float16 or bfloat16 (the interface of a 16-bit
// model, which computes in float32 inside: core/model/half_float_widening.h).
class HalfCastKernel : public Kernel {
 public:
  HalfCastKernel(const CudaKernelContext& context, int64_t n, DType from, DType to)
      : context_(context), n_(n), from_(from), to_(to) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (from_ == DType::kFloat32) {
      LaunchFloatToHalf(static_cast<const float*>(inputs[0]), static_cast<uint16_t*>(outputs[0]),
                        n_, to_ == DType::kBFloat16, context_.stream);
    } else {
      LaunchHalfToFloat(static_cast<const uint16_t*>(inputs[0]), static_cast<float*>(outputs[0]),
                        n_, from_ == DType::kBFloat16, context_.stream);
    }
    return LastLaunchStatus(context_.device, "HalfCastKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
  DType from_;
  DType to_;
};

// Strides of `shape` (right-aligned into kMaxRank dims) as read for an
// output of `out` dims: 0 where the input broadcasts.
void BroadcastStrides(const Shape& shape, const Shape& out, int64_t* strides) {
  const Shape padded = PadToRank(shape, out.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int slot = kMaxRank - static_cast<int>(out.size()) + d;
    strides[slot] = padded[d] == 1 ? 0 : stride;
    stride *= padded[d];
  }
}

}  // namespace

absl::StatusOr<BroadcastIndex> MakeBroadcastIndex(const KernelSpec& spec, const Shape& a,
                                                  const Shape& b, const Shape& out) {
  if (out.size() > static_cast<size_t>(kMaxRank)) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend broadcasts up to rank ", kMaxRank,
                                                "; the output has rank ", out.size()));
  }
  BroadcastIndex index;
  for (size_t d = 0; d < out.size(); ++d) index.out_dims[kMaxRank - out.size() + d] = out[d];
  BroadcastStrides(a, out, index.a_strides);
  BroadcastStrides(b, out, index.b_strides);
  return index;
}

KernelOrStatus MakeCudaBinaryKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const TensorType& a = *spec.inputs[0];
  const TensorType& b = *spec.inputs[1];
  const TensorType& out = spec.outputs[0];
  if (a.dtype != b.dtype) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes ", spec.op_type,
                                                " on equal dtypes only; received ",
                                                DTypeName(a.dtype), " and ", DTypeName(b.dtype)));
  }
  CudaBinaryOp op = CudaBinaryOp::kAdd;
  if (spec.op_type == "Sub") op = CudaBinaryOp::kSub;
  if (spec.op_type == "Mul") op = CudaBinaryOp::kMul;
  if (spec.op_type == "Div") op = CudaBinaryOp::kDiv;
  if (spec.op_type == "Pow") op = CudaBinaryOp::kPow;
  if (spec.op_type == "PRelu") op = CudaBinaryOp::kPRelu;
  if (spec.op_type == "Mod") {
    REPLICAD_ASSIGN_OR_RETURN(int64_t fmod, IntAttribute(spec, "fmod", 0));
    op = fmod != 0 ? CudaBinaryOp::kFmod : CudaBinaryOp::kMod;
  }
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex index,
                            MakeBroadcastIndex(spec, a.shape, b.shape, out.shape));
  const int64_t n = NumElements(out.shape);
  if (out.dtype == DType::kInt64) {
    return std::make_unique<BinaryKernel<int64_t>>(context, op, index, n);
  }
  return std::make_unique<BinaryKernel<float>>(context, op, index, n);
}

KernelOrStatus MakeCudaVariadicKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const TensorType& out = spec.outputs[0];
  for (const std::optional<TensorType>& input : spec.inputs) {
    if (!input.has_value() || input->dtype != out.dtype) {
      return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes ", spec.op_type,
                                                  " of present inputs of one dtype only"));
    }
  }
  if (spec.inputs.size() == 1 && spec.inputs[0]->shape != out.shape) {
    return NodeUnimplemented(spec, "the CUDA backend broadcasts a lone input only with others");
  }
  CudaBinaryOp op = CudaBinaryOp::kAdd;  // Sum and Mean.
  if (spec.op_type == "Max") op = CudaBinaryOp::kMax;
  if (spec.op_type == "Min") op = CudaBinaryOp::kMin;
  std::vector<BroadcastIndex> indexes;
  for (size_t i = 1; i < spec.inputs.size(); ++i) {
    // The first fold reads input 0 broadcast; later ones the output itself.
    const Shape& a = i == 1 ? spec.inputs[0]->shape : out.shape;
    REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex index,
                              MakeBroadcastIndex(spec, a, spec.inputs[i]->shape, out.shape));
    indexes.push_back(index);
  }
  const int64_t n = NumElements(out.shape);
  if (out.dtype == DType::kInt64) {
    if (spec.op_type == "Mean") {
      return NodeUnimplemented(spec, "the CUDA backend computes Mean of float32 only");
    }
    return std::make_unique<VariadicKernel<int64_t>>(context, op, std::move(indexes), n, 1.0f);
  }
  const float scale = spec.op_type == "Mean" ? 1.0f / static_cast<float>(spec.inputs.size()) : 1.0f;
  return std::make_unique<VariadicKernel<float>>(context, op, std::move(indexes), n, scale);
}

KernelOrStatus MakeCudaActivationKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.inputs[0]->dtype != DType::kFloat32) {
    return NodeUnimplemented(
        spec, absl::StrCat("the CUDA backend computes ", spec.op_type,
                           " on float32 only; received ", DTypeName(spec.inputs[0]->dtype)));
  }
  REPLICAD_ASSIGN_OR_RETURN(ActivationAttributes attributes, ParseActivationAttributes(spec));
  CudaUnary f{CudaUnaryOp::kIdentity, attributes.alpha, attributes.beta};
  const std::string& op = spec.op_type;
  if (op == "Relu") f.op = CudaUnaryOp::kRelu;
  if (op == "LeakyRelu") f.op = CudaUnaryOp::kLeakyRelu;
  if (op == "Sigmoid") f.op = CudaUnaryOp::kSigmoid;
  if (op == "Tanh") f.op = CudaUnaryOp::kTanh;
  if (op == "HardSigmoid") f.op = CudaUnaryOp::kHardSigmoid;
  if (op == "HardSwish") f.op = CudaUnaryOp::kHardSwish;
  if (op == "Sqrt") f.op = CudaUnaryOp::kSqrt;
  if (op == "Erf") f.op = CudaUnaryOp::kErf;
  static constexpr std::pair<const char*, CudaUnaryOp> kMath[] = {
      {"Abs", CudaUnaryOp::kAbs},
      {"Neg", CudaUnaryOp::kNeg},
      {"Exp", CudaUnaryOp::kExp},
      {"Log", CudaUnaryOp::kLog},
      {"Reciprocal", CudaUnaryOp::kReciprocal},
      {"Floor", CudaUnaryOp::kFloor},
      {"Ceil", CudaUnaryOp::kCeil},
      {"Round", CudaUnaryOp::kRound},
      {"Softplus", CudaUnaryOp::kSoftplus},
      {"Mish", CudaUnaryOp::kMish},
      {"Elu", CudaUnaryOp::kElu},
      {"Selu", CudaUnaryOp::kSelu}};
  for (const auto& [name, math] : kMath) {
    if (op == name) f.op = math;
  }
  if (op == "Gelu") {
    absl::StatusOr<std::string> approximate =
        spec.attributes != nullptr ? spec.attributes->GetString("approximate", "none")
                                   : absl::StatusOr<std::string>("none");
    if (!approximate.ok() || *approximate != "none") {
      return NodeUnimplemented(spec, "the CUDA backend computes Gelu with approximate 'none' only");
    }
    f.op = CudaUnaryOp::kGelu;
  }
  if (op == "Clip") {
    // Bounds that are data (not known when the plan is made) are rare; the
    // CPU backend reads them per run, this one needs them now.
    const bool has_min = HasInput(spec, 1);
    const bool has_max = HasInput(spec, 2);
    const Tensor* min = has_min ? ConstantInput(spec, 1) : nullptr;
    const Tensor* max = has_max ? ConstantInput(spec, 2) : nullptr;
    if ((has_min && min == nullptr) || (has_max && max == nullptr)) {
      return NodeUnimplemented(
          spec, "the CUDA backend needs Clip's min and max known when the plan is made");
    }
    f.op = CudaUnaryOp::kClip;
    f.alpha = min != nullptr ? min->data<float>()[0] : std::numeric_limits<float>::lowest();
    f.beta = max != nullptr ? max->data<float>()[0] : std::numeric_limits<float>::max();
  }
  return std::make_unique<UnaryKernel>(context, f, NumElements(spec.outputs[0].shape));
}

KernelOrStatus MakeCudaBatchNormalizationKernel(const KernelSpec& spec,
                                                CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(BatchNormLayout layout, ParseBatchNormalization(spec));
  return std::make_unique<BatchNormKernel>(context, layout);
}

KernelOrStatus MakeCudaCastKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType from = spec.inputs[0]->dtype;
  const DType to = spec.outputs[0].dtype;
  const int64_t n = NumElements(spec.outputs[0].shape);
  // Bool to bool normalises the bytes to 0 and 1, as the CPU's Cast does.
  if (from == DType::kBool || to == DType::kBool) return MakeCudaBoolCastKernel(spec, context);
  if (from == to) return MakeCudaCopyKernel(spec, context);
  if (IsHalfFloatDType(from) || IsHalfFloatDType(to)) {
    if (from != DType::kFloat32 && to != DType::kFloat32) {
      return NodeUnimplemented(spec, absl::StrCat("the CUDA backend casts float16 and bfloat16 "
                                                  "to and from float32 only; received ",
                                                  DTypeName(from), " to ", DTypeName(to)));
    }
    return std::make_unique<HalfCastKernel>(context, n, from, to);
  }
  const bool int64_float = from == DType::kInt64 && to == DType::kFloat32;
  if (!int64_float && !(from == DType::kFloat32 && to == DType::kInt64)) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes float32 and int64; "
                                                "received a Cast from ",
                                                DTypeName(from), " to ", DTypeName(to)));
  }
  if (int64_float) return std::make_unique<CastKernel<int64_t, float>>(context, n);
  return std::make_unique<CastKernel<float, int64_t>>(context, n);
}

absl::StatusOr<CudaUnary> FusedUnary(const std::optional<FusedActivation>& activation) {
  if (!activation.has_value()) return CudaUnary{};
  const std::string& op = activation->op_type;
  CudaUnary f{CudaUnaryOp::kIdentity, activation->alpha, activation->beta};
  if (op == "Relu") {
    f.op = CudaUnaryOp::kRelu;
  } else if (op == "LeakyRelu") {
    f.op = CudaUnaryOp::kLeakyRelu;
  } else if (op == "Clip") {
    f.op = CudaUnaryOp::kClip;
  } else if (op == "Sigmoid") {
    f.op = CudaUnaryOp::kSigmoid;
  } else if (op == "Tanh") {
    f.op = CudaUnaryOp::kTanh;
  } else if (op == "HardSwish") {
    f.op = CudaUnaryOp::kHardSwish;
  } else if (op == "Swish") {
    f.op = CudaUnaryOp::kSwish;
  } else if (op == "HardSigmoid") {
    f.op = CudaUnaryOp::kHardSigmoid;
  } else if (op == "Gelu") {
    f.op = CudaUnaryOp::kGelu;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("fused activation '", op, "' has no CUDA implementation"));
  }
  return f;
}

}  // namespace replicad
