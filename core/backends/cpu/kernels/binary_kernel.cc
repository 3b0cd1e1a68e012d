#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Elementwise A op B with numpy broadcasting, for what oneDNN's binary
// primitive cannot take: int64 data, and float32 where both operands need
// broadcasting (oneDNN broadcasts only src1). Strides of broadcast dims are 0;
// the innermost dim runs as a tight loop.
template <typename T, typename Op>
class BroadcastLoopKernel : public Kernel {
 public:
  BroadcastLoopKernel(const Shape& a, const Shape& b, const Shape& out)
      : out_(out), a_strides_(Strides(a, out)), b_strides_(Strides(b, out)), index_(out.size()) {}

  absl::Status Run(const void* const* inputs, void* const* outputs) override {
    const int64_t total = NumElements(out_);
    if (total == 0) return absl::OkStatus();
    const T* a = static_cast<const T*>(inputs[0]);
    const T* b = static_cast<const T*>(inputs[1]);
    T* out = static_cast<T*>(outputs[0]);
    const int rank = static_cast<int>(out_.size());
    const int64_t inner = rank == 0 ? 1 : out_.back();
    const int64_t a_inner = rank == 0 ? 0 : a_strides_.back();
    const int64_t b_inner = rank == 0 ? 0 : b_strides_.back();
    std::fill(index_.begin(), index_.end(), 0);
    Op op;
    for (int64_t row = 0; row < total / inner; ++row) {
      int64_t a_offset = 0;
      int64_t b_offset = 0;
      for (int d = 0; d + 1 < rank; ++d) {
        a_offset += index_[d] * a_strides_[d];
        b_offset += index_[d] * b_strides_[d];
      }
      T* out_row = out + row * inner;
      for (int64_t j = 0; j < inner; ++j) {
        out_row[j] = op(a[a_offset + j * a_inner], b[b_offset + j * b_inner]);
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++index_[d] < out_[d]) break;
        index_[d] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  static std::vector<int64_t> Strides(const Shape& shape, const Shape& out) {
    const Shape padded = PadToRank(shape, out.size());
    std::vector<int64_t> strides(out.size(), 0);
    int64_t stride = 1;
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      strides[d] = padded[d] == 1 ? 0 : stride;
      stride *= padded[d];
    }
    return strides;
  }

  Shape out_;
  std::vector<int64_t> a_strides_;
  std::vector<int64_t> b_strides_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
};

template <typename T>
KernelOrStatus MakeLoopKernel(bool is_add, const Shape& a, const Shape& b, const Shape& out) {
  if (is_add) return std::make_unique<BroadcastLoopKernel<T, std::plus<T>>>(a, b, out);
  return std::make_unique<BroadcastLoopKernel<T, std::multiplies<T>>>(a, b, out);
}

}  // namespace

KernelOrStatus MakeBinaryKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const bool is_add = spec.op_type == "Add";
  const Shape& out = spec.outputs[0].shape;
  const Shape& a = spec.inputs[0]->shape;
  const Shape& b = spec.inputs[1]->shape;
  if (spec.outputs[0].dtype == DType::kInt64) return MakeLoopKernel<int64_t>(is_add, a, b, out);

  const Shape a_padded = PadToRank(a, out.size());
  const Shape b_padded = PadToRank(b, out.size());
  // oneDNN needs src0 at the output's shape; Add and Mul commute, so either
  // operand can be src0. Zero-sized outputs take the loop, which skips them.
  int src0 = -1;
  if (a_padded == out) {
    src0 = 0;
  } else if (b_padded == out) {
    src0 = 1;
  }
  if (src0 < 0 || NumElements(out) == 0) return MakeLoopKernel<float>(is_add, a, b, out);
  const int src1 = 1 - src0;
  const dnnl::memory::data_type f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc src0_desc = RowMajorDesc(src0 == 0 ? a_padded : b_padded, f32);
  const dnnl::memory::desc src1_desc = RowMajorDesc(src0 == 0 ? b_padded : a_padded, f32);
  const dnnl::memory::desc dst_desc = RowMajorDesc(out, f32);
  const dnnl::binary::desc desc(is_add ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul,
                                src0_desc, src1_desc, dst_desc);
  const dnnl::binary::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::binary(pd));
  primitive.BindInput(DNNL_ARG_SRC_0, src0_desc, src0);
  primitive.BindInput(DNNL_ARG_SRC_1, src1_desc, src1);
  primitive.BindOutput(DNNL_ARG_DST, dst_desc, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
