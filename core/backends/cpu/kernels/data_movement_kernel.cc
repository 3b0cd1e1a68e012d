#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/index_map_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/backends/cpu/kernels/parallel_copy.h"
#include "core/base/status_macros.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/index_map.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;

// Concatenation of row-major inputs along `axis` is, for each of the
// `outer` = prod(dims[:axis]) rows, one contiguous block per input in turn.
class ConcatKernel : public Kernel {
 public:
  ConcatKernel(int64_t outer, std::vector<size_t> block_bytes)
      : outer_(outer), block_bytes_(std::move(block_bytes)) {
    for (size_t bytes : block_bytes_) total_bytes_ += bytes * static_cast<size_t>(outer_);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    char* out = static_cast<char*>(outputs[0]);
    const size_t total = total_bytes_;
    // Each thread copies one contiguous share of the output, whichever
    // blocks it crosses; below kParallelCopyBytes one thread copies it all.
#pragma omp parallel if (total >= kParallelCopyBytes)
    {
      const size_t threads = static_cast<size_t>(omp_get_num_threads());
      const size_t thread = static_cast<size_t>(omp_get_thread_num());
      const size_t begin = total * thread / threads;
      const size_t end = total * (thread + 1) / threads;
      size_t at = 0;  // Output offset of the current block.
      for (int64_t row = 0; row < outer_ && at < end; ++row) {
        for (size_t i = 0; i < block_bytes_.size() && at < end; ++i) {
          const size_t bytes = block_bytes_[i];
          const size_t from = std::max(at, begin);
          const size_t to = std::min(at + bytes, end);
          if (from < to) {
            std::memcpy(out + from, static_cast<const char*>(inputs[i]) + row * bytes + (from - at),
                        to - from);
          }
          at += bytes;
        }
      }
    }
    return absl::OkStatus();
  }

  std::vector<size_t> joined_input_offsets() const override {
    return ConcatLayout{outer_, block_bytes_}.JoinedOffsets();
  }

 private:
  int64_t outer_;
  std::vector<size_t> block_bytes_;
  size_t total_bytes_ = 0;
};

// The layout of the largest of `descs` whose layout is known (KnownLayout);
// nullopt when none is.
std::optional<memory::format_tag> LargestKnownLayout(const std::vector<memory::desc>& descs) {
  std::optional<memory::format_tag> largest;
  size_t largest_bytes = 0;
  for (const memory::desc& desc : descs) {
    const std::optional<memory::format_tag> known = KnownLayout(desc);
    if (known && desc.get_size() > largest_bytes) {
      largest = known;
      largest_bytes = desc.get_size();
    }
  }
  return largest;
}

// Gather along the axis of data viewed as [outer, axis_dim, inner]: each
// index selects one block of `inner` elements. Indices are data, so they are
// checked on every Run, before anything is written.
class GatherKernel : public Kernel {
 public:
  GatherKernel(std::string node, const GatherLayout& layout, size_t element_bytes)
      : node_(std::move(node)),
        layout_(layout),
        block_bytes_(static_cast<size_t>(layout.inner) * element_bytes) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const char* data = static_cast<const char*>(inputs[0]);
    const int64_t* indices = static_cast<const int64_t*>(inputs[1]);
    REPLICAD_RETURN_IF_ERROR(
        CheckGatherIndices(node_, indices, layout_.num_indices, layout_.axis_dim));
    char* out = static_cast<char*>(outputs[0]);
    for (int64_t row = 0; row < layout_.outer; ++row) {
      const char* slab = data + row * layout_.axis_dim * block_bytes_;
      for (int64_t j = 0; j < layout_.num_indices; ++j) {
        const int64_t index = indices[j] < 0 ? indices[j] + layout_.axis_dim : indices[j];
        std::memcpy(out, slab + index * block_bytes_, block_bytes_);
        out += block_bytes_;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
  GatherLayout layout_;
  size_t block_bytes_;
};

KernelOrStatus MakeIndexMap(const KernelSpec& spec, absl::StatusOr<IndexMap> map) {
  if (!map.ok()) return map.status();
  return std::make_unique<IndexMapKernel>(DTypeSize(spec.outputs[0].dtype), *std::move(map));
}

}  // namespace

KernelOrStatus MakeTransposeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ParseTransposePerm(spec));
  const TensorType& in = *spec.inputs[0];
  const Shape& out = spec.outputs[0].shape;
  const int rank = static_cast<int>(perm.size());
  bool identity = true;
  for (int d = 0; d < rank; ++d) identity &= perm[d] == d;
  if (identity) return MakeCopyKernel(spec, context);
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape);

  // A reorder from the input viewed with permuted strides is oneDNN's
  // parallel transpose. It copies 4-byte and 1-byte elements exactly; an
  // int64 is two 4-byte ones, in an extra innermost dim of 2.
  const size_t element_bytes = DTypeSize(in.dtype);
  const bool halves = element_bytes == 8;
  const memory::data_type element =
      element_bytes == 1 ? memory::data_type::u8 : memory::data_type::s32;
  if (rank + (halves ? 1 : 0) <= DNNL_MAX_NDIMS) {
    memory::dims dims(out.begin(), out.end());
    memory::dims strides(rank);
    for (int d = 0; d < rank; ++d) strides[d] = in_strides[perm[d]] * (halves ? 2 : 1);
    if (halves) {
      dims.push_back(2);
      strides.push_back(1);
    }
    const memory::desc src(dims, element, strides);
    const memory::desc dst = RowMajorDesc(Shape(dims.begin(), dims.end()), element);
    const dnnl::reorder::primitive_desc pd(context.engine, src, context.engine, dst,
                                           UserScratchpadAttr());
    BoundPrimitive primitive(context, pd, dnnl::reorder(pd));
    primitive.BindInput(DNNL_ARG_FROM, src, 0);
    primitive.BindOutput(DNNL_ARG_TO, dst, 0);
    return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
  }
  return MakeIndexMap(spec, TransposeIndexMap(spec));
}

