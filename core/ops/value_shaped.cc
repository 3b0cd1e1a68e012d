#include "core/ops/value_shaped.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_util.h"
#include "core/ops/shape_rules.h"

namespace replicad {
namespace {

// Input `index`'s host value (the caller's contract), checked present.
absl::StatusOr<const Tensor*> ValueOf(const KernelSpec& spec, int index, const char* name) {
  if (!HasInput(spec, index) || ConstantInput(spec, index) == nullptr) {
    return NodeError(spec, absl::StrCat("input ", index, " '", name,
                                        "' has no value to compute the output from"));
  }
  return ConstantInput(spec, index);
}

// Flat indices of the non-zero elements of `x`, of element type T.
template <typename T>
std::vector<int64_t> NonZeroPositions(const Tensor& x) {
  const T* data = x.data<T>();
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (data[i] != T{0}) positions.push_back(i);
  }
  return positions;
}

// A scalar input of NonMaxSuppression: its one element, or `fallback` when absent.
template <typename T>
absl::StatusOr<T> ScalarInput(const KernelSpec& spec, int index, const char* name, DType dtype,
                              T fallback) {
  if (!HasInput(spec, index)) return fallback;
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* t, ValueOf(spec, index, name));
  if (t->dtype() != dtype || t->num_elements() != 1) {
    return NodeError(spec,
                     absl::StrCat("input ", index, " '", name, "' must be one ", DTypeName(dtype),
                                  ", received ", TensorTypeToString(t->type())));
  }
  return t->data<T>()[0];
}

struct Corners {
  float y_min, x_min, y_max, x_max;
};

