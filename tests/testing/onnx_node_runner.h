#ifndef REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_
#define REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device_id.h"
#include "core/tensor/tensor.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// Runs an ONNX backend test model the way replicad serves one: through the
// ONNX importer (checker, shape inference), a replica on a new slot of
// `device` (a CPU by default; cuda:0 runs it on the CUDA backend) and its
// execution plan. `inputs` are the graph inputs that are not initializers, in
// order. Graph inputs that a shape rule needs as values
// (OpDefinition::value_inputs, e.g. Reshape's `shape`) are bound as constants
// first: the backend tests feed them as inputs, where a real model holds them
// as initializers. Operators computed from their inputs' values (NonZero,
// NonMaxSuppression, If) are not bound: they run in the plan's data-dependent
// part (execution_plan.h), whose host outputs are returned.
//
// Unimplemented for what replicad does not compute (an operator, a form such
// as 3-D pooling, a node declaring more outputs than the engine computes);
// NotFound when `device` is not present; other errors as the importer, shape
// rules and kernels report them.
absl::StatusOr<std::vector<Tensor>> RunOnnxModel(const onnx::ModelProto& model,
                                                 const std::vector<Tensor>& inputs,
                                                 DeviceId device = DeviceId{});

}  // namespace replicad

#endif  // REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_
