#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/reduce_attributes.h"

namespace replicad {
namespace {

// Sum or mean for what oneDNN's reduction does not take: int64 data, and
// inputs with no elements (sum 0; float mean 0 / 0 = NaN, as numpy's; int64
// mean 0). Walks the input once in row-major order, adding each element into
// its output, whose strides are 0 along reduced dims.
template <typename T>
class ReduceLoopKernel : public Kernel {
 public:
  ReduceLoopKernel(const Shape& input, const Shape& reduced, bool mean)
      : input_(input), out_strides_(input.size(), 0), index_(input.size(), 0), mean_(mean) {
    int64_t stride = 1;
    for (int d = static_cast<int>(input.size()) - 1; d >= 0; --d) {
      out_strides_[d] = reduced[d] == 1 ? 0 : stride;
      stride *= reduced[d];
    }
    out_size_ = stride;
    for (size_t d = 0; d < input.size(); ++d) {
      if (reduced[d] != input[d]) count_ *= input[d];
    }
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* in = static_cast<const T*>(inputs[0]);
    T* out = static_cast<T*>(outputs[0]);
    std::fill(out, out + out_size_, T{0});
    const int rank = static_cast<int>(input_.size());
    const int64_t total = NumElements(input_);
    if (total != 0) {
      const int64_t inner = input_.back();
      const int64_t out_inner = out_strides_.back();
      std::fill(index_.begin(), index_.end(), 0);
      for (int64_t row = 0; row < total / inner; ++row) {
        int64_t offset = 0;
        for (int d = 0; d + 1 < rank; ++d) offset += index_[d] * out_strides_[d];
        const T* in_row = in + row * inner;
        for (int64_t j = 0; j < inner; ++j) out[offset + j * out_inner] += in_row[j];
        for (int d = rank - 2; d >= 0; --d) {
          if (++index_[d] < input_[d]) break;
          index_[d] = 0;
        }
      }
    }
    if (mean_) {
      // An integer 0 / 0 would trap; an empty int64 mean stays 0.
      if (count_ == 0 && !std::is_floating_point_v<T>) return absl::OkStatus();
      for (int64_t i = 0; i < out_size_; ++i) out[i] = out[i] / static_cast<T>(count_);
    }
    return absl::OkStatus();
  }

 private:
  Shape input_;
  std::vector<int64_t> out_strides_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
  int64_t out_size_ = 0;
  int64_t count_ = 1;  // Input elements per output element.
  bool mean_;
};

// Whether `reduced` keeps the batch and channel dims of a rank-3+ `input`
// and reduces every spatial one.
bool IsSpatialReduction(const Shape& input, const Shape& reduced) {
  if (input.size() < 3 || reduced.size() != input.size() || reduced[0] != input[0] ||
      reduced[1] != input[1]) {
    return false;
  }
  return std::all_of(reduced.begin() + 2, reduced.end(), [](int64_t d) { return d == 1; });
}

}  // namespace

KernelOrStatus MakeReduceKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(ReduceLayout layout, ParseReduce(spec));
  const Shape& input = spec.inputs[0]->shape;
  const bool mean = spec.op_type == "ReduceMean";
  // A float mean over exactly the spatial dims of an image batch is a global
  // average pooling, which reads the convolutions' layouts in place
  // (mnasnet and shufflenet end with x.mean([2, 3])).
  if (mean && spec.outputs[0].dtype == DType::kFloat32 && NumElements(input) > 0 &&
      IsSpatialReduction(input, layout.reduced)) {
    return MakeGlobalAveragePoolKernel(spec, context);
  }
  if (HasNativeInputs(spec)) return WithRowMajorInputs(spec, context, MakeReduceKernel);
  // oneDNN rejects a reduction that reduces nothing (no axes with
  // noop_with_empty_axes, or only dims of 1); the result is the input.
  if (layout.reduced == input) return MakeCopyKernel(spec, context);
  if (spec.outputs[0].dtype == DType::kInt64) {
    return std::make_unique<ReduceLoopKernel<int64_t>>(input, layout.reduced, mean);
  }
  if (NumElements(input) == 0) {
    return std::make_unique<ReduceLoopKernel<float>>(input, layout.reduced, mean);
  }
  return MakeDnnlReductionKernel(
      spec, context, mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum,
      RowMajorDesc(input, dnnl::memory::data_type::f32), layout.reduced);
}

KernelOrStatus MakeDnnlReductionKernel(const KernelSpec& spec, CpuKernelContext& context,
                                       dnnl::algorithm algorithm, const dnnl::memory::desc& src,
                                       const Shape& reduced) {
  const dnnl::memory::desc dst = RowMajorDesc(reduced, dnnl::memory::data_type::f32);
  const dnnl::reduction::desc desc(algorithm, src, dst, 0.0f, 0.0f);
  const dnnl::reduction::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::reduction(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
