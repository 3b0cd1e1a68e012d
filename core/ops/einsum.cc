// Einsum (einsum_attributes.h). maxvit_t exports its attention's batched
// matrix products as Einsum; the backends run those as strided batched
// products (oneDNN's matmul, cuBLAS) and any other equation as a loop.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/einsum_attributes.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

constexpr char kEllipsis[] = "...";
constexpr int kMaxEllipsisDims = 10;

// `term` with its ellipsis replaced by `rank` - letters labels '0'..'9'
// (right-aligned: the last ellipsis dim is '9'). False when it is malformed.
bool ExpandTerm(std::string term, int64_t rank, int* ellipsis_dims, std::string* out) {
  const size_t at = term.find(kEllipsis);
  std::string letters = term;
  if (at != std::string::npos) letters.erase(at, 3);
  for (char c : letters) {
    if (!absl::ascii_isalpha(c)) return false;
  }
  if (at == std::string::npos) {
    *out = term;
    return static_cast<int64_t>(term.size()) == rank;
  }
  const int64_t dims = rank - static_cast<int64_t>(letters.size());
  if (dims < 0 || dims > kMaxEllipsisDims) return false;
  *ellipsis_dims = std::max<int>(*ellipsis_dims, static_cast<int>(dims));
  std::string labels;
  for (int64_t d = 0; d < dims; ++d) labels += static_cast<char>('0' + kMaxEllipsisDims - dims + d);
  *out = term.substr(0, at) + labels + term.substr(at + 3);
  return true;
}

// The labels of an explicit output term `rhs`; InvalidArgument saying why it
// is malformed otherwise (the caller names the node and the equation).
absl::StatusOr<std::string> ExplicitOutput(const std::string& rhs, int ellipsis_dims,
                                           const std::map<char, int64_t>& sizes) {
  int unused = 0;
  std::string labels;
  if (rhs.find(kEllipsis) != std::string::npos) {
    const int64_t letters = static_cast<int64_t>(rhs.size()) - 3;
    if (!ExpandTerm(rhs, letters + ellipsis_dims, &unused, &labels)) {
      return absl::InvalidArgumentError("its output term is malformed");
    }
  } else {
    labels = rhs;
    for (char c : labels) {
      if (!absl::ascii_isalpha(c))
        return absl::InvalidArgumentError("its output term is malformed");
    }
  }
  std::set<char> distinct(labels.begin(), labels.end());
  if (distinct.size() != labels.size()) {
    return absl::InvalidArgumentError("its output names a label twice");
  }
  for (char c : labels) {
    if (sizes.count(c) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("output label '", std::string(1, c), "' is in no input"));
    }
  }
  return labels;
}

// A group of labels (batch, rows, columns or contracted) as one dim of a
// tensor whose labels are `term` (row-major dims `shape`): its size and
// stride, when the group lies contiguous there in `group`'s order.
struct CollapsedGroup {
  int64_t size = 1;
  int64_t stride = 0;
};
std::optional<CollapsedGroup> CollapseGroup(const std::string& group, const std::string& term,
                                            const Shape& shape) {
  if (group.empty()) return CollapsedGroup{};
  const size_t at = term.find(group);
  if (at == std::string::npos) return std::nullopt;
  CollapsedGroup collapsed;
  collapsed.stride = 1;
  for (size_t d = shape.size(); d-- > at + group.size();) collapsed.stride *= shape[d];
  for (size_t d = at; d < at + group.size(); ++d) collapsed.size *= shape[d];
  return collapsed;
}

// The labels of `term` that are in `group`, in term's order.
std::string InTermOrder(const std::string& term, const std::string& group) {
  std::string ordered;
  for (char label : term) {
    if (group.find(label) != std::string::npos) ordered += label;
  }
  return ordered;
}

}  // namespace

