// GatherElements, ScatterElements, GatherND, ScatterND and OneHot on a CUDA
// slot (indexing_launch.h): the CPU kernels' answers bit for bit, their
// indices checked by the functions the CPU kernels call.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/checked_indices.h"
#include "core/backends/cuda/kernels/indexing_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/backends/cuda/kernels/launch_kernel.h"
#include "core/base/status_macros.h"
#include "core/ops/index_map.h"
#include "core/ops/indexing_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {
namespace {

// A gather's or scatter's Run: its indices checked; a scatter's output
// (`copy_bytes` != 0) first a copy of data, after the check, so a refused
// request leaves it untouched; then one launch.
class IndexedKernel final : public Kernel {
 public:
  using Launch = std::function<void(const void* const* inputs, void* const* outputs,
                                    const int64_t* indices, cudaStream_t stream)>;
  IndexedKernel(const CudaKernelContext& context, std::string name, CheckedIndices indices,
                size_t copy_bytes, Launch launch)
      : context_(context),
        name_(std::move(name)),
        indices_(std::move(indices)),
        copy_bytes_(copy_bytes),
        launch_(std::move(launch)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    REPLICAD_ASSIGN_OR_RETURN(const int64_t* indices, indices_.Get(context_, inputs[1]));
    if (copy_bytes_ != 0 && outputs[0] != inputs[0]) {
      REPLICAD_CUDA_RETURN_IF_ERROR(context_.device,
                                    cudaMemcpyAsync(outputs[0], inputs[0], copy_bytes_,
                                                    cudaMemcpyDeviceToDevice, context_.stream));
    }
    launch_(inputs, outputs, indices, context_.stream);
    return LastLaunchStatus(context_.device, name_);
  }

  // A replay of a recorded run would skip the check of indices that are data.
  bool replayable() const override { return indices_.known_when_planned(); }

 private:
  const CudaKernelContext& context_;
  std::string name_;
  CheckedIndices indices_;
  size_t copy_bytes_;
  Launch launch_;
};

absl::StatusOr<ElementsGeometry> ElementsGeometryOf(const KernelSpec& spec,
                                                    const GatherElementsLayout& layout) {
  const int rank = static_cast<int>(layout.data.size());
  if (rank > kMaxRank) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend indexes data of rank up to ",
                                                kMaxRank, "; data has rank ", rank));
  }
  ElementsGeometry geometry;
  geometry.rank = rank;
  geometry.axis = static_cast<int>(layout.axis);
  geometry.axis_dim = layout.data[layout.axis];
  const std::vector<int64_t> strides = RowMajorStrides(layout.data);
  for (int d = 0; d < rank; ++d) {
    geometry.indices_dims[d] = layout.indices[d];
    geometry.data_strides[d] = strides[d];
  }
  return geometry;
}

absl::StatusOr<TupleGeometry> TupleGeometryOf(const KernelSpec& spec,
                                              const std::vector<int64_t>& dims,
                                              const std::vector<int64_t>& strides) {
  const int tuple = static_cast<int>(dims.size());
  if (tuple > kMaxRank) {
    return NodeUnimplemented(spec, absl::StrCat("the CUDA backend takes index tuples of up to ",
                                                kMaxRank, " indices; received ", tuple));
  }
  TupleGeometry geometry;
  geometry.tuple = tuple;
  for (int d = 0; d < tuple; ++d) {
    geometry.dims[d] = dims[d];
    geometry.strides[d] = strides[d];
  }
  return geometry;
}

// GatherElements' and ScatterElements' indices, checked as the CPU's.
absl::StatusOr<CheckedIndices> ElementIndicesOf(const KernelSpec& spec, CudaKernelContext& context,
                                                const GatherElementsLayout& layout) {
  const int64_t count = NumElements(layout.indices);
  return CheckedIndices::Make(
      spec, context, /*input=*/1, count,
      [node = NodeLabel(spec), count, axis_dim = layout.data[layout.axis]](const int64_t* indices) {
        return CheckElementIndices(node, indices, count, axis_dim);
      });
}

// GatherND's and ScatterND's `tuples` index tuples into `dims`.
absl::StatusOr<CheckedIndices> IndexTuplesOf(const KernelSpec& spec, CudaKernelContext& context,
                                             int64_t tuples, const std::vector<int64_t>& dims) {
  return CheckedIndices::Make(spec, context, /*input=*/1,
                              tuples * static_cast<int64_t>(dims.size()),
                              [node = NodeLabel(spec), tuples, dims](const int64_t* indices) {
                                return CheckIndexTuples(node, indices, tuples, dims);
                              });
}

size_t DataBytes(const KernelSpec& spec) {
  return static_cast<size_t>(NumElements(spec.inputs[0]->shape)) * DTypeSize(spec.inputs[0]->dtype);
}

KernelOrStatus BuildGatherElements(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GatherElementsLayout layout, ParseGatherElements(spec));
  REPLICAD_ASSIGN_OR_RETURN(ElementsGeometry g, ElementsGeometryOf(spec, layout));
  REPLICAD_ASSIGN_OR_RETURN(CheckedIndices indices, ElementIndicesOf(spec, context, layout));
  const size_t element_size = DTypeSize(spec.outputs[0].dtype);
  return std::make_unique<IndexedKernel>(
      context, "GatherElementsKernel", std::move(indices), 0,
      [g, element_size](const void* const* in, void* const* out, const int64_t* indices,
                        cudaStream_t stream) {
        LaunchGatherElements(in[0], indices, out[0], g, element_size, stream);
      });
}

