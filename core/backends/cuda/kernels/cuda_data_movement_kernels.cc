#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/kernels/index_map_launch.h"
#include "core/backends/cuda/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/constant_value.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"
#include "core/ops/reduce_attributes.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {
namespace {

// Identity, Flatten, Reshape: a copy, which the plan skips where the output
// can be a view of the input (joined_input_offsets).
class CopyKernel : public Kernel {
 public:
  CopyKernel(const CudaKernelContext& context, size_t bytes, size_t num_inputs)
      : context_(context), bytes_(bytes), num_inputs_(num_inputs) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    REPLICAD_CUDA_RETURN_IF_ERROR(
        context_.device,
        cudaMemcpyAsync(outputs[0], inputs[0], bytes_, cudaMemcpyDeviceToDevice, context_.stream));
    return absl::OkStatus();
  }

  std::vector<size_t> joined_input_offsets() const override {
    return OutputIsInputZero(num_inputs_);
  }

 private:
  const CudaKernelContext& context_;
  size_t bytes_;
  size_t num_inputs_;
};

// Split: output i is the input's [outer, sizes[i] * inner] block starting at
// column offset_i * inner of each row of axis_dim * inner elements, one
// strided copy per output.
class SplitKernel : public Kernel {
 public:
  SplitKernel(const CudaKernelContext& context, SplitLayout layout, size_t element_size)
      : context_(context), layout_(std::move(layout)), element_size_(element_size) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    int64_t axis_dim = 0;
    for (int64_t size : layout_.sizes) axis_dim += size;
    const size_t row_bytes = static_cast<size_t>(axis_dim * layout_.inner) * element_size_;
    const char* in = static_cast<const char*>(inputs[0]);
    int64_t offset = 0;
    for (size_t i = 0; i < layout_.sizes.size(); ++i) {
      const size_t width = static_cast<size_t>(layout_.sizes[i] * layout_.inner) * element_size_;
      if (width > 0 && layout_.outer > 0) {
        REPLICAD_CUDA_RETURN_IF_ERROR(
            context_.device,
            cudaMemcpy2DAsync(outputs[i], width,
                              in + static_cast<size_t>(offset * layout_.inner) * element_size_,
                              row_bytes, width, static_cast<size_t>(layout_.outer),
                              cudaMemcpyDeviceToDevice, context_.stream));
      }
      offset += layout_.sizes[i];
    }
    return absl::OkStatus();
  }

 private:
  const CudaKernelContext& context_;
  SplitLayout layout_;
  size_t element_size_;
};

// Writes a value known when the kernel is built, kept in device memory.
class ConstantKernel : public Kernel {
 public:
  ConstantKernel(const CudaKernelContext& context, std::shared_ptr<Buffer> value)
      : context_(context), value_(std::move(value)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    REPLICAD_CUDA_RETURN_IF_ERROR(context_.device,
                                  cudaMemcpyAsync(outputs[0], value_->data(), value_->bytes(),
                                                  cudaMemcpyDeviceToDevice, context_.stream));
    return absl::OkStatus();
  }

 private:
  const CudaKernelContext& context_;
  std::shared_ptr<Buffer> value_;
};

class IndexMapKernel : public Kernel {
 public:
  IndexMapKernel(const CudaKernelContext& context, DeviceIndexMap map,
                 std::shared_ptr<Buffer> table, int64_t n, size_t element_size)
      : context_(context),
        map_(map),
        table_(std::move(table)),
        n_(n),
        element_size_(element_size) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    LaunchIndexMap(inputs[0], outputs[0], n_, element_size_, map_, context_.stream);
    return LastLaunchStatus(context_.device, "IndexMapKernel");
  }

 private:
  const CudaKernelContext& context_;
  DeviceIndexMap map_;
  std::shared_ptr<Buffer> table_;  // map_.table points into it.
  int64_t n_;
  size_t element_size_;
};

// Gather along one axis. Indices known when the plan is made (x[:, 0], an
// embedding row picked by a constant) are checked once and kept in device
// memory. Indices that are data (token ids) are read back and checked on
// every Run before the gather is enqueued, so a bad index fails the request
// with the CPU backend's message instead of reading out of bounds; that read
// waits for the stream, as the loss's check of its labels does.
class GatherKernel : public Kernel {
 public:
  GatherKernel(const CudaKernelContext& context, std::string node, const GatherLayout& layout,
               size_t element_size, std::shared_ptr<Buffer> constant_indices)
      : context_(context),
        node_(std::move(node)),
        layout_(layout),
        element_size_(element_size),
        constant_indices_(std::move(constant_indices)),
        host_indices_(constant_indices_ ? 0 : layout.num_indices) {}

