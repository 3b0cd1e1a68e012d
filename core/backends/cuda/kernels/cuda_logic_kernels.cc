// Comparisons, boolean logic and Where on a CUDA slot (logic_launch.h): the
// masks transformers compute from a request's data (an attention mask's
// Equal and Where), which the host folding does not reach.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/logic_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

template <typename T>
class CompareKernel : public Kernel {
 public:
  CompareKernel(const CudaKernelContext& context, CudaCompareOp op, BroadcastIndex index, int64_t n)
      : context_(context), op_(op), index_(index), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchCompare(static_cast<const T*>(inputs[0]), static_cast<const T*>(inputs[1]),
                  static_cast<uint8_t*>(outputs[0]), n_, op_, index_, context_.stream);
    return LastLaunchStatus(context_.device, "CompareKernel");
  }

 private:
  const CudaKernelContext& context_;
  CudaCompareOp op_;
  BroadcastIndex index_;
  int64_t n_;
};

class LogicKernel : public Kernel {
 public:
  // `binary` false: Not.
  LogicKernel(const CudaKernelContext& context, bool binary, CudaLogicOp op, BroadcastIndex index,
              int64_t n)
      : context_(context), binary_(binary), op_(op), index_(index), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const uint8_t* a = static_cast<const uint8_t*>(inputs[0]);
    uint8_t* out = static_cast<uint8_t*>(outputs[0]);
    if (binary_) {
      LaunchLogic(a, static_cast<const uint8_t*>(inputs[1]), out, n_, op_, index_, context_.stream);
    } else {
      LaunchNot(a, out, n_, context_.stream);
    }
    return LastLaunchStatus(context_.device, "LogicKernel");
  }

 private:
  const CudaKernelContext& context_;
  bool binary_;
  CudaLogicOp op_;
  BroadcastIndex index_;
  int64_t n_;
};

template <typename T>
class WhereKernel : public Kernel {
 public:
  WhereKernel(const CudaKernelContext& context, BroadcastIndex condition_x, BroadcastIndex y,
              int64_t n)
      : context_(context), condition_x_(condition_x), y_(y), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchWhere(static_cast<const uint8_t*>(inputs[0]), static_cast<const T*>(inputs[1]),
                static_cast<const T*>(inputs[2]), static_cast<T*>(outputs[0]), n_, condition_x_, y_,
                context_.stream);
    return LastLaunchStatus(context_.device, "WhereKernel");
  }

 private:
  const CudaKernelContext& context_;
  BroadcastIndex condition_x_, y_;
  int64_t n_;
};

// From or to bool, the other side float32 or int64.
template <typename Number, bool kToBool>
class BoolCastKernel : public Kernel {
 public:
  BoolCastKernel(const CudaKernelContext& context, int64_t n) : context_(context), n_(n) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if constexpr (kToBool) {
      LaunchToBool(static_cast<const Number*>(inputs[0]), static_cast<uint8_t*>(outputs[0]), n_,
                   context_.stream);
    } else {
      LaunchFromBool(static_cast<const uint8_t*>(inputs[0]), static_cast<Number*>(outputs[0]), n_,
                     context_.stream);
    }
    return LastLaunchStatus(context_.device, "BoolCastKernel");
  }

 private:
  const CudaKernelContext& context_;
  int64_t n_;
};

bool IsNumber(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kInt64; }

}  // namespace

