#ifndef REPLICAD_TESTS_TESTING_KERNEL_RUNNER_H_
#define REPLICAD_TESTS_TESTING_KERNEL_RUNNER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/run_context.h"
#include "core/tensor/attributes.h"
#include "core/tensor/tensor.h"

namespace replicad::testing {

// One operator, outside any graph: what the operator tests of the training-only
// ops (which no ONNX model can name) use to compare backends.
struct KernelCall {
  std::string op_type;
  Attributes attributes;
  int opset = 17;
  // Host tensors in the op's input order; nullopt for an absent optional input.
  std::vector<std::optional<Tensor>> inputs;
  // Indices of inputs whose host values the builder also sees as
  // KernelSpec::constant_inputs (e.g. Pad's pads, Clip's bounds).
  std::vector<int> constant_inputs;
  // What Run gets (dropout's row keys, BatchNormTrain's collective,
  // OptimizerStep's update number); the default is outside training.
  RunContext context;
};

// Infers the outputs with the op's shape rule and builds the kernel on
// `device` (which form a builder chose shows in what the kernel reports, e.g.
// its workspace_bytes). Fails with the shape rule's or the builder's error.
absl::StatusOr<std::unique_ptr<Kernel>> BuildKernel(Device& device, const KernelCall& call);

// Infers the outputs with the op's shape rule, builds the kernel on `device`,
// copies the inputs to it, runs the kernel once and returns host copies of
// every output. Fails with the shape rule's, the builder's or the run's error.
absl::StatusOr<std::vector<Tensor>> RunKernel(Device& device, const KernelCall& call);

// Like RunKernel, for kernels that update some outputs in place
// (replicad.OptimizerStep): `initial_outputs` (host tensors of the inferred
// types, one per output) are copied into the output buffers before the run.
absl::StatusOr<std::vector<Tensor>> RunKernelInPlace(Device& device, const KernelCall& call,
                                                     const std::vector<Tensor>& initial_outputs);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_KERNEL_RUNNER_H_