Corners ReadBox(const float* b, bool center_point) {
  if (center_point) {  // (x center, y center, width, height)
    const float half_w = b[2] / 2, half_h = b[3] / 2;
    return {b[1] - half_h, b[0] - half_w, b[1] + half_h, b[0] + half_w};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// Whether two boxes overlap by more than `threshold` (intersection over
// union); boxes of no area overlap nothing.
bool Overlaps(const Corners& a, const Corners& b, float threshold) {
  const float w = std::min(a.x_max, b.x_max) - std::max(a.x_min, b.x_min);
  const float h = std::min(a.y_max, b.y_max) - std::max(a.y_min, b.y_min);
  if (w <= 0 || h <= 0) return false;
  const float intersection = w * h;
  const float area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const float area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const float union_area = area_a + area_b - intersection;
  if (area_a <= 0 || area_b <= 0 || union_area <= 0) return false;
  return intersection / union_area > threshold;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> EvaluateNonZero(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 1, 1));
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* x, ValueOf(spec, 0, "X"));
  REPLICAD_RETURN_IF_ERROR(CheckInputDType(spec, 0, "X", x->type(), kNumericOrBoolDTypes));
  std::vector<int64_t> positions;
  switch (x->dtype()) {
    case DType::kFloat32:
      positions = NonZeroPositions<float>(*x);
      break;
    case DType::kInt64:
      positions = NonZeroPositions<int64_t>(*x);
      break;
    case DType::kInt32:
      positions = NonZeroPositions<int32_t>(*x);
      break;
    case DType::kInt8:
      positions = NonZeroPositions<int8_t>(*x);
      break;
    default:  // uint8 and bool: one byte each.
      positions = NonZeroPositions<uint8_t>(*x);
      break;
  }
  const int64_t rank = x->rank();
  const int64_t count = static_cast<int64_t>(positions.size());
  Tensor out = Tensor::Host(DType::kInt64, {rank, count});
  int64_t* indices = out.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = positions[i];
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t dim = x->shape()[d];
      indices[d * count + i] = rest % dim;
      rest /= dim;
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

absl::StatusOr<std::vector<Tensor>> EvaluateNonMaxSuppression(const KernelSpec& spec) {
  REPLICAD_RETURN_IF_ERROR(CheckInputCount(spec, 2, 5));
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* boxes, ValueOf(spec, 0, "boxes"));
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* scores, ValueOf(spec, 1, "scores"));
  if (boxes->dtype() != DType::kFloat32 || boxes->rank() != 3 || boxes->shape()[2] != 4) {
    return NodeError(spec, absl::StrCat("input 0 'boxes' must be float32 [batches, boxes, 4], "
                                        "received ",
                                        TensorTypeToString(boxes->type())));
  }
  const int64_t batches = boxes->shape()[0], count = boxes->shape()[1];
  if (scores->dtype() != DType::kFloat32 || scores->rank() != 3 || scores->shape()[0] != batches ||
      scores->shape()[2] != count) {
    return NodeError(
        spec, absl::StrCat("input 1 'scores' must be float32 [", batches, ", classes, ", count,
                           "] (as boxes), received ", TensorTypeToString(scores->type())));
  }
  REPLICAD_ASSIGN_OR_RETURN(
      int64_t max_per_class,
      ScalarInput<int64_t>(spec, 2, "max_output_boxes_per_class", DType::kInt64, 0));
  REPLICAD_ASSIGN_OR_RETURN(float iou_threshold,
                            ScalarInput<float>(spec, 3, "iou_threshold", DType::kFloat32, 0.0f));
  const bool thresholded = HasInput(spec, 4);
  REPLICAD_ASSIGN_OR_RETURN(float score_threshold,
                            ScalarInput<float>(spec, 4, "score_threshold", DType::kFloat32, 0.0f));
  REPLICAD_ASSIGN_OR_RETURN(int64_t center_point, IntAttribute(spec, "center_point_box", 0));
  if (center_point != 0 && center_point != 1) {
    return NodeError(
        spec, absl::StrCat("attribute center_point_box must be 0 or 1, received ", center_point));
  }
  if (iou_threshold < 0 || iou_threshold > 1) {
    return NodeError(
        spec, absl::StrCat("input 3 'iou_threshold' must be in [0, 1], received ", iou_threshold));
  }
  const int64_t classes = scores->shape()[1];
  std::vector<int64_t> selected;  // (batch, class, box) triples.
  std::vector<int64_t> order;
  std::vector<Corners> kept;
  for (int64_t b = 0; b < batches && max_per_class > 0; ++b) {
    const float* box_data = boxes->data<float>() + b * count * 4;
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores->data<float>() + (b * classes + c) * count;
      order.clear();
      for (int64_t i = 0; i < count; ++i) {
        // NaN scores are never above a threshold, and sort nowhere: left out.
        if (std::isnan(s[i]) || (thresholded && !(s[i] > score_threshold))) continue;
        order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [s](int64_t x, int64_t y) { return s[x] > s[y]; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        const Corners box = ReadBox(box_data + i * 4, center_point == 1);
        if (std::any_of(kept.begin(), kept.end(),
                        [&](const Corners& k) { return Overlaps(k, box, iou_threshold); })) {
          continue;
        }
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  const int64_t n = static_cast<int64_t>(selected.size() / 3);
  Tensor out = Tensor::Host(DType::kInt64, {n, 3});
  if (n > 0) std::memcpy(out.raw_data(), selected.data(), selected.size() * sizeof(int64_t));
  return std::vector<Tensor>{std::move(out)};
}

absl::StatusOr<bool> IfCondition(absl::string_view node, const Tensor& cond) {
  if (cond.dtype() != DType::kBool || cond.num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "If node '", node, "': input 0 'cond' must be a bool of one element, received ",
        TensorTypeToString(cond.type())));
  }
  return cond.data<uint8_t>()[0] != 0;
}

absl::StatusOr<std::vector<Tensor>> EvaluateIf(const KernelSpec& spec) {
  const size_t n = spec.inputs.size() / 2;
  if (spec.inputs.size() != 2 * n + 1 || static_cast<size_t>(spec.declared_outputs) != n) {
    return NodeError(
        spec, absl::StrCat("expected the condition and 2 x ", spec.declared_outputs,
                           " branch outputs as inputs, received ", spec.inputs.size(), " inputs"));
  }
  REPLICAD_ASSIGN_OR_RETURN(const Tensor* cond, ValueOf(spec, 0, "cond"));
  REPLICAD_ASSIGN_OR_RETURN(bool then_taken, IfCondition(spec.node_name, *cond));
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < n; ++o) {
    const int index = static_cast<int>(1 + o + (then_taken ? 0 : n));
    REPLICAD_ASSIGN_OR_RETURN(const Tensor* value,
                              ValueOf(spec, index, then_taken ? "then output" : "else output"));
    outputs.push_back(*value);
  }
  return outputs;
}

// The shape rules of these ops evaluate them: plans never ask for one
// without the values (OpDefinition::evaluate goes first), but kernel-spec
// checks and tools that only infer find the same types.
absl::Status InferByEvaluating(KernelSpec* spec) {
  REPLICAD_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, FindOp(spec->op_type)->evaluate(*spec));
  spec->outputs.clear();
  for (const Tensor& t : outputs) spec->outputs.push_back(t.type());
  return absl::OkStatus();
}

}  // namespace replicad