KernelOrStatus MakeCudaCompareKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const TensorType& a = *spec.inputs[0];
  const TensorType& b = *spec.inputs[1];
  const bool bools = a.dtype == DType::kBool && spec.op_type == "Equal";
  if (a.dtype != b.dtype || !(IsNumber(a.dtype) || bools)) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend compares float32 or int64 "
                                                "(Equal: bool too) of one dtype; received ",
                                                DTypeName(a.dtype), " and ", DTypeName(b.dtype)));
  }
  CudaCompareOp op = CudaCompareOp::kEqual;
  if (spec.op_type == "Less") op = CudaCompareOp::kLess;
  if (spec.op_type == "LessOrEqual") op = CudaCompareOp::kLessOrEqual;
  if (spec.op_type == "Greater") op = CudaCompareOp::kGreater;
  if (spec.op_type == "GreaterOrEqual") op = CudaCompareOp::kGreaterOrEqual;
  const Shape& out = spec.outputs[0].shape;
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex index, MakeBroadcastIndex(spec, a.shape, b.shape, out));
  const int64_t n = NumElements(out);
  if (a.dtype == DType::kFloat32) {
    return std::make_unique<CompareKernel<float>>(context, op, index, n);
  }
  if (a.dtype == DType::kInt64) {
    return std::make_unique<CompareKernel<int64_t>>(context, op, index, n);
  }
  return std::make_unique<CompareKernel<uint8_t>>(context, op, index, n);
}

KernelOrStatus MakeCudaLogicKernel(const KernelSpec& spec, CudaKernelContext& context) {
  for (const std::optional<TensorType>& input : spec.inputs) {
    if (input.has_value() && input->dtype != DType::kBool) {
      return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes ", spec.op_type,
                                                  " of bool; received ", DTypeName(input->dtype)));
    }
  }
  const Shape& out = spec.outputs[0].shape;
  const int64_t n = NumElements(out);
  if (spec.op_type == "Not") {
    return std::make_unique<LogicKernel>(context, false, CudaLogicOp::kAnd, BroadcastIndex{}, n);
  }
  CudaLogicOp op = CudaLogicOp::kXor;
  if (spec.op_type == "And") op = CudaLogicOp::kAnd;
  if (spec.op_type == "Or") op = CudaLogicOp::kOr;
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex index, MakeBroadcastIndex(spec, spec.inputs[0]->shape,
                                                                     spec.inputs[1]->shape, out));
  return std::make_unique<LogicKernel>(context, true, op, index, n);
}

KernelOrStatus MakeCudaWhereKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const TensorType& condition = *spec.inputs[0];
  const TensorType& x = *spec.inputs[1];
  const TensorType& y = *spec.inputs[2];
  if (condition.dtype != DType::kBool || x.dtype != y.dtype || !IsNumber(x.dtype)) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend computes Where of a bool "
                                                "condition and float32 or int64 values; received ",
                                                DTypeName(condition.dtype), ", ",
                                                DTypeName(x.dtype), " and ", DTypeName(y.dtype)));
  }
  const Shape& out = spec.outputs[0].shape;
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex condition_x,
                            MakeBroadcastIndex(spec, condition.shape, x.shape, out));
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex y_index,
                            MakeBroadcastIndex(spec, condition.shape, y.shape, out));
  const int64_t n = NumElements(out);
  if (x.dtype == DType::kFloat32) {
    return std::make_unique<WhereKernel<float>>(context, condition_x, y_index, n);
  }
  return std::make_unique<WhereKernel<int64_t>>(context, condition_x, y_index, n);
}

KernelOrStatus MakeCudaBoolCastKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType from = spec.inputs[0]->dtype;
  const DType to = spec.outputs[0].dtype;
  const int64_t n = NumElements(spec.outputs[0].shape);
  if (to == DType::kBool && from == DType::kFloat32) {
    return std::make_unique<BoolCastKernel<float, true>>(context, n);
  }
  if (to == DType::kBool && from == DType::kInt64) {
    return std::make_unique<BoolCastKernel<int64_t, true>>(context, n);
  }
  if (from == DType::kBool && to == DType::kFloat32) {
    return std::make_unique<BoolCastKernel<float, false>>(context, n);
  }
  if (from == DType::kBool && to == DType::kInt64) {
    return std::make_unique<BoolCastKernel<int64_t, false>>(context, n);
  }
  return NodeUnimplemented(spec, absl::StrCat("the CUDA backend casts bool to and from float32 "
                                              "and int64 only; received ",
                                              DTypeName(from), " to ", DTypeName(to)));
}

}  // namespace replicad
