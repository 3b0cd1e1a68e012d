#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

// Every reduction of reduce_attributes.h, for what oneDNN's reduction does
// not take or does not get exactly as ONNX says: integer data, inputs with no
// elements (each kind's identity), NaN (the max and min keep it), and the
// kinds with no oneDNN algorithm (the logarithms). Walks the input in
// row-major order, combining each element into its output, whose strides are
// 0 along reduced dims; ReduceLogSumExp walks twice (the max first, so that
// exp does not overflow).
template <typename T>
class ReduceLoopKernel : public Kernel {
 public:
  ReduceLoopKernel(ReduceKind kind, const Shape& input, const Shape& reduced)
      : kind_(kind), input_(input), out_strides_(input.size(), 0), index_(input.size(), 0) {
    int64_t stride = 1;
    for (int d = static_cast<int>(input.size()) - 1; d >= 0; --d) {
      out_strides_[d] = reduced[d] == 1 ? 0 : stride;
      stride *= reduced[d];
    }
    out_size_ = stride;
    for (size_t d = 0; d < input.size(); ++d) {
      if (reduced[d] != input[d]) count_ *= input[d];
    }
    if (kind == ReduceKind::kLogSumExp) max_.resize(out_size_);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* in = static_cast<const T*>(inputs[0]);
    T* out = static_cast<T*>(outputs[0]);
    switch (kind_) {
      case ReduceKind::kMax:
        Reduce(in, out,
               std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::lowest(),
               [](T acc, T x) { return x > acc || x != x ? x : acc; });
        break;
      case ReduceKind::kMin:
        Reduce(in, out,
               std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::max(),
               [](T acc, T x) { return x < acc || x != x ? x : acc; });
        break;
      case ReduceKind::kProd:
        Reduce(in, out, T{1}, [](T acc, T x) { return static_cast<T>(acc * x); });
        break;
      case ReduceKind::kL1:
        Reduce(in, out, T{0}, [](T acc, T x) { return static_cast<T>(acc + (x < 0 ? -x : x)); });
        break;
      case ReduceKind::kL2:
      case ReduceKind::kSumSquare:
        Reduce(in, out, T{0}, [](T acc, T x) { return static_cast<T>(acc + x * x); });
        break;
      case ReduceKind::kLogSumExp:
        return RunLogSumExp(in, out);
      default:  // kSum, kMean, kLogSum
        Reduce(in, out, T{0}, [](T acc, T x) { return static_cast<T>(acc + x); });
        break;
    }
    Finish(out);
    return absl::OkStatus();
  }

 private:
  // out[i] = combine(...combine(init, x_0)..., x_k) over the inputs of output i.
  template <typename Combine>
  void Reduce(const T* in, T* out, T init, Combine combine) {
    std::fill(out, out + out_size_, init);
    Walk([&](int64_t o, int64_t i) { out[o] = combine(out[o], in[i]); });
  }

