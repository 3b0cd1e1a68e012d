#ifndef REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_
#define REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/kernel.h"
#include "core/tensor/shape.h"

namespace replicad {

// Einsum's equation, parsed against its inputs' shapes, for the shape rule
// and the kernels. Each label of the equation is one dim; "..." stands for
// the dims an input has beyond its letters, right-aligned and broadcast as
// numpy does (they become labels '0' to '9'). Without "->" the output is the
// ellipsis dims, then the letters seen once, in alphabetical order.
// InvalidArgument naming the node and the equation for a malformed equation,
// an input whose rank disagrees with its term, or one label with sizes that
// differ (other than 1 within the ellipsis). Pure function; thread-safe.
struct EinsumLayout {
  std::vector<std::string> terms;  // Each input's labels, one per dim.
  std::string output;              // The output's labels, one per dim.
  std::string labels;              // Every label, output's first.
  std::vector<int64_t> sizes;      // Of each of `labels`.
};
absl::StatusOr<EinsumLayout> ParseEinsum(const KernelSpec& spec);

// For each input, the element stride of each of layout.labels in it: 0 for
// a label the input lacks or broadcasts (a dim of size 1 where the label is
// larger); a label repeated within a term (a diagonal, "ii") adds its dims'
// strides. Every output element is then the sum, over the labels not in the
// output, of the product of the inputs' elements at sum(index x stride).
std::vector<std::vector<int64_t>> EinsumLabelStrides(const EinsumLayout& layout,
                                                     const std::vector<Shape>& input_shapes);

// An Einsum of two inputs that is a batched matrix product, so a backend runs
// it as one strided product with no copy: output [batch, rows, columns]
// (row-major) = sum over depth of a[batch, rows, depth] x b[batch, depth,
// columns], each operand read at the element strides below. That holds when
// every label is batch (in all three), row (a and the output), column (b and
// the output) or contracted (a and b), each group lies contiguous and in one
// order wherever it appears, the output is batch + rows + columns, and each
// operand's dims are its labels' full sizes, each label once (maxvit_t's
// "bghid,bghjd->bghij" and "bghij,bghjd->bghid"). A group with no labels has
// size 1 and stride 0. nullopt for any other equation (a broadcast, a
// diagonal, a label summed within one input, no contracted label).
struct EinsumBatchedProduct {
  int64_t batch = 1;
  int64_t rows = 1;
  int64_t columns = 1;
  int64_t depth = 1;
  int64_t a_batch_stride = 0;
  int64_t a_row_stride = 0;
  int64_t a_depth_stride = 0;
  int64_t b_batch_stride = 0;
  int64_t b_depth_stride = 0;
  int64_t b_column_stride = 0;
};
std::optional<EinsumBatchedProduct> EinsumAsBatchedProduct(const EinsumLayout& layout,
                                                           const Shape& a, const Shape& b);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_EINSUM_ATTRIBUTES_H_