KernelOrStatus MakeSliceKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return MakeIndexMap(spec, SliceIndexMap(spec));
}

KernelOrStatus MakePadKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return MakeIndexMap(spec, PadIndexMap(spec));
}

KernelOrStatus MakeExpandKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return MakeIndexMap(spec, ExpandIndexMap(spec));
}

KernelOrStatus MakeTileKernel(const KernelSpec& spec, CpuKernelContext&) {
  return MakeIndexMap(spec, TileIndexMap(spec));
}

KernelOrStatus MakeDepthSpaceKernel(const KernelSpec& spec, CpuKernelContext&) {
  return MakeIndexMap(spec, DepthSpaceIndexMap(spec));
}

KernelOrStatus MakeConcatKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ConcatLayout layout, ParseConcatLayout(spec));
  if (!HasNativeInputs(spec)) {
    return std::make_unique<ConcatKernel>(layout.outer, std::move(layout.block_bytes));
  }
  // Feature maps joined along channels in the layout their convolutions kept
  // (a densenet's blocks): oneDNN's concatenation reads them there and, where
  // the readers take it, writes the joined map in a layout of its own.
  const int rank = static_cast<int>(spec.outputs[0].shape.size());
  absl::StatusOr<int64_t> axis = spec.attributes->GetInt("axis", 0);
  if (!axis.ok() || spec.outputs[0].dtype != DType::kFloat32) {
    return WithRowMajorInputs(spec, context, MakeConcatKernel);
  }
  const int dim = static_cast<int>(*axis < 0 ? *axis + rank : *axis);
  std::vector<memory::desc> given;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (NumElements(spec.inputs[i]->shape) == 0) {
      return WithRowMajorInputs(spec, context, MakeConcatKernel);  // oneDNN takes no empty source.
    }
    given.push_back(GivenLayout(spec, static_cast<int>(i),
                                RowMajorDesc(spec.inputs[i]->shape, memory::data_type::f32)));
  }
  // oneDNN joins sources of one layout with plain copies and anything else
  // element by element, several times slower: the sources not in the
  // largest one's layout are reordered to it first.
  const std::optional<memory::format_tag> common = LargestKnownLayout(given);
  std::vector<std::optional<memory::desc>> targets(given.size());
  std::vector<memory::desc> sources = given;
  if (common) {
    for (size_t i = 0; i < given.size(); ++i) {
      sources[i] = memory::desc(given[i].dims(), memory::data_type::f32, *common);
      targets[i] = sources[i];
    }
  }
  const Shape& y = spec.outputs[0].shape;
  const memory::desc row_major = RowMajorDesc(y, memory::data_type::f32);
  if (common && memory::desc(row_major.dims(), memory::data_type::f32, *common) == row_major) {
    // Row-major sources joined into a row-major map are contiguous blocks:
    // plain copies. oneDNN's concatenation took 32 us each for shufflenet's
    // (about 150 KB at batch 1); with copies its pass is 0.2-0.3 ms shorter.
    return WithInputsReordered(
        spec, context, targets,
        std::make_unique<ConcatKernel>(layout.outer, std::move(layout.block_bytes)));
  }
  const memory::desc dst =
      !spec.native_output ? row_major
      : common            ? memory::desc(row_major.dims(), memory::data_type::f32, *common)
               : memory::desc(row_major.dims(), memory::data_type::f32, memory::format_tag::any);
  return InPlaceOrRowMajor(spec, context, MakeConcatKernel, [&]() -> KernelOrStatus {
    const dnnl::concat::primitive_desc pd(dst, dim, sources, context.engine, UserScratchpadAttr());
    RejectReference(pd);
    BoundPrimitive primitive(context, pd, dnnl::concat(pd));
    for (size_t i = 0; i < sources.size(); ++i) {
      primitive.BindInput(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), sources[i],
                          static_cast<int>(i));
    }
    primitive.BindOutput(DNNL_ARG_DST, pd.dst_desc(), 0);
    auto kernel = std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
    if (pd.dst_desc() != row_major) kernel->SetNativeOutput(pd.dst_desc());
    if (sources == given) kernel->SetJoinedInputOffsets(JoinedOffsets(sources, pd.dst_desc(), dim));
    return WithInputsReordered(spec, context, targets, std::move(kernel));
  });
}

KernelOrStatus MakeGatherKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(GatherLayout layout, ParseGatherLayout(spec));
  return std::make_unique<GatherKernel>(NodeLabel(spec), layout, DTypeSize(spec.inputs[0]->dtype));
}

}  // namespace replicad
