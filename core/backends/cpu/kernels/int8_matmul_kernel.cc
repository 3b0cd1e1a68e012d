// MatMulInteger as oneDNN's int8 matrix product (VNNI, or AMX tiles where
// the CPU has them) where the form allows it: B an int8 initializer of
// weights [K, N] with zero points of 0 (quantize_dynamic's symmetric
// weights), A uint8 or int8 of any rank with one zero point, which the graph
// may compute (DynamicQuantizeLinear's, handed to oneDNN on every run).
// A's leading dims are its rows; the int32 sums are exact either way. Every
// other MatMulInteger, and QLinearMatMul, runs the exact kernel of
// integer_product_kernels.cc.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/integer_product.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/backends/cpu/kernels/native_layout.h"
#include "core/base/status_macros.h"
#include "core/ops/op_util.h"
#include "core/ops/quantize_attributes.h"

namespace replicad {
namespace {

using dnnl::memory;

class Int8MatMulKernel : public Kernel {
 public:
  Int8MatMulKernel(CpuKernelContext& context, std::string node, BoundPrimitive product,
                   dnnl::memory zero_point, const IntegerProduct& parameters)
      : context_(context),
        node_(std::move(node)),
        product_(std::move(product)),
        zero_point_(std::move(zero_point)),
        parameters_(parameters) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const int at = parameters_.inputs.a_zero_point;
    *static_cast<int32_t*>(zero_point_.get_data_handle()) =
        EightBitAt(at >= 0 ? inputs[at] : nullptr, parameters_.a, 0);
    REPLICAD_RETURN_IF_ERROR(product_.Execute(inputs, outputs, node_));
    return WaitStream(context_, node_);
  }

 private:
  CpuKernelContext& context_;
  std::string node_;
  BoundPrimitive product_;
  dnnl::memory zero_point_;  // A's, one int32, written before every run.
  IntegerProduct parameters_;
};

std::optional<std::unique_ptr<Kernel>> OneDnnInt8MatMul(const KernelSpec& spec,
                                                        CpuKernelContext& context,
                                                        const IntegerMatMul& matmul) {
  const IntegerProduct& product = matmul.product;
  const IntegerProductInputs& at = product.inputs;
  if (product.requantized || product.b != DType::kInt8) return std::nullopt;
  const Tensor* weights = ConstantInput(spec, at.b);
  if (weights == nullptr || weights->rank() != 2) return std::nullopt;
  if (HasInput(spec, at.b_zero_point)) {
    const Tensor* zero_points = ConstantInput(spec, at.b_zero_point);
    if (zero_points == nullptr || !AllZero(*zero_points)) return std::nullopt;
  }
  const Shape& a = spec.inputs[at.a]->shape;
  const int64_t k = a.back();
  const int64_t n = weights->shape()[1];
  const int64_t rows = k == 0 ? 0 : NumElements(a) / k;
  if (rows == 0 || n == 0) return std::nullopt;
  using tag = memory::format_tag;
  const memory::desc src({rows, k}, DnnlDataType(product.a), tag::ab);
  const memory::desc plain_weights({k, n}, memory::data_type::s8, tag::ab);
  const memory::desc dst({rows, n}, memory::data_type::s32, tag::ab);
  dnnl::primitive_attr attr = UserScratchpadAttr();
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  std::optional<dnnl::matmul::primitive_desc> pd;
  try {
    const dnnl::matmul::desc desc(src, memory::desc({k, n}, memory::data_type::s8, tag::any), dst);
    pd.emplace(desc, attr, context.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;  // No implementation takes this form.
  }
  if (IsReference(*pd)) return std::nullopt;
  BoundPrimitive primitive(context, *pd, dnnl::matmul(*pd));
  primitive.BindInput(DNNL_ARG_SRC, src, at.a);
  primitive.BindFixed(DNNL_ARG_WEIGHTS,
                      PreparedWeights(context, *weights, plain_weights, pd->weights_desc()));
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  dnnl::memory zero_point(memory::desc({1}, memory::data_type::s32, tag::x), context.engine);
  primitive.BindFixed(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point);
  return std::make_unique<Int8MatMulKernel>(context, NodeLabel(spec), std::move(primitive),
                                            std::move(zero_point), product);
}

}  // namespace

KernelOrStatus MakeIntegerMatMulKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(IntegerMatMul matmul, ParseIntegerMatMul(spec));
  std::optional<std::unique_ptr<Kernel>> fast = OneDnnInt8MatMul(spec, context, matmul);
  if (fast.has_value()) return std::move(*fast);
  return MakeExactIntegerMatMulKernel(spec, matmul);
}

}  // namespace replicad
