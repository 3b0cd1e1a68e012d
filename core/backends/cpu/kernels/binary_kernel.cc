#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backends/cpu/kernels/broadcast_loop.h"
#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Integer division truncates, as C++'s; a zero divisor gives 0 and
// INT64_MIN / -1 wraps to INT64_MIN, where the division would trap and take
// the server down.
template <typename T>
struct Divides {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
    }
    return a / b;
  }
};

// Integer +, - and * wrap on overflow, as numpy and ONNX Runtime do on
// two's complement machines: computed in the unsigned type, where wrapping
// is defined. Floats pass through.
template <template <typename> class Op, typename T>
struct Wrapping {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(Op<U>{}(static_cast<U>(a), static_cast<U>(b))));
    } else {
      return Op<T>{}(a, b);
    }
  }
};

// Mod. Integers: the remainder takes the divisor's sign (Python's %), or
// the dividend's with fmod (C's %); a zero divisor gives 0, and so does
// INT_MIN % -1, where C's % would trap and take the server down. Floats:
// C's fmod.
template <typename T, bool kFmod>
struct Remainder {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;
      }
      const T r = static_cast<T>(a % b);
      if constexpr (!kFmod && std::is_signed_v<T>) {
        if (r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
      }
      return r;
    } else {
      return std::fmod(a, b);
    }
  }
};

// PRelu: x where x >= 0, slope * x below (NaN stays NaN).
template <typename T>
struct LeakyBySlope {
  T operator()(T x, T slope) const { return x < 0 ? static_cast<T>(slope * x) : x; }
};

template <typename T>
KernelOrStatus MakeLoopKernel(const std::string& op, const Shape& a, const Shape& b,
                              const Shape& out, bool fmod = false) {
  if (op == "Add") return MakeBinaryLoop<Wrapping<std::plus, T>, T>(a, b, out);
  if (op == "Sub") return MakeBinaryLoop<Wrapping<std::minus, T>, T>(a, b, out);
  if (op == "Mul") return MakeBinaryLoop<Wrapping<std::multiplies, T>, T>(a, b, out);
  if (op == "PRelu") return MakeBinaryLoop<LeakyBySlope<T>, T>(a, b, out);
  if (op == "Mod" && fmod) return MakeBinaryLoop<Remainder<T, true>, T>(a, b, out);
  if (op == "Mod") return MakeBinaryLoop<Remainder<T, false>, T>(a, b, out);
  return MakeBinaryLoop<Divides<T>, T>(a, b, out);
}

