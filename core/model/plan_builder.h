#ifndef REPLICAD_CORE_MODEL_PLAN_BUILDER_H_
#define REPLICAD_CORE_MODEL_PLAN_BUILDER_H_

// Internal to core/model: the builder of an ExecutionPlan, shared by
// plan_builder.cc (nodes: types, folding, steps, the data-dependent part)
// and plan_memory.cc (where each value lives: views, in-place outputs, the
// arena and workspace). execution_plan.h is the contract.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model/execution_plan.h"

namespace replicad {

// Builds one ExecutionPlan: walks the graph once, inferring types, folding
// what is known at plan time and making a step of everything else.
class ExecutionPlan::Builder {
 public:
  // `part_reads` (second build of a plan with a data-dependent part): the
  // values the part reads, as the first build found them.
  Builder(const Graph& graph, const std::map<int, Tensor>& weights, Device& device,
          ExecutionPlan* plan, const std::vector<bool>* part_reads = nullptr)
      : graph_(graph),
        weights_(weights),
        device_(device),
        plan_(*plan),
        types_(graph.values.size()),
        host_values_(graph.values.size(), nullptr),
        first_step_(graph.values.size(), -1),
        last_step_(graph.values.size(), -1),
        is_output_(graph.values.size(), false),
        readers_(graph.values.size()),
        layouts_(graph.values.size()),
        native_bytes_(graph.values.size(), 0),
        placed_in_(graph.values.size(), -1),
        placed_at_(graph.values.size(), 0),
        in_part_(graph.values.size(), false),
        part_reads_(graph.values.size(), false),
        second_build_(part_reads != nullptr) {
    plan_.value_ptrs_.assign(graph.values.size(), nullptr);
    // A plan with a data-dependent part hands every output over from the
    // host after the part ran: none is written in place.
    if (part_reads != nullptr) {
      part_reads_ = *part_reads;
    } else {
      for (int v : graph.outputs) is_output_[v] = true;
    }
    for (const Node& node : graph.nodes) {
      for (int v : node.inputs) {
        if (v >= 0) readers_[v].push_back(&node);
      }
    }
  }

  absl::Status Build(const std::vector<Shape>& input_shapes);

  // The values the data-dependent part reads that the plan's kernels compute
  // or the caller gives (outputs included): kept for the part, row-major.
  const std::vector<bool>& part_reads() const { return part_reads_; }

  // "node 'name' (Op): <status's message>", keeping its code.
  static absl::Status NodeError(const Node& node, const absl::Status& status);

 private:
  absl::Status BindInitializersAndInputs(const std::vector<Shape>& input_shapes);

  absl::StatusOr<KernelSpec> SpecFor(const Node& node);

  // Whether `node` can only run once the request's values are known
  // (data_dependent_part.h): it reads what the part computes, (If) its
  // condition is not known now, or its shape rule reads a value that is not.
  bool NeedsRequestValues(const Node& node) const;

  // What `node`'s guards say now: one known not to hold, or whose condition
  // was never computed (its own branch was not taken), skips it; one that
  // only a request decides puts it in the part; otherwise it runs.
  enum class Guarded { kRuns, kSkipped, kByRequest };
  absl::StatusOr<Guarded> GuardsOf(const Node& node) const;

  absl::Status AddToPart(const Node& node);

  // An If whose condition is known now passes the taken branch's outputs on.
  absl::Status AddKnownIf(const Node& node);

  // The part reads its inputs after the last kernel: they live until then.
  void KeepPartInputsAlive();

  absl::Status AddNode(const Node& node);

  // A node whose every reader takes its output in the backend's own layout
  // may hand it over that way: the conversions to row-major and back are what
  // a run of convolutions (with the element-wise and pooling steps between
  // them) would otherwise spend much of its time on.
  bool KeepsNativeLayout(const Node& node) const;

  // Where `reader` runs on `v` in the layout it arrives in. Backends take any
  // layout anywhere (converting where they must), so this only says where
  // keeping one pays.
  static bool TakesNativeLayout(const Node& reader, int v);

  // A value known now: uploaded once, read by shape rules as a host tensor.
  absl::Status AddKnownValue(int v, Tensor host);

  // Every input is known: run the kernel once now and keep its outputs as
  // constants, so no request pays for it (constant folding).
  absl::Status Fold(const Node& node, const KernelSpec& spec, Kernel& kernel);

