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
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/logic_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// In and out as the launchers read and write them.
template <typename T>
const T* In(const void* const* inputs, int i) {
  return static_cast<const T*>(inputs[i]);
}
template <typename T>
T* Out(void* const* outputs) {
  return static_cast<T*>(outputs[0]);
}

template <typename T>
std::unique_ptr<Kernel> Comparison(const CudaKernelContext& context, CudaCompareOp op,
                                   BroadcastIndex index, int64_t n) {
  return std::make_unique<LaunchKernel>(
      context, "CompareKernel",
      [op, index, n](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchCompare(In<T>(in, 0), In<T>(in, 1), Out<uint8_t>(out), n, op, index, stream);
      });
}

template <typename T>
std::unique_ptr<Kernel> WhereOf(const CudaKernelContext& context, BroadcastIndex condition_x,
                                BroadcastIndex y, int64_t n) {
  return std::make_unique<LaunchKernel>(
      context, "WhereKernel",
      [condition_x, y, n](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchWhere(In<uint8_t>(in, 0), In<T>(in, 1), In<T>(in, 2), Out<T>(out), n, condition_x, y,
                    stream);
      });
}

// From or to bool, the other side float32 or int64.
template <typename Number>
std::unique_ptr<Kernel> BoolCast(const CudaKernelContext& context, bool to_bool, int64_t n) {
  return std::make_unique<LaunchKernel>(
      context, "BoolCastKernel",
      [to_bool, n](const void* const* in, void* const* out, cudaStream_t stream) {
        if (to_bool) {
          LaunchToBool(In<Number>(in, 0), Out<uint8_t>(out), n, stream);
        } else {
          LaunchFromBool(In<uint8_t>(in, 0), Out<Number>(out), n, stream);
        }
      });
}

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
  if (a.dtype == DType::kFloat32) return Comparison<float>(context, op, index, n);
  if (a.dtype == DType::kInt64) return Comparison<int64_t>(context, op, index, n);
  return Comparison<uint8_t>(context, op, index, n);
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
    return std::make_unique<LaunchKernel>(
        context, "NotKernel", [n](const void* const* in, void* const* out, cudaStream_t stream) {
          LaunchNot(In<uint8_t>(in, 0), Out<uint8_t>(out), n, stream);
        });
  }
  CudaLogicOp op = CudaLogicOp::kXor;
  if (spec.op_type == "And") op = CudaLogicOp::kAnd;
  if (spec.op_type == "Or") op = CudaLogicOp::kOr;
  REPLICAD_ASSIGN_OR_RETURN(BroadcastIndex index, MakeBroadcastIndex(spec, spec.inputs[0]->shape,
                                                                     spec.inputs[1]->shape, out));
  return std::make_unique<LaunchKernel>(
      context, "LogicKernel",
      [op, index, n](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchLogic(In<uint8_t>(in, 0), In<uint8_t>(in, 1), Out<uint8_t>(out), n, op, index,
                    stream);
      });
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
  if (x.dtype == DType::kFloat32) return WhereOf<float>(context, condition_x, y_index, n);
  return WhereOf<int64_t>(context, condition_x, y_index, n);
}

KernelOrStatus MakeCudaBoolCastKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType from = spec.inputs[0]->dtype;
  const DType to = spec.outputs[0].dtype;
  const int64_t n = NumElements(spec.outputs[0].shape);
  if (from == DType::kBool && to == DType::kBool) {
    return std::make_unique<LaunchKernel>(
        context, "BoolCastKernel", [n](const void* const* in, void* const* out, cudaStream_t s) {
          LaunchToBool(In<uint8_t>(in, 0), Out<uint8_t>(out), n, s);
        });
  }
  const DType number = to == DType::kBool ? from : to;
  if (number == DType::kFloat32) return BoolCast<float>(context, to == DType::kBool, n);
  if (number == DType::kInt64) return BoolCast<int64_t>(context, to == DType::kBool, n);
  return NodeUnimplemented(spec, absl::StrCat("the CUDA backend casts bool to and from float32 "
                                              "and int64 only; received ",
                                              DTypeName(from), " to ", DTypeName(to)));
}

}  // namespace replicad
