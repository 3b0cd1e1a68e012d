#include "core/backends/cpu/kernels/native_layout.h"

#include <optional>
#include <utility>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

constexpr size_t kAlignment = 64;

size_t Aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Reorders some inputs into copies in its workspace, in the layouts `inner`
// was made for, then runs `inner` on those.
class ReorderedInputsKernel : public Kernel {
 public:
  struct Conversion {
    int input;
    BoundPrimitive reorder;  // The input as given -> the copy (fixed memory).
    dnnl::memory copy;       // Its handle is set by SetWorkspace.
  };

  ReorderedInputsKernel(CpuKernelContext& context, std::string node,
                        std::vector<Conversion> conversions, std::unique_ptr<Kernel> inner,
                        size_t input_count)
      : context_(context),
        node_(std::move(node)),
        conversions_(std::move(conversions)),
        inner_(std::move(inner)),
        inner_inputs_(input_count, nullptr) {}

  size_t workspace_bytes() const override { return CopiesBytes() + inner_->workspace_bytes(); }

  void SetWorkspace(void* workspace) override {
    char* next = static_cast<char*>(workspace);
    for (Conversion& c : conversions_) {
      c.copy.set_data_handle(next);
      inner_inputs_[c.input] = next;
      next += Aligned(c.copy.get_desc().get_size());
    }
    inner_->SetWorkspace(next);
  }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    for (size_t i = 0; i < inner_inputs_.size(); ++i) {
      if (!IsConverted(static_cast<int>(i))) inner_inputs_[i] = inputs[i];
    }
    for (Conversion& c : conversions_) {
      REPLICAD_RETURN_IF_ERROR(c.reorder.Execute(inputs, outputs, node_));
    }
    REPLICAD_RETURN_IF_ERROR(WaitStream(context_, node_));
    return inner_->Run(run, inner_inputs_.data(), outputs);
  }

  // The output is inner's, in the layout inner chose (a concatenation of a
  // blocked map and a reordered row-major one writes blocks).
  std::string native_output_layout() const override { return inner_->native_output_layout(); }
  size_t native_output_bytes() const override { return inner_->native_output_bytes(); }

 private:
  bool IsConverted(int input) const {
    for (const Conversion& c : conversions_) {
      if (c.input == input) return true;
    }
    return false;
  }
  size_t CopiesBytes() const {
    size_t bytes = 0;
    for (const Conversion& c : conversions_) bytes += Aligned(c.copy.get_desc().get_size());
    return bytes;
  }

  CpuKernelContext& context_;
  std::string node_;
  std::vector<Conversion> conversions_;
  std::unique_ptr<Kernel> inner_;
  std::vector<const void*> inner_inputs_;  // Sized here so that Run does not allocate.
};

// `inner` writing output 0 into a copy in workspace, in the layout it chose,
// then that copy reordered into output 0 row-major.
class ReorderedOutputKernel : public Kernel {
 public:
  ReorderedOutputKernel(CpuKernelContext& context, std::string node, std::unique_ptr<Kernel> inner,
                        BoundPrimitive reorder, dnnl::memory copy, size_t output_count)
      : context_(context),
        node_(std::move(node)),
        inner_(std::move(inner)),
        reorder_(std::move(reorder)),
        copy_(std::move(copy)),
        inner_outputs_(output_count, nullptr) {}

  size_t workspace_bytes() const override { return CopyBytes() + inner_->workspace_bytes(); }

  void SetWorkspace(void* workspace) override {
    copy_.set_data_handle(workspace);
    inner_outputs_[0] = workspace;
    inner_->SetWorkspace(static_cast<char*>(workspace) + CopyBytes());
  }

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    for (size_t i = 1; i < inner_outputs_.size(); ++i) inner_outputs_[i] = outputs[i];
    REPLICAD_RETURN_IF_ERROR(inner_->Run(run, inputs, inner_outputs_.data()));
    REPLICAD_RETURN_IF_ERROR(reorder_.Execute(inputs, outputs, node_));
    return WaitStream(context_, node_);
  }

 private:
  size_t CopyBytes() const { return Aligned(copy_.get_desc().get_size()); }

  CpuKernelContext& context_;
  std::string node_;
  std::unique_ptr<Kernel> inner_;
  BoundPrimitive reorder_;            // The copy (fixed memory) -> output 0.
  dnnl::memory copy_;                 // Its handle is set by SetWorkspace.
  std::vector<void*> inner_outputs_;  // Sized here so that Run does not allocate.
};

// Elements per block of each dim (1 where the dim is not blocked).
std::vector<int64_t> BlockSizes(const dnnl_memory_desc_t& desc) {
  std::vector<int64_t> sizes(desc.ndims, 1);
  const dnnl_blocking_desc_t& blocking = desc.format_desc.blocking;
  for (int k = 0; k < blocking.inner_nblks; ++k)
    sizes[blocking.inner_idxs[k]] *= blocking.inner_blks[k];
  return sizes;
}

