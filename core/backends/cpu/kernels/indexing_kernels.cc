// GatherElements, ScatterElements, GatherND and OneHot (core/ops/indexing_attributes.h).
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/index_map.h"
#include "core/ops/indexing_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// The walk GatherElements and ScatterElements share: every position of
// `indices` (checked first, all of them, so that nothing is read or written
// for a request with a bad one), with the data offset it names.
template <typename Index>
class ElementIndexWalk {
 public:
  ElementIndexWalk(std::string node, const GatherElementsLayout& layout)
      : node_(std::move(node)),
        axis_(layout.axis),
        indices_(layout.indices),
        data_strides_(RowMajorStrides(layout.data)),
        axis_dim_(layout.data[layout.axis]),
        index_(layout.indices.size(), 0) {}

  // Calls visit(i, offset) for every position i of `indices` in row-major
  // order, offset being data's element that indices[i] names.
  template <typename Visit>
  absl::Status Walk(const Index* indices, Visit visit) {
    const int64_t total = NumElements(indices_);
    REPLICAD_RETURN_IF_ERROR(CheckElementIndices(node_, indices, total, axis_dim_));
    const int rank = static_cast<int>(indices_.size());
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) {
        if (d != axis_) offset += index_[d] * data_strides_[d];
      }
      const int64_t index = static_cast<int64_t>(indices[i]);
      visit(i, offset + (index < 0 ? index + axis_dim_ : index) * data_strides_[axis_]);
      for (int d = rank - 1; d >= 0; --d) {
        if (++index_[d] < indices_[d]) break;
        index_[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
  int64_t axis_;
  Shape indices_;
  std::vector<int64_t> data_strides_;
  int64_t axis_dim_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
};

// Copies elements as bit patterns of their size: one kernel per size serves
// every dtype.
template <typename Element, typename Index>
class GatherElementsKernel : public Kernel {
 public:
  GatherElementsKernel(std::string node, const GatherElementsLayout& layout)
      : walk_(std::move(node), layout) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const Element* data = static_cast<const Element*>(inputs[0]);
    Element* out = static_cast<Element*>(outputs[0]);
    return walk_.Walk(static_cast<const Index*>(inputs[1]),
                      [&](int64_t i, int64_t offset) { out[i] = data[offset]; });
  }

 private:
  ElementIndexWalk<Index> walk_;
};

// ScatterElements: output = data, then each update written (or added, or
// multiplied) at the element its index names, in row-major order of indices.
template <typename T, typename Index>
class ScatterElementsKernel : public Kernel {
 public:
  ScatterElementsKernel(std::string node, const ScatterElementsLayout& layout)
      : walk_(std::move(node), layout.elements),
        reduction_(layout.reduction),
        elements_(NumElements(layout.elements.data)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* data = static_cast<const T*>(inputs[0]);
    const T* updates = static_cast<const T*>(inputs[2]);
    T* out = static_cast<T*>(outputs[0]);
    // Checked before the copy: a bad index leaves the output untouched.
    REPLICAD_RETURN_IF_ERROR(
        walk_.Walk(static_cast<const Index*>(inputs[1]), [](int64_t, int64_t) {}));
    if (out != data) std::memcpy(out, data, static_cast<size_t>(elements_) * sizeof(T));
    return walk_.Walk(static_cast<const Index*>(inputs[1]), [&](int64_t i, int64_t offset) {
      out[offset] = ScatterCombine(reduction_, out[offset], updates[i]);
    });
  }