  // Fold on the device's host folding device (Device::host_folding_device):
  // its kernel reads the inputs' host values and writes host tensors, which
  // become constants like any known value.
  absl::Status FoldOnHost(const Node& node, KernelSpec spec, Device& host);

  void AddStep(const Node& node, const KernelSpec& spec, std::unique_ptr<Kernel> kernel);

  // A step whose output is nothing but input bytes (Kernel::
  // joined_input_offsets: a concatenation along channels at batch 1, a
  // Reshape) costs nothing when producers and readers share the bytes: the
  // step is dropped, and its inputs become views of its output at their
  // offsets, or, where they already are views of one buffer at the right
  // distances, the output becomes a view of that buffer. Later steps are
  // placed first, so nested concatenations land in the outermost buffer,
  // and a chain of them (a densenet block concatenates ever more of the same
  // features, each list a prefix of the last) collapses into one.
  // Returns the steps to drop (DropSteps).
  std::vector<bool> ViewsInsteadOfCopies();

  // A step that computes output 0 on top of a copy of one input's bytes
  // (Kernel::overwritable_input: a convolution onto its residual addend)
  // writes over that input where no later step reads it: output 0 becomes a
  // view at the input's place, and the kernel skips the copy. The buffer
  // the input lies in may hold other values (views: a concatenation's
  // parts, an earlier output written over its input, as along a chain of
  // residual blocks) only where every one of them was last read before
  // this step, so no bytes that are still to be read are overwritten. Runs
  // before DropSteps, while step indices still match last_step_.
  void OutputsOverDeadInputs(const std::vector<bool>& dropped);

  void DropSteps(const std::vector<bool>& dropped);

  // An input whose bytes are in a step's output, and where.
  struct Part {
    int value;
    size_t offset;
  };

  // The buffer value `v` lies in: itself, or the value it is a view of
  // (placed_in_ always names a buffer of its own, never another view).
  int RootOf(int v) const { return placed_in_[v] >= 0 ? placed_in_[v] : v; }

  // Bytes value `v` takes in its layout.
  size_t StoredBytes(int v) const { return std::max(ByteSize(*types_[v]), native_bytes_[v]); }

  // Where every part is a value some step writes, appears once and fits its
  // place: each becomes a view of `out` (or of what `out` is a view of).
  bool PlacePartsInOutput(const std::vector<Part>& parts, int out);

  // Where the parts already lie at their offsets in one buffer: `out`
  // becomes a view of it.
  bool ViewOfPlacedParts(const std::vector<Part>& parts, int out);

  // The first listing of a value a step computes is written in place;
  // inputs, constants and repeats are copied after the steps.
  absl::Status PlaceOutputs();

  // Every intermediate value gets an arena offset; a view (see
  // ViewsInsteadOfCopies) its buffer's plus its place, and the buffer
  // lives as long as all its views.
  absl::Status PlaceIntermediates();

  // Kernels run one at a time, so they share one workspace: the largest.
  // With a shared arena it follows the intermediate values there, so that
  // a slot's plans hold one workspace between them, not one each (the
  // default model's blocked convolution layouts: 3 MB a plan at 300 rows).
  // RunSteps points the kernels at it.
  absl::Status PlaceWorkspace();

  const Graph& graph_;
  const std::map<int, Tensor>& weights_;
  Device& device_;
  ExecutionPlan& plan_;
  std::vector<std::optional<TensorType>> types_;
  // Host values known now (initializers, constants, folded values), for shape rules.
  std::vector<const Tensor*> host_values_;
  // First and last step that touch each intermediate value, for the arena.
  std::vector<int> first_step_, last_step_;
  std::vector<bool> is_output_;
  std::vector<std::vector<const Node*>> readers_;
  // Per value: the backend's layout when its producer kept one (else empty)
  // and the bytes that layout needs.
  std::vector<std::string> layouts_;
  std::vector<size_t> native_bytes_;
  // Per value: the value whose buffer it is a view of (-1: none) and its
  // byte offset there (ViewsInsteadOfCopies).
  std::vector<int> placed_in_;
  std::vector<size_t> placed_at_;
  // Per value: computed by the data-dependent part; read by it (or a graph
  // output, when the plan has a part) though computed before it.
  std::vector<bool> in_part_;
  std::vector<bool> part_reads_;
  bool second_build_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_PLAN_BUILDER_H_