KernelOrStatus BuildScatterElements(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ScatterElementsLayout layout, ParseScatterElements(spec));
  REPLICAD_ASSIGN_OR_RETURN(ElementsGeometry g, ElementsGeometryOf(spec, layout.elements));
  REPLICAD_ASSIGN_OR_RETURN(CheckedIndices indices,
                            ElementIndicesOf(spec, context, layout.elements));
  const ScatterReduction reduction = layout.reduction;
  const bool int64_data = spec.inputs[0]->dtype == DType::kInt64;
  return std::make_unique<IndexedKernel>(
      context, "ScatterElementsKernel", std::move(indices), DataBytes(spec),
      [g, reduction, int64_data](const void* const* in, void* const* out, const int64_t* indices,
                                 cudaStream_t stream) {
        if (int64_data) {
          LaunchScatterElements(static_cast<const int64_t*>(in[2]), indices,
                                static_cast<int64_t*>(out[0]), g, reduction, stream);
        } else {
          LaunchScatterElements(static_cast<const float*>(in[2]), indices,
                                static_cast<float*>(out[0]), g, reduction, stream);
        }
      });
}

KernelOrStatus BuildGatherNd(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GatherNdLayout layout, ParseGatherNd(spec));
  REPLICAD_ASSIGN_OR_RETURN(TupleGeometry g,
                            TupleGeometryOf(spec, layout.tuple_dims, layout.tuple_strides));
  REPLICAD_ASSIGN_OR_RETURN(
      CheckedIndices indices,
      IndexTuplesOf(spec, context, layout.batches * layout.count_per_batch, layout.tuple_dims));
  const size_t element_size = DTypeSize(spec.outputs[0].dtype);
  const int64_t batches = layout.batches, count_per_batch = layout.count_per_batch;
  const int64_t batch_stride = layout.batch_stride, slice = layout.slice;
  return std::make_unique<IndexedKernel>(
      context, "GatherNdKernel", std::move(indices), 0,
      [g, element_size, batches, count_per_batch, batch_stride, slice](
          const void* const* in, void* const* out, const int64_t* indices, cudaStream_t stream) {
        LaunchGatherNd(in[0], indices, out[0], batches, count_per_batch, batch_stride, slice, g,
                       element_size, stream);
      });
}

KernelOrStatus BuildScatterNd(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ScatterNdLayout layout, ParseScatterNd(spec));
  REPLICAD_ASSIGN_OR_RETURN(TupleGeometry g,
                            TupleGeometryOf(spec, layout.data_dims, layout.strides));
  REPLICAD_ASSIGN_OR_RETURN(CheckedIndices indices,
                            IndexTuplesOf(spec, context, layout.count, layout.data_dims));
  const ScatterReduction reduction = layout.reduction;
  const int64_t count = layout.count, slice = layout.slice;
  const bool int64_data = spec.inputs[0]->dtype == DType::kInt64;
  return std::make_unique<IndexedKernel>(
      context, "ScatterNdKernel", std::move(indices), DataBytes(spec),
      [g, reduction, count, slice, int64_data](const void* const* in, void* const* out,
                                               const int64_t* indices, cudaStream_t stream) {
        if (int64_data) {
          LaunchScatterNd(static_cast<const int64_t*>(in[2]), indices,
                          static_cast<int64_t*>(out[0]), count, slice, g, reduction, stream);
        } else {
          LaunchScatterNd(static_cast<const float*>(in[2]), indices, static_cast<float*>(out[0]),
                          count, slice, g, reduction, stream);
        }
      });
}

// OneHot's indices need no check: one out of range gives a line of off
// values, as ONNX says.
KernelOrStatus BuildOneHot(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(OneHotLayout l, ParseOneHot(spec));
  const bool float_indices = spec.inputs[0]->dtype == DType::kFloat32;
  const size_t element_size = DTypeSize(spec.outputs[0].dtype);
  return std::make_unique<LaunchKernel>(
      context, "OneHotKernel",
      [l, float_indices, element_size](const void* const* in, void* const* out,
                                       cudaStream_t stream) {
        if (float_indices) {
          LaunchOneHot(static_cast<const float*>(in[0]), in[2], out[0], l.outer, l.depth, l.inner,
                       element_size, stream);
        } else {
          LaunchOneHot(static_cast<const int64_t*>(in[0]), in[2], out[0], l.outer, l.depth, l.inner,
                       element_size, stream);
        }
      });
}

}  // namespace

KernelOrStatus MakeCudaIndexingKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type == "GatherElements") return BuildGatherElements(spec, context);
  if (spec.op_type == "ScatterElements") return BuildScatterElements(spec, context);
  if (spec.op_type == "GatherND") return BuildGatherNd(spec, context);
  if (spec.op_type == "ScatterND") return BuildScatterNd(spec, context);
  return BuildOneHot(spec, context);
}

}  // namespace replicad
