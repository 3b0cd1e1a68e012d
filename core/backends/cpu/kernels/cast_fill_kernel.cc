#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/data_movement_attributes.h"
#include "core/ops/sequence_attributes.h"
#include "core/tensor/half_float.h"

namespace replicad {
namespace {

// Writes `value` (held since the plan was made) `repeats` times: Shape's
// dims once, ConstantOfShape's single element over the whole output.
class RepeatValueKernel : public Kernel {
 public:
  RepeatValueKernel(Tensor value, int64_t repeats) : value_(std::move(value)), repeats_(repeats) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    if (value_.num_elements() != 1) {
      const size_t bytes = value_.byte_size();
      char* out = static_cast<char*>(outputs[0]);
      for (int64_t r = 0; r < repeats_; ++r) std::memcpy(out + r * bytes, value_.raw_data(), bytes);
    } else if (value_.byte_size() == 8) {
      Fill<uint64_t>(outputs[0]);
    } else if (value_.byte_size() == 4) {
      Fill<uint32_t>(outputs[0]);
    } else if (value_.byte_size() == 2) {
      Fill<uint16_t>(outputs[0]);
    } else {
      Fill<uint8_t>(outputs[0]);
    }
    return absl::OkStatus();
  }

 private:
  // Copies the one element's bits to every output element.
  template <typename T>
  void Fill(void* out) const {
    T bits;
    std::memcpy(&bits, value_.raw_data(), sizeof(T));
    std::fill(static_cast<T*>(out), static_cast<T*>(out) + repeats_, bits);
  }

  Tensor value_;
  int64_t repeats_;
};

// One element of Cast. ONNX truncates floats towards zero and leaves NaN
// and out-of-range values undefined; converting them is undefined behaviour
// in C++, so they become the integer's minimum for int32 and int64, which is
// what x86's cvttss2si (and so numpy) gives, and int8 and uint8 take the low
// byte of that int32 (numpy's float-to-int8 on x86). Integers narrow by
// wrapping; anything is true when non-zero (NaN included); bool reads any
// non-zero byte as true and writes 1.
template <typename From, typename To, bool kToBool, bool kFromBool>
To CastElement(From x) {
  if constexpr (kToBool) {
    return static_cast<To>(x != From(0));
  } else if constexpr (kFromBool) {
    return static_cast<To>(x != From(0) ? 1 : 0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if constexpr (sizeof(To) == 8) {
      constexpr float kLimit = 9223372036854775808.0f;  // 2^63
      return x > -kLimit && x < kLimit ? static_cast<To>(x) : std::numeric_limits<To>::min();
    } else {
      constexpr float kLimit = 2147483648.0f;  // 2^31
      const int32_t wide =
          x > -kLimit && x < kLimit ? static_cast<int32_t>(x) : std::numeric_limits<int32_t>::min();
      return static_cast<To>(wide);
    }
  } else {
    return static_cast<To>(x);
  }
}

template <typename From, typename To, bool kToBool, bool kFromBool>
class CastKernel : public Kernel {
 public:
  explicit CastKernel(int64_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const From* in = static_cast<const From*>(inputs[0]);
    To* out = static_cast<To*>(outputs[0]);
    for (int64_t i = 0; i < count_; ++i) out[i] = CastElement<From, To, kToBool, kFromBool>(in[i]);
    return absl::OkStatus();
  }

 private:
  int64_t count_;
};

// A Cast from or to float16 or bfloat16 (held as uint16_t bit patterns): the
// value goes through float32, exact out of them and rounded to nearest even
// into them (half_float.h); every other type converts to and from float32 as
// CastElement does.
template <typename From, typename To, bool kToBool, bool kFromBool>
class HalfCastKernel : public Kernel {
 public:
  HalfCastKernel(int64_t count, DType from, DType to) : count_(count), from_(from), to_(to) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const From* in = static_cast<const From*>(inputs[0]);
    To* out = static_cast<To*>(outputs[0]);
    for (int64_t i = 0; i < count_; ++i) out[i] = Write(Read(in[i]));
    return absl::OkStatus();
  }

 private:
  float Read(From x) const {
    if constexpr (std::is_same_v<From, uint16_t>) {
      if (IsHalfFloatDType(from_)) return HalfFloatBitsToFloat(from_, x);
    }
    return CastElement<From, float, false, kFromBool>(x);
  }

  To Write(float x) const {
    if constexpr (std::is_same_v<To, uint16_t>) {
      if (IsHalfFloatDType(to_)) return FloatToHalfFloatBits(to_, x);
    }
    return CastElement<float, To, kToBool, false>(x);
  }

  int64_t count_;
  DType from_;
  DType to_;
};

}  // namespace

KernelOrStatus MakeShapeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(spec));
  return std::make_unique<RepeatValueKernel>(std::move(value), 1);
}

KernelOrStatus MakeRangeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, RangeValue(spec));
  return std::make_unique<RepeatValueKernel>(std::move(value), 1);
}

KernelOrStatus MakeConstantOfShapeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor fill, ConstantOfShapeFill(spec));
  return std::make_unique<RepeatValueKernel>(std::move(fill), NumElements(spec.outputs[0].shape));
}

KernelOrStatus MakeCastKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(DType to, ParseCastTarget(spec));
  const DType from = spec.inputs[0]->dtype;
  const int64_t count = NumElements(spec.outputs[0].shape);
  if (from == to && to != DType::kBool) return MakeCopyKernel(spec, context);
  return VisitDType(from, [&](auto from_traits) -> KernelOrStatus {
    return VisitDType(to, [&](auto to_traits) -> KernelOrStatus {
      using From = typename decltype(from_traits)::Type;
      using To = typename decltype(to_traits)::Type;
      if (IsHalfFloatDType(from) || IsHalfFloatDType(to)) {
        if (to == DType::kBool) {
          return std::make_unique<HalfCastKernel<From, To, true, false>>(count, from, to);
        }
        if (from == DType::kBool) {
          return std::make_unique<HalfCastKernel<From, To, false, true>>(count, from, to);
        }
        return std::make_unique<HalfCastKernel<From, To, false, false>>(count, from, to);
      }
      if (to == DType::kBool) return std::make_unique<CastKernel<From, To, true, false>>(count);
      if (from == DType::kBool) return std::make_unique<CastKernel<From, To, false, true>>(count);
      return std::make_unique<CastKernel<From, To, false, false>>(count);
    });
  });
}

}  // namespace replicad