  // Indices that are data are checked on the host at every Run.
  bool replayable() const override { return constant_indices_ != nullptr; }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int64_t* indices = static_cast<const int64_t*>(inputs[1]);
    if (constant_indices_ != nullptr) {
      indices = static_cast<const int64_t*>(constant_indices_->data());
    } else if (!host_indices_.empty()) {
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device,
          cudaMemcpyAsync(host_indices_.data(), indices, host_indices_.size() * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, context_.stream));
      REPLICAD_CUDA_RETURN_IF_ERROR(context_.device, cudaStreamSynchronize(context_.stream));
      REPLICAD_RETURN_IF_ERROR(
          CheckGatherIndices(node_, host_indices_.data(), layout_.num_indices, layout_.axis_dim));
    }
    LaunchGather(inputs[0], indices, outputs[0], layout_.outer, layout_.axis_dim, layout_.inner,
                 layout_.num_indices, element_size_, context_.stream);
    return LastLaunchStatus(context_.device, "GatherKernel");
  }

 private:
  const CudaKernelContext& context_;
  std::string node_;
  GatherLayout layout_;
  size_t element_size_;
  std::shared_ptr<Buffer> constant_indices_;
  std::vector<int64_t> host_indices_;  // Indices that are data, read back to be checked.
};

// Concatenation of row-major inputs along an axis is, for each of the
// `outer` rows, one contiguous block per input: one strided 2-D copy each.
class ConcatKernel : public Kernel {
 public:
  ConcatKernel(const CudaKernelContext& context, int64_t outer, std::vector<size_t> block_bytes)
      : context_(context), outer_(outer), block_bytes_(std::move(block_bytes)) {
    for (size_t bytes : block_bytes_) row_bytes_ += bytes;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    char* out = static_cast<char*>(outputs[0]);
    for (size_t i = 0; i < block_bytes_.size(); ++i) {
      const size_t bytes = block_bytes_[i];
      if (bytes == 0) continue;
      REPLICAD_CUDA_RETURN_IF_ERROR(
          context_.device, cudaMemcpy2DAsync(out, row_bytes_, inputs[i], bytes, bytes, outer_,
                                             cudaMemcpyDeviceToDevice, context_.stream));
      out += bytes;
    }
    return absl::OkStatus();
  }

  std::vector<size_t> joined_input_offsets() const override {
    return ConcatLayout{outer_, block_bytes_}.JoinedOffsets();
  }

 private:
  const CudaKernelContext& context_;
  int64_t outer_;
  std::vector<size_t> block_bytes_;
  size_t row_bytes_ = 0;
};

template <typename T>
class ReduceKernel : public Kernel {
 public:
  ReduceKernel(const CudaKernelContext& context, std::shared_ptr<Buffer> tables, int64_t n_out,
               int64_t n_reduced, TableReduction kind, float scale)
      : context_(context),
        tables_(std::move(tables)),
        n_out_(n_out),
        n_reduced_(n_reduced),
        kind_(kind),
        scale_(scale) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int64_t* bases = static_cast<const int64_t*>(tables_->data());
    if constexpr (std::is_same_v<T, float>) {
      LaunchTableReduce(static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0]),
                        n_out_, bases, bases + n_out_, n_reduced_, kind_, scale_, context_.stream);
    } else {
      LaunchTableReduce(static_cast<const int64_t*>(inputs[0]), static_cast<int64_t*>(outputs[0]),
                        n_out_, bases, bases + n_out_, n_reduced_, kind_, context_.stream);
    }
    return LastLaunchStatus(context_.device, "TableReduceKernel");
  }

 private:
  const CudaKernelContext& context_;
  std::shared_ptr<Buffer> tables_;  // n_out bases, then n_reduced offsets.
  int64_t n_out_;
  int64_t n_reduced_;
  TableReduction kind_;
  float scale_;
};