bool SameInnerBlocks(const dnnl_blocking_desc_t& a, const dnnl_blocking_desc_t& b) {
  if (a.inner_nblks != b.inner_nblks) return false;
  for (int k = 0; k < a.inner_nblks; ++k) {
    if (a.inner_blks[k] != b.inner_blks[k] || a.inner_idxs[k] != b.inner_idxs[k]) return false;
  }
  return true;
}

// Blocked, unpadded, starting at its first byte, and without holes.
bool Dense(const dnnl::memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.format_kind != dnnl_blocked || d.offset0 != 0) return false;
  size_t elements = 1;
  for (int k = 0; k < d.ndims; ++k) {
    if (d.padded_dims[k] != d.dims[k] || d.padded_offsets[k] != 0) return false;
    elements *= static_cast<size_t>(d.dims[k]);
  }
  return elements * dnnl::memory::data_type_size(desc.data_type()) == desc.get_size();
}

}  // namespace

int64_t ElementOffset(const dnnl_memory_desc_t& md, const std::vector<int64_t>& index) {
  const dnnl_blocking_desc_t& blocking = md.format_desc.blocking;
  int64_t block[DNNL_MAX_NDIMS];
  for (int d = 0; d < md.ndims; ++d) block[d] = 1;
  for (int k = 0; k < blocking.inner_nblks; ++k)
    block[blocking.inner_idxs[k]] *= blocking.inner_blks[k];
  int64_t offset = md.offset0;
  for (int d = 0; d < md.ndims; ++d) offset += index[d] / block[d] * blocking.strides[d];
  // Inner blocks are listed outermost first.
  int64_t inner = 0;
  for (int k = 0; k < blocking.inner_nblks; ++k) {
    const int d = blocking.inner_idxs[k];
    block[d] /= blocking.inner_blks[k];
    inner =
        inner * blocking.inner_blks[k] + index[d] % (block[d] * blocking.inner_blks[k]) / block[d];
  }
  return offset + inner;
}

dnnl::memory::desc GivenLayout(const KernelSpec& spec, int index,
                               const dnnl::memory::desc& row_major) {
  if (index >= static_cast<int>(spec.input_layouts.size()) || spec.input_layouts[index].empty()) {
    return row_major;
  }
  std::optional<dnnl::memory::desc> given = DeserializeDesc(spec.input_layouts[index]);
  return given ? *given : row_major;
}

bool SameBytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
  if (a == b) return true;
  const dnnl_memory_desc_t &x = a.data, &y = b.data;
  if (x.ndims != y.ndims || x.data_type != y.data_type || x.format_kind != dnnl_blocked ||
      y.format_kind != dnnl_blocked || a.get_size() != b.get_size()) {
    return false;
  }
  int64_t elements = 1;
  for (int d = 0; d < x.ndims; ++d) {
    if (x.dims[d] != y.dims[d]) return false;
    elements *= x.dims[d];
  }
  // Element by element: only small values (e.g. [N, C, 1, 1]) are asked about.
  constexpr int64_t kMaxElements = int64_t{1} << 16;
  if (elements > kMaxElements) return false;
  std::vector<int64_t> index(x.ndims, 0);
  for (int64_t e = 0; e < elements; ++e) {
    if (ElementOffset(x, index) != ElementOffset(y, index)) return false;
    for (int d = x.ndims - 1; d >= 0 && ++index[d] == x.dims[d]; --d) index[d] = 0;
  }
  return true;
}

std::vector<size_t> JoinedOffsets(const std::vector<dnnl::memory::desc>& sources,
                                  const dnnl::memory::desc& dst, int axis) {
  const dnnl_memory_desc_t& y = dst.data;
  if (!Dense(dst) || axis < 0 || axis >= y.ndims) return {};
  for (int d = 0; d < axis; ++d) {
    if (y.dims[d] != 1) return {};  // Each source would be one block per outer index.
  }
  const std::vector<int64_t> blocks = BlockSizes(y);
  const size_t element_bytes = dnnl::memory::data_type_size(dst.data_type());
  std::vector<size_t> offsets;
  int64_t axis_offset = 0;
  size_t byte_offset = 0;
  for (const dnnl::memory::desc& source : sources) {
    const dnnl_memory_desc_t& x = source.data;
    if (!Dense(source) || x.ndims != y.ndims || x.data_type != y.data_type ||
        !SameInnerBlocks(x.format_desc.blocking, y.format_desc.blocking) ||
        axis_offset % blocks[axis] != 0) {
      return {};
    }
    // Element e of the source is element e + axis_offset of dst: the same
    // byte, shifted, wherever the strides of the dims it moves along agree.
    for (int d = 0; d < y.ndims; ++d) {
      if (d != axis && x.dims[d] != y.dims[d]) return {};
      if (x.dims[d] > blocks[d] &&
          x.format_desc.blocking.strides[d] != y.format_desc.blocking.strides[d]) {
        return {};
      }
    }
    const size_t shift =
        static_cast<size_t>(axis_offset / blocks[axis] * y.format_desc.blocking.strides[axis]) *
        element_bytes;
    if (shift != byte_offset) return {};
    offsets.push_back(byte_offset);
    axis_offset += x.dims[axis];
    byte_offset += source.get_size();
  }
  if (axis_offset != y.dims[axis] || byte_offset != dst.get_size()) return {};
  return offsets;
}

