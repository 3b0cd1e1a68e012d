// Einsum on the CPU (einsum_attributes.h). A float32 product of two inputs
// that is a batched matrix product (every label batch, row, column or
// contracted, each group lying contiguous and in one order wherever it
// appears: maxvit_t's "bghid,bghjd->bghij" and "bghij,bghjd->bghid") is
// oneDNN's matmul on strided views of the inputs, with no copy; any other
// equation is a loop over every label.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/dnnl_primitive_kernel.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/einsum_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

using dnnl::memory;

// Every output element is the sum, over the labels not in the output, of
// the product of the inputs' elements there (EinsumLabelStrides).
template <typename T>
class EinsumLoopKernel : public Kernel {
 public:
  EinsumLoopKernel(const EinsumLayout& layout, const std::vector<Shape>& input_shapes)
      : sizes_(layout.sizes),
        output_labels_(layout.output.size()),
        strides_(EinsumLabelStrides(layout, input_shapes)),
        index_(layout.sizes.size()) {
    for (size_t i = 0; i < output_labels_; ++i) outer_ *= sizes_[i];
    for (size_t i = output_labels_; i < sizes_.size(); ++i) inner_ *= sizes_[i];
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    T* out = static_cast<T*>(outputs[0]);
    std::fill(index_.begin(), index_.end(), 0);
    for (int64_t o = 0; o < outer_; ++o) {
      T sum = 0;
      for (int64_t k = 0; k < inner_; ++k) {
        T product = 1;
        for (size_t t = 0; t < strides_.size(); ++t) {
          int64_t offset = 0;
          for (size_t l = 0; l < index_.size(); ++l) offset += index_[l] * strides_[t][l];
          product = static_cast<T>(product * static_cast<const T*>(inputs[t])[offset]);
        }
        sum = static_cast<T>(sum + product);
        Advance(output_labels_, index_.size());
      }
      out[o] = sum;
      Advance(0, output_labels_);
    }
    return absl::OkStatus();
  }

 private:
  // Steps the odometer of labels [begin, end), last fastest.
  void Advance(size_t begin, size_t end) {
    for (size_t l = end; l-- > begin;) {
      if (++index_[l] < sizes_[l]) return;
      index_[l] = 0;
    }
  }

  std::vector<int64_t> sizes_;
  size_t output_labels_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
  int64_t outer_ = 1;
  int64_t inner_ = 1;
};

// The matmul of a batched matrix product (EinsumAsBatchedProduct), or
// nullopt for another equation.
std::optional<BoundPrimitive> BatchedMatMul(const KernelSpec& spec, const EinsumLayout& layout,
                                            CpuKernelContext& context) {
  if (spec.inputs.size() != 2 || spec.inputs[0]->dtype != DType::kFloat32) return std::nullopt;
  const std::optional<EinsumBatchedProduct> product =
      EinsumAsBatchedProduct(layout, spec.inputs[0]->shape, spec.inputs[1]->shape);
  if (!product.has_value()) return std::nullopt;
  const int64_t rows_n = product->rows, columns_n = product->columns, batch_n = product->batch;
  const memory::desc src(
      {batch_n, rows_n, product->depth}, memory::data_type::f32,
      memory::dims{product->a_batch_stride, product->a_row_stride, product->a_depth_stride});
  const memory::desc weights(
      {batch_n, product->depth, columns_n}, memory::data_type::f32,
      memory::dims{product->b_batch_stride, product->b_depth_stride, product->b_column_stride});
  const memory::desc dst({batch_n, rows_n, columns_n}, memory::data_type::f32,
                         memory::dims{rows_n * columns_n, columns_n, 1});
  const dnnl::matmul::desc desc(src, weights, dst);
  const dnnl::matmul::primitive_desc pd(desc, UserScratchpadAttr(), context.engine);
  BoundPrimitive primitive(context, pd, dnnl::matmul(pd));
  primitive.BindInput(DNNL_ARG_SRC, src, 0);
  primitive.BindInput(DNNL_ARG_WEIGHTS, weights, 1);
  primitive.BindOutput(DNNL_ARG_DST, dst, 0);
  return primitive;
}

}  // namespace

KernelOrStatus MakeEinsumKernel(const KernelSpec& spec, CpuKernelContext& context) {
  REPLICAD_ASSIGN_OR_RETURN(EinsumLayout layout, ParseEinsum(spec));
  if (std::optional<BoundPrimitive> matmul = BatchedMatMul(spec, layout, context)) {
    return std::make_unique<PrimitiveKernel>(context, NodeLabel(spec), std::move(*matmul));
  }
  std::vector<Shape> shapes;
  for (const std::optional<TensorType>& input : spec.inputs) shapes.push_back(input->shape);
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<EinsumLoopKernel<T>>(layout, shapes);
  });
}

}  // namespace replicad
