#ifndef REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_
#define REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/tensor/attributes.h"
#include "core/tensor/tensor.h"
#include "onnx/onnx_pb.h"

namespace replicad {

// A test-only way to run small ONNX graphs (the backend test cases' one or
// few nodes) through the ops' shape rules and the CPU kernels, without
// core/model. Not a model loader: no graph checks beyond what each node needs.

// A host Tensor holding the proto's elements (raw_data, float_data or
// int64_data). InvalidArgument "unsupported dtype <ONNX name> ..." for element
// types replicad does not compute; Unimplemented for external data.
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto);

// The node's INT, FLOAT, STRING, INTS, FLOATS and TENSOR attributes;
// Unimplemented for other kinds (graphs, sparse tensors, strings lists).
absl::StatusOr<Attributes> AttributesFromProto(const onnx::NodeProto& node);

// Runs model.graph()'s nodes in their (topological) order and returns the
// graph outputs in order. `inputs` are the graph inputs that are not
// initializers, in order. Initializers and Constant outputs reach the kernels'
// specs as constant inputs, as do graph inputs consumed where a shape rule
// needs the value (Reshape's `shape`): the backend tests feed those as inputs,
// a real model holds them as initializers.
//
// Unimplemented (passed through from FindOp's absence, a shape rule or
// MakeCpuKernel) for what replicad does not compute, including a node that
// declares more outputs than its shape rule produces (MaxPool's Indices);
// other errors as the shape rules and kernels report them.
absl::StatusOr<std::vector<Tensor>> RunOnnxNodes(const onnx::ModelProto& model,
                                                 const std::vector<Tensor>& inputs,
                                                 CpuKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_TESTS_TESTING_ONNX_NODE_RUNNER_H_