std::optional<dnnl::memory::format_tag> KnownLayout(const dnnl::memory::desc& desc) {
  using tag = dnnl::memory::format_tag;
  if (desc.dims().size() != 4) return std::nullopt;
  for (tag candidate : {tag::acdb, tag::aBcd16b, tag::aBcd8b, tag::abcd}) {
    if (desc == dnnl::memory::desc(desc.dims(), desc.data_type(), candidate)) return candidate;
  }
  return std::nullopt;
}

bool IsReference(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

void RejectReference(const dnnl::primitive_desc_base& pd) {
  if (IsReference(pd)) {
    throw dnnl::error(dnnl_unimplemented, "only oneDNN's reference implementation takes this");
  }
}

bool HasNativeInputs(const KernelSpec& spec) {
  for (const std::string& layout : spec.input_layouts) {
    if (!layout.empty()) return true;
  }
  return false;
}

KernelOrStatus WithRowMajorInputs(const KernelSpec& spec, CpuKernelContext& context,
                                  KernelOrStatus (*build)(const KernelSpec&, CpuKernelContext&)) {
  KernelSpec row_major = spec;
  row_major.input_layouts.clear();
  row_major.native_output = false;
  REPLICAD_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, build(row_major, context));
  std::vector<std::optional<dnnl::memory::desc>> targets(spec.inputs.size());
  for (size_t i = 0; i < spec.input_layouts.size(); ++i) {
    if (!spec.input_layouts[i].empty() && spec.inputs[i]) {
      targets[i] = RowMajorDesc(spec.inputs[i]->shape, dnnl::memory::data_type::f32);
    }
  }
  return WithInputsReordered(spec, context, targets, std::move(inner));
}

KernelOrStatus WithInputsReordered(const KernelSpec& spec, CpuKernelContext& context,
                                   const std::vector<std::optional<dnnl::memory::desc>>& targets,
                                   std::unique_ptr<Kernel> inner) {
  std::vector<ReorderedInputsKernel::Conversion> conversions;
  for (size_t i = 0; i < targets.size() && i < spec.inputs.size(); ++i) {
    if (!targets[i] || !spec.inputs[i]) continue;
    const dnnl::memory::desc given =
        GivenLayout(spec, static_cast<int>(i),
                    RowMajorDesc(spec.inputs[i]->shape, dnnl::memory::data_type::f32));
    if (given == *targets[i]) continue;
    dnnl::memory copy(*targets[i], context.engine, DNNL_MEMORY_NONE);
    const dnnl::reorder::primitive_desc pd(context.engine, given, context.engine, *targets[i],
                                           UserScratchpadAttr());
    BoundPrimitive reorder(context, pd, dnnl::reorder(pd));
    reorder.BindInput(DNNL_ARG_FROM, given, static_cast<int>(i));
    reorder.BindFixed(DNNL_ARG_TO, copy);
    conversions.push_back({static_cast<int>(i), std::move(reorder), copy});
  }
  if (conversions.empty()) return inner;
  return std::make_unique<ReorderedInputsKernel>(context, NodeLabel(spec), std::move(conversions),
                                                 std::move(inner), spec.inputs.size());
}

KernelOrStatus WithOutputReordered(const KernelSpec& spec, CpuKernelContext& context,
                                   std::unique_ptr<Kernel> inner, const dnnl::memory::desc& written,
                                   const dnnl::memory::desc& row_major) {
  if (written == row_major) return inner;
  dnnl::memory copy(written, context.engine, DNNL_MEMORY_NONE);
  const dnnl::reorder::primitive_desc pd(context.engine, written, context.engine, row_major,
                                         UserScratchpadAttr());
  BoundPrimitive reorder(context, pd, dnnl::reorder(pd));
  reorder.BindFixed(DNNL_ARG_FROM, copy);
  reorder.BindOutput(DNNL_ARG_TO, row_major, 0);
  return std::make_unique<ReorderedOutputKernel>(context, NodeLabel(spec), std::move(inner),
                                                 std::move(reorder), copy, spec.outputs.size());
}

dnnl::memory::format_tag ChannelBlockedLayout(int64_t channels) {
  static const int block = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    if (isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
        isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx) {
      return 16;
    }
    return isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx2_vnni ? 8 : 0;
  }();
  if (block == 0 || channels % 8 != 0) return dnnl::memory::format_tag::any;
  return block == 16 ? dnnl::memory::format_tag::aBcd16b : dnnl::memory::format_tag::aBcd8b;
}

}  // namespace replicad
