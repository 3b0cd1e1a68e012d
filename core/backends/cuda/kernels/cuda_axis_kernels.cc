// ArgMax, ArgMin, Hardmax, CumSum (axis_launch.h), TopK (topk_launch.h) and
// Trilu on a CUDA slot.

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/axis_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/backends/cuda/kernels/topk_launch.h"
#include "core/base/status_macros.h"
#include "core/ops/axis_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {
namespace {

// TopK's sort needs scratch sized for the shape (keys and positions twice
// over, CUB's storage). It takes the plan's workspace, which the slot's
// kernels share, rather than memory every plan would hold for good; the
// segment offsets are a table of its own.
class CudaTopKKernel : public Kernel {
 public:
  CudaTopKKernel(const CudaKernelContext& context, const TopKShape& shape,
                 std::shared_ptr<Buffer> segment_offsets, size_t workspace_bytes)
      : context_(context),
        shape_(shape),
        segment_offsets_(std::move(segment_offsets)),
        workspace_bytes_(workspace_bytes) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int* offsets = static_cast<const int*>(segment_offsets_->data());
    int64_t* indices = static_cast<int64_t*>(outputs[1]);
    const cudaError_t error =
        shape_.int64_data
            ? LaunchTopK(static_cast<const int64_t*>(inputs[0]), static_cast<int64_t*>(outputs[0]),
                         indices, shape_, offsets, workspace_, workspace_bytes_, context_.stream)
            : LaunchTopK(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]),
                         indices, shape_, offsets, workspace_, workspace_bytes_, context_.stream);
    return CudaCallStatus(error, context_.device, "TopK's launches (keys, CUB radix sort, gather)");
  }

  size_t workspace_bytes() const override { return workspace_bytes_; }
  void SetWorkspace(void* workspace) override { workspace_ = workspace; }

 private:
  const CudaKernelContext& context_;
  TopKShape shape_;
  std::shared_ptr<Buffer> segment_offsets_;  // outer * inner + 1 ints: line l starts at l * n.
  size_t workspace_bytes_;
  void* workspace_ = nullptr;
};

KernelOrStatus BuildTopKKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(TopKAttributes topk, ParseTopK(spec));
  const AxisLines& l = topk.lines;
  const int64_t lines = l.outer * l.inner;
  if (lines * l.axis_dim > INT_MAX) {
    return NodeUnimplemented(
        spec, absl::StrCat("the CUDA backend's TopK sorts at most ", INT_MAX,
                           " elements (CUB counts them in int); received ", lines * l.axis_dim));
  }
  TopKShape shape;
  shape.outer = l.outer;
  shape.axis_dim = l.axis_dim;
  shape.inner = l.inner;
  shape.k = topk.k;
  shape.largest = topk.largest;
  shape.int64_data = spec.inputs[0]->dtype == DType::kInt64;
  std::vector<int> offsets(lines + 1);
  for (int64_t i = 0; i <= lines; ++i) offsets[i] = static_cast<int>(i * l.axis_dim);
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> table,
                            UploadToDevice(context, offsets.data(), offsets.size() * sizeof(int)));
  size_t workspace_bytes = 0;
  REPLICAD_CUDA_RETURN_IF_ERROR(context.device, TopKWorkspaceBytes(shape, &workspace_bytes));
  return std::make_unique<CudaTopKKernel>(context, shape, std::move(table), workspace_bytes);
}

}  // namespace

KernelOrStatus MakeCudaAxisKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const DType dtype = spec.inputs[0]->dtype;
  if (spec.op_type == "ArgMax" || spec.op_type == "ArgMin") {
    REPLICAD_ASSIGN_OR_RETURN(ArgReduceAttributes arg, ParseArgReduce(spec));
    const AxisLines l = arg.lines;
    const bool max = spec.op_type == "ArgMax";
    const bool last = arg.last_index;
    return std::make_unique<LaunchKernel>(
        context, "ArgReduceKernel",
        [l, max, last, dtype](const void* const* in, void* const* out, cudaStream_t stream) {
          int64_t* indices = static_cast<int64_t*>(out[0]);
          if (dtype == DType::kInt64) {
            LaunchArgReduce(static_cast<const int64_t*>(in[0]), indices, l.outer, l.axis_dim,
                            l.inner, max, last, stream);
          } else {
            LaunchArgReduce(static_cast<const float*>(in[0]), indices, l.outer, l.axis_dim, l.inner,
                            max, last, stream);
          }
        });
  }
  if (spec.op_type == "Hardmax") {
    REPLICAD_ASSIGN_OR_RETURN(AxisLines l, ParseHardmax(spec));
    return std::make_unique<LaunchKernel>(
        context, "HardmaxKernel",
        [l](const void* const* in, void* const* out, cudaStream_t stream) {
          LaunchHardmax(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), l.outer,
                        l.axis_dim, l.inner, stream);
        });
  }
  if (spec.op_type == "TopK") return BuildTopKKernel(spec, context);
  if (spec.op_type == "CumSum") {
    REPLICAD_ASSIGN_OR_RETURN(CumSumAttributes sum, ParseCumSum(spec));
    const AxisLines l = sum.lines;
    const bool exclusive = sum.exclusive, reverse = sum.reverse;
    return std::make_unique<LaunchKernel>(
        context, "CumSumKernel",
        [l, exclusive, reverse, dtype](const void* const* in, void* const* out,
                                       cudaStream_t stream) {
          if (dtype == DType::kInt64) {
            LaunchCumSum(static_cast<const int64_t*>(in[0]), static_cast<int64_t*>(out[0]), l.outer,
                         l.axis_dim, l.inner, exclusive, reverse, stream);
          } else {
            LaunchCumSum(static_cast<const float*>(in[0]), static_cast<float*>(out[0]), l.outer,
                         l.axis_dim, l.inner, exclusive, reverse, stream);
          }
        });
  }
  REPLICAD_ASSIGN_OR_RETURN(TriluLayout trilu, ParseTrilu(spec));
  const size_t element_size = DTypeSize(dtype);
  return std::make_unique<LaunchKernel>(
      context, "TriluKernel",
      [trilu, element_size](const void* const* in, void* const* out, cudaStream_t stream) {
        LaunchTrilu(in[0], out[0], trilu.matrices, trilu.rows, trilu.cols, trilu.k, trilu.upper,
                    element_size, stream);
      });
}

}  // namespace replicad
