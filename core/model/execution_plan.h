#ifndef REPLICAD_CORE_MODEL_EXECUTION_PLAN_H_
#define REPLICAD_CORE_MODEL_EXECUTION_PLAN_H_

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/run_context.h"
#include "core/model/data_dependent_part.h"
#include "core/model/graph.h"
#include "core/model/shared_plan_arena.h"

namespace replicad {

// A graph compiled for one device slot and one set of concrete input shapes:
// every value's type inferred, every node's kernel built, and every
// intermediate value given an offset in one arena sized by liveness (values
// whose lifetimes do not overlap share bytes). Nodes whose inputs are all
// known when the plan is made (initializers, Constants, Shape of a typed
// value, and anything computed only from those) run once at Create and
// become constants. After Create, Run allocates nothing: it is the
// per-request hot path.
//
// Nodes that can only run once the request's values are known (a detection
// model's NonZero, NonMaxSuppression, TopK of a computed K and all that reads
// them; data_dependent_part.h) make the plan data-dependent: its kernels
// compute everything else, then those nodes run on the host, and the outputs
// come back as host tensors of the shapes the request gives them (RunToHost;
// Run and RunSplit refuse such a plan).
class ExecutionPlan {
 public:
  // `weights` are the replica's device copies of graph.initializers (same
  // keys); `graph` and `weights` must outlive the plan. Shape inference and
  // kernel errors name the node. Must not be called on `device`'s stream
  // thread (it waits for the constant uploads). With `shared_arena` (host
  // devices; see shared_plan_arena.h) the intermediate values and the
  // kernels' workspace live in it, reserved at the start of every Run,
  // instead of in buffers of the plan's own.
  ~ExecutionPlan();  // Leaves the shared arena's count of plans.
  ExecutionPlan(const ExecutionPlan&) = delete;
  ExecutionPlan& operator=(const ExecutionPlan&) = delete;

  static absl::StatusOr<std::unique_ptr<ExecutionPlan>> Create(
      const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
      const std::vector<Shape>& input_shapes,
      std::shared_ptr<SharedPlanArena> shared_arena = nullptr);

