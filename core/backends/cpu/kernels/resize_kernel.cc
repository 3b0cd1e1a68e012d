// Resize on the CPU from the per-axis tables of resize_attributes.h. The
// innermost dim runs as a loop over its table; the others are walked once
// per output row. Linear mode blends the 2^k corners of the k dims that are
// interpolated (those whose weights are not all 0), so resizing H and W of
// an NCHW map reads 4 inputs per output, as bilinear interpolation does.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/resize_attributes.h"

namespace replicad {
namespace {

class ResizeKernel : public Kernel {
 public:
  ResizeKernel(ResizeLayout layout, size_t element_bytes)
      : layout_(std::move(layout)), element_bytes_(element_bytes) {
    const int rank = static_cast<int>(layout_.axes.size());
    strides_.assign(rank, 1);
    for (int d = rank - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * layout_.axes[d + 1].input;
    for (int d = 0; d < rank; ++d) {
      const ResizeAxis& axis = layout_.axes[d];
      bool blends = false;
      for (float w : axis.weight) blends |= w != 0.0f;
      if (layout_.linear && blends) interpolated_.push_back(d);
    }
    index_.assign(rank, 0);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int rank = static_cast<int>(layout_.axes.size());
    int64_t total = 1;
    for (const ResizeAxis& axis : layout_.axes) total *= axis.output;
    if (total == 0) return absl::OkStatus();
    if (rank == 0) {
      std::memcpy(outputs[0], inputs[0], element_bytes_);
      return absl::OkStatus();
    }
    const ResizeAxis& inner = layout_.axes.back();
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t row = 0; row < total / inner.output; ++row) {
      if (layout_.linear) {
        LinearRow(static_cast<const float*>(inputs[0]),
                  static_cast<float*>(outputs[0]) + row * inner.output);
      } else {
        NearestRow(static_cast<const char*>(inputs[0]),
                   static_cast<char*>(outputs[0]) + row * inner.output * element_bytes_);
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++index_[d] < layout_.axes[d].output) break;
        index_[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  void NearestRow(const char* in, char* out) const {
    const int rank = static_cast<int>(layout_.axes.size());
    int64_t base = 0;
    for (int d = 0; d + 1 < rank; ++d) base += layout_.axes[d].low[index_[d]] * strides_[d];
    const ResizeAxis& inner = layout_.axes.back();
    for (int64_t o = 0; o < inner.output; ++o) {
      std::memcpy(out + o * element_bytes_, in + (base + inner.low[o]) * element_bytes_,
                  element_bytes_);
    }
  }

  // The sum over corners c of prod(weights) x in[corner]: each interpolated
  // outer dim picks low or high by one bit of c; the innermost dim, when
  // interpolated, blends its two neighbours in the loop.
  void LinearRow(const float* in, float* out) const {
    const int rank = static_cast<int>(layout_.axes.size());
    const ResizeAxis& inner = layout_.axes.back();
    const bool inner_blends = !interpolated_.empty() && interpolated_.back() == rank - 1;
    const int outer_blended = static_cast<int>(interpolated_.size()) - (inner_blends ? 1 : 0);
    std::fill(out, out + inner.output, 0.0f);
    for (int corner = 0; corner < (1 << outer_blended); ++corner) {
      int64_t base = 0;
      float weight = 1.0f;
      int bit = 0;
      for (int d = 0; d + 1 < rank; ++d) {
        const ResizeAxis& axis = layout_.axes[d];
        const int64_t o = index_[d];
        const bool blended = bit < outer_blended && interpolated_[bit] == d;
        if (!blended) {
          base += axis.low[o] * strides_[d];
          continue;
        }
        const bool high = (corner >> bit) & 1;
        ++bit;
        base += (high ? axis.high[o] : axis.low[o]) * strides_[d];
        weight *= high ? axis.weight[o] : 1.0f - axis.weight[o];
      }
      const float* row = in + base;
      if (inner_blends) {
        for (int64_t o = 0; o < inner.output; ++o) {
          const float w = inner.weight[o];
          out[o] += weight * ((1.0f - w) * row[inner.low[o]] + w * row[inner.high[o]]);
        }
      } else {
        for (int64_t o = 0; o < inner.output; ++o) out[o] += weight * row[inner.low[o]];
      }
    }
  }

  ResizeLayout layout_;
  size_t element_bytes_;
  std::vector<int64_t> strides_;   // Of the input, row-major.
  std::vector<int> interpolated_;  // Dims whose linear weights are not all 0, ascending.
  std::vector<int64_t> index_;     // Output index of the row being written.
};

}  // namespace

KernelOrStatus MakeResizeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ResizeLayout layout,
                            spec.op_type == "Upsample" ? ParseUpsample(spec) : ParseResize(spec));
  return std::make_unique<ResizeKernel>(std::move(layout), DTypeSize(spec.inputs[0]->dtype));
}

}  // namespace replicad
