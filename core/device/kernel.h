#ifndef REPLICAD_CORE_DEVICE_KERNEL_H_
#define REPLICAD_CORE_DEVICE_KERNEL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/device/run_context.h"
#include "core/tensor/attributes.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace replicad {

// One graph node with concrete types: what shape inference reads and what a
// backend needs to build the node's kernel. Shape inference fills `outputs`.
struct KernelSpec {
  std::string op_type;                     // ONNX op type, e.g. "Conv".
  std::string node_name;                   // For messages; may be empty.
  int opset = 17;                          // The model's opset for the default ONNX domain.
  const Attributes* attributes = nullptr;  // Never null; owned by the graph.
  // One entry per declared input; nullopt where an optional input is absent.
  std::vector<std::optional<TensorType>> inputs;
  // Host values of inputs known when the plan is made (initializers, Constant
  // outputs), else nullptr. Same length as `inputs`.
  std::vector<const Tensor*> constant_inputs;
  std::vector<TensorType> outputs;
  // How many outputs the node names, trailing optional ones included (Split
  // without sizes makes that many); 0 where no node stands behind the spec.
  int declared_outputs = 0;

  // Native layouts. A backend may keep a value in a layout of its own (e.g.
  // oneDNN's blocked channels) between two of its kernels, saving the
  // conversions to and from row-major. Where `native_output` is set, the
  // output's readers all take any layout the producer reports through
  // Kernel::native_output_layout; they then find the layout in
  // `input_layouts` (empty string: row-major). Opaque outside the backend; a
  // backend that reports layouts takes them in every kernel.
  bool native_output = false;
  std::vector<std::string> input_layouts;  // Empty, or one per input.
};

// A node's computation for the exact types of its KernelSpec, built once per
// execution plan and run for every request of that plan. Kernels keep their
// backend primitives; Run must not allocate memory.
class Kernel {
 public:
  virtual ~Kernel() = default;

  // Reads `inputs` and writes `outputs`: device pointers in the spec's order
  // (nullptr for an absent optional input), laid out row-major with the
  // spec's types unless the spec's native layouts say otherwise. Runs on the
  // owning device's stream thread, one call at a time, and returns once its
  // work is issued there. `context` (run_context.h: the training step, or the
  // defaults outside training) is valid only until Run returns: work left to
  // run later takes copies of what it reads. Outputs never alias inputs,
  // except output 0 and the input that overwritable_input names, which may
  // be one buffer.
  virtual absl::Status Run(const RunContext& context, const void* const* inputs,
                           void* const* outputs) = 0;

  // Scratch bytes Run needs besides its inputs and outputs (e.g. reordered
  // copies of them). The plan hands every kernel the same workspace, since
  // its kernels run one at a time, through SetWorkspace before the first Run.
  virtual size_t workspace_bytes() const { return 0; }
  virtual void SetWorkspace(void* workspace) {}

  // Whether the work one Run issues may be recorded and replayed as it was
  // (Device::Record): false for a kernel whose launches carry values of its
  // RunContext (a training step's seed or update number), which a replay
  // would repeat, and for one that checks a request's values on the host
  // before it launches (indices that are data), which a replay would skip.
  virtual bool replayable() const { return true; }

  // With KernelSpec::native_output: the layout output 0 is written in
  // (empty: row-major after all) and the bytes it needs, which may exceed
  // the row-major size (blocked layouts pad channels).
  virtual std::string native_output_layout() const { return {}; }
  virtual size_t native_output_bytes() const { return 0; }

  // Where output 0 is nothing but inputs' bytes back to back, input i at
  // byte offset [i] (a concatenation whose every input is one contiguous
  // block of the output, in the layouts they arrive in; a copy, e.g.
  // Reshape, is its data input at offset 0): one entry per input, kNotJoined
  // for an input none of whose bytes are in the output (Reshape's shape), so
  // that the plan may have the producers write there, or the readers read
  // there, and skip Run. Empty otherwise.
  static constexpr size_t kNotJoined = ~size_t{0};
  virtual std::vector<size_t> joined_input_offsets() const { return {}; }

  // Where output 0 starts as a copy of input i's bytes, in the layout both
  // have, and is computed on top of them (a convolution whose fused sum
  // accumulates onto its residual addend): i, so that where no later step
  // reads that input the plan may hand Run one buffer for both, and Run then
  // skips the copy. kNoInput otherwise.
  static constexpr int kNoInput = -1;
  virtual int overwritable_input() const { return kNoInput; }
};

// joined_input_offsets of a kernel whose output 0 is a copy of input 0.
inline std::vector<size_t> OutputIsInputZero(size_t num_inputs) {
  std::vector<size_t> offsets(num_inputs, Kernel::kNotJoined);
  if (num_inputs > 0) offsets[0] = 0;
  return offsets;
}

// The kernel of a node whose outputs have no elements: there is nothing to
// compute, and libraries differ in how they take zero-sized tensors, so
// backends return this instead of asking them.
class EmptyKernel : public Kernel {
 public:
  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    return absl::OkStatus();
  }
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_KERNEL_H_