// The table reduction of a ReduceKind.
std::optional<TableReduction> TableReductionOf(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      return TableReduction::kSum;
    case ReduceKind::kMax:
      return TableReduction::kMax;
    case ReduceKind::kMin:
      return TableReduction::kMin;
    case ReduceKind::kProd:
      return TableReduction::kProd;
    case ReduceKind::kL1:
      return TableReduction::kL1;
    case ReduceKind::kL2:
      return TableReduction::kL2;
    case ReduceKind::kSumSquare:
      return TableReduction::kSumSquare;
    case ReduceKind::kLogSum:
      return TableReduction::kLogSum;
    case ReduceKind::kLogSumExp:
      return TableReduction::kLogSumExp;
  }
  return std::nullopt;
}

KernelOrStatus MakeFromIndexMap(const KernelSpec& spec, CudaKernelContext& context,
                                absl::StatusOr<IndexMap> map) {
  if (!map.ok()) return map.status();
  if (map->output.size() > static_cast<size_t>(kMaxRank)) {
    return NodeUnimplemented(spec,
                             absl::StrCat("the CUDA backend moves data of rank up to ", kMaxRank,
                                          "; the output has rank ", map->output.size()));
  }
  DeviceIndexMap device_map;
  device_map.rank = static_cast<int>(map->output.size());
  device_map.fill_bits = map->fill_bits;
  std::vector<int64_t> table;
  for (int d = 0; d < device_map.rank; ++d) {
    device_map.dims[d] = map->output[d];
    device_map.begin[d] = static_cast<int64_t>(table.size());
    table.insert(table.end(), map->offsets[d].begin(), map->offsets[d].end());
  }
  if (table.empty()) table.push_back(0);
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                            UploadToDevice(context, table.data(), table.size() * sizeof(int64_t)));
  device_map.table = static_cast<const int64_t*>(buffer->data());
  return std::make_unique<IndexMapKernel>(context, device_map, std::move(buffer),
                                          NumElements(spec.outputs[0].shape),
                                          DTypeSize(spec.outputs[0].dtype));
}

KernelOrStatus MakeConstantFrom(const KernelSpec& spec, CudaKernelContext& context,
                                const Tensor& value) {
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                            UploadToDevice(context, value.raw_data(), value.byte_size()));
  return std::make_unique<ConstantKernel>(context, std::move(buffer));
}

// Offsets of every element of `shape` laid over `strides` (row-major order).
std::vector<int64_t> EnumerateOffsets(const Shape& shape, const std::vector<int64_t>& strides) {
  std::vector<int64_t> offsets(static_cast<size_t>(NumElements(shape)));
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t i = 0; i < offsets.size(); ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * strides[d];
    offsets[i] = offset;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

}  // namespace

KernelOrStatus MakeCudaCopyKernel(const KernelSpec& spec, CudaKernelContext& context) {
  const TensorType& out = spec.outputs[0];
  return std::make_unique<CopyKernel>(
      context, static_cast<size_t>(NumElements(out.shape)) * DTypeSize(out.dtype),
      spec.inputs.size());
}

KernelOrStatus MakeCudaIndexMapKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type == "Transpose") return MakeFromIndexMap(spec, context, TransposeIndexMap(spec));
  if (spec.op_type == "Slice") return MakeFromIndexMap(spec, context, SliceIndexMap(spec));
  if (spec.op_type == "Pad") return MakeFromIndexMap(spec, context, PadIndexMap(spec));
  if (spec.op_type == "Tile") return MakeFromIndexMap(spec, context, TileIndexMap(spec));
  if (spec.op_type == "DepthToSpace" || spec.op_type == "SpaceToDepth") {
    return MakeFromIndexMap(spec, context, DepthSpaceIndexMap(spec));
  }
  return MakeFromIndexMap(spec, context, ExpandIndexMap(spec));
}

KernelOrStatus MakeCudaSplitKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(SplitLayout layout, ParseSplit(spec));
  return std::make_unique<SplitKernel>(context, std::move(layout),
                                       DTypeSize(spec.inputs[0]->dtype));
}

KernelOrStatus MakeCudaConcatKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConcatLayout layout, ParseConcatLayout(spec));
  return std::make_unique<ConcatKernel>(context, layout.outer, std::move(layout.block_bytes));
}