  const std::vector<TensorType>& input_types() const { return input_types_; }
  // The type of every value of the graph as this plan computes it (nullopt
  // for values no node produces), by index: for a caller that needs types
  // the model does not declare (ONNX's shape inference stops at shapes that
  // depend on values; the plan computes them).
  const std::vector<std::optional<TensorType>>& value_types() const { return value_types_; }
  // A data-dependent plan's outputs computed by its part have the model's
  // declared types (kAnyDim where ONNX could not tell the dim).
  const std::vector<TensorType>& output_types() const { return output_types_; }
  bool data_dependent() const { return part_ != nullptr; }
  // Nodes in the data-dependent part (0 without one).
  size_t data_dependent_nodes() const { return part_ != nullptr ? part_->node_count() : 0; }
  // Bytes of the intermediate-value arena, and what they would be without reuse.
  size_t arena_bytes() const { return arena_bytes_; }
  size_t unshared_bytes() const { return unshared_bytes_; }
  // Bytes of the scratch space the kernels share (e.g. reordered layouts).
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Device memory the plan holds by itself (its arena and workspace, unless
  // shared, and its constants), and what it needs of the shared arena while
  // it runs (0 without one).
  size_t own_bytes() const;
  size_t shared_bytes() const { return shared_bytes_; }
  // Kernels run per request (folded nodes are not among them, nor
  // concatenations whose inputs are written in place).
  size_t step_count() const { return steps_.size(); }
  // The node step `step` (< step_count()) computes: with Proceed, which is
  // asked before each step in order, what a profiler times.
  const Node& step_node(size_t step) const { return *steps_[step].node; }
  // Steps that write their output over an input no later step reads
  // (Kernel::overwritable_input), skipping the copy of its bytes.
  size_t overwriting_steps() const { return overwriting_steps_; }
  // Whether every kernel's work may be recorded and replayed
  // (Kernel::replayable): a CUDA graph of the plan's run.
  bool replayable() const;

  // Runs the graph: `inputs` and `outputs` are device pointers in graph
  // order, with input_types() and output_types(). Not reentrant: call it
  // from the device's stream thread, one call at a time (with a shared
  // arena: one call of any of the arena's plans at a time). The kernels get
  // a default RunContext (inference: no training step; see run_context.h).
  absl::Status Run(const void* const* inputs, void* const* outputs);

  // Asked on the stream thread before each kernel runs (on a device that
  // runs kernels asynchronously: before it is enqueued), whether the run is
  // still wanted. A status other than OK stops the run there, before that
  // kernel, and is returned with the kernel reached appended ("stopped
  // before kernel 3 of 40 (node 'conv2', Conv)"): a cancelled or expired request
  // costs at most one kernel more. The outputs are then partly written; the
  // plan runs again as before. Called once per kernel: keep it cheap (an
  // atomic load, a clock read).
  using Proceed = absl::FunctionRef<absl::Status()>;
  // Run, asking `proceed` between kernels.
  absl::Status Run(const void* const* inputs, void* const* outputs, Proceed proceed);
  // Run with `context` for every kernel (a training step's, as a pipeline's
  // part runs its rows of one; it must outlive the call), asking `proceed`
  // (optional) between kernels.
  absl::Status Run(const RunContext& context, const void* const* inputs, void* const* outputs,
                   const Proceed* proceed = nullptr);
  // Runs a data-dependent plan: `inputs` as Run's; `outputs` gets the
  // graph's outputs as host tensors of their own (the plan keeps none).
  // `proceed` (optional) is asked before every kernel and every node of the
  // part. Same thread rules as Run. FailedPrecondition for a plan that is
  // not data-dependent.
  absl::Status RunToHost(const void* const* inputs, std::vector<Tensor>* outputs,
                         const Proceed* proceed = nullptr);

  // Run as a training step: every kernel gets `context` (the trainer's, for
  // this slot and step; it must outlive the call), and the kernels of the
  // graph's nodes before `boundary` (a node of the graph; e.g. a training
  // graph's forward pass before its backward pass) are timed:
  // *seconds_before gets that time.
  absl::Status RunSplit(const RunContext& context, const void* const* inputs, void* const* outputs,
                        const Node* boundary, double* seconds_before);

  // Called on the stream thread once the work that writes graph output
  // `output` has been issued (complete in stream order, not necessarily yet
  // on the device), so a trainer can start reducing a gradient while the rest
  // of the backward pass runs. Outputs become ready in the order of their
  // producers' steps (graph order), outputs copied into place after the last
  // step last, so every plan of one graph reports them in the same order. An
  // error stops the run and is returned.
  using OutputReady = absl::FunctionRef<absl::Status(int output)>;
  // RunSplit, reporting each output as it becomes ready.
  absl::Status RunSplit(const RunContext& context, const void* const* inputs, void* const* outputs,
                        const Node* boundary, double* seconds_before, OutputReady on_ready);

 private:
  class Builder;
  ExecutionPlan() = default;
  // Steps from index `split` on start after *split_time is taken (when set);
  // `proceed` (when set) is asked before each step.
  absl::Status RunSteps(const RunContext& context, const void* const* inputs, void* const* outputs,
                        size_t split, std::chrono::steady_clock::time_point* split_time,
                        const OutputReady* on_ready, const Proceed* proceed = nullptr);

  struct Step {
    std::unique_ptr<Kernel> kernel;
    size_t args_begin = 0;  // Into arg_values_/arg_ptrs_: inputs, then outputs.
    size_t num_inputs = 0;
    size_t num_outputs = 0;
    const Node* node = nullptr;
  };
  // A graph output that no node of its own writes (it is a graph input, a
  // constant, or listed twice), copied into place after the steps.
  struct OutputCopy {
    int value;
    int output;
    size_t bytes;
  };

  Device* device_ = nullptr;
  std::vector<TensorType> input_types_;
  std::vector<std::optional<TensorType>> value_types_;
  std::vector<TensorType> output_types_;
  std::vector<int> input_values_;
  std::vector<int> output_values_;  // -1 where the output is served by an OutputCopy.
  // The data-dependent part (null without one), the values it reads that
  // the steps compute or the caller gives, and the Identity nodes that pass
  // on the outputs of If branches chosen at plan time (steps point at them).
  std::unique_ptr<DataDependentPart> part_;
  std::vector<int> part_inputs_;
  std::vector<int> graph_outputs_;  // With a part: the value of each output.
  std::deque<Node> passed_on_;
  std::vector<Step> steps_;
  std::vector<OutputCopy> output_copies_;
  // Per step: the graph outputs it writes in place (for OutputReady).
  std::vector<std::vector<int>> outputs_written_;
  std::vector<int> arg_values_;    // Value index per kernel argument (-1: absent).
  std::vector<void*> arg_ptrs_;    // Resolved per Run; sized once.
  std::vector<void*> value_ptrs_;  // Per value; fixed ones set at Create.
  std::shared_ptr<Buffer> arena_;  // Null with a shared arena.
  std::shared_ptr<SharedPlanArena> shared_arena_;
  bool counted_in_arena_ = false;  // shared_arena_->AddPlan(shared_bytes_) was called.
  // With a shared arena: each intermediate value's offset in it.
  std::vector<std::pair<int, size_t>> arena_offsets_;
  std::shared_ptr<Buffer> workspace_;  // Shared scratch of the kernels; null with a shared arena.
  // With a shared arena: the bytes this plan counts there (values, then the
  // workspace from workspace_offset_), and where the kernels' workspace
  // points now (re-pointed when the arena moves).
  size_t shared_bytes_ = 0;
  size_t workspace_offset_ = 0;
  char* workspace_base_ = nullptr;
  std::deque<Tensor> host_constants_;  // Constant outputs, for shape rules and kernels.
  std::vector<std::shared_ptr<Buffer>> constants_;  // Their device copies.
  size_t arena_bytes_ = 0;
  size_t workspace_bytes_ = 0;
  size_t overwriting_steps_ = 0;
  size_t unshared_bytes_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_EXECUTION_PLAN_H_