// An int64 result of Pow that has none (NaN) or is out of range.
int64_t TruncateToInt64(double value) {
  if (std::isnan(value)) return 0;
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (value >= kLimit) return std::numeric_limits<int64_t>::max();
  if (value < -kLimit) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

// X ^ Y for the dtype pairs ONNX allows and replicad holds. A float32 base
// with an int64 exponent goes through double, as numpy's float64 result
// does. An int64 base with an int64 exponent is exact (wrapping on overflow
// like the other int64 ops); a negative exponent truncates 1 / X^-Y toward
// zero, so it is 0 unless X is 1 or -1 (0 ^ -1 is 0, as integer division by
// zero is in Div). An int64 base with a float exponent truncates the double
// result, NaN giving 0.
struct Power {
  float operator()(float x, float y) const { return std::pow(x, y); }
  float operator()(float x, int64_t y) const {
    return static_cast<float>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
  int64_t operator()(int64_t x, float y) const {
    return TruncateToInt64(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
  int64_t operator()(int64_t x, int64_t y) const {
    if (y < 0) {
      if (x == 1) return 1;
      if (x == -1) return y % 2 == 0 ? 1 : -1;
      return 0;
    }
    uint64_t result = 1;
    uint64_t base = static_cast<uint64_t>(x);
    for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1) {
      if (e & 1) result *= base;
      base *= base;
    }
    return static_cast<int64_t>(result);
  }
};

template <typename Out>
KernelOrStatus MakePowLoopKernel(DType exponent, const Shape& x, const Shape& y, const Shape& out) {
  if (exponent == DType::kInt64) {
    return MakeBinaryLoop<Power, Out, Out, int64_t>(x, y, out);
  }
  return MakeBinaryLoop<Power, Out, Out, float>(x, y, out);
}

// Max and Min of two elements; a NaN in either gives NaN, as numpy's
// maximum and minimum (and ONNX Runtime) give it.
template <bool kMax>
struct Extreme {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    }
    return kMax ? (a < b ? b : a) : (b < a ? b : a);
  }
};

struct Pass {
  template <typename T>
  T operator()(T a) const {
    return a;
  }
};

// Sum, Mean, Max and Min: input 0 broadcast into the output, then each
// further input folded into it element by element (the output is read and
// written at the same index, so the fold needs no other buffer); Mean then
// divides by the count.
class VariadicKernel : public Kernel {
 public:
  VariadicKernel(std::vector<std::unique_ptr<Kernel>> folds, float mean_scale, int64_t size)
      : folds_(std::move(folds)), mean_scale_(mean_scale), size_(size) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const void* first[] = {inputs[0]};
    REPLICAD_RETURN_IF_ERROR(folds_[0]->Run(run, first, outputs));
    for (size_t i = 1; i < folds_.size(); ++i) {
      const void* pair[] = {outputs[0], inputs[i]};
      REPLICAD_RETURN_IF_ERROR(folds_[i]->Run(run, pair, outputs));
    }
    if (mean_scale_ != 1.0f) {
      float* y = static_cast<float*>(outputs[0]);
      for (int64_t i = 0; i < size_; ++i) y[i] *= mean_scale_;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Kernel>> folds_;
  float mean_scale_;
  int64_t size_;
};

template <typename T>
std::unique_ptr<Kernel> MakeFold(const std::string& op, const Shape& in, const Shape& out) {
  if (op == "Max") return MakeBinaryLoop<Extreme<true>, T>(out, in, out);
  if (op == "Min") return MakeBinaryLoop<Extreme<false>, T>(out, in, out);
  return MakeBinaryLoop<Wrapping<std::plus, T>, T>(out, in, out);
}

}  // namespace

KernelOrStatus MakeBinaryKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const std::string& op = spec.op_type;
  const Shape& out = spec.outputs[0].shape;
  const Shape& a = spec.inputs[0]->shape;
  const Shape& b = spec.inputs[1]->shape;
  if (op == "Mod") {
    REPLICAD_ASSIGN_OR_RETURN(int64_t fmod, IntAttribute(spec, "fmod", 0));
    return VisitDType(spec.outputs[0].dtype, [&](auto traits) {
      return MakeLoopKernel<typename decltype(traits)::Type>(op, a, b, out, fmod != 0);
    });
  }
  if (spec.outputs[0].dtype != DType::kFloat32 || op == "PRelu") {
    return VisitDType(spec.outputs[0].dtype, [&](auto traits) {
      return MakeLoopKernel<typename decltype(traits)::Type>(op, a, b, out);
    });
  }

  const Shape a_padded = PadToRank(a, out.size());
  const Shape b_padded = PadToRank(b, out.size());
  // oneDNN needs src0 at the output's shape; Add and Mul commute, so either
  // operand can be src0. Zero-sized outputs take the loop, which skips them.
  const bool commutes = op == "Add" || op == "Mul";
  int src0 = -1;
  if (a_padded == out) {
    src0 = 0;
  } else if (commutes && b_padded == out) {
    src0 = 1;
  }
  if (src0 < 0 || NumElements(out) == 0) {
    if (HasNativeInputs(spec)) return WithRowMajorInputs(spec, context, MakeBinaryKernel);
    return MakeLoopKernel<float>(op, a, b, out);
  }
  const int src1 = 1 - src0;
  const dnnl::memory::data_type f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc src0_plain = RowMajorDesc(src0 == 0 ? a_padded : b_padded, f32);
  const dnnl::memory::desc src1_plain = RowMajorDesc(src0 == 0 ? b_padded : a_padded, f32);
  const dnnl::memory::desc dst_plain = RowMajorDesc(out, f32);
  // Operands in their producers' layouts are read as they lie (e.g. the
  // excitation of a squeeze-excitation block scaling a convolution's output),
  // and the output keeps src0's layout where its readers take it.
  const dnnl::memory::desc src0_desc = GivenLayout(spec, src0, src0_plain);
  dnnl::memory::desc src1_desc = GivenLayout(spec, src1, src1_plain);
  // oneDNN's optimised kernels want both sources in one layout: a row-major
  // [N, C, 1, 1] is often byte for byte that layout.
  if (const std::optional<dnnl::memory::format_tag> tag = KnownLayout(src0_desc);
      tag && src1_desc == src1_plain && src1_plain.dims().size() == 4) {
    const dnnl::memory::desc alike(src1_plain.dims(), f32, *tag);
    if (SameBytes(alike, src1_plain)) src1_desc = alike;
  }
  if (src0_desc.dims() != src0_plain.dims() || src1_desc.dims() != src1_plain.dims()) {
    return WithRowMajorInputs(spec, context, MakeBinaryKernel);  // A rank raised by broadcasting.
  }
  const dnnl::memory::desc dst_desc =
      spec.native_output && src0_desc != src0_plain ? src0_desc : dst_plain;
  dnnl::algorithm algorithm = dnnl::algorithm::binary_div;
  if (op == "Add") {
    algorithm = dnnl::algorithm::binary_add;
  } else if (op == "Sub") {
    algorithm = dnnl::algorithm::binary_sub;
  } else if (op == "Mul") {
    algorithm = dnnl::algorithm::binary_mul;
  }
  return InPlaceOrRowMajor(spec, context, MakeBinaryKernel, [&]() -> KernelOrStatus {
    const dnnl::binary::desc desc(algorithm, src0_desc, src1_desc, dst_desc);
    const dnnl::binary::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
    if (HasNativeInputs(spec)) RejectReference(pd);
    // oneDNN 2.6 has only its reference binary for some broadcasts (a
    // dim of 1 between full ones: swin_t's attention mask, [1, 64, 1, 49,
    // 49] added to [1, 64, 3, 49, 49], took 31 ms of a 150 ms pass); our
    // loop collapses such shapes into long rows.
    if (IsReference(pd)) return MakeLoopKernel<float>(op, a, b, out);
    BoundPrimitive primitive(context, pd, dnnl::binary(pd));
    primitive.BindInput(DNNL_ARG_SRC_0, src0_desc, src0);
    primitive.BindInput(DNNL_ARG_SRC_1, src1_desc, src1);
    primitive.BindOutput(DNNL_ARG_DST, dst_desc, 0);
    auto kernel = std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
    if (dst_desc != dst_plain) kernel->SetNativeOutput(dst_desc);
    return kernel;
  });
}