  // Calls visit(output index, input index) for every input element, in order.
  template <typename Visit>
  void Walk(Visit visit) {
    const int rank = static_cast<int>(input_.size());
    const int64_t total = NumElements(input_);
    if (total == 0) return;
    if (rank == 0) return visit(0, 0);
    const int64_t inner = input_.back();
    const int64_t out_inner = out_strides_.back();
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t row = 0; row < total / inner; ++row) {
      int64_t offset = 0;
      for (int d = 0; d + 1 < rank; ++d) offset += index_[d] * out_strides_[d];
      for (int64_t j = 0; j < inner; ++j) visit(offset + j * out_inner, row * inner + j);
      for (int d = rank - 2; d >= 0; --d) {
        if (++index_[d] < input_[d]) break;
        index_[d] = 0;
      }
    }
  }

  absl::Status RunLogSumExp(const T* in, T* out) {
    if constexpr (std::is_floating_point_v<T>) {
      const T inf = std::numeric_limits<T>::infinity();
      T* max = max_.data();
      std::fill(max, max + out_size_, -inf);
      Walk([&](int64_t o, int64_t i) {
        max[o] = in[i] > max[o] || in[i] != in[i] ? in[i] : max[o];
      });
      // An output whose inputs are all -inf (or none) is -inf; shifting by
      // an infinite max would give NaN.
      for (int64_t o = 0; o < out_size_; ++o) {
        if (std::isinf(max[o])) max[o] = max[o] > 0 ? max[o] : 0;
      }
      std::fill(out, out + out_size_, T{0});
      Walk([&](int64_t o, int64_t i) { out[o] += std::exp(in[i] - max[o]); });
      // An output with +inf among its inputs is +inf (inf - inf would be NaN).
      for (int64_t o = 0; o < out_size_; ++o) {
        out[o] = std::isinf(max[o]) ? max[o] : std::log(out[o]) + max[o];
      }
    }
    return absl::OkStatus();
  }

  void Finish(T* out) const {
    if (kind_ == ReduceKind::kMean) {
      // An integer 0 / 0 would trap; an empty integer mean stays 0.
      if (count_ == 0 && !std::is_floating_point_v<T>) return;
      for (int64_t i = 0; i < out_size_; ++i) out[i] = out[i] / static_cast<T>(count_);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (kind_ == ReduceKind::kL2) {
        for (int64_t i = 0; i < out_size_; ++i) out[i] = std::sqrt(out[i]);
      } else if (kind_ == ReduceKind::kLogSum) {
        for (int64_t i = 0; i < out_size_; ++i) out[i] = std::log(out[i]);
      }
    }
  }

  ReduceKind kind_;
  Shape input_;
  std::vector<int64_t> out_strides_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
  std::vector<T> max_;          // ReduceLogSumExp's per-output max.
  int64_t out_size_ = 0;
  int64_t count_ = 1;  // Input elements per output element.
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
  // The rest only when the reduction is trivially the identity for every
  // kind (each element is its own max, sum of one, ...).
  const bool identity_on_one = layout.kind == ReduceKind::kSum ||
                               layout.kind == ReduceKind::kMean ||
                               layout.kind == ReduceKind::kMax || layout.kind == ReduceKind::kMin ||
                               layout.kind == ReduceKind::kProd;
  if (layout.noop || (layout.reduced == input && identity_on_one))
    return MakeCopyKernel(spec, context);
  // oneDNN's sum and mean of floats are vectorized and threaded; every other
  // case is the loop.
  if (spec.outputs[0].dtype == DType::kFloat32 && NumElements(input) > 0 &&
      layout.reduced != input &&
      (layout.kind == ReduceKind::kSum || layout.kind == ReduceKind::kMean)) {
    return MakeDnnlReductionKernel(
        spec, context, mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum,
        RowMajorDesc(input, dnnl::memory::data_type::f32), layout.reduced);
  }
  return MakeReduceLoopKernel(spec, layout.kind, layout.reduced);
}

KernelOrStatus MakeReduceLoopKernel(const KernelSpec& spec, ReduceKind kind, const Shape& reduced) {
  return VisitDType(spec.outputs[0].dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    if constexpr (std::is_same_v<T, bool>) {
      return NodeUnimplemented(spec, "reductions of bool are not computed");
    } else {
      return std::make_unique<ReduceLoopKernel<T>>(kind, spec.inputs[0]->shape, reduced);
    }
  });
}

KernelOrStatus MakeGlobalMaxPoolKernel(const KernelSpec& spec, CpuKernelContext&) {
  return MakeReduceLoopKernel(spec, ReduceKind::kMax, spec.outputs[0].shape);
}

KernelOrStatus MakeDnnlReductionKernel(const KernelSpec& spec, CpuKernelContext& context,
                                       dnnl::algorithm algorithm, const dnnl::memory::desc& src,
                                       const Shape& reduced) {
  const dnnl::memory::desc dst = RowMajorDesc(reduced, dnnl::memory::data_type::f32);
  const dnnl::reduction::desc desc(algorithm, src, dst, 0.0f, 0.0f);
  const dnnl::reduction::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  // oneDNN 2.6 reduces some axes (a middle one: BERT's sum over the
  // sequence of [8, 128, 256], 2.3 ms of a 49 ms pass) only by its reference
  // implementation; the loop walks rows in order instead.
  const absl::StatusOr<ReduceKind> kind = ReduceKindOf(spec);
  if (IsReference(pd) && kind.ok() && (*kind == ReduceKind::kSum || *kind == ReduceKind::kMean) &&
      src == RowMajorDesc(spec.inputs[0]->shape, dnnl::memory::data_type::f32)) {
    return MakeReduceLoopKernel(spec, *kind, reduced);
  }
  BoundPrimitive primitive(context, pd, dnnl::reduction(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

}  // namespace replicad