KernelOrStatus MakeCudaGatherKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GatherLayout layout, ParseGatherLayout(spec));
  const Tensor* indices = ConstantInput(spec, 1);
  if (indices == nullptr) {
    return std::make_unique<GatherKernel>(context, NodeLabel(spec), layout,
                                          DTypeSize(spec.outputs[0].dtype), nullptr);
  }
  REPLICAD_RETURN_IF_ERROR(CheckGatherIndices(NodeLabel(spec), indices->data<int64_t>(),
                                              layout.num_indices, layout.axis_dim));
  // One slot for an empty index list keeps the device pointer valid.
  std::vector<int64_t> values(indices->data<int64_t>(),
                              indices->data<int64_t>() + layout.num_indices);
  if (values.empty()) values.push_back(0);
  REPLICAD_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> buffer,
      UploadToDevice(context, values.data(), values.size() * sizeof(int64_t)));
  return std::make_unique<GatherKernel>(context, NodeLabel(spec), layout,
                                        DTypeSize(spec.outputs[0].dtype), std::move(buffer));
}

KernelOrStatus MakeCudaConstantKernel(const KernelSpec& spec, CudaKernelContext& context) {
  if (spec.op_type == "Shape") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(spec));
    return MakeConstantFrom(spec, context, value);
  }
  if (spec.op_type == "Range") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor value, RangeValue(spec));
    return MakeConstantFrom(spec, context, value);
  }
  if (spec.op_type == "ConstantOfShape") {
    REPLICAD_ASSIGN_OR_RETURN(Tensor fill, ConstantOfShapeFill(spec));
    Tensor value = Tensor::Host(fill.dtype(), spec.outputs[0].shape);
    const size_t element = DTypeSize(fill.dtype());
    for (int64_t i = 0; i < NumElements(value.shape()); ++i) {
      std::memcpy(static_cast<char*>(value.raw_data()) + i * element, fill.raw_data(), element);
    }
    return MakeConstantFrom(spec, context, value);
  }
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ConstantValue(spec));
  return MakeConstantFrom(spec, context, value);
}

// Each output element (in the order of the shape with reduced dims as 1s)
// sums the elements at its base plus every reduced offset.
KernelOrStatus MakeCudaReduceKernel(const KernelSpec& spec, CudaKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ReduceLayout layout, ParseReduce(spec));
  const Shape& data = spec.inputs[0]->shape;
  const std::vector<int64_t> strides = RowMajorStrides(data);
  Shape reduced_dims(data.size(), 1);
  for (size_t d = 0; d < data.size(); ++d) {
    if (layout.reduced[d] != data[d]) reduced_dims[d] = data[d];
  }
  std::vector<int64_t> tables = EnumerateOffsets(layout.reduced, strides);
  const int64_t n_out = static_cast<int64_t>(tables.size());
  const std::vector<int64_t> offsets = EnumerateOffsets(reduced_dims, strides);
  const int64_t n_reduced = static_cast<int64_t>(offsets.size());
  tables.insert(tables.end(), offsets.begin(), offsets.end());
  REPLICAD_ASSIGN_OR_RETURN(
      std::shared_ptr<Buffer> buffer,
      UploadToDevice(context, tables.data(), tables.size() * sizeof(int64_t)));
  // noop_with_empty_axes: the input as it is, whatever the kind (an L2's
  // sqrt(x^2) would drop the sign).
  const std::optional<TableReduction> kind =
      layout.noop ? TableReduction::kSum : TableReductionOf(layout.kind);
  if (!kind.has_value()) {
    return NodeUnimplemented(spec, "the CUDA backend has no such reduction");
  }
  const bool mean = layout.kind == ReduceKind::kMean && !layout.noop;
  if (spec.outputs[0].dtype == DType::kInt64) {
    if (mean || *kind == TableReduction::kL2 || *kind == TableReduction::kLogSum ||
        *kind == TableReduction::kLogSumExp) {
      return NodeUnimplemented(
          spec, absl::StrCat("the CUDA backend computes ", spec.op_type, " on float32 only"));
    }
    return std::make_unique<ReduceKernel<int64_t>>(context, std::move(buffer), n_out, n_reduced,
                                                   *kind, 1.0f);
  }
  // The mean of nothing is 0 / 0 = NaN, as numpy's (and the CPU backend's).
  float scale = 1.0f;
  if (mean) {
    scale = n_reduced > 0 ? 1.0f / static_cast<float>(n_reduced)
                          : std::numeric_limits<float>::quiet_NaN();
  }
  return std::make_unique<ReduceKernel<float>>(context, std::move(buffer), n_out, n_reduced, *kind,
                                               scale);
}

}  // namespace replicad
