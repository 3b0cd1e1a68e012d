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
// the product of the inputs' elements there. Strides of a label an input
// lacks, or broadcasts (size 1), are 0.
template <typename T>
class EinsumLoopKernel : public Kernel {
 public:
  EinsumLoopKernel(const EinsumLayout& layout, const std::vector<Shape>& input_shapes)
      : sizes_(layout.sizes), output_labels_(layout.output.size()), index_(layout.sizes.size()) {
    for (size_t t = 0; t < layout.terms.size(); ++t) {
      const std::string& term = layout.terms[t];
      std::vector<int64_t> strides(layout.labels.size(), 0);
      int64_t stride = 1;
      for (int d = static_cast<int>(term.size()) - 1; d >= 0; --d) {
        // A dim of size 1 where the label is larger broadcasts: stride 0.
        const int64_t size = input_shapes[t][d];
        if (size != 1) strides[layout.labels.find(term[d])] += stride;
        stride *= size;
      }
      strides_.push_back(std::move(strides));
    }
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

// A group of labels (batch, rows, columns or contracted) as one dim of a
// tensor whose labels are `term` (row-major dims `shape`): its size and
// stride, when the group lies contiguous there in `group`'s order.
struct Collapsed {
  int64_t size = 1;
  int64_t stride = 1;
};
std::optional<Collapsed> Collapse(const std::string& group, const std::string& term,
                                  const Shape& shape) {
  if (group.empty()) return Collapsed{1, 0};
  const size_t at = term.find(group);
  if (at == std::string::npos) return std::nullopt;
  Collapsed c;
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > at + group.size();) stride *= shape[d];
  c.stride = stride;
  for (size_t d = at; d < at + group.size(); ++d) c.size *= shape[d];
  return c;
}

// The matmul of a batched matrix product, or nullopt for another equation.
std::optional<BoundPrimitive> BatchedMatMul(const KernelSpec& spec, const EinsumLayout& layout,
                                            CpuKernelContext& context) {
  if (layout.terms.size() != 2 || spec.inputs[0]->dtype != DType::kFloat32) return std::nullopt;
  // Each operand's dims must be its labels' full sizes, each label once: a
  // broadcast (1 against n) or a diagonal ("ii") is the loop's.
  for (size_t t = 0; t < 2; ++t) {
    const std::string& term = layout.terms[t];
    for (size_t d = 0; d < term.size(); ++d) {
      if (term.find(term[d]) != d ||
          spec.inputs[t]->shape[d] != layout.sizes[layout.labels.find(term[d])]) {
        return std::nullopt;
      }
    }
  }
  const std::string& a = layout.terms[0];
  const std::string& b = layout.terms[1];
  const std::string& y = layout.output;
  std::string batch, rows, columns, contracted;
  for (char label : layout.labels) {
    const bool in_a = a.find(label) != std::string::npos;
    const bool in_b = b.find(label) != std::string::npos;
    const bool in_y = y.find(label) != std::string::npos;
    if (in_a && in_b && in_y) {
      batch += label;
    } else if (in_a && in_y) {
      rows += label;
    } else if (in_b && in_y) {
      columns += label;
    } else if (in_a && in_b) {
      contracted += label;
    } else {
      return std::nullopt;  // A label summed within one input.
    }
  }
  // Groups in the output's order, and the output as batch, rows, columns.
  const auto in_order = [](const std::string& term, std::string group) {
    std::string ordered;
    for (char label : term) {
      if (group.find(label) != std::string::npos) ordered += label;
    }
    return ordered;
  };
  batch = in_order(y, batch);
  rows = in_order(y, rows);
  columns = in_order(y, columns);
  contracted = in_order(a, contracted);
  if (y != batch + rows + columns || contracted.empty()) return std::nullopt;
  const Shape& sa = spec.inputs[0]->shape;
  const Shape& sb = spec.inputs[1]->shape;
  const std::optional<Collapsed> a_batch = Collapse(batch, a, sa), a_rows = Collapse(rows, a, sa),
                                 a_k = Collapse(contracted, a, sa),
                                 b_batch = Collapse(batch, b, sb),
                                 b_k = Collapse(contracted, b, sb),
                                 b_columns = Collapse(columns, b, sb);
  if (!a_batch || !a_rows || !a_k || !b_batch || !b_k || !b_columns) {
    return std::nullopt;
  }
  const int64_t rows_n = a_rows->size, columns_n = b_columns->size, batch_n = a_batch->size;
  const memory::desc src({batch_n, rows_n, a_k->size}, memory::data_type::f32,
                         memory::dims{a_batch->stride, a_rows->stride, a_k->stride});
  const memory::desc weights({batch_n, b_k->size, columns_n}, memory::data_type::f32,
                             memory::dims{b_batch->stride, b_k->stride, b_columns->stride});
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
