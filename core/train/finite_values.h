#ifndef REPLICAD_CORE_TRAIN_FINITE_VALUES_H_
#define REPLICAD_CORE_TRAIN_FINITE_VALUES_H_

#include <string>

#include "absl/status/status.h"
#include "core/tensor/tensor.h"
#include "core/train/optimizer.h"
#include "core/train/training_graph.h"

namespace replicad {

// What a training step refuses before it runs, so that one bad batch cannot
// make every weight NaN for good: a NaN or an infinity among its inputs or
// targets, or probability targets that are not distributions. Each check
// returns InvalidArgument naming `field`, the row-major index of the first
// bad element and its value; OK for tensors it does not apply to (not
// float32, or not in host memory). Thread-compatible; reads only.

// Every element of a float32 `tensor` is finite.
absl::Status CheckFiniteValues(const Tensor& tensor, const std::string& field);

// Whether every one of the `count` floats at `values` is finite: the
// trainers' check of a summed gradient (on the host, or copied from a device).
bool AllFinite(const float* values, int64_t count);

// Every element of a float32 [N, C] `targets` is in [0, 1] and each row sums
// to 1 within `tolerance` (absolute).
absl::Status CheckProbabilityRows(const Tensor& targets, const std::string& field,
                                  double tolerance = 1e-3);

// Why a step that ran is not applied, in the words every trainer answers
// with: its loss is not finite; the mean gradient of parameter `parameter`
// (index into training.parameters) is not; the update would make an element
// not finite (Optimizer::FirstNonFiniteUpdate's `bad`).
std::string NonFiniteLossReason(double loss);
std::string NonFiniteGradientReason(const TrainingGraph& training, size_t parameter);
std::string NonFiniteUpdateReason(const TrainingGraph& training, const Optimizer& optimizer,
                                  const Optimizer::NonFiniteUpdate& bad);
// A step refused for `why` (NonFiniteSteps::kRefuse): InvalidArgument
// saying that nothing changed.
absl::Status StepNotApplied(const std::string& why);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_FINITE_VALUES_H_