 private:
  ElementIndexWalk<Index> walk_;
  ScatterReduction reduction_;
  int64_t elements_;
};

class GatherNdKernel : public Kernel {
 public:
  GatherNdKernel(std::string node, GatherNdLayout layout, size_t element_bytes)
      : node_(std::move(node)), layout_(std::move(layout)), element_bytes_(element_bytes) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const char* data = static_cast<const char*>(inputs[0]);
    const int64_t* indices = static_cast<const int64_t*>(inputs[1]);
    char* out = static_cast<char*>(outputs[0]);
    const int64_t k = layout_.tuple;
    REPLICAD_RETURN_IF_ERROR(CheckIndexTuples(
        node_, indices, layout_.batches * layout_.count_per_batch, layout_.tuple_dims));
    const size_t slice_bytes = layout_.slice * element_bytes_;
    for (int64_t batch = 0; batch < layout_.batches; ++batch) {
      for (int64_t n = 0; n < layout_.count_per_batch; ++n) {
        const int64_t* tuple = indices + (batch * layout_.count_per_batch + n) * k;
        int64_t offset = batch * layout_.batch_stride;
        for (int64_t d = 0; d < k; ++d) {
          const int64_t index = tuple[d] < 0 ? tuple[d] + layout_.tuple_dims[d] : tuple[d];
          offset += index * layout_.tuple_strides[d];
        }
        std::memcpy(out, data + offset * element_bytes_, slice_bytes);
        out += slice_bytes;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
  GatherNdLayout layout_;
  size_t element_bytes_;
};

template <typename Index, typename Value>
class OneHotKernel : public Kernel {
 public:
  explicit OneHotKernel(const OneHotLayout& layout) : layout_(layout) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const Index* indices = static_cast<const Index*>(inputs[0]);
    const Value* values = static_cast<const Value*>(inputs[2]);
    Value* out = static_cast<Value*>(outputs[0]);
    const int64_t depth = layout_.depth;
    const int64_t inner = layout_.inner;
    std::fill(out, out + layout_.outer * depth * inner, values[0]);
    for (int64_t o = 0; o < layout_.outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) {
        const Index raw = indices[o * inner + j];
        if constexpr (std::is_floating_point_v<Index>) {
          // NaN and numbers beyond int64 are no position.
          if (!(raw > -9.2e18 && raw < 9.2e18)) continue;
        }
        int64_t index = static_cast<int64_t>(raw);
        if (index < -depth || index >= depth) continue;
        if (index < 0) index += depth;
        out[(o * depth + index) * inner + j] = values[1];
      }
    }
    return absl::OkStatus();
  }

 private:
  OneHotLayout layout_;
};

// The unsigned integer type of `bytes` bytes, to copy elements as bits.
template <typename F>
KernelOrStatus BySize(const KernelSpec& spec, size_t bytes, F make) {
  switch (bytes) {
    case 1:
      return make(uint8_t{});
    case 4:
      return make(uint32_t{});
    case 8:
      return make(uint64_t{});
    default:
      return NodeUnimplemented(spec, absl::StrCat("elements of ", bytes, " bytes"));
  }
}

}  // namespace

KernelOrStatus MakeGatherElementsKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(GatherElementsLayout layout, ParseGatherElements(spec));
  const bool int32_indices = spec.inputs[1]->dtype == DType::kInt32;
  return BySize(spec, DTypeSize(spec.inputs[0]->dtype), [&](auto element) -> KernelOrStatus {
    using Element = decltype(element);
    if (int32_indices) {
      return std::make_unique<GatherElementsKernel<Element, int32_t>>(NodeLabel(spec), layout);
    }
    return std::make_unique<GatherElementsKernel<Element, int64_t>>(NodeLabel(spec), layout);
  });
}

KernelOrStatus MakeScatterElementsKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(ScatterElementsLayout layout, ParseScatterElements(spec));
  const bool int32_indices = spec.inputs[1]->dtype == DType::kInt32;
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    if (int32_indices) {
      return std::make_unique<ScatterElementsKernel<T, int32_t>>(NodeLabel(spec), layout);
    }
    return std::make_unique<ScatterElementsKernel<T, int64_t>>(NodeLabel(spec), layout);
  });
}

KernelOrStatus MakeGatherNdKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(GatherNdLayout layout, ParseGatherNd(spec));
  return std::make_unique<GatherNdKernel>(NodeLabel(spec), std::move(layout),
                                          DTypeSize(spec.inputs[0]->dtype));
}

KernelOrStatus MakeOneHotKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(OneHotLayout layout, ParseOneHot(spec));
  return VisitDType(spec.inputs[0]->dtype, [&](auto index_traits) -> KernelOrStatus {
    using Index = typename decltype(index_traits)::Type;
    return BySize(spec, DTypeSize(spec.outputs[0].dtype), [&](auto value) -> KernelOrStatus {
      return std::make_unique<OneHotKernel<Index, decltype(value)>>(layout);
    });
  });
}

}  // namespace replicad
