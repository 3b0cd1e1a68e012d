#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/data_movement_attributes.h"

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
    } else {
      Fill<uint32_t>(outputs[0]);
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

class FloatToInt64Kernel : public Kernel {
 public:
  explicit FloatToInt64Kernel(int64_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* in = static_cast<const float*>(inputs[0]);
    int64_t* out = static_cast<int64_t*>(outputs[0]);
    // ONNX truncates towards zero and leaves NaN and out-of-range values
    // undefined; converting them is undefined behaviour in C++, so they
    // become INT64_MIN, which is what x86's cvttss2si (and so numpy) gives.
    constexpr float kLimit = 9223372036854775808.0f;  // 2^63
    for (int64_t i = 0; i < count_; ++i) {
      const float x = in[i];
      out[i] =
          x > -kLimit && x < kLimit ? static_cast<int64_t>(x) : std::numeric_limits<int64_t>::min();
    }
    return absl::OkStatus();
  }

 private:
  int64_t count_;
};

class Int64ToFloatKernel : public Kernel {
 public:
  explicit Int64ToFloatKernel(int64_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int64_t* in = static_cast<const int64_t*>(inputs[0]);
    float* out = static_cast<float*>(outputs[0]);
    for (int64_t i = 0; i < count_; ++i) out[i] = static_cast<float>(in[i]);
    return absl::OkStatus();
  }

 private:
  int64_t count_;
};

}  // namespace

KernelOrStatus MakeShapeKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(Tensor value, ShapeValue(spec));
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
  if (from == to) return MakeCopyKernel(spec, context);
  if (from == DType::kFloat32) return std::make_unique<FloatToInt64Kernel>(count);
  return std::make_unique<Int64ToFloatKernel>(count);
}

}  // namespace replicad