// A constant scalar exponent on a float32 base, the common x^2 and x^0.5
// of exported norms, is oneDNN's eltwise pow (alpha * x^beta with alpha 1),
// unless the scalar raises the output's rank; anything else is the loop.
KernelOrStatus MakePowKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const TensorType& x = *spec.inputs[0];
  const TensorType& y = *spec.inputs[1];
  const Shape& out = spec.outputs[0].shape;
  if (x.dtype == DType::kInt64) return MakePowLoopKernel<int64_t>(y.dtype, x.shape, y.shape, out);
  const Tensor* exponent = ConstantInput(spec, 1);
  if (exponent == nullptr || exponent->num_elements() != 1 || out != x.shape) {
    return MakePowLoopKernel<float>(y.dtype, x.shape, y.shape, out);
  }
  const float beta = y.dtype == DType::kInt64 ? static_cast<float>(exponent->data<int64_t>()[0])
                                              : exponent->data<float>()[0];
  const dnnl::memory::desc data({NumElements(out)}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::x);
  const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::eltwise_pow, data, 1.0f, beta);
  const dnnl::eltwise_forward::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::eltwise_forward(pd));
  primitive.BindInput(DNNL_ARG_SRC, data, 0);
  primitive.BindOutput(DNNL_ARG_DST, data, 0);
  return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(primitive));
}

KernelOrStatus MakeVariadicKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const Shape& out = spec.outputs[0].shape;
  return VisitDType(spec.outputs[0].dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    std::vector<std::unique_ptr<Kernel>> folds;
    folds.push_back(std::make_unique<BroadcastLoopKernel<Pass, T, T>>(
        std::array<Shape, 1>{spec.inputs[0]->shape}, out));
    for (size_t i = 1; i < spec.inputs.size(); ++i) {
      folds.push_back(MakeFold<T>(spec.op_type, spec.inputs[i]->shape, out));
    }
    const float scale =
        spec.op_type == "Mean" ? 1.0f / static_cast<float>(spec.inputs.size()) : 1.0f;
    return std::make_unique<VariadicKernel>(std::move(folds), scale, NumElements(out));
  });
}

}  // namespace replicad
