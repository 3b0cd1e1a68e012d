// Comparisons, boolean logic and Where on the CPU: broadcast loops over any
// dtype (oneDNN has no comparison or select primitive in 2.x). They run on
// masks and shape arithmetic, far from the time a model spends in its
// matrix products, and many fold away when the plan is made.
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/backends/cpu/kernels/broadcast_loop.h"
#include "core/backends/cpu/kernels/kernel_builders.h"

namespace replicad {
namespace {

// Bools are bytes; any non-zero byte is true, and the engine writes 1.
struct EqualTo {
  template <typename T>
  uint8_t operator()(T a, T b) const {
    return a == b;
  }
};
struct LessThan {
  template <typename T>
  uint8_t operator()(T a, T b) const {
    return a < b;
  }
};
struct GreaterThan {
  template <typename T>
  uint8_t operator()(T a, T b) const {
    return a > b;
  }
};
struct LessOrEqualTo {
  template <typename T>
  uint8_t operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOrEqualTo {
  template <typename T>
  uint8_t operator()(T a, T b) const {
    return a >= b;
  }
};
struct BoolEqualTo {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) == (b != 0); }
};
struct LogicalAnd {
  uint8_t operator()(uint8_t a, uint8_t b) const { return a != 0 && b != 0; }
};
struct LogicalOr {
  uint8_t operator()(uint8_t a, uint8_t b) const { return a != 0 || b != 0; }
};
struct LogicalXor {
  uint8_t operator()(uint8_t a, uint8_t b) const { return (a != 0) != (b != 0); }
};
struct Select {
  template <typename T>
  T operator()(uint8_t condition, T x, T y) const {
    return condition != 0 ? x : y;
  }
};

class NotKernel : public Kernel {
 public:
  explicit NotKernel(int64_t count) : count_(count) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const uint8_t* in = static_cast<const uint8_t*>(inputs[0]);
    uint8_t* out = static_cast<uint8_t*>(outputs[0]);
    for (int64_t i = 0; i < count_; ++i) out[i] = in[i] == 0;
    return absl::OkStatus();
  }

 private:
  int64_t count_;
};

template <typename Op>
KernelOrStatus MakeComparisonLoop(const KernelSpec& spec) {
  const Shape& a = spec.inputs[0]->shape;
  const Shape& b = spec.inputs[1]->shape;
  const Shape& out = spec.outputs[0].shape;
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return MakeBinaryLoop<Op, uint8_t, T, T>(a, b, out);
  });
}

}  // namespace

KernelOrStatus MakeComparisonKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const std::string& op = spec.op_type;
  if (op == "Equal" && spec.inputs[0]->dtype == DType::kBool) {
    return MakeBinaryLoop<BoolEqualTo, uint8_t>(spec.inputs[0]->shape, spec.inputs[1]->shape,
                                                spec.outputs[0].shape);
  }
  if (op == "Equal") return MakeComparisonLoop<EqualTo>(spec);
  if (op == "Less") return MakeComparisonLoop<LessThan>(spec);
  if (op == "Greater") return MakeComparisonLoop<GreaterThan>(spec);
  if (op == "LessOrEqual") return MakeComparisonLoop<LessOrEqualTo>(spec);
  return MakeComparisonLoop<GreaterOrEqualTo>(spec);
}

KernelOrStatus MakeLogicalKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const Shape& a = spec.inputs[0]->shape;
  const Shape& b = spec.inputs[1]->shape;
  const Shape& out = spec.outputs[0].shape;
  if (spec.op_type == "And") return MakeBinaryLoop<LogicalAnd, uint8_t>(a, b, out);
  if (spec.op_type == "Or") return MakeBinaryLoop<LogicalOr, uint8_t>(a, b, out);
  return MakeBinaryLoop<LogicalXor, uint8_t>(a, b, out);
}

KernelOrStatus MakeNotKernel(const KernelSpec& spec, CpuKernelContext& context) {
  return std::make_unique<NotKernel>(NumElements(spec.outputs[0].shape));
}

KernelOrStatus MakeWhereKernel(const KernelSpec& spec, CpuKernelContext& context) {
  const std::array<Shape, 3> inputs{spec.inputs[0]->shape, spec.inputs[1]->shape,
                                    spec.inputs[2]->shape};
  const Shape& out = spec.outputs[0].shape;
  return VisitDType(spec.outputs[0].dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<BroadcastLoopKernel<Select, T, uint8_t, T, T>>(inputs, out);
  });
}

}  // namespace replicad
