// Trilu, Split and ScatterND on the CPU (sequence_attributes.h); Range writes
// a value known when the plan is made (cast_fill_kernel.cc). Plain loops:
// they build masks and cut tensors whose size is the model's sequence, not
// its batch.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/indexing_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/sequence_attributes.h"

namespace replicad {
namespace {

// Copies each matrix, zeroing what lies outside the kept triangle.
class TriluKernel : public Kernel {
 public:
  TriluKernel(TriluLayout layout, size_t element_bytes)
      : layout_(layout), element_bytes_(element_bytes) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const char* in = static_cast<const char*>(inputs[0]);
    char* out = static_cast<char*>(outputs[0]);
    const int64_t rows = layout_.rows, cols = layout_.cols;
    const size_t row_bytes = cols * element_bytes_;
    for (int64_t m = 0; m < layout_.matrices; ++m) {
      for (int64_t i = 0; i < rows; ++i) {
        const size_t offset = (m * rows + i) * row_bytes;
        // Upper keeps j >= i + k; lower keeps j <= i + k.
        const int64_t edge = std::clamp<int64_t>(i + layout_.k + (layout_.upper ? 0 : 1), 0, cols);
        const int64_t kept_begin = layout_.upper ? edge : 0;
        const int64_t kept_end = layout_.upper ? cols : edge;
        std::memset(out + offset, 0, row_bytes);
        std::memcpy(out + offset + kept_begin * element_bytes_,
                    in + offset + kept_begin * element_bytes_,
                    (kept_end - kept_begin) * element_bytes_);
      }
    }
    return absl::OkStatus();
  }

 private:
  TriluLayout layout_;
  size_t element_bytes_;
};

class SplitKernel : public Kernel {
 public:
  SplitKernel(SplitLayout layout, size_t element_bytes)
      : layout_(std::move(layout)), element_bytes_(element_bytes) {
    for (int64_t size : layout_.sizes) axis_dim_ += size;
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const char* in = static_cast<const char*>(inputs[0]);
    const size_t inner_bytes = layout_.inner * element_bytes_;
    for (int64_t o = 0; o < layout_.outer; ++o) {
      int64_t begin = 0;
      for (size_t p = 0; p < layout_.sizes.size(); ++p) {
        const int64_t size = layout_.sizes[p];
        std::memcpy(static_cast<char*>(outputs[p]) + o * size * inner_bytes,
                    in + (o * axis_dim_ + begin) * inner_bytes, size * inner_bytes);
        begin += size;
      }
    }
    return absl::OkStatus();
  }

 private:
  SplitLayout layout_;
  size_t element_bytes_;
  int64_t axis_dim_ = 0;
};

template <typename T>
class ScatterNdKernel : public Kernel {
 public:
  ScatterNdKernel(ScatterNdLayout layout, int64_t data_elements, std::string node)
      : layout_(std::move(layout)), data_elements_(data_elements), node_(std::move(node)) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* data = static_cast<const T*>(inputs[0]);
    const int64_t* indices = static_cast<const int64_t*>(inputs[1]);
    const T* updates = static_cast<const T*>(inputs[2]);
    T* out = static_cast<T*>(outputs[0]);
    // Every index is checked before anything is written: a bad request
    // leaves no half-scattered output behind.
    REPLICAD_RETURN_IF_ERROR(CheckIndexTuples(node_, indices, layout_.count, layout_.data_dims));
    if (out != data) std::memcpy(out, data, data_elements_ * sizeof(T));
    for (int64_t n = 0; n < layout_.count; ++n) {
      int64_t offset = 0;
      for (int64_t d = 0; d < layout_.tuple; ++d) {
        const int64_t index = indices[n * layout_.tuple + d];
        offset += (index < 0 ? index + layout_.data_dims[d] : index) * layout_.strides[d];
      }
      T* target = out + offset;
      const T* source = updates + n * layout_.slice;
      for (int64_t i = 0; i < layout_.slice; ++i) target[i] = Combine(target[i], source[i]);
    }
    return absl::OkStatus();
  }

 private:
  T Combine(T old, T update) const { return ScatterCombine(layout_.reduction, old, update); }

  ScatterNdLayout layout_;
  int64_t data_elements_;
  std::string node_;
};

}  // namespace

KernelOrStatus MakeTriluKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(TriluLayout layout, ParseTrilu(spec));
  return std::make_unique<TriluKernel>(layout, DTypeSize(spec.outputs[0].dtype));
}

KernelOrStatus MakeSplitKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(SplitLayout layout, ParseSplit(spec));
  return std::make_unique<SplitKernel>(std::move(layout), DTypeSize(spec.inputs[0]->dtype));
}

KernelOrStatus MakeScatterNdKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ScatterNdLayout layout, ParseScatterNd(spec));
  const int64_t elements = NumElements(spec.inputs[0]->shape);
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<ScatterNdKernel<T>>(std::move(layout), elements, NodeLabel(spec));
  });
}

}  // namespace replicad
