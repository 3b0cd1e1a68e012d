#ifndef REPLICAD_CORE_OPS_VALUE_SHAPED_H_
#define REPLICAD_CORE_OPS_VALUE_SHAPED_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/kernel.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Operators whose output shape is their result: NonZero (how many elements
// are not zero), NonMaxSuppression (how many boxes survive) and If (which
// branch runs). They have no device kernel: a plan computes them on the host
// from their inputs' values (OpDefinition::evaluate), at plan time where
// those are known and otherwise per request, in the plan's data-dependent
// part (execution_plan.h). Each takes a spec whose every present input is in
// spec.constant_inputs (host tensors) and returns its outputs; errors name
// the node, the input, the expected and the received value. Pure functions,
// thread-safe.

// NonZero: int64 [rank(X), count], the indices of X's non-zero elements in
// row-major order (a rank-0 X gives [0, 0 or 1]).
absl::StatusOr<std::vector<Tensor>> EvaluateNonZero(const KernelSpec& spec);

// NonMaxSuppression (opsets 10-11): per batch and class, the boxes whose
// score is above score_threshold, greedily by descending score (ties: the
// lower box index first), each kept unless its IoU with a box kept before
// it exceeds iou_threshold, at most max_output_boxes_per_class (absent or
// 0: none) of them; selected_indices int64 [n, 3] of (batch, class, box).
// center_point_box 0 reads boxes as two corners in either order, 1 as
// (x center, y center, width, height).
absl::StatusOr<std::vector<Tensor>> EvaluateNonMaxSuppression(const KernelSpec& spec);

// If, as if_branches.h leaves it: input 0 the condition (bool, one
// element), then the then-branch's n outputs and the else-branch's; the
// taken branch's values (shared, not copied). Only the taken branch's
// inputs need be present.
absl::StatusOr<std::vector<Tensor>> EvaluateIf(const KernelSpec& spec);
// Which branch the condition `cond` of If node `node` takes (a guard's
// condition too); InvalidArgument naming the node unless it is a bool of one
// element.
absl::StatusOr<bool> IfCondition(absl::string_view node, const Tensor& cond);

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_VALUE_SHAPED_H_