absl::StatusOr<EinsumLayout> ParseEinsum(const KernelSpec& spec) {
  if (spec.inputs.empty()) return NodeError(spec, "needs at least one input");
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, static_cast<int>(spec.inputs.size())));
  REPLICAD_ASSIGN_OR_RETURN(std::string equation, StringAttribute(spec, "equation", ""));
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  const auto malformed = [&](absl::string_view why) {
    return NodeError(spec, absl::StrCat("attribute 'equation' '", equation, "': ", why));
  };
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> given;
  for (size_t begin = 0;;) {
    const size_t comma = lhs.find(',', begin);
    given.push_back(
        lhs.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (given.size() != spec.inputs.size()) {
    return malformed(
        absl::StrCat("names ", given.size(), " inputs; the node has ", spec.inputs.size()));
  }
  EinsumLayout layout;
  std::map<char, int64_t> sizes;
  std::map<char, int> seen;
  int ellipsis_dims = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    REPLICAD_ASSIGN_OR_RETURN(TensorType input,
                              RequiredInput(spec, static_cast<int>(i), absl::StrCat("Inputs_", i)));
    if (i == 0) {
      REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "Inputs_0", input, kNumericDTypes));
    } else if (input.dtype != spec.inputs[0]->dtype) {
      return NodeError(spec, absl::StrCat("input ", i, " must have input 0's dtype ",
                                          DTypeName(spec.inputs[0]->dtype), ", received ",
                                          TensorTypeToString(input)));
    }
    std::string term;
    if (!ExpandTerm(given[i], static_cast<int64_t>(input.shape.size()), &ellipsis_dims, &term)) {
      return malformed(absl::StrCat("term '", given[i], "' does not fit input ", i, " ",
                                    TensorTypeToString(input)));
    }
    for (size_t d = 0; d < term.size(); ++d) {
      const char label = term[d];
      const int64_t size = input.shape[d];
      ++seen[label];
      auto [it, inserted] = sizes.emplace(label, size);
      if (inserted || it->second == size) continue;
      const bool broadcast = absl::ascii_isdigit(label) && (it->second == 1 || size == 1);
      if (!broadcast) {
        return malformed(absl::StrCat("label '", std::string(1, label), "' is ", it->second,
                                      " in one input and ", size, " in input ", i));
      }
      it->second = std::max(it->second, size);
    }
    layout.terms.push_back(term);
  }
  if (arrow != std::string::npos) {
    absl::StatusOr<std::string> output =
        ExplicitOutput(equation.substr(arrow + 2), ellipsis_dims, sizes);
    if (!output.ok()) return malformed(output.status().message());
    layout.output = *output;
  } else {
    for (int d = 0; d < ellipsis_dims; ++d) {
      layout.output += static_cast<char>('0' + kMaxEllipsisDims - ellipsis_dims + d);
    }
    for (const auto& [label, count] : seen) {
      if (absl::ascii_isalpha(label) && count == 1) layout.output += label;
    }
  }
  layout.labels = layout.output;
  for (const auto& [label, size] : sizes) {
    if (layout.output.find(label) == std::string::npos) layout.labels += label;
  }
  for (char label : layout.labels) layout.sizes.push_back(sizes[label]);
  return layout;
}

absl::Status InferEinsum(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(EinsumLayout layout, ParseEinsum(*spec));
  Shape shape(layout.sizes.begin(), layout.sizes.begin() + layout.output.size());
  spec->outputs = {TensorType{spec->inputs[0]->dtype, shape}};
  return absl::OkStatus();
}

std::vector<std::vector<int64_t>> EinsumLabelStrides(const EinsumLayout& layout,
                                                     const std::vector<Shape>& input_shapes) {
  std::vector<std::vector<int64_t>> all;
  for (size_t t = 0; t < layout.terms.size(); ++t) {
    const std::string& term = layout.terms[t];
    std::vector<int64_t> strides(layout.labels.size(), 0);
    int64_t stride = 1;
    for (int d = static_cast<int>(term.size()) - 1; d >= 0; --d) {
      const int64_t size = input_shapes[t][d];
      if (size != 1) strides[layout.labels.find(term[d])] += stride;
      stride *= size;
    }
    all.push_back(std::move(strides));
  }
  return all;
}

std::optional<EinsumBatchedProduct> EinsumAsBatchedProduct(const EinsumLayout& layout,
                                                           const Shape& a_shape,
                                                           const Shape& b_shape) {
  if (layout.terms.size() != 2) return std::nullopt;
  const Shape* shapes[] = {&a_shape, &b_shape};
  for (size_t t = 0; t < 2; ++t) {
    const std::string& term = layout.terms[t];
    for (size_t d = 0; d < term.size(); ++d) {
      if (term.find(term[d]) != d || (*shapes[t])[d] != layout.sizes[layout.labels.find(term[d])]) {
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
  batch = InTermOrder(y, batch);
  rows = InTermOrder(y, rows);
  columns = InTermOrder(y, columns);
  contracted = InTermOrder(a, contracted);
  if (y != batch + rows + columns || contracted.empty()) return std::nullopt;
  const std::optional<CollapsedGroup> a_batch = CollapseGroup(batch, a, a_shape),
                                      a_rows = CollapseGroup(rows, a, a_shape),
                                      a_depth = CollapseGroup(contracted, a, a_shape),
                                      b_batch = CollapseGroup(batch, b, b_shape),
                                      b_depth = CollapseGroup(contracted, b, b_shape),
                                      b_columns = CollapseGroup(columns, b, b_shape);
  if (!a_batch || !a_rows || !a_depth || !b_batch || !b_depth || !b_columns) return std::nullopt;
  EinsumBatchedProduct product;
  product.batch = a_batch->size;
  product.rows = a_rows->size;
  product.columns = b_columns->size;
  product.depth = a_depth->size;
  product.a_batch_stride = a_batch->stride;
  product.a_row_stride = a_rows->stride;
  product.a_depth_stride = a_depth->stride;
  product.b_batch_stride = b_batch->stride;
  product.b_depth_stride = b_depth->stride;
  product.b_column_stride = b_columns->stride;
  return product;
}

}  // namespace replicad
